//! Training (or reusing) the runs of a recall preset: per (cell, mixer) the learning-rate sweep
//! on the first seed and the other seeds at the best rate, in passes repeated while another
//! process holds some of the runs; then the report.

use std::path::Path;
use std::time::Instant;

use super::{
    gate, lr_label, state_floats, write_report, CellResult, CellSpec, Extrapolation, MixerSpec,
    Preset, RecallReport, RunResult,
};
use crate::reproduce::{runner, Shard};
use crate::train::eval::EvalResult;
use crate::train::{self, checkpoint, RunConfig, RunDir, TrainError};
use vort::Mixer;

/// Scores the model of the run in `dir` (config `c`) at length `seq_len` (see
/// [`CellSpec::extrapolate`]); the result is cached as `extrapolate-L<len>.json` in `dir`,
/// and reused while the number of scored sequences is unchanged.
fn extrapolate(
    dir: &RunDir,
    c: &RunConfig,
    seq_len: usize,
    examples: usize,
    step: u64,
) -> Result<Extrapolation, TrainError> {
    let cache = dir.extrapolation_path(seq_len);
    if let Some(e) = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| serde_json::from_str::<Extrapolation>(&t).ok())
        .filter(|e| e.examples == examples)
    {
        return Ok(e);
    }
    let mut cx = at_length(c, seq_len);
    if let Some(m) = cx.task.mqar_mut() {
        m.test_examples = examples;
    }
    // label copy: the lags stay uniform over the whole, longer sequence
    if let Some(p) = cx.task.planted_mut() {
        p.max_lag = seq_len - 4;
    }
    let (model, _vm) = crate::train::eval::load_params_as(dir.path(), &cx)?;
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
    checkpoint::write_json(&cache, &x)?;
    Ok(x)
}

/// `c` scored at `seq_len` tokens: node tables certified to the length where a horizon was
/// set below it, softmax restricted to a window of the training length (it was trained on
/// no longer context).
pub fn at_length(c: &RunConfig, seq_len: usize) -> RunConfig {
    let mut cx = c.clone();
    cx.task.seq_len = seq_len;
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
    cx
}

/// The run directory of (cell, mixer, learning rate, seed) under `out`.
fn run_dir(out: &Path, cell: &CellSpec, mixer: &MixerSpec, lr: f64, seed: u64) -> RunDir {
    RunDir::new(out.join(runner::run_path(&cell.name, &mixer.name, Some(lr), seed)))
}

/// Writes the weights of a finished run that a cell releases, from its checkpoint. A run
/// finished and copied from another machine may have neither (its checkpoint stayed there):
/// then it is said on stderr and the report goes on without them (its router inputs read
/// "no weights").
///
/// # Errors
/// A corrupt checkpoint; I/O.
fn release_kept_weights(dir: &RunDir) -> Result<(), TrainError> {
    if dir.weights_path().exists() || dir.has_checkpoint() {
        return dir.release_weights();
    }
    eprintln!(
        "warning: {} holds neither weights.safetensors nor a checkpoint, so its weights are \
         not released (retrain it to restore them)",
        dir.path().display()
    );
    Ok(())
}

