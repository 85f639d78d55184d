//! Held-out evaluation: accuracy and cross-entropy at answer positions by lag bucket (1-100,
//! 101-1000, >1000; for books the context buckets 0-512, ..., > 4096, where the cross-entropy
//! in bits is the BPC) and in doubling lag bins (for plots against lag or context), plus the
//! learned orders α of a VORT model on memorable tokens (keys, values, entities, labels), on
//! function words (books) and on the rest.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use serde::{Deserialize, Serialize};

use super::{checkpoint, marks_tensor, tokens_tensor, RunConfig, RunDir, TrainError};
use crate::tasks::{bucket_in, roles, Source, Stream, TaskKind};
use vort::model::Model;

/// Most α values kept per class in [`AlphaSample`].
pub const ALPHA_SAMPLES: usize = 20_000;

/// Accuracy over a lag range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LagAccuracy {
    /// Label ("1-100", ...).
    pub label: String,
    /// Smallest lag (inclusive).
    pub lo: usize,
    /// Largest lag (inclusive).
    pub hi: usize,
    /// Answers in range.
    pub n: usize,
    /// Correct answers.
    pub correct: usize,
    /// correct / n (NaN when n = 0; written as null in JSON).
    #[serde(deserialize_with = "nan_if_null")]
    pub accuracy: f64,
    /// Mean cross-entropy in nats (NaN when n = 0); / ln 2 = bits per token.
    #[serde(default, deserialize_with = "nan_if_null")]
    pub nll: f64,
    /// Sample standard deviation of the cross-entropy over the range's positions, nats (NaN
    /// below 2 positions, and in files written before it existed).
    #[serde(default = "nan", deserialize_with = "nan_if_null")]
    pub nll_sd: f64,
}

fn nan() -> f64 {
    f64::NAN
}

/// JSON has no NaN: serde_json writes it as null, so read null back as NaN (otherwise an
/// eval.json with an empty bin could not be read, and a finished run would not be reused).
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl LagAccuracy {
    /// Mean cross-entropy in bits (bits per character for the byte-level books task).
    pub fn bits(&self) -> f64 {
        self.nll / std::f64::consts::LN_2
    }
}

/// Learned orders α of the VORT blocks (all layers and heads) on the evaluation set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlphaSample {
    /// Mean α on memorable tokens (keys, values, entities, labels).
    pub mean_memorable: f64,
    /// Mean α on the other tokens (filler, query markers, repeats; books: not entity or
    /// function word).
    pub mean_other: f64,
    /// Mean α on function-word bytes (books only).
    #[serde(default)]
    pub mean_function: Option<f64>,
    /// Up to [`ALPHA_SAMPLES`] α values on memorable tokens.
    pub memorable: Vec<f32>,
    /// Up to [`ALPHA_SAMPLES`] α values on the other tokens.
    pub other: Vec<f32>,
    /// Up to [`ALPHA_SAMPLES`] α values on function-word bytes (books only).
    #[serde(default)]
    pub function: Vec<f32>,
    /// MQAR and label copy: mean α by role of the token, in the order of
    /// [`crate::tasks::roles::roles`] (MQAR: key, value, query, filler; label copy: entity,
    /// label, query, filler).
    #[serde(default)]
    pub mean_by_role: Vec<(String, f64)>,
}

pub use crate::tasks::roles::{mqar_role, MQAR_ROLES};

/// Result of [`evaluate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalResult {
    /// The task (its config name in the JSON: "mqar", "books", "zipf", "label-copy").
    pub task: TaskKind,
    /// The mixer's kind (`memory` in older files; a preset's label for the mixer lives in
    /// the report, beside it).
    #[serde(alias = "memory")]
    pub mixer: vort::MixerKind,
    /// The run's name in a report that names its mixers (a preset's label, such as
    /// `power-law-0.95`), set by the report that loads the run: in a report's results.json,
    /// never in eval.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Run seed.
    pub seed: u64,
    /// Training steps of the evaluated parameters.
    pub step: u64,
    /// Held-out sequences.
    pub sequences: usize,
    /// Overall accuracy at answer positions.
    #[serde(deserialize_with = "nan_if_null")]
    pub accuracy: f64,
    /// Answer (labelled) positions scored.
    #[serde(default)]
    pub positions: usize,
    /// Mean answer cross-entropy.
    #[serde(deserialize_with = "nan_if_null")]
    pub loss: f64,
    /// Accuracy by report bucket ([`crate::tasks::TaskConfig::buckets`]).
    pub buckets: Vec<LagAccuracy>,
    /// Accuracy in doubling lag bins \[1,1\], \[2,3\], \[4,7\], ...
    pub lag_bins: Vec<LagAccuracy>,
    /// Orders α (VORT only).
    pub alpha: Option<AlphaSample>,
    /// Books: every scored byte by test book (label: the title; lags 1..=T), in the order
    /// scored. Empty for the synthetic tasks (and in files written before it existed).
    #[serde(default)]
    pub per_book: Vec<LagAccuracy>,
    /// Books: every scored window (held-out sequence) on its own, in order, by report bucket,
    /// so that two memories scored on the same windows can be compared window by window
    /// (paired differences). Empty for the synthetic tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_window: Vec<WindowScore>,
    /// `vort eval --data` only: the lags the memory's node tables were certified to for the
    /// data (its length, when longer than the training length: the tables are rebuilt for
    /// it), and the training length. Absent from a run's own evaluation (eval.json).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<DataHorizon>,
}

