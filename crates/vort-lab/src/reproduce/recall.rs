//! `reproduce recall`: Zoology's multi-query associative recall (MQAR) for every mixer, through
//! one training code path: the sanity gate (softmax attention must solve (L, K) = (64, 4)),
//! Zoology's grid of (L, K) cells against model width and state size, and the paper's lag
//! claim at long L.
//!
//! An experiment is a TOML preset (`configs/recall/{quick,medium,full}.toml`, embedded in the
//! binary; `--config FILE` reads another): a `base` run config, the `mixers` (each a patch of
//! `[model]`/`[train]` fields), and the `cells` (each a patch of `[task]`/`[model]`/`[train]`
//! and a section: gate, grid or lags). Every run is a plain [`RunConfig`] (base, then cell, then
//! mixer), saved as its `config.toml`, so any run can be re-trained with `vort train --config`.
//!
//! Per (cell, mixer) the learning rate is swept on the first seed and the best one on the
//! validation stream (disjoint from train and test) is kept; the other seeds run at that rate.
//! Runs stop early at `train.early_stop_accuracy` of validation accuracy (Zoology: 0.99).
//!
//! Output: `report.md`, `results.json`, `acc_vs_width.png`, `acc_vs_state.png`,
//! `lr_sweep.png`, `acc_by_lag.png` (lags section), `alpha_hist.png` (VORT), and
//! `runs/<cell>/<mixer>/lr<lr>/seed<k>/`. Finished runs are reused and interrupted ones
//! resumed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::stats::{claim_verdict, compare_seeds, lag_curve, pct, sum_rows, wilson};
use crate::plot::{histogram, panels_plot, Panel, Series};
use crate::tasks::{MixLength, BUCKETS};
use crate::train::eval::{EvalResult, LagAccuracy};
use crate::train::{self, checkpoint, Adopted, RunConfig, RunOptions, TrainError};
use vort::Mixer;

/// The embedded presets, by scale name.
pub const PRESETS: [(&str, &str); 3] = [
    (
        "quick",
        include_str!("../../../../configs/recall/quick.toml"),
    ),
    (
        "medium",
        include_str!("../../../../configs/recall/medium.toml"),
    ),
    ("full", include_str!("../../../../configs/recall/full.toml")),
];

/// The section of the report a cell belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// Softmax attention must reach the gate accuracy here, or the stack is broken.
    Gate,
    /// Zoology's (L, K) grid: accuracy against width and state size.
    Grid,
    /// The paper's claim: accuracy by lag bucket at long L.
    Lags,
}

/// One mixer: a name for the report and a patch of the run config.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MixerSpec {
    /// Name in the report and the run directory.
    pub name: String,
    /// `[model]` fields of this mixer.
    #[serde(default)]
    pub model: toml::Table,
    /// `[train]` fields of this mixer.
    #[serde(default)]
    pub train: toml::Table,
    /// Learning rates swept for this mixer (default: the preset's; a cell's own list wins).
    pub lrs: Option<Vec<f64>>,
}

/// One cell of the experiment.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CellSpec {
    /// Name in the report and the run directory.
    pub name: String,
    /// Report section.
    pub section: Section,
    /// `[task]` fields (seq_len, num_kv_pairs, power_a, ...).
    #[serde(default)]
    pub task: toml::Table,
    /// `[model]` fields (d_model, ...).
    #[serde(default)]
    pub model: toml::Table,
    /// `[train]` fields (steps, ...).
    #[serde(default)]
    pub train: toml::Table,
    /// The mixers run in this cell (empty: all).
    #[serde(default)]
    pub mixers: Vec<String>,
    /// Seeds (default: the preset's).
    pub seeds: Option<Vec<u64>>,
    /// Learning rates swept (default: the preset's).
    pub lrs: Option<Vec<f64>>,
    /// Lengths at which every trained model of the cell is also scored, streamed in pieces of
    /// the training length with the state carried, node tables certified for the length, and
    /// softmax restricted to a window of the training length (length extrapolation; the gaps,
    /// so the lags, grow with the length).
    #[serde(default)]
    pub extrapolate: Vec<usize>,
    /// Test sequences per extrapolation length.
    #[serde(default = "default_extrapolate_examples")]
    pub extrapolate_examples: usize,
    /// Write the first seed's trained weights (`weights.safetensors`, no optimizer state)
    /// beside its config, for release: `vort eval --run DIR --data F` re-scores them.
    #[serde(default)]
    pub release_weights: bool,
}

fn default_extrapolate_examples() -> usize {
    16
}

/// A recall experiment (one preset file).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecallPreset {
    /// Name ("quick", ...).
    pub name: String,
    /// One paragraph for the report: what this preset is and what it costs.
    pub description: String,
    /// Seeds of every cell (the first one also sweeps the learning rate).
    pub seeds: Vec<u64>,
    /// Learning rates swept on the first seed.
    pub lrs: Vec<f64>,
    /// Accuracy softmax attention must reach in the gate cell.
    pub gate_accuracy: f64,
    /// A test accuracy from which a seed counts as having learned the task.
    pub learned_accuracy: f64,
    /// The base run config (a `[base.task]`, `[base.model]`, `[base.train]`).
    pub base: toml::Table,
    /// The mixers.
    pub mixers: Vec<MixerSpec>,
    /// The cells.
    pub cells: Vec<CellSpec>,
}

