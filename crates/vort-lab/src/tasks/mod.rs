//! Long-memory tasks (docs/DESIGN.md §3), deterministic and seedable: every sequence is a
//! pure function of (seed, stream, index), so a training batch is a function of (seed, step)
//! and a resumed run sees exactly the data an uninterrupted one would.
//!
//! A run's `[task]` table is a [`TaskConfig`]: one struct per kind behind [`TaskOps`]
//! ([`config`]). The kinds: Zipf-lag retrieval and entity label copy ([`planted`]), Zoology's
//! MQAR ([`mqar`]), RULER's offline tasks byte-level ([`ruler`]) and byte-level books
//! ([`books`], behind the `corpus` feature). Only answer positions count in the loss
//! ([`Sample::mask`]); each carries its lag for accuracy by lag bucket ([`BUCKETS`]); the
//! tokens' roles for the α tables are [`roles`]. [`Source`] serves a run's batches:
//! generated, from files in Zoology's format ([`external`]), or from the books.

#[cfg(feature = "corpus")]
pub mod books;
pub mod config;
pub mod external;
pub mod lanes;
pub mod mqar;
#[cfg(not(feature = "corpus"))]
mod no_corpus;
pub mod planted;
pub mod recall_mix;
pub mod roles;
pub mod ruler;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

#[cfg(feature = "corpus")]
use books::BookCorpus;
pub use config::{
    BooksTask, MixLength, MqarTask, PlantedPairs, RulerTask, TaskConfig, TaskOps, TaskSpec,
    ZipfTask,
};
#[cfg(not(feature = "corpus"))]
use no_corpus::BookCorpus;
use vort::vort_math::rng::{derive, SplitMix64};

/// Which task.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
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
    /// RULER's offline synthetic tasks, byte-level ([`ruler`]).
    Ruler,
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
            TaskKind::Ruler => "ruler",
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
            "ruler" => Ok(TaskKind::Ruler),
            _ => Err(TaskError::UnknownTask(s.into())),
        }
    }
}

/// Why a task configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TaskError {
    /// The task name is not one of zipf|label-copy|books|mqar|ruler.
    #[error("unknown task `{0}` (expected mqar|books|zipf|label-copy|ruler)")]
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

impl Sample {
    /// `tokens` with no answer, nothing flagged.
    pub fn unlabelled(tokens: Vec<u32>) -> Sample {
        let t = tokens.len();
        Sample {
            tokens,
            targets: vec![0; t],
            mask: vec![false; t],
            lags: vec![0; t],
            entity: vec![false; t],
            memorable: vec![false; t],
            function: vec![false; t],
        }
    }
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
    /// Sequence `index` of `stream` under `seed` (a generated task; config assumed valid).
    pub fn sample(&self, seed: u64, stream: Stream, index: u64) -> Sample {
        let s = match stream {
            Stream::Train => 0,
            Stream::Eval => 1,
            Stream::Valid => 2,
        };
        // MQAR trains on a fixed set of train_examples sequences, in epochs
        let index = match (self.mqar(), stream) {
            (Some(m), Stream::Train) if m.train_examples > 0 => index % m.train_examples,
            _ => index,
        };
        let mut rng = SplitMix64::new(derive(seed, s, index));
        self.spec.ops().generate(self.seq_len, &mut rng)
    }
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
        if cfg.kind() == TaskKind::Books {
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
            train: file(cfg.mqar().map_or("", |m| &m.train_data))?,
            test: file(cfg.mqar().map_or("", |m| &m.test_data))?,
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
                cfg.kind().name()
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
    /// mixture ([`MqarTask::train_mix`], [`PlantedPairs::train_mix`]) gives step s the
    /// sequences of entry s mod n, each entry numbering its own sequences.
    pub fn batch(&self, seed: u64, stream: Stream, step: u64, b: usize) -> Batch {
        if let (Stream::Train, Source::Synthetic { cfg, .. }) = (stream, self) {
            // the entry's own sequences, numbered by how many times it has come round
            if let Some(round) = step.checked_div(cfg.train_lengths().len() as u64) {
                let (c, b) = cfg.train_length(step, b);
                let first = round * b as u64;
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
