//! `vort eval --whole-books`: every test book of a books run streamed from its first byte,
//! the state carried and reset every window, BPC by context bucket out to 2^20 bytes (issue
//! #40 item 3; [`vort_lab::train::stream::stream_books_by_context`]).

use std::path::Path;

use vort_lab::data::books::{load_split, Split};
use vort_lab::train::stream::{longest_book_lag, stream_books_by_context, BooksByContext};

use crate::books_model;
use crate::error::CliError;
use crate::output::{emit, emit_json};

pub fn run(run: &Path, json: bool) -> Result<(), CliError> {
    let trained = books_model::load(
        run,
        "--whole-books streams the test books through a byte-level books model",
    )?;
    let cfg = trained.cfg.clone();
    let books: Vec<(String, Vec<u8>)> = load_split(
        Path::new(&cfg.task.data_dir().unwrap_or_default()),
        Split::Test,
    )
    .map_err(|e| CliError::Usage(format!("the run's test books: {e}")))?
    .into_iter()
    .map(|b| (b.title, b.bytes))
    .collect();
    let model = books_model::build_for(trained, longest_book_lag(&books))?;
    let bar = books_model::bytes_bar();
    let r = stream_books_by_context(
        &model,
        &books,
        cfg.task.seq_len,
        &vort_lab::train::device(),
        books_model::track(&bar),
    )?;
    bar.finish_and_clear();
    if json {
        return emit_json(&r);
    }
    emit(&table(&r))
}

/// The buckets and the books as markdown tables.
fn table(r: &BooksByContext) -> String {
    let mut s = format!(
        "BPC by context, the test books streamed from their first byte (state carried) and the \
         same bytes scored window by window (state reset every {} bytes):\n\n\
         | context (bytes) | bytes | carried | reset | carried - reset |\n|---|---|---|---|---|\n",
        r.window
    );
    for b in &r.buckets {
        s += &format!(
            "| {} | {} | {:.3} | {:.3} | {:+.3} |\n",
            b.label,
            b.n,
            b.carried,
            b.reset,
            b.carried - b.reset
        );
    }
    s += "\n| book | bytes | carried | reset |\n|---|---|---|---|\n";
    for b in &r.books {
        s += &format!(
            "| {} | {} | {:.3} | {:.3} |\n",
            b.title, b.bytes, b.carried, b.reset
        );
    }
    s + &format!("\n{:.0} bytes/s\n", r.bytes_per_s)
}
