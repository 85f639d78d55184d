//! `vort retention` and `vort bench layer` end to end: the binary, its files and its errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;

use common::{assert_one_line_error, vort};

use vort::st::{self, Precision};

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vort-cli-{}-{name}", std::process::id()))
}

/// Deterministic inputs: nonnegative features, values in [-1, 1], orders in [0.2, 1].
fn inputs(t: usize, f: usize, d: usize) -> [(String, Vec<f64>, Vec<usize>); 4] {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut unif = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let q = (0..t * f).map(|_| unif()).collect();
    let k = (0..t * f).map(|_| unif()).collect();
    let v = (0..t * d).map(|_| 2.0 * unif() - 1.0).collect();
    let a = (0..t).map(|_| 0.2 + 0.8 * unif()).collect();
    [
        ("phi_q".into(), q, vec![t, f]),
        ("phi_k".into(), k, vec![t, f]),
        ("v".into(), v, vec![t, d]),
        ("alpha".into(), a, vec![t]),
    ]
}

fn write(path: &Path, items: &[(String, Vec<f64>, Vec<usize>)]) {
    let t: Vec<(&str, &[f64], Vec<usize>, Precision)> = items
        .iter()
        .map(|(n, d, s)| (n.as_str(), d.as_slice(), s.clone(), Precision::F32))
        .collect();
    st::write(path, &t, &BTreeMap::new()).unwrap();
}

fn read_y(path: &Path) -> (Vec<usize>, Vec<f64>) {
    let mut file = st::read(path).unwrap();
    let y = file.take("y").unwrap();
    (y.shape, y.data)
}