/// The horizon `vort eval --data` scored at ([`EvalResult::horizon`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataHorizon {
    /// Length of the data's sequences.
    pub data_len: usize,
    /// The config's training length (seq_len).
    pub train_len: usize,
    /// The lags the memory was certified to while scoring (None: a memory without node
    /// tables, such as softmax).
    pub certified: Option<u64>,
    /// True when the node tables were rebuilt for a data length above the training one.
    pub rebuilt: bool,
}

impl EvalResult {
    /// The run's name in its report: [`EvalResult::label`] when a report set it, else the
    /// mixer's kind.
    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(self.mixer.name())
    }

    /// The result without its raw α samples (see [`AlphaSample::without_samples`]).
    pub fn without_alpha_samples(mut self) -> EvalResult {
        self.alpha = self.alpha.map(AlphaSample::without_samples);
        self
    }
}

impl AlphaSample {
    /// The means without the raw samples: what a report's results.json keeps (the samples
    /// are in each run's eval.json).
    pub fn without_samples(mut self) -> AlphaSample {
        self.memorable.clear();
        self.other.clear();
        self.function.clear();
        self
    }
}

/// One held-out window's scores by report bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowScore {
    /// Σ cross-entropy (nats) of the scored positions of each bucket.
    pub nll: Vec<f64>,
    /// Scored positions of each bucket.
    pub n: Vec<usize>,
}

impl WindowScore {
    /// Mean bits per scored position in bucket `b` (NaN when it has none).
    pub fn bits(&self, b: usize) -> f64 {
        match (self.nll.get(b), self.n.get(b)) {
            (Some(&x), Some(&n)) if n > 0 => x / n as f64 / std::f64::consts::LN_2,
            _ => f64::NAN,
        }
    }
}

/// Running (answers, correct, Σ nll, Σ nll²) of one lag range.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    n: usize,
    correct: usize,
    nll: f64,
    nll_sq: f64,
}

impl Tally {
    fn add(&mut self, ok: bool, nll: f64) {
        self.n += 1;
        self.correct += usize::from(ok);
        self.nll += nll;
        self.nll_sq += nll * nll;
    }
    fn row(&self, label: String, lo: usize, hi: usize) -> LagAccuracy {
        let mean = |x: f64| {
            if self.n == 0 {
                f64::NAN
            } else {
                x / self.n as f64
            }
        };
        LagAccuracy {
            label,
            lo,
            hi,
            n: self.n,
            correct: self.correct,
            accuracy: mean(self.correct as f64),
            nll: mean(self.nll),
            nll_sd: if self.n < 2 {
                f64::NAN
            } else {
                let m = self.nll / self.n as f64;
                ((self.nll_sq - self.n as f64 * m * m) / (self.n - 1) as f64)
                    .max(0.0)
                    .sqrt()
            },
        }
    }
}

/// α values of one token class: running mean and a bounded sample.
#[derive(Debug, Default)]
struct AlphaClass {
    sum: f64,
    n: usize,
    sample: Vec<f32>,
}

impl AlphaClass {
    /// Adds `x`; `keep` says whether it may enter the (bounded) sample.
    fn add(&mut self, x: f32, keep: bool) {
        self.sum += f64::from(x);
        self.n += 1;
        if keep && self.sample.len() < ALPHA_SAMPLES {
            self.sample.push(x);
        }
    }
    fn mean(&self) -> f64 {
        self.sum / self.n.max(1) as f64
    }
}

/// Cross-entropy (nats) of each row of `logits` [P, V] at `targets` [P].
fn row_nll(logits: &Tensor, targets: &[u32]) -> Result<Vec<f64>, TrainError> {
    let lp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let idx = Tensor::from_vec(targets.to_vec(), (targets.len(), 1), logits.device())?;
    let picked: Vec<f32> = lp.gather(&idx, 1)?.flatten_all()?.to_vec1()?;
    Ok(picked.into_iter().map(|x| -f64::from(x)).collect())
}

