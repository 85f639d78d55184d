//! Training or reusing the runs of an experiment: the one rule every reproduction (recall,
//! books, synthetic) follows for a run directory, and the report files they all write.
//!
//! A run is reused when its directory says it is finished under the wanted config
//! ([`RunDir::finished`]), or diverged under it (`diverged.json`: a learning rate too high is a
//! result, not a reason to stop the experiment). A run trained with another early-stop
//! threshold is adopted when the threshold cannot change it ([`train::adopt_early_stop`]). A
//! run another process holds is left to it ([`Outcome::Busy`]); callers come back to it.
//! Anything else is trained, resuming from its checkpoint.
//!
//! A process that follows a preset file ([`follow_preset_file`]) reads it again before each
//! run it trains, and stops when the preset changed: several processes share one `--out`, and
//! one started before an edit would otherwise go on training the runs of the old preset.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::train::eval::EvalResult;
use crate::train::{self, checkpoint, Adopted, RunConfig, RunDir, RunOptions, TrainError};

/// What a call does with a run that is not finished.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Show the training progress.
    pub progress: bool,
    /// Train it (false: report it [`Outcome::Missing`], for a report of what is done).
    pub train_missing: bool,
}

impl Mode {
    /// Train what is not finished.
    pub fn train(progress: bool) -> Mode {
        Mode {
            progress,
            train_missing: true,
        }
    }

    /// Train nothing: report what is finished (`--report-only`).
    pub fn report_only(progress: bool) -> Mode {
        Mode {
            progress,
            train_missing: false,
        }
    }
}

/// What [`train_or_reuse`] found or did.
#[derive(Debug)]
pub enum Outcome {
    /// Finished: its evaluation, and whether it was reused from an earlier call.
    Finished {
        /// The held-out evaluation.
        eval: Box<EvalResult>,
        /// Reused rather than trained by this call.
        reused: bool,
    },
    /// Its loss or gradient became non-finite at `step` (recorded in `diverged.json`).
    Diverged {
        /// The step.
        step: u64,
        /// Found recorded rather than met by this call.
        reused: bool,
    },
    /// Not finished, and this call trains nothing.
    Missing,
    /// Another vort process holds it (its directory is locked).
    Busy,
}

/// The preset file this process follows, and the preset it held when read (serialised, so
/// that an edit of comments or layout is no change).
static FOLLOWED: OnceLock<(PathBuf, String)> = OnceLock::new();

/// From now on, before each run it trains, this process reads `path` again and stops if the
/// preset in it differs from `preset` (the one it was read as). The first call wins.
pub fn follow_preset_file(path: &Path, preset: &super::preset::Preset) {
    if let Ok(text) = toml::to_string(preset) {
        let _ = FOLLOWED.set((path.to_path_buf(), text));
    }
}

/// Err when the followed preset file no longer holds the preset this process runs.
fn check_followed_preset() -> Result<(), TrainError> {
    match FOLLOWED.get() {
        Some((path, was)) => preset_file_holds(path, was),
        None => Ok(()),
    }
}

/// Err unless the preset file `path` still reads as the preset serialised as `was`.
fn preset_file_holds(path: &Path, was: &str) -> Result<(), TrainError> {
    let now = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| super::preset::Preset::from_toml(&text, &path.display().to_string()).ok())
        .and_then(|p| toml::to_string(&p).ok());
    if now.as_deref() == Some(was) {
        return Ok(());
    }
    Err(TrainError::Config {
        path: path.display().to_string(),
        message: "the preset changed (or no longer reads) since this process read it, so it \
                  stops before its next run; the runs it finished are kept: start it again \
                  to follow the new preset"
            .into(),
    })
}

/// Trains (or reuses) the run of config `c` in `dir` (see the module doc).
///
/// # Errors
/// Training errors other than a divergence or a busy run; I/O.
pub fn train_or_reuse(dir: &RunDir, c: &RunConfig, mode: Mode) -> Result<Outcome, TrainError> {
    let Some(same_config) = same_config(dir, c, mode.train_missing)? else {
        return Ok(Outcome::Busy);
    };
    if same_config {
        if let Some(d) = dir.diverged() {
            return Ok(Outcome::Diverged {
                step: d.step,
                reused: true,
            });
        }
        if let Some(eval) = dir.finished(c) {
            return Ok(Outcome::Finished {
                eval: Box::new(eval),
                reused: true,
            });
        }
    }
    if !mode.train_missing {
        return Ok(Outcome::Missing);
    }
    check_followed_preset()?;
    let opts = RunOptions {
        progress: mode.progress,
        ..RunOptions::default()
    };
    match train::run_with(c, dir.path(), dir.has_checkpoint(), &opts) {
        Ok(s) => Ok(Outcome::Finished {
            eval: Box::new(match s.eval {
                Some(r) => r,
                None => train::eval::run(dir.path())?,
            }),
            reused: false,
        }),
        Err(TrainError::Diverged {
            step,
            loss,
            grad_norm,
        }) => {
            dir.mark_diverged(step, loss, grad_norm)?;
            Ok(Outcome::Diverged {
                step,
                reused: false,
            })
        }
        Err(TrainError::RunBusy(_)) => Ok(Outcome::Busy),
        Err(e) => Err(e),
    }
}

