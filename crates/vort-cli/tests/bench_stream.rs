//! `vort bench stream` end to end: a short run with its files, and its argument errors.

mod common;

use common::{assert_one_line_error, vort};

#[test]
fn bench_stream_refuses_bad_token_counts() {
    for args in [
        &["bench", "stream", "--tokens", "0"][..],
        &["bench", "stream", "--tokens", "0", "--json"],
        // Longer than the node tables' horizon 2^20.
        &["bench", "stream", "--tokens", "1048577"],
        &["bench", "stream", "--tokens", "abc"],
        &["bench", "stream", "--quick", "--tokens", "10"],
    ] {
        let o = vort(args);
        let err = assert_one_line_error(&o, 2);
        if args[3] == "0" {
            assert!(err.contains("--tokens"), "{err}");
        }
    }
}

#[test]
fn bench_stream_short_run_writes_json_and_plot() {
    let dir = std::env::temp_dir().join(format!("vort-cli-{}-stream", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = vort(&[
        "bench",
        "stream",
        "--tokens",
        "3000",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let file = std::fs::read_to_string(dir.join("stream_drift.json")).unwrap();
    let written: serde_json::Value = serde_json::from_str(&file).unwrap();
    assert_eq!(printed, written);
    assert_eq!(written["tokens"], 3000);
    for key in ["load_avg_before", "load_avg_after"] {
        assert!(written.get(key).is_some(), "{key}");
    }
    let modes = written["modes"].as_array().unwrap();
    assert_eq!(modes.len(), 2);
    for m in modes {
        let overall = m["rel_rms_overall"].as_f64().unwrap();
        let worst = m["rel_rms_max_bin"].as_f64().unwrap();
        assert!(overall.is_finite() && overall < 1e-3, "{m}");
        assert!(worst.is_finite() && worst < 1e-3, "{m}");
        assert!(m["nodes"].as_u64().unwrap() > 0);
        let bins = m["bins"].as_array().unwrap();
        assert_eq!(bins[0]["lo"], 0);
        assert_eq!(bins.last().unwrap()["hi"], 3000);
    }
    let png = std::fs::read(dir.join("stream_drift.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // Only the two outputs: no temporary file left behind.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["stream_drift.json", "stream_drift.png"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
