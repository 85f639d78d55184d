//! `vort bench generate`: the first byte of `vort generate`, cold and warm.

use std::path::PathBuf;

use clap::Args;
use vort_cli::bench::generate::{bench_generate, GenerateBench};

use crate::args::parse_count;
use crate::error::CliError;
use crate::output::{emit, emit_json, write_json};

#[derive(Debug, Args)]
pub struct BenchGenerateArgs {
    /// A books run directory or a `vort export` file.
    #[arg(long, value_name = "DIR|FILE")]
    run: PathBuf,
    /// Bytes generated per timing (>= 1).
    #[arg(long, default_value = "100", value_parser = parse_count)]
    bytes: u64,
    /// Prompt (default: one newline, as `vort generate`).
    #[arg(long, default_value = "")]
    prompt: String,
    /// Rounds of uncached, cold, warm-disk and warm-process timings (medians are reported).
    #[arg(long, default_value = "3", value_parser = parse_count)]
    repeats: u64,
    /// Print the result as JSON: {"run", "bytes", "prompt_bytes", "horizon", "uncached",
    /// "cold", "warm_disk", "warm_process" (each {"first_byte_s", "total_s"}),
    /// "speedup_cold", "speedup_disk", "speedup_process", "repeats", "load_avg_before",
    /// "load_avg_after"}.
    #[arg(long)]
    json: bool,
    /// Also write the JSON to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub fn run(a: BenchGenerateArgs) -> Result<(), CliError> {
    if a.bytes == 0 || a.repeats == 0 {
        return Err(CliError::Usage("--bytes and --repeats must be >= 1".into()));
    }
    crate::experiment::check_trained_path(&a.run, "train one with `vort train --task books`")?;
    if let Some(out) = &a.out {
        crate::output::check_out_beside_run(out, &a.run)?;
    }
    let quiet = a.json;
    let result = bench_generate(
        &a.run,
        a.prompt.as_bytes(),
        usize::try_from(a.bytes).unwrap_or(usize::MAX),
        usize::try_from(a.repeats).unwrap_or(usize::MAX),
        &std::env::temp_dir(),
        |r, t| {
            if !quiet {
                eprintln!(
                    "[{r}/{}] first byte: uncached {:.2} s, cold {:.2} s, warm disk {:.2} s, \
                     warm process {:.2} s",
                    a.repeats,
                    t[0].first_byte_s,
                    t[1].first_byte_s,
                    t[2].first_byte_s,
                    t[3].first_byte_s
                );
            }
        },
    )?;
    if let Some(path) = &a.out {
        write_json(path, &result)?;
    }
    if a.json {
        return emit_json(&result);
    }
    emit(&render(&result))
}

fn render(r: &GenerateBench) -> String {
    let load = |x: Option<f64>| x.map_or("?".to_string(), |v| format!("{v:.2}"));
    let row = |name: &str, t: &vort_cli::bench::generate::Timing, ratio: &str| {
        format!(
            "{name:<14} {:>10.3} {:>10.3} {ratio:>9}\n",
            t.first_byte_s, t.total_s
        )
    };
    let mut s = format!(
        "{} bytes after a {}-byte prompt from {} (tables certified to {} lags), median of {}\n\
         {:<14} {:>10} {:>10} {:>9}\n",
        r.bytes,
        r.prompt_bytes,
        r.run.display(),
        r.horizon.map_or("no".into(), |h| h.to_string()),
        r.repeats.len(),
        "node tables",
        "first (s)",
        "total (s)",
        "speedup"
    );
    s += &row("uncached", &r.uncached, "1.00x");
    s += &row("cold", &r.cold, &format!("{:.2}x", r.speedup_cold));
    s += &row(
        "warm disk",
        &r.warm_disk,
        &format!("{:.2}x", r.speedup_disk),
    );
    s += &row(
        "warm process",
        &r.warm_process,
        &format!("{:.2}x", r.speedup_process),
    );
    s + &format!(
        "1-minute load average {} before, {} after (compare only quiet runs)\n",
        load(r.load_avg_before),
        load(r.load_avg_after)
    )
}
