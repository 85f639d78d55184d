//! Synthetic long-memory tasks (docs/DESIGN.md §3), deterministic and seedable: every sequence is a
//! pure function of (seed, stream, index), so a training batch is a function of (seed, step)
//! and a resumed run sees exactly the data an uninterrupted one would.
//!
//! Vocabulary (shared by both tasks): `n_filler` filler tokens, then `n_keys` key / entity
//! tokens, then `n_values` value / label tokens, then one query marker `QRY`.
//!
//! - **Zipf-lag key–value retrieval** ([`TaskKind::Zipf`]): filler with planted pairs
//!   `[key][value]`; later a query `[QRY][key]` at which the model must emit the value (it
//!   also follows in the sequence). The lag ℓ = position(QRY) - position(value) follows the
//!   truncated Zipf law P(ℓ) ∝ ℓ^(-s) on [1, L_max]. Keys are distinct within a sequence.
//! - **Entity label copy with uniform lags** ([`TaskKind::LabelCopy`]): an entity appears
//!   with its label `[entity][label]`; later the entity reappears and the model must emit its
//!   label. The lag ℓ = position(reappearance) - position(label) is uniform on [1, L_max],
//!   so the lag prior favours no kernel. Entities are distinct within a sequence; entity
//!   positions are flagged (labels for the router's entity probe).
//!
//! Only answer positions count in the loss ([`Sample::mask`]); each carries its lag for
//! accuracy by lag bucket ([`BUCKETS`]). A query whose lag cannot be placed (every admissible
//! position taken, only possible for lags within a few tokens of `seq_len`) is dropped rather
//! than re-drawn, so the placed lags keep their law.

#[cfg(feature = "corpus")]
pub mod books;
pub mod external;
pub mod lanes;
pub mod mqar;
#[cfg(not(feature = "corpus"))]
mod no_corpus;
pub mod recall_mix;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

#[cfg(feature = "corpus")]
use books::BookCorpus;
#[cfg(not(feature = "corpus"))]
use no_corpus::BookCorpus;
use vort::vort_math::rng::{derive, SplitMix64};

/// Which task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Zipf-lag key–value retrieval.
    #[default]
    Zipf,
    /// Entity label copy with uniform lags.
    LabelCopy,
    /// Byte-level language modelling on books ([`books`]).
    Books,
    /// Zoology's multi-query associative recall ([`mqar`]).
    Mqar,
}

impl TaskKind {
    /// The two synthetic tasks, in report order.
    pub const SYNTHETIC: [TaskKind; 2] = [TaskKind::Zipf, TaskKind::LabelCopy];
    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Zipf => "zipf",
            TaskKind::LabelCopy => "label-copy",
            TaskKind::Books => "books",
            TaskKind::Mqar => "mqar",
        }
    }
}

impl std::fmt::Display for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for TaskKind {
    type Err = TaskError;
    fn from_str(s: &str) -> Result<Self, TaskError> {
        match s {
            "zipf" => Ok(TaskKind::Zipf),
            "label-copy" | "label_copy" => Ok(TaskKind::LabelCopy),
            "books" => Ok(TaskKind::Books),
            "mqar" => Ok(TaskKind::Mqar),
            _ => Err(TaskError::UnknownTask(s.into())),
        }
    }
}

/// Why a task configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TaskError {
    /// The task name is not one of zipf|label-copy|books|mqar.
    #[error("unknown task `{0}` (expected mqar|books|zipf|label-copy)")]
    UnknownTask(String),
    /// A field is out of its domain (the message names it).
    #[error("invalid task config: {0}")]
    Invalid(String),
    /// The books data is missing or fails its manifest (the message says what to do).
    #[error("books data: {0}")]
    Data(String),
    /// A data file (Zoology's format) is malformed or does not fit the model; the message
    /// names the file.
    #[error("{0}")]
    BadFile(String),
}