/// The four forms on one file: fused, chunked and recurrent share the SOE kernel (agree to f32
/// rounding); naive uses the exact kernel (agrees within the certified eps). The library's
/// names (exact_gl, naive_recurrent, chunk, fused_chunk) give the same bytes as the CLI's;
/// `--memory` is the older name of `--mode`.
#[test]
fn retention_forms_agree_through_the_binary() {
    let (t, f, d) = (70, 6, 5);
    let input = tmp("in.safetensors");
    write(&input, &inputs(t, f, d));
    let forms = [
        "naive",
        "recurrent",
        "chunked",
        "fused",
        "naive_recurrent",
        "chunk",
        "fused_chunk",
        "exact_gl",
    ];
    for memory in ["banks", "shared"] {
        let mut ys = Vec::new();
        for form in forms {
            let out = tmp(&format!("y-{memory}-{form}.safetensors"));
            let o = vort(&[
                "retention",
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
                "--form",
                form,
                "--memory",
                memory,
                "--eps",
                "1e-5",
                "--delta",
                "0.2",
                "--chunk",
                "16",
                "--json",
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(report["t"], t);
            let (shape, y) = read_y(&out);
            assert_eq!(shape, vec![t, d]);
            assert!(y.iter().all(|x| x.is_finite()));
            ys.push(y);
            let _ = std::fs::remove_file(out);
        }
        let rel = |a: &[f64], b: &[f64]| {
            let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
            let den: f64 = b.iter().map(|y| y * y).sum();
            (num / den).sqrt()
        };
        assert!(rel(&ys[2], &ys[1]) < 1e-5, "{memory}: chunked vs recurrent");
        assert!(rel(&ys[1], &ys[0]) < 1e-4, "{memory}: recurrent vs naive");
        assert!(rel(&ys[3], &ys[2]) < 1e-5, "{memory}: fused vs chunked");
        for (alias, of) in [(4, 1), (5, 2), (6, 3), (7, 0)] {
            assert_eq!(
                ys[alias], ys[of],
                "{memory}: {} is {}",
                forms[alias], forms[of]
            );
        }
    }
    let _ = std::fs::remove_file(input);
}

/// `--horizon H`: T <= H runs with a table certified to H (reported), T > H, H = 0 and one
/// bank are refused with one line, exit 2 and nothing written, for every form.
#[test]
fn retention_respects_its_horizon() {
    let (t, f, d) = (50, 3, 2);
    let input = tmp("hz-in.safetensors");
    write(&input, &inputs(t, f, d));
    let out = tmp("hz-y.safetensors");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "retention",
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        vort(&args)
    };
    for form in ["naive", "recurrent", "chunked", "fused"] {
        let _ = std::fs::remove_file(&out);
        let o = run(&["--form", form, "--horizon", "49"]);
        let err = assert_one_line_error(&o, 2);
        assert!(err.contains("50") && err.contains("49"), "{err}");
        assert!(!out.exists(), "{form}: nothing is written on error");
        let o = run(&["--form", form, "--horizon", "50000"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["horizon"], 50000);
        assert_eq!(v["t"], 50);
    }
    // without the flag H = T
    let o = run(&[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["horizon"], 50);
    let _ = std::fs::remove_file(&out);
    for bad in [
        &["--horizon", "0"][..],
        &["--memory", "banks", "--banks", "1"][..],
        &["--delta", "1"][..],
    ] {
        assert_one_line_error(&run(bad), 2);
        assert!(!out.exists(), "{bad:?}: nothing is written on error");
    }
    let _ = std::fs::remove_file(input);
}

#[test]
fn bad_retention_files_exit_2_with_one_line() {
    let (t, f, d) = (8, 3, 2);
    let out = tmp("bad-y.safetensors");
    let run = |items: &[(String, Vec<f64>, Vec<usize>)], name: &str| {
        let input = tmp(&format!("bad-{name}.safetensors"));
        write(&input, items);
        let o = vort(&[
            "retention",
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        let _ = std::fs::remove_file(input);
        o
    };
    let good = inputs(t, f, d);

    let missing: Vec<_> = good.iter().filter(|x| x.0 != "v").cloned().collect();
    assert_one_line_error(&run(&missing, "missing"), 2);

    let mut wrong_shape = good.clone();
    // v with one row more than phi_q and phi_k.
    wrong_shape[2].2 = vec![t + 1, d];
    wrong_shape[2].1.extend(std::iter::repeat_n(0.0, d));
    assert_one_line_error(&run(&wrong_shape, "shape"), 2);

    let mut negative = good.clone();
    negative[1].1[3] = -0.5;
    assert_one_line_error(&run(&negative, "negative"), 2);

    let mut order = good.clone();
    order[3].1[0] = 1.5;
    assert_one_line_error(&run(&order, "order"), 2);

    let mut nan = good.clone();
    nan[0].1[1] = f64::NAN;
    assert_one_line_error(&run(&nan, "nan"), 2);

    let o = vort(&[
        "retention",
        "--input",
        "/nonexistent/in.safetensors",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(&o, 2);
    assert!(!out.exists(), "nothing is written on error");

    let o = vort(&[
        "retention",
        "--input",
        "x",
        "--output",
        "y",
        "--form",
        "fast",
    ]);
    assert_one_line_error(&o, 2);

    // finite inputs whose products overflow f32 inside the chunked form: refused, nothing
    // written (it used to write NaN with status 0)
    let mut huge = good.clone();
    for item in huge.iter_mut().take(2) {
        // phi_q, phi_k
        item.1.iter_mut().for_each(|x| *x *= 1e19);
    }
    // v near f32's largest value
    huge[2].1.iter_mut().for_each(|x| *x = 3e38);
    let input = tmp("huge.safetensors");
    write(&input, &huge);
    let _ = std::fs::remove_file(&out);
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--form",
            "chunked",
        ]),
        2,
    );
    assert!(err.contains("not finite"), "{err}");
    assert!(!out.exists(), "no non-finite output is written");
    let _ = std::fs::remove_file(input);

    // sizes refused up front: a billion banks; the O(T²) naive form past its limit
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            "x",
            "--output",
            "y",
            "--memory",
            "banks",
            "--banks",
            "1e9",
        ]),
        2,
    );
    assert!(err.contains("banks"), "{err}");
    let long_t = 16_385;
    let input = tmp("long.safetensors");
    write(&input, &inputs(long_t, 1, 1));
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--form",
            "naive",
        ]),
        2,
    );
    assert!(err.contains("naive"), "{err}");
    assert!(!out.exists());
    let _ = std::fs::remove_file(input);

    // sizes checked against the header before reading: /dev/zero, and a file whose header
    // declares more data than it holds
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            "/dev/zero",
            "--output",
            out.to_str().unwrap(),
        ]),
        2,
    );
    assert!(err.contains("regular file"), "{err}");
    let short = tmp("short.safetensors");
    write(&short, &good);
    let full = std::fs::read(&short).unwrap();
    std::fs::write(&short, &full[..full.len() - 4]).unwrap();
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            short.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]),
        2,
    );
    assert!(err.contains("declares"), "{err}");
    let _ = std::fs::remove_file(short);

    // --output naming the input is refused, and the input is left as it was
    let input = tmp("same.safetensors");
    write(&input, &good);
    let before = std::fs::read(&input).unwrap();
    let p = input.to_str().unwrap();
    let err = assert_one_line_error(&vort(&["retention", "--input", p, "--output", p]), 2);
    assert!(err.contains("input"), "{err}");
    assert_eq!(std::fs::read(&input).unwrap(), before);
    let _ = std::fs::remove_file(input);
}

