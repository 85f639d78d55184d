//! The router's inputs (`reproduce::router`): the arithmetic of precision, recall, Pearson's r
//! and the separation verdict on hand-made numbers; then tiny MQAR models trained for a few
//! steps, whose α by role and router inputs are measured from their weights, finite, equal
//! to their evaluation's α means, cached in `router.json` and reused; and the recall report
//! listing every routed run, measured or "no weights".

use std::path::PathBuf;

use vort::Routing;
use vort_lab::reproduce::recall::{self, Preset};
use vort_lab::reproduce::router::{
    self, diagnose, gaps, separated, separation, Diagnosis, Pearson, ProbeCounts, RoleStats,
    RouterInputs, BINS,
};
use vort_lab::train::{self, RunConfig, RunDir, RunOptions};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-router-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn pearson_precision_and_recall_by_hand() {
    // x = 1..5, y = 2 1 4 3 5: Σdx·dy = 8, Σdx² = Σdy² = 10, so r = 0.8
    let mut p = Pearson::default();
    for (x, y) in [(1.0, 2.0), (2.0, 1.0), (3.0, 4.0), (4.0, 3.0), (5.0, 5.0)] {
        p.add(x, y);
    }
    assert_eq!(p.n(), 5);
    assert!((p.r().unwrap() - 0.8).abs() < 1e-12, "{:?}", p.r());
    // exact lines, shifted far from 0 (the one-pass update stays exact)
    let (mut up, mut down) = (Pearson::default(), Pearson::default());
    for i in 0..1000 {
        let x = 1e6 + f64::from(i) * 1e-3;
        up.add(x, 3.0 * x - 2.0);
        down.add(x, -0.5 * x);
    }
    assert!((up.r().unwrap() - 1.0).abs() < 1e-9);
    assert!((down.r().unwrap() + 1.0).abs() < 1e-9);
    // undefined, not 0: a constant variable, or fewer than two pairs
    let mut flat = Pearson::default();
    for x in [0.1, 0.5, 0.9] {
        flat.add(x, 0.35);
    }
    assert_eq!(flat.r(), None);
    let mut one = Pearson::default();
    one.add(1.0, 2.0);
    assert_eq!(one.r(), None);

    // ten tokens, four memorable; the probe calls five entity, three of them memorable
    let called = [
        true, true, true, false, true, true, false, false, false, false,
    ];
    let memorable = [
        true, true, true, true, false, false, false, false, false, false,
    ];
    let mut c = ProbeCounts::default();
    for (&k, &m) in called.iter().zip(&memorable) {
        c.add(k, m);
    }
    assert_eq!((c.tp, c.fp, c.fn_, c.tn), (3, 2, 1, 4));
    assert_eq!(c.precision(), Some(0.6));
    assert_eq!(c.recall(), Some(0.75));
    let both = c.plus(c);
    assert_eq!((both.tp, both.fp, both.fn_, both.tn), (6, 4, 2, 8));
    assert_eq!(both.precision(), Some(0.6));
    assert_eq!(ProbeCounts::default().precision(), None);
    assert_eq!(ProbeCounts::default().recall(), None);
    // the counts are named as in the JSON cache
    let json = serde_json::to_string(&c).unwrap();
    assert_eq!(json, r#"{"tp":3,"fp":2,"fn":1,"tn":4}"#);
}

fn role(name: &str, memorable: bool, alpha: f64, called: f64, h: f64) -> RoleStats {
    RoleStats {
        role: name.into(),
        memorable,
        tokens: 100,
        alpha,
        probe_called: Some(called),
        probe_mean: Some(called),
        entropy: Some(h),
        hist: Vec::new(),
    }
}

fn inputs(routing: Routing, roles: Vec<RoleStats>, r_probe: f64, r_entropy: f64) -> RouterInputs {
    RouterInputs {
        format: router::FORMAT,
        step: 1,
        sequences: 1,
        routing,
        uses_probe: routing.uses_probe(),
        uses_entropy: routing.uses_entropy(),
        roles,
        probe: Some(ProbeCounts {
            tp: 10,
            fp: 40,
            fn_: 10,
            tn: 40,
        }),
        r_alpha_probe: Some(r_probe),
        r_alpha_entropy: Some(r_entropy),
        blocks: Vec::new(),
    }
}

#[test]
fn separation_names_the_input_that_failed() {
    // the gap of each memorable role is to the highest of the rest
    let means = vec![
        ("key".to_string(), true, 0.49),
        ("value".to_string(), true, 0.94),
        ("query".to_string(), false, 0.48),
        ("filler".to_string(), false, 0.52),
    ];
    let g = gaps(&means);
    assert_eq!(g.len(), 2);
    assert_eq!(
        (g[0].role.as_str(), g[0].against.as_str()),
        ("key", "filler")
    );
    assert!((g[0].gap + 0.03).abs() < 1e-12 && (g[1].gap - 0.42).abs() < 1e-12);
    assert!(!separated(&g));
    assert!(separated(&gaps(&means[1..])));
    assert!(!separated(&[]), "no gap is no separation");

    // the probe does not find the keys (20% called, 50% of the filler)
    let roles = || {
        vec![
            role("key", true, 0.49, 0.2, 0.9),
            role("value", true, 0.94, 0.9, 0.5),
            role("query", false, 0.48, 0.2, 0.9),
            role("filler", false, 0.52, 0.5, 0.91),
        ]
    };
    let s = separation(&inputs(Routing::EntityOnly, roles(), 0.8, 0.0));
    assert!(!s.separated);
    assert_eq!(s.failures.len(), 1, "{:?}", s.failures);
    assert!(
        s.failures[0].starts_with("key: the probe does not find the key tokens: it calls 20.0%"),
        "{:?}",
        s.failures
    );
    // it finds them, but calls the filler entity as often
    let mut r = roles();
    r[0].probe_called = Some(0.55);
    let s = separation(&inputs(Routing::EntityOnly, r.clone(), 0.8, 0.0));
    assert!(
        s.failures[0].contains("as often (50.0%)"),
        "{:?}",
        s.failures
    );
    // it tells them apart, but α does not follow it
    r[3].probe_called = Some(0.1);
    let s = separation(&inputs(Routing::EntityOnly, r.clone(), 0.05, 0.0));
    assert!(
        s.failures[0].contains("α does not follow it"),
        "{:?}",
        s.failures
    );
    // both inputs: the entropy is the same on keys and filler (0.90 against 0.91)
    let s = separation(&inputs(Routing::Full, r.clone(), 0.8, 0.6));
    assert!(
        s.failures[0].contains("the probe passes"),
        "{:?}",
        s.failures
    );
    assert!(
        s.failures[0].contains("the entropy does not differ by role"),
        "{:?}",
        s.failures
    );
    // the entropy differs, but α does not follow it
    r[0].entropy = Some(0.3);
    let s = separation(&inputs(Routing::EntropyOnly, r.clone(), 0.8, 0.1));
    assert!(
        s.failures[0].contains("H differs by role"),
        "{:?}",
        s.failures
    );
    assert!(
        !s.failures[0].contains("probe"),
        "entropy-only reads no probe"
    );
    // every input passes: the rest of the router is named
    let s = separation(&inputs(Routing::Full, r.clone(), 0.8, -0.6));
    assert!(s.failures[0].contains("g·h + c"), "{:?}", s.failures);
    // one order per head cannot separate tokens
    let mut d = inputs(Routing::Learned, r, 0.0, 0.0);
    d.uses_probe = false;
    d.uses_entropy = false;
    let s = separation(&d);
    assert!(
        s.failures[0].contains("cannot tell roles apart"),
        "{:?}",
        s.failures
    );
    // separated: no failure
    let ok = vec![
        role("key", true, 0.8, 0.9, 0.5),
        role("value", true, 0.8, 0.9, 0.5),
        role("filler", false, 0.35, 0.1, 0.9),
    ];
    let s = separation(&inputs(Routing::Full, ok, 0.9, -0.9));
    assert!(s.separated && s.failures.is_empty(), "{s:?}");
}

/// A tiny MQAR run (L = 24, K = 2, two blocks of two heads) with `routing`, trained `steps`.
fn tiny_run(name: &str, routing: &str, steps: u64) -> (RunDir, RunConfig) {
    let text = format!(
        r#"
seed = 0
[task]
kind = "mqar"
seq_len = 24
vocab_size = 40
num_kv_pairs = 2
power_a = 1.0
random_non_queries = false
train_examples = 0
test_examples = 12
[model]
d_model = 16
layers = 2
heads = 2
head_dim = 8
features = 8
mlp_mult = 0
chunk = 8
token_shift = false
short_conv = 3
[model.mixer]
kind = "vort"
routing = {routing}
[train]
steps = {steps}
batch_size = 8
lr = 1e-2
warmup_steps = 0
checkpoint_every = 1000
log_every = 5
entity_aux_weight = 0.1
"#
    );
    let c = RunConfig::from_toml(&text, name).unwrap();
    let dir = tmp(name);
    train::run_with(&c, &dir, false, &RunOptions::default()).unwrap();
    (RunDir::new(&dir), c)
}

fn measured(d: Diagnosis) -> RouterInputs {
    match d {
        Diagnosis::Measured(d) => *d,
        Diagnosis::Unavailable(why) => panic!("not measured: {why}"),
    }
}

#[test]
fn a_tiny_routed_run_has_finite_cached_router_inputs() {
    let (dir, _) = tiny_run("full", r#""full""#, 12);
    let ev = dir.eval().unwrap();
    let d = measured(diagnose(&dir, false).unwrap());
    let (seqs, t, heads, blocks) = (12u64, 24u64, 2u64, 2u64);
    assert_eq!((d.step, d.sequences), (12, 12));
    assert!(d.uses_probe && d.uses_entropy);
    let names: Vec<&str> = d.roles.iter().map(|r| r.role.as_str()).collect();
    assert_eq!(names, ["key", "value", "query", "filler"]);
    // every token has one role; every α value (block, head, token) one bin
    assert_eq!(d.roles.iter().map(|r| r.tokens).sum::<u64>(), seqs * t);
    assert_eq!(d.role("key").unwrap().tokens, seqs * 2);
    assert_eq!(d.role("query").unwrap().tokens, seqs * 2, "K = 2 queries");
    for r in &d.roles {
        assert_eq!(r.hist.len(), BINS);
        assert_eq!(r.hist.iter().sum::<u64>(), r.tokens * heads * blocks);
        assert!((0.1..=1.0).contains(&r.alpha), "{}: α {}", r.role, r.alpha);
        assert!(r.probe_called.unwrap().is_finite() && r.entropy.unwrap().is_finite());
        assert!(
            (0.0..=1.0).contains(&r.entropy.unwrap()),
            "H in units of ln V"
        );
    }
    // the α means by role are the evaluation's (the same forward over the same sequences)
    for (name, m) in &ev.alpha.as_ref().unwrap().mean_by_role {
        let x = d.role(name).unwrap().alpha;
        assert!((x - m).abs() < 1e-12, "{name}: {x} against eval.json's {m}");
    }
    // the probe's counts cover every (block, token); r in [-1, 1]; the weights a and b
    let p = d.probe.unwrap();
    assert_eq!(p.tp + p.fp + p.fn_ + p.tn, seqs * t * blocks);
    assert_eq!(
        p.tp + p.fn_,
        seqs * 4 * blocks,
        "K = 2 pairs: 4 memorable tokens"
    );
    assert_eq!(d.blocks.len(), 2);
    for b in &d.blocks {
        let bp = b.probe.unwrap();
        assert_eq!(bp.tp + bp.fp + bp.fn_ + bp.tn, seqs * t);
        assert_eq!(b.a.as_ref().unwrap().len(), 2);
        assert_eq!(b.b.as_ref().unwrap().len(), 2);
        assert!(b.a.iter().chain(&b.b).flatten().all(|x| x.is_finite()));
        assert_eq!(b.alpha_by_head.len(), 2);
        for r in [b.r_alpha_probe, b.r_alpha_entropy] {
            assert!(r.is_some_and(|r| (-1.0..=1.0).contains(&r)), "{r:?}");
        }
    }
    for r in [d.r_alpha_probe, d.r_alpha_entropy] {
        assert!(r.is_some_and(|r| (-1.0..=1.0).contains(&r)), "{r:?}");
    }
    // cached: the second call reads the file (the weights are gone, the answer is the same)
    let cache = dir.router_path();
    let bytes = std::fs::read(&cache).unwrap();
    std::fs::remove_file(dir.checkpoint_path()).unwrap();
    let again = measured(diagnose(&dir, false).unwrap());
    assert_eq!(again, d);
    assert_eq!(
        std::fs::read(&cache).unwrap(),
        bytes,
        "the cache is not rewritten"
    );
    // a cache of another evaluation is not used, and without weights the run says so
    let mut stale: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    stale["step"] = serde_json::json!(11);
    std::fs::write(&cache, serde_json::to_vec(&stale).unwrap()).unwrap();
    assert_eq!(
        diagnose(&dir, false).unwrap(),
        Diagnosis::Unavailable("no weights".into())
    );
    let _ = std::fs::remove_dir_all(dir.path());
}

#[test]
fn oracle_and_learned_orders_by_role() {
    // the oracle: 0.8 on keys and values, 0.35 elsewhere, whatever the weights
    let (dir, _) = tiny_run("oracle", "{ oracle = { entity = 0.8, other = 0.35 } }", 2);
    let d = measured(diagnose(&dir, false).unwrap());
    assert!(!d.uses_probe && !d.uses_entropy && d.probe.is_none());
    assert_eq!(d.r_alpha_probe, None);
    for r in &d.roles {
        let want = if r.memorable { 0.8 } else { 0.35 };
        assert!((r.alpha - want).abs() < 1e-6, "{}: {}", r.role, r.alpha);
        // one bin holds every value
        assert_eq!(r.hist.iter().filter(|&&k| k > 0).count(), 1);
    }
    let s = separation(&d);
    assert!(s.separated && s.failures.is_empty(), "{s:?}");
    let _ = std::fs::remove_dir_all(dir.path());
    // one learned order per head: every role gets each head's order
    let (dir, _) = tiny_run("learned", r#""learned""#, 4);
    let d = measured(diagnose(&dir, false).unwrap());
    assert!(!d.uses_probe && !d.uses_entropy);
    for b in &d.blocks {
        for r in &b.roles {
            let heads = b.alpha_by_head.iter().sum::<f64>() / 2.0;
            assert!((r.alpha - heads).abs() < 1e-6, "{}: {}", r.role, r.alpha);
        }
    }
    let s = separation(&d);
    assert!(!s.separated);
    assert!(s
        .failures
        .iter()
        .all(|f| f.contains("cannot tell roles apart")));
    let _ = std::fs::remove_dir_all(dir.path());
}

const PRESET: &str = r#"
name = "tiny-router"
description = "A tiny routed preset for the tests."
seeds = [0, 1]
lrs = [1e-2]
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
test_examples = 8
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
steps = 4
batch_size = 8
warmup_steps = 0
checkpoint_every = 1000
log_every = 2
entity_aux_weight = 0.0

[[mixers]]
name = "vort"
model = { mixer = { kind = "vort", routing = "entity-only" } }
[[mixers]]
name = "fixed"
model = { mixer = { kind = "vort", routing = { fixed = { alpha = 0.5 } } } }

[[cells]]
name = "lags"
section = "lags"
release_weights = true
"#;

/// The recall report lists every routed run (not the fixed order): the seed that kept its
/// weights with its router's inputs, the one that did not as "no weights".
#[test]
fn the_recall_report_lists_every_routed_run() {
    let out = tmp("recall");
    let preset = Preset::from_toml(PRESET, "tiny-router").unwrap();
    recall::run(&preset, &out, false, true).unwrap();
    let seed = |k: u64| RunDir::new(out.join(format!("runs/lags/vort/lr1.0e-2/seed{k}")));
    assert!(seed(0).router_path().is_file() && seed(1).router_path().is_file());
    assert!(!out
        .join("runs/lags/fixed/lr1.0e-2/seed0/router.json")
        .exists());
    // as committed: seed 0 keeps its released weights, seed 1 nothing
    for k in [0, 1] {
        std::fs::remove_file(seed(k).checkpoint_path()).unwrap();
    }
    std::fs::remove_file(seed(1).router_path()).unwrap();
    recall::run(&preset, &out, false, false).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Orders α by role"), "{md}");
    assert!(
        md.contains("| lags | vort | entity-only | 0 |")
            && md.contains("| lags | vort | entity-only | 1 |"),
        "{md}"
    );
    assert!(
        !md.contains("| lags | fixed | fixed 0.50 |") && !md.contains("lags fixed s0"),
        "a fixed order is not routed: {md}"
    );
    assert!(
        md.contains("measured (`router.json`)") && md.contains("| no weights |"),
        "{md}"
    );
    assert!(md.contains("`lags vort s1` (no weights)"), "{md}");
    assert!(md.contains("| lags vort s0 | 0 |"), "the block table: {md}");
    assert!(md.contains("- lags vort s0 (entity-only): key "), "{md}");
    assert!(out.join("alpha_by_role.png").is_file());
    let _ = std::fs::remove_dir_all(&out);
}