/// Task configuration (the `[task]` table of a run config).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    /// Which task: "mqar", "books", "zipf" or "label-copy".
    pub kind: TaskKind,
    /// Tokens per sequence T.
    pub seq_len: usize,
    /// MQAR: vocabulary size V (keys from [1, V/2), values from [V/2, V)).
    pub vocab_size: usize,
    /// MQAR: key–value pairs K per sequence (each queried once).
    pub num_kv_pairs: usize,
    /// MQAR: gap law p(g) ∝ (g+1)^(a−1) of the queries (0.01 Zipf-like, 1 uniform).
    pub power_a: f64,
    /// MQAR: random filler tokens instead of 0 (Zoology's default).
    pub random_non_queries: bool,
    /// MQAR: distinct training sequences (training cycles through them in epochs; 0 = a
    /// fresh sequence at every draw).
    pub train_examples: u64,
    /// MQAR: held-out sequences scored by the final evaluation (also `eval_sequences`'s
    /// role for this task).
    pub test_examples: usize,
    /// Training sequences from a file in Zoology's format instead of the generator
    /// (safetensors `inputs`, `labels` [N, L]; see [`external`]). Empty: generated.
    pub train_data: String,
    /// Test (and validation) sequences from a file in Zoology's format. Empty: generated.
    pub test_data: String,
    /// MQAR: train on a mixture of shorter lengths, as Zoology does (its MQAR runs train on
    /// (64, 4), (128, 8), (256, 16), ... together): training step s draws its batch from
    /// entry s mod n, with batch_size · seq_len / entry.seq_len sequences (the same tokens
    /// per step); validation and test stay at (seq_len, num_kv_pairs). Empty: train at
    /// (seq_len, num_kv_pairs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub train_mix: Vec<MixLength>,
    /// Largest lag L_max (at most seq_len - 4).
    pub max_lag: usize,
    /// Zipf exponent s of P(ℓ) ∝ ℓ^(-s) (zipf task only).
    pub zipf_exponent: f64,
    /// Queries (answer positions) per sequence.
    pub queries: usize,
    /// Filler tokens in the vocabulary.
    pub n_filler: usize,
    /// Key / entity tokens in the vocabulary (>= queries: distinct within a sequence).
    pub n_keys: usize,
    /// Value / label tokens in the vocabulary (chance accuracy is 1/n_values).
    pub n_values: usize,
    /// Directory written by `vort data fetch books` (books task only).
    pub data_dir: String,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            kind: TaskKind::Zipf,
            seq_len: 2048,
            max_lag: 2000,
            zipf_exponent: 1.0,
            queries: 16,
            n_filler: 32,
            n_keys: 64,
            n_values: 64,
            data_dir: "data/books".into(),
            vocab_size: 8192,
            num_kv_pairs: 4,
            power_a: 0.01,
            random_non_queries: true,
            train_examples: 100_000,
            test_examples: 3_000,
            train_data: String::new(),
            test_data: String::new(),
            train_mix: Vec::new(),
        }
    }
}

/// One length of an MQAR training mixture ([`TaskConfig::train_mix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixLength {
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Key–value pairs per sequence.
    pub num_kv_pairs: usize,
}

impl TaskConfig {
    /// The config of training step `step`'s sequences and how many of them a batch of `b`
    /// (at `seq_len`) becomes: entry `step mod n` of [`TaskConfig::train_mix`], or this
    /// config and `b` without a mixture.
    pub fn train_length(&self, step: u64, b: usize) -> (TaskConfig, usize) {
        if self.train_mix.is_empty() {
            return (self.clone(), b);
        }
        let m = self.train_mix[(step % self.train_mix.len() as u64) as usize];
        let mut c = self.clone();
        c.seq_len = m.seq_len;
        c.num_kv_pairs = m.num_kv_pairs;
        c.train_mix.clear();
        (c, (b * self.seq_len / m.seq_len).max(1))
    }
}

/// Lag buckets of the report: (label, lo, hi) inclusive.
pub const BUCKETS: [(&str, usize, usize); 3] = [
    ("1-100", 1, 100),
    ("101-1000", 101, 1000),
    (">1000", 1001, usize::MAX),
];

