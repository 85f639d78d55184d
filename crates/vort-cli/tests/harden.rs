//! Issue 27 ("Hardening II"), one test per defect, each as a user meets it: outputs that are
//! not regular files, outputs inside the run a command reads, exports whose config or
//! contents are not what their weights can be, the memory limit, generate under SIGINT,
//! byte-reproducible files, plain error texts, and the horizon of `eval --data`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{assert_one_line_error, books_run, vort, zoology_file};

use vort_lab::train::checkpoint::{Checkpoint, HostTensor};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-harden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> std::process::Output {
    let o = vort(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A tiny finished MQAR run with VORT memory (10 steps, about a second).
fn tiny_vort_run(dir: &Path) -> PathBuf {
    let run = dir.join("run");
    ok(&[
        "train",
        "--task",
        "mqar",
        "--mixer",
        "vort",
        "--config",
        &format!("{DATA}/tiny_mqar.toml"),
        "--out",
        s(&run),
    ]);
    run
}

/// Every file of a run directory, by name, with its bytes.
fn snapshot(run: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `mknod NAME c 1 3` (a /dev/null twin) in `dir`; None, with a message, where not permitted.
fn device_node(dir: &Path) -> Option<PathBuf> {
    let p = dir.join("nul");
    let made = Command::new("mknod")
        .args([s(&p), "c", "1", "3"])
        .stderr(Stdio::null())
        .status();
    if made.is_ok_and(|st| st.success()) {
        Some(p)
    } else {
        eprintln!("skipping the device-node case: mknod is not permitted here");
        None
    }
}

#[cfg(unix)]
fn file_kind(p: &Path) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(p).unwrap().file_type();
    if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_char_device() {
        "char"
    } else if t.is_dir() {
        "dir"
    } else {
        "file"
    }
}

/// Defect 1: a FIFO, a device node and a directory are refused (exit 2, left as they were);
/// a symlink's target is replaced and the link kept. For export and retention alike.
#[cfg(unix)]
#[test]
fn non_regular_outputs_are_refused_and_symlinks_followed() {
    let d = tmp("kinds");
    let run = tiny_vort_run(&d);
    let fifo = d.join("ff");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let dir = d.join("adir");
    std::fs::create_dir(&dir).unwrap();
    let mut refused = vec![(fifo.clone(), "fifo"), (dir.clone(), "dir")];
    if let Some(n) = device_node(&d) {
        refused.push((n, "char"));
    }
    let input = format!("{DATA}/retention_pair/in.safetensors");
    for (p, kind) in &refused {
        let e = assert_one_line_error(&vort(&["export", "--run", s(&run), "--out", s(p)]), 2);
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(file_kind(p), *kind, "{e}");
        let e = assert_one_line_error(
            &vort(&["retention", "--input", &input, "--output", s(p)]),
            2,
        );
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(file_kind(p), *kind);
    }
    // a symlink: its target gets the export, the link stays a link
    let tgt = d.join("tgt.st");
    std::fs::write(&tgt, b"old").unwrap();
    let lnk = d.join("lnk.st");
    std::os::unix::fs::symlink("tgt.st", &lnk).unwrap();
    ok(&["export", "--run", s(&run), "--out", s(&lnk)]);
    assert_eq!(file_kind(&lnk), "symlink");
    assert!(std::fs::metadata(&tgt).unwrap().len() > 1000);
    ok(&["eval", "--run", s(&tgt)]);
    // retention through a symlink too
    let y = d.join("y.st");
    std::fs::write(&y, b"old").unwrap();
    let ylnk = d.join("ylnk.st");
    std::os::unix::fs::symlink(&y, &ylnk).unwrap();
    ok(&["retention", "--input", &input, "--output", s(&ylnk)]);
    assert_eq!(file_kind(&ylnk), "symlink");
    assert!(std::fs::read(&y).unwrap().len() > 100);
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 2: export and retention refuse outputs inside the run they read or equal to the
/// file they read (through a symlink too), and nothing in the run changes.
#[cfg(unix)]
#[test]
fn outputs_inside_the_run_read_are_refused() {
    let d = tmp("protect");
    let run = tiny_vort_run(&d);
    let before = snapshot(&run);
    for name in [
        "checkpoint.safetensors",
        "config.toml",
        "eval.json",
        "new.st",
    ] {
        let out = run.join(name);
        let e = assert_one_line_error(&vort(&["export", "--run", s(&run), "--out", s(&out)]), 2);
        assert!(e.contains("reads"), "{e}");
    }
    // a path that reaches the run another way, and a symlink into it
    let around = d.join("run/../run/checkpoint.safetensors");
    assert_one_line_error(&vort(&["export", "--run", s(&run), "--out", s(&around)]), 2);
    let alias = d.join("alias.st");
    std::os::unix::fs::symlink(run.join("checkpoint.safetensors"), &alias).unwrap();
    assert_one_line_error(&vort(&["export", "--run", s(&run), "--out", s(&alias)]), 2);
    // an export file read by --run is protected too (here: retention --model FILE)
    let export = d.join("w.st");
    ok(&["export", "--run", s(&run), "--out", s(&export)]);
    let w = std::fs::read(&export).unwrap();
    let input = format!("{DATA}/retention_pair/in.safetensors");
    for (model, out) in [
        (run.clone(), run.join("checkpoint.safetensors")),
        (run.clone(), run.join("other.st")),
        (export.clone(), export.clone()),
    ] {
        let e = assert_one_line_error(
            &vort(&[
                "retention",
                "--input",
                &input,
                "--output",
                s(&out),
                "--model",
                s(&model),
            ]),
            2,
        );
        assert!(e.contains("reads"), "{e}");
    }
    // and the input itself, as before
    assert_one_line_error(
        &vort(&["retention", "--input", &input, "--output", &input]),
        2,
    );
    assert_eq!(snapshot(&run), before, "the run is unchanged");
    assert_eq!(std::fs::read(&export).unwrap(), w);
    // the run still resumes (its optimizer state is intact)
    let o = ok(&["train", "--resume", "--out", s(&run)]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("already finished"));
    let _ = std::fs::remove_dir_all(&d);
}

/// An export of `run` rewritten by `edit` and saved with a recomputed checksum (the format
/// is documented; anyone can do this).
fn forged(run: &Path, out: &Path, edit: impl FnOnce(&mut Checkpoint)) -> PathBuf {
    let plain = out.with_extension("plain.st");
    ok(&["export", "--run", s(run), "--out", s(&plain)]);
    let mut ck = Checkpoint::load(&plain).unwrap();
    edit(&mut ck);
    ck.save(out).unwrap();
    out.to_path_buf()
}

/// Replaces the value of `key = ...` lines in a TOML text.
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

/// Defect 3: checksum-valid exports whose config asks for absurd sizes are refused by the
/// memory estimate before anything is allocated, quickly, by eval, generate and retention
/// --model; `vort train` refuses the same config the same way.
#[test]
fn absurd_export_configs_are_refused_before_allocation() {
    let d = tmp("absurd");
    let run = tiny_vort_run(&d);
    for (key, value) in [
        ("d_model", "4000000000"),
        ("seq_len", "100000000000"),
        ("layers", "100000000"),
    ] {
        let f = forged(&run, &d.join(format!("{key}.st")), |ck| {
            ck.config = set_key(&ck.config, key, value);
        });
        for cmd in [
            vec!["eval", "--run", s(&f)],
            vec!["generate", "--run", s(&f), "--bytes", "5"],
            vec![
                "retention",
                "--input",
                &format!("{DATA}/retention_pair/in.safetensors"),
                "--output",
                s(&d.join("y.st")),
                "--model",
                s(&f),
            ],
        ] {
            let t = Instant::now();
            let e = assert_one_line_error(&vort(&cmd), 2);
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{key}: {:?}",
                t.elapsed()
            );
            assert!(e.contains("GB") && e.contains(key), "{key}: {e}");
        }
        // the same config through `vort train`
        let cfg = d.join(format!("{key}.toml"));
        std::fs::write(&cfg, &Checkpoint::load(&f).unwrap().config).unwrap();
        let t = Instant::now();
        assert_one_line_error(
            &vort(&["train", "--config", s(&cfg), "--out", s(&d.join(key))]),
            2,
        );
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{key}: {:?}",
            t.elapsed()
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// An edit of a checkpoint's contents.
type Edit<'a> = Box<dyn FnOnce(&mut Checkpoint) + 'a>;

/// Defect 4: exports holding what their config's model cannot have are refused: an extra
/// tensor, a lone optimizer moment, a softmax config over VORT weights, an impossible step,
/// and a header that repeats a key.
#[test]
fn exports_with_unexpected_contents_are_refused() {
    let d = tmp("contents");
    let run = tiny_vort_run(&d);
    let one = |v: f32| HostTensor {
        shape: vec![1],
        data: vec![v],
    };
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "zzz",
            Box::new(|ck| {
                ck.tensors.insert("param/zzz".into(), one(0.0));
            }),
            "param/zzz",
        ),
        (
            "adam",
            Box::new(|ck| {
                let emb = ck.tensors["param/emb"].clone();
                ck.tensors.insert("adam_m/emb".into(), emb);
            }),
            "moments",
        ),
        (
            "softmax",
            Box::new(|ck| {
                // the [model.mixer] table replaced by softmax's: VORT's router tensors remain
                let text = &ck.config;
                let start = text.find("[model.mixer]").unwrap();
                // through [model.mixer.nodes], up to [train]
                let end = text.find("\n[train]").unwrap();
                ck.config = format!(
                    "{}[model.mixer]\nkind = \"softmax\"\n{}",
                    &text[..start],
                    &text[end..]
                );
            }),
            "does not have",
        ),
        ("step", Box::new(|ck| ck.step = u64::MAX), "step"),
    ];
    for (name, edit, want) in cases {
        let f = forged(&run, &d.join(format!("{name}.st")), edit);
        let e = assert_one_line_error(&vort(&["eval", "--run", s(&f)]), 2);
        assert!(e.contains(want), "{name}: {e}");
    }
    // a duplicated metadata key holding the same value: the checksum still matches
    let plain = d.join("w.st");
    ok(&["export", "--run", s(&run), "--out", s(&plain)]);
    let bytes = std::fs::read(&plain).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    let step = Checkpoint::load(&plain).unwrap().step;
    let dup = header.replacen(
        "\"__metadata__\":{",
        &format!("\"__metadata__\":{{\"step\":\"{step}\","),
        1,
    );
    let mut out = (dup.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(dup.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    let f = d.join("dup.st");
    std::fs::write(&f, out).unwrap();
    let e = assert_one_line_error(&vort(&["eval", "--run", s(&f)]), 2);
    assert!(e.contains("`step` appears twice"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 5: under an address-space limit (`ulimit -v`), a run that fits the available
/// memory but not the limit is refused naming the limit, before anything is written.
#[test]
fn the_address_space_limit_is_the_memory_limit() {
    use vort_lab::train::{available_memory, RunConfig};
    let d = tmp("ulimit");
    let mut cfg = RunConfig::load(Path::new(&format!("{DATA}/tiny_mqar.toml"))).unwrap();
    assert_eq!(cfg.task.kind(), vort_lab::tasks::TaskKind::Mqar);
    // a run of about 3-6 GB: over a 2 GB address space, under the machine's memory
    while cfg.estimate_memory().total() < 3e9 {
        cfg.train.batch_size *= 2;
    }
    let need = cfg.estimate_memory().total();
    if available_memory().is_none_or(|a| (a as f64) < need) {
        eprintln!("skipping: this machine has less than {need:.0} bytes available");
        return;
    }
    let path = d.join("big.toml");
    std::fs::write(&path, cfg.to_toml().unwrap()).unwrap();
    let out = d.join("run");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 2000000 && exec \"$0\" train --mixer vort --config {} --out {}",
            s(&path),
            s(&out)
        ))
        .arg(env!("CARGO_BIN_EXE_vort"))
        .env("VORT_CACHE_DIR", common::TEST_NODE_CACHE)
        .output()
        .unwrap();
    let e = assert_one_line_error(&o, 2);
    assert!(e.contains("ulimit -v"), "{e}");
    assert!(!out.join("checkpoint.safetensors").exists());
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 6: SIGINT (and SIGTERM) while generating keeps every byte written, ends stdout
/// with its newline, says how many on one stderr line, and exits 128 + the signal.
#[cfg(unix)]
#[test]
fn generate_keeps_its_bytes_on_sigint_and_sigterm() {
    use std::io::Read;
    let d = tmp("sigint");
    let run = books_run(&d);
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let mut child = common::vort_command()
            .args([
                "generate",
                "--run",
                s(&run),
                "--bytes",
                "1e6",
                "--prompt",
                "It was",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < 40 {
            let n = stdout.read(&mut buf).unwrap();
            assert!(n > 0, "stdout closed early");
            got.extend_from_slice(&buf[..n]);
        }
        let kill = Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        stdout.read_to_end(&mut got).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        // the count it reports is the bytes on stdout, before the final newline
        let kept: usize = lines[0]
            .split("after ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{stderr}"));
        assert!(kept >= 40, "{stderr}");
        assert_eq!(got.len(), kept + 1, "{stderr}");
        assert_eq!(got.last(), Some(&b'\n'));
        assert!(lines[0].contains(&format!("SIG{sig}")), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 6 (order): generate checks that the model is a books model before building it: a
/// non-books export whose tensors are wrong is refused for its task, not for its tensors.
#[test]
fn generate_checks_the_task_before_building_the_model() {
    let d = tmp("gen-task");
    let run = tiny_vort_run(&d);
    let f = forged(&run, &d.join("zzz.st"), |ck| {
        ck.tensors.insert(
            "param/zzz".into(),
            HostTensor {
                shape: vec![1],
                data: vec![0.0],
            },
        );
    });
    let e = assert_one_line_error(&vort(&["generate", "--run", s(&f), "--bytes", "5"]), 2);
    assert!(e.contains("books") && !e.contains("param/zzz"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 7: two exports of one run, and the checkpoints of two identical trainings, are
/// byte for byte the same file.
#[test]
fn exports_and_identical_trainings_are_byte_identical() {
    let d = tmp("bytes");
    let a = tiny_vort_run(&d.join("a"));
    let b = tiny_vort_run(&d.join("b"));
    let (ea, eb) = (d.join("a.st"), d.join("b.st"));
    ok(&["export", "--run", s(&a), "--out", s(&ea)]);
    ok(&["export", "--run", s(&a), "--out", s(&eb)]);
    assert_eq!(std::fs::read(&ea).unwrap(), std::fs::read(&eb).unwrap());
    for f in ["checkpoint.safetensors", "config.toml", "eval.json"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
    // and the metadata keys are in sorted order
    let bytes = std::fs::read(&ea).unwrap();
    let text = String::from_utf8_lossy(&bytes[..2000]);
    let pos = |k: &str| text.find(&format!("\"{k}\":")).unwrap();
    assert!(pos("adam_t") < pos("checksum"));
    assert!(pos("checksum") < pos("config") && pos("config") < pos("format"));
    assert!(pos("format") < pos("step"));
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 8: errors say what is wrong in the user's words, never a library's variant name.
#[test]
fn errors_name_no_library_internals() {
    let d = tmp("texts");
    let run = tiny_vort_run(&d);
    let plain = d.join("w.st");
    ok(&["export", "--run", s(&run), "--out", s(&plain)]);
    let bytes = std::fs::read(&plain).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    // rewrites the header (same length class) and keeps the data
    let with_header = |h: &serde_json::Value, name: &str| {
        let text = serde_json::to_string(h).unwrap();
        let mut out = (text.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&bytes[8 + n..]);
        let p = d.join(name);
        std::fs::write(&p, out).unwrap();
        p
    };
    let mut wrong_shape = header.clone();
    wrong_shape["param/emb"]["shape"] = serde_json::json!([3, 3]);
    let mut overflow = header.clone();
    overflow["param/emb"]["shape"] = serde_json::json!([1u64 << 62, 1u64 << 62]);
    for p in [
        with_header(&wrong_shape, "shape.st"),
        with_header(&overflow, "overflow.st"),
    ] {
        let e = assert_one_line_error(&vort(&["eval", "--run", s(&p)]), 2);
        for internal in ["TensorInvalidInfo", "ValidationOverflow", "InvalidOffset"] {
            assert!(!e.contains(internal), "{e}");
        }
        assert!(e.contains("shape"), "{e}");
    }
    // a Zoology file whose second tensor does not start where the first ends
    let data = d.join("data.st");
    zoology_file(&data, &[1; 64], &[-100; 64], 2, 32);
    let zb = std::fs::read(&data).unwrap();
    let zn = u64::from_le_bytes(zb[..8].try_into().unwrap()) as usize;
    let mut zh: serde_json::Value = serde_json::from_slice(&zb[8..8 + zn]).unwrap();
    zh["inputs"]["data_offsets"] = serde_json::json!([8, 520]);
    let text = serde_json::to_string(&zh).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&zb[8 + zn..]);
    std::fs::write(&data, out).unwrap();
    let e = assert_one_line_error(&vort(&["eval", "--run", s(&run), "--data", s(&data)]), 2);
    assert!(!e.contains("InvalidOffset") && e.contains("inputs"), "{e}");
    // --bytes past the largest certifiable horizon is about --bytes
    let books = books_run(&d);
    let e = assert_one_line_error(
        &vort(&["generate", "--run", s(&books), "--bytes", "1e12"]),
        2,
    );
    assert!(e.contains("--bytes") && !e.contains("horizon ="), "{e}");
    // --steps errors blame the flag, not config.toml
    for args in [
        vec!["train", "--resume", "--out", s(&run), "--steps", "5"],
        vec![
            "train",
            "--mixer",
            "vort",
            "--config",
            &format!("{DATA}/tiny_mqar.toml"),
            "--out",
            s(&d.join("zero")),
            "--steps",
            "0",
        ],
    ] {
        let e = assert_one_line_error(&vort(&args), 2);
        assert!(e.starts_with("error: --steps"), "{e}");
        assert!(!e.contains("config"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Defect 9: `eval --data` longer than the training length says so (text and JSON): the
/// node tables were rebuilt and certified for the data's length.
#[test]
fn eval_data_reports_the_horizon_it_used() {
    let d = tmp("horizon");
    let run = tiny_vort_run(&d);
    for (l, rebuilt) in [(32usize, false), (96, true)] {
        let n = 2;
        let mut inputs = vec![0i64; n * l];
        let mut labels = vec![-100i64; n * l];
        for q in 0..n {
            inputs[q * l..q * l + 4].copy_from_slice(&[1, 20, 2, 21]);
            inputs[q * l + l - 2] = 2;
            labels[q * l + l - 2] = 21;
        }
        let data = d.join(format!("data{l}.st"));
        zoology_file(&data, &inputs, &labels, n, l);
        let o = ok(&["eval", "--run", s(&run), "--data", s(&data), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let h = &v["horizon"];
        assert_eq!(h["data_len"], l, "{v}");
        assert_eq!(h["train_len"], 32, "{v}");
        assert_eq!(h["rebuilt"], rebuilt, "{v}");
        assert!(h["certified"].as_u64().unwrap() >= l as u64, "{v}");
        let text =
            String::from_utf8_lossy(&ok(&["eval", "--run", s(&run), "--data", s(&data)]).stdout)
                .into_owned();
        assert!(text.contains("certified to"), "{text}");
        assert_eq!(text.contains("rebuilt"), rebuilt, "{text}");
    }
    // a run's own evaluation (eval.json) gains no field
    let own = std::fs::read_to_string(run.join("eval.json")).unwrap();
    assert!(!own.contains("horizon"), "{own}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Reliability III, B: a FIFO in place of a run's weights or checkpoint is refused at once
/// (exit 2, one line), not opened (a read of a FIFO blocks until a writer comes: it hung
/// `eval`, `export` and Python's `vort.load` forever).
#[cfg(unix)]
#[test]
fn a_fifo_in_place_of_the_weights_is_refused_not_opened() {
    let d = tmp("fifo-weights");
    let run = tiny_vort_run(&d);
    for name in ["weights.safetensors", "checkpoint.safetensors"] {
        let r = d.join(format!("r-{name}"));
        std::fs::create_dir(&r).unwrap();
        std::fs::copy(run.join("config.toml"), r.join("config.toml")).unwrap();
        assert!(Command::new("mkfifo")
            .arg(r.join(name))
            .status()
            .unwrap()
            .success());
        let out = d.join("x.safetensors");
        for args in [
            vec!["eval", "--run", s(&r)],
            vec!["export", "--run", s(&r), "--out", s(&out)],
        ] {
            let mut child = common::vort_command()
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let t0 = Instant::now();
            while child.try_wait().unwrap().is_none() {
                if t0.elapsed() > Duration::from_secs(60) {
                    child.kill().unwrap();
                    panic!("{args:?} with a FIFO as {name} hangs");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let o = child.wait_with_output().unwrap();
            let e = assert_one_line_error(&o, 2);
            assert!(e.contains("not a regular file"), "{args:?}: {e}");
        }
        assert_eq!(file_kind(&r.join(name)), "fifo");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Reliability III, pipes: `vort generate ... | head -c 10` ends quietly when its reader goes
/// away: exit 0, nothing on stderr (it was exit 1, "error: serialise: stdout: Broken pipe").
#[cfg(unix)]
#[test]
fn generate_into_a_reader_that_closes_early_ends_quietly() {
    use std::io::Read;
    let d = tmp("pipe");
    let run = books_run(&d);
    let mut child = common::vort_command()
        .args(["generate", "--run", s(&run), "--bytes", "100000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap(); // then the pipe is closed
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "generate kept going"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Reliability III, M: a parameter holding NaN in a checksum-valid file is refused when the
/// model is loaded (exit 2, naming the parameter), not at scoring time.
#[test]
fn a_nan_parameter_is_refused_at_load() {
    let d = tmp("nan-param");
    let run = tiny_vort_run(&d);
    let bad = forged(&run, &d.join("nan.safetensors"), |ck| {
        ck.tensors.get_mut("param/head").unwrap().data[3] = f32::NAN;
    });
    let e = assert_one_line_error(&vort(&["eval", "--run", s(&bad)]), 2);
    assert!(e.contains("`head`") && e.contains("non-finite"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Reliability III, N: a run whose config.toml differs from its checkpoint's in one field is
/// refused naming that field (lines of two layouts were zipped: "checkpoint memory = "vort"
/// vs config d_model = 64" for an edited seed).
#[test]
fn a_config_edit_is_named_by_its_field() {
    let d = tmp("config-edit");
    let run = tiny_vort_run(&d);
    let cfg = run.join("config.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, set_key(&text, "seed", "5")).unwrap();
    let e = assert_one_line_error(&vort(&["eval", "--run", s(&run)]), 2);
    assert!(e.contains("seed: checkpoint `0` vs config `5`"), "{e}");
    assert!(!e.contains("d_model"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}
