//! A run in its directory: the lock, the loop with checkpoints, metrics and the final
//! evaluation, resuming and extending, and adopting an early-stopped run.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

/// Per-call options that are not part of the run's identity (not saved in the config).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Stop after this step even if the config asks for more (a checkpoint is written there);
    /// used to simulate an interrupted run.
    pub stop_at: Option<u64>,
    /// Show the progress bar.
    pub progress: bool,
    /// Print the resolved config to stderr.
    pub print_config: bool,
    /// Skip the final evaluation.
    pub skip_eval: bool,
    /// Refuse a run whose memory estimate exceeds this many bytes (None: the machine's
    /// available memory).
    pub max_memory: Option<u64>,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Steps completed.
    pub steps: u64,
    /// Loss of the last step.
    pub final_loss: f64,
    /// Mean training throughput over this call (tokens/s).
    pub tokens_per_s: f64,
    /// Wall time of this call (s).
    pub wall_s: f64,
    /// Held-out evaluation (None when skipped or interrupted).
    pub eval: Option<eval::EvalResult>,
    /// The run was already finished (all steps, or stopped early and evaluated): a resume
    /// had nothing to do.
    #[serde(default)]
    pub already_finished: bool,
}

/// One metrics line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metrics {
    /// Steps completed.
    pub step: u64,
    /// Total loss.
    pub loss: f64,
    /// Cross-entropy at answer positions.
    pub task_loss: f64,
    /// Accuracy at the batch's answer positions.
    pub acc: f64,
    /// Learning rate of the step.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Training tokens per second of the step.
    pub tokens_per_s: f64,
    /// Seconds since the start of this call.
    pub elapsed_s: f64,
    /// Accuracy on the validation stream (steps where it was scored, `train.eval_every`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_acc: Option<f64>,
    /// Mean cross-entropy (nats) over the validation stream's answer positions, at the same
    /// steps as `val_acc`; books: / ln 2 = held-out bits per byte on the validation books.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    /// Rows of the step's batch that were recall windows (runs with `[train.recall_mix]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recall_rows: Option<u64>,
}

/// The validation part of a progress line: " val ACC loss NATS" at the steps it was scored.
fn val_text(m: &Metrics) -> String {
    match (m.val_acc, m.val_loss) {
        (Some(a), Some(l)) => format!(" val {a:.3} loss {l:.4}"),
        (Some(a), None) => format!(" val {a:.3}"),
        _ => String::new(),
    }
}

/// Trains the run in `run_dir` (created if needed) with default options (progress bar on,
/// config printed). See [`run_with`].
///
/// # Errors
/// As [`run_with`].
pub fn run(config: &RunConfig, run_dir: &Path, resume: bool) -> Result<TrainSummary, TrainError> {
    run_with(
        config,
        run_dir,
        resume,
        &RunOptions {
            progress: true,
            print_config: true,
            ..RunOptions::default()
        },
    )
}

/// An exclusive lock on a run directory, held while a process trains or extends the run: a
/// second process on the same directory (a `reproduce` and a `train --resume`, say) is refused
/// with [`TrainError::RunBusy`] instead of interleaving its checkpoints and metrics with the
/// first's. It is an advisory `flock` on `run_dir/run.lock`, released by the OS when the
/// process ends however it ends, so a killed run leaves no stale lock; the empty file stays.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

impl RunLock {
    /// Takes the lock of `run_dir`, which must exist.
    ///
    /// # Errors
    /// [`TrainError::RunBusy`] if another process (or another lock in this one) holds it; I/O.
    pub fn acquire(run_dir: &Path) -> Result<RunLock, TrainError> {
        let path = RunDir::new(run_dir).lock_path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| checkpoint::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(RunLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(TrainError::RunBusy(run_dir.display().to_string()))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(checkpoint::io(&path, e)),
        }
    }
}

