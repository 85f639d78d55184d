//! `vort train`, `vort eval`: a tiny run end to end, and the refusals (exit 2, one line,
//! nothing overwritten).

use std::path::PathBuf;
mod common;

use common::{assert_one_line_error, vort};

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
    assert_one_line_error(&vort(&["reproduce", "--quick", "--full"]), 2);
    assert_one_line_error(&vort(&["reproduce", "--medium", "--full"]), 2);
    assert_one_line_error(&vort(&["reproduce", "everything"]), 2);
}
