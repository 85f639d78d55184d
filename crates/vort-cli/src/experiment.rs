//! `vort train`, `vort eval` and `vort reproduce`: thin wrappers over `vort_lab`'s training.

use std::path::{Path, PathBuf};

use clap::Args;
use vort_lab::reproduce::recall::Preset;
use vort_lab::reproduce::{self, Scale};
use vort_lab::tasks::TaskKind;
use vort_lab::train::{self, RunConfig, RunDir, TrainError, CONFIG_FILE};

use crate::args::parse_count;
use crate::error::CliError;
use crate::output::{emit, emit_json};

/// Bad configs, unknown names, missing or mismatched checkpoints are exit status 2; the rest 1.
impl From<TrainError> for CliError {
    fn from(e: TrainError) -> Self {
        if e.is_bad_input() {
            CliError::Usage(e.to_string())
        } else {
            CliError::Io(e.to_string())
        }
    }
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// mqar (Zoology's multi-query associative recall: vocab_size, seq_len, num_kv_pairs,
    /// power_a, ... in the config's [task]), books (byte-level language modelling on the books
    /// of `vort data fetch books`), or the superseded sparse tasks zipf and label-copy.
    /// Default: the config's `[task] kind` (required without --config or --resume).
    #[arg(long, value_parser = parse_task)]
    task: Option<TaskKind>,
    /// The mixer: vort, power-law, exponential, retnet, mixture or softmax (a kind other than
    /// the config's takes that kind's defaults). Default: the config's `[model.mixer] kind`
    /// (required without --config or --resume). `--memory` is its old name.
    #[arg(long, alias = "memory", value_parser = parse_mixer)]
    mixer: Option<vort::MixerKind>,
    /// A TOML config (unknown fields are errors); --task and --mixer override its kinds.
    /// Without it the embedded defaults are used.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Seed of the data order and the initialisation (overrides the config's).
    #[arg(long, value_parser = parse_count)]
    seed: Option<u64>,
    /// Run directory (config.toml, metrics.jsonl, checkpoint.safetensors, eval.json).
    /// Default: `runs/<task>-<mixer>-s<seed>`.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the run in DIR from its last checkpoint, with the config saved there.
    #[arg(long)]
    resume: bool,
    /// Train on the sequences of FILE instead of generated ones: a safetensors file in
    /// Zoology's format (`inputs`, `labels` [N, L], I64 or I32, label -100 = not scored),
    /// e.g. the DataSegment of zoology/data/multiquery_ar.py. L must be the config's seq_len.
    #[arg(long, value_name = "FILE")]
    train_data: Option<PathBuf>,
    /// Validate and test on the sequences of FILE (same format) instead of generated ones.
    #[arg(long, value_name = "FILE")]
    test_data: Option<PathBuf>,
    /// Optimiser steps of the run (overrides the config's). With --resume: extend the run to
    /// N steps (N above its checkpoint's step); later steps follow the schedule of an N-step
    /// run from the start, so the learning rate jumps back up when a finished run is extended.
    #[arg(long, value_name = "N", value_parser = parse_count)]
    steps: Option<u64>,
    /// Refuse the run if its memory estimate exceeds BYTES (default: the machine's available
    /// memory). Accepts 8e9, 8_000_000_000.
    #[arg(long, value_name = "BYTES", value_parser = parse_count)]
    max_memory: Option<u64>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_task(s: &str) -> Result<TaskKind, String> {
    s.parse()
        .map_err(|e: vort_lab::tasks::TaskError| e.to_string())
}

fn parse_mixer(s: &str) -> Result<vort::MixerKind, String> {
    s.parse().map_err(|e: vort::VortError| e.to_string())
}

/// `--train-data` and `--test-data` into the MQAR task's file fields.
fn set_data_files(a: &TrainArgs, config: &mut RunConfig) -> Result<(), CliError> {
    if a.train_data.is_none() && a.test_data.is_none() {
        return Ok(());
    }
    let kind = config.task.kind();
    let Some(m) = config.task.mqar_mut() else {
        return Err(CliError::Usage(format!(
            "--train-data and --test-data read MQAR sequences in Zoology's format; the task is \
             {kind}"
        )));
    };
    for (flag, file, field) in [
        ("--train-data", &a.train_data, &mut m.train_data),
        ("--test-data", &a.test_data, &mut m.test_data),
    ] {
        if let Some(f) = file {
            *field = f
                .to_str()
                .ok_or_else(|| {
                    CliError::Usage(format!("{flag} {} is not valid UTF-8", f.display()))
                })?
                .to_string();
        }
    }
    Ok(())
}

pub fn run_train(a: TrainArgs) -> Result<(), CliError> {
    let mut config = match &a.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::default(),
    };
    // the embedded defaults name no experiment: a fresh run without a config says which
    if a.config.is_none() && !a.resume && (a.task.is_none() || a.mixer.is_none()) {
        return Err(CliError::Usage(
            "name the run: --task and --mixer (or a --config whose [task] kind and \
             [model.mixer] kind say them, or --resume)"
                .into(),
        ));
    }
    if let Some(task) = a.task {
        if config.task.kind() != task {
            config.task.spec = vort_lab::tasks::TaskSpec::of_kind(task);
        }
    }
    if let Some(kind) = a.mixer {
        if config.model.mixer.kind() != kind {
            config.model.mixer =
                vort::Mixer::of_kind(kind.name()).map_err(|e| CliError::Usage(e.to_string()))?;
        }
    }
    if let Some(seed) = a.seed {
        config.seed = seed;
    }
    // the flag's own domain, named as the flag (the config's check would blame the file)
    if a.steps == Some(0) {
        return Err(CliError::Usage("--steps must be >= 1".into()));
    }
    set_data_files(&a, &mut config)?;
    let dir = a.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(format!(
            "{}-{}-s{}",
            config.task.kind(),
            config.model.mixer,
            config.seed
        ))
    });
    if a.resume {
        let given: Vec<&str> = [
            ("--config", a.config.is_some()),
            ("--seed", a.seed.is_some()),
            ("--train-data", a.train_data.is_some()),
            ("--test-data", a.test_data.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, set)| set.then_some(flag))
        .collect();
        if !given.is_empty() {
            return Err(CliError::Usage(format!(
                "--resume continues with the config saved in the run directory; drop {}",
                given.join(", ")
            )));
        }
        let saved_path = RunDir::new(&dir).config_path();
        if !saved_path.is_file() {
            return Err(CliError::Usage(format!(
                "nothing to resume in {} (no {CONFIG_FILE})",
                dir.display()
            )));
        }
        // The saved config is the run's identity: the flags given must name the same run.
        let mut saved = RunConfig::load(&saved_path)?;
        let task = a.task.unwrap_or(saved.task.kind());
        let mixer = a.mixer.unwrap_or(saved.model.mixer.kind());
        if saved.task.kind() != task || saved.model.mixer.kind() != mixer {
            return Err(CliError::Usage(format!(
                "{} holds a {} / {} run, not {task} / {mixer}",
                dir.display(),
                saved.task.kind(),
                saved.model.mixer,
            )));
        }
        if let Some(steps) = a.steps {
            saved = train::extend_run(&dir, steps)?;
        }
        config = saved;
    } else if let Some(steps) = a.steps {
        config.train.steps = steps;
    }
    let opts = train::RunOptions {
        progress: true,
        print_config: true,
        max_memory: a.max_memory,
        ..train::RunOptions::default()
    };
    let summary = train::run_with(&config, &dir, a.resume, &opts)?;
    if a.json {
        return emit_json(&summary);
    }
    if summary.already_finished {
        let mut s = format!(
            "{} is already finished at step {} (nothing to resume)\n",
            dir.display(),
            summary.steps
        );
        if let Some(e) = &summary.eval {
            s += &eval_lines(e);
        }
        return emit(&s);
    }
    let mut s = format!(
        "{} steps in {:.1} s ({:.0} tokens/s), final loss {:.4}; run directory {}\n",
        summary.steps,
        summary.wall_s,
        summary.tokens_per_s,
        summary.final_loss,
        dir.display()
    );
    if let Some(e) = &summary.eval {
        s += &eval_lines(e);
    }
    emit(&s)
}