/// How [`run`] treats each run: progress output, and whether a run that is not finished is
/// trained (or left pending).
#[derive(Debug, Clone, Copy)]
struct Mode {
    progress: bool,
    train_missing: bool,
    /// Print the runs reused from an earlier call (the first pass only).
    print_reused: bool,
    /// Only the (cell, mixer) pairs of this shard (None: every pair).
    shard: Option<Shard>,
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

/// Trains (or reuses) one run ([`runner::train_or_reuse`]) and reads its result.
fn one(
    out: &Path,
    preset: &Preset,
    cell: &CellSpec,
    mixer: &MixerSpec,
    lr: f64,
    seed: u64,
    mode: Mode,
) -> Result<Outcome, TrainError> {
    let c = preset.run_config(cell, mixer, lr, seed)?;
    let dir = run_dir(out, cell, mixer, lr, seed);
    let run_mode = runner::Mode {
        progress: mode.progress,
        train_missing: mode.train_missing,
    };
    Ok(match runner::train_or_reuse(&dir, &c, run_mode)? {
        runner::Outcome::Finished { eval, reused } => {
            let r = finished_result(&dir, &c, cell, preset.learned_accuracy, *eval, (seed, lr))?;
            Outcome::Done(Box::new(r), reused)
        }
        runner::Outcome::Diverged { step, reused } => {
            Outcome::Done(Box::new(RunResult::diverged(seed, lr, step, &c)), reused)
        }
        runner::Outcome::Missing => Outcome::Missing,
        runner::Outcome::Busy => Outcome::Busy,
    })
}

/// The result of the finished run in `dir` (config `c`, at `(seed, lr)`): its evaluation, its
/// last validation accuracy and mean throughput from its metrics, and its scores at the
/// cell's extrapolation lengths.
fn finished_result(
    dir: &RunDir,
    c: &RunConfig,
    cell: &CellSpec,
    learned_accuracy: f64,
    eval: EvalResult,
    (seed, lr): (u64, f64),
) -> Result<RunResult, TrainError> {
    let metrics = dir.metrics();
    let val = metrics
        .iter()
        .rev()
        .find_map(|m| m.val_acc)
        .unwrap_or(f64::NAN);
    let answers: usize = eval.buckets.iter().map(|b| b.n).sum();
    let correct: usize = eval.buckets.iter().map(|b| b.correct).sum();
    let extrapolation = cell
        .extrapolate
        .iter()
        .map(|&l| extrapolate(dir, c, l, cell.extrapolate_examples, eval.step))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RunResult {
        seed,
        lr,
        val_accuracy: val,
        accuracy: eval.accuracy,
        correct,
        answers,
        buckets: eval.buckets,
        lag_bins: eval.lag_bins,
        steps: eval.step,
        tokens_per_s: dir.throughput(),
        tokens: eval.step * (c.train.batch_size * c.task.seq_len) as u64,
        train_s: metrics.last().map_or(0.0, |m| m.elapsed_s),
        learned: eval.accuracy >= learned_accuracy,
        alpha: eval.alpha,
        extrapolation,
        diverged_at: None,
    })
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
    preset: &Preset,
    out_dir: &Path,
    progress: bool,
    train_missing: bool,
) -> Result<RecallReport, TrainError> {
    let t0 = Instant::now();
    let mode = Mode {
        progress,
        train_missing,
        print_reused: true,
        shard: None,
    };
    let mut rep = passes(preset, out_dir, mode)?;
    rep.wall_s = t0.elapsed().as_secs_f64();
    write_report(&rep, out_dir)?;
    Ok(rep)
}

/// Trains (or reuses) the runs of the (cell, mixer) pairs of `preset` that `shard` owns
/// ([`Shard`]: pair k in the preset's order, 0-based, belongs to shard `k % n + 1`) into
/// `out_dir`, and writes no report: the report needs every pair, so it is written by a
/// `--report-only` call ([`run`] with `train_missing` false) over the merged `runs/` trees of
/// every shard. The result covers this shard's pairs only.
///
/// # Errors
/// As [`run`].
pub fn run_shard(
    preset: &Preset,
    out_dir: &Path,
    progress: bool,
    shard: Shard,
) -> Result<RecallReport, TrainError> {
    let t0 = Instant::now();
    let mode = Mode {
        progress,
        train_missing: true,
        print_reused: true,
        shard: Some(shard),
    };
    let mut rep = passes(preset, out_dir, mode)?;
    rep.wall_s = t0.elapsed().as_secs_f64();
    Ok(rep)
}

/// Passes over the preset until no run is left to another process (one pass when nothing is
/// trained): the report of the last.
fn passes(preset: &Preset, out_dir: &Path, mut mode: Mode) -> Result<RecallReport, TrainError> {
    let mut waited_for = 0;
    loop {
        let (rep, busy) = run_pass(preset, out_dir, mode)?;
        // the report is written once, when nothing is left to wait for
        if busy == 0 || !mode.train_missing {
            return Ok(rep);
        }
        // said once, and again only when the number changes
        if mode.progress && busy != waited_for {
            waited_for = busy;
            eprintln!(
                "waiting for {busy} run(s) in use by another vort process (checking every {} s)",
                runner::BUSY_POLL.as_secs()
            );
        }
        mode.print_reused = false;
        std::thread::sleep(runner::BUSY_POLL);
    }
}

