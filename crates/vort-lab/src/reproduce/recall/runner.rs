//! Training (or reusing) the runs of a recall preset: per (cell, mixer) the learning-rate sweep
//! on the first seed and the other seeds at the best rate, in passes repeated while another
//! process holds some of the runs; then the report.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{
    gate, lr_label, state_floats, write_report, CellResult, CellSpec, Extrapolation, MixerSpec,
    RecallPreset, RecallReport, RunResult,
};
use crate::train::eval::EvalResult;
use crate::train::{self, checkpoint, Adopted, RunConfig, RunOptions, TrainError};
use vort::Mixer;

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
    let c = preset.run_config(cell, mixer, lr, seed)?;
    let dir = run_dir(out, cell, mixer, lr, seed);
    let Some(same_config) = same_config(&dir, &c, mode.train_missing)? else {
        return Ok(Outcome::Busy);
    };
    let finished = match std::fs::read_to_string(dir.join(train::EVAL_FILE)) {
        Ok(e) if same_config => serde_json::from_str::<EvalResult>(&e).ok(),
        _ => None,
    };
    // a run that diverged is a result of the sweep (a learning rate too high), not a reason
    // to stop the experiment: it is recorded and reused like a finished one
    let diverged_before = std::fs::read_to_string(dir.join(DIVERGED_FILE))
        .ok()
        .filter(|_| same_config)
        .and_then(|t| serde_json::from_str::<Diverged>(&t).ok());
    if let Some(d) = diverged_before {
        return Ok(Outcome::Done(
            Box::new(RunResult::diverged(seed, lr, d.step, &c)),
            true,
        ));
    }
    if finished.is_none() && !mode.train_missing {
        return Ok(Outcome::Missing);
    }
    let reused = finished.is_some();
    let eval = match finished {
        Some(e) => e,
        None => match train_run(&dir, &c, mode.progress)? {
            Trained::Eval(e) => *e,
            Trained::Diverged(step) => {
                return Ok(Outcome::Done(
                    Box::new(RunResult::diverged(seed, lr, step, &c)),
                    false,
                ))
            }
            // another process trains it: leave it to that one (see `run`)
            Trained::Busy => return Ok(Outcome::Busy),
        },
    };
    let r = finished_result(&dir, &c, cell, preset.learned_accuracy, eval, (seed, lr))?;
    Ok(Outcome::Done(Box::new(r), reused))
}

/// Whether the run in `dir` has config `c`, so that its files are its results (None: another
/// process holds it). With `train_missing`, a run of a preset that changed only the early-stop
/// threshold is adopted when the threshold cannot change it, and continued when it stopped too
/// soon (see `adopt_early_stop`).
fn same_config(dir: &Path, c: &RunConfig, train_missing: bool) -> Result<Option<bool>, TrainError> {
    let saved = std::fs::read_to_string(dir.join(train::CONFIG_FILE)).ok();
    // finished: evaluated, with the same config. Compared parsed, not as text: a config
    // written before a field existed reads that field's default, which is what it ran with
    let saved = saved
        .as_deref()
        .and_then(|t| RunConfig::from_toml(t, "config.toml").ok());
    Ok(Some(match saved {
        Some(s) if s == *c => true,
        Some(_) if train_missing => match train::adopt_early_stop(dir, c) {
            Ok(Adopted::Same) => true,
            Ok(Adopted::Continues) => {
                remove_extrapolations(dir)?;
                false
            }
            Ok(Adopted::No) => false,
            Err(TrainError::RunBusy(_)) => return Ok(None),
            Err(e) => return Err(e),
        },
        _ => false,
    }))
}

/// What training a run gave.
enum Trained {
    /// Its evaluation.
    Eval(Box<EvalResult>),
    /// The step at which it diverged (recorded in `diverged.json`).
    Diverged(u64),
    /// Another vort process holds it.
    Busy,
}