/// Doubling lag bins \[1,1\], \[2,3\], \[4,7\], ... covering 1..=`max_lag`. When `max_lag` is a
/// power of two the bin [max_lag, max_lag] would hold one byte per books window (a noisy
/// last point on every BPC curve), so it joins the bin before it.
pub fn doubling_bins(max_lag: usize) -> Vec<(usize, usize)> {
    let mut bins = Vec::new();
    let mut lo = 1;
    while lo <= max_lag {
        let hi = if 2 * lo == max_lag {
            max_lag
        } else {
            (2 * lo - 1).min(max_lag)
        };
        bins.push((lo, hi));
        lo = hi + 1;
    }
    bins
}

/// Evaluates `model` on `train.eval_sequences` held-out sequences of `source` (at most the
/// source's distinct ones: books' test windows are not scored twice).
///
/// # Errors
/// candle errors.
pub fn evaluate(
    model: &Model,
    source: &Source,
    cfg: &RunConfig,
    step: u64,
    device: &Device,
) -> Result<EvalResult, TrainError> {
    let n_seq = eval_count(source, cfg);
    evaluate_stream(model, source, cfg, step, Stream::Eval, n_seq, None, device)
}

/// How many held-out sequences [`evaluate`] scores: MQAR its own test-set size (Zoology's
/// num_test_examples), the other tasks `train.eval_sequences`, at most the source's distinct
/// ones.
pub fn eval_count(source: &Source, cfg: &RunConfig) -> usize {
    let wanted = cfg
        .task
        .mqar()
        .map_or(cfg.train.eval_sequences, |m| m.test_examples);
    source.eval_len().map_or(wanted, |n| n.min(wanted))
}

/// Logits [P, V] at the flat answer positions `pos` of `tokens` [B, T], computed by
/// streaming the sequences in pieces of `piece` tokens with the state carried
/// ([`Model::forward_with_state`]): memory flat in T for the retention memories.
fn streamed_logits(
    model: &Model,
    (tokens, marks): (&Tensor, &Tensor),
    pos: &[usize],
    piece: usize,
) -> Result<Tensor, TrainError> {
    let (_, t) = tokens.dims2()?;
    let mut state = model.new_state();
    let mut parts = Vec::new();
    let mut order = Vec::new(); // index into pos of each row of `parts`, in piece order
    let mut lo = 0;
    while lo < t {
        let len = piece.min(t - lo);
        let out = model.forward_marked(
            &tokens.narrow(1, lo, len)?,
            Some(&marks.narrow(1, lo, len)?),
            Some(&mut state),
        )?;
        let mut local = Vec::new();
        for (k, &p) in pos.iter().enumerate() {
            let (i, j) = (p / t, p % t);
            if (lo..lo + len).contains(&j) {
                local.push(i * len + (j - lo));
                order.push(k);
            }
        }
        if !local.is_empty() {
            // detached: a kept tensor keeps its whole autograd graph alive (every piece's
            // attention probabilities; a 32K-token softmax stream reached 23 GB and was killed)
            parts.push(model.logits_at(&out.hidden, &local)?.detach());
        }
        lo += len;
    }
    if parts.is_empty() {
        return Ok(Tensor::zeros(
            (0, model.vocab),
            DType::F32,
            tokens.device(),
        )?);
    }
    let all = Tensor::cat(&parts, 0)?;
    // back to the order of `pos`
    let mut inverse = vec![0u32; order.len()];
    for (row, &k) in order.iter().enumerate() {
        inverse[k] = row as u32;
    }
    let idx = Tensor::from_vec(inverse, order.len(), all.device())?;
    Ok(all.index_select(&idx, 0)?)
}

/// The logits [answers, vocab] at the flat positions `pos` of `batch`, and the orders α of
/// one forward pass over the whole batch (`piece` None), or streamed in pieces of `piece`
/// tokens with the state carried (no α then).
///
/// # Errors
/// candle errors.
pub fn answer_logits(
    model: &Model,
    batch: &crate::tasks::Batch,
    pos: &[usize],
    piece: Option<usize>,
    device: &Device,
) -> Result<(Tensor, Vec<Tensor>), TrainError> {
    let tokens = tokens_tensor(batch, device)?;
    let marks = marks_tensor(batch, device)?;
    Ok(match piece {
        None => {
            let out = model.forward_marked(&tokens, Some(&marks), None)?;
            (model.logits_at(&out.hidden, pos)?, out.alphas)
        }
        Some(len) => (
            streamed_logits(model, (&tokens, &marks), pos, len)?,
            Vec::new(),
        ),
    })
}

