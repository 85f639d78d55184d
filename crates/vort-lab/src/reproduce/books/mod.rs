//! `reproduce books`: byte-level language modelling on pre-1919 books (the paper's PG-19
//! claim, docs/DESIGN.md §3): bits per character by context bucket for every mixer, BPC
//! against context, and the learned orders α on entity, function-word and other bytes.
//!
//! Output directory: `report.md`, `results.json`, `manifest.json` and `lexicon_sources.json`
//! (the data measured on), `bpc_vs_context.png`, `alpha_by_class_books.png`,
//! `training_curves.png`, `stream.png` (a test book streamed with the state carried across
//! pieces: BPC against context far beyond the training length, and the resident state), and
//! `runs/books/<memory>/seed<k>/` (config, metrics, checkpoint, eval). Finished runs are
//! reused and interrupted ones resumed, as for the synthetic reproduction.
//!
//! A memory is the preset's mixer *name* (its run directory, report row, curves, streams and
//! samples), not its kind: the ablation ladder runs several mixers of one kind (fixed orders,
//! the learned order, oracle routing), each beside VORT. The shipped presets name every mixer
//! by its kind.
//!
//! The report is cut by claim, a file per section: BPC by context with the verdicts
//! (`context.rs`), the compressors on the same bytes and `bpc_vs_compressors.png`
//! (`anchors.rs`), the training curves and `training_curves.png` (`curves.rs`), the learned
//! orders (`alpha.rs`), the streamed book (`streaming.rs`) and the seed-0 models' samples
//! (`samples.rs`).

mod alpha;
pub mod anchors;
mod context;
pub mod curves;
pub mod retrieval;
pub mod samples;
pub mod streaming;
pub mod whole_books;

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::preset::{NamedRun, Preset};
use super::runner::{self, DivergedRun};
use super::{mean_sd, train_named, Scale};
use crate::tasks::books::BookCorpus;
use crate::tasks::CONTEXT_BUCKETS;
use crate::train::eval::EvalResult;
use crate::train::stream::StreamResult;
use crate::train::{self, RunConfig, RunDir, TrainError};
pub use context::paired_window_diffs;
use vort::Mixer;

/// The paper's BPC at context > 4096 for a mixer ([`super::paper`]).
pub fn paper_bpc(memory: &str) -> Option<f64> {
    super::paper::number(super::paper::Claim::BooksBpc, memory)
}

/// The embedded books preset of `scale` (`configs/books/<scale>.toml`).
///
/// # Errors
/// None for the shipped presets (their tests read them).
pub fn embedded(scale: Scale) -> Result<Preset, TrainError> {
    Preset::embedded("books", scale.name())
}

/// The run of the mixer named `mixer` (vort, exponential, ...) at `seed` in the preset of
/// `scale`, on the books in `data_dir`, with its name and role.
///
/// # Errors
/// A mixer the preset does not have.
pub fn preset(
    scale: Scale,
    mixer: &str,
    seed: u64,
    data_dir: &str,
) -> Result<NamedRun, TrainError> {
    let p = embedded(scale)?;
    let cell = &p.cells[0];
    let m = p
        .mixers_of(cell)
        .find(|m| m.name == mixer)
        .ok_or_else(|| TrainError::Config {
            path: format!("configs/books/{}.toml", scale.name()),
            message: format!("no mixer {mixer:?}"),
        })?;
    let mut config = p.run_config(cell, m, p.lrs_of(cell, m)[0], seed)?;
    if let Some(books) = config.task.books_mut() {
        books.data_dir = data_dir.into();
    }
    Ok(NamedRun {
        name: m.name.clone(),
        role: m.role,
        config,
    })
}

/// Every run of the books preset of `scale` (every mixer; one seed at the quick and medium
/// scales, three at the full scale), on the books in `data_dir`.
///
/// # Errors
/// As [`embedded`].
pub fn plan(scale: Scale, data_dir: &str) -> Result<Vec<NamedRun>, TrainError> {
    let mut runs = embedded(scale)?.named_runs()?;
    for r in &mut runs {
        if let Some(books) = r.config.task.books_mut() {
            books.data_dir = data_dir.into();
        }
    }
    Ok(runs)
}

/// Mixer kinds streamed through a whole test book (every seed and every mixer of the kind):
/// VORT and the exponential memory it is compared with. So the ladder's learned order (kind
/// vort, ~20 s per stream variant) is streamed too; its oracle routing is not
/// ([`NEEDS_MARKS`]).
pub const STREAMED: [&str; 2] = ["vort", "exponential"];