fn eval_lines(e: &vort_lab::eval::EvalResult) -> String {
    let mut s = format!(
        "eval {} / {} (seed {}, step {}): accuracy {:.1}% on {} sequences\n",
        e.task,
        e.mixer,
        e.seed,
        e.step,
        100.0 * e.accuracy,
        e.sequences
    );
    let books = e.task == TaskKind::Books;
    for b in &e.buckets {
        let (acc, bits) = if b.n > 0 {
            (
                format!("{:.1}%", 100.0 * b.correct as f64 / b.n as f64),
                format!("{:.3}", b.bits()),
            )
        } else {
            ("-".into(), "-".into())
        };
        s += &if books {
            format!(
                "  context {:<10} {bits:>6} bits/char, next-byte accuracy {acc:>6} ({} bytes)\n",
                b.label, b.n
            )
        } else {
            format!("  lags {:<12} {acc:>7} ({} answers)\n", b.label, b.n)
        };
    }
    if let Some(a) = &e.alpha {
        s += &format!(
            "  learned α: mean {:.3} on {}, {:.3} on the rest",
            a.mean_memorable,
            if books {
                "entity bytes"
            } else {
                "memorable tokens"
            },
            a.mean_other
        );
        if let Some(f) = a.mean_function {
            s += &format!(", {f:.3} on function-word bytes");
        }
        s.push('\n');
    }
    if let Some(h) = &e.horizon {
        let certified = h
            .certified
            .map_or("any number of".to_string(), |c| c.to_string());
        s += &if h.rebuilt {
            format!(
                "  memory certified to {certified} lags: the data's sequences ({}) are longer \
                 than the training length ({}), so the node tables were rebuilt for them (the \
                 weights were trained at {})\n",
                h.data_len, h.train_len, h.train_len
            )
        } else {
            format!(
                "  memory certified to {certified} lags (data length {}, training length {})\n",
                h.data_len, h.train_len
            )
        };
    }
    s
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A run directory written by `vort train`, or a weights file written by `vort export`.
    #[arg(long, value_name = "DIR|FILE")]
    run: PathBuf,
    /// Score the run's model on the sequences of FILE (a safetensors file in Zoology's
    /// format: `inputs`, `labels` [N, L], I64 or I32, -100 = not scored) instead of its own
    /// held-out set; nothing is written. JSON: accuracy over the labelled positions,
    /// `positions`, accuracy by lag where a query's pair is found, and `horizon`. Sequences
    /// longer than the training length are scored with the memory's node tables rebuilt and
    /// certified for their length (printed, and `horizon.rebuilt` in the JSON); the weights
    /// are the same, trained at the shorter length.
    #[arg(long, value_name = "FILE")]
    data: Option<PathBuf>,
    /// Books runs: stream every test book from its first byte (its first 2^20 bytes) twice,
    /// the state carried and the state reset every training window (the held-out score's
    /// windows), and give BPC by context bucket (0-512, 512-2K, ... 128K-1M bytes) on the same
    /// bytes, pooled over the books, and per book; nothing is written. The node tables are
    /// rebuilt and certified for the longest book where the run's are shorter (printed).
    #[arg(long, conflicts_with = "data")]
    whole_books: bool,
    /// Print the evaluation as JSON.
    #[arg(long)]
    json: bool,
}