/// Context buckets of the books task (docs/DESIGN.md §3: BPC at context 0-512, ..., > 4096): the
/// "lag" of a byte is its context length, i.e. its position in the window plus one.
pub const CONTEXT_BUCKETS: [(&str, usize, usize); 4] = [
    ("0-512", 1, 512),
    ("512-2048", 513, 2048),
    ("2048-4096", 2049, 4096),
    (">4096", 4097, usize::MAX),
];

/// Index into [`BUCKETS`] of a lag (>= 1).
pub fn bucket_of(lag: usize) -> usize {
    bucket_in(&BUCKETS, lag)
}

/// Index of the bucket of `buckets` (ordered, covering [1, ∞)) that holds `lag`.
pub fn bucket_in(buckets: &[(&str, usize, usize)], lag: usize) -> usize {
    buckets
        .iter()
        .position(|&(_, lo, hi)| lag >= lo && lag <= hi)
        .unwrap_or(buckets.len() - 1)
}

/// One sequence: inputs, next-token targets at answer positions, and bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Input tokens, length T.
    pub tokens: Vec<u32>,
    /// Target at each position (the answer where `mask`, else 0), length T.
    pub targets: Vec<u32>,
    /// True at answer positions (the only ones in the loss), length T.
    pub mask: Vec<bool>,
    /// Lag of the answer at each answer position (0 elsewhere), length T.
    pub lags: Vec<u32>,
    /// True at tokens that are entities (label copy; all false for zipf), length T.
    pub entity: Vec<bool>,
    /// True at tokens the task asks to remember (keys, values, entities, labels), length T.
    pub memorable: Vec<bool>,
    /// True at bytes of function words (books only; all false for the synthetic tasks).
    pub function: Vec<bool>,
}

/// A batch of B samples flattened row-major ([B, T]).
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Batch size B.
    pub b: usize,
    /// Sequence length T.
    pub t: usize,
    /// [B, T] tokens.
    pub tokens: Vec<u32>,
    /// [B, T] targets.
    pub targets: Vec<u32>,
    /// [B, T] answer positions.
    pub mask: Vec<bool>,
    /// [B, T] lags (0 off answers).
    pub lags: Vec<u32>,
    /// [B, T] entity flags.
    pub entity: Vec<bool>,
    /// [B, T] memorable flags.
    pub memorable: Vec<bool>,
    /// [B, T] function-word flags.
    pub function: Vec<bool>,
}

/// Data streams: training batches and the held-out evaluation set never share a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Training data.
    Train,
    /// Held-out evaluation data.
    Eval,
    /// Held-out validation data (early stopping and the learning-rate choice), disjoint
    /// from both.
    Valid,
}

impl TaskConfig {
    /// Vocabulary size: filler + keys + values + the query marker; 256 bytes for books.
    pub fn vocab(&self) -> usize {
        match self.kind {
            TaskKind::Books => 256,
            TaskKind::Mqar => self.vocab_size,
            _ => self.n_filler + self.n_keys + self.n_values + 1,
        }
    }

    /// The largest lag an answer can have (MQAR: seq_len; books: the context length).
    pub fn lag_limit(&self) -> usize {
        match self.kind {
            TaskKind::Books | TaskKind::Mqar => self.seq_len,
            _ => self.max_lag,
        }
    }