/// One pass over the preset (see [`run`], which writes the report): the report, and how many
/// runs it skipped because another process holds them.
fn run_pass(
    preset: &Preset,
    out_dir: &Path,
    mode: Mode,
) -> Result<(RecallReport, usize), TrainError> {
    std::fs::create_dir_all(out_dir).map_err(|e| checkpoint::io(out_dir, e))?;
    let mut pass = Pass {
        preset,
        out_dir,
        mode,
        total: match mode.shard {
            None => preset.run_count(),
            Some(shard) => preset
                .units()
                .iter()
                .enumerate()
                .filter(|(k, _)| shard.owns(*k))
                .map(|(_, (c, m))| preset.unit_run_count(c, m))
                .sum(),
        },
        done: 0,
        trained: 0,
        trained_s: 0.0,
        reused: 0,
        busy: 0,
    };
    let mut cells = Vec::new();
    let mut pending = Vec::new();
    for (k, (cell, mixer)) in preset.units().into_iter().enumerate() {
        if mode.shard.is_some_and(|s| !s.owns(k)) {
            continue;
        }
        match pass.cell(cell, mixer)? {
            Ok(c) => cells.push(c),
            Err(missing) => pending.push(missing),
        }
    }
    let gate_passed = gate::passed(preset, &cells);
    let rep = RecallReport {
        preset: preset.clone(),
        cells,
        gate_passed,
        wall_s: 0.0, // set by `run`, over every pass
        reused: pass.reused,
        pending,
    };
    Ok((rep, pass.busy))
}

/// The runs of the preset (of its `shard`) with no evaluation in `out_dir` yet, as the (cell,
/// mixer) each belongs to: every sweep point without one, and each later seed that no swept
/// rate has finished (the rate its seeds will run at is not known before the sweep ends, so a
/// seed finished at any swept rate counts as done). For the ETA: it counts runs another
/// process is training.
fn runs_left<'p>(
    preset: &'p Preset,
    out_dir: &Path,
    shard: Option<Shard>,
) -> Vec<(&'p CellSpec, &'p MixerSpec)> {
    let finished = |c: &CellSpec, m: &MixerSpec, lr: f64, seed: u64| {
        run_dir(out_dir, c, m, lr, seed).eval_path().exists()
    };
    let mut left = Vec::new();
    for (k, (c, m)) in preset.units().into_iter().enumerate() {
        if shard.is_some_and(|s| !s.owns(k)) {
            continue;
        }
        let (lrs, seeds) = (preset.lrs_of(c, m), preset.seeds_of(c, m));
        let sweep = lrs.iter().filter(|&&lr| !finished(c, m, lr, seeds[0]));
        let later = seeds[1..]
            .iter()
            .filter(|&&seed| !lrs.iter().any(|&lr| finished(c, m, lr, seed)));
        left.extend(std::iter::repeat_n((c, m), sweep.count() + later.count()));
    }
    left
}

/// Seconds of training left in `out_dir` ([`runs_left`]), each run priced at the mean
/// training time of the finished runs of its (cell, mixer) there, else of its cell's, else at
/// `fallback_s`: a d256 run costs ten d64 ones, so one mean over all runs misleads. The sum of
/// every run left, as measured (at the threads those runs had): with two processes sharing
/// the runs, each sees about half of it.
fn seconds_left(preset: &Preset, out_dir: &Path, shard: Option<Shard>, fallback_s: f64) -> f64 {
    let left = runs_left(preset, out_dir, shard);
    if left.is_empty() {
        return 0.0;
    }
    // the training seconds of every finished run, read once: (cell, mixer, seconds)
    let mut finished = Vec::new();
    for (c, m) in preset.units() {
        for &lr in &preset.lrs_of(c, m) {
            for &seed in &preset.seeds_of(c, m) {
                let d = run_dir(out_dir, c, m, lr, seed);
                let secs = if d.eval_path().exists() {
                    d.train_seconds()
                } else {
                    0.0
                };
                if secs > 0.0 {
                    finished.push((c.name.as_str(), m.name.as_str(), secs));
                }
            }
        }
    }
    let mean = |keep: &dyn Fn(&(&str, &str, f64)) -> bool| {
        let v: Vec<f64> = finished.iter().filter(|r| keep(r)).map(|r| r.2).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    left.into_iter()
        .map(|(c, m)| {
            mean(&|r| r.0 == c.name && r.1 == m.name)
                .or_else(|| mean(&|r| r.0 == c.name))
                .unwrap_or(fallback_s)
        })
        .sum()
}

/// One pass over a preset's runs: the counts behind its progress lines (runs done, reused,
/// trained and their seconds, for the ETA), and the runs skipped because another process holds
/// them.
struct Pass<'a> {
    preset: &'a Preset,
    out_dir: &'a Path,
    mode: Mode,
    total: usize,
    done: usize,
    trained: usize,
    trained_s: f64,
    reused: usize,
    busy: usize,
}