/// Trains `config` in `run_dir`, holding its [`RunLock`]. Fresh (`resume = false`): refuses a
/// directory that already holds a checkpoint. Resume: loads and verifies
/// `run_dir/checkpoint.safetensors` against `config` before writing anything, drops metrics
/// lines past the checkpoint, and continues. Writes config.toml, metrics.jsonl, checkpoints
/// and eval.json (and the empty run.lock).
///
/// # Errors
/// Invalid config, [`TrainError::RunExists`], [`TrainError::NoCheckpoint`],
/// [`TrainError::CheckpointCorrupt`], [`TrainError::CheckpointMismatch`],
/// [`TrainError::RunBusy`], I/O, divergence.
pub fn run_with(
    config: &RunConfig,
    run_dir: &Path,
    resume: bool,
    opts: &RunOptions,
) -> Result<TrainSummary, TrainError> {
    config.validate()?;
    // before anything is allocated: an absurd size is one line, not an abort
    config.check_memory(opts.max_memory)?;
    let created = !run_dir.exists();
    std::fs::create_dir_all(run_dir).map_err(|e| checkpoint::io(run_dir, e))?;
    let result =
        RunLock::acquire(run_dir).and_then(|_lock| run_locked(config, run_dir, resume, opts));
    if result.is_err() && created {
        // a run refused before it wrote anything leaves no directory behind
        let _ = std::fs::remove_file(RunDir::new(run_dir).lock_path());
        let _ = std::fs::remove_dir(run_dir);
    }
    result
}

/// What [`adopt_early_stop`] made of a run directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// The run is not the wanted one (another field differs, there is no checkpoint, or under
    /// the wanted threshold it would have stopped at a step whose state is not kept).
    No,
    /// The run is exactly the one the wanted config trains: its files now say so.
    Same,
    /// The run is a prefix of the wanted one (it stopped early under the old threshold, and
    /// the wanted threshold was not reached): its files now say the wanted config, its
    /// evaluation and released weights are removed, and resuming continues it.
    Continues,
}

/// Lets a run trained with one `train.early_stop_accuracy` serve a config that differs from
/// its own only in that threshold, without training it again.
///
/// Training is deterministic in (config, step), and the threshold decides only where a run
/// ends: the first validation step whose accuracy reaches it (0 = never), else
/// `train.steps`. So if no validation score up to the run's checkpoint reached the wanted
/// threshold, the wanted run passes through that checkpoint: it is the same run when the
/// checkpoint is at `train.steps`, and the same run continued otherwise. If the first score
/// to reach it is at the checkpoint's step of a run evaluated there, it is the same run.
/// If it is earlier, that step's state is gone: [`Adopted::No`].
///
/// Holds the run's [`RunLock`] while it reads and rewrites (config.toml and the
/// checkpoint's config, through the atomic writer).
///
/// # Errors
/// [`TrainError::RunBusy`] if another process holds the run; I/O; a corrupt checkpoint.
pub fn adopt_early_stop(run_dir: &Path, wanted: &RunConfig) -> Result<Adopted, TrainError> {
    let dir = RunDir::new(run_dir);
    let (config_path, ck_path) = (dir.config_path(), dir.checkpoint_path());
    if !config_path.is_file() || !ck_path.is_file() {
        return Ok(Adopted::No);
    }
    let _lock = dir.lock()?;
    let Some(saved) = dir.saved_config() else {
        return Ok(Adopted::No);
    };
    let mut only_threshold = saved.clone();
    only_threshold.train.early_stop_accuracy = wanted.train.early_stop_accuracy;
    if only_threshold != *wanted {
        return Ok(Adopted::No);
    }
    let mut ck = Checkpoint::load(&ck_path)?;
    let end = ck.step;
    let evaluated_at_end = dir.eval_at(end).is_some();
    let threshold = wanted.train.early_stop_accuracy;
    // the first validation step (up to the checkpoint) where the wanted run would stop
    let stops_at = dir
        .metrics()
        .into_iter()
        .filter(|m| m.step <= end)
        .find(|m| threshold > 0.0 && m.val_acc.is_some_and(|v| v >= threshold))
        .map(|m| m.step);
    let adopted = match stops_at {
        Some(s) if s == end && evaluated_at_end => Adopted::Same,
        Some(_) => return Ok(Adopted::No),
        None if end >= wanted.train.steps => Adopted::Same,
        None => Adopted::Continues,
    };
    if adopted == Adopted::Continues {
        // what the run's end produced is not the continued run's: removed first, so that an
        // interruption below leaves a run that is adopted again, never one reused as finished
        dir.remove_results()?;
    }
    let toml_text = wanted.to_toml()?;
    ck.config.clone_from(&toml_text);
    ck.save(&ck_path)?;
    checkpoint::write_atomic(&config_path, toml_text.as_bytes())?;
    Ok(adopted)
}

