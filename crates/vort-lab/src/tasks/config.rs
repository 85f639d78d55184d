//! The `[task]` table of a run config: the kind, the sequence length, and that kind's settings
//! only ([`TaskConfig`]). Each kind is one struct ([`PlantedPairs`] for label copy,
//! [`ZipfTask`], [`MqarTask`], [`BooksTask`], [`RulerTask`]) behind the [`TaskOps`] trait; the
//! match on [`TaskSpec`] in [`TaskSpec::ops`] is the only one.
//!
//! Files are read through the flat form every config was once written in (all twenty fields
//! in one table): a field of another kind is refused unless it holds that field's default,
//! as every file written before the kinds were split does. Files are written in the kind's
//! own form, which the flat reader reads too.

use serde::{Deserialize, Serialize};
use vort::vort_math::rng::SplitMix64;

use super::ruler::{self, RulerKind};
use super::{mqar, planted, Sample, TaskError, TaskKind, BUCKETS, CONTEXT_BUCKETS};

/// What each task kind provides. One struct per kind implements it; [`TaskSpec::ops`] picks
/// the implementation.
pub trait TaskOps {
    /// Tokens in the vocabulary.
    fn vocab(&self) -> usize;
    /// The largest lag an answer can have at sequence length `seq_len` (the whole sequence,
    /// unless the kind bounds it).
    fn lag_limit(&self, seq_len: usize) -> usize {
        seq_len
    }
    /// The report buckets: lag buckets, or context buckets for books.
    fn buckets(&self) -> &'static [(&'static str, usize, usize)] {
        &BUCKETS
    }
    /// Checks the kind's fields at sequence length `seq_len`.
    ///
    /// # Errors
    /// A message naming the field.
    fn validate(&self, seq_len: usize) -> Result<(), String>;
    /// One sequence of length `seq_len` drawn from `rng` (config assumed valid).
    fn generate(&self, seq_len: usize, rng: &mut SplitMix64) -> Sample;
}

/// Task configuration: the kind and its settings, and the sequence length all kinds share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FlatTask")]
pub struct TaskConfig {
    /// The kind, with its settings only (`kind = "mqar"`, ... in the table).
    #[serde(flatten)]
    pub spec: TaskSpec,
    /// Tokens per sequence T.
    pub seq_len: usize,
}

/// A task kind with its settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TaskSpec {
    /// Zipf-lag key–value retrieval.
    Zipf(ZipfTask),
    /// Entity label copy with uniform lags.
    LabelCopy(PlantedPairs),
    /// Byte-level language modelling on books.
    Books(BooksTask),
    /// Zoology's multi-query associative recall.
    Mqar(MqarTask),
    /// RULER's offline synthetic tasks, byte-level.
    Ruler(RulerTask),
}

/// RULER's tasks ([`ruler`]): each sequence is one of `tasks`, drawn uniformly (the training
/// mixture; one task for a RULER table's row).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RulerTask {
    /// The tasks mixed (niah_single_1, niah_multikey_2, niah_multikey_3, vt, fwe).
    pub tasks: Vec<RulerKind>,
}

impl Default for RulerTask {
    fn default() -> Self {
        RulerTask {
            tasks: RulerKind::ALL.to_vec(),
        }
    }
}

/// The synthetic tasks' planted pairs: filler with `queries` (key, value) pairs, each asked
/// for once at a drawn lag (docs/DESIGN.md §3). Label copy is this with uniform lags.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlantedPairs {
    /// Largest lag L_max (at most seq_len - 4).
    pub max_lag: usize,
    /// Queries (answer positions) per sequence.
    pub queries: usize,
    /// Filler tokens in the vocabulary.
    pub n_filler: usize,
    /// Key / entity tokens in the vocabulary (>= queries: distinct within a sequence).
    pub n_keys: usize,
    /// Value / label tokens in the vocabulary (chance accuracy is 1/n_values).
    pub n_values: usize,
    /// Train on a mixture of shorter lengths, as MQAR's [`MqarTask::train_mix`]: training step
    /// s draws its batch from entry s mod n (the same tokens per step, lags up to
    /// min(max_lag, entry.seq_len - 4)); validation and test stay at (seq_len, queries,
    /// max_lag). Empty: train at seq_len.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub train_mix: Vec<PlantedLength>,
}