/// Whether the run in `dir` has config `c`, so that its files are its results (None: another
/// process holds it). With `train_missing`, a run of a config that differs only in the
/// early-stop threshold is adopted when the threshold cannot change it, and continued when it
/// stopped too soon (see [`train::adopt_early_stop`]).
fn same_config(
    dir: &RunDir,
    c: &RunConfig,
    train_missing: bool,
) -> Result<Option<bool>, TrainError> {
    Ok(Some(match dir.saved_config() {
        Some(s) if s == *c => true,
        Some(_) if train_missing => match train::adopt_early_stop(dir.path(), c) {
            Ok(Adopted::Same) => true,
            Ok(Adopted::Continues | Adopted::No) => false,
            Err(TrainError::RunBusy(_)) => return Ok(None),
            Err(e) => return Err(e),
        },
        _ => false,
    }))
}

/// The run directory of (cell, mixer, learning rate, seed), relative to the experiment's
/// output directory: `runs/<cell>/<mixer>/lr<lr>/seed<k>` where the experiment sweeps the
/// rate (recall), `runs/<cell>/<mixer>/seed<k>` where it does not (books and synthetic, whose
/// cells are their tasks; books names a mixer as its preset does, synthetic by its kind).
pub fn run_path(cell: &str, mixer: &str, swept_lr: Option<f64>, seed: u64) -> String {
    match swept_lr {
        Some(lr) => format!("runs/{cell}/{mixer}/lr{}/seed{seed}", lr_label(lr)),
        None => format!("runs/{cell}/{mixer}/seed{seed}"),
    }
}

/// A learning rate as run paths and reports name it: two significant digits (`3.0e-3`).
pub fn lr_label(lr: f64) -> String {
    format!("{lr:.1e}")
}

/// How often a call looks again at the runs another process trains.
pub const BUSY_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// A run of an experiment that diverged (it is left out of the aggregates and listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DivergedRun {
    /// Its run directory, relative to the experiment's output directory.
    pub run: String,
    /// The step whose loss or gradient was not finite.
    pub step: u64,
}

/// What [`train_all`] gives: the finished runs, in the order given, and the diverged ones.
#[derive(Debug, Default)]
pub struct TrainedRuns {
    /// The configs of the finished runs.
    pub configs: Vec<RunConfig>,
    /// Their indices in the runs given (aligned with `configs`).
    pub finished: Vec<usize>,
    /// Their evaluations.
    pub results: Vec<EvalResult>,
    /// Their mean training throughputs (tokens/s, from their metrics).
    pub tokens_per_s: Vec<f64>,
    /// Their training seconds (from their metrics, whichever call trained them).
    pub train_s: Vec<f64>,
    /// Runs reused from an earlier call.
    pub reused: usize,
    /// Runs that diverged.
    pub diverged: Vec<DivergedRun>,
    /// Runs not finished, left untrained ([`Mode::report_only`]), by directory.
    pub pending: Vec<String>,
}