/// Why a run with oracle routing is neither streamed nor sampled: its every forward needs
/// the task's memorable marks ([`vort::Mixer::needs_marks`]).
pub const NEEDS_MARKS: &str = "oracle routing reads the lexicon's entity marks, which a \
                               free-running stream or sample does not have";

/// A finished run left out of a part of the report (the stream or the samples), and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Run seed.
    pub seed: u64,
    /// Why it is left out.
    pub why: String,
}

impl Skipped {
    /// The run of `e` left out because it needs marks ([`NEEDS_MARKS`]), or None.
    fn needing_marks(c: &RunConfig, e: &EvalResult) -> Option<Skipped> {
        c.model.mixer.needs_marks().then(|| Skipped {
            mixer: e.label().to_string(),
            seed: e.seed,
            why: NEEDS_MARKS.into(),
        })
    }

    /// The model of the run of `e` in `dir` with node tables certified for `longest` lags, and
    /// the step of its weights; or the run left out when it kept no weights.
    ///
    /// # Errors
    /// A horizon the SOE builder refuses.
    fn or_model(
        dir: &RunDir,
        e: &EvalResult,
        longest: u64,
    ) -> Result<Result<(vort::model::Model, u64), Skipped>, TrainError> {
        let Ok((_, mut model, _vm, step)) = dir.load_model() else {
            return Ok(Err(Skipped {
                mixer: e.label().to_string(),
                seed: e.seed,
                why: "no weights kept".into(),
            }));
        };
        if model.horizon().is_some_and(|h| h < longest) {
            model.set_horizon(longest)?;
        }
        Ok(Ok((model, step)))
    }

    /// The report's line on `skipped` runs, after "`what`:" (empty when none is).
    fn markdown(what: &str, skipped: &[Skipped]) -> String {
        if skipped.is_empty() {
            return String::new();
        }
        let list: Vec<String> = skipped
            .iter()
            .map(|k| format!("{} seed {} ({})", k.mixer, k.seed, k.why))
            .collect();
        format!("{what}: {}.\n\n", list.join("; "))
    }
}

/// The memories (preset mixer names) of a report in report order, with their colours in the
/// figures: the names in `known` (mixer kinds) first, in its order and at its palette index,
/// so a preset whose names are its kinds draws as before; then every other name (the
/// ladder's rungs) in plan order, in the colours after them.
pub(crate) struct Memories {
    known: &'static [&'static str],
    order: Vec<String>,
    others: Vec<String>,
}

impl Memories {
    /// The memories among `names` (in plan order, repeats allowed).
    pub(crate) fn new<'a>(
        names: impl IntoIterator<Item = &'a str>,
        known: &'static [&'static str],
    ) -> Memories {
        let mut seen: Vec<&str> = Vec::new();
        for n in names {
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        let others: Vec<String> = seen
            .iter()
            .filter(|n| !known.contains(n))
            .map(|n| n.to_string())
            .collect();
        let order = known
            .iter()
            .filter(|k| seen.contains(k))
            .map(|k| k.to_string())
            .chain(others.iter().cloned())
            .collect();
        Memories {
            known,
            order,
            others,
        }
    }

    /// The memories in report order.
    pub(crate) fn order(&self) -> &[String] {
        &self.order
    }

    /// The palette index of `memory` (0 for a name it does not have).
    pub(crate) fn color(&self, memory: &str) -> usize {
        self.known
            .iter()
            .position(|k| *k == memory)
            .or_else(|| {
                self.others
                    .iter()
                    .position(|o| o == memory)
                    .map(|i| self.known.len() + i)
            })
            .unwrap_or(0)
    }

    /// How many colours the memories take (the known ones whether present or not).
    pub(crate) fn colors(&self) -> usize {
        self.known.len() + self.others.len()
    }
}

/// Bytes of the first test book streamed per model: quick 128 KiB (16 training lengths),
/// medium and full the whole book (*The Parent's Assistant*, 916,860 bytes: 20 s for VORT at
/// the measured ~45k bytes/s of the fused form with a carried state on 2 cores).
pub fn stream_bytes(scale: Scale) -> usize {
    match scale {
        Scale::Quick => 128 * 1024,
        Scale::Medium | Scale::Full => usize::MAX,
    }
}

