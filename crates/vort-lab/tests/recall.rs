//! `reproduce recall` end to end on a tiny preset: every run trains through the one training
//! path, the report and plots are written, the gate verdict is stated, the learning rate is
//! chosen on validation, and a second call reuses every finished run.

use vort_lab::reproduce::recall::{self, Preset, Section};

const PRESET: &str = r#"
name = "tiny"
description = "A tiny preset for the tests."
seeds = [0, 1]
lrs = [1e-3, 1e-2]
gate_accuracy = 0.9
learned_accuracy = 0.5

[base]
seed = 0
[base.task]
kind = "mqar"
seq_len = 24
vocab_size = 40
num_kv_pairs = 2
power_a = 1.0
random_non_queries = false
train_examples = 0
test_examples = 32
[base.model]
d_model = 16
layers = 2
heads = 2
head_dim = 8
features = 8
mlp_mult = 0
chunk = 8
token_shift = false
short_conv = 3
[base.train]
steps = 40
batch_size = 16
warmup_steps = 0
min_lr_ratio = 0.0
decay_matrices_only = true
weight_decay = 0.1
checkpoint_every = 1000
log_every = 10
eval_every = 20
val_sequences = 32
entity_aux_weight = 0.0

[[mixers]]
name = "softmax"
role = "gate"
model = { memory = "softmax", qk_scale_init = 4.0 }
[[mixers]]
name = "retnet"
model = { memory = "retnet" }
lrs = [1e-2, 1e30]

[[cells]]
name = "gate"
section = "gate"

[[cells]]
name = "long"
section = "lags"
task = { seq_len = 48 }
mixers = ["retnet"]
seeds = [0]
extrapolate = [96]
extrapolate_examples = 4
release_weights = true
"#;

