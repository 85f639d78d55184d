//! `vort retention` (the layer's core on a safetensors file), `vort bench layer`, and the
//! dispatch of `vort bench stream` (in `stream.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use vort::retention::checked::{retention_from_safetensors, Form, RetentionOpts};
use vort::Mixer;
use vort::{NodeMode, VortError};
use vort_cli::bench::layer::{
    self as bench, CrossoverResult, DecodeResult, LayerBenchOpts, LayerBenchResult,
};

use crate::args::{parse_count, parse_real};
use crate::error::CliError;
use crate::output::{emit, emit_json};

/// Bad inputs (files, tensors, orders, tolerances) are exit status 2; candle failures are 1.
impl From<VortError> for CliError {
    fn from(e: VortError) -> Self {
        if e.is_input_error() {
            CliError::Usage(e.to_string())
        } else {
            CliError::Io(e.to_string())
        }
    }
}

#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// safetensors file with f32 `phi_q` [T, F], `phi_k` [T, F] (nonnegative), `v` [T, D],
    /// `alpha` \[T\] in [0, 1] (one head, no batch).
    #[arg(long, value_name = "IN.safetensors")]
    input: PathBuf,
    /// Where to write `y` [T, D] (f32).
    #[arg(long, value_name = "OUT.safetensors")]
    output: PathBuf,
    /// naive (the formula with the exact kernel: GL weights for shared memory, the bank split
    /// for banks; O(T²), f64, T <= 16,384), recurrent (one token at a time, f64), chunked (the
    /// training form in plain candle ops, f32) or fused (the fused op the models train with,
    /// f32); the last three use the certified SOE. The library's names exact_gl (for naive),
    /// naive_recurrent, chunk and fused_chunk are accepted too.
    #[arg(long, default_value = "chunked", value_parser = parse_form)]
    form: Form,
    /// banks (K orders on [δ, 1], the paper) or shared (one node set, continuous α).
    #[arg(long, alias = "memory", default_value = "shared", value_parser = parse_mode)]
    mode: NodeMode,
    /// SOE relative tolerance, certified on lags 1..=H.
    #[arg(long, default_value = "1e-4", value_parser = parse_real, allow_negative_numbers = true)]
    eps: f64,
    /// Certified horizon H of the node table (default: T of the input). An input with T > H is
    /// refused (exit 2): past H the SOE is no longer the GL kernel to eps.
    #[arg(long, value_parser = parse_count)]
    horizon: Option<u64>,
    /// Number of banks K >= 2 (banks memory).
    #[arg(long, default_value = "4", value_parser = parse_count)]
    banks: u64,
    /// Smallest order δ; orders below it are clamped to it (the count is reported).
    #[arg(long, default_value = "0.1", value_parser = parse_real, allow_negative_numbers = true)]
    delta: f64,
    /// Chunk length of the chunked forms (chunked, fused).
    #[arg(long, default_value = "64", value_parser = parse_count)]
    chunk: u64,
    /// Use the memory of a trained VORT model: a run directory or a file of `vort export`.
    /// Its config sets --mode, --banks, --delta, --eps, --horizon (the
    /// model's, or its sequence length), --chunk and eps_den, so y is that model's retention
    /// core on this input; those flags may not be given with it. The orders α still come from
    /// the input, not from the model's router.
    #[arg(
        long,
        value_name = "DIR|FILE",
        conflicts_with_all = ["mode", "eps", "horizon", "banks", "delta", "chunk"]
    )]
    model: Option<PathBuf>,
    /// Print the run's summary as JSON.
    #[arg(long)]
    json: bool,
}

/// The retention settings of the trained model at `path` (see `--model`): refused (exit 2)
/// unless its mixer is VORT.
fn model_opts(path: &Path, form: Form) -> Result<RetentionOpts, CliError> {
    crate::experiment::check_trained_path(path, "--model takes a trained VORT model")?;
    let not_vort = |mixer: &Mixer| {
        CliError::Usage(format!(
            "--model {}: its mixer is {mixer}, not VORT; `vort retention` computes VORT's \
             retention core only",
            path.display(),
        ))
    };
    // a run directory's mixer first, from its config.toml alone: a run of another mixer is
    // refused as such before its checkpoint is read
    if path.is_dir() {
        let cfg =
            vort_lab::train::RunConfig::load(&vort_lab::train::RunDir::new(path).config_path())?;
        if !matches!(cfg.model.mixer, Mixer::Vort { .. }) {
            return Err(not_vort(&cfg.model.mixer));
        }
    }
    // then the one loader's checks (config, memory estimate, tensors)
    let cfg = vort_lab::train::eval::trained_config(path)?;
    let m = &cfg.model;
    let Mixer::Vort { nodes, .. } = m.mixer.resolved(cfg.task.seq_len) else {
        return Err(not_vort(&m.mixer));
    };
    Ok(RetentionOpts {
        form,
        mode: nodes.mode,
        eps: nodes.eps,
        horizon: Some(nodes.horizon),
        banks: nodes.banks,
        delta: nodes.delta,
        chunk: m.chunk,
        eps_den: m.eps_den,
    })
}