/// Scores `model` on the first `n_seq` sequences of `stream` (held-out test or validation),
/// in one forward pass per batch, or streamed in pieces of `piece` tokens with the state
/// carried (long sequences; no α sample then).
///
/// # Errors
/// candle errors.
#[allow(clippy::too_many_arguments)]
pub fn evaluate_stream(
    model: &Model,
    source: &Source,
    cfg: &RunConfig,
    step: u64,
    stream: Stream,
    n_seq: usize,
    piece: Option<usize>,
    device: &Device,
) -> Result<EvalResult, TrainError> {
    let bs = cfg.train.eval_batch();
    let buckets = cfg.task.buckets();
    // books: the "lag" is the context length, up to seq_len
    let max_lag = cfg.task.lag_limit();
    let bins = doubling_bins(max_lag);
    let mut bin_tally = vec![Tally::default(); bins.len()];
    let mut bucket_tally = vec![Tally::default(); buckets.len()];
    let mut total = Tally::default();
    let mut group_tally: Vec<(String, Tally)> = Vec::new();
    let (mut mem, mut func, mut oth) = (
        AlphaClass::default(),
        AlphaClass::default(),
        AlphaClass::default(),
    );
    let mut role_sums = vec![(0.0f64, 0usize); roles::roles(cfg.task.kind()).len()];
    let mut per_window: Vec<WindowScore> = Vec::new();
    let mut done = 0;
    while done < n_seq {
        let b = bs.min(n_seq - done);
        let samples: Vec<_> = (0..b)
            .map(|i| source.sample(cfg.seed, stream, (done + i) as u64))
            .collect();
        let batch = crate::tasks::Batch::from_samples(&samples);
        let pos = batch.answer_positions();
        let (logits, alphas) = answer_logits(model, &batch, &pos, piece, device)?;
        let pred: Vec<u32> = logits.argmax(D::Minus1)?.to_vec1()?;
        let targets: Vec<u32> = pos.iter().map(|&p| batch.targets[p]).collect();
        let nll = row_nll(&logits, &targets)?;
        // a non-finite score would be averaged into a NaN accuracy or loss and printed with
        // status 0: refuse it (the log-softmax is non-finite iff a logit is)
        if let Some(k) = nll.iter().position(|x| !x.is_finite()) {
            return Err(TrainError::NonFinite(format!(
                "answer {k} of evaluation batch at sequence {done}: cross-entropy {}",
                nll[k]
            )));
        }
        // the group (test or validation book) of each sequence of the batch
        let groups: Vec<Option<usize>> = (0..b)
            .map(|i| {
                source.eval_group(stream, (done + i) as u64).map(|g| {
                    match group_tally.iter().position(|(name, _)| name == g) {
                        Some(j) => j,
                        None => {
                            group_tally.push((g.to_string(), Tally::default()));
                            group_tally.len() - 1
                        }
                    }
                })
            })
            .collect();
        // windows of a grouped (books) source are also kept one by one
        let first_window = per_window.len();
        if groups.iter().any(Option::is_some) {
            per_window.extend((0..b).map(|_| WindowScore {
                nll: vec![0.0; buckets.len()],
                n: vec![0; buckets.len()],
            }));
        }
        for (k, &p) in pos.iter().enumerate() {
            let lag = batch.lags[p] as usize;
            let ok = pred[k] == targets[k];
            total.add(ok, nll[k]);
            if let Some(g) = groups[p / batch.t] {
                group_tally[g].1.add(ok, nll[k]);
            }
            // lag 0: unknown (a scored position of a data file without its pair)
            if lag == 0 {
                continue;
            }
            let bucket = bucket_in(buckets, lag);
            bucket_tally[bucket].add(ok, nll[k]);
            if let Some(w) = per_window.get_mut(first_window + p / batch.t) {
                w.nll[bucket] += nll[k];
                w.n[bucket] += 1;
            }
            if let Some(i) = bins.iter().position(|&(lo, hi)| lag >= lo && lag <= hi) {
                bin_tally[i].add(ok, nll[k]);
            }
        }
        let t = batch.t;
        let kind = cfg.task.kind();
        let (pairs, by_role) = (
            cfg.task.mqar().map(|m| 2 * m.num_kv_pairs),
            roles::tallied(kind),
        );
        for a in &alphas {
            let (bb, h, tt) = a.dims3()?;
            let v: Vec<f32> = a.flatten_all()?.to_vec1()?;
            for i in 0..bb {
                for hh in 0..h {
                    for j in 0..tt {
                        let x = v[(i * h + hh) * tt + j];
                        let f = i * t + j;
                        // keep a spread-out subset of the (many) frequent-class tokens
                        let spread = (j + 7 * hh) % 16 == 0;
                        if by_role {
                            let role = roles::role_of(&batch, kind, pairs, i, j);
                            role_sums[role].0 += f64::from(x);
                            role_sums[role].1 += 1;
                        }
                        if batch.memorable[f] {
                            mem.add(x, true);
                        } else if batch.function[f] {
                            func.add(x, spread);
                        } else {
                            oth.add(x, spread);
                        }
                    }
                }
            }
        }
        done += b;
    }
    let overall = total.row(String::new(), 1, max_lag);
    Ok(EvalResult {
        task: cfg.task.kind(),
        mixer: cfg.model.mixer.kind(),
        label: None,
        seed: cfg.seed,
        step,
        sequences: n_seq,
        accuracy: overall.accuracy,
        positions: overall.n,
        loss: overall.nll,
        buckets: buckets
            .iter()
            .zip(&bucket_tally)
            .map(|(&(label, lo, hi), t)| t.row(label.into(), lo, hi.min(max_lag)))
            .collect(),
        lag_bins: bins
            .iter()
            .zip(&bin_tally)
            .map(|(&(lo, hi), t)| t.row(format!("{lo}-{hi}"), lo, hi))
            .collect(),
        alpha: if mem.n + func.n + oth.n > 0 {
            Some(AlphaSample {
                mean_memorable: mem.mean(),
                mean_other: oth.mean(),
                mean_function: (func.n > 0).then(|| func.mean()),
                memorable: mem.sample,
                other: oth.sample,
                function: func.sample,
                mean_by_role: roles::roles(cfg.task.kind())
                    .iter()
                    .zip(role_sums)
                    .filter(|(_, (_, n))| *n > 0)
                    .map(|((name, _), (sum, n))| (name.to_string(), sum / n as f64))
                    .collect(),
            })
        } else {
            None
        },
        per_book: group_tally
            .iter()
            .map(|(name, t)| t.row(name.clone(), 1, max_lag))
            .collect(),
        per_window,
        horizon: None,
    })
}