#[test]
fn tiny_recall_reproduction_runs_reports_and_reuses() {
    let out = std::env::temp_dir().join(format!("vort-recall-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let preset = Preset::from_toml(PRESET, "tiny").unwrap();
    // --report-only before anything ran: no cell, every (cell, mixer) pending, nothing trained
    let early = recall::run(&preset, &out, false, false).unwrap();
    assert!(early.cells.is_empty());
    assert_eq!(early.pending.len(), 3, "{:?}", early.pending);
    assert!(early.pending[0].starts_with("gate / softmax (lr 1.0e-3 seed 0)"));
    assert!(!out
        .join("runs/gate/softmax")
        .join("lr1.0e-3/seed0/checkpoint.safetensors")
        .exists());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**Partial report**"), "{md}");
    let rep = recall::run(&preset, &out, false, true).unwrap();
    // gate: softmax (2 lrs + 1 more seed) and retnet (1 lr + 1 seed); long: retnet (1)
    assert_eq!(rep.cells.len(), 3);
    let soft = &rep.cells[0];
    assert_eq!(
        (soft.mixer.as_str(), soft.section),
        ("softmax", Section::Gate)
    );
    assert_eq!(soft.sweep.len(), 2);
    assert_eq!(soft.seeds.len(), 2);
    let best = soft
        .sweep
        .iter()
        .map(|r| r.val_accuracy)
        .fold(f64::NEG_INFINITY, f64::max);
    let chosen = soft.sweep.iter().find(|r| r.lr == soft.best_lr).unwrap();
    assert_eq!(
        chosen.val_accuracy, best,
        "the best validation accuracy is kept"
    );
    assert_eq!(soft.seeds[0].seed, 0);
    assert_eq!(soft.seeds[1].seed, 1);
    for r in soft.seeds.iter().chain(&soft.sweep) {
        assert_eq!(r.answers, 32 * 2, "every test answer is scored");
        assert!(r.accuracy.is_finite());
    }
    assert!(rep.gate_passed.is_some());
    // a learning rate that diverges is a result of the sweep, not the end of the experiment
    let ret = &rep.cells[1];
    assert_eq!(ret.sweep.len(), 2);
    assert!(ret.sweep[1].diverged_at.is_some(), "lr 1e30 diverges");
    assert_eq!(ret.best_lr, 1e-2, "a diverged rate is never chosen");
    let long = &rep.cells[2];
    assert_eq!(long.seeds[0].extrapolation.len(), 1);
    assert_eq!(long.seeds[0].extrapolation[0].seq_len, 96);
    assert_eq!(long.seeds[0].extrapolation[0].answers, 4 * 2);
    assert!(long.state_floats > 0 && soft.state_floats == 2 * 2 * 2 * 24 * 8);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("Gate: passed") || md.contains("Gate: FAILED"),
        "{md}"
    );
    assert!(md.contains("Length extrapolation"));
    assert!(md.contains("Wilson"));
    for f in [
        "results.json",
        "acc_vs_width.png",
        "acc_vs_state.png",
        "lr_sweep.png",
        "acc_by_lag.png",
        "extrapolation.png",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let w = out
        .join("runs/long/retnet")
        .join(format!("lr{:.1e}", long.best_lr))
        .join("seed0/weights.safetensors");
    assert!(w.is_file(), "{} missing", w.display());
    // a finished run copied from another machine keeps no checkpoint: with its released
    // weights gone too, the report still reads it (its weights are named lost on stderr)
    let kept_weights = std::fs::read(&w).unwrap();
    let ckpt = w.with_file_name("checkpoint.safetensors");
    let kept_ckpt = std::fs::read(&ckpt).unwrap();
    std::fs::remove_file(&w).unwrap();
    std::fs::remove_file(&ckpt).unwrap();
    let copied = recall::run(&preset, &out, false, false).unwrap();
    assert!(copied.pending.is_empty());
    assert_eq!(copied.cells[2].seeds[0].correct, long.seeds[0].correct);
    assert!(!w.exists(), "nothing to release from");
    std::fs::write(&w, kept_weights).unwrap();
    std::fs::write(&ckpt, kept_ckpt).unwrap();
    // a second call trains nothing and reports the same numbers
    let again = recall::run(&preset, &out, false, true).unwrap();
    assert_eq!(again.reused, 8, "the diverged runs are reused too");
    assert!(again.pending.is_empty());
    for (a, b) in rep.cells.iter().zip(&again.cells) {
        assert_eq!(a.best_lr, b.best_lr);
        let acc =
            |c: &recall::CellResult| -> Vec<usize> { c.seeds.iter().map(|r| r.correct).collect() };
        assert_eq!(acc(a), acc(b));
    }
    // a cached extrapolation is not reused for another number of scored sequences
    let mut more = preset.clone();
    more.cells[1].extrapolate_examples = 6;
    let rescored = recall::run(&more, &out, false, false).unwrap();
    assert_eq!(rescored.cells[2].seeds[0].extrapolation[0].answers, 6 * 2);
    assert_eq!(rescored.cells[2].seeds[0].extrapolation[0].examples, 6);
    // a cell whose early stop changes to a threshold its run never reached keeps the run (and
    // its extrapolation): the run is the one the new config trains, and nothing is trained
    let mut stricter = more.clone();
    stricter.cells[1]
        .train
        .insert("early_stop_accuracy".into(), toml::Value::Float(1.0));
    assert!(long.seeds[0].val_accuracy < 1.0);
    let kept = recall::run(&stricter, &out, false, true).unwrap();
    // all but the diverged lr-1e30 run of that cell, which has no checkpoint to adopt: it
    // trains again, to the same divergence
    assert_eq!(kept.reused, 7);
    assert_eq!(
        kept.cells[2]
            .sweep
            .iter()
            .map(|r| r.diverged_at.is_some())
            .collect::<Vec<_>>(),
        rep.cells[2]
            .sweep
            .iter()
            .map(|r| r.diverged_at.is_some())
            .collect::<Vec<_>>()
    );
    assert_eq!(kept.cells[2].seeds[0].correct, long.seeds[0].correct);
    assert_eq!(kept.cells[2].seeds[0].extrapolation[0].answers, 6 * 2);
    let saved = std::fs::read_to_string(w.parent().unwrap().join("config.toml")).unwrap();
    assert!(saved.contains("early_stop_accuracy = 1.0"), "{saved}");
    // one unfinished run: --report-only reports the rest and names the pair it leaves out
    std::fs::remove_file(w.parent().unwrap().join("eval.json")).unwrap();
    let partial = recall::run(&stricter, &out, false, false).unwrap();
    assert_eq!(partial.cells.len(), 2);
    assert_eq!(partial.pending.len(), 1);
    assert!(
        partial.pending[0].starts_with("long / retnet"),
        "{:?}",
        partial.pending
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `--cell` narrows a preset to the named cells and marks its report as partial; an unknown
/// name is refused with the list of cells.
#[test]
fn a_preset_narrows_to_named_cells() {
    let mut p = Preset::from_toml(PRESET, "tiny").unwrap();
    let e = p.only(&["nope".into()]).unwrap_err();
    assert!(e.contains("\"nope\"") && e.contains("gate, long"), "{e}");
    assert_eq!(p.cells.len(), 2, "nothing changes on error");
    p.only(&["long".into()]).unwrap();
    let names: Vec<&str> = p.cells.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["long"]);
    assert!(
        p.description.starts_with("**Partial run** (`--cell long`)"),
        "{}",
        p.description
    );
    // a cell's own mixer list also sets the order its runs go in
    p.cells[0].mixers = vec!["retnet".into(), "softmax".into()];
    let order: Vec<&str> = p.mixers_of(&p.cells[0]).map(|m| m.name.as_str()).collect();
    assert_eq!(order, ["retnet", "softmax"]);
    p.cells[0].mixers.clear();
    let order: Vec<&str> = p.mixers_of(&p.cells[0]).map(|m| m.name.as_str()).collect();
    assert_eq!(order, ["softmax", "retnet"]);
}

/// Two processes may share a preset: a run whose directory another holds locked is skipped,
/// the others are trained meanwhile, and the call waits for it and reports everything. Here
/// the test holds the lock of the first rate's run until the second rate's run is done.
#[test]
fn a_run_in_use_elsewhere_is_waited_for() {
    let out = std::env::temp_dir().join(format!("vort-recall-busy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut preset = Preset::from_toml(PRESET, "tiny").unwrap();
    preset.only(&["long".into()]).unwrap();
    let held = out.join("runs/long/retnet/lr1.0e-2/seed0");
    std::fs::create_dir_all(&held).unwrap();
    let lock = vort_lab::train::RunLock::acquire(&held).unwrap();
    let t0 = std::time::Instant::now();
    let worker = {
        let (preset, out) = (preset.clone(), out.clone());
        std::thread::spawn(move || recall::run(&preset, &out, false, true))
    };
    // meanwhile the other rate is trained (it diverges: lr 1e30)
    let other = out.join("runs/long/retnet/lr1.0e30/seed0/diverged.json");
    while !other.is_file() {
        assert!(
            t0.elapsed().as_secs() < 120,
            "the free run is trained while the other waits"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert!(
        !held.join("eval.json").exists(),
        "a locked run is not trained"
    );
    drop(lock);
    let rep = worker.join().unwrap().unwrap();
    assert!(rep.pending.is_empty(), "{:?}", rep.pending);
    assert_eq!(rep.cells.len(), 1);
    assert_eq!(rep.cells[0].best_lr, 1e-2);
    assert!(held.join("eval.json").is_file());
    let _ = std::fs::remove_dir_all(&out);
}

/// `reproduce exp2` on the recall runner: a tiny entity label copy preset trains through the
/// same path, and its report speaks of label copy: the paper's Exp 2 numbers (82.7 / 58.4),
/// the per-cell softmax gate, and α by label-copy role (entity, label, query, filler) measured
/// by the evaluation.
#[test]
fn tiny_exp2_runs_on_the_recall_runner_and_reports_label_copy() {
    let text = r#"
name = "tiny-exp2"
description = "A tiny entity label copy preset for the tests."
seeds = [0]
lrs = [1e-2]
gate_accuracy = 0.9
learned_accuracy = 0.5

[base]
seed = 0
[base.task]
kind = "label-copy"
seq_len = 64
max_lag = 60
queries = 4
n_filler = 8
n_keys = 8
n_values = 4
[base.model]
d_model = 16
layers = 1
heads = 2
head_dim = 8
features = 8
mlp_mult = 0
chunk = 16
token_shift = false
short_conv = 3
[base.train]
steps = 6
batch_size = 4
warmup_steps = 0
checkpoint_every = 1000
log_every = 10
eval_every = 1000
eval_sequences = 8
val_sequences = 8
entity_aux_weight = 0.1

[[mixers]]
name = "softmax"
role = "gate"
model = { mixer = { kind = "softmax" } }
[[mixers]]
name = "vort"
role = "claim"
model = { mixer = { kind = "vort", routing = "entity-only" } }
[[mixers]]
name = "exponential"
role = "baseline"
model = { mixer = { kind = "exponential" } }

[[cells]]
name = "T64"
section = "lags"
extrapolate = [512]
extrapolate_examples = 2
"#;
    let out = std::env::temp_dir().join(format!("vort-exp2-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let preset = Preset::from_toml(text, "tiny-exp2").unwrap();
    assert_eq!(preset.task_kind(), vort_lab::tasks::TaskKind::LabelCopy);
    let rep = recall::run(&preset, &out, false, true).unwrap();
    assert_eq!(rep.cells.len(), 3);
    for c in &rep.cells {
        assert_eq!(
            c.task.kind(),
            vort_lab::tasks::TaskKind::LabelCopy,
            "{}",
            c.mixer
        );
        // every placed query is scored: at most 4 per sequence, 8 sequences
        let r = &c.seeds[0];
        assert!(
            r.answers > 0 && r.answers <= 8 * 4,
            "{}: {}",
            c.mixer,
            r.answers
        );
        // the extrapolation keeps the lags uniform over the longer sequence
        let x = &r.extrapolation[0];
        assert_eq!(x.seq_len, 512);
        let far: usize = x.buckets.iter().skip(1).map(|b| b.n).sum();
        assert!(x.answers > 0 && far > 0, "{}: {:?}", c.mixer, x.buckets);
    }
    let vort = rep.cells.iter().find(|c| c.mixer == "vort").unwrap();
    let roles: Vec<&str> = vort.seeds[0]
        .alpha
        .as_ref()
        .unwrap()
        .mean_by_role
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(roles, ["entity", "label", "query", "filler"]);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("# Exp 2: entity label copy at uniform lags (tiny-exp2)"));
    assert!(md.contains("`vort reproduce exp2 --config <the tiny-exp2 preset>`"));
    assert!(md.contains("| 82.7 |") && md.contains("| 58.4 |"), "{md}");
    assert!(
        md.contains("| entity | label | query | filler | entity, label |"),
        "{md}"
    );
    assert!(
        md.contains("entities ≈ 0.80, function tokens ≈ 0.35"),
        "{md}"
    );
    // the gate of Exp 2 is softmax at the longest lags: there are none at T = 64
    assert!(
        md.contains("inconclusive: the cell has no answers at lags > 1000"),
        "{md}"
    );
    assert!(!md.contains("MQAR"), "{md}");
    let _ = std::fs::remove_dir_all(&out);
}
