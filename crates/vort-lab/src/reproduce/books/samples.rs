//! Samples for readers: every seed-0 model continues one fixed prompt from a test book by
//! [`SAMPLE_BYTES`] bytes at temperature [`SAMPLE_TEMPERATURE`] (what `vort generate --run DIR
//! --prompt ... --bytes 400 --temperature 0.8 --seed 0` prints), so a reader sees what a BPC
//! means. Cached per run (`sample.json`, [`RunDir::sample_path`]) with the step of the
//! parameters that drew it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{BooksReport, Skipped};
use crate::tasks::books::BookCorpus;
use crate::train::eval::EvalResult;
use crate::train::generate::{generate, GenerateOptions};
use crate::train::RunDir;
use crate::train::{self, RunConfig, TrainError};

/// Bytes drawn per sample.
pub const SAMPLE_BYTES: usize = 400;

/// Softmax temperature of the samples.
pub const SAMPLE_TEMPERATURE: f64 = 0.8;

/// Longest prompt (bytes): cut back to its last space, so it ends between words.
pub const PROMPT_BYTES: usize = 256;

/// One model's sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Run seed.
    pub seed: u64,
    /// Training steps of the parameters that drew it.
    pub step: u64,
    /// The prompt (UTF-8; the books are ASCII).
    pub prompt: String,
    /// Where the prompt comes from (`"<book>, bytes a..b"`).
    pub source: String,
    /// Sampling temperature.
    pub temperature: f64,
    /// Seed of the sampler.
    pub sampler_seed: u64,
    /// The sampled bytes, as text (invalid UTF-8 replaced).
    pub output: String,
}

/// The fixed prompt: from the first line start after the middle of the first test book, at most
/// [`PROMPT_BYTES`] bytes, cut after its last space. Returns (prompt, source).
pub fn prompt(corpus: &BookCorpus) -> (Vec<u8>, String) {
    let book = &corpus.test_books()[0];
    let b = &book.bytes;
    let mid = b.len() / 2;
    let start = b[mid..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(mid, |i| mid + i + 1);
    let end = (start + PROMPT_BYTES).min(b.len());
    let end = b[start..end]
        .iter()
        .rposition(|&c| c == b' ')
        .map_or(end, |i| start + i + 1);
    (
        b[start..end].to_vec(),
        format!("{}, bytes {start}..{end}", book.title),
    )
}

/// Draws (or reuses) the sample of every finished seed-0 run of `runs` (`results` aligned with
/// them, named by their `memory`). A run with neither a cached sample for this prompt nor
/// weights is left out with a warning; a run with oracle routing is left out and listed with
/// the reason (no marks).
///
/// # Errors
/// Model and I/O errors.
pub(super) fn measure(
    runs: &[RunConfig],
    results: &[EvalResult],
    corpus: &BookCorpus,
    out_dir: &Path,
) -> Result<(Vec<SampleRow>, Vec<Skipped>), TrainError> {
    let (text, source) = prompt(corpus);
    let prompt = String::from_utf8_lossy(&text).into_owned();
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for (c, e) in runs.iter().zip(results).filter(|(c, _)| c.seed == 0) {
        if let Some(k) = Skipped::needing_marks(c, e) {
            skipped.push(k);
            continue;
        }
        let dir = RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
        let cached = std::fs::read_to_string(dir.sample_path())
            .ok()
            .and_then(|t| serde_json::from_str::<SampleRow>(&t).ok())
            .filter(|r| {
                r.step == e.step
                    && r.prompt == prompt
                    && r.temperature == SAMPLE_TEMPERATURE
                    && r.output.len() >= SAMPLE_BYTES
            });
        if let Some(r) = cached {
            rows.push(r);
            continue;
        }
        let (_, mut model, _vm, step) = match dir.load_model() {
            Ok(m) => m,
            Err(err) => {
                eprintln!(
                    "warning: no sample from {}: no sample.json for this prompt and no model \
                     ({err})",
                    dir.path().display()
                );
                continue;
            }
        };
        let opts = GenerateOptions {
            bytes: SAMPLE_BYTES,
            temperature: SAMPLE_TEMPERATURE,
            seed: 0,
        };
        let drawn = generate(&mut model, &text, &opts, |_| Ok(()))?;
        let row = SampleRow {
            mixer: e.label().to_string(),
            seed: c.seed,
            step,
            prompt: prompt.clone(),
            source: source.clone(),
            temperature: SAMPLE_TEMPERATURE,
            sampler_seed: opts.seed,
            output: String::from_utf8_lossy(&drawn.output).into_owned(),
        };
        train::checkpoint::write_json(&dir.sample_path(), &row)?;
        rows.push(row);
    }
    Ok((rows, skipped))
}

/// The samples section: the prompt once, then each model's continuation, then the models
/// left without one and why; nothing without samples or models left out.
pub(super) fn markdown(rep: &BooksReport) -> String {
    let not_sampled = Skipped::markdown("No sample", &rep.not_sampled);
    let Some(first) = rep.samples.first() else {
        return if not_sampled.is_empty() {
            String::new()
        } else {
            format!("## Samples\n\n{not_sampled}")
        };
    };
    // a fence the texts cannot close
    let fence = |t: &str| t.replace("```", "'''");
    let mut s = format!(
        "## Samples\n\nEach seed-0 model continues the same prompt ({}) by {} bytes at \
         temperature {} (sampler seed {}), as `vort generate --run DIR --prompt-file P --bytes \
         {} --temperature {} --seed {}` would. Prompt:\n\n```text\n{}\n```\n\n",
        first.source,
        SAMPLE_BYTES,
        first.temperature,
        first.sampler_seed,
        SAMPLE_BYTES,
        first.temperature,
        first.sampler_seed,
        fence(&first.prompt)
    );
    for r in &rep.samples {
        s += &format!(
            "**{}** (seed {}, step {}):\n\n```text\n{}\n```\n\n",
            r.mixer,
            r.seed,
            r.step,
            fence(&r.output)
        );
    }
    s + &not_sampled
}
