//! `vort bench generate` on a tiny books model: each start is what it says it is (cold builds
//! the node tables, warm-disk reads them, warm-process reuses them), the bench leaves the
//! user's cache setting as it found it, and the command's JSON and errors. No time is asserted.

mod common;
use common::{assert_one_line_error, books_run, vort};

use vort::nodes::cache;
use vort_cli::bench::generate::bench_generate;

/// The node cache's counters are per process: a test that builds a model in this process
/// while the other counts builds would be counted (a flaky 9 for 8), so the two take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vort-bench-gen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn each_start_takes_its_tables_where_it_says() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("lib");
    let run = books_run(&d);
    let mine = d.join("my-cache");
    cache::use_disk(Some(mine.clone()));
    let before = cache::stats();
    let mut rounds = 0;
    let r = bench_generate(&run, b"It was", 7, 2, &d, |_, _| rounds += 1).unwrap();
    let s = cache::stats();
    // two recipes per model (the trained length and the stream's 2^20), built once per round
    // uncached and once cold, and read once per round (warm disk); one layer
    assert_eq!(s.built - before.built, 8, "{s:?} from {before:?}");
    assert_eq!(s.from_disk - before.from_disk, 4, "{s:?} from {before:?}");
    assert!(s.from_memory > before.from_memory);
    assert_eq!(rounds, 2);
    assert_eq!(r.repeats.len(), 2);
    assert_eq!((r.bytes, r.prompt_bytes), (7, 6));
    assert_eq!(r.horizon, Some(1 << 20));
    for t in r.repeats.iter().flatten() {
        assert!(t.first_byte_s > 0.0 && t.first_byte_s <= t.total_s, "{t:?}");
    }
    assert!(r.speedup_cold > 0.0 && r.speedup_disk > 0.0 && r.speedup_process > 0.0);
    // the user's cache directory is back, untouched; the bench's scratch is gone
    assert_eq!(cache::disk_dir(), Some(mine.clone()));
    assert!(cache::enabled());
    assert!(!mine.exists());
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("vort-bench-generate")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    cache::use_disk(None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_command_prints_json_and_refuses_bad_arguments() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tmp("cli");
    let run = books_run(&d);
    let run = run.to_str().unwrap();
    let o = vort(&[
        "bench",
        "generate",
        "--run",
        run,
        "--bytes",
        "5",
        "--repeats",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in ["uncached", "cold", "warm_disk", "warm_process"] {
        assert!(j[key]["first_byte_s"].as_f64().unwrap() > 0.0, "{j}");
    }
    assert_eq!(j["repeats"].as_array().unwrap().len(), 1);
    assert!(j["load_avg_before"].is_number() || j["load_avg_before"].is_null());
    for bad in [
        vec!["--bytes", "0"],
        vec!["--repeats", "0"],
        vec!["--out", run],
    ] {
        let mut args = vec!["bench", "generate", "--run", run];
        args.extend(bad);
        assert_one_line_error(&vort(&args), 2);
    }
    let e = assert_one_line_error(
        &vort(&[
            "bench",
            "generate",
            "--run",
            d.join("nope").to_str().unwrap(),
        ]),
        2,
    );
    assert!(e.contains("vort train"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}