/// One length of a planted-pair training mixture ([`PlantedPairs::train_mix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlantedLength {
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Queries per sequence.
    pub queries: usize,
}

/// Zipf-lag retrieval: planted pairs whose lags follow P(ℓ) ∝ ℓ^(-s) on [1, L_max].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ZipfTask {
    /// The pairs.
    #[serde(flatten)]
    pub pairs: PlantedPairs,
    /// Zipf exponent s.
    pub zipf_exponent: f64,
}

/// Byte-level books ([`super::books`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BooksTask {
    /// Directory written by `vort data fetch books`.
    pub data_dir: String,
}

/// Zoology's MQAR ([`mqar`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MqarTask {
    /// Vocabulary size V (keys from [1, V/2), values from [V/2, V)).
    pub vocab_size: usize,
    /// Key–value pairs K per sequence (each queried once).
    pub num_kv_pairs: usize,
    /// Gap law p(g) ∝ (g+1)^(a−1) of the queries (0.01 Zipf-like, 1 uniform).
    pub power_a: f64,
    /// Random filler tokens instead of 0 (Zoology's default).
    pub random_non_queries: bool,
    /// Distinct training sequences (training cycles through them in epochs; 0 = a fresh
    /// sequence at every draw).
    pub train_examples: u64,
    /// Held-out sequences scored by the final evaluation (also `eval_sequences`'s role for
    /// this task).
    pub test_examples: usize,
    /// Training sequences from a file in Zoology's format instead of the generator
    /// (safetensors `inputs`, `labels` [N, L]; see [`super::external`]). Empty: generated.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub train_data: String,
    /// Test (and validation) sequences from a file in Zoology's format. Empty: generated.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub test_data: String,
    /// Train on a mixture of shorter lengths, as Zoology does (its MQAR runs train on
    /// (64, 4), (128, 8), (256, 16), ... together): training step s draws its batch from
    /// entry s mod n, with batch_size · seq_len / entry.seq_len sequences (the same tokens
    /// per step); validation and test stay at (seq_len, num_kv_pairs). Empty: train at
    /// (seq_len, num_kv_pairs).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub train_mix: Vec<MixLength>,
}

/// One length of an MQAR training mixture ([`MqarTask::train_mix`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixLength {
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Key–value pairs per sequence.
    pub num_kv_pairs: usize,
}

impl Default for PlantedPairs {
    fn default() -> Self {
        PlantedPairs {
            max_lag: 2000,
            queries: 16,
            n_filler: 32,
            n_keys: 64,
            n_values: 64,
            train_mix: Vec::new(),
        }
    }
}

impl Default for ZipfTask {
    fn default() -> Self {
        ZipfTask {
            pairs: PlantedPairs::default(),
            zipf_exponent: 1.0,
        }
    }
}

impl Default for BooksTask {
    fn default() -> Self {
        BooksTask {
            data_dir: "data/books".into(),
        }
    }
}

impl Default for MqarTask {
    fn default() -> Self {
        MqarTask {
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

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig::of_kind(TaskKind::Zipf)
    }
}

impl TaskSpec {
    /// The kind with its defaults.
    pub fn of_kind(kind: TaskKind) -> TaskSpec {
        match kind {
            TaskKind::Zipf => TaskSpec::Zipf(ZipfTask::default()),
            TaskKind::LabelCopy => TaskSpec::LabelCopy(PlantedPairs::default()),
            TaskKind::Books => TaskSpec::Books(BooksTask::default()),
            TaskKind::Mqar => TaskSpec::Mqar(MqarTask::default()),
            TaskKind::Ruler => TaskSpec::Ruler(RulerTask::default()),
        }
    }

    /// The kind.
    pub fn kind(&self) -> TaskKind {
        match self {
            TaskSpec::Zipf(_) => TaskKind::Zipf,
            TaskSpec::LabelCopy(_) => TaskKind::LabelCopy,
            TaskSpec::Books(_) => TaskKind::Books,
            TaskSpec::Mqar(_) => TaskKind::Mqar,
            TaskSpec::Ruler(_) => TaskKind::Ruler,
        }
    }