fn merge(into: &mut toml::Table, patch: &toml::Table) {
    for (k, v) in patch {
        match (into.get_mut(k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

impl RecallPreset {
    /// Parses a preset (unknown fields are errors) and resolves every run config once, so a
    /// bad field fails before anything is trained.
    ///
    /// # Errors
    /// [`TrainError::Config`] naming the file and the field.
    pub fn from_toml(text: &str, origin: &str) -> Result<RecallPreset, TrainError> {
        let bad = |message: String| TrainError::Config {
            path: origin.into(),
            message,
        };
        let p: RecallPreset = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if p.seeds.is_empty() || p.lrs.is_empty() || p.cells.is_empty() || p.mixers.is_empty() {
            return Err(bad("seeds, lrs, cells and mixers must be non-empty".into()));
        }
        let lists = p
            .cells
            .iter()
            .filter_map(|c| c.lrs.as_ref())
            .chain(p.mixers.iter().filter_map(|m| m.lrs.as_ref()))
            .chain([&p.lrs]);
        for l in lists {
            if l.is_empty() || l.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
                return Err(bad(format!(
                    "learning-rate lists must be non-empty and positive: {l:?}"
                )));
            }
        }
        for c in &p.cells {
            if c.seeds.as_ref().is_some_and(Vec::is_empty) {
                return Err(bad(format!("cell {}: seeds must be non-empty", c.name)));
            }
        }
        for cell in &p.cells {
            for m in &cell.mixers {
                if !p.mixers.iter().any(|x| &x.name == m) {
                    return Err(bad(format!("cell {}: unknown mixer `{m}`", cell.name)));
                }
            }
            for mixer in p.mixers_of(cell) {
                p.run_config(cell, mixer, p.lrs[0], p.seeds[0])
                    .map_err(|e| bad(format!("cell {} / mixer {}: {e}", cell.name, mixer.name)))?;
            }
        }
        Ok(p)
    }

    /// The embedded preset of a scale ("quick", "medium", "full").
    ///
    /// # Errors
    /// An unknown name; a preset that does not parse (a bug, caught by the tests).
    pub fn embedded(name: &str) -> Result<RecallPreset, TrainError> {
        let (_, text) =
            PRESETS
                .iter()
                .find(|(n, _)| *n == name)
                .ok_or_else(|| TrainError::Config {
                    path: name.into(),
                    message: "unknown recall preset (quick|medium|full)".into(),
                })?;
        Self::from_toml(text, &format!("configs/recall/{name}.toml"))
    }

    /// Narrows the preset to the cells named in `names` (in the preset's order), and says so
    /// at the top of its description: the report of a narrowed preset is partial, and the
    /// next run of the whole preset (which reuses these runs) replaces it.
    ///
    /// # Errors
    /// A name no cell has (the message lists the cells).
    pub fn only(&mut self, names: &[String]) -> Result<(), String> {
        if let Some(bad) = names
            .iter()
            .find(|n| !self.cells.iter().any(|c| &c.name == *n))
        {
            let all: Vec<&str> = self.cells.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "no cell {bad:?} in the {} preset (cells: {})",
                self.name,
                all.join(", ")
            ));
        }
        self.cells.retain(|c| names.contains(&c.name));
        self.description = format!(
            "**Partial run** (`--cell {}`): only these cells of the {} preset; the run of the \
             whole preset replaces this report. {}",
            names.join(" --cell "),
            self.name,
            self.description
        );
        Ok(())
    }

    /// The learning rates swept for (cell, mixer): the cell's list, else the mixer's, else
    /// the preset's.
    pub fn lrs_of(&self, cell: &CellSpec, mixer: &MixerSpec) -> Vec<f64> {
        cell.lrs
            .clone()
            .or_else(|| mixer.lrs.clone())
            .unwrap_or_else(|| self.lrs.clone())
    }

    /// The mixers of a cell, in the order they run: the cell's list when it has one (so a
    /// cell runs its most important comparisons first), else every mixer of the preset.
    pub fn mixers_of<'a>(&'a self, cell: &'a CellSpec) -> impl Iterator<Item = &'a MixerSpec> {
        let listed = cell
            .mixers
            .iter()
            .filter_map(|n| self.mixers.iter().find(|m| &m.name == n));
        let all = self.mixers.iter().filter(|_| cell.mixers.is_empty());
        listed.chain(all)
    }

    /// The run config of (cell, mixer) at learning rate `lr` and `seed`: base, then the cell's
    /// patch, then the mixer's.
    ///
    /// # Errors
    /// A field the run config refuses.
    pub fn run_config(
        &self,
        cell: &CellSpec,
        mixer: &MixerSpec,
        lr: f64,
        seed: u64,
    ) -> Result<RunConfig, TrainError> {
        let mut t = self.base.clone();
        let section = |name: &str, patch: &toml::Table| {
            let mut x = toml::Table::new();
            x.insert(name.into(), toml::Value::Table(patch.clone()));
            x
        };
        merge(&mut t, &section("task", &cell.task));
        merge(&mut t, &section("model", &cell.model));
        merge(&mut t, &section("train", &cell.train));
        merge(&mut t, &section("model", &mixer.model));
        merge(&mut t, &section("train", &mixer.train));
        let mut lr_patch = toml::Table::new();
        lr_patch.insert("lr".into(), toml::Value::Float(lr));
        merge(&mut t, &section("train", &lr_patch));
        t.insert("seed".into(), toml::Value::Integer(seed as i64));
        let text = toml::to_string(&t).map_err(|e| TrainError::Serialise(e.to_string()))?;
        RunConfig::from_toml(&text, &format!("{}/{}", cell.name, mixer.name))
    }

    /// Runs in the order they are trained (sweep first, then the other seeds), for the
    /// progress count.
    fn run_count(&self) -> usize {
        self.cells
            .iter()
            .map(|c| {
                let seeds = c.seeds.as_ref().unwrap_or(&self.seeds).len();
                self.mixers_of(c)
                    .map(|m| self.lrs_of(c, m).len() + seeds - 1)
                    .sum::<usize>()
            })
            .sum()
    }
}

/// One trained run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Seed.
    pub seed: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// Last validation accuracy (the learning-rate choice).
    pub val_accuracy: f64,
    /// Test accuracy over every answer.
    pub accuracy: f64,
    /// Correct test answers.
    pub correct: usize,
    /// Test answers.
    pub answers: usize,
    /// Test accuracy by lag bucket.
    pub buckets: Vec<LagAccuracy>,
    /// Test accuracy in doubling lag bins.
    pub lag_bins: Vec<LagAccuracy>,
    /// Steps trained (fewer than configured when stopped early).
    pub steps: u64,
    /// Mean training tokens/s.
    pub tokens_per_s: f64,
    /// Training tokens seen.
    pub tokens: u64,
    /// Training wall time (s) of the run's last call (its metrics' last `elapsed_s`).
    #[serde(default)]
    pub train_s: f64,
    /// Whether it reached the preset's `learned_accuracy`.
    pub learned: bool,
    /// Mean α on the pair tokens and on the rest (VORT), and a sample of each.
    pub alpha: Option<crate::train::eval::AlphaSample>,
    /// Scores at the cell's extrapolation lengths.
    #[serde(default)]
    pub extrapolation: Vec<Extrapolation>,
    /// The step at which the loss became non-finite (the run is then not evaluated).
    #[serde(default)]
    pub diverged_at: Option<u64>,
}

/// A trained model scored at another sequence length.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Extrapolation {
    /// Sequence length L of the scored sequences.
    pub seq_len: usize,
    /// Sequences scored (a cached score of another count is recomputed).
    #[serde(default)]
    pub examples: usize,
    /// Accuracy over every answer.
    pub accuracy: f64,
    /// Correct answers.
    pub correct: usize,
    /// Answers.
    pub answers: usize,
    /// By lag bucket.
    pub buckets: Vec<LagAccuracy>,
}

/// Removes a run's extrapolation caches (`extrapolate-L*.json`): they belong to the model the
/// run had, and a continued run has another.
fn remove_extrapolations(dir: &Path) -> Result<(), TrainError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("extrapolate-L") && name.ends_with(".json") {
            std::fs::remove_file(e.path()).map_err(|err| checkpoint::io(&e.path(), err))?;
        }
    }
    Ok(())
}

/// Scores the model of the run in `dir` (config `c`) at length `seq_len` (see
/// [`CellSpec::extrapolate`]); the result is cached as `extrapolate-L<len>.json` in `dir`,
/// and reused while the number of scored sequences is unchanged.
fn extrapolate(
    dir: &Path,
    c: &RunConfig,
    seq_len: usize,
    examples: usize,
    step: u64,
) -> Result<Extrapolation, TrainError> {
    let cache = dir.join(format!("extrapolate-L{seq_len}.json"));
    if let Some(e) = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| serde_json::from_str::<Extrapolation>(&t).ok())
        .filter(|e| e.examples == examples)
    {
        return Ok(e);
    }
    let mut cx = c.clone();
    cx.task.seq_len = seq_len;
    cx.task.test_examples = examples;
    match &mut cx.model.mixer {
        Mixer::Vort { nodes, .. } if nodes.horizon != 0 && nodes.horizon < seq_len as u64 => {
            nodes.horizon = seq_len as u64;
        }
        Mixer::PowerLaw { horizon, .. } if *horizon != 0 && *horizon < seq_len as u64 => {
            *horizon = seq_len as u64;
        }
        Mixer::Softmax { window } if *window == 0 => *window = c.task.seq_len,
        _ => {}
    }
    let (model, _vm) = crate::train::eval::load_params_as(dir, &cx)?;
    let source = crate::tasks::Source::open(&cx.task)?;
    let e = crate::train::eval::evaluate_stream(
        &model,
        &source,
        &cx,
        step,
        crate::tasks::Stream::Eval,
        examples,
        Some(c.task.seq_len),
        &train::device(),
    )?;
    let x = Extrapolation {
        seq_len,
        examples,
        accuracy: e.accuracy,
        correct: e.buckets.iter().map(|b| b.correct).sum(),
        answers: e.buckets.iter().map(|b| b.n).sum(),
        buckets: e.buckets,
    };
    let json =
        serde_json::to_string_pretty(&x).map_err(|e| TrainError::Serialise(e.to_string()))?;
    checkpoint::write_atomic(&cache, json.as_bytes())?;
    Ok(x)
}

/// One (cell, mixer): the sweep and the seeds at the chosen rate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    /// Cell name.
    pub cell: String,
    /// Section.
    pub section: Section,
    /// Mixer name.
    pub mixer: String,
    /// Sequence length L.
    pub seq_len: usize,
    /// Pairs K.
    pub num_kv_pairs: usize,
    /// Gap law exponent a.
    pub power_a: f64,
    /// The training mixture of lengths (empty: trained at L).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub train_mix: Vec<MixLength>,
    /// d_model.
    pub d_model: usize,
    /// Recurrent state of the whole model in floats at length L (softmax: its KV cache).
    pub state_floats: usize,
    /// The sweep on the first seed, in learning-rate order.
    pub sweep: Vec<RunResult>,
    /// The chosen learning rate (best validation accuracy).
    pub best_lr: f64,
    /// Every seed at the chosen rate (the first is the sweep's run).
    pub seeds: Vec<RunResult>,
}

