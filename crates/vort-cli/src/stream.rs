//! `vort bench stream`: the drift of the f32 recurrent form from f64 over a long stream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use vort_cli::bench::stream::{self as bench, StreamDriftOpts, StreamDriftResult};
use vort_lab::plot::{self, Series};
use vort_lab::train::checkpoint::write_atomic;

use crate::args::parse_count;
use crate::error::CliError;
use crate::output::{emit, emit_json};

/// Tokens of `--quick`.
const QUICK_TOKENS: u64 = 1 << 16;

#[derive(Debug, Args)]
pub struct BenchStreamArgs {
    /// Tokens to stream (default 1,048,576 = 2^20, the node tables' horizon, which is also
    /// the most accepted).
    #[arg(long, value_parser = parse_count, conflicts_with = "quick")]
    tokens: Option<u64>,
    /// 65,536 tokens: a smoke run in seconds.
    #[arg(long)]
    quick: bool,
    /// Also write DIR/stream_drift.json and DIR/stream_drift.png (relative RMS against
    /// position).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: BenchStreamArgs) -> Result<(), CliError> {
    let tokens = match (a.tokens, a.quick) {
        (Some(0), _) => return Err(CliError::Usage("--tokens must be >= 1".into())),
        (Some(t), _) => t,
        (None, true) => QUICK_TOKENS,
        (None, false) => bench::STREAM_HORIZON,
    };
    let opts = StreamDriftOpts {
        tokens,
        ..StreamDriftOpts::default()
    };
    if tokens > opts.horizon {
        return Err(CliError::Usage(format!(
            "--tokens {tokens} exceeds the node tables' horizon {} (2^20)",
            opts.horizon
        )));
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::Io(format!("cannot create {}: {e}", dir.display())))?;
    }
    let bar = ProgressBar::new(2 * tokens);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} bench stream: {msg} {pos}/{len} tokens [{elapsed}, eta {eta}]",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    let mut done_before = 0;
    let mut current = String::new();
    let r = bench::bench_stream_drift_with(&opts, |memory, done| {
        if memory != current {
            done_before = bar.position();
            current = memory.to_string();
            bar.set_message(format!("{memory} f32 vs f64"));
        }
        bar.set_position(done_before + done);
    })?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&r)
        .map_err(|e| CliError::Io(format!("cannot serialise the result: {e}")))?;
    if let Some(dir) = &a.out {
        let path = dir.join("stream_drift.json");
        write_atomic(&path, (json.clone() + "\n").as_bytes())
            .map_err(|e| CliError::Io(e.to_string()))?;
        plot_drift(&r, &dir.join("stream_drift.png"))?;
    }
    if a.json {
        return emit_json(&r);
    }
    let mut s = render(&r);
    if let Some(dir) = &a.out {
        let d = dir.display();
        s += &format!("\nwritten: {d}/stream_drift.json, {d}/stream_drift.png\n");
    }
    emit(&s)
}

/// Relative RMS per window against the window's end (tokens streamed), one line per mode,
/// and the budget. Drawn into a temporary PNG beside `path`, then renamed over it, so a
/// reader never sees a half-written plot.
fn plot_drift(r: &StreamDriftResult, path: &Path) -> Result<(), CliError> {
    let mut series: Vec<Series> = r
        .modes
        .iter()
        .map(|m| {
            let pts = m.bins.iter().map(|b| (b.hi as f64, b.rel_rms)).collect();
            Series::line(format!("{} ({} nodes)", m.mode, m.nodes), pts)
        })
        .collect();
    series.push(Series::dashed(
        format!("budget {:e}", r.budget),
        vec![(1.0, r.budget), (r.tokens.max(2) as f64, r.budget)],
    ));
    let title = format!(
        "f32 recurrent vs f64: relative RMS of y per window, {} tokens, F = {}, D = {}, δ = {}",
        r.tokens, r.options.f, r.options.d, r.options.delta
    );
    // line_plot writes through the project's atomic writer
    plot::line_plot(
        path,
        &title,
        "tokens streamed (end of window)",
        "relative RMS (f32 vs f64)",
        &series,
        true,
        true,
    )?;
    Ok(())
}

fn render(r: &StreamDriftResult) -> String {
    let o = &r.options;
    let load = |l: Option<f64>| l.map_or("-".to_string(), |l| format!("{l:.2}"));
    let mut s = format!(
        "f32 recurrent form against f64: {} tokens, B = H = 1, F = {}, D = {}, α uniform in \
         [{}, 1], tables certified to {} lags at eps {:e}, pieces of {}\n\
         wall {:.1} s, load average (1 min) {} before, {} after; budget {:e}\n\n\
         {:<8} {:>6} {:>14} {:>14} {:>14} {:>9}\n",
        r.tokens,
        o.f,
        o.d,
        o.delta,
        o.horizon,
        o.eps,
        o.piece,
        r.wall_s,
        load(r.load_avg_before),
        load(r.load_avg_after),
        r.budget,
        "mode",
        "nodes",
        "rel RMS",
        "worst window",
        "final state",
        "wall s",
    );
    for m in &r.modes {
        s += &format!(
            "{:<8} {:>6} {:>14.3e} {:>14.3e} {:>14.3e} {:>9.1}\n",
            m.mode, m.nodes, m.rel_rms_overall, m.rel_rms_max_bin, m.state_rel_rms_final, m.wall_s
        );
    }
    for m in &r.modes {
        if let Some(w) = m.state_by_node.iter().max_by(|a, b| {
            a.num_rel_rms
                .max(a.den_rel_rms)
                .total_cmp(&b.num_rel_rms.max(b.den_rel_rms))
        }) {
            s += &format!(
                "{}: largest relative final-state error on the node u = {:.3e}: numerator {:.2e}, \
                 denominator {:.2e}\n",
                m.mode, w.u, w.num_rel_rms, w.den_rel_rms
            );
        }
    }
    s += "\nrelative RMS per window [lo, hi) of stream positions\n";
    s += &format!("{:>9} {:>9}", "lo", "hi");
    for m in &r.modes {
        s += &format!(" {:>11}", m.mode);
    }
    s += "\n";
    if let Some(first) = r.modes.first() {
        for (i, b) in first.bins.iter().enumerate() {
            s += &format!("{:>9} {:>9}", b.lo, b.hi);
            for m in &r.modes {
                s += &format!(" {:>11.3e}", m.bins[i].rel_rms);
            }
            s += "\n";
        }
    }
    s
}