    /// The kind's implementation of [`TaskOps`].
    pub fn ops(&self) -> &dyn TaskOps {
        match self {
            TaskSpec::Zipf(t) => t,
            TaskSpec::LabelCopy(t) => t,
            TaskSpec::Books(t) => t,
            TaskSpec::Mqar(t) => t,
            TaskSpec::Ruler(t) => t,
        }
    }
}

impl TaskConfig {
    /// The task of `kind` with its defaults, at seq_len 2048.
    pub fn of_kind(kind: TaskKind) -> TaskConfig {
        TaskConfig {
            spec: TaskSpec::of_kind(kind),
            seq_len: 2048,
        }
    }

    /// Byte-level books from `data_dir` in windows of `seq_len` bytes.
    pub fn books(data_dir: impl Into<String>, seq_len: usize) -> TaskConfig {
        TaskConfig {
            spec: TaskSpec::Books(BooksTask {
                data_dir: data_dir.into(),
            }),
            seq_len,
        }
    }

    /// The kind.
    pub fn kind(&self) -> TaskKind {
        self.spec.kind()
    }

    /// The MQAR settings (None for another kind).
    pub fn mqar(&self) -> Option<&MqarTask> {
        match &self.spec {
            TaskSpec::Mqar(t) => Some(t),
            _ => None,
        }
    }

    /// The MQAR settings, to edit (None for another kind).
    pub fn mqar_mut(&mut self) -> Option<&mut MqarTask> {
        match &mut self.spec {
            TaskSpec::Mqar(t) => Some(t),
            _ => None,
        }
    }

    /// The planted pairs of Zipf retrieval and label copy (None for another kind).
    pub fn planted(&self) -> Option<&PlantedPairs> {
        match &self.spec {
            TaskSpec::Zipf(t) => Some(&t.pairs),
            TaskSpec::LabelCopy(t) => Some(t),
            _ => None,
        }
    }

    /// The planted pairs, to edit (None for another kind).
    pub fn planted_mut(&mut self) -> Option<&mut PlantedPairs> {
        match &mut self.spec {
            TaskSpec::Zipf(t) => Some(&mut t.pairs),
            TaskSpec::LabelCopy(t) => Some(t),
            _ => None,
        }
    }

    /// The lag law of the planted-pair tasks, P(ℓ) for ℓ = 1..=max_lag (index ℓ - 1); empty
    /// for the other kinds, whose lags follow from their sequences.
    pub fn lag_pmf(&self) -> Vec<f64> {
        match &self.spec {
            TaskSpec::Zipf(t) => t.lag_pmf(),
            TaskSpec::LabelCopy(t) => t.lag_pmf(),
            _ => Vec::new(),
        }
    }

    /// The books settings, to edit (None for another kind).
    pub fn books_mut(&mut self) -> Option<&mut BooksTask> {
        match &mut self.spec {
            TaskSpec::Books(t) => Some(t),
            _ => None,
        }
    }

    /// The directory of the books corpus (None for another kind).
    pub fn data_dir(&self) -> Option<&str> {
        match &self.spec {
            TaskSpec::Books(t) => Some(&t.data_dir),
            _ => None,
        }
    }

    /// The lengths of the training mixture, in order (MQAR's and the planted pairs';
    /// empty for another kind or without one).
    pub fn train_lengths(&self) -> Vec<usize> {
        match &self.spec {
            TaskSpec::Mqar(m) => m.train_mix.iter().map(|e| e.seq_len).collect(),
            _ => self.planted().map_or(Vec::new(), |p| {
                p.train_mix.iter().map(|e| e.seq_len).collect()
            }),
        }
    }

