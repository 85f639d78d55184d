//! `vort retrieval`: does a books model retrieve? Repeated strings of random letters and
//! made-up names used again at long lags, each streamed with the state carried
//! (`vort_lab::train::retrieval`, issue #40).

use std::path::PathBuf;

use clap::Args;
use vort_lab::data::books::{load_split, Split};
use vort_lab::train::checkpoint;
use vort_lab::train::retrieval::{longest_stream, markdown, probe, RetrievalOptions};

use crate::args::parse_count;
use crate::error::CliError;
use crate::output::{emit, emit_json};

#[derive(Debug, Args)]
pub struct RetrievalArgs {
    /// A books run directory, or a weights file written from one by `vort export`.
    #[arg(long, value_name = "DIR|FILE")]
    run: PathBuf,
    /// The text the names are written into (default: the run's test books, one after the
    /// other, from `vort data fetch books`).
    #[arg(long, value_name = "FILE")]
    text: Option<PathBuf>,
    /// Periods of the repeated strings, in bytes.
    #[arg(long, value_delimiter = ',', value_parser = parse_count,
          default_value = "40,64,256,1024,4096,16384,65536")]
    periods: Vec<u64>,
    /// Copies of each string (>= 2).
    #[arg(long, default_value = "5", value_parser = parse_count)]
    copies: u64,
    /// Lags at which each made-up name is used again, in bytes.
    #[arg(long, value_delimiter = ',', value_parser = parse_count,
          default_value = "1024,8192,65536,262144,1000000")]
    lags: Vec<u64>,
    /// Made-up names per lag (>= 1): with several, later − first gets a standard error over
    /// the names.
    #[arg(long, default_value = "1", value_parser = parse_count)]
    names_per_lag: u64,
    /// Seed of the strings and names.
    #[arg(long, default_value = "0", value_parser = parse_count)]
    seed: u64,
    /// Also write the result as JSON to FILE (atomic).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// The most names a lag may have: their first occurrences, 64 bytes apart, fill the text's
/// first 256 + 64 · names · lags bytes.
const MAX_NAMES_PER_LAG: usize = 256;

fn usize_list(v: &[u64], flag: &str) -> Result<Vec<usize>, CliError> {
    v.iter()
        .map(|&x| {
            usize::try_from(x).map_err(|_| CliError::Usage(format!("{flag} {x} is too large")))
        })
        .collect()
}

pub fn run(a: RetrievalArgs) -> Result<(), CliError> {
    // every argument is checked before the model is loaded
    let opts = RetrievalOptions {
        periods: usize_list(&a.periods, "--periods")?,
        copies: usize_list(&[a.copies], "--copies")?[0],
        lags: usize_list(&a.lags, "--lags")?,
        seed: a.seed,
        names_per_lag: usize_list(&[a.names_per_lag], "--names-per-lag")?[0],
    };
    if opts.copies < 2
        || opts.periods.contains(&0)
        || opts.lags.contains(&0)
        || !(1..=MAX_NAMES_PER_LAG).contains(&opts.names_per_lag)
    {
        return Err(CliError::Usage(format!(
            "--copies must be >= 2, every period and lag >= 1, and --names-per-lag 1 to \
             {MAX_NAMES_PER_LAG}"
        )));
    }
    crate::experiment::check_trained_path(&a.run, "train one with `vort train --task books`")?;
    if let Some(out) = &a.out {
        crate::output::check_out_beside_run(out, &a.run)?;
    }
    let trained =
        crate::books_model::load(&a.run, "the retrieval probe needs a byte-level books model")?;
    let cfg = trained.cfg.clone();
    let text = match &a.text {
        Some(f) => {
            std::fs::read(f).map_err(|e| CliError::Usage(format!("--text {}: {e}", f.display())))?
        }
        None => load_split(
            std::path::Path::new(&cfg.task.data_dir().unwrap_or_default()),
            Split::Test,
        )
        .map_err(|e| CliError::Usage(format!("the run's test books: {e}")))?
        .into_iter()
        .flat_map(|b| b.bytes)
        .collect(),
    };
    // certified for the longest stream
    let longest = longest_stream(&opts, text.len()) as u64;
    let model = crate::books_model::build_for(trained, longest)?;
    let bar = crate::books_model::bytes_bar();
    let r = probe(
        &model,
        &text,
        &opts,
        cfg.task.seq_len,
        &vort_lab::train::device(),
        crate::books_model::track(&bar),
    )?;
    bar.finish_and_clear();
    if let Some(out) = &a.out {
        checkpoint::write_json(out, &r)?;
    }
    if a.json {
        return emit_json(&r);
    }
    emit(&format!(
        "{}\n{} bytes streamed at {:.0} bytes/s\n",
        markdown(&r),
        r.bytes,
        r.bytes_per_s
    ))
}