/// [`run_with`] once the run directory exists and is locked.
fn run_locked(
    config: &RunConfig,
    run_dir: &Path,
    resume: bool,
    opts: &RunOptions,
) -> Result<TrainSummary, TrainError> {
    let dev = device();
    let mut tr = Trainer::new(config, &dev)?;
    let dir = RunDir::new(run_dir);
    let ck_path = dir.checkpoint_path();
    // a run killed before its first checkpoint has only its config: resuming it starts over
    let resume = if resume && !ck_path.exists() && dir.exists() {
        eprintln!(
            "{}: no checkpoint yet (killed before the first one): starting from step 0 with \
             the config given",
            run_dir.display()
        );
        false
    } else {
        resume
    };
    if resume {
        let ck = Checkpoint::load(&ck_path)?;
        tr.restore(&ck, &ck_path)?;
        // finished: every step done, or stopped early and evaluated at the checkpoint's step
        let evaluated = dir.eval_at(tr.step);
        if tr.step >= config.train.steps || evaluated.is_some() {
            let last = dir.metrics().last().map_or(f64::NAN, |m| m.loss);
            return Ok(TrainSummary {
                steps: tr.step,
                final_loss: last,
                tokens_per_s: 0.0,
                wall_s: 0.0,
                eval: evaluated,
                already_finished: true,
            });
        }
    } else if ck_path.exists() {
        return Err(TrainError::RunExists(run_dir.display().to_string()));
    }
    // from here on, files are written
    std::fs::create_dir_all(run_dir).map_err(|e| checkpoint::io(run_dir, e))?;
    let toml_text = config.to_toml()?;
    checkpoint::write_atomic(&dir.config_path(), toml_text.as_bytes())?;
    if opts.print_config {
        eprintln!(
            "# resolved config ({})\n{toml_text}",
            dir.config_path().display()
        );
    }
    let metrics_path = dir.metrics_path();
    if resume {
        truncate_metrics(&metrics_path, tr.step)?;
    } else if metrics_path.exists() {
        std::fs::remove_file(&metrics_path).map_err(|e| checkpoint::io(&metrics_path, e))?;
    }
    let mut metrics = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&metrics_path)
        .map_err(|e| checkpoint::io(&metrics_path, e))?;
    let end = opts
        .stop_at
        .map_or(config.train.steps, |s| s.min(config.train.steps));
    let bar = if opts.progress {
        indicatif::ProgressBar::new(config.train.steps)
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_position(tr.step);
    let tokens_per_step = (config.train.batch_size * config.task.seq_len) as f64;
    let plain_log = opts.progress && !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let t0 = Instant::now();
    let start_step = tr.step;
    let mut last_loss = f64::NAN;
    let mut end = end;
    let mut stopped_early = false;
    let t = &config.train;
    while tr.step < end {
        let ts = Instant::now();
        let mut m = tr.train_step(&dev)?;
        m.tokens_per_s = tokens_per_step / ts.elapsed().as_secs_f64();
        if t.eval_every > 0 && tr.step % t.eval_every == 0 {
            // books: the validation books' windows, each scored once however many are asked
            let n_val = tr
                .source
                .valid_len()
                .map_or(t.val_sequences, |n| n.min(t.val_sequences));
            let v = eval::evaluate_stream(
                &tr.model,
                &tr.source,
                config,
                tr.step,
                Stream::Valid,
                n_val,
                None,
                &dev,
            )?;
            m.val_acc = Some(v.accuracy);
            m.val_loss = Some(v.loss);
            if t.early_stop_accuracy > 0.0 && v.accuracy >= t.early_stop_accuracy {
                // Zoology's rule: the run is finished at this step (the cosine schedule is
                // the one of the full run, cut short)
                stopped_early = true;
                end = tr.step;
            }
        }
        m.elapsed_s = t0.elapsed().as_secs_f64();
        last_loss = m.loss;
        bar.set_position(tr.step);
        bar.set_message(format!(
            "loss {:.4} acc {:.3}{} {:.0} tok/s",
            m.loss,
            m.acc,
            val_text(&m),
            m.tokens_per_s
        ));
        if plain_log && (tr.step % config.train.log_every == 0 || tr.step == end) {
            // nobody watches a bar in a log file: one plain line per logged step
            let done = (tr.step - start_step) as f64;
            let eta = t0.elapsed().as_secs_f64() / done.max(1.0) * (end - tr.step) as f64;
            eprintln!(
                "{}: step {}/{} loss {:.4} acc {:.3}{} {:.0} tok/s ETA {:.0} s",
                run_dir.display(),
                tr.step,
                end,
                m.loss,
                m.acc,
                val_text(&m),
                m.tokens_per_s,
                eta
            );
        }
        if tr.step % config.train.log_every == 0 || tr.step == end || m.val_acc.is_some() {
            let line =
                serde_json::to_string(&m).map_err(|e| TrainError::Serialise(e.to_string()))?;
            writeln!(metrics, "{line}").map_err(|e| checkpoint::io(&metrics_path, e))?;
        }
        if tr.step % config.train.checkpoint_every == 0 || tr.step == end {
            metrics
                .flush()
                .map_err(|e| checkpoint::io(&metrics_path, e))?;
            tr.checkpoint()?.save(&ck_path)?;
        }
    }
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();
    let done = tr.step - start_step;
    let mut summary = TrainSummary {
        steps: tr.step,
        final_loss: last_loss,
        tokens_per_s: if wall > 0.0 {
            done as f64 * tokens_per_step / wall
        } else {
            0.0
        },
        wall_s: wall,
        eval: None,
        already_finished: false,
    };
    if !opts.skip_eval && (tr.step == config.train.steps || stopped_early) {
        let res = eval::evaluate(&tr.model, &tr.source, config, tr.step, &dev)?;
        eval::write(&res, &dir.eval_path())?;
        summary.eval = Some(res);
    }
    Ok(summary)
}

