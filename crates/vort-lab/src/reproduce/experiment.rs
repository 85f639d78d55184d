//! The one shape of every reproduction behind `vort reproduce`: which tasks its presets may
//! train, how one shard of its runs trains, and how the whole trains (or, report-only, only
//! reads) its runs and writes its report. The CLI picks an [`Experiment`] and dispatches;
//! what differs between recall, books and the synthetic tasks lives in their impls.

use std::path::Path;

use super::preset::Preset;
use super::runner::Mode;
use super::Shard;
use crate::tasks::TaskKind;
use crate::train::TrainError;

/// A reproduction: [`Recall`], [`Exp2`], [`Ruler`], [`Books`] or [`Synthetic`].
pub trait Experiment {
    /// Its name on the command line (`vort reproduce <name>`).
    fn name(&self) -> &'static str;

    /// Whether its presets may train `kind`.
    fn trains(&self, kind: TaskKind) -> bool;

    /// The tasks it trains, in words (for the refusal of a preset of another experiment).
    fn needs(&self) -> &'static str;

    /// Trains shard `shard` of the preset's units into `out/runs` and writes no report; returns
    /// the summary line.
    ///
    /// # Errors
    /// A run that cannot be trained or read.
    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError>;

    /// Trains the runs `out` does not hold yet (none when `mode` is report-only), then writes
    /// the report; returns how many runs it reports.
    ///
    /// # Errors
    /// A run that cannot be trained or read; the report cannot be written.
    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError>;

    /// Refuses a preset whose runs train another task than this experiment's (it would fail
    /// late, or train the wrong task); `source` names the preset in the message.
    ///
    /// # Errors
    /// [`TrainError::Flag`] naming the task and what this experiment needs.
    fn check_preset(&self, preset: &Preset, source: &str) -> Result<(), TrainError> {
        for c in preset.unswept_runs()? {
            if !self.trains(c.task.kind()) {
                return Err(TrainError::Flag(format!(
                    "{source}: the preset trains the {} task; `reproduce {}` needs {}",
                    c.task.kind(),
                    self.name(),
                    self.needs()
                )));
            }
        }
        Ok(())
    }
}

/// The summary of a shard of runs that trains no report.
fn shard_line(shard: Shard, what: String, out: &Path) -> String {
    format!(
        "shard {shard}: {what} in {}; no report written (copy every shard's runs/ into one \
         directory, then run with --report-only)",
        out.join("runs").display()
    )
}

/// MQAR (Zoology's recall task): the gate, the grid, the lag claim and the ablation ladder.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recall;

impl Experiment for Recall {
    fn name(&self) -> &'static str {
        "recall"
    }

    fn trains(&self, kind: TaskKind) -> bool {
        kind == TaskKind::Mqar
    }

    fn needs(&self) -> &'static str {
        "mqar"
    }

    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
        sweep_shard(preset, out, shard)
    }

    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
        sweep_run(preset, out, mode)
    }
}

/// The paper's Exp 2, entity label copy at uniform lags, on the recall runner: the softmax
/// gate, learning rates swept per (cell, mixer), seeds, paired verdicts by lag, α by role.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exp2;

impl Experiment for Exp2 {
    fn name(&self) -> &'static str {
        "exp2"
    }

    fn trains(&self, kind: TaskKind) -> bool {
        kind == TaskKind::LabelCopy
    }

    fn needs(&self) -> &'static str {
        "label-copy"
    }

    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
        sweep_shard(preset, out, shard)
    }

    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
        sweep_run(preset, out, mode)
    }
}

/// RULER's offline tasks, byte-level: trained on their mixture, scored on each at every length
/// of the preset ([`super::ruler`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Ruler;