    /// The config of training step `step`'s sequences and how many of them a batch of `b`
    /// (at `seq_len`) becomes: entry `step mod n` of the training mixture
    /// ([`MqarTask::train_mix`], [`PlantedPairs::train_mix`]), or this config and `b` without
    /// one.
    pub fn train_length(&self, step: u64, b: usize) -> (TaskConfig, usize) {
        let n = self.train_lengths().len();
        if n == 0 {
            return (self.clone(), b);
        }
        let i = (step % n as u64) as usize;
        let mut c = self.clone();
        c.seq_len = self.train_lengths()[i];
        match &mut c.spec {
            TaskSpec::Mqar(q) => {
                q.num_kv_pairs = q.train_mix[i].num_kv_pairs;
                q.train_mix.clear();
            }
            TaskSpec::Zipf(ZipfTask { pairs: p, .. }) | TaskSpec::LabelCopy(p) => {
                p.queries = p.train_mix[i].queries;
                p.max_lag = p.max_lag.min(c.seq_len - 4);
                p.train_mix.clear();
            }
            TaskSpec::Books(_) | TaskSpec::Ruler(_) => {}
        }
        let rows = (b * self.seq_len / c.seq_len).max(1);
        (c, rows)
    }

    /// Vocabulary size ([`TaskOps::vocab`]).
    pub fn vocab(&self) -> usize {
        self.spec.ops().vocab()
    }

    /// The largest lag an answer can have ([`TaskOps::lag_limit`]).
    pub fn lag_limit(&self) -> usize {
        self.spec.ops().lag_limit(self.seq_len)
    }

    /// The report buckets of this task ([`TaskOps::buckets`]).
    pub fn buckets(&self) -> &'static [(&'static str, usize, usize)] {
        self.spec.ops().buckets()
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`TaskError::Invalid`] naming the field.
    pub fn validate(&self) -> Result<(), TaskError> {
        if self.seq_len < 8 {
            return Err(TaskError::Invalid(format!(
                "seq_len = {} must be >= 8",
                self.seq_len
            )));
        }
        self.spec
            .ops()
            .validate(self.seq_len)
            .map_err(TaskError::Invalid)
    }
}

impl TaskOps for PlantedPairs {
    fn vocab(&self) -> usize {
        self.n_filler + self.n_keys + self.n_values + 1
    }
    fn lag_limit(&self, _seq_len: usize) -> usize {
        self.max_lag
    }
    fn validate(&self, seq_len: usize) -> Result<(), String> {
        planted::validate(self, seq_len)
    }
    fn generate(&self, seq_len: usize, rng: &mut SplitMix64) -> Sample {
        planted::label_copy(self, seq_len, rng)
    }
}

impl TaskOps for ZipfTask {
    fn vocab(&self) -> usize {
        self.pairs.vocab()
    }
    fn lag_limit(&self, seq_len: usize) -> usize {
        self.pairs.lag_limit(seq_len)
    }
    fn validate(&self, seq_len: usize) -> Result<(), String> {
        planted::validate(&self.pairs, seq_len)?;
        if !(self.zipf_exponent.is_finite() && self.zipf_exponent >= 0.0) {
            return Err(format!(
                "zipf_exponent = {:?} must be finite and >= 0",
                self.zipf_exponent
            ));
        }
        Ok(())
    }
    fn generate(&self, seq_len: usize, rng: &mut SplitMix64) -> Sample {
        planted::zipf(self, seq_len, rng)
    }
}

impl TaskOps for BooksTask {
    fn vocab(&self) -> usize {
        256
    }
    fn buckets(&self) -> &'static [(&'static str, usize, usize)] {
        &CONTEXT_BUCKETS
    }
    fn validate(&self, _seq_len: usize) -> Result<(), String> {
        // the directory itself is checked when opened
        if self.data_dir.is_empty() {
            return Err("data_dir must name the directory of `vort data fetch books`".into());
        }
        Ok(())
    }
    /// Books sequences come from the corpus ([`super::Source`]); drawn from the config alone,
    /// a books sequence is unlabelled zeros.
    fn generate(&self, seq_len: usize, _rng: &mut SplitMix64) -> Sample {
        Sample::unlabelled(vec![0; seq_len])
    }
}