impl Pass<'_> {
    /// One (cell, mixer): the sweep on the first seed, then the other seeds at the rate with
    /// the best validation accuracy; or the run left pending ("cell / mixer (run)").
    fn cell(
        &mut self,
        cell: &CellSpec,
        mixer: &MixerSpec,
    ) -> Result<Result<CellResult, String>, TrainError> {
        let seeds = self.preset.seeds_of(cell, mixer);
        let lrs = self.preset.lrs_of(cell, mixer);
        let sweep_runs: Vec<(f64, u64)> = lrs.iter().map(|&lr| (lr, seeds[0])).collect();
        let sweep = match self.runs(cell, mixer, &sweep_runs)? {
            Ok(sweep) => sweep,
            Err(missing) => return Ok(Err(missing)),
        };
        let best = best_rate(&sweep);
        let best_lr = lrs[best];
        // Released as soon as the sweep has chosen, not after the other seeds: a checkpoint
        // does not outlive its machine, and the other seeds may train on another one.
        if cell.release_weights {
            release_kept_weights(&run_dir(self.out_dir, cell, mixer, best_lr, seeds[0]))?;
        }
        let seed_runs: Vec<(f64, u64)> = seeds[1..].iter().map(|&s| (best_lr, s)).collect();
        let mut runs = vec![sweep[best].clone()];
        match self.runs(cell, mixer, &seed_runs)? {
            Ok(more) => runs.extend(more),
            Err(missing) => return Ok(Err(missing)),
        }
        let c = self.preset.run_config(cell, mixer, best_lr, seeds[0])?;
        let model_nodes = nodes_of(&c)?;
        Ok(Ok(CellResult {
            cell: cell.name.clone(),
            section: cell.section,
            mixer: mixer.name.clone(),
            kind: c.model.mixer.kind(),
            task: c.task.clone(),
            d_model: c.model.d_model,
            state_floats: state_floats(&c, model_nodes),
            sweep,
            best_lr,
            seeds: runs,
        }))
    }

    /// The runs `runs` ((learning rate, seed) pairs) of (cell, mixer), in order; or the last
    /// one left pending: a run not finished (when this call trains nothing) ends the list, and
    /// a run another process holds is skipped, so that the others can be trained meanwhile.
    fn runs(
        &mut self,
        cell: &CellSpec,
        mixer: &MixerSpec,
        runs: &[(f64, u64)],
    ) -> Result<Result<Vec<RunResult>, String>, TrainError> {
        let pending_run = |what: String| format!("{} / {} ({what})", cell.name, mixer.name);
        let mut results = Vec::new();
        let mut missing = None;
        for &(lr, seed) in runs {
            let ts = Instant::now();
            let (r, was) = match one(self.out_dir, self.preset, cell, mixer, lr, seed, self.mode)? {
                Outcome::Done(r, was) => (*r, was),
                Outcome::Missing => {
                    missing = Some(pending_run(format!("lr {} seed {seed}", lr_label(lr))));
                    break;
                }
                Outcome::Busy => {
                    self.busy += 1;
                    missing = Some(pending_run(format!(
                        "lr {} seed {seed}: in use by another vort process",
                        lr_label(lr)
                    )));
                    continue;
                }
            };
            let what = format!(
                "{} {} lr {} seed {seed}",
                cell.name,
                mixer.name,
                lr_label(lr)
            );
            self.record(&r, was, &what, ts.elapsed().as_secs_f64());
            results.push(r);
        }
        Ok(missing.map_or(Ok(results), Err))
    }

    /// Counts a finished run and prints its line (with the ETA over the runs trained so far);
    /// a reused run is printed on the first pass only.
    fn record(&mut self, r: &RunResult, was_reused: bool, what: &str, secs: f64) {
        self.done += 1;
        if was_reused {
            self.reused += 1;
        } else {
            self.trained += 1;
            self.trained_s += secs;
        }
        if !(self.mode.progress && (self.mode.print_reused || !was_reused)) {
            return;
        }
        let eta = if was_reused {
            String::new()
        } else {
            // runs still to train, not runs still to see: most of a resumed preset is reused
            let fallback = self.trained_s / self.trained as f64;
            let left = seconds_left(self.preset, self.out_dir, self.mode.shard, fallback);
            format!(", about {:.0} min of training left", left / 60.0)
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
            "[{}/{}] {what}: {result}{}{eta}",
            self.done,
            self.total,
            if was_reused { ", reused" } else { "" },
        );
    }
}