/// Refuses (exit 2) a path that is neither a run directory nor a file of `vort export`
/// ([`RunDir::check_trained`]); `hint` ends the message (what to do instead).
pub fn check_trained_path(path: &Path, hint: &str) -> Result<(), CliError> {
    Ok(RunDir::check_trained(path, hint)?)
}

pub fn run_eval(a: EvalArgs) -> Result<(), CliError> {
    check_trained_path(&a.run, "train one with `vort train`")?;
    if a.whole_books {
        return crate::whole_books::run(&a.run, a.json);
    }
    let e = match &a.data {
        Some(f) => vort_lab::eval::run_on_file(&a.run, f)?,
        None => vort_lab::eval::run(&a.run)?,
    };
    if a.json {
        return emit_json(&e);
    }
    emit(&eval_lines(&e))
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// A run directory written by `vort train` (its checkpoint, or its released weights).
    #[arg(long, value_name = "DIR")]
    run: PathBuf,
    /// The file to write: the parameters only (`param/<name>`, f32), with the run config,
    /// the step, the format and a checksum in the safetensors metadata (docs/checkpoint.md).
    /// `vort eval --run FILE` and `vort generate --run FILE` take it in place of the run.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

pub fn run_export(a: ExportArgs) -> Result<(), CliError> {
    if !RunDir::new(&a.run).config_path().is_file() {
        return Err(CliError::Usage(format!(
            "{} is not a run directory (no {CONFIG_FILE}); train one with `vort train`",
            a.run.display()
        )));
    }
    let (n, step) = vort_lab::eval::export(&a.run, &a.out)?;
    let bytes = std::fs::metadata(&a.out).map_or(0, |m| m.len());
    emit(&format!(
        "wrote {} ({n} tensors, step {step}, {bytes} bytes)\n",
        a.out.display()
    ))
}

/// Which experiments `vort reproduce` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Experiments {
    /// Zoology's multi-query associative recall (MQAR): the softmax gate, Zoology's grid and
    /// the paper's lag claim, every mixer through one code path (presets:
    /// configs/recall/*.toml).
    Recall,
    /// The paper's Exp 2: entity label copy at uniform lags, on recall's runner (the softmax
    /// gate in each cell, swept learning rates, paired verdicts, α by role; presets:
    /// configs/exp2/*.toml, only --quick embedded until the pilots choose a setting).
    Exp2,
    /// RULER's offline tasks (niah_single_1, niah_multikey_2/3, vt, fwe), byte-level: trained
    /// on their mixture, RULER's string_match_all by task and length, past the trained length
    /// (presets: configs/ruler/*.toml; --quick and --medium).
    Ruler,
    /// Superseded: the sparse Zipf-lag retrieval and entity label copy tasks (docs/DESIGN.md
    /// §3, first two claims), where every model sat near chance.
    Synthetic,
    /// Byte-level language modelling on books (the PG-19 claim); needs
    /// `vort data fetch books` first.
    Books,
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// recall (default), exp2, ruler, books, or the superseded synthetic tasks.
    #[arg(value_enum, default_value = "recall")]
    what: Experiments,
    /// The default: the smallest settings. On 2 cores: recall about 21 minutes (measured
    /// 1,271 s of training), synthetic about 15 minutes; books: 8K-byte contexts.
    #[arg(long, conflicts_with_all = ["medium", "full"])]
    quick: bool,
    /// Wider models, more steps and seeds. Recall: many hours on 2 cores (run it in the
    /// background; --cell runs one cell; several processes on one --out share its runs, see
    /// the README); synthetic and books: about an hour.
    #[arg(long, conflicts_with = "full")]
    medium: bool,
    /// Paper-scale settings (many hours on 2 cores; meant for a GPU).
    #[arg(long)]
    full: bool,
    /// Output directory (report.md, plots, results.json, every run). Default:
    /// runs/<recall|synthetic|books>-<quick|medium|full> (the committed measurements under results/
    /// were written with --out results/...). Finished runs in DIR are reused.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Books directory written by `vort data fetch books` (books only).
    #[arg(long, value_name = "DIR", default_value = "data/books")]
    data: PathBuf,
    /// An experiment preset to run instead of the embedded one of the scale (the format of
    /// configs/<recall|books|synthetic>/quick.toml; books and synthetic run every (cell, mixer,
    /// seed) at the first learning rate, and a books preset streams the whole first test book).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Run just this cell of the preset (repeatable; names as in the preset's `[[cells]]`).
    /// The report then covers these cells only and says so; finished runs are shared with the
    /// whole preset, whose next run reuses them.
    #[arg(long = "cell", value_name = "NAME")]
    cells: Vec<String>,
    /// Train nothing; write the report of the runs finished in DIR, listing the ones still
    /// pending (recall: the (cell, mixer) pairs): a long preset's progress while it runs in the
    /// background, or the report of the merged `runs/` trees of --shard calls.
    #[arg(long, conflicts_with_all = ["fresh", "shard"])]
    report_only: bool,
    /// With --report-only: write the report even when DIR holds no finished run (refused
    /// otherwise: a mistyped merge path would "succeed" with an empty report).
    #[arg(long, requires = "report_only")]
    allow_empty: bool,
    /// Run only the I-th of N deterministic slices of the preset's runs (I is 1-based:
    /// 1 <= I <= N, as `$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT` with `--array=1-N`).
    /// Recall deals out (cell, mixer) pairs round-robin in the preset's order (pair k goes to
    /// shard k % N + 1, with its whole learning-rate sweep and seeds); books and synthetic deal
    /// out runs the same way. Shards share no lock and no file: each may run on its own machine
    /// into its own DIR. A sharded call writes no report; copy every shard's DIR/runs into one
    /// DIR and run the same command with --report-only instead of --shard.
    #[arg(long, value_name = "I/N")]
    shard: Option<reproduce::Shard>,
    /// Retrain every run: delete DIR/runs first instead of reusing finished runs and
    /// resuming interrupted ones.
    #[arg(long)]
    fresh: bool,
}