#[test]
fn bench_layer_quick_reports_every_section() {
    let o = vort(&["bench", "layer", "--quick", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["sgemm"]["gflops"].as_f64().unwrap() > 0.0);
    let layer = r["layer"].as_array().unwrap();
    assert_eq!(layer.len(), 2);
    for l in layer {
        assert!(l["fwd_bwd_gflops"].as_f64().unwrap() > 0.0);
        assert!(l["flops_fwd_bwd"].as_f64().unwrap() > l["flops_fwd"].as_f64().unwrap());
    }
    let decode = r["decode"].as_array().unwrap();
    // Resident state does not grow with the context.
    assert_eq!(
        decode[0]["state_bytes"],
        decode[decode.len() - 1]["state_bytes"]
    );
    assert!(!r["crossover"].as_array().unwrap().is_empty());
    assert!(r["flop_count"].as_str().unwrap().contains("2·m·n·k"));
}

/// `vort bench train --only` with no match is refused with one line (nothing is run).
#[test]
fn bench_train_refuses_an_unknown_model() {
    let o = vort(&["bench", "train", "--quick", "--only", "no-such-model"]);
    let err = assert_one_line_error(&o, 2);
    assert!(err.contains("no-such-model"), "{err}");
}

/// The formulas of docs/retention.md, executable: docs/retention_reference.py (NumPy, written
/// from the page alone) reproduces `vort retention --form naive` on a committed input/output pair
/// (tests/data/retention_pair: T = 37, F = 3, D = 2, four orders below δ) to 1e-6. The
/// binary's output on that input is also checked to equal the committed one, so the pair
/// cannot drift. The Python check runs where python3 with NumPy is installed, and says
/// that it was skipped otherwise.
#[test]
fn numpy_reference_reproduces_the_committed_pair() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/retention_pair");
    let input = format!("{data}/in.safetensors");
    let committed = format!("{data}/out.safetensors");
    let out = tmp("pair-out.safetensors");
    let o = vort(&[
        "retention",
        "--input",
        &input,
        "--output",
        out.to_str().unwrap(),
        "--form",
        "naive",
        "--memory",
        "shared",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(read_y(&out), read_y(Path::new(&committed)));
    let _ = std::fs::remove_file(&out);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/retention_reference.py"
    );
    let numpy = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !numpy {
        eprintln!("python3 with numpy not found: the NumPy reference check is skipped");
        return;
    }
    let o = std::process::Command::new("python3")
        .args([script, &input, &committed])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `retention --model` takes the memory settings of a trained VORT model (run directory or
/// exported file): the same y as the flags those settings stand for (tiny_run.toml: shared
/// nodes, δ 0.1, soe_eps 1e-3, chunk 32, horizon = seq_len 128); those flags may not be given
/// with it, and a model whose memory is not VORT is refused (exit 2).
#[test]
fn retention_takes_a_trained_models_memory_settings() {
    let tiny = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny_run.toml");
    let input = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/retention_pair/in.safetensors"
    );
    let run = tmp("model-run");
    let _ = std::fs::remove_dir_all(&run);
    let r = run.to_str().unwrap();
    let o = vort(&[
        "train", "--task", "zipf", "--memory", "vort", "--config", tiny, "--out", r,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = run.with_extension("safetensors");
    let f = file.to_str().unwrap();
    assert!(vort(&["export", "--run", r, "--out", f]).status.success());

    let out = |name: &str| tmp(name).to_str().unwrap().to_string();
    let (by_flags, by_dir, by_file) = (out("m-flags"), out("m-dir"), out("m-file"));
    let o = vort(&[
        "retention",
        "--input",
        input,
        "--output",
        &by_flags,
        "--memory",
        "shared",
        "--delta",
        "0.1",
        "--eps",
        "1e-3",
        "--horizon",
        "128",
        "--chunk",
        "32",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (model, output) in [(r, &by_dir), (f, &by_file)] {
        let o = vort(&[
            "retention",
            "--input",
            input,
            "--output",
            output,
            "--model",
            model,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["horizon"], 128, "{report}");
        assert_eq!(read_y(Path::new(output)), read_y(Path::new(&by_flags)));
    }
    // a flag the model sets
    assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            input,
            "--output",
            &by_dir,
            "--model",
            r,
            "--eps",
            "1e-4",
        ]),
        2,
    );
    // a model whose memory is softmax attention
    let soft = tmp("model-softmax");
    std::fs::create_dir_all(&soft).unwrap();
    let cfg = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let mut table: toml::Table = cfg.parse().unwrap();
    let model = table["model"].as_table_mut().unwrap();
    assert_eq!(model["mixer"]["kind"].as_str(), Some("vort"), "{cfg}");
    model.insert(
        "mixer".into(),
        toml::Value::Table("kind = \"softmax\"".parse().unwrap()),
    );
    std::fs::write(soft.join("config.toml"), toml::to_string(&table).unwrap()).unwrap();
    let err = assert_one_line_error(
        &vort(&[
            "retention",
            "--input",
            input,
            "--output",
            &by_dir,
            "--model",
            soft.to_str().unwrap(),
        ]),
        2,
    );
    assert!(err.contains("not VORT"), "{err}");
    for p in [&run, &soft] {
        let _ = std::fs::remove_dir_all(p);
    }
    for p in [&file, &tmp("m-flags"), &tmp("m-dir"), &tmp("m-file")] {
        let _ = std::fs::remove_file(p);
    }
}