impl CellResult {
    /// Mean and sample sd of the test accuracy over seeds.
    pub fn mean_sd(&self) -> (f64, f64) {
        let x: Vec<f64> = self.seeds.iter().map(|r| r.accuracy).collect();
        super::mean_sd(&x)
    }
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecallReport {
    /// The preset.
    pub preset: RecallPreset,
    /// Every (cell, mixer).
    pub cells: Vec<CellResult>,
    /// Whether softmax attention passed the gate (None: no gate cell).
    pub gate_passed: Option<bool>,
    /// Wall time of this call (s).
    pub wall_s: f64,
    /// Runs reused from an earlier call.
    pub reused: usize,
    /// (cell, mixer) pairs left out because a run of theirs is not finished (a report
    /// written without training, `--report-only`): "cell / mixer (first missing run)".
    #[serde(default)]
    pub pending: Vec<String>,
}

/// Floats of the recurrent state of `cfg`'s model at sequence length `l`: per layer and head,
/// N nodes × F features × (head_dim + 1) (the numerator and the normaliser); softmax keeps
/// keys and values of every token (of the window).
pub fn state_floats(cfg: &RunConfig, nodes: usize) -> usize {
    let m = &cfg.model;
    let l = cfg.task.seq_len;
    let per_head = match m.mixer {
        Mixer::Softmax { window } => {
            let kept = if window > 0 { window.min(l) } else { l };
            2 * kept * m.head_dim
        }
        _ => {
            let f = m.feature_map.dim(m.head_dim, m.features);
            nodes * f * (m.head_dim + 1)
        }
    };
    m.layers * m.heads * per_head
}

fn lr_label(lr: f64) -> String {
    format!("{lr:.1e}")
}

fn run_dir(out: &Path, cell: &CellSpec, mixer: &MixerSpec, lr: f64, seed: u64) -> PathBuf {
    out.join("runs")
        .join(&cell.name)
        .join(&mixer.name)
        .join(format!("lr{}", lr_label(lr)))
        .join(format!("seed{seed}"))
}

/// Marker of a run whose loss or gradient became non-finite (`diverged.json`).
const DIVERGED_FILE: &str = "diverged.json";

/// What `diverged.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Diverged {
    /// The step whose loss or gradient was not finite.
    step: u64,
    /// That step's loss, as text (NaN or inf when it was the loss).
    loss: String,
    /// That step's gradient norm, as text (NaN when the loss was not finite; absent in
    /// markers written before it was recorded).
    #[serde(default)]
    grad_norm: String,
}

impl RunResult {
    /// The result of a run that diverged at `step`: no accuracy, no answers.
    fn diverged(seed: u64, lr: f64, step: u64, c: &RunConfig) -> RunResult {
        RunResult {
            seed,
            lr,
            val_accuracy: f64::NAN,
            accuracy: 0.0,
            correct: 0,
            answers: 0,
            buckets: Vec::new(),
            lag_bins: Vec::new(),
            steps: step,
            tokens_per_s: f64::NAN,
            tokens: step * (c.train.batch_size * c.task.seq_len) as u64,
            train_s: 0.0,
            learned: false,
            alpha: None,
            extrapolation: Vec::new(),
            diverged_at: Some(step),
        }
    }
}

/// How [`run`] treats each run: progress output, and whether a run that is not finished is
/// trained (or left pending).
#[derive(Debug, Clone, Copy)]
struct Mode {
    progress: bool,
    train_missing: bool,
    /// Print the runs reused from an earlier call (the first pass only).
    print_reused: bool,
}

/// What [`one`] found or did.
enum Outcome {
    /// Finished: its result, and whether it was reused.
    Done(Box<RunResult>, bool),
    /// Not finished, and this call trains nothing.
    Missing,
    /// Another vort process is training it (its run directory is locked).
    Busy,
}

/// Trains (or reuses) one run.
fn one(
    out: &Path,
    preset: &RecallPreset,
    cell: &CellSpec,
    mixer: &MixerSpec,
    lr: f64,
    seed: u64,
    mode: Mode,
) -> Result<Outcome, TrainError> {
    let Mode {
        progress,
        train_missing,
        ..
    } = mode;
    let c = preset.run_config(cell, mixer, lr, seed)?;
    let dir = run_dir(out, cell, mixer, lr, seed);
    let eval_path = dir.join(train::EVAL_FILE);
    let saved = std::fs::read_to_string(dir.join(train::CONFIG_FILE)).ok();
    // finished: evaluated, with the same config. Compared parsed, not as text: a config
    // written before a field existed reads that field's default, which is what it ran with
    let saved = saved
        .as_deref()
        .and_then(|t| RunConfig::from_toml(t, "config.toml").ok());
    let same_config = match saved {
        Some(s) if s == c => true,
        // a preset that changed only the early-stop threshold keeps the runs that threshold
        // cannot change, and continues those it stopped too soon (see `adopt_early_stop`)
        Some(_) if train_missing => match train::adopt_early_stop(&dir, &c) {
            Ok(Adopted::Same) => true,
            Ok(Adopted::Continues) => {
                remove_extrapolations(&dir)?;
                false
            }
            Ok(Adopted::No) => false,
            Err(TrainError::RunBusy(_)) => return Ok(Outcome::Busy),
            Err(e) => return Err(e),
        },
        _ => false,
    };
    let finished = match std::fs::read_to_string(&eval_path) {
        Ok(e) if same_config => serde_json::from_str::<EvalResult>(&e).ok(),
        _ => None,
    };
    // a run that diverged is a result of the sweep (a learning rate too high), not a reason
    // to stop the experiment: it is recorded and reused like a finished one
    let diverged_path = dir.join(DIVERGED_FILE);
    let diverged_before = std::fs::read_to_string(&diverged_path)
        .ok()
        .filter(|_| same_config)
        .and_then(|t| serde_json::from_str::<Diverged>(&t).ok());
    if let Some(d) = diverged_before {
        return Ok(Outcome::Done(
            Box::new(RunResult::diverged(seed, lr, d.step, &c)),
            true,
        ));
    }
    if finished.is_none() && !train_missing {
        return Ok(Outcome::Missing);
    }
    let reused = finished.is_some();
    let eval = match finished {
        Some(e) => e,
        None => {
            let resume = dir.join(train::CHECKPOINT_FILE).exists();
            let opts = RunOptions {
                progress,
                ..RunOptions::default()
            };
            match train::run_with(&c, &dir, resume, &opts) {
                Ok(s) => match s.eval {
                    Some(r) => r,
                    None => train::eval::run(&dir)?,
                },
                Err(TrainError::Diverged {
                    step,
                    loss,
                    grad_norm,
                }) => {
                    let json = serde_json::to_string(&Diverged {
                        step,
                        loss: loss.to_string(),
                        grad_norm: grad_norm.to_string(),
                    })
                    .map_err(|e| TrainError::Serialise(e.to_string()))?;
                    checkpoint::write_atomic(&diverged_path, json.as_bytes())?;
                    return Ok(Outcome::Done(
                        Box::new(RunResult::diverged(seed, lr, step, &c)),
                        false,
                    ));
                }
                // another process trains it: leave it to that one (see `run`)
                Err(TrainError::RunBusy(_)) => return Ok(Outcome::Busy),
                Err(e) => return Err(e),
            }
        }
    };
    let metrics = train::read_metrics(&dir);
    let val = metrics
        .iter()
        .rev()
        .find_map(|m| m.val_acc)
        .unwrap_or(f64::NAN);
    let tps: Vec<f64> = metrics.iter().map(|m| m.tokens_per_s).collect();
    let tokens_per_s = if tps.is_empty() {
        f64::NAN
    } else {
        tps.iter().sum::<f64>() / tps.len() as f64
    };
    let answers: usize = eval.buckets.iter().map(|b| b.n).sum();
    let correct: usize = eval.buckets.iter().map(|b| b.correct).sum();
    let extrapolation = cell
        .extrapolate
        .iter()
        .map(|&l| extrapolate(&dir, &c, l, cell.extrapolate_examples, eval.step))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcome::Done(
        Box::new(RunResult {
            seed,
            lr,
            val_accuracy: val,
            accuracy: eval.accuracy,
            correct,
            answers,
            buckets: eval.buckets.clone(),
            lag_bins: eval.lag_bins.clone(),
            steps: eval.step,
            tokens_per_s,
            tokens: eval.step * (c.train.batch_size * c.task.seq_len) as u64,
            train_s: metrics.last().map_or(0.0, |m| m.elapsed_s),
            learned: eval.accuracy >= preset.learned_accuracy,
            alpha: eval.alpha.clone(),
            extrapolation,
            diverged_at: None,
        }),
        reused,
    ))
}