/// Whether `dir` or a directory below it holds an evaluation (`eval.json`).
fn holds_a_finished_run(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            holds_a_finished_run(&p)
        } else {
            p.file_name().is_some_and(|n| n == "eval.json")
        }
    })
}

impl ReproduceArgs {
    /// The scale the flags ask for (quick when none is given).
    fn scale(&self) -> Scale {
        if self.full {
            Scale::Full
        } else if self.medium {
            Scale::Medium
        } else {
            Scale::Quick
        }
    }
}

pub fn run_reproduce(a: ReproduceArgs) -> Result<(), CliError> {
    let scale = a.scale();
    let experiment: Box<dyn reproduce::Experiment> = match a.what {
        Experiments::Recall => Box::new(reproduce::Recall),
        Experiments::Exp2 => Box::new(reproduce::Exp2),
        Experiments::Ruler => Box::new(reproduce::Ruler),
        Experiments::Synthetic => Box::new(reproduce::Synthetic),
        Experiments::Books => Box::new(reproduce::Books {
            data_dir: a
                .data
                .to_str()
                .ok_or_else(|| {
                    CliError::Usage(format!("--data {} is not valid UTF-8", a.data.display()))
                })?
                .into(),
            // a preset of one's own streams the whole first test book
            stream_bytes: match a.config {
                Some(_) => usize::MAX,
                None => reproduce::books::stream_bytes(scale),
            },
        }),
    };
    let name = experiment.name();
    let mode = if a.report_only {
        reproduce::runner::Mode::report_only(true)
    } else {
        reproduce::runner::Mode::train(true)
    };
    let out = a
        .out
        .unwrap_or_else(|| Path::new("runs").join(format!("{name}-{}", scale.name())));
    if a.report_only && !a.allow_empty && !holds_a_finished_run(&out.join("runs")) {
        return Err(CliError::Usage(format!(
            "--report-only: {} holds no finished run (no runs/**/eval.json), so there is \
             nothing to report; check the path, or give --allow-empty",
            out.display()
        )));
    }
    // the preset is read (and every run config resolved) before anything is deleted
    let mut preset = match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Usage(format!("--config {}: {e}", path.display())))?;
            let preset = Preset::from_toml(&text, &path.display().to_string())?;
            // processes sharing --out: one started before an edit stops at its next run
            reproduce::runner::follow_preset_file(path, &preset);
            preset
        }
        None => Preset::embedded(name, scale.name())?,
    };
    if !a.cells.is_empty() {
        preset.only(&a.cells).map_err(CliError::Usage)?;
    }
    // a preset of another experiment would fail late, or train the wrong task
    let source = a.config.as_deref().unwrap_or(Path::new("preset")).display();
    experiment.check_preset(&preset, &source.to_string())?;
    if a.fresh {
        // with --cell, only those cells' runs (runs/<cell>) go
        let targets: Vec<PathBuf> = if a.cells.is_empty() {
            vec![out.join("runs")]
        } else {
            a.cells.iter().map(|c| out.join("runs").join(c)).collect()
        };
        for runs in targets.iter().filter(|d| d.is_dir()) {
            std::fs::remove_dir_all(runs).map_err(|e| {
                CliError::Io(format!("--fresh: cannot remove {}: {e}", runs.display()))
            })?;
            eprintln!("--fresh: removed {}", runs.display());
        }
    }
    if let Some(shard) = a.shard {
        return emit(&(experiment.shard(&preset, &out, shard)? + "\n"));
    }
    let n = experiment.run(&preset, &out, mode)?;
    emit(&format!(
        "{n} runs; report written to {}\n",
        out.join("report.md").display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReproduceArgs,
    }

    /// Each flag selects its own preset (a regression: --medium once ran the quick preset).
    #[test]
    fn scale_flags_select_their_presets() {
        let scale = |flags: &[&str]| {
            let mut argv = vec!["reproduce"];
            argv.extend_from_slice(flags);
            Cli::try_parse_from(argv).unwrap().args.scale()
        };
        assert_eq!(scale(&[]), Scale::Quick);
        assert_eq!(scale(&["--quick"]), Scale::Quick);
        assert_eq!(scale(&["--medium"]), Scale::Medium);
        assert_eq!(scale(&["--full"]), Scale::Full);
        assert_eq!(scale(&["books", "--medium"]), Scale::Medium);
        assert!(Cli::try_parse_from(["reproduce", "--medium", "--full"]).is_err());
    }
}