impl TaskOps for MqarTask {
    fn vocab(&self) -> usize {
        self.vocab_size
    }
    fn validate(&self, seq_len: usize) -> Result<(), String> {
        for (i, m) in self.train_mix.iter().enumerate() {
            if !self.train_data.is_empty() {
                return Err("train_mix needs no train_data".into());
            }
            mix_entry_fits(i, m.seq_len, seq_len)?;
            let entry = MqarTask {
                num_kv_pairs: m.num_kv_pairs,
                train_mix: Vec::new(),
                ..self.clone()
            };
            mqar::validate(&entry, m.seq_len).map_err(|e| format!("train_mix[{i}]: {e}"))?;
        }
        mqar::validate(self, seq_len)
    }
    fn generate(&self, seq_len: usize, rng: &mut SplitMix64) -> Sample {
        mqar::generate(self, seq_len, rng)
    }
}

impl TaskOps for RulerTask {
    fn vocab(&self) -> usize {
        256
    }
    fn validate(&self, seq_len: usize) -> Result<(), String> {
        if self.tasks.is_empty() {
            return Err("tasks must name at least one RULER task".into());
        }
        let need = self.tasks.iter().map(|k| k.min_len()).max().unwrap_or(0);
        if seq_len < need {
            return Err(format!(
                "seq_len = {seq_len} is too short for these RULER tasks (at least {need} bytes)"
            ));
        }
        Ok(())
    }
    fn generate(&self, seq_len: usize, rng: &mut SplitMix64) -> Sample {
        let kind = self.tasks[rng.below(self.tasks.len() as u64) as usize];
        ruler::generate(kind, seq_len, rng).map_or_else(
            // unreachable for a validated config: every task fits in seq_len
            || Sample::unlabelled(vec![u32::from(b' '); seq_len]),
            |r| r.sample,
        )
    }
}

/// Refuses entry `i` of a training mixture whose length is not in [8, seq_len].
pub(super) fn mix_entry_fits(i: usize, entry_len: usize, seq_len: usize) -> Result<(), String> {
    if entry_len < 8 || entry_len > seq_len {
        return Err(format!(
            "train_mix[{i}].seq_len = {entry_len} must be in [8, seq_len = {seq_len}]"
        ));
    }
    Ok(())
}

/// The flat form of the `[task]` table: every kind's fields in one table, each optional.
/// [`TaskConfig`] reads through it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlatTask {
    kind: Option<TaskKind>,
    seq_len: Option<usize>,
    max_lag: Option<usize>,
    queries: Option<usize>,
    n_filler: Option<usize>,
    n_keys: Option<usize>,
    n_values: Option<usize>,
    zipf_exponent: Option<f64>,
    data_dir: Option<String>,
    vocab_size: Option<usize>,
    num_kv_pairs: Option<usize>,
    power_a: Option<f64>,
    random_non_queries: Option<bool>,
    train_examples: Option<u64>,
    test_examples: Option<usize>,
    train_data: Option<String>,
    test_data: Option<String>,
    train_mix: Option<Vec<FlatMixEntry>>,
    tasks: Option<Vec<RulerKind>>,
}

/// An entry of a training mixture as the flat form reads it: MQAR's `{ seq_len, num_kv_pairs }`
/// or the planted pairs' `{ seq_len, queries }`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlatMixEntry {
    seq_len: usize,
    num_kv_pairs: Option<usize>,
    queries: Option<usize>,
}

/// The flat form's `train_mix` for `kind`: every entry with the one count the kind has
/// (`num_kv_pairs` for MQAR, `queries` for the planted pairs), or the entry is refused.
fn mix_of<T>(
    kind: TaskKind,
    entries: Option<Vec<FlatMixEntry>>,
    entry: impl Fn(usize, Option<usize>, Option<usize>) -> Option<T>,
) -> Result<Vec<T>, TaskError> {
    let want = if kind == TaskKind::Mqar {
        "num_kv_pairs"
    } else {
        "queries"
    };
    entries
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            entry(e.seq_len, e.num_kv_pairs, e.queries).ok_or_else(|| {
                TaskError::Invalid(format!(
                    "task.train_mix[{i}] needs seq_len and {want} (and nothing else) for kind = \
                     \"{kind}\""
                ))
            })
        })
        .collect()
}

/// Takes `field` out of the flat table for a kind that has it (its default when absent).
fn take<T>(field: &mut Option<T>, default: T) -> T {
    field.take().unwrap_or(default)
}