/// One streamed book.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamRow {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Run seed (absent in reports written before every seed was streamed: seed 0).
    #[serde(default)]
    pub seed: u64,
    /// Training steps of the streamed parameters (absent in reports written before: 0).
    #[serde(default)]
    pub step: u64,
    /// The book.
    pub book: String,
    /// What the stream measured.
    pub result: StreamResult,
    /// The first windows of the book streamed again with the state reset every R windows
    /// ([`streaming::RESET_PERIODS`]; absent in reports written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resets: Vec<streaming::ResetPoint>,
    /// The same book streamed with the node tables the model was trained with, certified to
    /// the training length only: lags past it fall in the SOE's exponential tail, so the
    /// state's mass stays bounded. Memories with node tables only (absent for the others and
    /// in reports written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_trained_horizon: Option<StreamResult>,
    /// The same book streamed with every kernel tempered by e^(-j/τ), τ the training length
    /// ([`vort::block::PastHorizon::Tempered`]). Memories with node tables only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tempered: Option<TemperedStream>,
}

/// A book streamed with tempered kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemperedStream {
    /// The e-folding lag τ.
    pub tau: f64,
    /// What the stream measured.
    pub result: StreamResult,
}

/// One memory (a preset mixer) over seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BooksRow {
    /// The preset's mixer name (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: String,
    /// Seeds aggregated.
    pub seeds: Vec<u64>,
    /// Paper's BPC at context > 4096, if it reports one.
    pub paper_long: Option<f64>,
    /// Per context bucket (label, mean bits/char, sample sd).
    pub buckets: Vec<(String, f64, f64)>,
    /// Mean BPC over every scored test byte.
    pub overall: f64,
    /// Mean training throughput (bytes/s).
    pub tokens_per_s: f64,
    /// Mean α on (entity, function-word, other) bytes (the mixers with α samples: VORT and
    /// its routings).
    pub alpha_means: Option<(f64, Option<f64>, f64)>,
}

/// What [`run`] returns (and writes as results.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BooksReport {
    /// "quick" or "full".
    pub label: String,
    /// Aggregate rows.
    pub rows: Vec<BooksRow>,
    /// Every run's evaluation (α samples stripped).
    pub runs: Vec<EvalResult>,
    /// Every run's throughput (bytes/s), aligned with `runs`.
    pub tokens_per_s: Vec<f64>,
    /// Streamed test book per model of [`STREAMED`].
    pub streams: Vec<StreamRow>,
    /// The seed-0 models' samples ([`samples`]; absent in files written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<samples::SampleRow>,
    /// The retrieval probe of every seed-0 model (absent in reports written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrieval: Vec<retrieval::RetrievalRow>,
    /// Seed-0 runs without a retrieval probe, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_probed: Vec<Skipped>,
    /// Every seed-0 model's test books streamed whole (presets with `whole_books`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub whole_books: Vec<whole_books::WholeBooksRow>,
    /// Seed-0 runs not streamed whole, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_whole_books: Vec<Skipped>,
    /// Runs reused from an earlier call (finished, same config) rather than trained.
    pub reused: usize,
    /// Runs that diverged (left out of the rows and figures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diverged: Vec<DivergedRun>,
    /// Runs not finished, left out (`--report-only`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Wall time of this call (s).
    pub wall_s: f64,
    /// Compressors on the scored test bytes ([`anchors`]; absent in files written before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchors: Option<anchors::Anchors>,
    /// Every finished run's training curve ([`curves`]; absent in files written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<curves::CurveRow>,
    /// Finished runs of a [`STREAMED`] kind that are not streamed, and why (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_streamed: Vec<Skipped>,
    /// Finished seed-0 runs that draw no sample, and why (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_sampled: Vec<Skipped>,
}

/// Runs the books reproduction of `scale` on `data_dir` into `out_dir`.
///
/// # Errors
/// Missing books data (say how to fetch it), training, plot and I/O errors.
pub fn run(scale: Scale, data_dir: &str, out_dir: &Path) -> Result<BooksReport, TrainError> {
    let runs = plan(scale, data_dir)?;
    run_plan(
        scale.name(),
        &runs,
        out_dir,
        stream_bytes(scale),
        runner::Mode::train(true),
    )
}

/// Runs `runs` (books runs, each in `runs/books/<name>/seed<k>`) into `out_dir`, writes the
/// weights of every seed-0 model (`weights.safetensors`), then streams up to `stream_bytes`
/// of the first test book through every model of each kind in [`STREAMED`] and draws a
/// sample from every seed-0 model (but a model with oracle routing: [`NEEDS_MARKS`]). With
/// [`runner::Mode::report_only`] nothing is trained: the report covers the finished runs and
/// lists the others.
///
/// # Errors
/// As [`run`].
pub fn run_plan(
    label: &str,
    runs: &[NamedRun],
    out_dir: &Path,
    stream_bytes: usize,
    mode: runner::Mode,
) -> Result<BooksReport, TrainError> {
    run_plan_with(label, runs, out_dir, (stream_bytes, false), mode)
}