    /// The report buckets of this task: lag buckets, or context buckets for books.
    pub fn buckets(&self) -> &'static [(&'static str, usize, usize)] {
        match self.kind {
            TaskKind::Books => &CONTEXT_BUCKETS,
            _ => &BUCKETS,
        }
    }
    /// First key / entity token.
    pub fn key0(&self) -> u32 {
        self.n_filler as u32
    }
    /// First value / label token.
    pub fn value0(&self) -> u32 {
        (self.n_filler + self.n_keys) as u32
    }
    /// The query marker.
    pub fn qry(&self) -> u32 {
        (self.n_filler + self.n_keys + self.n_values) as u32
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`TaskError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), TaskError> {
        let bad = |m: String| Err(TaskError::Invalid(m));
        if self.seq_len < 8 {
            return bad(format!("seq_len = {} must be >= 8", self.seq_len));
        }
        if self.kind == TaskKind::Books {
            // the synthetic fields are unused; the data directory is checked when opened
            return if self.data_dir.is_empty() {
                bad("data_dir must name the directory of `vort data fetch books`".into())
            } else {
                Ok(())
            };
        }
        if !self.train_mix.is_empty() {
            if self.kind != TaskKind::Mqar || !self.train_data.is_empty() {
                return bad("train_mix needs kind = \"mqar\" and no train_data".into());
            }
            for (i, m) in self.train_mix.iter().enumerate() {
                let (c, _) = self.train_length(i as u64, 1);
                if m.seq_len < 8 || m.seq_len > self.seq_len {
                    return bad(format!(
                        "train_mix[{i}].seq_len = {} must be in [8, seq_len = {}]",
                        m.seq_len, self.seq_len
                    ));
                }
                mqar::validate(&c)
                    .map_err(|e| TaskError::Invalid(format!("train_mix[{i}]: {e}")))?;
            }
        }
        if self.kind == TaskKind::Mqar {
            return mqar::validate(self).map_err(TaskError::Invalid);
        }
        if self.max_lag < 1 || self.max_lag + 4 > self.seq_len {
            return bad(format!(
                "max_lag = {} must be in [1, seq_len - 4 = {}]",
                self.max_lag,
                self.seq_len - 4
            ));
        }
        if self.queries == 0 || self.queries > self.n_keys {
            return bad(format!(
                "queries = {} must be in [1, n_keys = {}] (keys are distinct per sequence)",
                self.queries, self.n_keys
            ));
        }
        if 5 * self.queries > self.seq_len / 2 {
            return bad(format!(
                "queries = {} is too many for seq_len = {} (at most seq_len / 10)",
                self.queries, self.seq_len
            ));
        }
        if self.n_filler == 0 || self.n_values < 2 {
            return bad("n_filler must be >= 1 and n_values >= 2".into());
        }
        if !(self.zipf_exponent.is_finite() && self.zipf_exponent >= 0.0) {
            return bad(format!(
                "zipf_exponent = {:?} must be finite and >= 0",
                self.zipf_exponent
            ));
        }
        if self.vocab() > u32::MAX as usize / 2 {
            return bad("vocabulary too large".into());
        }
        Ok(())
    }

    /// The lag law of this task: P(ℓ) for ℓ = 1..=max_lag (index ℓ - 1).
    pub fn lag_pmf(&self) -> Vec<f64> {
        let w: Vec<f64> = (1..=self.max_lag)
            .map(|l| match self.kind {
                TaskKind::Zipf => (l as f64).powf(-self.zipf_exponent),
                TaskKind::LabelCopy | TaskKind::Books | TaskKind::Mqar => 1.0,
            })
            .collect();
        let z: f64 = w.iter().sum();
        w.into_iter().map(|x| x / z).collect()
    }

    /// Sequence `index` of `stream` under `seed` (a synthetic task; config assumed valid).
    pub fn sample(&self, seed: u64, stream: Stream, index: u64) -> Sample {
        let s = match stream {
            Stream::Train => 0,
            Stream::Eval => 1,
            Stream::Valid => 2,
        };
        // MQAR trains on a fixed set of train_examples sequences, in epochs
        let index = match (self.kind, stream) {
            (TaskKind::Mqar, Stream::Train) if self.train_examples > 0 => {
                index % self.train_examples
            }
            _ => index,
        };
        let mut rng = SplitMix64::new(derive(seed, s, index));
        if self.kind == TaskKind::Mqar {
            return mqar::generate(self, &mut rng);
        }
        let cdf = cumulative(&self.lag_pmf());
        self.generate(&mut rng, &cdf)
    }

    fn generate(&self, rng: &mut SplitMix64, cdf: &[f64]) -> Sample {
        let t = self.seq_len;
        let mut tokens: Vec<u32> = (0..t)
            .map(|_| rng.below(self.n_filler as u64) as u32)
            .collect();
        let mut targets = vec![0u32; t];
        let mut mask = vec![false; t];
        let mut lags = vec![0u32; t];
        let mut entity = vec![false; t];
        let mut memorable = vec![false; t];
        let mut used = vec![false; t];
        let keys = rng.choose(self.n_keys, self.queries);
        for &key in &keys {
            let u = rng.unif();
            let lag = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) + 1;
            let key_tok = self.key0() + key as u32;
            let val_tok = self.value0() + rng.below(self.n_values as u64) as u32;
            match self.kind {
                TaskKind::Zipf => {
                    // [key][value] ... lag ... [QRY][key] -> value (answer at QRY + 1)
                    // value at v, QRY at m = v + lag, answer at m + 1, value echoed at m + 2
                    let (lo, hi) = (1, t - 3 - lag); // v range so that m + 2 <= t - 1
                    if let Some(v) = place(rng, &used, lo, hi, |v| {
                        vec![v - 1, v, v + lag, v + lag + 1, v + lag + 2]
                    }) {
                        let m = v + lag;
                        for p in [v - 1, v, m, m + 1, m + 2] {
                            used[p] = true;
                        }
                        tokens[v - 1] = key_tok;
                        tokens[v] = val_tok;
                        tokens[m] = self.qry();
                        tokens[m + 1] = key_tok;
                        tokens[m + 2] = val_tok;
                        targets[m + 1] = val_tok;
                        mask[m + 1] = true;
                        lags[m + 1] = lag as u32;
                        memorable[v - 1] = true;
                        memorable[v] = true;
                    }
                }
                TaskKind::LabelCopy => {
                    // [entity][label] ... lag ... [entity] -> label (echoed after)
                    // label at p, reappearance at r = p + lag, label echoed at r + 1
                    let (lo, hi) = (1, t - 2 - lag);
                    if let Some(p) =
                        place(rng, &used, lo, hi, |p| vec![p - 1, p, p + lag, p + lag + 1])
                    {
                        let r = p + lag;
                        for q in [p - 1, p, r, r + 1] {
                            used[q] = true;
                        }
                        tokens[p - 1] = key_tok;
                        tokens[p] = val_tok;
                        tokens[r] = key_tok;
                        tokens[r + 1] = val_tok;
                        targets[r] = val_tok;
                        mask[r] = true;
                        lags[r] = lag as u32;
                        entity[p - 1] = true;
                        entity[r] = true;
                        memorable[p - 1] = true;
                        memorable[p] = true;
                    }
                }
                // books sequences come from `Source` (a books config here yields filler)
                TaskKind::Books | TaskKind::Mqar => {}
            }
        }
        Sample {
            tokens,
            targets,
            mask,
            lags,
            entity,
            memorable,
            function: vec![false; t],
        }
    }
}

/// A uniformly random anchor in [lo, hi] whose slots are all free (up to 64 tries, then a
/// scan from a random start), or None when none is free.
fn place(
    rng: &mut SplitMix64,
    used: &[bool],
    lo: usize,
    hi: usize,
    slots: impl Fn(usize) -> Vec<usize>,
) -> Option<usize> {
    if lo > hi {
        return None;
    }
    let free = |a: usize| slots(a).iter().all(|&p| !used[p]);
    for _ in 0..64 {
        let a = rng.range(lo as u64, hi as u64) as usize;
        if free(a) {
            return Some(a);
        }
    }
    let n = hi - lo + 1;
    let start = rng.below(n as u64) as usize;
    (0..n).map(|i| lo + (start + i) % n).find(|&a| free(a))
}

fn cumulative(pmf: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    let mut c: Vec<f64> = pmf
        .iter()
        .map(|p| {
            acc += p;
            acc
        })
        .collect();
    if let Some(last) = c.last_mut() {
        *last = 1.0;
    }
    c
}

impl Batch {
    /// Stacks samples of equal length.
    pub fn from_samples(samples: &[Sample]) -> Batch {
        let t = samples.first().map_or(0, |s| s.tokens.len());
        let cat = |f: &dyn Fn(&Sample) -> Vec<u32>| samples.iter().flat_map(f).collect();
        let catb = |f: &dyn Fn(&Sample) -> Vec<bool>| samples.iter().flat_map(f).collect();
        Batch {
            b: samples.len(),
            t,
            tokens: cat(&|s| s.tokens.clone()),
            targets: cat(&|s| s.targets.clone()),
            mask: catb(&|s| s.mask.clone()),
            lags: cat(&|s| s.lags.clone()),
            entity: catb(&|s| s.entity.clone()),
            memorable: catb(&|s| s.memorable.clone()),
            function: catb(&|s| s.function.clone()),
        }
    }
    /// Flat indices of the answer positions.
    pub fn answer_positions(&self) -> Vec<usize> {
        (0..self.mask.len()).filter(|&i| self.mask[i]).collect()
    }
}

/// Where a run's sequences come from: a synthetic generator (or files in Zoology's format),
/// or the books corpus loaded once. Either way sequence `index` of a stream is a pure function
/// of (seed, stream, index).
#[derive(Debug, Clone)]
pub enum Source {
    /// MQAR, Zipf retrieval or label copy, with the streams given by files replaced by them.
    Synthetic {
        /// The task.
        cfg: TaskConfig,
        /// Training sequences from `train_data`.
        train: Option<Arc<external::LabelledSet>>,
        /// Test and validation sequences from `test_data`.
        test: Option<Arc<external::LabelledSet>>,
    },
    /// Byte-level books.
    Books(TaskConfig, Arc<BookCorpus>),
}

impl Source {
    /// Opens the source of `cfg` (loads and verifies the books for the books task, the data
    /// files when given).
    ///
    /// # Errors
    /// An invalid config or data file; [`TaskError::Data`] when the books are missing or
    /// corrupt, or a data file cannot be read.
    pub fn open(cfg: &TaskConfig) -> Result<Source, TaskError> {
        cfg.validate()?;
        if cfg.kind == TaskKind::Books {
            return Ok(Source::Books(cfg.clone(), Arc::new(BookCorpus::open(cfg)?)));
        }
        let file = |path: &str| -> Result<Option<Arc<external::LabelledSet>>, TaskError> {
            if path.is_empty() {
                return Ok(None);
            }
            let set = external::LabelledSet::load(std::path::Path::new(path), cfg.vocab())?;
            if set.l != cfg.seq_len {
                return Err(TaskError::BadFile(format!(
                    "{path}: sequences of length {} but the run's seq_len is {}",
                    set.l, cfg.seq_len
                )));
            }
            Ok(Some(Arc::new(set)))
        };
        Ok(Source::Synthetic {
            cfg: cfg.clone(),
            train: file(&cfg.train_data)?,
            test: file(&cfg.test_data)?,
        })
    }

    /// A source whose held-out streams are `test` (scoring a trained model on a file).
    pub fn with_test_set(cfg: &TaskConfig, test: external::LabelledSet) -> Source {
        let mut cfg = cfg.clone();
        cfg.seq_len = test.l;
        Source::Synthetic {
            cfg,
            train: None,
            test: Some(Arc::new(test)),
        }
    }

    /// The task config.
    pub fn config(&self) -> &TaskConfig {
        match self {
            Source::Synthetic { cfg, .. } | Source::Books(cfg, _) => cfg,
        }
    }

    /// How many distinct held-out sequences there are: the books' test windows (they tile the
    /// test books) or a test file's N; `None` for generated tasks (without end).
    pub fn eval_len(&self) -> Option<usize> {
        match self {
            Source::Synthetic { test, .. } => test.as_ref().map(|t| t.n),
            Source::Books(c, corpus) => Some(corpus.test_windows(c.seq_len)),
        }
    }

    /// How many distinct validation sequences there are: the books' validation windows;
    /// `None` for the synthetic tasks (generated without end, or a test file's sequences,
    /// Zoology's convention, taken as `train.val_sequences` asks).
    pub fn valid_len(&self) -> Option<usize> {
        match self {
            Source::Synthetic { .. } => None,
            Source::Books(c, corpus) => Some(corpus.valid_windows(c.seq_len)),
        }
    }

    /// Which part of the held-out data sequence `index` of `stream` belongs to: the test or
    /// validation book's title, `None` for the synthetic tasks (and for training sequences).
    pub fn eval_group(&self, stream: Stream, index: u64) -> Option<&str> {
        match (self, stream) {
            (Source::Books(c, corpus), Stream::Eval) => Some(corpus.eval_book(c.seq_len, index)),
            (Source::Books(c, corpus), Stream::Valid) => Some(corpus.valid_book(c.seq_len, index)),
            _ => None,
        }
    }

    /// Sequence `index` of `stream` under `seed`.
    pub fn sample(&self, seed: u64, stream: Stream, index: u64) -> Sample {
        match self {
            Source::Synthetic { train, test, cfg } => match (stream, train, test) {
                (Stream::Train, Some(set), _) => set.sample(index),
                (Stream::Eval | Stream::Valid, _, Some(set)) => set.sample(index),
                _ => cfg.sample(seed, stream, index),
            },
            Source::Books(c, corpus) => corpus.sample(c.seq_len, seed, stream, index),
        }
    }

    /// The lanes of training with the state carried through the training books, contexts of
    /// at most `context_cap` bytes ([`lanes::LanePlan`]).
    ///
    /// # Errors
    /// A source other than books; books without a window.
    pub fn lane_plan(&self, context_cap: u64) -> Result<lanes::LanePlan, TaskError> {
        match self {
            Source::Books(c, corpus) => corpus.lane_plan(c.seq_len, context_cap),
            Source::Synthetic { cfg, .. } => Err(TaskError::Data(format!(
                "training with the state carried streams through books, not {}",
                cfg.kind.name()
            ))),
        }
    }

    /// Training batch `step` with the state carried: row r is window `step` of lane r of
    /// `plan` (a pure function of (seed, step)), with whether that row starts a new context
    /// (where the trainer resets its state).
    ///
    /// # Errors
    /// A source other than books.
    pub fn lane_batch(
        &self,
        plan: &lanes::LanePlan,
        seed: u64,
        step: u64,
        b: usize,
    ) -> Result<(Batch, Vec<bool>), TaskError> {
        let Source::Books(_, corpus) = self else {
            return Err(TaskError::Data(
                "training with the state carried streams through books".into(),
            ));
        };
        let (samples, fresh): (Vec<Sample>, Vec<bool>) = (0..b as u64)
            .map(|lane| corpus.lane_sample(plan, seed, lane, step))
            .unzip();
        Ok((Batch::from_samples(&samples), fresh))
    }

    /// Batch `step` of `stream` (B sequences; a pure function of (seed, step)). A training
    /// mixture ([`TaskConfig::train_mix`]) gives step s the sequences of entry s mod n, each
    /// entry numbering its own sequences.
    pub fn batch(&self, seed: u64, stream: Stream, step: u64, b: usize) -> Batch {
        if let (Stream::Train, Source::Synthetic { cfg, .. }) = (stream, self) {
            if !cfg.train_mix.is_empty() {
                let n = cfg.train_mix.len() as u64;
                let (c, b) = cfg.train_length(step, b);
                let first = (step / n) * b as u64;
                let samples: Vec<Sample> = (0..b as u64)
                    .map(|i| c.sample(seed, stream, first + i))
                    .collect();
                return Batch::from_samples(&samples);
            }
        }
        let samples: Vec<Sample> = (0..b)
            .map(|i| self.sample(seed, stream, step * b as u64 + i as u64))
            .collect();
        Batch::from_samples(&samples)
    }
}
