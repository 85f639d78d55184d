//! A fuzz suite that runs in CI (about a minute): every file the tool reads is mutated from a
//! committed or freshly made valid seed (bit flips, byte overwrites, insertions, deletions,
//! truncation) and fed to the binary. A panic, an exit status outside {0, 1, 2}, or a
//! non-finite output written with status 0 fails it.
//!
//! Targets: the safetensors input of `vort retention` (seed: tests/data/retention_pair), a
//! checkpoint (`vort eval --run`), Zoology-format data files (`vort eval --data`), a run
//! config (`vort train --config`, with the step count pinned small after parsing is known to
//! succeed), metrics.jsonl (`vort train --resume` of a finished run), and the config carried
//! by an export or a checkpoint, saved with a recomputed checksum (`vort eval --run`), with
//! huge dimensions refused fast.
//!
//! Cases per target: `VORT_FUZZ_CASES` (default 200). The long mode is the same test with a
//! large count: `VORT_FUZZ_CASES=5000 cargo test --release -p vort-cli --test fuzz`.

use std::path::{Path, PathBuf};
use std::process::Output;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

mod common;
use common::{vort, zoology_file};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn cases() -> u32 {
    std::env::var("VORT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Edit::Flip(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(p, v)| Edit::Insert(p, v)),
        (any::<usize>(), 1usize..64).prop_map(|(p, n)| Edit::Delete(p, n)),
        any::<usize>().prop_map(Edit::Truncate),
    ];
    proptest::collection::vec(edit, 1..6)
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        let n = b.len().max(1);
        match e {
            Edit::Flip(p, bit) => {
                if !b.is_empty() {
                    b[p % n] ^= 1 << bit;
                }
            }
            Edit::Set(p, v) => {
                if !b.is_empty() {
                    b[p % n] = *v;
                }
            }
            Edit::Insert(p, v) => {
                let at = p % (b.len() + 1);
                b.splice(at..at, v.iter().copied());
            }
            Edit::Delete(p, k) => {
                if !b.is_empty() {
                    let at = p % b.len();
                    let end = (at + k).min(b.len());
                    b.drain(at..end);
                }
            }
            Edit::Truncate(p) => b.truncate(p % (b.len() + 1)),
        }
    }
    b
}