/// [`run_plan`], and with `whole_books` every seed-0 model also streams every test book whole,
/// carried and reset ([`whole_books`]: the report's section and figure).
///
/// # Errors
/// As [`run`].
pub fn run_plan_with(
    label: &str,
    runs: &[NamedRun],
    out_dir: &Path,
    (stream_bytes, whole): (usize, bool),
    mode: runner::Mode,
) -> Result<BooksReport, TrainError> {
    let progress = mode.progress;
    let t0 = std::time::Instant::now();
    // fail before writing anything when the books are missing or corrupt; the corpus is
    // kept for the streaming evaluation (the runs of a plan share one data directory)
    let corpus = match runs.first() {
        Some(r) => Some(BookCorpus::open(&r.config.task)?),
        None => None,
    };
    std::fs::create_dir_all(out_dir).map_err(|e| train::checkpoint::io(out_dir, e))?;
    if let Some(r) = runs.first() {
        record_data(
            Path::new(&r.config.task.data_dir().unwrap_or_default()),
            out_dir,
        )?;
    }
    let trained = train_named(runs, out_dir, mode)?;
    release_seed0_weights(&trained.configs, &trained.results, out_dir)?;
    let ((streams, not_streamed), (samples, not_sampled)) = match &corpus {
        Some(corpus) => (
            streaming::measure(
                &trained.configs,
                &trained.results,
                corpus,
                out_dir,
                stream_bytes,
                progress,
            )?,
            samples::measure(&trained.configs, &trained.results, corpus, out_dir)?,
        ),
        None => Default::default(),
    };
    let ((probes, not_probed), whole) = match &corpus {
        Some(corpus) => probe_seed0(&trained, corpus, out_dir, (stream_bytes, whole), progress)?,
        None => Default::default(),
    };
    let anchors = match (&corpus, runs.first()) {
        (Some(k), Some(r)) => Some(anchors::measure(
            k,
            r.config.task.seq_len,
            r.config.train.eval_sequences,
            progress,
        )?),
        _ => None,
    };
    let curves = curves::measure(&trained.configs, &trained.results, out_dir);
    let routed = alpha::measure(&trained.configs, &trained.results, out_dir, progress);
    let measured = Measured {
        results: trained.results,
        tps: trained.tokens_per_s,
        reused: trained.reused,
        diverged: trained.diverged,
        pending: trained.pending,
        streams,
        samples,
        probes,
        not_probed,
        whole,
        anchors,
        curves,
        routed,
        not_streamed,
        not_sampled,
    };
    write_report(label, runs, measured, t0, out_dir)
}

/// What a measurement of the seed-0 models gives: a row per model, and the runs left out.
type Probed<R> = (Vec<R>, Vec<Skipped>);

/// The seed-0 models' retrieval probes (streams of at most `stream_bytes`) and, with
/// `whole`, their whole-books streams, each with the runs left out.
///
/// # Errors
/// Streaming and I/O errors.
fn probe_seed0(
    trained: &runner::TrainedRuns,
    corpus: &BookCorpus,
    out_dir: &Path,
    (stream_bytes, whole): (usize, bool),
    progress: bool,
) -> Result<
    (
        Probed<retrieval::RetrievalRow>,
        Probed<whole_books::WholeBooksRow>,
    ),
    TrainError,
> {
    let (configs, results) = (&trained.configs, &trained.results);
    let probes = retrieval::measure(configs, results, corpus, out_dir, (stream_bytes, progress))?;
    let whole = match whole {
        true => whole_books::measure(configs, results, corpus, out_dir, progress)?,
        false => Default::default(),
    };
    Ok((probes, whole))
}

/// Writes the weights of every seed-0 run (`runs` with `results`): the report's samples and
/// probes, and the weights a reader re-scores (`vort eval --run DIR` reads
/// weights.safetensors where no checkpoint is kept).
///
/// # Errors
/// I/O errors.
fn release_seed0_weights(
    runs: &[RunConfig],
    results: &[EvalResult],
    out_dir: &Path,
) -> Result<(), TrainError> {
    for (c, e) in runs.iter().zip(results).filter(|(c, _)| c.seed == 0) {
        let dir = train::RunDir::new(out_dir.join(crate::reproduce::run_path(e.label(), c)));
        if dir.has_checkpoint() {
            dir.release_weights()?;
        }
    }
    Ok(())
}

