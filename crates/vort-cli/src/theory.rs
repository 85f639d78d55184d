//! `vort theory --out DIR`: the numerical checks of the paper's theorems as a report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use vort_lab::theory_report::{self, ReportError, Scale, FIGURES};

use crate::error::CliError;
use crate::output::{emit, emit_json};

#[derive(Debug, Args)]
pub struct TheoryArgs {
    /// Directory for report.md, theory.json and the PNG figures (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Small grids: a smoke run in seconds with the same sections.
    #[arg(long)]
    quick: bool,
    /// Print every measured number as JSON (the content of DIR/theory.json) on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(args: TheoryArgs) -> Result<(), CliError> {
    let scale = if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    let start = Instant::now();
    // A spinner naming the current stage (drawn only when stderr is a terminal).
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} theory report: {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let result = theory_report::run(&args.out, scale, |stage| bar.set_message(stage.to_string()));
    bar.finish_and_clear();
    let results = result.map_err(|e| match e {
        // The grids are fixed, so a refusal here is a failure of the run, not a bad argument.
        ReportError::Math(m) => CliError::Io(format!("theory report failed: {m}")),
        other => CliError::Io(other.to_string()),
    })?;
    if args.json {
        return emit_json(&results);
    }
    let out = args.out.display();
    let mut s = format!(
        "theory report ({} grids) written in {:.1} s:\n  {out}/report.md\n  {out}/theory.json\n",
        if args.quick { "quick" } else { "full" },
        start.elapsed().as_secs_f64()
    );
    for f in FIGURES {
        s += &format!("  {out}/{f}\n");
    }
    emit(&s)
}