/// Trains the run in `dir` (resuming from its checkpoint) and evaluates it; a divergence is
/// recorded in its `diverged.json`.
fn train_run(dir: &Path, c: &RunConfig, progress: bool) -> Result<Trained, TrainError> {
    let resume = dir.join(train::CHECKPOINT_FILE).exists();
    let opts = RunOptions {
        progress,
        ..RunOptions::default()
    };
    match train::run_with(c, dir, resume, &opts) {
        Ok(s) => Ok(Trained::Eval(Box::new(match s.eval {
            Some(r) => r,
            None => train::eval::run(dir)?,
        }))),
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
            checkpoint::write_atomic(&dir.join(DIVERGED_FILE), json.as_bytes())?;
            Ok(Trained::Diverged(step))
        }
        Err(TrainError::RunBusy(_)) => Ok(Trained::Busy),
        Err(e) => Err(e),
    }
}

/// The result of the finished run in `dir` (config `c`, at `(seed, lr)`): its evaluation, its
/// last validation accuracy and mean throughput from its metrics, and its scores at the
/// cell's extrapolation lengths.
fn finished_result(
    dir: &Path,
    c: &RunConfig,
    cell: &CellSpec,
    learned_accuracy: f64,
    eval: EvalResult,
    (seed, lr): (u64, f64),
) -> Result<RunResult, TrainError> {
    let metrics = train::read_metrics(dir);
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
        tokens_per_s,
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
    std::fs::create_dir_all(out_dir).map_err(|e| checkpoint::io(out_dir, e))?;
    let mut pass = Pass {
        preset,
        out_dir,
        mode,
        total: preset.run_count(),
        done: 0,
        trained: 0,
        trained_s: 0.0,
        reused: 0,
        busy: 0,
    };
    let mut cells = Vec::new();
    let mut pending = Vec::new();
    for cell in &preset.cells {
        for mixer in preset.mixers_of(cell) {
            match pass.cell(cell, mixer)? {
                Ok(c) => cells.push(c),
                Err(missing) => pending.push(missing),
            }
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

/// One pass over a preset's runs: the counts behind its progress lines (runs done, reused,
/// trained and their seconds, for the ETA), and the runs skipped because another process holds
/// them.
struct Pass<'a> {
    preset: &'a RecallPreset,
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
        let seeds = cell
            .seeds
            .clone()
            .unwrap_or_else(|| self.preset.seeds.clone());
        let lrs = self.preset.lrs_of(cell, mixer);
        let sweep_runs: Vec<(f64, u64)> = lrs.iter().map(|&lr| (lr, seeds[0])).collect();
        let sweep = match self.runs(cell, mixer, &sweep_runs)? {
            Ok(sweep) => sweep,
            Err(missing) => return Ok(Err(missing)),
        };
        let best = best_rate(&sweep);
        let best_lr = lrs[best];
        let seed_runs: Vec<(f64, u64)> = seeds[1..].iter().map(|&s| (best_lr, s)).collect();
        let mut runs = vec![sweep[best].clone()];
        match self.runs(cell, mixer, &seed_runs)? {
            Ok(more) => runs.extend(more),
            Err(missing) => return Ok(Err(missing)),
        }
        if cell.release_weights {
            release_weights(&run_dir(self.out_dir, cell, mixer, best_lr, seeds[0]))?;
        }
        let c = self.preset.run_config(cell, mixer, best_lr, seeds[0])?;
        let model_nodes = nodes_of(&c)?;
        Ok(Ok(CellResult {
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
        let eta = if self.trained > 0 {
            let left = (self.total - self.done) as f64 * self.trained_s / self.trained as f64;
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

/// Writes the trained weights of the run in `dir` (`weights.safetensors`, no optimizer state)
/// beside its config, once.
fn release_weights(dir: &Path) -> Result<(), TrainError> {
    let weights = dir.join(train::WEIGHTS_FILE);
    if !weights.exists() {
        let ck = checkpoint::Checkpoint::load(&dir.join(train::CHECKPOINT_FILE))?;
        ck.weights_only().save(&weights)?;
    }
    Ok(())
}

/// Memory nodes N of the model of `cfg` (1 for one exponential per head, M for the mixture).
fn nodes_of(cfg: &RunConfig) -> Result<usize, TrainError> {
    let vm = candle_nn::VarMap::new();
    let model = train::run_model(cfg, &vm, &train::device())?;
    Ok(model.blocks().first().map_or(0, vort::block::Block::nodes))
}