/// Writes an evaluation as pretty JSON (atomically).
///
/// # Errors
/// I/O or serialisation errors.
pub fn write(res: &EvalResult, path: &Path) -> Result<(), TrainError> {
    checkpoint::write_json(path, res)
}

/// Evaluates a trained model on its own held-out set: a run directory (its config.toml and
/// latest checkpoint, or its released weights), where `eval.json` is then written, or a file
/// written by `vort export` (nothing is written).
///
/// # Errors
/// Missing or invalid config, missing, corrupt or mismatched checkpoint.
pub fn run(model_path: &Path) -> Result<EvalResult, TrainError> {
    let (cfg, model, _vm, step) = load_inference(model_path)?;
    let source = Source::open(&cfg.task)?;
    let res = evaluate(&model, &source, &cfg, step, &super::device())?;
    if model_path.is_dir() {
        write(&res, &RunDir::new(model_path).eval_path())?;
    }
    Ok(res)
}

/// Scores the trained model of `run_dir` on the sequences of `data` (a safetensors file in
/// Zoology's format, [`crate::tasks::external`]): accuracy over every labelled position, and
/// by lag where the pair of a query can be found. Longer sequences than the training length
/// are scored with the node tables rebuilt (and certified) for their length; the result's
/// `horizon` says which. Nothing is written.
///
/// # Errors
/// A bad run directory or checkpoint; a data file that is missing, malformed, or holds
/// tokens outside the model's vocabulary (one line naming the file).
pub fn run_on_file(run_dir: &Path, data: &Path) -> Result<EvalResult, TrainError> {
    let trained = TrainedModel::load(run_dir)?;
    // the file is read into memory about three times (its bytes, the tokens, the labels):
    // checked with the model's own estimate before anything is read
    let file_len = std::fs::metadata(data).map_or(0, |m| m.len());
    let (limit, source) = super::memory_limit().unwrap_or((u64::MAX, super::MemorySource::Flag));
    let need = trained
        .cfg
        .estimate_inference_memory(trained.cfg.task.seq_len as u64)
        .total()
        + 3.0 * file_len as f64;
    if need > limit as f64 {
        return Err(TrainError::Flag(format!(
            "--data {}: reading its {:.1} GB with this model needs about {:.1} GB, more than \
             the {:.1} GB limit ({})",
            data.display(),
            file_len as f64 / 1e9,
            need / 1e9,
            limit as f64 / 1e9,
            source.words()
        )));
    }
    let (cfg, mut model, _vm, ck) = trained.build()?;
    let step = ck.step;
    drop(ck);
    let set = crate::tasks::external::LabelledSet::load(data, model.vocab)?;
    // and the forward pass at the data's length, before the node tables are rebuilt for it
    cfg.check_inference_memory(set.l as u64, None)?;
    let mut rebuilt = false;
    if model.horizon().is_some_and(|h| (set.l as u64) > h) {
        model.set_horizon(set.l as u64)?;
        rebuilt = true;
    }
    let horizon = DataHorizon {
        data_len: set.l,
        train_len: cfg.task.seq_len,
        certified: model.horizon(),
        rebuilt,
    };
    let n = set.n;
    let source = Source::with_test_set(&cfg.task, set);
    let mut cfg = cfg;
    cfg.task.seq_len = source.config().seq_len;
    let mut res = evaluate_stream(
        &model,
        &source,
        &cfg,
        step,
        Stream::Eval,
        n,
        None,
        &super::device(),
    )?;
    res.horizon = Some(horizon);
    Ok(res)
}