/// Refuses a field that the kind has no use for, unless it holds that field's default (as
/// every file written in the flat form does).
fn unused<T: PartialEq + std::fmt::Debug>(
    kind: TaskKind,
    name: &str,
    field: Option<T>,
    default: T,
) -> Result<(), TaskError> {
    match field {
        Some(v) if v != default => Err(TaskError::Invalid(format!(
            "task.{name} = {v:?} has no meaning for kind = \"{kind}\""
        ))),
        _ => Ok(()),
    }
}

impl TryFrom<FlatTask> for TaskConfig {
    type Error = TaskError;
    fn try_from(mut f: FlatTask) -> Result<TaskConfig, TaskError> {
        let kind = f.kind.take().unwrap_or_default();
        let seq_len = take(&mut f.seq_len, 2048);
        let spec = match kind {
            TaskKind::Zipf | TaskKind::LabelCopy => {
                let d = PlantedPairs::default();
                let pairs = PlantedPairs {
                    max_lag: take(&mut f.max_lag, d.max_lag),
                    queries: take(&mut f.queries, d.queries),
                    n_filler: take(&mut f.n_filler, d.n_filler),
                    n_keys: take(&mut f.n_keys, d.n_keys),
                    n_values: take(&mut f.n_values, d.n_values),
                    train_mix: mix_of(kind, f.train_mix.take(), |seq_len, k, q| match (k, q) {
                        (None, Some(queries)) => Some(PlantedLength { seq_len, queries }),
                        _ => None,
                    })?,
                };
                if kind == TaskKind::Zipf {
                    let zipf_exponent = take(&mut f.zipf_exponent, 1.0);
                    TaskSpec::Zipf(ZipfTask {
                        pairs,
                        zipf_exponent,
                    })
                } else {
                    TaskSpec::LabelCopy(pairs)
                }
            }
            TaskKind::Books => TaskSpec::Books(BooksTask {
                data_dir: take(&mut f.data_dir, BooksTask::default().data_dir),
            }),
            TaskKind::Ruler => TaskSpec::Ruler(RulerTask {
                tasks: take(&mut f.tasks, RulerTask::default().tasks),
            }),
            TaskKind::Mqar => {
                let d = MqarTask::default();
                TaskSpec::Mqar(MqarTask {
                    vocab_size: take(&mut f.vocab_size, d.vocab_size),
                    num_kv_pairs: take(&mut f.num_kv_pairs, d.num_kv_pairs),
                    power_a: take(&mut f.power_a, d.power_a),
                    random_non_queries: take(&mut f.random_non_queries, d.random_non_queries),
                    train_examples: take(&mut f.train_examples, d.train_examples),
                    test_examples: take(&mut f.test_examples, d.test_examples),
                    train_data: take(&mut f.train_data, d.train_data),
                    test_data: take(&mut f.test_data, d.test_data),
                    train_mix: mix_of(kind, f.train_mix.take(), |seq_len, k, q| match (k, q) {
                        (Some(num_kv_pairs), None) => Some(MixLength {
                            seq_len,
                            num_kv_pairs,
                        }),
                        _ => None,
                    })?,
                })
            }
        };
        f.refuse_unused(kind)?;
        Ok(TaskConfig { spec, seq_len })
    }
}