/// Runs `preset` into `out_dir` (see the module doc). With `train_missing` false nothing is
/// trained: the report covers the (cell, mixer) pairs whose runs are all finished and lists
/// the others as pending (a report of a long preset so far).
///
/// Several processes may run the same preset into the same `out_dir` at once (e.g. one per
/// core pair, each with `RAYON_NUM_THREADS` set): each skips the runs whose directories
/// another holds locked ([`train::RunLock`]) and trains the next free one, then waits for the
/// skipped runs and writes the whole report.
///
/// # Errors
/// Training errors of any run, plot and I/O errors.
pub fn run(
    preset: &RecallPreset,
    out_dir: &Path,
    progress: bool,
    train_missing: bool,
) -> Result<RecallReport, TrainError> {
    let t0 = Instant::now();
    let mut mode = Mode {
        progress,
        train_missing,
        print_reused: true,
    };
    let mut waited_for = 0;
    loop {
        let (mut rep, busy) = run_pass(preset, out_dir, mode)?;
        // the report is written once, when nothing is left to wait for
        if busy == 0 || !train_missing {
            rep.wall_s = t0.elapsed().as_secs_f64();
            write_report(&rep, out_dir)?;
            return Ok(rep);
        }
        // said once, and again only when the number changes
        if progress && busy != waited_for {
            waited_for = busy;
            eprintln!(
                "waiting for {busy} run(s) in use by another vort process (checking every {} s)",
                BUSY_POLL.as_secs()
            );
        }
        mode.print_reused = false;
        std::thread::sleep(BUSY_POLL);
    }
}

/// How often a run of a preset looks again at the runs another process trains.
const BUSY_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// One pass over the preset (see [`run`], which writes the report): the report, and how many
/// runs it skipped because another process holds them.
fn run_pass(
    preset: &RecallPreset,
    out_dir: &Path,
    mode: Mode,
) -> Result<(RecallReport, usize), TrainError> {
    let Mode { progress, .. } = mode;
    let mut busy = 0usize;
    std::fs::create_dir_all(out_dir).map_err(|e| checkpoint::io(out_dir, e))?;
    let total = preset.run_count();
    let mut done = 0usize;
    let mut trained_s = 0.0f64;
    let mut trained = 0usize;
    let mut reused = 0usize;
    let mut cells = Vec::new();
    let mut pending = Vec::new();
    let mut step = |r: &RunResult, was_reused: bool, what: &str, secs: f64| {
        done += 1;
        if was_reused {
            reused += 1;
        } else {
            trained += 1;
            trained_s += secs;
        }
        if progress && (mode.print_reused || !was_reused) {
            let eta = if trained > 0 {
                let left = (total - done) as f64 * trained_s / trained as f64;
                format!(", ETA {:.0} min", left / 60.0)
            } else {
                String::new()
            };
            let result = match r.diverged_at {
                Some(step) => format!("diverged at step {step} (non-finite loss or gradient)"),
                None => format!(
                    "test {:.1}% (val {:.1}%, {} steps, {:.0} tok/s)",
                    100.0 * r.accuracy,
                    100.0 * r.val_accuracy,
                    r.steps,
                    r.tokens_per_s
                ),
            };
            eprintln!(
                "[{done}/{total}] {what}: {result}{}{eta}",
                if was_reused { ", reused" } else { "" },
            );
        }
    };
    for cell in &preset.cells {
        let seeds = cell.seeds.clone().unwrap_or_else(|| preset.seeds.clone());
        for mixer in preset.mixers_of(cell) {
            let lrs = preset.lrs_of(cell, mixer);
            let mut sweep = Vec::new();
            let pending_run = |what: String| format!("{} / {} ({what})", cell.name, mixer.name);
            let mut missing = None;
            for &lr in &lrs {
                let ts = Instant::now();
                let (r, was) = match one(out_dir, preset, cell, mixer, lr, seeds[0], mode)? {
                    Outcome::Done(r, was) => (*r, was),
                    Outcome::Missing => {
                        missing = Some(pending_run(format!(
                            "lr {} seed {}",
                            lr_label(lr),
                            seeds[0]
                        )));
                        break;
                    }
                    // the other rates of the sweep can still be trained here meanwhile
                    Outcome::Busy => {
                        busy += 1;
                        missing = Some(pending_run(format!(
                            "lr {} seed {}: in use by another vort process",
                            lr_label(lr),
                            seeds[0]
                        )));
                        continue;
                    }
                };
                let what = format!(
                    "{} {} lr {} seed {}",
                    cell.name,
                    mixer.name,
                    lr_label(lr),
                    seeds[0]
                );
                step(&r, was, &what, ts.elapsed().as_secs_f64());
                sweep.push(r);
            }
            if let Some(m) = missing {
                pending.push(m);
                continue;
            }
            // the best validation accuracy; ties (e.g. several at 1.0) go to the rate that
            // got there in fewer steps
            let best = sweep
                .iter()
                .enumerate()
                .max_by(|(_, a), (_, b)| {
                    let va = if a.val_accuracy.is_nan() {
                        -1.0
                    } else {
                        a.val_accuracy
                    };
                    let vb = if b.val_accuracy.is_nan() {
                        -1.0
                    } else {
                        b.val_accuracy
                    };
                    va.total_cmp(&vb).then(b.steps.cmp(&a.steps))
                })
                .map_or(0, |(i, _)| i);
            let best_lr = lrs[best];
            let mut runs = vec![sweep[best].clone()];
            for &seed in &seeds[1..] {
                let ts = Instant::now();
                let (r, was) = match one(out_dir, preset, cell, mixer, best_lr, seed, mode)? {
                    Outcome::Done(r, was) => (*r, was),
                    Outcome::Missing => {
                        missing =
                            Some(pending_run(format!("lr {} seed {seed}", lr_label(best_lr))));
                        break;
                    }
                    Outcome::Busy => {
                        busy += 1;
                        missing = Some(pending_run(format!(
                            "lr {} seed {seed}: in use by another vort process",
                            lr_label(best_lr)
                        )));
                        continue;
                    }
                };
                let what = format!(
                    "{} {} lr {} seed {seed}",
                    cell.name,
                    mixer.name,
                    lr_label(best_lr)
                );
                step(&r, was, &what, ts.elapsed().as_secs_f64());
                runs.push(r);
            }
            if let Some(m) = missing {
                pending.push(m);
                continue;
            }
            if cell.release_weights {
                let dir = run_dir(out_dir, cell, mixer, best_lr, seeds[0]);
                let weights = dir.join(train::WEIGHTS_FILE);
                if !weights.exists() {
                    let ck = checkpoint::Checkpoint::load(&dir.join(train::CHECKPOINT_FILE))?;
                    ck.weights_only().save(&weights)?;
                }
            }
            let c = preset.run_config(cell, mixer, best_lr, seeds[0])?;
            let model_nodes = nodes_of(&c)?;
            cells.push(CellResult {
                cell: cell.name.clone(),
                section: cell.section,
                mixer: mixer.name.clone(),
                seq_len: c.task.seq_len,
                num_kv_pairs: c.task.num_kv_pairs,
                power_a: c.task.power_a,
                train_mix: c.task.train_mix.clone(),
                d_model: c.model.d_model,
                state_floats: state_floats(&c, model_nodes),
                sweep,
                best_lr,
                seeds: runs,
            });
        }
    }
    let gate_passed = {
        let gate: Vec<&CellResult> = cells
            .iter()
            .filter(|c| c.section == Section::Gate && c.mixer == "softmax")
            .collect();
        (!gate.is_empty()).then(|| {
            gate.iter()
                .all(|c| c.seeds.iter().all(|r| r.accuracy >= preset.gate_accuracy))
        })
    };
    let rep = RecallReport {
        preset: preset.clone(),
        cells,
        gate_passed,
        wall_s: 0.0, // set by `run`, over every pass
        reused,
        pending,
    };
    Ok((rep, busy))
}

/// Writes the plots, results.json and report.md of `rep` into `out_dir`.
fn write_report(rep: &RecallReport, out_dir: &Path) -> Result<(), TrainError> {
    plots(rep, out_dir)?;
    // results.json keeps the α means, not the raw samples (they are in each run's eval.json)
    let mut lean = rep.clone();
    for r in lean
        .cells
        .iter_mut()
        .flat_map(|c| c.sweep.iter_mut().chain(&mut c.seeds))
    {
        if let Some(a) = &mut r.alpha {
            a.memorable.clear();
            a.other.clear();
            a.function.clear();
        }
    }
    let json =
        serde_json::to_string_pretty(&lean).map_err(|e| TrainError::Serialise(e.to_string()))?;
    checkpoint::write_atomic(&out_dir.join("results.json"), json.as_bytes())?;
    checkpoint::write_atomic(&out_dir.join("report.md"), markdown(rep).as_bytes())?;
    Ok(())
}

/// Memory nodes N of the model of `cfg` (1 for one exponential per head, M for the mixture).
fn nodes_of(cfg: &RunConfig) -> Result<usize, TrainError> {
    let vm = candle_nn::VarMap::new();
    let model = train::run_model(cfg, &vm, &train::device())?;
    Ok(model.blocks().first().map_or(0, vort::block::Block::nodes))
}