/// The trained parameters of `run_dir` in a model built from `cfg` instead of the run's own
/// config: the same parameters under another length or horizon (a longer node table, a
/// sliding window for softmax). Every parameter must be in the checkpoint with its shape.
///
/// # Errors
/// A missing or corrupt checkpoint; a parameter missing or of another shape.
pub fn load_params_as(run_dir: &Path, cfg: &RunConfig) -> Result<(Model, VarMap), TrainError> {
    let (ck, ck_path) = inference_checkpoint(run_dir)?;
    let vm = VarMap::new();
    let dev = super::device();
    let model = super::run_model(cfg, &vm, &dev)?;
    for (name, var) in super::named_vars(&vm) {
        let key = format!("param/{name}");
        // a buffer a file written before they were stored lacks keeps its seeded value
        if vort::block::is_buffer(&name) && !ck.tensors.contains_key(&key) {
            continue;
        }
        var.set(&ck.tensor(&key, var.dims(), &dev, &ck_path)?)?;
    }
    Ok((model, vm))
}

/// The parameters of a run for inference: its checkpoint, or its released weights
/// (`weights.safetensors`) when it has no checkpoint; or, when `path` is a file, that file
/// (`vort export`'s weights, or any checkpoint).
///
/// # Errors
/// Neither file; a corrupt one.
pub fn inference_checkpoint(
    path: &Path,
) -> Result<(checkpoint::Checkpoint, std::path::PathBuf), TrainError> {
    if path.is_file() {
        return Ok((checkpoint::Checkpoint::load(path)?, path.to_path_buf()));
    }
    let dir = RunDir::new(path);
    let (ck_path, w_path) = (dir.checkpoint_path(), dir.weights_path());
    let path = if !ck_path.exists() && w_path.exists() {
        w_path
    } else {
        ck_path
    };
    Ok((checkpoint::Checkpoint::load(&path)?, path))
}

/// The run config of a trained model: the run directory's config.toml, or the config in the
/// metadata of an exported file (`path` a file).
///
/// # Errors
/// A missing or invalid config.
fn inference_config(path: &Path, ck: &checkpoint::Checkpoint) -> Result<RunConfig, TrainError> {
    if path.is_file() {
        RunConfig::from_toml(
            &ck.config,
            &format!("{} (metadata `config`)", path.display()),
        )
    } else {
        RunConfig::load(&RunDir::new(path).config_path())
    }
}

/// A trained model's config and parameters as read from a run directory, a checkpoint or an
/// export: the one loader of every command that reads a trained model
/// ([`TrainedModel::load`] then [`TrainedModel::build`]).
#[derive(Debug)]
pub struct TrainedModel {
    /// The run config: every field validated, its memory estimate checked.
    pub cfg: RunConfig,
    /// The checkpoint (or export) read and verified (format, checksum, config).
    pub ck: checkpoint::Checkpoint,
    /// The file it was read from.
    pub ck_path: std::path::PathBuf,
}

impl TrainedModel {
    /// Reads the checkpoint (or the released weights, or the exported file) and its config,
    /// and checks them before anything is allocated: every config field (as `vort train`
    /// checks config.toml), the checkpoint's config against the run's, and the memory
    /// estimate of inference at the config's length against [`super::memory_limit`]. A
    /// checksum-valid export whose config says d_model = 4e9 is refused here (exit status 2)
    /// instead of aborting in the allocator.
    ///
    /// # Errors
    /// A missing, corrupt or mismatched checkpoint; an invalid config; a model too large for
    /// this machine.
    pub fn load(path: &Path) -> Result<TrainedModel, TrainError> {
        let (ck, ck_path) = inference_checkpoint(path)?;
        let cfg = inference_config(path, &ck)?;
        cfg.validate()?;
        ck.check_config(&cfg.to_toml()?, &ck_path)?;
        cfg.check_inference_memory(cfg.task.seq_len as u64, None)
            .map_err(|e| match e {
                // named by the file whose config it is
                TrainError::Config { message, .. } => TrainError::Config {
                    path: ck_path.display().to_string(),
                    message,
                },
                e => e,
            })?;
        Ok(TrainedModel { cfg, ck, ck_path })
    }

