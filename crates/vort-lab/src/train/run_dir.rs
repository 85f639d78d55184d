//! [`RunDir`]: a run's directory and the operations on its files, in one place. Every
//! experiment (`vort train`, the recall, books and synthetic reproductions, eval, export) reads
//! and writes a run through it, so the file names and the rules about them (what "finished"
//! means, which files a continued run invalidates) are written once.
//!
//! | file | written by | meaning |
//! |---|---|---|
//! | `config.toml` | the first call that trains | the resolved run config |
//! | `metrics.jsonl` | every logged step | one [`Metrics`] object per line |
//! | `checkpoint.safetensors` | every `checkpoint_every` steps | parameters, AdamW state, step |
//! | `eval.json` | the end of training | the held-out [`EvalResult`] |
//! | `weights.safetensors` | a preset that releases weights | parameters only |
//! | `run.lock` | every process that trains | the advisory lock ([`RunLock`]) |
//! | `diverged.json` | a run whose loss or gradient became non-finite | [`Diverged`] |
//! | `extrapolate-L<len>.json` | the recall reproduction | a score at another length |
//! | `ruler-<task>-L<len>.json` | the RULER reproduction | a task's string_match_all |
//! | `stream.json` | the books reproduction | a test book streamed with the state carried |
//! | `sample.json` | the books reproduction | a sample drawn from the model |
//! | `retrieval.json` | the books reproduction, `vort retrieval` | the retrieval probe |

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::eval::EvalResult;
use super::{checkpoint, Metrics, RunConfig, RunLock, TrainError};
use super::{CHECKPOINT_FILE, CONFIG_FILE, EVAL_FILE, LOCK_FILE, METRICS_FILE, WEIGHTS_FILE};

/// Marker of a run whose loss or gradient became non-finite.
pub const DIVERGED_FILE: &str = "diverged.json";

/// The cached stream of a test book through the trained model (books).
pub const STREAM_FILE: &str = "stream.json";

/// The cached sample drawn from the trained model (books).
pub const SAMPLE_FILE: &str = "sample.json";

/// The retrieval probe of the trained model (books; a cache, see [`RunDir::retrieval_path`]).
pub const RETRIEVAL_FILE: &str = "retrieval.json";
/// Every test book streamed whole, carried and reset ([`crate::train::stream::BooksByContext`]).
pub const WHOLE_BOOKS_FILE: &str = "whole_books.json";

/// The router's inputs of a routed run's model (a cache; see [`RunDir::router_path`]).
pub const ROUTER_FILE: &str = "router.json";

/// What `diverged.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diverged {
    /// The step whose loss or gradient was not finite.
    pub step: u64,
    /// That step's loss, as text (NaN or inf when it was the loss).
    pub loss: String,
    /// That step's gradient norm, as text (NaN when the loss was not finite; absent in
    /// markers written before it was recorded).
    #[serde(default)]
    pub grad_norm: String,
}