/// Zoology's published MQAR points (read off its figures): (model, state floats, accuracy).
pub const ZOOLOGY_POINTS: [(&str, f64, f64); 5] = [
    ("Based (Zoology)", 2.5e4, 0.84),
    ("Based (Zoology)", 1.5e5, 0.99),
    ("GLA (Zoology)", 7.0e4, 0.95),
    ("Mamba-2 (Zoology)", 6.0e4, 0.83),
    ("Mamba-2 (Zoology)", 1.0e5, 0.83),
];

/// The paper's accuracy at lags > 1000 (docs/DESIGN.md §3): power law 79.4, exponential 52.3,
/// mixture 61.8 (percent).
pub fn paper_lag_number(mixer: &str) -> Option<f64> {
    match mixer {
        "vort" | "vort-banks" | "power-law" => Some(79.4),
        "exponential" => Some(52.3),
        "mixture" => Some(61.8),
        _ => None,
    }
}

fn mixer_names(rep: &RecallReport) -> Vec<String> {
    rep.preset.mixers.iter().map(|m| m.name.clone()).collect()
}

/// (x(cell), mean test accuracy) of `mixer` in every non-lag cell at (L, K) = `lk`.
fn grid_points(
    rep: &RecallReport,
    mixer: &str,
    lk: (usize, usize),
    x: impl Fn(&CellResult) -> f64,
) -> Vec<(f64, f64)> {
    rep.cells
        .iter()
        .filter(|c| {
            c.section != Section::Lags && c.mixer == mixer && (c.seq_len, c.num_kv_pairs) == lk
        })
        .map(|c| (x(c), c.mean_sd().0))
        .collect()
}