impl Experiment for Ruler {
    fn name(&self) -> &'static str {
        "ruler"
    }

    fn trains(&self, kind: TaskKind) -> bool {
        kind == TaskKind::Ruler
    }

    fn needs(&self) -> &'static str {
        "ruler"
    }

    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
        let (n, d) = super::train_shard(&preset.named_runs()?, shard, out, true)?;
        let what = format!("{n} runs ({} diverged)", d.len());
        Ok(shard_line(shard, what, out))
    }

    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
        super::ruler::run(preset, out, mode)
    }
}

/// One shard of a preset on the recall runner (cells × mixers, learning rates swept).
fn sweep_shard(preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
    let rep = super::recall::run_shard(preset, out, true, shard)?;
    let runs: usize = rep
        .cells
        .iter()
        .map(|c| c.sweep.len() + c.seeds.len() - 1)
        .sum();
    let what = format!("{} (cell, mixer) pairs, {runs} runs", rep.cells.len());
    Ok(shard_line(shard, what, out))
}

/// A preset on the recall runner, then its report.
fn sweep_run(preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
    let rep = super::recall::run(preset, out, mode.progress, mode.train_missing)?;
    if rep.gate_passed == Some(false) {
        eprintln!("gate FAILED: softmax attention did not solve the gate cell");
    }
    Ok(rep.cells.iter().map(|c| c.seeds.len()).sum())
}

/// Byte-level language modelling on the books corpus in `data_dir`, streaming the first
/// `stream_bytes` bytes of the first test book through every streamed model.
#[derive(Debug, Clone)]
pub struct Books {
    /// The prepared corpus (`vort data fetch books`), set in every run's config.
    pub data_dir: String,
    /// Bytes of the first test book streamed with the state carried.
    pub stream_bytes: usize,
}

impl Books {
    fn runs(&self, preset: &Preset) -> Result<Vec<super::preset::NamedRun>, TrainError> {
        let mut runs = preset.named_runs()?;
        for r in &mut runs {
            if let Some(books) = r.config.task.books_mut() {
                books.data_dir.clone_from(&self.data_dir);
            }
        }
        Ok(runs)
    }
}

impl Experiment for Books {
    fn name(&self) -> &'static str {
        "books"
    }

    fn trains(&self, kind: TaskKind) -> bool {
        kind == TaskKind::Books
    }

    fn needs(&self) -> &'static str {
        "books"
    }

    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
        let (n, d) = super::train_shard(&self.runs(preset)?, shard, out, true)?;
        Ok(shard_line(
            shard,
            format!("{n} runs ({} diverged)", d.len()),
            out,
        ))
    }

    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
        let runs = self.runs(preset)?;
        let streams = (self.stream_bytes, preset.whole_books);
        let rep = super::books::run_plan_with(&preset.name, &runs, out, streams, mode)?;
        Ok(rep.runs.len())
    }
}

/// The superseded synthetic tasks (Zipf-lag retrieval, label copy).
#[derive(Debug, Clone, Copy, Default)]
pub struct Synthetic;

impl Synthetic {
    fn plan(preset: &Preset) -> Result<super::Plan, TrainError> {
        Ok(super::Plan {
            label: preset.name.clone(),
            runs: preset.unswept_runs()?,
        })
    }
}

impl Experiment for Synthetic {
    fn name(&self) -> &'static str {
        "synthetic"
    }

    fn trains(&self, kind: TaskKind) -> bool {
        TaskKind::SYNTHETIC.contains(&kind)
    }

    fn needs(&self) -> &'static str {
        "zipf or label-copy"
    }

    fn shard(&self, preset: &Preset, out: &Path, shard: Shard) -> Result<String, TrainError> {
        let (n, d) = super::train_shard(&Self::plan(preset)?.named(), shard, out, true)?;
        Ok(shard_line(
            shard,
            format!("{n} runs ({} diverged)", d.len()),
            out,
        ))
    }

    fn run(&self, preset: &Preset, out: &Path, mode: Mode) -> Result<usize, TrainError> {
        Ok(super::run_plan(&Self::plan(preset)?, out, mode)?.runs.len())
    }
}
