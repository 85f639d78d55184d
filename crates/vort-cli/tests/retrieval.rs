//! `vort retrieval` end to end on an untrained books model: the JSON it prints and writes,
//! and one-line refusals (exit 2) for what a user can fix.

mod common;

use common::{assert_one_line_error, books_run, vort};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vort-retrieval-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn retrieval_reports_every_copy_and_name_and_writes_its_json() {
    let d = tmp("ok");
    let run = books_run(&d);
    let text = d.join("text.txt");
    let body: Vec<u8> = (0..6000)
        .map(|i| b"It was a dark and stormy night. "[i % 32])
        .collect();
    std::fs::write(&text, &body).unwrap();
    let out = d.join("retrieval.json");
    let o = vort(&[
        "retrieval",
        "--run",
        run.to_str().unwrap(),
        "--text",
        text.to_str().unwrap(),
        "--periods",
        "16,40",
        "--copies",
        "3",
        "--lags",
        "500,2000,1e6",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(printed, written);
    let repeats = printed["repeats"].as_array().unwrap();
    assert_eq!(repeats.len(), 2);
    assert_eq!(repeats[1]["period"], 40);
    assert_eq!(repeats[1]["bits"].as_array().unwrap().len(), 3);
    let names = printed["names"].as_array().unwrap();
    assert_eq!(names.len(), 2);
    assert_eq!(printed["lags_skipped"], serde_json::json!([1_000_000]));
    for n in names {
        let (first, later) = (n["first"].as_f64().unwrap(), n["later"].as_f64().unwrap());
        assert!(first > 0.0 && later > 0.0);
    }
    // the table form, with 3 names at one lag: their mean difference ± SE
    let o = vort(&[
        "retrieval",
        "--run",
        run.to_str().unwrap(),
        "--text",
        text.to_str().unwrap(),
        "--periods",
        "16",
        "--copies",
        "2",
        "--lags",
        "500",
        "--names-per-lag",
        "3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("| period (bytes) | copy 1 | copy 2 |")
            && table.contains("| 500 | 3 |")
            && table.contains("(± SE over the names)"),
        "{table}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn retrieval_refuses_bad_requests_in_one_line() {
    let d = tmp("bad");
    let run = books_run(&d);
    let r = run.to_str().unwrap();
    for (args, says) in [
        (vec!["--copies", "1"], "--copies"),
        (vec!["--periods", "0,16"], "period"),
        (vec!["--text", "/nonexistent/file"], "--text"),
        (vec!["--names-per-lag", "0"], "--names-per-lag"),
        (vec!["--names-per-lag", "257"], "--names-per-lag"),
    ] {
        let mut all = vec!["retrieval", "--run", r];
        all.extend(args);
        let e = assert_one_line_error(&vort(&all), 2);
        assert!(e.contains(says), "{e}");
    }
    let inside = run.join("retrieval.json");
    let e = assert_one_line_error(
        &vort(&["retrieval", "--run", r, "--out", inside.to_str().unwrap()]),
        2,
    );
    assert!(e.contains("--out"), "{e}");
    let e = assert_one_line_error(&vort(&["retrieval", "--run", "/nonexistent/run"]), 2);
    assert!(e.contains("neither a run directory"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}