/// The run of the sweep with the best validation accuracy; ties (e.g. several at 1.0) go to
/// the rate that got there in fewer steps.
fn best_rate(sweep: &[RunResult]) -> usize {
    sweep
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
        .map_or(0, |(i, _)| i)
}

/// Memory nodes N of the model of `cfg` (1 for one exponential per head, M for the mixture).
fn nodes_of(cfg: &RunConfig) -> Result<usize, TrainError> {
    let vm = candle_nn::VarMap::new();
    let model = train::run_model(cfg, &vm, &train::device())?;
    let nodes = model.blocks().next().map_or(0, vort::block::Block::nodes);
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ETA counts the runs without an evaluation: the sweep points not finished, and the
    /// later seeds that no swept rate has finished; a shard counts its own pairs only. Each
    /// is priced at its (cell, mixer)'s finished runs, else its cell's, else the fallback.
    #[test]
    fn the_eta_prices_only_the_runs_left_to_train() {
        // four rungs, each 2 sweep points at seed 0 and seeds 1-2 at the rate chosen
        let rungs = super::super::fixtures::RUNGS.replace("lrs = [1e-3]", "lrs = [1e-3, 3e-3]");
        let preset = Preset::from_toml(&rungs, "t").unwrap();
        let out = std::env::temp_dir().join(format!("vort-eta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let units = preset.units();
        assert!(units.iter().all(|(c, _)| c.name == units[0].0.name));
        let finish = |unit: usize, lr: f64, seed: u64, secs: f64| {
            let (c, m) = units[unit];
            let d = run_dir(&out, c, m, lr, seed);
            std::fs::create_dir_all(d.path()).unwrap();
            std::fs::write(d.eval_path(), "{}").unwrap();
            let line = format!(
                "{{\"step\":10,\"loss\":1.0,\"task_loss\":1.0,\"acc\":0.5,\"lr\":0.001,\
                 \"grad_norm\":1.0,\"tokens_per_s\":1.0,\"elapsed_s\":{secs}}}\n"
            );
            std::fs::write(d.metrics_path(), line).unwrap();
        };
        let left = |shard: Option<Shard>| runs_left(&preset, &out, shard).len();
        assert_eq!(left(None), 16);
        // nothing finished: every run at the fallback
        assert_eq!(seconds_left(&preset, &out, None, 7.0), 16.0 * 7.0);
        finish(0, 1e-3, 0, 100.0);
        // seed 1 finished at a swept rate counts as done, whichever rate the sweep picks
        finish(0, 3e-3, 1, 300.0);
        assert_eq!(left(None), 14);
        finish(1, 1e-3, 0, 1000.0);
        // rung 0: 2 left at its mean 200 s; rung 1: 3 left at 1000 s; rungs 2 and 3: 8 left
        // at the cell's mean (100 + 300 + 1000) / 3
        let want = 2.0 * 200.0 + 3.0 * 1000.0 + 8.0 * 1400.0 / 3.0;
        let got = seconds_left(&preset, &out, None, 7.0);
        assert!((got - want).abs() < 1e-9, "{got} against {want}");
        // shard 1/2 owns pairs 0 and 2, shard 2/2 pairs 1 and 3
        let shard = |s: &str| Some(s.parse::<Shard>().unwrap());
        assert_eq!(left(shard("1/2")), 6);
        assert_eq!(left(shard("2/2")), 7);
        std::fs::remove_dir_all(&out).unwrap();
    }
}