/// A run directory (it need not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// The run directory at `path`.
    pub fn new(path: impl Into<PathBuf>) -> RunDir {
        RunDir { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Refuses a path that is neither a run directory (it has `config.toml`) nor a file (`vort
    /// export`'s weights, or a checkpoint): the check of every command and call that reads a
    /// trained model, before anything is opened. `hint` ends the message (what to do instead).
    ///
    /// # Errors
    /// [`TrainError::Flag`] (the user's to fix) naming the path.
    pub fn check_trained(path: &Path, hint: &str) -> Result<(), TrainError> {
        if path.is_file() || RunDir::new(path).config_path().is_file() {
            return Ok(());
        }
        Err(TrainError::Flag(format!(
            "{} is neither a run directory (no {CONFIG_FILE}) nor a file of `vort export`; {hint}",
            path.display()
        )))
    }

    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.path.join(CONFIG_FILE)
    }

    /// `metrics.jsonl`.
    pub fn metrics_path(&self) -> PathBuf {
        self.path.join(METRICS_FILE)
    }

    /// `checkpoint.safetensors`.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.path.join(CHECKPOINT_FILE)
    }

    /// `eval.json`.
    pub fn eval_path(&self) -> PathBuf {
        self.path.join(EVAL_FILE)
    }

    /// `weights.safetensors`.
    pub fn weights_path(&self) -> PathBuf {
        self.path.join(WEIGHTS_FILE)
    }

    /// `run.lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.path.join(LOCK_FILE)
    }

    /// `diverged.json`.
    pub fn diverged_path(&self) -> PathBuf {
        self.path.join(DIVERGED_FILE)
    }

    /// The cached score of the run's model at length `seq_len` (`extrapolate-L<len>.json`).
    pub fn extrapolation_path(&self, seq_len: usize) -> PathBuf {
        self.path.join(format!("extrapolate-L{seq_len}.json"))
    }

    /// The cached RULER score of the run's model on `task` at `seq_len` bytes
    /// (`ruler-<task>-L<len>.json`).
    pub fn ruler_path(&self, task: &str, seq_len: usize) -> PathBuf {
        self.path.join(format!("ruler-{task}-L{seq_len}.json"))
    }

    /// `router.json`: the router's inputs measured from the trained model
    /// ([`crate::reproduce::router::diagnose`]; a cache, as the extrapolation scores).
    pub fn router_path(&self) -> PathBuf {
        self.path.join(ROUTER_FILE)
    }

    /// `stream.json`: a test book streamed through the trained model (a cache: the books
    /// report reads it where no weights are kept, e.g. the committed seeds > 0).
    pub fn stream_path(&self) -> PathBuf {
        self.path.join(STREAM_FILE)
    }

    /// `sample.json`: bytes sampled from the trained model (a cache, as `stream.json`).
    pub fn sample_path(&self) -> PathBuf {
        self.path.join(SAMPLE_FILE)
    }

    /// `retrieval.json`: the retrieval probe of the trained model (repeated strings, names at
    /// long lags; [`crate::train::retrieval`]), a cache as `stream.json`.
    pub fn retrieval_path(&self) -> PathBuf {
        self.path.join(RETRIEVAL_FILE)
    }

    /// `whole_books.json`: every test book streamed whole through the trained model, the state
    /// carried and reset (`vort eval --whole-books`), a cache as `stream.json`.
    pub fn whole_books_path(&self) -> PathBuf {
        self.path.join(WHOLE_BOOKS_FILE)
    }

    /// The run's own files (those that exist or may be written): the output rule of
    /// [`vort::fsio`] refuses to write over any of them from a command that reads the run
    /// ([`super::protected_paths`]).
    pub fn own_files(&self) -> Vec<PathBuf> {
        vec![
            self.config_path(),
            self.metrics_path(),
            self.checkpoint_path(),
            self.eval_path(),
            self.weights_path(),
            self.lock_path(),
            self.diverged_path(),
            self.stream_path(),
            self.sample_path(),
            self.retrieval_path(),
            self.whole_books_path(),
        ]
    }

    /// Whether the directory holds a run (its config.toml).
    pub fn exists(&self) -> bool {
        self.config_path().is_file()
    }

    /// Whether it holds a checkpoint to resume from.
    pub fn has_checkpoint(&self) -> bool {
        self.checkpoint_path().exists()
    }

    /// The saved config, checked.
    ///
    /// # Errors
    /// A missing or invalid config.toml.
    pub fn config(&self) -> Result<RunConfig, TrainError> {
        RunConfig::load(&self.config_path())
    }

    /// The saved config if it parses (None: no run yet, or a config this version cannot read).
    pub fn saved_config(&self) -> Option<RunConfig> {
        std::fs::read_to_string(self.config_path())
            .ok()
            .and_then(|t| RunConfig::from_toml(&t, CONFIG_FILE).ok())
    }

    /// Whether the run was trained with `c`. Compared parsed, not as text: a config written
    /// before a field existed reads that field's default, which is what it ran with.
    pub fn has_config(&self, c: &RunConfig) -> bool {
        self.saved_config().is_some_and(|s| s == *c)
    }

    /// The held-out evaluation, if one was written and parses.
    pub fn eval(&self) -> Option<EvalResult> {
        std::fs::read_to_string(self.eval_path())
            .ok()
            .and_then(|t| serde_json::from_str::<EvalResult>(&t).ok())
    }

    /// The evaluation of the run at step `step` (an evaluation of an earlier end is not it).
    pub fn eval_at(&self, step: u64) -> Option<EvalResult> {
        self.eval().filter(|e| e.step == step)
    }

    /// The finished run's evaluation when the run was trained with `c`: evaluated at the
    /// config's last step, or at a step where `c`'s early-stop rule stopped it (its metrics
    /// record a validation accuracy at or above the threshold there). An eval.json written at
    /// another step (`vort eval --run` on a run still training) is not a finished run.
    pub fn finished(&self, c: &RunConfig) -> Option<EvalResult> {
        let e = self.eval().filter(|_| self.has_config(c))?;
        let threshold = c.train.early_stop_accuracy;
        let stopped_early = || {
            threshold > 0.0
                && self
                    .metrics()
                    .iter()
                    .any(|m| m.step == e.step && m.val_acc.is_some_and(|v| v >= threshold))
        };
        (e.step == c.train.steps || stopped_early()).then_some(e)
    }

    /// The divergence marker, if the run diverged.
    pub fn diverged(&self) -> Option<Diverged> {
        std::fs::read_to_string(self.diverged_path())
            .ok()
            .and_then(|t| serde_json::from_str::<Diverged>(&t).ok())
    }

    /// Records that the run diverged at `step`.
    ///
    /// # Errors
    /// I/O.
    pub fn mark_diverged(&self, step: u64, loss: f64, grad_norm: f64) -> Result<(), TrainError> {
        let json = serde_json::to_string(&Diverged {
            step,
            loss: loss.to_string(),
            grad_norm: grad_norm.to_string(),
        })
        .map_err(|e| TrainError::Serialise(e.to_string()))?;
        checkpoint::write_atomic(&self.diverged_path(), json.as_bytes())
    }

    /// The metrics lines (none if there is no metrics.jsonl; unreadable lines, such as one cut
    /// short by a kill, are skipped).
    pub fn metrics(&self) -> Vec<Metrics> {
        // a log: bytes that are not UTF-8 (a torn or edited line) must not hide the others
        let bytes = std::fs::read(self.metrics_path()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Metrics>(l).ok())
            .collect()
    }

    /// Mean training throughput: the mean of the per-step tokens/s of its metrics lines (NaN
    /// without any).
    pub fn throughput(&self) -> f64 {
        let rates: Vec<f64> = self.metrics().iter().map(|m| m.tokens_per_s).collect();
        if rates.is_empty() {
            f64::NAN
        } else {
            rates.iter().sum::<f64>() / rates.len() as f64
        }
    }

    /// Training seconds: the elapsed time of its last metrics line (of its last call, if it
    /// was resumed).
    pub fn train_seconds(&self) -> f64 {
        self.metrics().last().map_or(0.0, |m| m.elapsed_s)
    }

    /// Takes the run's lock (see [`RunLock`]); the directory must exist.
    ///
    /// # Errors
    /// [`TrainError::RunBusy`] if another process holds it; I/O.
    pub fn lock(&self) -> Result<RunLock, TrainError> {
        RunLock::acquire(&self.path)
    }

    /// Removes what the end of a run produced (its evaluation, released weights, stream,
    /// sample and extrapolation caches): they belong to the model the run had, and a
    /// continued run has another.
    ///
    /// # Errors
    /// I/O.
    pub fn remove_results(&self) -> Result<(), TrainError> {
        let mut stale = vec![
            self.eval_path(),
            self.weights_path(),
            self.stream_path(),
            self.sample_path(),
            self.router_path(),
        ];
        if let Ok(entries) = std::fs::read_dir(&self.path) {
            stale.extend(entries.flatten().map(|e| e.path()).filter(|p| {
                p.file_name()
                    .map(|n| n.to_string_lossy())
                    .is_some_and(|n| n.starts_with("extrapolate-L") && n.ends_with(".json"))
            }));
        }
        for p in stale {
            if p.exists() {
                std::fs::remove_file(&p).map_err(|e| checkpoint::io(&p, e))?;
            }
        }
        Ok(())
    }

    /// Writes the trained weights (`weights.safetensors`, no optimizer state) beside the
    /// config, once.
    ///
    /// # Errors
    /// A missing or corrupt checkpoint; I/O.
    pub fn release_weights(&self) -> Result<(), TrainError> {
        if !self.weights_path().exists() {
            let ck = checkpoint::Checkpoint::load(&self.checkpoint_path())?;
            ck.weights_only().save(&self.weights_path())?;
        }
        Ok(())
    }

    /// The trained model for inference (see [`super::eval::load_inference`]), with its config
    /// and the training steps of its parameters.
    ///
    /// # Errors
    /// A missing or corrupt config or checkpoint, or parameters that do not match the config.
    pub fn load_model(
        &self,
    ) -> Result<(RunConfig, vort::model::Model, candle_nn::VarMap, u64), TrainError> {
        super::eval::load_inference(&self.path)
    }

    /// Writes the trained weights to `out` (see [`super::eval::export`]): (tensors, step).
    ///
    /// # Errors
    /// As [`super::eval::export`].
    pub fn export(&self, out: &Path) -> Result<(usize, u64), TrainError> {
        super::eval::export(&self.path, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_are_the_documented_names_in_the_directory() {
        let d = RunDir::new("/tmp/some-run");
        let names: Vec<String> = d
            .own_files()
            .iter()
            .map(|p| {
                assert_eq!(p.parent(), Some(Path::new("/tmp/some-run")));
                p.file_name().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "config.toml",
                "metrics.jsonl",
                "checkpoint.safetensors",
                "eval.json",
                "weights.safetensors",
                "run.lock",
                "diverged.json",
                "stream.json",
                "sample.json",
                "retrieval.json",
                "whole_books.json"
            ]
        );
    }

    #[test]
    fn metrics_skip_torn_lines_and_throughput_is_their_mean() {
        let tmp = std::env::temp_dir().join(format!("vort-rundir-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let d = RunDir::new(&tmp);
        assert!(d.metrics().is_empty() && d.throughput().is_nan());
        let line = |step: u64, tps: f64| {
            format!(
                "{{\"step\":{step},\"loss\":1.0,\"task_loss\":1.0,\"acc\":0.5,\"lr\":0.001,\
                 \"grad_norm\":1.0,\"tokens_per_s\":{tps},\"elapsed_s\":{step}.5}}\n"
            )
        };
        let mut text = line(5, 100.0) + &line(10, 300.0);
        text += "{\"step\":15,\"lo"; // a line cut short by a kill
        std::fs::write(d.metrics_path(), text.as_bytes()).unwrap();
        let m = d.metrics();
        assert_eq!(m.iter().map(|m| m.step).collect::<Vec<_>>(), [5, 10]);
        assert_eq!(d.throughput(), 200.0);
        assert_eq!(d.train_seconds(), 10.5);
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Finished means evaluated at the last step, or where the early-stop rule stopped the run;
    /// an evaluation written mid-run (`vort eval --run`) is not a finished run.
    #[test]
    fn finished_needs_the_last_step_or_an_early_stop() {
        let tmp = std::env::temp_dir().join(format!("vort-rundir-fin-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let d = RunDir::new(&tmp);
        let mut c = RunConfig::default();
        c.train.steps = 100;
        std::fs::write(d.config_path(), c.to_toml().unwrap()).unwrap();
        let eval_at = |step: u64| {
            let json = format!(
                "{{\"task\":\"mqar\",\"memory\":\"vort\",\"seed\":0,\"step\":{step},\
                 \"sequences\":1,\"accuracy\":0.5,\"positions\":2,\"loss\":1.0,\
                 \"buckets\":[],\"lag_bins\":[]}}"
            );
            std::fs::write(d.eval_path(), json).unwrap();
        };
        eval_at(100);
        assert_eq!(d.finished(&c).map(|e| e.step), Some(100));
        let mut other = c.clone();
        other.seed = 1;
        assert!(d.finished(&other).is_none(), "another config");
        eval_at(40);
        assert!(d.finished(&c).is_none(), "evaluated mid-run");
        // stopped early at 40 by the rule: validation accuracy at the threshold there
        c.train.early_stop_accuracy = 0.9;
        c.train.eval_every = 20;
        std::fs::write(d.config_path(), c.to_toml().unwrap()).unwrap();
        let line = |acc: f64| {
            format!(
                "{{\"step\":40,\"loss\":1.0,\"task_loss\":1.0,\"acc\":0.5,\"lr\":0.001,\
                 \"grad_norm\":1.0,\"tokens_per_s\":1.0,\"elapsed_s\":1.0,\"val_acc\":{acc}}}\n"
            )
        };
        std::fs::write(d.metrics_path(), line(0.5)).unwrap();
        assert!(d.finished(&c).is_none(), "below the threshold: not stopped");
        std::fs::write(d.metrics_path(), line(0.95)).unwrap();
        assert_eq!(d.finished(&c).map(|e| e.step), Some(40));
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