/// Trains (or reuses) every run of `runs` ((directory, config) pairs, `dir` relative to
/// `out_dir`), with a line per run ("[i/n] what"); a run another process holds is skipped and
/// waited for (polled every [`BUSY_POLL`]) once the others are done. With
/// [`Mode::report_only`] nothing is trained or waited for: unfinished runs are `pending`.
///
/// # Errors
/// As [`train_or_reuse`].
pub fn train_all(
    out_dir: &Path,
    runs: &[(String, RunConfig)],
    mode: Mode,
) -> Result<TrainedRuns, TrainError> {
    let progress = mode.progress;
    let mut outcomes: Vec<Option<Outcome>> = runs.iter().map(|_| None).collect();
    let mut waited_for = 0;
    loop {
        let mut busy = 0;
        for (i, (rel, c)) in runs.iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            if progress {
                eprintln!("[{}/{}] {rel}", i + 1, runs.len());
            }
            match train_or_reuse(&RunDir::new(out_dir.join(rel)), c, mode)? {
                Outcome::Busy => busy += 1,
                o => outcomes[i] = Some(o),
            }
        }
        if busy == 0 || !mode.train_missing {
            break;
        }
        if progress && busy != waited_for {
            waited_for = busy;
            eprintln!(
                "waiting for {busy} run(s) in use by another vort process (checking every {} s)",
                BUSY_POLL.as_secs()
            );
        }
        std::thread::sleep(BUSY_POLL);
    }
    let mut t = TrainedRuns::default();
    for (i, ((rel, c), o)) in runs.iter().zip(outcomes).enumerate() {
        let dir = RunDir::new(out_dir.join(rel));
        match o {
            Some(Outcome::Finished { eval, reused }) => {
                t.configs.push(c.clone());
                t.finished.push(i);
                t.results.push(*eval);
                t.tokens_per_s.push(dir.throughput());
                t.train_s.push(dir.train_seconds());
                t.reused += usize::from(reused);
            }
            Some(Outcome::Diverged { step, reused }) => {
                t.reused += usize::from(reused);
                t.diverged.push(DivergedRun {
                    run: rel.clone(),
                    step,
                });
            }
            // untrained (report only), or held by another process (report only: not waited for)
            Some(Outcome::Missing | Outcome::Busy) | None => t.pending.push(rel.clone()),
        }
    }
    Ok(t)
}

/// The report's line on the runs that diverged (empty when none did).
pub fn diverged_markdown(diverged: &[DivergedRun]) -> String {
    if diverged.is_empty() {
        return String::new();
    }
    let list: Vec<String> = diverged
        .iter()
        .map(|d| format!("`{}` (step {})", d.run, d.step))
        .collect();
    format!(
        "**Diverged** (loss or gradient not finite; left out of every table and figure): {}.\n\n",
        list.join(", ")
    )
}

/// The report's line on the runs not finished yet (empty when none is).
pub fn pending_markdown(pending: &[String]) -> String {
    if pending.is_empty() {
        return String::new();
    }
    let list: Vec<String> = pending.iter().map(|p| format!("`{p}`")).collect();
    format!(
        "**Partial report** (`--report-only`): these runs are not finished and are left out: \
         {}.\n\n",
        list.join(", ")
    )
}

/// Writes an experiment's report files into `out_dir`: `results.json` (what it measured) and
/// `report.md`. The figures are drawn before, by the sections. `out_dir` is created if missing
/// (`--report-only --allow-empty` on a directory no run has written yet).
///
/// # Errors
/// Serialisation and I/O errors.
pub fn write_report(
    out_dir: &Path,
    results: &impl Serialize,
    markdown: &str,
) -> Result<(), TrainError> {
    std::fs::create_dir_all(out_dir).map_err(|e| checkpoint::io(out_dir, e))?;
    checkpoint::write_json(&out_dir.join("results.json"), results)?;
    checkpoint::write_atomic(&out_dir.join("report.md"), markdown.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A followed preset file holds while only its comments or layout change, and stops the
    /// process once a field changes or the file stops reading as a preset.
    #[test]
    fn an_edited_preset_file_stops_the_process_but_a_comment_does_not() {
        let text = "name = \"t\"\ndescription = \"d\"\nseeds = [0]\nlrs = [1e-3]\n\
                    [base.task]\nkind = \"mqar\"\nseq_len = 64\nvocab_size = 256\n\
                    [[mixers]]\nname = \"vort\"\nrole = \"claim\"\n\
                    model = { mixer = { kind = \"vort\" } }\n\
                    [[cells]]\nname = \"c\"\nsection = \"lags\"\n";
        let preset = super::super::preset::Preset::from_toml(text, "t").unwrap();
        let was = toml::to_string(&preset).unwrap();
        let dir = std::env::temp_dir().join(format!("vort-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("preset.toml");
        let holds = |body: &str| {
            std::fs::write(&path, body).unwrap();
            preset_file_holds(&path, &was)
        };
        assert!(holds(text).is_ok());
        assert!(holds(&format!("# a note\n{}", text.replace(" = ", "="))).is_ok());
        let e = holds(&text.replace("lrs = [1e-3]", "lrs = [1e-3, 3e-4]"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("preset.toml") && e.contains("start it again"),
            "{e}"
        );
        assert!(holds("name = ").is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(preset_file_holds(&path, &was).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