fn parse_form(s: &str) -> Result<Form, String> {
    s.parse().map_err(|e: VortError| e.to_string())
}

fn parse_mode(s: &str) -> Result<NodeMode, String> {
    s.parse().map_err(|e: VortError| e.to_string())
}

pub fn run_retention(a: RetentionArgs) -> Result<(), CliError> {
    if a.chunk == 0 {
        return Err(CliError::Usage("--chunk must be >= 1".into()));
    }
    if a.horizon == Some(0) {
        return Err(CliError::Usage("--horizon must be >= 1".into()));
    }
    let opts = match &a.model {
        Some(path) => model_opts(path, a.form)?,
        None => RetentionOpts {
            form: a.form,
            mode: a.mode,
            eps: a.eps,
            horizon: a.horizon,
            banks: usize::try_from(a.banks).unwrap_or(usize::MAX),
            delta: a.delta,
            chunk: a.chunk as usize,
            ..RetentionOpts::default()
        },
    };
    // the recipe is checked before the input is read or anything is written
    opts.node_spec(1).validate()?;
    let same = match (a.input.canonicalize(), a.output.canonicalize()) {
        (Ok(i), Ok(o)) => i == o,
        _ => a.input == a.output,
    };
    if same {
        return Err(CliError::Usage(format!(
            "--output {} is the input file: choose another path (the input would be overwritten)",
            a.output.display()
        )));
    }
    // the output rule (vort::fsio): not the input (through a symlink too), not the model's
    // run or file, and a regular file (or a symlink to one) where it exists
    let mut protected = vec![a.input.clone()];
    if let Some(m) = &a.model {
        protected.extend(vort_lab::train::protected_paths(m));
    }
    vort_lab::train::check_output(&a.output, &protected)
        .map_err(|e| CliError::Usage(format!("--output {e}")))?;
    let report = retention_from_safetensors(&a.input, &a.output, &opts)?;
    if a.json {
        return emit_json(&report);
    }
    emit(&format!(
        "y [{t}, {d}] written to {out}\nform {form:?}, memory {mem:?}: {n} nodes, kernel certified to \
         {err:.2e} on lags 1..={h}{clamped}{model}\n",
        h = report.horizon,
        t = report.t,
        d = report.d,
        out = a.output.display(),
        form = a.form,
        mem = opts.mode,
        n = report.nodes,
        err = report.kernel_max_rel_error,
        clamped = if report.clamped_orders > 0 {
            format!(
                "; {} orders below delta were clamped to it",
                report.clamped_orders
            )
        } else {
            String::new()
        },
        model = a.model.as_ref().map_or(String::new(), |m| format!(
            "\nsettings of the model {}: delta {}, eps {:e}, chunk {}, eps_den {:e}",
            m.display(),
            opts.delta,
            opts.eps,
            opts.chunk,
            opts.eps_den
        )),
    ))
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The chunked layer (fused op) against an sgemm of the same run, recurrent decode latency
    /// and state size against context, and softmax attention against the linear form.
    Layer(BenchLayerArgs),
    /// The drift of the f32 recurrent form from f64 over a stream of up to 2^20 tokens
    /// (relative RMS per window of positions), banks and shared memory.
    Stream(crate::stream::BenchStreamArgs),
    /// Full training steps (forward, backward, AdamW) of the reference models (mqar-d64,
    /// books-d256) with every mixer: tokens/s, FLOPs per token, MFU against a same-run sgemm,
    /// busy cores and peak memory.
    Train(crate::train_bench::BenchTrainArgs),
    /// The first byte of `vort generate` from a books model, with the certified node tables
    /// uncached (every layer builds its own: the baseline), cold (built once), warm on disk
    /// and warm in the process: medians and ratios against uncached.
    Generate(crate::generate_bench::BenchGenerateArgs),
}

#[derive(Debug, Args)]
pub struct BenchLayerArgs {
    /// Small sizes (T = 512, contexts up to 16K): a smoke run in seconds.
    #[arg(long)]
    quick: bool,
    /// Also time candle autodiff of the plain chunked form (slow), for comparison.
    #[arg(long)]
    plain: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the JSON to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    out: Option<std::path::PathBuf>,
}

/// Everything `vort bench layer` measured.
#[derive(Debug, Serialize)]
struct LayerBenchReport {
    /// The sizes and options.
    options: LayerBenchOpts,
    /// How FLOPs are counted.
    flop_count: &'static str,
    /// sgemm n³ in the same run: the machine's matmul ceiling.
    sgemm: bench::SgemmResult,
    /// Fused chunked layer, banks and shared.
    layer: Vec<LayerBenchResult>,
    /// Recurrent decode per token and resident state (shared memory, H = 4, F = D = 64).
    decode: Vec<DecodeResult>,
    /// Forward time of causal softmax attention and of the linear (fused) form, B = H = 1.
    crossover: Vec<CrossoverResult>,
    /// 1-minute load average before and after the run (compare only quiet runs).
    load_avg_before: Option<f64>,
    /// See `load_avg_before`.
    load_avg_after: Option<f64>,
}