    /// Builds the model of the config from the file's tensors through a `VarBuilder`
    /// ([`Model::new`], as a library user loads one), after checking that the file holds
    /// exactly that model's tensors (no unknown tensor, no other mixer's, a step its config can
    /// have reached), every shape, and finite values. Nothing is seeded, except for a file
    /// written before the FAVOR+ projections were stored: those are drawn from the run seed,
    /// once, as when it was trained. The VarMap returned holds every tensor the model reads.
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`] naming the tensor or the step; candle errors.
    pub fn build(self) -> Result<(RunConfig, Model, VarMap, checkpoint::Checkpoint), TrainError> {
        let TrainedModel { cfg, ck, ck_path } = self;
        let dev = super::device();
        let model_cfg = cfg.model_config();
        let shapes = Model::tensor_shapes(&model_cfg)?;
        let (buffers, names): (Vec<String>, Vec<String>) = shapes
            .iter()
            .map(|(n, _)| n.clone())
            .partition(|n| vort::block::is_buffer(n));
        let stored = ck.check_contents(cfg.train.steps, (&names, &buffers), &ck_path)?;
        let vm = VarMap::new();
        {
            let mut vars = vm
                .data()
                .lock()
                .map_err(|_| candle_core::Error::Msg("VarMap lock poisoned".into()))?;
            for (name, shape) in shapes
                .iter()
                .filter(|(n, _)| stored || !vort::block::is_buffer(n))
            {
                let key = format!("param/{name}");
                // a checksum-valid file can still hold NaN: refused here, not at scoring time
                if let Some(i) = ck
                    .tensors
                    .get(&key)
                    .and_then(|h| h.data.iter().position(|x| !x.is_finite()))
                {
                    return Err(TrainError::CheckpointMismatch {
                        path: ck_path.display().to_string(),
                        reason: format!(
                            "parameter `{name}` holds a non-finite value at flat index {i}"
                        ),
                    });
                }
                let t = ck.tensor(&key, shape, &dev, &ck_path)?;
                vars.insert(name.clone(), candle_core::Var::from_tensor(&t)?);
            }
        }
        if !stored {
            // every parameter is present, so this writes the projections only
            Model::init(&model_cfg, cfg.seed, &vm, &dev)?;
        }
        let model = Model::new(&model_cfg, VarBuilder::from_varmap(&vm, DType::F32, &dev))?;
        Ok((cfg, model, vm, ck))
    }
}

/// The run config of a trained model (a run directory or a file written by `vort export`),
/// checked as [`TrainedModel`] checks it (its tensors included), without reading the task's data.
///
/// # Errors
/// A path that is neither, or a missing, corrupt, invalid or mismatched config or checkpoint.
pub fn trained_config(path: &Path) -> Result<RunConfig, TrainError> {
    TrainedModel::load(path)?.build().map(|(cfg, ..)| cfg)
}

/// A run's trained model for inference only: built from the run's config and the checkpoint's
/// parameters, without opening the task's data (a run directory, or a file written by `vort
/// export`, is enough to generate from).
///
/// # Errors
/// A missing or corrupt config or checkpoint, or a checkpoint whose parameters do not match
/// the config's model.
pub fn load_inference_model(path: &Path) -> Result<(RunConfig, Model, VarMap), TrainError> {
    load_inference(path).map(|(c, m, vm, _)| (c, m, vm))
}

/// [`load_inference_model`], with the training steps of the parameters.
///
/// # Errors
/// As [`load_inference_model`].
pub fn load_inference(path: &Path) -> Result<(RunConfig, Model, VarMap, u64), TrainError> {
    load_checked(path).map(|(c, m, vm, ck)| (c, m, vm, ck.step))
}

/// [`load_inference`], keeping the checkpoint it loaded (read and verified once).
fn load_checked(
    path: &Path,
) -> Result<(RunConfig, Model, VarMap, checkpoint::Checkpoint), TrainError> {
    TrainedModel::load(path)?.build()
}

/// Writes the trained weights of `path` (a run directory or a checkpoint file) to `out`:
/// the parameters and buffers (`param/<name>`, f32; the FAVOR+ projections written from the
/// run seed where the file predates them), with the format, step, run config and checksum
/// in the safetensors metadata (docs/checkpoint.md). Atomic; returns (tensors, step).
///
/// # Errors
/// A missing, corrupt or mismatched checkpoint or config; I/O.
pub fn export(path: &Path, out: &Path) -> Result<(usize, u64), TrainError> {
    // the output rule first (not a run file, not inside the run read): nothing is loaded
    // for an output that would be refused
    super::check_output(out, &super::protected_paths(path)).map_err(|e| {
        if vort::fsio::is_refused(&e) {
            TrainError::Flag(format!("--out {e}"))
        } else {
            checkpoint::io(out, e)
        }
    })?;
    // load the model first: an export is only written if it loads back into its config
    let (cfg, _, vm, ck) = load_checked(path)?;
    let step = ck.step;
    let mut w = ck.weights_only();
    // an export carries the buffers: those of a file written before they were stored are
    // written once, from the run seed (what the loaded model computes with)
    for (name, var) in super::buffer_vars(&vm) {
        if let std::collections::btree_map::Entry::Vacant(slot) =
            w.tensors.entry(format!("param/{name}"))
        {
            slot.insert(checkpoint::HostTensor::of(var.as_tensor())?);
        }
    }
    let n = w.tensors.len();
    if n != super::named_vars(&vm).len() {
        return Err(TrainError::CheckpointMismatch {
            path: path.display().to_string(),
            reason: format!(
                "{n} parameter tensors, the model of its config has {}",
                super::named_vars(&vm).len()
            ),
        });
    }
    w.save_export(out, &cfg.model_config())?;
    Ok((n, step))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An eval.json records the mixer's kind typed: old files (`memory`) load into it, a
    /// name that is not a kind is refused, and a report's label is written only when set.
    #[test]
    fn eval_json_carries_the_mixer_kind_typed() {
        let old = r#"{"task": "mqar", "memory": "power-law", "seed": 1, "step": 2,
            "sequences": 3, "accuracy": 0.5, "loss": null, "buckets": [], "lag_bins": [],
            "alpha": null}"#;
        let e: EvalResult = serde_json::from_str(old).unwrap();
        assert_eq!(
            (e.mixer, e.label()),
            (vort::MixerKind::PowerLaw, "power-law")
        );
        assert!(e.loss.is_nan());
        let stored = serde_json::to_string(&e).unwrap();
        assert!(stored.contains(r#""mixer":"power-law""#) && !stored.contains("label"));
        let bad = old.replace(r#""power-law""#, r#""power-law-0.95""#);
        assert!(serde_json::from_str::<EvalResult>(&bad).is_err());
        let named = EvalResult {
            label: Some("power-law-0.95".into()),
            ..e
        };
        assert_eq!(named.label(), "power-law-0.95");
        let report = serde_json::to_string(&named).unwrap();
        let back: EvalResult = serde_json::from_str(&report).unwrap();
        assert_eq!(
            (back.mixer, back.label()),
            (vort::MixerKind::PowerLaw, "power-law-0.95")
        );
    }

    /// Streamed logits keep no autograd graph, so the pieces' intermediate tensors are freed
    /// as the stream goes (a regression: they were all kept until the end of the sequence).
    #[test]
    fn streamed_logits_hold_no_graph() {
        use vort::model::ModelConfig;
        let dev = Device::Cpu;
        for mixer in [vort::Mixer::Softmax { window: 0 }, vort::Mixer::default()] {
            let cfg = ModelConfig {
                mixer,
                d_model: 16,
                layers: 2,
                heads: 2,
                head_dim: 8,
                features: 8,
                chunk: 8,
                mlp_mult: 0,
                token_shift: false,
                short_conv: 3,
                ..ModelConfig::default()
            };
            let vm = VarMap::new();
            let model =
                Model::seeded(&vort::Config::new(cfg.clone(), 50, 40), 3, &vm, &dev).unwrap();
            let toks: Vec<u32> = (0..80).map(|i| (i * 7 % 50) as u32).collect();
            let t = Tensor::from_vec(toks, (2, 40), &dev).unwrap();
            let pos = [3, 17, 39, 45, 79];
            let marks = Tensor::zeros((2, 40), DType::F32, &dev).unwrap();
            let streamed = streamed_logits(&model, (&t, &marks), &pos, 16).unwrap();
            assert!(!streamed.track_op(), "{}", model.cfg.mixer);
            // and they are the one-pass logits, in the order of `pos`
            let once = model
                .logits_at(&model.forward(&t).unwrap().hidden, &pos)
                .unwrap();
            let d = (streamed - once)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(d < 1e-4, "{}: {d}", model.cfg.mixer);
        }
    }

    /// Bins tile 1..=max_lag without gaps, double, and never end in a one-lag bin.
    #[test]
    fn doubling_bins_tile_the_lags() {
        assert_eq!(doubling_bins(1), vec![(1, 1)]);
        assert_eq!(doubling_bins(2), vec![(1, 2)]);
        assert_eq!(doubling_bins(8), vec![(1, 1), (2, 3), (4, 8)]);
        assert_eq!(doubling_bins(10), vec![(1, 1), (2, 3), (4, 7), (8, 10)]);
        for max_lag in [3, 7, 2000, 2048, 8191, 8192, 8193] {
            let b = doubling_bins(max_lag);
            assert_eq!(b[0].0, 1);
            assert_eq!(b.last().unwrap().1, max_lag);
            assert!(
                b.windows(2).all(|w| w[1].0 == w[0].1 + 1),
                "{max_lag}: {b:?}"
            );
            let last = b.last().unwrap();
            assert!(max_lag < 2 || last.1 > last.0, "{max_lag}: {b:?}");
        }
    }

    /// An empty bin (NaN accuracy and cross-entropy) survives a JSON round trip.
    #[test]
    fn empty_bins_round_trip_through_json() {
        let row = Tally::default().row("1-1".into(), 1, 1);
        assert!(row.accuracy.is_nan() && row.nll.is_nan());
        let text = serde_json::to_string(&row).unwrap();
        assert!(text.contains("null"), "{text}");
        let back: LagAccuracy = serde_json::from_str(&text).unwrap();
        assert!(back.accuracy.is_nan() && back.nll.is_nan() && back.n == 0);
    }
}