impl FlatTask {
    /// Refuses what is left after the kind took its fields ([`unused`]).
    fn refuse_unused(self, kind: TaskKind) -> Result<(), TaskError> {
        let (p, m) = (PlantedPairs::default(), MqarTask::default());
        unused(kind, "max_lag", self.max_lag, p.max_lag)?;
        unused(kind, "queries", self.queries, p.queries)?;
        unused(kind, "n_filler", self.n_filler, p.n_filler)?;
        unused(kind, "n_keys", self.n_keys, p.n_keys)?;
        unused(kind, "n_values", self.n_values, p.n_values)?;
        unused(kind, "zipf_exponent", self.zipf_exponent, 1.0)?;
        unused(
            kind,
            "data_dir",
            self.data_dir,
            BooksTask::default().data_dir,
        )?;
        unused(kind, "vocab_size", self.vocab_size, m.vocab_size)?;
        unused(kind, "num_kv_pairs", self.num_kv_pairs, m.num_kv_pairs)?;
        unused(kind, "power_a", self.power_a, m.power_a)?;
        let random = self.random_non_queries;
        unused(kind, "random_non_queries", random, m.random_non_queries)?;
        unused(
            kind,
            "train_examples",
            self.train_examples,
            m.train_examples,
        )?;
        unused(kind, "test_examples", self.test_examples, m.test_examples)?;
        unused(kind, "train_data", self.train_data, m.train_data)?;
        unused(kind, "test_data", self.test_data, m.test_data)?;
        unused(kind, "train_mix", self.train_mix, Vec::new())?;
        unused(kind, "tasks", self.tasks, RulerTask::default().tasks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<TaskConfig, String> {
        toml::from_str::<TaskConfig>(text).map_err(|e| e.to_string())
    }

    /// The flat reader: another kind's field at its default is what old files hold and is
    /// dropped; set to anything else it is refused, naming it; an unknown field is refused.
    #[test]
    fn the_flat_form_reads_old_files_and_refuses_foreign_settings() {
        let old = "kind = \"books\"\nseq_len = 64\ndata_dir = \"d\"\nn_keys = 64\npower_a = 0.01\n";
        assert_eq!(read(old).unwrap(), TaskConfig::books("d", 64));
        let e = read("kind = \"books\"\nn_keys = 10\n").unwrap_err();
        assert!(
            e.contains("task.n_keys = 10") && e.contains("kind = \"books\""),
            "{e}"
        );
        let e = read("kind = \"mqar\"\nzipf_exponent = 2.0\n").unwrap_err();
        assert!(e.contains("task.zipf_exponent"), "{e}");
        let e = read("kind = \"label-copy\"\nzipf_exponent = 0.5\n").unwrap_err();
        assert!(e.contains("task.zipf_exponent"), "{e}");
        assert!(read("kind = \"mqar\"\nnum_kv_paris = 4\n").is_err());
        assert!(read("kind = \"lstm\"\n").is_err());
        // without a kind: the default task (Zipf), as before
        assert_eq!(read("seq_len = 2048\n").unwrap(), TaskConfig::default());
    }

    /// Written, a task holds its kind, the sequence length and that kind's fields only, and
    /// reads back to itself.
    #[test]
    fn each_kind_writes_its_own_fields_only() {
        let own: [(TaskKind, &[&str]); 4] = [
            (
                TaskKind::Zipf,
                &[
                    "max_lag",
                    "queries",
                    "n_filler",
                    "n_keys",
                    "n_values",
                    "zipf_exponent",
                ],
            ),
            (
                TaskKind::LabelCopy,
                &["max_lag", "queries", "n_filler", "n_keys", "n_values"],
            ),
            (TaskKind::Books, &["data_dir"]),
            (
                TaskKind::Mqar,
                &[
                    "vocab_size",
                    "num_kv_pairs",
                    "power_a",
                    "random_non_queries",
                    "train_examples",
                    "test_examples",
                ],
            ),
        ];
        for (kind, fields) in own {
            let c = TaskConfig::of_kind(kind);
            let text = toml::to_string(&c).unwrap();
            let table: toml::Table = toml::from_str(&text).unwrap();
            let mut keys: Vec<&str> = table.keys().map(String::as_str).collect();
            keys.sort_unstable();
            let mut want: Vec<&str> = fields.iter().copied().chain(["kind", "seq_len"]).collect();
            want.sort_unstable();
            assert_eq!(keys, want, "{kind}: {text}");
            assert_eq!(table["kind"].as_str(), Some(kind.name()));
            assert_eq!(read(&text).unwrap(), c, "{kind}");
            assert!(c.validate().is_ok(), "{kind}");
        }
        // an MQAR training mixture is written as an array of tables and reads back
        let mut m = TaskConfig::of_kind(TaskKind::Mqar);
        m.mqar_mut().unwrap().train_mix = vec![MixLength {
            seq_len: 64,
            num_kv_pairs: 4,
        }];
        let text = toml::to_string(&m).unwrap();
        assert_eq!(read(&text).unwrap(), m, "{text}");
    }
}