/// The suite's failure conditions: no panic, status in {0, 1, 2}.
fn sane(o: &Output, what: &str) -> Result<(), TestCaseError> {
    let stderr = String::from_utf8_lossy(&o.stderr);
    prop_assert!(
        matches!(o.status.code(), Some(0..=2)),
        "{what}: status {:?}, stderr {stderr}",
        o.status.code()
    );
    prop_assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    Ok(())
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// Reads `y` of a retention output and checks it is finite.
fn output_is_finite(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let y = st.tensor("y").unwrap();
    y.data()
        .chunks_exact(4)
        .all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
}

#[test]
fn fuzz_retention_input() {
    let seed = std::fs::read(format!("{DATA}/retention_pair/in.safetensors")).unwrap();
    let d = tmp("retention");
    let (input, out) = (d.join("in.safetensors"), d.join("out.safetensors"));
    runner()
        .run(&(edits(), 0usize..4), |(e, form)| {
            std::fs::write(&input, apply(&seed, &e)).unwrap();
            let _ = std::fs::remove_file(&out);
            let form = ["naive", "recurrent", "chunked", "fused"][form];
            let o = vort(&[
                "retention",
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
                "--form",
                form,
            ]);
            sane(&o, form)?;
            if o.status.success() {
                prop_assert!(
                    output_is_finite(&out),
                    "{form}: non-finite output with status 0"
                );
            } else {
                prop_assert!(!out.exists(), "{form}: output written on error");
            }
            Ok(())
        })
        .unwrap();
}

/// A tiny finished MQAR run (retnet, 10 steps) and its Zoology-format test file.
fn tiny_mqar_run(d: &Path) -> (PathBuf, PathBuf) {
    let run = d.join("run");
    let o = vort(&[
        "train",
        "--task",
        "mqar",
        "--memory",
        "retnet",
        "--config",
        &format!("{DATA}/tiny_mqar.toml"),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // a valid data file: 2 sequences of 32 with two pairs and their queries
    let (n, l) = (2usize, 32usize);
    let mut inputs = vec![0i64; n * l];
    let mut labels = vec![-100i64; n * l];
    for s in 0..n {
        inputs[s * l..s * l + 4].copy_from_slice(&[1, 20, 2, 21]);
        inputs[s * l + 10] = 2;
        labels[s * l + 10] = 21;
    }
    let data = d.join("data.safetensors");
    zoology_file(&data, &inputs, &labels, n, l);
    (run, data)
}

#[test]
fn fuzz_checkpoint_data_and_metrics() {
    let d = tmp("run");
    let (run, data) = tiny_mqar_run(&d);
    let ck = run.join("checkpoint.safetensors");
    let ck_seed = std::fs::read(&ck).unwrap();
    let data_seed = std::fs::read(&data).unwrap();
    let metrics = run.join("metrics.jsonl");
    let metrics_seed = std::fs::read(&metrics).unwrap();
    let r = run.to_str().unwrap();
    let mutated = d.join("mutated.safetensors");
    runner()
        .run(&(edits(), 0usize..3), |(e, target)| {
            let o = match target {
                0 => {
                    std::fs::write(&ck, apply(&ck_seed, &e)).unwrap();
                    let o = vort(&["eval", "--run", r, "--json"]);
                    std::fs::write(&ck, &ck_seed).unwrap();
                    o
                }
                1 => {
                    std::fs::write(&mutated, apply(&data_seed, &e)).unwrap();
                    vort(&[
                        "eval",
                        "--run",
                        r,
                        "--data",
                        mutated.to_str().unwrap(),
                        "--json",
                    ])
                }
                _ => {
                    std::fs::write(&metrics, apply(&metrics_seed, &e)).unwrap();
                    let o = vort(&[
                        "train", "--task", "mqar", "--memory", "retnet", "--resume", "--out", r,
                    ]);
                    std::fs::write(&metrics, &metrics_seed).unwrap();
                    o
                }
            };
            sane(&o, ["checkpoint", "data", "metrics"][target])?;
            if target == 2 {
                // a finished run resumes to "already finished" whatever its log holds
                prop_assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            }
            if o.status.success() && target < 2 {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                let acc = v["accuracy"].as_f64();
                prop_assert!(acc.is_some_and(f64::is_finite), "{}", v);
            }
            Ok(())
        })
        .unwrap();
}

/// Config text: mutations of the tiny MQAR config must parse to a clean refusal or a run;
/// runs that parse are pinned to 2 steps (by editing the steps line back) so none runs long.
#[test]
fn fuzz_run_config() {
    let seed = std::fs::read(format!("{DATA}/tiny_mqar.toml")).unwrap();
    let d = tmp("config");
    let cfg = d.join("c.toml");
    let n = std::cell::Cell::new(0);
    runner()
        .run(&edits(), |e| {
            let text = String::from_utf8_lossy(&apply(&seed, &e)).into_owned();
            // keep the run short if it parses: the keys that drive time are pinned small,
            // in their tables when present, in tables of their own otherwise
            let pinned = [
                "steps",
                "batch_size",
                "seq_len",
                "test_examples",
                "vocab_size",
                "d_model",
                "layers",
                "heads",
                "head_dim",
                "features",
                "eval_every",
                "val_sequences",
            ];
            let kept: Vec<&str> = text
                .lines()
                .filter(|l| !pinned.contains(&l.split('=').next().unwrap_or("").trim()))
                .collect();
            let mut text = kept.join("\n");
            for (table, pins) in [
                ("[train]", "steps = 2\nbatch_size = 2"),
                ("[task]", "seq_len = 32\ntest_examples = 4\nvocab_size = 40"),
                (
                    "[model]",
                    "d_model = 16\nlayers = 1\nheads = 2\nhead_dim = 8\nfeatures = 8",
                ),
            ] {
                text = if text.lines().any(|l| l.trim() == table) {
                    text.replacen(table, &format!("{table}\n{pins}"), 1)
                } else {
                    format!("{text}\n{table}\n{pins}\n")
                };
            }
            std::fs::write(&cfg, &text).unwrap();
            n.set(n.get() + 1);
            let out = d.join(format!("run{}", n.get()));
            let o = vort(&[
                "train",
                "--task",
                "mqar",
                "--memory",
                "retnet",
                "--config",
                cfg.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--max-memory",
                "2e9",
            ]);
            sane(&o, "config")
        })
        .unwrap();
}

/// Replaces the value of every `key = ...` line of a TOML text.
fn set_key(text: &str, key: &str, value: &str) -> String {
    text.lines()
        .map(|l| {
            if l.split('=').next().is_some_and(|k| k.trim() == key) {
                format!("{key} = {value}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Where a forged config goes: an export file, or a run directory (its config.toml and its
/// checkpoint's config, which must agree). Both are saved with a recomputed checksum, so the
/// config itself is what gets tested, not the checksum.
fn plant(
    target: usize,
    text: &str,
    export: &Checkpoint,
    ck: &Checkpoint,
    file: &Path,
    run: &Path,
) -> PathBuf {
    if target == 0 {
        let mut w = export.clone();
        w.config = text.to_string();
        w.save(file).unwrap();
        file.to_path_buf()
    } else {
        let mut c = ck.clone();
        c.config = text.to_string();
        c.save(&run.join("checkpoint.safetensors")).unwrap();
        std::fs::write(run.join("config.toml"), text).unwrap();
        run.to_path_buf()
    }
}

use vort_lab::train::checkpoint::Checkpoint;

/// Mutated configs carried by an export and by a run's checkpoint (checksums recomputed):
/// a clean refusal or a finite evaluation, never a panic. The keys that drive time are
/// pinned to the run's own values after the mutation, so configs that parse still load.
#[test]
fn fuzz_export_and_checkpoint_configs() {
    let d = tmp("forged");
    let (run, _) = tiny_mqar_run(&d);
    let export_path = d.join("w.safetensors");
    let o = vort(&[
        "export",
        "--run",
        run.to_str().unwrap(),
        "--out",
        export_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let export = Checkpoint::load(&export_path).unwrap();
    let ck = Checkpoint::load(&run.join("checkpoint.safetensors")).unwrap();
    let (cfg0, ck0) = (
        std::fs::read(run.join("config.toml")).unwrap(),
        std::fs::read(run.join("checkpoint.safetensors")).unwrap(),
    );
    let seed = export.config.clone();
    let forged = d.join("forged.safetensors");
    let pins = [
        ("seq_len", "32"),
        ("test_examples", "16"),
        ("eval_sequences", "16"),
        ("val_sequences", "16"),
        ("batch_size", "8"),
    ];
    runner()
        .run(&(edits(), 0usize..2), |(e, target)| {
            let mut text = String::from_utf8_lossy(&apply(seed.as_bytes(), &e)).into_owned();
            for (k, v) in pins {
                text = set_key(&text, k, v);
            }
            let p = plant(target, &text, &export, &ck, &forged, &run);
            let o = vort(&["eval", "--run", p.to_str().unwrap(), "--json"]);
            std::fs::write(run.join("config.toml"), &cfg0).unwrap();
            std::fs::write(run.join("checkpoint.safetensors"), &ck0).unwrap();
            sane(&o, ["export config", "checkpoint config"][target])?;
            if o.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                prop_assert!(v["accuracy"].as_f64().is_some_and(f64::is_finite), "{}", v);
            }
            Ok(())
        })
        .unwrap();
}

/// Huge dimensions in an export's or a checkpoint's config (checksums recomputed) are
/// refused with exit 2 by the memory estimate, fast: nothing is allocated for them. (A huge
/// batch_size is not among them: evaluation batches are capped at 64 sequences, so such an
/// export evaluates normally.)
#[test]
fn huge_dimensions_in_exports_and_checkpoints_exit_2_fast() {
    let d = tmp("huge");
    let (run, _) = tiny_mqar_run(&d);
    let export_path = d.join("w.safetensors");
    let o = vort(&[
        "export",
        "--run",
        run.to_str().unwrap(),
        "--out",
        export_path.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let export = Checkpoint::load(&export_path).unwrap();
    let ck = Checkpoint::load(&run.join("checkpoint.safetensors")).unwrap();
    let forged = d.join("forged.safetensors");
    for (key, value) in [
        ("d_model", "4000000000"),
        ("seq_len", "100000000000"),
        ("layers", "100000000"),
        ("heads", "1000000000"),
        ("head_dim", "1000000000"),
        ("features", "1000000000"),
        ("vocab_size", "1000000000000"),
        ("mlp_mult", "1000000000"),
    ] {
        for target in 0..2 {
            let text = set_key(&export.config, key, value);
            let p = plant(target, &text, &export, &ck, &forged, &run);
            let t = std::time::Instant::now();
            let o = vort(&["eval", "--run", p.to_str().unwrap()]);
            let took = t.elapsed();
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{key} ({target}): {stderr}");
            assert!(
                took < std::time::Duration::from_secs(10),
                "{key} ({target}): {took:?}"
            );
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
        }
    }
}
