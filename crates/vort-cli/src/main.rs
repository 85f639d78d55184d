//! `vort`: the command-line tool of the VORT workspace (thin subcommands over the crates).
//!
//! Exit status: 0 on success; 2 for bad arguments (unparsable values, values outside their
//! domain, unknown subcommands) with one line `error: ...` on stderr; 1 when an output cannot
//! be written. A panic is reported as one `error:` line too, never a backtrace.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod books_model;
mod data;
mod error;
mod experiment;
mod generate;
mod generate_bench;
mod kernel;
mod layer;
mod output;
mod progress;
mod retrieval;
mod stream;
mod theory;
mod train_bench;
mod whole_books;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// VORT: power-law memory as a certified sum of exponentials (arXiv 2605.08966).
///
/// Exit status: 0 success, 2 bad arguments (one `error:` line on stderr), 1 output not written.
#[derive(Debug, Parser)]
#[command(name = "vort", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The Grünwald–Letnikov kernel w_j(a) and its sums of exponentials.
    #[command(subcommand)]
    Kernel(kernel::KernelCommand),
    /// Numerical checks of the paper's theorems: DIR/report.md plus PNG plots.
    Theory(theory::TheoryArgs),
    /// The layer's retention core on one head read from a safetensors file.
    ///
    /// For every position t (0-based, causal, lag 0 included):
    ///
    ///   y_t = Σ_{i<=t} K_i(t-i) (φq_t·φk_i) v_i / (Σ_{i<=t} K_i(t-i) (φq_t·φk_i) + eps_den)
    ///
    ///   K_i(j) = w_j(max(α_i, δ)), w_0 = 1, w_j(a) = w_(j-1)(a) (j - 1 + a) / j
    ///
    /// eps_den = 1e-6; orders below δ are clamped to δ and their count is printed. naive
    /// computes this exactly (f64, O(T²)); recurrent (f64) and chunked (f32) use the certified
    /// SOE of w_j, within --eps on lags 1..=H. Banks memory uses the linear split between
    /// the two bank orders around α_i instead of w_j(α_i). A NumPy version:
    /// docs/retention_reference.py.
    #[command(verbatim_doc_comment)]
    Retention(layer::RetentionArgs),
    /// Benchmarks, as ratios against a baseline measured in the same run.
    #[command(subcommand)]
    Bench(layer::BenchCommand),
    /// Train one model (MQAR, books, or the superseded sparse tasks), with checkpoints
    /// (--resume continues a run).
    Train(experiment::TrainArgs),
    /// Evaluate a trained run: accuracy by lag bucket.
    Eval(experiment::EvalArgs),
    /// Write a trained run's weights to one file (parameters, config and step; no optimizer
    /// state): what to share, and what `eval` and `generate` take with --run FILE.
    Export(experiment::ExportArgs),
    /// Sample bytes from a trained books model (streamed: flat memory at any length).
    Generate(generate::GenerateArgs),
    /// Does a books model retrieve? Bits per byte of a repeated random string by copy, and of
    /// made-up names used again 1K to 1M bytes later, each streamed with the state carried.
    Retrieval(retrieval::RetrievalArgs),
    /// Reproduce an experiment with every memory and write its report: recall (MQAR, the
    /// main one), books, or the superseded synthetic tasks.
    Reproduce(experiment::ReproduceArgs),
    /// Fetch and prepare real data: `vort data fetch books` (pinned, checksum-verified).
    #[command(subcommand)]
    Data(data::DataCommand),
}

fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Kernel(cmd) => kernel::run(cmd),
        Command::Theory(args) => theory::run(args),
        Command::Retention(args) => layer::run_retention(args),
        Command::Bench(cmd) => layer::run_bench(cmd),
        Command::Train(args) => experiment::run_train(args),
        Command::Eval(args) => experiment::run_eval(args),
        Command::Export(args) => experiment::run_export(args),
        Command::Reproduce(args) => experiment::run_reproduce(args),
        Command::Generate(args) => generate::run(args),
        Command::Retrieval(args) => retrieval::run(args),
        Command::Data(cmd) => data::run(cmd),
    }
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_t` (the 16th option in both the v2 and
/// v3 headers vendored by libmimalloc-sys 0.1.49, which names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory in the allocator instead of returning it to the OS (purge delay -1),
/// unless the user set `MIMALLOC_PURGE_DELAY`. Every candle op allocates fresh tensors; with
/// purging, the kernel faulted and zeroed those pages again on every step: `perf` put 28% of a
/// books-d256 training step's CPU time in `clear_page_erms`, and no purging raised that
/// model's tokens/s by ~25% (interleaved runs, `results/bench/train.md`). The resident size
/// stays at the process's high-water mark instead of shrinking between steps.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one integer option of the global allocator; any value is valid
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_error(e),
    };
    // certified node tables are built once per recipe and kept (issue #43: generate's first
    // byte); VORT_CACHE_DIR="" turns the disk copy off
    vort::nodes::cache::use_disk(vort::nodes::cache::default_dir());
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `--help` and `--version` print normally (exit 0); every other parse error becomes the
/// first line of clap's message (which starts with `error:`) and exit status 2.
fn clap_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            eprintln!("error: a subcommand is required (see 'vort --help')");
            ExitCode::from(2)
        }
        _ => {
            // clap's first paragraph is the error (a list of missing arguments spans several
            // lines); the rest is usage and tips.
            let text = e.to_string();
            let first = one_line(text.trim_start().split("\n\n").next().unwrap_or(""));
            let first = if first.is_empty() {
                "invalid arguments".to_string()
            } else {
                first
            };
            if first.starts_with("error:") {
                eprintln!("{first}");
            } else {
                eprintln!("error: {first}");
            }
            ExitCode::from(2)
        }
    }
}

/// Joins a multi-line message into one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Replaces the default panic message and backtrace with one `error:` line (exit status 101).
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!(
            "error: internal error{at}: {} (please report this)",
            one_line(&msg)
        );
    }));
}
