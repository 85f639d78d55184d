//! `vort bench train`: full training steps of the reference models against a same-run sgemm.

use std::path::PathBuf;

use clap::Args;
use vort_cli::bench::train::{bench_train, references, TrainBenchRun};

use crate::error::CliError;
use crate::output::{emit, emit_json, write_json};

#[derive(Debug, Args)]
pub struct BenchTrainArgs {
    /// Smoke-test sizes (T and batch quartered, one layer fewer, 1 + 2 steps): seconds.
    #[arg(long)]
    quick: bool,
    /// Only the models whose name contains this (e.g. `books-d256`, `vort-shared`).
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Also write the JSON to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the results as JSON: {"sgemm_gflops", "sgemm_gflops_before",
    /// "sgemm_gflops_after", "load_avg_before", "load_avg_after",
    /// "runs": [{"name", "mixer", "tokens_per_s", "flops_per_token", "mfu", "busy_cores",
    /// "peak_rss_bytes", "nodes", "steps"}]}.
    #[arg(long)]
    json: bool,
}

fn row(r: &TrainBenchRun) -> String {
    format!(
        "{:<26} {:>10.0} {:>9.2} {:>7.1}% {:>6.2} {:>8.0} MiB",
        r.name,
        r.tokens_per_s,
        r.flops_per_token / 1e6,
        100.0 * r.mfu,
        r.busy_cores,
        r.peak_rss_bytes as f64 / (1024.0 * 1024.0)
    )
}

pub fn run(a: BenchTrainArgs) -> Result<(), CliError> {
    let mut refs = references(a.quick);
    if let Some(only) = &a.only {
        refs.retain(|r| r.name.contains(only.as_str()));
        if refs.is_empty() {
            return Err(CliError::Usage(format!(
                "--only {only}: no reference model matches (names: mqar-d64/<mixer>, books-d256/<mixer>)"
            )));
        }
    }
    let (warmup, steps) = if a.quick { (1, 2) } else { (2, 4) };
    let quiet = a.json;
    let total = refs.len();
    let mut done = 0;
    let result = bench_train(&refs, warmup, steps, |r| {
        done += 1;
        if !quiet {
            eprintln!("[{done}/{total}] {} {:.0} tokens/s", r.name, r.tokens_per_s);
        }
    })?;
    if let Some(path) = &a.out {
        write_json(path, &result)?;
    }
    if a.json {
        return emit_json(&result);
    }
    let load = |x: Option<f64>| x.map_or("?".to_string(), |v| format!("{v:.2}"));
    let mut table = format!(
        "{:<26} {:>10} {:>9} {:>8} {:>6} {:>12}\n",
        "model", "tokens/s", "MFLOP/tok", "MFU", "cores", "peak RSS"
    );
    for r in &result.runs {
        table += &row(r);
        table.push('\n');
    }
    emit(&table)?;
    emit(&format!(
        "sgemm {:.0} GFLOP/s in the same run (before {:.0}, after {:.0}); 1-minute load \
         average {} before, {} after (compare only quiet runs)\n",
        result.sgemm_gflops,
        result.sgemm_gflops_before,
        result.sgemm_gflops_after,
        load(result.load_avg_before),
        load(result.load_avg_after)
    ))
}