/// Keeps only the metrics lines with step <= `step` (rewritten atomically).
fn truncate_metrics(path: &PathBuf, step: u64) -> Result<(), TrainError> {
    // a log: bytes that are not UTF-8 (a torn or edited line) must not block a resume
    let text = match std::fs::read(path) {
        Ok(t) => String::from_utf8_lossy(&t).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(checkpoint::io(path, e)),
    };
    let unreadable = text
        .lines()
        .filter(|l| serde_json::from_str::<Metrics>(l).is_err())
        .count();
    if unreadable > 0 {
        eprintln!(
            "{}: {unreadable} unreadable line(s) dropped on resume",
            path.display()
        );
    }
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<Metrics>(l)
                .map(|m| m.step <= step)
                .unwrap_or(false)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    checkpoint::write_atomic(path, kept.as_bytes())
}

/// Extends the run in `run_dir` to `steps` optimiser steps (`vort train --resume --steps N`):
/// its config.toml and the checkpoint's copy of the config get the new `train.steps`, and an
/// evaluation of the shorter run is removed (the extended run writes its own at the end).
///
/// Schedule: the learning rate of every later step is the one of a run configured for
/// `steps` from the start (warm-up, then cosine to `min_lr_ratio` at `steps`): it is not
/// restarted, so when a finished run is extended the rate jumps from its final value back up
/// to the new cosine's value at the resume step. Returns the updated config.
///
/// # Errors
/// No run or checkpoint in `run_dir`; `steps` not above the checkpoint's step (nothing to
/// add: shortening a run is not resuming it); another process holds the run; I/O.
pub fn extend_run(run_dir: &Path, steps: u64) -> Result<RunConfig, TrainError> {
    let dir = RunDir::new(run_dir);
    let cfg_path = dir.config_path();
    let mut cfg = dir.config()?;
    let _lock = dir.lock()?;
    let ck_path = dir.checkpoint_path();
    let mut ck = Checkpoint::load(&ck_path)?;
    ck.check_config(&cfg.to_toml()?, &ck_path)?;
    if steps <= ck.step {
        return Err(TrainError::Flag(format!(
            "--steps {steps} must be above the {} steps the run has done to extend it",
            ck.step
        )));
    }
    cfg.train.steps = steps;
    cfg.validate()?;
    let text = cfg.to_toml()?;
    ck.config = text.clone();
    ck.save(&ck_path)?;
    checkpoint::write_atomic(&cfg_path, text.as_bytes())?;
    let eval_path = dir.eval_path();
    if eval_path.exists() {
        std::fs::remove_file(&eval_path).map_err(|e| checkpoint::io(&eval_path, e))?;
    }
    Ok(cfg)
}