/// What the runs of a plan measured, for the report.
struct Measured {
    /// Every run's evaluation, in plan order.
    results: Vec<EvalResult>,
    /// Every run's throughput (bytes/s).
    tps: Vec<f64>,
    /// Runs reused from an earlier call.
    reused: usize,
    /// Runs that diverged (left out of the rows).
    diverged: Vec<DivergedRun>,
    /// Runs not finished (report only).
    pending: Vec<String>,
    /// The streamed test book.
    streams: Vec<StreamRow>,
    /// The seed-0 models' samples.
    samples: Vec<samples::SampleRow>,
    /// The seed-0 models' retrieval probes.
    probes: Vec<retrieval::RetrievalRow>,
    /// Seed-0 runs without a probe, and why.
    not_probed: Vec<Skipped>,
    /// The seed-0 models' whole-books streams, and the runs left out.
    whole: (Vec<whole_books::WholeBooksRow>, Vec<Skipped>),
    /// The compressor anchors.
    anchors: Option<anchors::Anchors>,
    /// Every finished run's training curve.
    curves: Vec<curves::CurveRow>,
    /// The routed runs with their router's inputs.
    routed: Vec<alpha::Routed>,
    /// Runs of a streamed kind left unstreamed, and why.
    not_streamed: Vec<Skipped>,
    /// Seed-0 runs without a sample, and why.
    not_sampled: Vec<Skipped>,
}

/// Writes the figures, results.json and report.md of what `runs` measured into `out_dir`
/// (the wall time counted from `t0`).
fn write_report(
    label: &str,
    runs: &[NamedRun],
    m: Measured,
    t0: std::time::Instant,
    out_dir: &Path,
) -> Result<BooksReport, TrainError> {
    let rows = rows(&m.results, &m.tps);
    context::figure(&m.results, out_dir)?;
    streaming::figure(&m.streams, out_dir)?;
    alpha::figure(&m.routed, out_dir)?;
    curves::figure(&m.curves, out_dir)?;
    let stripped = m
        .results
        .into_iter()
        .map(EvalResult::without_alpha_samples)
        .collect();
    let report = BooksReport {
        label: label.into(),
        rows,
        runs: stripped,
        tokens_per_s: m.tps,
        streams: m.streams,
        samples: m.samples,
        retrieval: m.probes,
        not_probed: m.not_probed,
        whole_books: m.whole.0,
        not_whole_books: m.whole.1,
        reused: m.reused,
        diverged: m.diverged,
        pending: m.pending,
        wall_s: t0.elapsed().as_secs_f64(),
        anchors: m.anchors,
        curves: m.curves,
        not_streamed: m.not_streamed,
        not_sampled: m.not_sampled,
    };
    anchors::report_figure(&report, out_dir)?;
    whole_books::figure(&report, out_dir)?;
    streaming::diagnostics_figure(&report, out_dir)?;
    runner::write_report(out_dir, &report, &markdown(&report, runs, &m.routed))?;
    Ok(report)
}

/// One aggregate row per memory that has runs ([`Memories`] order): mean ± sd over seeds of
/// the BPC by context bucket, the overall BPC, throughput, and the α means of VORT's kind.
fn rows(results: &[EvalResult], tps: &[f64]) -> Vec<BooksRow> {
    let mut rows = Vec::new();
    let memories = Memories::new(results.iter().map(|r| r.label()), &crate::reproduce::KINDS);
    for memory in memories.order() {
        let idx: Vec<usize> = (0..results.len())
            .filter(|&i| results[i].label() == memory)
            .collect();
        let buckets = (0..CONTEXT_BUCKETS.len())
            .map(|b| {
                let v: Vec<f64> = idx.iter().map(|&i| results[i].buckets[b].bits()).collect();
                let (m, sd) = mean_sd(&v);
                (CONTEXT_BUCKETS[b].0.to_string(), m, sd)
            })
            .collect();
        let alphas: Vec<_> = idx
            .iter()
            .filter_map(|&i| results[i].alpha.as_ref())
            .collect();
        let mean = |f: &dyn Fn(&&crate::train::eval::AlphaSample) -> f64| {
            alphas.iter().map(f).sum::<f64>() / alphas.len() as f64
        };
        rows.push(BooksRow {
            mixer: memory.to_string(),
            seeds: idx.iter().map(|&i| results[i].seed).collect(),
            paper_long: paper_bpc(memory),
            buckets,
            overall: mean_sd(
                &idx.iter()
                    .map(|&i| results[i].loss / std::f64::consts::LN_2)
                    .collect::<Vec<_>>(),
            )
            .0,
            tokens_per_s: mean_sd(&idx.iter().map(|&i| tps[i]).collect::<Vec<_>>()).0,
            alpha_means: (!alphas.is_empty()).then(|| {
                (
                    mean(&|a| a.mean_memorable),
                    alphas
                        .iter()
                        .all(|a| a.mean_function.is_some())
                        .then(|| mean(&|a| a.mean_function.unwrap_or(f64::NAN))),
                    mean(&|a| a.mean_other),
                )
            }),
        });
    }
    rows
}