fn plots(rep: &RecallReport, out: &Path) -> Result<(), TrainError> {
    let names = mixer_names(rep);
    // accuracy against width, one panel per grid cell (L, K)
    let mut grid_cells: Vec<(usize, usize)> = rep
        .cells
        .iter()
        .filter(|c| c.section != Section::Lags)
        .map(|c| (c.seq_len, c.num_kv_pairs))
        .collect();
    grid_cells.sort_unstable();
    grid_cells.dedup();
    let mut panels = Vec::new();
    for &(l, k) in &grid_cells {
        let mut series = Vec::new();
        for (ci, name) in names.iter().enumerate() {
            let mut pts = grid_points(rep, name, (l, k), |c| c.d_model as f64);
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                series.push(Series::line(name.clone(), pts).with_color(ci));
            }
        }
        panels.push(Panel {
            title: format!("MQAR L = {l}, K = {k}: test accuracy (mean over seeds)"),
            x_label: "d_model".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_vs_width.png"), &panels)?;
    }
    // accuracy against state size, one panel per grid cell (L, K) with a marker per width,
    // and Zoology's published points (from its figures, the same on every panel)
    let mut panels = Vec::new();
    for &(l, k) in &grid_cells {
        let mut series = Vec::new();
        for (ci, name) in names.iter().enumerate() {
            let pts = grid_points(rep, name, (l, k), |c| c.state_floats as f64);
            if !pts.is_empty() {
                series.push(Series::points(name.clone(), pts).with_color(ci));
            }
        }
        for (i, label) in ["Based (Zoology)", "GLA (Zoology)", "Mamba-2 (Zoology)"]
            .iter()
            .enumerate()
        {
            let pts: Vec<(f64, f64)> = ZOOLOGY_POINTS
                .iter()
                .filter(|p| p.0 == *label)
                .map(|p| (p.1, p.2))
                .collect();
            // markers: a single published point (GLA) would not show as a line
            series.push(Series::points(*label, pts).with_color(names.len() + i));
        }
        panels.push(Panel {
            title: format!(
                "MQAR L = {l}, K = {k}: test accuracy against recurrent state size (mean over \
                 seeds)"
            ),
            x_label: "state floats (whole model; softmax: its KV cache at L)".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_vs_state.png"), &panels)?;
    }
    // the learning-rate sweeps: validation accuracy against lr, one panel per cell
    let mut panels = Vec::new();
    for cell in cells_where(rep, |_| true) {
        let series: Vec<Series> = rep
            .cells
            .iter()
            .filter(|c| c.cell == cell)
            .map(|c| {
                let ci = names.iter().position(|n| n == &c.mixer).unwrap_or(0);
                let pts = c
                    .sweep
                    .iter()
                    .map(|r| {
                        (
                            r.lr,
                            if r.val_accuracy.is_nan() {
                                0.0
                            } else {
                                r.val_accuracy
                            },
                        )
                    })
                    .collect();
                Series::line(c.mixer.clone(), pts).with_color(ci)
            })
            .collect();
        panels.push(Panel {
            title: format!("{cell}: validation accuracy against peak learning rate (seed 0)"),
            x_label: "learning rate".into(),
            y_label: "validation accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("lr_sweep.png"), &panels)?;
    }
    // accuracy by lag (lags section): doubling bins with >= MIN_BIN answers over seeds
    let mut panels = Vec::new();
    for cell in cells_where(rep, |c| c.section == Section::Lags) {
        let mut series = Vec::new();
        for c in rep.cells.iter().filter(|c| c.cell == cell) {
            let ci = names.iter().position(|n| n == &c.mixer).unwrap_or(0);
            let bins: Vec<&[LagAccuracy]> = c.seeds.iter().map(|r| r.lag_bins.as_slice()).collect();
            let curve = lag_curve(&bins, 1.0);
            series.push(
                Series::line(c.mixer.clone(), curve.points)
                    .with_color(ci)
                    .with_bars(curve.bars),
            );
        }
        // the paper's accuracy at lags > 1000, dashed over that bucket in the colour of the
        // first mixer it applies to (VORT and the power law share one number)
        let mut drawn: Vec<f64> = Vec::new();
        for c in rep.cells.iter().filter(|c| c.cell == cell) {
            let Some(x) = paper_lag_number(&c.mixer) else {
                continue;
            };
            if drawn.contains(&x) || c.seq_len <= 1000 {
                continue;
            }
            drawn.push(x);
            let ci = names.iter().position(|n| n == &c.mixer).unwrap_or(0);
            series.push(
                Series::dashed(
                    format!("paper, lags > 1000: {} {x}%", c.mixer),
                    vec![(1001.0, x / 100.0), (c.seq_len as f64, x / 100.0)],
                )
                .with_color(ci),
            );
        }
        panels.push(Panel {
            title: format!(
                "{cell}: test accuracy by lag (doubling bins with >= {MIN_BIN} answers, all \
                 seeds, Wilson 95%)"
            ),
            x_label: "lag (query position - value position)".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_by_lag.png"), &panels)?;
    }
    // length extrapolation: accuracy against the scored length, the training length first
    let mut panels = Vec::new();
    for cell in cells_where(rep, |c| c.seeds.iter().any(|r| !r.extrapolation.is_empty())) {
        let series: Vec<Series> = rep
            .cells
            .iter()
            .filter(|c| c.cell == cell)
            .map(|c| {
                let ci = names.iter().position(|n| n == &c.mixer).unwrap_or(0);
                let mut pts = vec![(c.seq_len as f64, c.mean_sd().0)];
                let nx = c.seeds[0].extrapolation.len();
                for i in 0..nx {
                    let (k, n) = extrapolations(c, i)
                        .fold((0, 0), |(k, n), x| (k + x.correct, n + x.answers));
                    if n > 0 {
                        let l = c.seeds[0].extrapolation[i].seq_len as f64;
                        pts.push((l, k as f64 / n as f64));
                    }
                }
                Series::line(c.mixer.clone(), pts).with_color(ci)
            })
            .collect();
        panels.push(Panel {
            title: format!("{cell}: test accuracy against sequence length (trained at the first)"),
            x_label: "sequence length L".into(),
            y_label: "accuracy".into(),
            log_x: true,
            log_y: false,
            series,
        });
    }
    if !panels.is_empty() {
        panels_plot(&out.join("extrapolation.png"), &panels)?;
    }
    // learned α of VORT: pair tokens against the rest
    let mut pair = Vec::new();
    let mut rest = Vec::new();
    for c in rep.cells.iter().filter(|c| c.mixer.starts_with("vort")) {
        for r in &c.seeds {
            if let Some(a) = &r.alpha {
                pair.extend(a.memorable.iter().map(|&x| f64::from(x)));
                rest.extend(a.other.iter().map(|&x| f64::from(x)));
            }
        }
    }
    if !pair.is_empty() {
        histogram(
            &out.join("alpha_hist.png"),
            "VORT: learned orders α (all cells, layers, heads), key-value pair tokens",
            "α",
            &pair,
            40,
        )?;
    }
    if !rest.is_empty() {
        histogram(
            &out.join("alpha_hist_other.png"),
            "VORT: learned orders α (all cells, layers, heads), queries and filler",
            "α",
            &rest,
            40,
        )?;
    }
    Ok(())
}

pub use super::stats::MIN_BIN;

/// Pooled (correct, answers) over every seed of `c` in lag bucket `b` (None: all answers).
fn pooled(c: &CellResult, b: Option<usize>) -> (usize, usize) {
    match b {
        // a diverged seed has no buckets: it adds no answers
        Some(i) => sum_rows(c.seeds.iter().filter_map(|r| r.buckets.get(i))),
        None => c
            .seeds
            .iter()
            .fold((0, 0), |(k, n), r| (k + r.correct, n + r.answers)),
    }
}

/// Whether the seeds of `c`, pooled, reach the `threshold` accuracy (learned the cell).
fn learned_pooled(c: &CellResult, threshold: f64) -> bool {
    let (k, n) = pooled(c, None);
    n > 0 && k as f64 >= threshold * n as f64
}

/// The answers at lags > 1000 of `c`'s seeds, (correct, answers) per seed, at every length
/// scored that has such lags: the cell's own length first, then its extrapolation lengths in
/// order (a model trained at L = 512 is read on 2048-token sequences; one tested at 2048 also
/// on 4096). Returns (per seed, the length scored) per length.
fn far_answers(c: &CellResult) -> Vec<(Vec<(usize, usize)>, usize)> {
    let far = BUCKETS.len() - 1;
    let own: Vec<(usize, usize)> = c
        .seeds
        .iter()
        .map(|r| r.buckets.get(far).map_or((0, 0), |b| (b.correct, b.n)))
        .collect();
    let lengths = c.seeds.first().map_or(0, |r| r.extrapolation.len());
    let scored = (0..lengths).map(|i| {
        let per_seed: Vec<(usize, usize)> = extrapolations(c, i)
            .map(|x| (x.buckets[far].correct, x.buckets[far].n))
            .collect();
        (per_seed, c.seeds[0].extrapolation[i].seq_len)
    });
    std::iter::once((own, c.seq_len))
        .chain(scored)
        .filter(|(s, _)| s.iter().any(|r| r.1 > 0))
        .collect()
}

/// (correct, answers) of every seed of `c` over all its answers.
fn per_seed(c: &CellResult) -> Vec<(usize, usize)> {
    c.seeds.iter().map(|r| (r.correct, r.answers)).collect()
}

/// The extrapolation scores of every seed of `c` at its `i`-th scored length.
fn extrapolations(c: &CellResult, i: usize) -> impl Iterator<Item = &Extrapolation> {
    c.seeds.iter().filter_map(move |r| r.extrapolation.get(i))
}

/// Names of the cells with a result matching `keep`, in report order, once each.
fn cells_where(rep: &RecallReport, keep: impl Fn(&CellResult) -> bool) -> Vec<&str> {
    let mut names: Vec<&str> = rep
        .cells
        .iter()
        .filter(|c| keep(c))
        .map(|c| c.cell.as_str())
        .collect();
    // a cell's results are consecutive (one per mixer)
    names.dedup();
    names
}

/// One generated line per claim, with its rule (see the report's "Verdicts").
fn verdicts(rep: &RecallReport) -> String {
    let mut s = String::from(
        "## Verdicts\n\nRule: a difference between two accuracies (answers pooled over seeds) \
         counts when it exceeds twice its standard error: the larger of the binomial SE and, \
         with at least two seeds a side, the SE of the per-seed accuracies (Welch), since seeds \
         differ by more than their answers' noise. A comparison of memories counts only in a \
         cell where softmax attention learned it (>= 90%) and at least one of the two memories \
         reached the preset's learned accuracy.\n\n",
    );
    let cell_of = |name: &str, mixer: &str| {
        rep.cells
            .iter()
            .find(|c| c.cell == name && c.mixer == mixer)
    };
    for gate in rep
        .cells
        .iter()
        .filter(|c| c.section == Section::Gate && c.mixer == "vort")
    {
        let (k, n) = pooled(gate, None);
        let acc = k as f64 / n.max(1) as f64;
        s.push_str(&format!(
            "- VORT at the gate cell {}: {:.1}% ({k}/{n}): {} the 90% target.\n",
            gate.cell,
            100.0 * acc,
            if acc >= 0.9 { "reaches" } else { "misses" }
        ));
    }
    for cell in cells_where(rep, |c| c.section == Section::Lags) {
        let sane = cell_of(cell, "softmax").map(|c| {
            let (k, n) = pooled(c, None);
            k as f64 / n.max(1) as f64
        });
        let Some(vort) = cell_of(cell, "vort") else {
            continue;
        };
        match sane {
            Some(a) if a >= 0.9 => {
                let mine = far_answers(vort);
                let learned = |c| learned_pooled(c, rep.preset.learned_accuracy);
                // the paper's two baselines, then (beyond the paper) the fixed power law:
                // whether the routing of α, not the power law alone, makes the difference
                for other in ["exponential", "mixture", "power-law"] {
                    let Some(o) = cell_of(cell, other) else {
                        continue;
                    };
                    // two memories that both failed to learn the task differ by noise and
                    // chance-level strategies, not by memory
                    let either_learned = learned(vort) || learned(o);
                    // against the fixed power law there is no claim to check, only a
                    // difference to state
                    let fixed = other == "power-law";
                    let lead = if fixed {
                        "Beyond the paper, routed α against the same power law with a fixed α"
                            .to_string()
                    } else {
                        format!(
                            "The paper's claim that power-law memory recalls better than {other}"
                        )
                    };
                    let theirs = far_answers(o);
                    // one line per length scored by both (the same models at each length)
                    for (a, len) in &mine {
                        let Some((b, _)) = theirs.iter().find(|(_, l)| l == len) else {
                            continue;
                        };
                        let cmp = compare_seeds(a, b);
                        let verdict = match (either_learned, fixed) {
                            (false, _) => "inconclusive (neither memory learned the cell)".into(),
                            (true, false) => claim_verdict(cmp.word).to_string(),
                            (true, true) => format!("VORT {}", cmp.word),
                        };
                        s.push_str(&format!(
                            "- {lead} at lags > 1000, cell {cell} (scored at L = {len}): VORT - \
                             {other} = {:+.1} ± {:.1} points ({}): {verdict}.\n",
                            100.0 * cmp.diff,
                            100.0 * cmp.se,
                            cmp.basis()
                        ));
                    }
                }
            }
            Some(a) => s.push_str(&format!(
                "- The paper's lag claim, cell {cell}: inconclusive: softmax attention reached \
                 only {:.1}% here, so the cell does not yet separate memories.\n",
                100.0 * a
            )),
            None => s.push_str(&format!(
                "- The paper's lag claim, cell {cell}: inconclusive: no softmax run in the cell.\n"
            )),
        }
    }
    // beyond the paper: routed power law against the learned exponential over all answers,
    // in every grid cell that softmax attention learned
    for cell in cells_where(rep, |c| c.section == Section::Grid) {
        let (Some(sm), Some(vort), Some(exp)) = (
            cell_of(cell, "softmax"),
            cell_of(cell, "vort"),
            cell_of(cell, "exponential"),
        ) else {
            continue;
        };
        let (k, n) = pooled(sm, None);
        let sane = k as f64 / n.max(1) as f64;
        if sane < 0.9 {
            s.push_str(&format!(
                "- Grid cell {cell}: VORT against the exponential not compared: softmax \
                 attention reached only {:.1}%.\n",
                100.0 * sane
            ));
            continue;
        }
        let learned = |c| learned_pooled(c, rep.preset.learned_accuracy);
        if !(learned(vort) || learned(exp)) {
            s.push_str(&format!(
                "- Grid cell {cell}: VORT against the exponential inconclusive: neither \
                 learned it.\n"
            ));
            continue;
        }
        let cmp = compare_seeds(&per_seed(vort), &per_seed(exp));
        s.push_str(&format!(
            "- Beyond the paper, grid cell {cell} (softmax {:.1}%): VORT - exponential = {:+.1} \
             ± {:.1} points ({}) over all answers: VORT {}.\n",
            100.0 * sane,
            100.0 * cmp.diff,
            100.0 * cmp.se,
            cmp.basis(),
            cmp.word
        ));
    }
    s.push('\n');
    s
}

fn markdown(rep: &RecallReport) -> String {
    let p = &rep.preset;
    let default_lrs = p
        .lrs
        .iter()
        .map(|&x| lr_label(x))
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = format!(
        "# MQAR recall ({name})\n\nGenerated by `vort reproduce recall {how}`. {description}\n\n\
         Every run is Zoology's MQAR (keys from [1, V/2), values from [V/2, V), K pairs first, \
         queries at gaps drawn from p(g) ∝ (g+1)^(a−1)); loss and accuracy only at the query \
         positions. A seed *learned* the task when its test accuracy is >= {learned:.0}%. \
         Intervals are 95% Wilson intervals over the test answers of one seed; ± is the sample \
         sd over seeds. Learning rates are swept per (cell, mixer) on seed {first} (default \
         list: {default_lrs}; the sweep table below lists each), the best validation accuracy \
         is kept, and seeds {seeds:?} run at that rate.\n\n",
        name = p.name,
        how = if PRESETS.iter().any(|(n, _)| *n == p.name) {
            format!("--{}", p.name)
        } else {
            format!("--config <the {} preset>", p.name)
        },
        description = p.description,
        learned = 100.0 * p.learned_accuracy,
        first = p.seeds[0],
        seeds = p.seeds,
    );
    match rep.gate_passed {
        Some(true) => s.push_str(&format!(
            "**Gate: passed.** Softmax attention reached >= {:.0}% in every gate run.\n\n",
            100.0 * p.gate_accuracy
        )),
        Some(false) => s.push_str(&format!(
            "**Gate: FAILED.** Softmax attention stayed below {:.0}% in a gate run: the \
             training stack or the recipe is broken, and no comparison below means anything.\n\n",
            100.0 * p.gate_accuracy
        )),
        None => s.push_str("No softmax run in a gate cell of this preset: no gate.\n\n"),
    }
    if !rep.pending.is_empty() {
        s.push_str(&format!(
            "**Partial report** (`--report-only`): these (cell, mixer) pairs are not finished \
             and are left out: {}.\n\n",
            rep.pending.join("; ")
        ));
    }
    s.push_str(&verdicts(rep));
    for section in [Section::Gate, Section::Grid, Section::Lags] {
        let rows: Vec<&CellResult> = rep.cells.iter().filter(|c| c.section == section).collect();
        if rows.is_empty() {
            continue;
        }
        s.push_str(match section {
            Section::Gate => "## The gate\n\n",
            Section::Grid => "## Zoology's grid\n\n",
            Section::Lags => "## The paper's lag claim\n\n",
        });
        s.push_str(
            "| cell | L | K | a | d | mixer | state floats | lr | test acc % (mean ± sd) | \
             per seed: acc % [95% CI] (answers), learned? | steps | tok/s |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for c in &rows {
            let (m, sd) = c.mean_sd();
            let per_seed: Vec<String> = c
                .seeds
                .iter()
                .map(|r| {
                    if let Some(step) = r.diverged_at {
                        return format!("s{}: diverged at step {step}", r.seed);
                    }
                    let (lo, hi) = wilson(r.correct, r.answers);
                    format!(
                        "s{}: {} [{}, {}] ({}) {}",
                        r.seed,
                        pct(r.accuracy),
                        pct(lo),
                        pct(hi),
                        r.answers,
                        if r.learned { "yes" } else { "no" }
                    )
                })
                .collect();
            let steps: Vec<String> = c.seeds.iter().map(|r| r.steps.to_string()).collect();
            let tps = c.seeds.iter().map(|r| r.tokens_per_s).sum::<f64>() / c.seeds.len() as f64;
            // a model trained on a mixture of shorter lengths is tested at L
            let len = if c.train_mix.is_empty() {
                c.seq_len.to_string()
            } else {
                let l: Vec<String> = c.train_mix.iter().map(|m| m.seq_len.to_string()).collect();
                format!("{} (trained on {})", c.seq_len, l.join("/"))
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} ± {} | {} | {} | {:.0} |\n",
                c.cell,
                len,
                c.num_kv_pairs,
                c.power_a,
                c.d_model,
                c.mixer,
                c.state_floats,
                lr_label(c.best_lr),
                pct(m),
                if c.seeds.len() > 1 {
                    pct(sd)
                } else {
                    "-".into()
                },
                per_seed.join("; "),
                steps.join(", "),
                tps
            ));
        }
        s.push('\n');
        if section == Section::Lags {
            s.push_str(
                "Accuracy by lag bucket (all seeds pooled: correct / answers), beside the \
                 paper's accuracy at lags > 1000:\n\n| cell | mixer |",
            );
            for (label, _, _) in BUCKETS {
                s.push_str(&format!(" {label} |"));
            }
            s.push_str(" paper > 1000 |\n|---|---|");
            for _ in BUCKETS {
                s.push_str("---|");
            }
            s.push_str("---|\n");
            for c in &rows {
                s.push_str(&format!("| {} | {} |", c.cell, c.mixer));
                for i in 0..BUCKETS.len() {
                    let (k, n) = pooled(c, Some(i));
                    if n == 0 {
                        s.push_str(" - |");
                    } else {
                        s.push_str(&format!(" {} ({k}/{n}) |", pct(k as f64 / n as f64)));
                    }
                }
                s.push_str(&format!(
                    " {} |\n",
                    paper_lag_number(&c.mixer).map_or("-".into(), |x| format!("{x}"))
                ));
            }
            s.push('\n');
        }
    }
    let extra: Vec<&CellResult> = rep
        .cells
        .iter()
        .filter(|c| c.seeds.iter().any(|r| !r.extrapolation.is_empty()))
        .collect();
    if !extra.is_empty() {
        s.push_str(
            "## Length extrapolation (beyond the paper)\n\nModels of the cell (tested at its \
             L; trained at L or on the mixture of shorter lengths named in its table) scored on \
             longer sequences of the same task (gaps, so lags, grow with the length), streamed \
             in pieces of the cell's L with the state carried; node tables certified for the \
             scored length; softmax restricted to a window of the cell's L (sliding-window \
             attention: it cannot see lags beyond it). Accuracy over all seeds pooled (correct / \
             answers), then by lag bucket.\n\n\
             | cell | mixer | scored L | accuracy % | ",
        );
        for (label, _, _) in BUCKETS {
            s.push_str(&format!("lags {label} | "));
        }
        s.push_str("\n|---|---|---|---|");
        for _ in BUCKETS {
            s.push_str("---|");
        }
        s.push('\n');
        for c in &extra {
            let lengths: Vec<usize> = c.seeds[0].extrapolation.iter().map(|x| x.seq_len).collect();
            for (i, l) in lengths.iter().enumerate() {
                let (k, n) =
                    extrapolations(c, i).fold((0, 0), |(k, n), x| (k + x.correct, n + x.answers));
                s.push_str(&format!(
                    "| {} | {} | {l} | {} ({k}/{n}) |",
                    c.cell,
                    c.mixer,
                    pct(k as f64 / n.max(1) as f64)
                ));
                for b in 0..BUCKETS.len() {
                    let (k, n) = sum_rows(extrapolations(c, i).map(|x| &x.buckets[b]));
                    if n == 0 {
                        s.push_str(" - |");
                    } else {
                        s.push_str(&format!(" {} ({n}) |", pct(k as f64 / n as f64)));
                    }
                }
                s.push('\n');
            }
        }
        s.push('\n');
    }
    s.push_str("## Learning-rate sweeps (seed 0: validation accuracy at the end of each run)\n\n");
    s.push_str("| cell | mixer | lr: val acc % (steps) |\n|---|---|---|\n");
    for c in &rep.cells {
        let sw: Vec<String> = c
            .sweep
            .iter()
            .map(|r| match r.diverged_at {
                Some(step) => format!("{}: diverged at step {step}", lr_label(r.lr)),
                None => format!("{}: {} ({})", lr_label(r.lr), pct(r.val_accuracy), r.steps),
            })
            .collect();
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            c.cell,
            c.mixer,
            sw.join("; ")
        ));
    }
    s.push('\n');
    let alpha: Vec<(String, &crate::train::eval::AlphaSample)> = rep
        .cells
        .iter()
        .filter(|c| c.mixer.starts_with("vort"))
        .filter_map(|c| {
            Some((
                format!("{} {}", c.cell, c.mixer),
                c.seeds.first()?.alpha.as_ref()?,
            ))
        })
        .collect();
    if !alpha.is_empty() {
        s.push_str(
            "## Learned orders α (VORT, seed 0, test set, mean over layers and heads)\n\n\
             The paper's router gives what must be remembered a high α (slow power-law decay) \
             and the rest a low one. Here the pair tokens are the keys and values, the query is \
             the repeated key, the filler is everything else.\n\n\
             | cell | key | value | query | filler | pairs (key, value) | the rest |\n\
             |---|---|---|---|---|---|---|\n",
        );
        for (n, a) in alpha {
            let role = |r: &str| {
                a.mean_by_role
                    .iter()
                    .find(|(name, _)| name == r)
                    .map_or("-".to_string(), |(_, x)| format!("{x:.3}"))
            };
            s.push_str(&format!(
                "| {n} | {} | {} | {} | {} | {:.3} | {:.3} |\n",
                role("key"),
                role("value"),
                role("query"),
                role("filler"),
                a.mean_memorable,
                a.mean_other
            ));
        }
        s.push_str("\nHistograms: `alpha_hist.png` (pair tokens), `alpha_hist_other.png`.\n\n");
    }
    // every run once: the sweep, then the seeds past the first (which is a sweep run)
    let runs: Vec<&RunResult> = rep
        .cells
        .iter()
        .flat_map(|c| c.sweep.iter().chain(c.seeds.iter().skip(1)))
        .collect();
    s.push_str(&format!(
        "Plots: `acc_vs_width.png`, `acc_vs_state.png` (with Zoology's published points), \
         `lr_sweep.png`{}. Training time summed over the {} runs: {:.0} s. Wall time of this \
         call: {:.0} s ({} of the runs reused from an earlier call). Every run's config, \
         metrics and evaluation: `runs/`.\n",
        if rep.cells.iter().any(|c| c.section == Section::Lags) {
            ", `acc_by_lag.png` (dashed: the paper's accuracy at lags > 1000)"
        } else {
            ""
        },
        runs.len(),
        runs.iter().map(|r| r.train_s).sum::<f64>(),
        rep.wall_s,
        rep.reused
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(lo: usize, hi: usize, correct: usize, n: usize) -> LagAccuracy {
        LagAccuracy {
            label: String::new(),
            lo,
            hi,
            n,
            correct,
            accuracy: f64::NAN,
            nll: f64::NAN,
            nll_sd: f64::NAN,
        }
    }

    /// A seed whose far bucket (lags > 1000) has `far` = (correct, answers) at the training
    /// length and `ext` at each extrapolation length.
    fn seed_with(far: (usize, usize), ext: &[(usize, (usize, usize))]) -> RunResult {
        let buckets = |f: (usize, usize)| {
            vec![
                bucket(1, 100, 5, 10),
                bucket(101, 1000, 5, 10),
                bucket(1001, usize::MAX, f.0, f.1),
            ]
        };
        RunResult {
            seed: 0,
            lr: 1e-3,
            val_accuracy: 0.5,
            accuracy: 0.5,
            correct: 10,
            answers: 20,
            buckets: buckets(far),
            lag_bins: Vec::new(),
            steps: 1,
            tokens_per_s: 1.0,
            tokens: 1,
            train_s: 1.0,
            learned: true,
            alpha: None,
            extrapolation: ext
                .iter()
                .map(|&(seq_len, f)| Extrapolation {
                    seq_len,
                    examples: 0,
                    accuracy: f64::NAN,
                    correct: 0,
                    answers: 0,
                    buckets: buckets(f),
                })
                .collect(),
            diverged_at: None,
        }
    }

    /// The lag claim reads lags > 1000 at every length scored that has them, per seed.
    #[test]
    fn far_answers_are_read_at_every_length_scored() {
        let cell = |seeds: Vec<RunResult>, seq_len: usize| CellResult {
            cell: "c".into(),
            section: Section::Lags,
            mixer: "vort".into(),
            seq_len,
            num_kv_pairs: 8,
            power_a: 1.0,
            train_mix: Vec::new(),
            d_model: 64,
            state_floats: 0,
            sweep: Vec::new(),
            best_lr: 1e-3,
            seeds,
        };
        // tested at 2048: its own far bucket, then the extrapolation's
        let c = cell(vec![seed_with((3, 10), &[(8192, (1, 50))])], 2048);
        assert_eq!(
            far_answers(&c),
            vec![(vec![(3, 10)], 2048), (vec![(1, 50)], 8192)]
        );
        // trained at 512 (no lags > 1000): every length with far answers, two seeds
        let ext = [(2048, (4, 20)), (8192, (6, 40)), (32768, (0, 0))];
        let c = cell(vec![seed_with((0, 0), &ext), seed_with((0, 0), &ext)], 512);
        assert_eq!(
            far_answers(&c),
            vec![(vec![(4, 20); 2], 2048), (vec![(6, 40); 2], 8192)]
        );
        // nothing anywhere: no length to read the claim at
        let c = cell(vec![seed_with((0, 0), &[])], 512);
        assert!(far_answers(&c).is_empty());
        // a diverged seed (no buckets) adds no answers, and nothing panics
        let mut diverged = seed_with((0, 0), &[]);
        diverged.buckets.clear();
        let c = cell(vec![seed_with((3, 10), &[]), diverged], 2048);
        assert_eq!(far_answers(&c), vec![(vec![(3, 10), (0, 0)], 2048)]);
        assert_eq!(pooled(&c, Some(BUCKETS.len() - 1)), (3, 10));
    }

    /// The lag claim needs softmax to learn the cell and at least one of the two memories to
    /// learn it too; two memories at chance are "inconclusive", not "no difference".
    #[test]
    fn lag_verdicts_need_a_memory_that_learned() {
        let with_acc = |mixer: &str, correct: usize| {
            let mut r = seed_with((correct / 10, 100), &[]);
            (r.correct, r.answers) = (correct, 1000);
            r.accuracy = correct as f64 / 1000.0;
            CellResult {
                cell: "lags".into(),
                section: Section::Lags,
                mixer: mixer.into(),
                seq_len: 2048,
                num_kv_pairs: 32,
                power_a: 1.0,
                train_mix: Vec::new(),
                d_model: 64,
                state_floats: 0,
                sweep: Vec::new(),
                best_lr: 1e-2,
                seeds: vec![r],
            }
        };
        let report = |vort: usize, exp: usize| RecallReport {
            preset: RecallPreset::embedded("quick").unwrap(),
            cells: vec![
                with_acc("softmax", 995),
                with_acc("vort", vort),
                with_acc("exponential", exp),
                with_acc("power-law", exp),
            ],
            gate_passed: None,
            wall_s: 0.0,
            reused: 0,
            pending: Vec::new(),
        };
        let v = verdicts(&report(30, 28));
        assert!(
            v.contains("inconclusive (neither memory learned the cell)"),
            "{v}"
        );
        // VORT learned: far bucket 60/100 against 10/100
        let v = verdicts(&report(600, 100));
        assert!(
            v.contains("VORT - exponential = +50.0") && v.contains(": reproduced."),
            "{v}"
        );
        // the fixed power law is a difference to state, not the paper's claim
        assert!(
            v.contains("routed α against the same power law with a fixed α")
                && v.contains("VORT - power-law = +50.0")
                && v.contains(": VORT higher."),
            "{v}"
        );
    }

    #[test]
    fn every_embedded_preset_resolves() {
        for (name, _) in PRESETS {
            let p = RecallPreset::embedded(name).unwrap();
            assert!(p.run_count() > 0, "{name}");
            assert!(
                p.cells.iter().any(|c| c.section == Section::Gate),
                "{name}: no gate cell"
            );
        }
    }

    /// The README's single-run example config is a valid MQAR run.
    #[test]
    fn example_config_is_valid() {
        let c = RunConfig::from_toml(
            include_str!("../../../../configs/example-mqar.toml"),
            "configs/example-mqar.toml",
        )
        .unwrap();
        assert_eq!(c.task.kind, crate::tasks::TaskKind::Mqar);
        assert_eq!(c.model.short_conv, 4);
    }

    #[test]
    fn cell_and_mixer_patches_apply_in_order() {
        let text = r#"
name = "t"
description = "d"
seeds = [0, 1]
lrs = [1e-3]
gate_accuracy = 0.99
learned_accuracy = 0.5
[base.task]
kind = "mqar"
seq_len = 64
vocab_size = 256
[base.model]
d_model = 32
memory = "vort"
[[mixers]]
name = "softmax"
model = { memory = "softmax", qk_scale_init = 4.0 }
[[cells]]
name = "gate"
section = "gate"
task = { num_kv_pairs = 8 }
model = { d_model = 48, qk_scale_init = 1.0 }
"#;
        let p = RecallPreset::from_toml(text, "t").unwrap();
        let c = p.run_config(&p.cells[0], &p.mixers[0], 3e-3, 1).unwrap();
        assert_eq!(c.seed, 1);
        assert_eq!(c.train.lr, 3e-3);
        assert_eq!(c.task.num_kv_pairs, 8);
        assert_eq!(c.model.d_model, 48);
        // the mixer's patch comes last
        assert_eq!(c.model.qk_scale_init, 4.0);
        assert_eq!(c.model.mixer, Mixer::Softmax { window: 0 });
        // a bad field fails when the preset is read, naming the cell
        let bad = text.replace("num_kv_pairs = 8", "num_kv_pairs = 80");
        let e = RecallPreset::from_toml(&bad, "t").unwrap_err().to_string();
        assert!(e.contains("gate") && e.contains("num_kv_pairs"), "{e}");
    }
}
