//! The books report's retrieval section (issue #40): the retrieval probe
//! ([`crate::train::retrieval`], its default grid) on every seed-0 model, the names written
//! into the test books, each cached as the run's `retrieval.json`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{BooksReport, Skipped};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::retrieval::{longest_stream, probe, RetrievalOptions, RetrievalResult};
use crate::train::{self, RunConfig, RunDir, TrainError};

/// One model's probe, as cached in its run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalRow {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Its seed.
    pub seed: u64,
    /// Training steps of the weights probed.
    pub step: u64,
    /// Bytes of the text the names were written into (the test books, one after another).
    pub text_bytes: usize,
    /// What the probe measured.
    pub result: RetrievalResult,
}

/// The test books, one after another: the text the names are written into.
pub fn test_text(corpus: &BookCorpus) -> Vec<u8> {
    corpus
        .test_books()
        .iter()
        .flat_map(|b| b.bytes.iter().copied())
        .collect()
}

/// The probe of every seed-0 run (`runs` with `results`, in plan order) but those that need
/// marks, its grid cut to streams of `max_bytes` (the report's stream length): its cache when
/// it is of these weights, options and text, else measured from its weights and cached. The
/// runs left out (oracle routing; neither a cache nor weights) are returned with the reason.
///
/// # Errors
/// Streaming and I/O errors.
pub(super) fn measure(
    runs: &[RunConfig],
    results: &[EvalResult],
    corpus: &BookCorpus,
    out_dir: &Path,
    (max_bytes, progress): (usize, bool),
) -> Result<(Vec<RetrievalRow>, Vec<Skipped>), TrainError> {
    let text = test_text(corpus);
    let opts = RetrievalOptions::default().within(max_bytes);
    if opts.periods.is_empty() && opts.lags.is_empty() {
        return Ok(Default::default());
    }
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (c, e) in runs.iter().zip(results).filter(|(c, _)| c.seed == 0) {
        if let Some(k) = Skipped::needing_marks(c, e) {
            skipped.push(k);
            continue;
        }
        let dir = RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
        let cached = std::fs::read_to_string(dir.retrieval_path())
            .ok()
            .and_then(|t| serde_json::from_str::<RetrievalRow>(&t).ok())
            .filter(|r| r.step == e.step && r.text_bytes == text.len() && r.result.options == opts);
        if let Some(r) = cached {
            rows.push(r);
            continue;
        }
        let longest = longest_stream(&opts, text.len()) as u64;
        let (model, step) = match Skipped::or_model(&dir, e, longest)? {
            Ok(m) => m,
            Err(k) => {
                skipped.push(k);
                continue;
            }
        };
        if progress {
            eprintln!("retrieval probe of {}", dir.path().display());
        }
        let result = probe(
            &model,
            &text,
            &opts,
            c.task.seq_len,
            &train::device(),
            |_, _| {},
        )?;
        let row = RetrievalRow {
            mixer: e.label().to_string(),
            seed: c.seed,
            step,
            text_bytes: text.len(),
            result,
        };
        train::checkpoint::write_json(&dir.retrieval_path(), &row)?;
        rows.push(row);
    }
    Ok((rows, skipped))
}

/// The section: per model, the bits of copies 1, 2 and 5 of the repeated strings at a few
/// periods, and of each name the first time and `lag` later; nothing without probes.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let not_probed = Skipped::markdown("Not probed", &rep.not_probed);
    if rep.retrieval.is_empty() {
        return if not_probed.is_empty() {
            String::new()
        } else {
            format!("\n## Retrieval\n\n{not_probed}")
        };
    }
    let mut s = String::from(
        "\n## Retrieval\n\nDoes the model copy what it has seen? (`vort retrieval`; issue #40.) \
         A string of random lower-case letters written 5 times in a row, and made-up names \
         written into the test books once and again `lag` bytes later, each streamed with the \
         state carried. Bits per byte: a model that copies falls towards 0 on the later copies \
         and names; one that keeps only smoothed statistics pays the first price again. \
         (log2 26 = 4.70 is a uniform guess among the letters.)\n\n\
         | model | period 40: copy 1 / 2 / 5 | 1 KiB | 64 KiB | name later − first at lag 1K / 8K / 64K / 256K / 1M |\n\
         |---|---|---|---|---|\n",
    );
    for r in &rep.retrieval {
        let period = |p: usize| {
            r.result
                .repeats
                .iter()
                .find(|x| x.period == p)
                .map_or("-".to_string(), |x| {
                    let at = |k: usize| x.bits.get(k).map_or("-".into(), |b| format!("{b:.2}"));
                    format!("{} / {} / {}", at(0), at(1), at(4))
                })
        };
        // one name a lag: its difference; several: their mean ± SE
        let names: Vec<String> = crate::train::retrieval::name_lags(&r.result.names)
            .iter()
            .map(|l| match l.names {
                1 => format!("{:+.2}", l.diff),
                _ => format!("{:+.2} ± {:.2}", l.diff, l.se),
            })
            .collect();
        s += &format!(
            "| {} s{} | {} | {} | {} | {} |\n",
            r.mixer,
            r.seed,
            period(40),
            period(1024),
            period(65536),
            names.join(" / ")
        );
    }
    s += "\nEach run's `retrieval.json` holds every period and copy, and the names.\n";
    s + &not_probed
}