/// Copies the books manifest (book, bytes, split, checksum) beside the report and writes the
/// lexicon's provenance (sources, entry counts) as `lexicon_sources.json`, so a committed
/// report names exactly the data it was measured on.
fn record_data(data_dir: &Path, out_dir: &Path) -> Result<(), TrainError> {
    let manifest = data_dir.join("manifest.json");
    let bytes = std::fs::read(&manifest).map_err(|e| train::checkpoint::io(&manifest, e))?;
    train::checkpoint::write_atomic(&out_dir.join("manifest.json"), &bytes)?;
    let lex = crate::data::lexicon::Lexicon::load(data_dir)
        .map_err(|e| TrainError::Task(crate::tasks::TaskError::Data(e.to_string())))?;
    let info = serde_json::json!({
        "entities": lex.entities.len(),
        "function_words": lex.function_words.len(),
        "sources": lex.sources,
    });
    train::checkpoint::write_json(&out_dir.join("lexicon_sources.json"), &info)
}

/// The report: what was run and in which setting, then the sections (BPC by context and the
/// verdicts, the learned orders, the streamed book), then how to read it.
fn markdown(rep: &BooksReport, runs: &[NamedRun], routed: &[alpha::Routed]) -> String {
    let mut s = intro(rep, runs);
    s += &context::markdown(rep, runs);
    s += &anchors::report_markdown(rep);
    s += &curves::markdown(rep);
    s += &alpha::markdown(rep, routed);
    s += &streaming::markdown(rep);
    s += &samples::markdown(rep);
    s += &retrieval::markdown(rep);
    s += &whole_books::markdown(rep);
    s += "Reading: numbers that do not match the paper are reported as measured.\n";
    s
}

/// The title, the runs and how they are scored, and the setting.
fn intro(rep: &BooksReport, runs: &[NamedRun]) -> String {
    let mut s = format!(
        "# VORT book language modelling: `{}` reproduction\n\n{} runs ({} reused from an earlier call), \
         wall time of this call {:.0} s. \
         Test bits per character (byte-level, so exact BPC), mean ± sample standard deviation \
         over seeds, by context (the byte's position in its window). The paper's numbers are \
         at context > 4096 on a PG-19 subset (docs/DESIGN.md §3); its \"power law\" row is shown beside \
         both VORT and the fixed-order power law.\n\n",
        rep.label,
        runs.len(),
        rep.reused,
        rep.wall_s
    );
    s += &runner::pending_markdown(&rep.pending);
    s += &runner::diverged_markdown(&rep.diverged);
    if let Some(c) = runs.first().map(|r| &r.config) {
        s += &format!(
            "Setting: T = {} bytes, model d_model = {}, {} layer(s), {} heads × {}, {} \
             features, {} steps × {} sequences{}. Scored: \
             {} test windows of {} bytes (windows tile the test books in manifest order; \
             fewer windows than the books hold all come from the first). Full configs: \
             `runs/books/<memory>/seed<k>/config.toml`; books: `{}/manifest.json`.\n\n",
            c.task.seq_len,
            c.model.d_model,
            c.model.layers,
            c.model.heads,
            c.model.head_dim,
            c.model.features,
            c.train.steps,
            c.train.batch_size,
            // a preset without softmax has nothing to say about its window
            runs.iter()
                .find_map(|r| match r.config.model.mixer {
                    Mixer::Softmax { window } => {
                        Some(format!("; softmax attends to the last {window} bytes"))
                    }
                    _ => None,
                })
                .unwrap_or_default(),
            rep.runs.first().map_or(0, |r| r.sequences),
            c.task.seq_len,
            c.task.data_dir().unwrap_or_default()
        );
    }
    s
}