const FLOP_COUNT: &str = "matmul FLOPs only (2·m·n·k per product) of the fused chunked op: \
    intra-chunk scores and values, state reads and state updates per node, forward and backward; \
    elementwise work (decays, feature weights, normalisation) is not counted";

pub fn run_bench(cmd: BenchCommand) -> Result<(), CliError> {
    let a = match cmd {
        BenchCommand::Layer(a) => a,
        BenchCommand::Stream(a) => return crate::stream::run(a),
        BenchCommand::Train(a) => return crate::train_bench::run(a),
        BenchCommand::Generate(a) => return crate::generate_bench::run(a),
    };
    let options = LayerBenchOpts {
        plain: a.plain,
        t: if a.quick { 512 } else { 2048 },
        reps: if a.quick { 2 } else { 5 },
        ..LayerBenchOpts::default()
    };
    let (contexts, crossover_ts): (Vec<u64>, Vec<usize>) = if a.quick {
        (vec![1 << 10, 1 << 14], vec![1024, 2048])
    } else {
        (
            vec![1 << 10, 1 << 14, 1 << 17, 1 << 20],
            vec![1024, 2048, 4096, 8192, 16384],
        )
    };
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} bench layer: {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let load_avg_before = vort_cli::bench::load_avg_1min();
    bar.set_message("sgemm 2048³");
    let sgemm = bench::bench_sgemm(2048, options.reps)?;
    bar.set_message(format!(
        "fused layer B={} H={} T={} F=D={}",
        options.b, options.h, options.t, options.f
    ));
    let layer = bench::bench_layer(&options)?;
    bar.set_message("recurrent decode (prefill to each context)");
    let decode = bench::bench_decode(
        &contexts,
        NodeMode::Shared,
        4,
        64,
        64,
        options.eps,
        options.delta,
        200,
    )?;
    bar.set_message("softmax against linear");
    let crossover = bench::bench_crossover(&crossover_ts, 1, 64, options.eps, 3)?;
    bar.finish_and_clear();
    let report = LayerBenchReport {
        options,
        flop_count: FLOP_COUNT,
        sgemm,
        layer,
        decode,
        crossover,
        load_avg_before,
        load_avg_after: vort_cli::bench::load_avg_1min(),
    };
    if let Some(path) = &a.out {
        crate::output::write_json(path, &report)?;
    }
    if a.json {
        return emit_json(&report);
    }
    emit(&render(&report))
}

fn render(r: &LayerBenchReport) -> String {
    let o = &r.options;
    let mut s = format!(
        "sgemm 2048³ (same run): {:.1} ms, {:.1} GFLOP/s; 1-minute load average {} before, {} \
         after (compare only quiet runs)\n\n\
         fused chunked layer, B={} H={} T={} F={} D={} chunk={} eps={:e} (median of {})\n\
         FLOPs: {}\n\
         {:<8} {:>6} {:>10} {:>10} {:>12} {:>10} {:>14}\n",
        r.sgemm.ms,
        r.sgemm.gflops,
        r.load_avg_before.map_or("?".into(), |v| format!("{v:.2}")),
        r.load_avg_after.map_or("?".into(), |v| format!("{v:.2}")),
        o.b,
        o.h,
        o.t,
        o.f,
        o.d,
        o.chunk,
        o.eps,
        o.reps,
        r.flop_count,
        "mode",
        "nodes",
        "fwd ms",
        "fwd+bwd ms",
        "fwd+bwd GF/s",
        "% sgemm",
        "plain fwd+bwd",
    );
    for l in &r.layer {
        s += &format!(
            "{:<8} {:>6} {:>10.1} {:>10.1} {:>12.1} {:>9.0}% {:>14}\n",
            l.mode,
            l.nodes,
            l.fwd_ms,
            l.fwd_bwd_ms,
            l.fwd_bwd_gflops,
            100.0 * l.fwd_bwd_gflops / r.sgemm.gflops,
            l.plain_fwd_bwd_ms
                .map_or("-".to_string(), |ms| format!("{ms:.0} ms")),
        );
    }
    s += "\nrecurrent decode (shared memory, H=4, F=D=64)\n   context   µs/token   state bytes   prefill s\n";
    for d in &r.decode {
        s += &format!(
            "{:>10} {:>10.1} {:>13} {:>11.1}\n",
            d.context, d.us_per_token, d.state_bytes, d.prefill_s
        );
    }
    s += "\nforward, B=H=1, d=64: causal softmax against the linear form\n        T   softmax ms    linear ms\n";
    for c in &r.crossover {
        s += &format!("{:>9} {:>12.1} {:>12.1}\n", c.t, c.softmax_ms, c.linear_ms);
    }
    s
}
