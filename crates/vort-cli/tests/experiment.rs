//! `vort train`, `vort eval`: a tiny run end to end, and the refusals (exit 2, one line,
//! nothing overwritten).

use std::path::PathBuf;
mod common;

use common::{assert_one_line_error, vort, zoology_file};

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_run.toml");

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("vort-cli-exp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    p
}

#[test]
fn tiny_run_trains_evaluates_and_refuses_to_overwrite() {
    let dir = tmp("run");
    let d = dir.to_str().unwrap();
    let o = vort(&[
        "train", "--task", "zipf", "--memory", "vort", "--config", TINY, "--out", d, "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["steps"], 20);
    for f in [
        "config.toml",
        "metrics.jsonl",
        "checkpoint.safetensors",
        "eval.json",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }

    let o = vort(&["eval", "--run", d, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let eval: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(eval["task"], "zipf");
    assert_eq!(eval["step"], 20);
    assert_eq!(eval["accuracy"], summary["eval"]["accuracy"]);

    // resuming a finished run says so and changes nothing, with or without naming the run's
    // task and memory (the saved config names them); naming others is refused
    let before = std::fs::read(dir.join("checkpoint.safetensors")).unwrap();
    for args in [
        &[
            "train", "--task", "zipf", "--memory", "vort", "--resume", "--out", d,
        ][..],
        &["train", "--resume", "--out", d][..],
    ] {
        let o = vort(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("already finished at step 20"), "{text}");
        assert!(!text.contains("NaN"), "{text}");
    }
    let e = assert_one_line_error(
        &vort(&["train", "--memory", "softmax", "--resume", "--out", d]),
        2,
    );
    assert!(e.contains("zipf / vort run, not zipf / softmax"), "{e}");
    assert_eq!(
        std::fs::read(dir.join("checkpoint.safetensors")).unwrap(),
        before
    );
    // a fresh run without a config must name its task and mixer (--memory: the old name)
    let e = assert_one_line_error(&vort(&["train", "--memory", "vort", "--out", d]), 2);
    assert!(e.contains("--task and --mixer"), "{e}");
    // a config that names them is enough: the saved config of this run, trained again
    let again = tmp("again");
    let o = vort(&[
        "train",
        "--config",
        dir.join("config.toml").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let same: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(same["eval"]["accuracy"], summary["eval"]["accuracy"]);
    let _ = std::fs::remove_dir_all(&again);

    // extending a finished run: --steps must be above its step; then it trains on to N
    assert_one_line_error(
        &vort(&[
            "train", "--task", "zipf", "--memory", "vort", "--resume", "--out", d, "--steps", "20",
        ]),
        2,
    );
    let o = vort(&[
        "train", "--task", "zipf", "--memory", "vort", "--resume", "--out", d, "--steps", "26",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ext: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ext["steps"], 26);
    assert_eq!(ext["eval"]["step"], 26);
    let cfg = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(cfg.contains("steps = 26"), "{cfg}");

    // `generate` needs a books model, at least one byte, and a run directory
    for args in [
        &["generate", "--run", d, "--bytes", "5"][..],
        &["generate", "--run", d, "--bytes", "0"][..],
        &[
            "generate",
            "--run",
            d,
            "--bytes",
            "5",
            "--temperature",
            "-1",
        ][..],
        &["generate", "--run", "/nonexistent/run", "--bytes", "5"][..],
        &[
            "generate",
            "--run",
            d,
            "--bytes",
            "5",
            "--prompt",
            "a",
            "--prompt-file",
            "b",
        ][..],
    ] {
        let err = assert_one_line_error(&vort(args), 2);
        if args[4] == "5" && args.len() == 5 && args[2] == d {
            assert!(err.contains("books"), "{err}");
        }
    }

    // A fresh run into a directory that holds one, and a resume that names another run.
    let checkpoint = std::fs::read(dir.join("checkpoint.safetensors")).unwrap();
    assert_one_line_error(
        &vort(&[
            "train", "--task", "zipf", "--memory", "vort", "--config", TINY, "--out", d,
        ]),
        2,
    );
    assert_one_line_error(
        &vort(&[
            "train",
            "--task",
            "label-copy",
            "--memory",
            "vort",
            "--resume",
            "--out",
            d,
        ]),
        2,
    );
    assert_eq!(
        std::fs::read(dir.join("checkpoint.safetensors")).unwrap(),
        checkpoint
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_names_configs_and_runs_exit_2() {
    assert_one_line_error(&vort(&["train", "--task", "bogus", "--memory", "vort"]), 2);
    assert_one_line_error(&vort(&["train", "--task", "zipf", "--memory", "lstm"]), 2);

    let dir = tmp("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "seed = 1\nbogus_field = 3\n").unwrap();
    let out = dir.join("run");
    assert_one_line_error(
        &vort(&[
            "train",
            "--task",
            "zipf",
            "--memory",
            "vort",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]),
        2,
    );
    assert!(!out.exists(), "nothing is created for a bad config");
    // a config that is missing, a directory or not text: the user's to fix
    let binary = dir.join("binary.toml");
    std::fs::write(&binary, [0xffu8, 0xfe, 0x00, 0x01]).unwrap();
    for c in [
        "/nonexistent/config.toml",
        dir.to_str().unwrap(),
        binary.to_str().unwrap(),
    ] {
        assert_one_line_error(
            &vort(&["train", "--task", "zipf", "--memory", "vort", "--config", c]),
            2,
        );
    }
    assert_one_line_error(&vort(&["eval", "--run", out.to_str().unwrap()]), 2);
    let _ = std::fs::remove_dir_all(dir);
}

/// Books without fetched data, and conflicting reproduction scales: one `error:` line, exit 2,
/// and the message says what to run.
#[test]
fn books_without_data_and_conflicting_scales_are_refused() {
    let data = tmp("no-books");
    let cfg = tmp("books-cfg.toml");
    std::fs::write(
        &cfg,
        format!(
            "[task]\nkind = \"books\"\nseq_len = 64\ndata_dir = \"{}\"\n",
            data.display()
        ),
    )
    .unwrap();
    let run = tmp("books-run");
    let o = vort(&[
        "train",
        "--task",
        "books",
        "--memory",
        "vort",
        "--config",
        cfg.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("vort data fetch books"));
    assert!(!run.exists(), "nothing may be written");
    let out = tmp("books-repro");
    let o = vort(&[
        "reproduce",
        "books",
        "--quick",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, 2);
    assert!(!out.exists(), "nothing may be written");
    // --cell narrows a books or synthetic preset too: a cell the preset lacks is named with
    // the preset's cells, and the one it has gets as far as the missing books
    for (what, cells) in [("books", "books"), ("synthetic", "zipf")] {
        let o = vort(&[
            "reproduce",
            what,
            "--quick",
            "--cell",
            "nosuch",
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = assert_one_line_error(&o, 2);
        assert!(err.contains("nosuch") && err.contains(cells), "{err}");
    }
    let o = vort(&[
        "reproduce",
        "books",
        "--quick",
        "--cell",
        "books",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("vort data fetch books"));
    assert!(!out.exists(), "nothing may be written");
    assert_one_line_error(&vort(&["reproduce", "--quick", "--full"]), 2);
    assert_one_line_error(&vort(&["reproduce", "--medium", "--full"]), 2);
    assert_one_line_error(&vort(&["reproduce", "everything"]), 2);
}

/// MQAR through the CLI: training on a Zoology-format file, scoring a run on one with
/// `eval --data --json`, bad files refused with one line and exit 2, and `--resume` with
/// flags that it would ignore refused.
#[test]
fn mqar_with_zoology_files() {
    const MQAR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_mqar.toml");
    let dir = tmp("mqar");
    std::fs::create_dir_all(&dir).unwrap();
    // 4 sequences: pairs (1, 20) (2, 21), queried at 10 and 20
    let (n, l) = (4, 32);
    let mut inputs = vec![0i64; n * l];
    let mut labels = vec![-100i64; n * l];
    for s in 0..n {
        let row = &mut inputs[s * l..(s + 1) * l];
        row[..4].copy_from_slice(&[1, 20, 2, 21]);
        row[10] = 2;
        row[20] = 1;
        labels[s * l + 10] = 21;
        labels[s * l + 20] = 20;
    }
    let data = dir.join("mqar.safetensors");
    zoology_file(&data, &inputs, &labels, n, l);
    let run = dir.join("run");
    let (d, f) = (run.to_str().unwrap(), data.to_str().unwrap());
    let o = vort(&[
        "train",
        "--task",
        "mqar",
        "--memory",
        "retnet",
        "--config",
        MQAR,
        "--out",
        d,
        "--train-data",
        f,
        "--test-data",
        f,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = vort(&["eval", "--run", d, "--data", f, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["positions"], 8);
    assert!(e["accuracy"].as_f64().unwrap() >= 0.0);
    // lags: 10 - 3 = 7 and 20 - 1 = 19, both in the first bucket
    assert_eq!(e["buckets"][0]["n"], 8);
    // bad files: a token outside the vocabulary, a float tensor, a missing file
    let mut bad = inputs.clone();
    bad[5] = 40;
    let badf = dir.join("bad.safetensors");
    zoology_file(&badf, &bad, &labels, n, l);
    let b = badf.to_str().unwrap();
    let err = assert_one_line_error(&vort(&["eval", "--run", d, "--data", b]), 2);
    assert!(err.contains("vocabulary"), "{err}");
    assert_one_line_error(&vort(&["eval", "--run", d, "--data", "/nonexistent.st"]), 2);
    // Zoology's files are MQAR sequences: another task with them is refused, nothing written
    let other = dir.join("zipf-run");
    let err = assert_one_line_error(
        &vort(&[
            "train",
            "--task",
            "zipf",
            "--memory",
            "retnet",
            "--out",
            other.to_str().unwrap(),
            "--train-data",
            f,
        ]),
        2,
    );
    assert!(err.contains("MQAR") && err.contains("zipf"), "{err}");
    assert!(!other.exists());
    // --resume takes the saved config: flags it would ignore are refused
    let err = assert_one_line_error(
        &vort(&[
            "train", "--task", "mqar", "--memory", "retnet", "--resume", "--out", d, "--seed", "3",
        ]),
        2,
    );
    assert!(err.contains("--seed"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// kill -9 of a real `vort train` process, right after a checkpoint appears and at an
/// arbitrary moment, then `--resume` to the end: the final parameters and optimizer state are
/// bit-identical to an uninterrupted run's.
#[test]
fn killed_training_resumes_bit_exactly() {
    const MQAR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_mqar.toml");
    let dir = tmp("kill");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("long.toml");
    let text = std::fs::read_to_string(MQAR)
        .unwrap()
        .replace("steps = 10", "steps = 300")
        .replace("checkpoint_every = 10", "checkpoint_every = 25");
    std::fs::write(&cfg, text).unwrap();
    let train = |out: &std::path::Path, resume: bool| {
        let mut c = common::vort_command();
        c.args(["train", "--task", "mqar", "--memory", "vort", "--out"])
            .arg(out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if resume {
            c.arg("--resume");
        } else {
            c.arg("--config").arg(&cfg);
        }
        c
    };
    let reference = dir.join("reference");
    assert!(train(&reference, false).status().unwrap().success());
    let load = |d: &std::path::Path| {
        vort_lab::train::checkpoint::Checkpoint::load(&d.join("checkpoint.safetensors")).unwrap()
    };
    let want = load(&reference);
    for (name, at_checkpoint) in [("boundary", true), ("arbitrary", false)] {
        let run = dir.join(name);
        let mut child = train(&run, false).spawn().unwrap();
        let t0 = std::time::Instant::now();
        if at_checkpoint {
            while !run.join("checkpoint.safetensors").exists() && t0.elapsed().as_secs() < 60 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(
                150 + u64::from(t0.elapsed().subsec_nanos() % 200),
            ));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // resume until finished (a kill before the first checkpoint restarts from step 0)
        assert!(train(&run, true).status().unwrap().success(), "{name}");
        let got = load(&run);
        assert_eq!(got.step, want.step, "{name}");
        assert_eq!(got.adam_t, want.adam_t, "{name}");
        assert_eq!(
            got.tensors, want.tensors,
            "{name}: parameters and moments differ"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `reproduce recall --config FILE`: a report, reuse on a second call, `--fresh` retrains, and
/// a bad preset with `--fresh` deletes nothing.
#[test]
fn recall_reproduction_reuses_and_fresh_retrains() {
    const PRESET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_recall.toml");
    let dir = tmp("recall");
    let d = dir.to_str().unwrap();
    let args = ["reproduce", "recall", "--config", PRESET, "--out", d];
    let o = vort(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("## Verdicts") && report.contains("Gate:"),
        "{report}"
    );
    let o = vort(&args);
    assert!(String::from_utf8_lossy(&o.stderr).contains("reused"));
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "name = 3\n").unwrap();
    assert_one_line_error(
        &vort(&[
            "reproduce",
            "recall",
            "--config",
            bad.to_str().unwrap(),
            "--out",
            d,
            "--fresh",
        ]),
        2,
    );
    assert!(dir.join("runs").is_dir(), "a refused call deletes nothing");
    let mut fresh = args.to_vec();
    fresh.push("--fresh");
    let o = vort(&fresh);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("--fresh: removed") && !err.contains("reused"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Processes share `--out`: one started before its preset file was edited stops before its
/// next run (exit status 2, one line saying why), keeping the run it finished; the edited
/// preset's runs are left to a process started after the edit.
#[test]
fn a_process_stops_before_its_next_run_once_its_preset_file_changes() {
    const PRESET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_recall.toml");
    let dir = tmp("follow");
    std::fs::create_dir_all(&dir).unwrap();
    let preset = dir.join("preset.toml");
    // long enough a first run (seconds) for the edit to land while it trains
    let text = std::fs::read_to_string(PRESET)
        .unwrap()
        .replace("steps = 20", "steps = 600");
    std::fs::write(&preset, &text).unwrap();
    let out = dir.join("out");
    let child = common::vort_command()
        .args(["reproduce", "recall", "--config"])
        .arg(&preset)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let first = out.join("runs/gate/softmax");
    let t0 = std::time::Instant::now();
    while !first.exists() {
        assert!(t0.elapsed().as_secs() < 120, "the first run never started");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::fs::write(&preset, text.replace("A tiny preset", "An edited preset")).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // the progress of the first run, then one line that says why it stopped
    let e = err.lines().last().unwrap_or_default();
    assert!(
        e.starts_with("error: config ")
            && e.contains("preset.toml")
            && e.contains("changed")
            && e.contains("start it again"),
        "{e}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let finished = eval_files(&out);
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert!(
        finished[0].starts_with("runs/gate/softmax/"),
        "{finished:?}"
    );
    assert!(!out.join("runs/gate/retnet").exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// A full disk (simulated by a file-size limit: writes past it fail with EFBIG, the signal
/// ignored) stops training with one line and exit status 1, leaves no temporary file and no
/// torn checkpoint behind, and the run resumes once there is room again.
#[test]
fn a_full_disk_stops_cleanly_and_the_run_resumes() {
    let dir = std::env::temp_dir().join(format!("vort-diskfull-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    // 8 KiB per file: config.toml and the first metrics lines fit, the checkpoint does not
    let script = format!(
        "trap '' XFSZ; ulimit -f 8; exec \"$0\" train --task zipf --memory vort --config {TINY} --out {d}"
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_vort"))
        .env_remove("RUST_BACKTRACE")
        .env("VORT_CACHE_DIR", common::TEST_NODE_CACHE)
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains("checkpoint"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains("tmp")), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "checkpoint.safetensors"),
        "{names:?}"
    );
    // room again: --resume starts from step 0 with the saved config and finishes
    let o = vort(&[
        "train", "--task", "zipf", "--memory", "vort", "--resume", "--out", d,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(dir.join("checkpoint.safetensors").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vort export` writes the weights alone (no optimizer moments) with the config in the
/// metadata; `eval --run FILE` scores it exactly like the run; a tampered export and a
/// directory that is not a run are refused with one line and status 2.
#[test]
fn exported_weights_evaluate_like_the_run() {
    let dir = tmp("export-run");
    let d = dir.to_str().unwrap();
    let o = vort(&[
        "train", "--task", "zipf", "--memory", "vort", "--config", TINY, "--out", d,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = dir.with_extension("safetensors");
    let f = file.to_str().unwrap();
    let o = vort(&["export", "--run", d, "--out", f]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("step 20"));
    // parameters only: about a third of the checkpoint
    let (ck, w) = (
        std::fs::metadata(dir.join("checkpoint.safetensors"))
            .unwrap()
            .len(),
        std::fs::metadata(&file).unwrap().len(),
    );
    assert!(
        3 * w < ck + ck / 10 && w > ck / 4,
        "checkpoint {ck} bytes, export {w}"
    );
    let text = std::fs::read(&file).unwrap();
    // the safetensors header: a u64 length, then JSON naming every tensor
    let len = u64::from_le_bytes(text[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&text[8..8 + len]).unwrap();
    let names: Vec<&String> = header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .collect();
    assert!(names.iter().any(|k| *k == "param/emb"), "{names:?}");
    assert!(names.iter().all(|k| k.starts_with("param/")), "{names:?}");
    assert!(header["__metadata__"]["config"]
        .as_str()
        .unwrap()
        .contains("[model]"));

    let run_eval: serde_json::Value =
        serde_json::from_slice(&vort(&["eval", "--run", d, "--json"]).stdout).unwrap();
    let o = vort(&["eval", "--run", f, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file_eval: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in ["accuracy", "positions", "step", "task", "mixer"] {
        assert_eq!(file_eval[k], run_eval[k], "{k}");
    }

    // one flipped byte in the data: refused by the checksum
    let mut bad = text.clone();
    let n = bad.len();
    bad[n - 5] ^= 1;
    let bad_file = dir.with_extension("bad.safetensors");
    std::fs::write(&bad_file, bad).unwrap();
    let err = assert_one_line_error(&vort(&["eval", "--run", bad_file.to_str().unwrap()]), 2);
    assert!(err.contains("checksum"), "{err}");
    // not a run directory
    assert_one_line_error(&vort(&["export", "--run", "/nonexistent", "--out", f]), 2);
    for p in [&dir, &file, &bad_file] {
        let _ = std::fs::remove_dir_all(p);
        let _ = std::fs::remove_file(p);
    }
}

/// The report without what depends on the clock: the "Wall time" line (training seconds and
/// the call's wall time) and the last cell of a table row (a run's tokens/s).
fn report_without_times(report: &str) -> String {
    report
        .lines()
        // the recall report says "Wall time", synthetic "wall time ... training time summed":
        // both are the clock's (the whole and the shards train apart, so they differ by load)
        .filter(|l| !l.to_lowercase().contains("wall time"))
        .map(
            |l| match l.strip_suffix('|').and_then(|r| r.rsplit_once('|')) {
                Some((row, _last)) if l.starts_with('|') => row.to_string(),
                _ => l.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join("\n")
}

/// `results.json` without what depends on the clock (wall_s, train_s, tokens_per_s), anywhere.
fn results_without_times(dir: &std::path::Path) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in ["wall_s", "train_s", "tokens_per_s", "wall_seconds"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    strip(&mut v);
    v
}

/// Copies the tree `from` into `to` (merging directories).
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// `reproduce recall|synthetic --shard i/n`: the shards own disjoint runs that together are the
/// preset's, write no report, and their merged `runs/` trees give, with `--report-only`, the
/// report and results of the unsharded run (every number but the clock's: wall and training
/// seconds, tokens/s), and every run's evaluation byte for byte. A report over one shard alone
/// is refused for synthetic (every run is needed) and lists the pending pairs for recall.
/// `--shard` outside 1 <= i <= n is refused with exit 2 before anything is written.
#[test]
fn shards_merge_into_the_unsharded_report() {
    const RECALL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_recall.toml");
    const SYNTH: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny_synthetic.toml"
    );
    let root = tmp("shards");
    for (what, preset, runs) in [("recall", RECALL, 2), ("synthetic", SYNTH, 4)] {
        let dir = |name: &str| root.join(format!("{what}-{name}"));
        let run = |out: &std::path::Path, extra: &[&str]| {
            let mut args = vec!["reproduce", what, "--config", preset, "--out"];
            args.push(out.to_str().unwrap());
            args.extend_from_slice(extra);
            let o = vort(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let (whole, merged) = (dir("whole"), dir("merged"));
        run(&whole, &[]);
        // both reports from --report-only, so that "reused" counts agree
        run(&whole, &["--report-only"]);
        let mut owned = Vec::new();
        for i in 1..=2 {
            let shard = dir(&format!("shard{i}"));
            let said = run(&shard, &["--shard", &format!("{i}/2")]);
            assert!(said.contains("no report written"), "{said}");
            assert!(!shard.join("report.md").exists());
            assert!(!shard.join("results.json").exists());
            let evals = eval_files(&shard);
            assert!(!evals.is_empty(), "shard {i} of {what} owns no run");
            owned.extend(evals);
            copy_tree(&shard.join("runs"), &merged.join("runs"));
        }
        // disjoint, and together every run of the preset
        let mut all = owned.clone();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), owned.len(), "{what}: shards share a run");
        assert_eq!(all, eval_files(&whole), "{what}");
        assert_eq!(all.len(), runs, "{what}");
        if what == "synthetic" {
            let one = dir("shard1");
            let o = vort(&[
                "reproduce",
                what,
                "--config",
                preset,
                "--out",
                one.to_str().unwrap(),
                "--report-only",
            ]);
            // one shard alone: a partial report that lists the other shard's runs, and
            // nothing trained
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let md = std::fs::read_to_string(one.join("report.md")).unwrap();
            assert!(md.contains("**Partial report**"), "{md}");
            let missing: Vec<&String> = all.iter().filter(|r| !one.join(r).exists()).collect();
            assert!(!missing.is_empty());
            for rel in missing {
                let run = rel.trim_end_matches("/eval.json");
                assert!(md.contains(run), "{run} not listed as pending: {md}");
                assert!(!one.join(run).exists(), "{run} was trained");
            }
        }
        run(&merged, &["--report-only"]);
        for rel in &all {
            assert_eq!(
                std::fs::read(whole.join(rel)).unwrap(),
                std::fs::read(merged.join(rel)).unwrap(),
                "{what}: {rel}"
            );
        }
        let report = |d: &std::path::Path| std::fs::read_to_string(d.join("report.md")).unwrap();
        assert_eq!(
            report_without_times(&report(&whole)),
            report_without_times(&report(&merged)),
            "{what}"
        );
        assert_eq!(
            results_without_times(&whole),
            results_without_times(&merged),
            "{what}"
        );
    }
    for bad in ["0/2", "3/2", "1/0", "2", "a/b", "-1/2"] {
        let out = root.join("bad");
        let o = vort(&[
            "reproduce",
            "recall",
            "--config",
            RECALL,
            "--out",
            out.to_str().unwrap(),
            "--shard",
            bad,
        ]);
        assert_one_line_error(&o, 2);
        assert!(!out.exists(), "{bad}: nothing may be written");
    }
    let _ = std::fs::remove_dir_all(root);
}

/// The `eval.json` files under `dir/runs`, relative to `dir`, sorted.
fn eval_files(dir: &std::path::Path) -> Vec<String> {
    fn walk(d: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, base, out);
            } else if p.file_name().is_some_and(|n| n == "eval.json") {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut v = Vec::new();
    walk(&dir.join("runs"), dir, &mut v);
    v.sort();
    v
}

/// Reliability III, P: `--report-only` on a directory with no finished run is refused (exit
/// 2, one line): a mistyped merge path exited 0 with a 0-of-10-run report. `--allow-empty`
/// writes that report on purpose.
#[test]
fn report_only_on_a_directory_without_runs_is_refused() {
    let missing = std::env::temp_dir().join(format!("vort-no-runs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&missing);
    let o = vort(&[
        "reproduce",
        "recall",
        "--quick",
        "--report-only",
        "--out",
        missing.to_str().unwrap(),
    ]);
    let e = common::assert_one_line_error(&o, 2);
    assert!(e.contains("holds no finished run"), "{e}");
    assert!(!missing.exists(), "nothing is written for a refused call");
    // every experiment writes its empty report into a directory that does not exist yet (ruler
    // once failed here: its report was the first file written, into no directory)
    for what in ["recall", "exp2", "ruler"] {
        let _ = std::fs::remove_dir_all(&missing);
        let o = vort(&[
            "reproduce",
            what,
            "--quick",
            "--report-only",
            "--allow-empty",
            "--out",
            missing.to_str().unwrap(),
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{what}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(missing.join("report.md").is_file(), "{what}");
        assert!(missing.join("results.json").is_file(), "{what}");
    }
    let e = common::assert_one_line_error(
        &vort(&["reproduce", "recall", "--quick", "--allow-empty"]),
        2,
    );
    assert!(e.contains("--report-only"), "{e}");
    let _ = std::fs::remove_dir_all(&missing);
}

/// A preset of another experiment is refused before anything is written or trained, naming
/// the task it trains and what the experiment needs (each experiment's own check, through
/// the one `Experiment` trait).
#[test]
fn a_preset_of_another_experiment_is_refused() {
    let configs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let cases = [
        (
            "books",
            "recall/quick.toml",
            "the mqar task; `reproduce books` needs books",
        ),
        (
            "recall",
            "books/d256.toml",
            "the books task; `reproduce recall` needs mqar",
        ),
        (
            "synthetic",
            "recall/quick.toml",
            "the mqar task; `reproduce synthetic` needs zipf or label-copy",
        ),
    ];
    for (what, preset, words) in cases {
        let out = tmp(&format!("wrong-preset-{what}"));
        let preset = configs.join(preset);
        let args = [
            "reproduce",
            what,
            "--config",
            preset.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        let e = assert_one_line_error(&vort(&args), 2);
        assert!(e.contains(words), "{what}: {e}");
        assert!(!out.exists(), "{what}: {} was written", out.display());
    }
}
