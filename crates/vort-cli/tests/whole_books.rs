//! `vort eval --whole-books` end to end on an untrained books model over a tiny books
//! directory: every test byte scored once in each stream, the first window the same in both,
//! and one-line refusals (exit 2) for what a user can fix.

mod common;

use common::{assert_one_line_error, books_dir, books_run, books_run_on, vort};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("vort-whole-books-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn whole_books_score_every_test_byte_by_context_carried_and_reset() {
    let d = tmp("ok");
    let data = books_dir(&d.join("data"));
    let run = books_run_on(&d, data.to_str().unwrap());
    let o = vort(&[
        "eval",
        "--run",
        run.to_str().unwrap(),
        "--whole-books",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["window"], 32, "the run's seq_len");
    let books: Vec<(String, u64)> = r["books"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["title"].as_str().unwrap().to_string(),
                b["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        books,
        [
            ("Title test-c".to_string(), 5000),
            ("Title test-d".to_string(), 3000)
        ]
    );
    // every byte after each book's first, once per bucket by its position in the book
    let buckets = r["buckets"].as_array().unwrap();
    let labels: Vec<&str> = buckets
        .iter()
        .map(|b| b["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["0-512", "512-2K", "2K-8K"]);
    let n: Vec<u64> = buckets.iter().map(|b| b["n"].as_u64().unwrap()).collect();
    assert_eq!(n, [2 * 512, 2 * 1536, (4999 - 2048) + (2999 - 2048)]);
    for b in buckets {
        let (c, r) = (b["carried"].as_f64().unwrap(), b["reset"].as_f64().unwrap());
        assert!(c.is_finite() && r.is_finite() && c > 0.0 && r > 0.0, "{b}");
    }
    // the blocks of the paired verdicts tile every bucket of every book once, and pool to
    // the bucket's means
    let blocks = r["blocks"].as_array().unwrap();
    for (k, b) in buckets.iter().enumerate() {
        let mine: Vec<&serde_json::Value> = blocks.iter().filter(|x| x["bucket"] == k).collect();
        let n: u64 = mine.iter().map(|x| x["n"].as_u64().unwrap()).sum();
        assert_eq!(n, b["n"].as_u64().unwrap(), "bucket {k}");
        for side in ["carried", "reset"] {
            let pooled = mine
                .iter()
                .map(|x| x[side].as_f64().unwrap() * x["n"].as_f64().unwrap())
                .sum::<f64>()
                / n as f64;
            assert!(
                (pooled - b[side].as_f64().unwrap()).abs() < 1e-9,
                "{k} {side}"
            );
        }
    }
    // 512-byte blocks below 8K: per book 1 + 3 + the rest of 2K-8K in blocks of 512
    let per_book = |len: u64| 1 + 3 + (len - 1 - 2048).div_ceil(512);
    assert_eq!(blocks.len() as u64, per_book(5000) + per_book(3000));
    // the markdown table says the same
    let o = vort(&["eval", "--run", run.to_str().unwrap(), "--whole-books"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("| 2K-8K | 3902 |"), "{text}");
}

#[test]
fn whole_books_refuse_what_the_user_can_fix() {
    let d = tmp("bad");
    // the run's data directory holds no books
    let run = books_run(&d);
    let o = vort(&["eval", "--run", run.to_str().unwrap(), "--whole-books"]);
    let err = assert_one_line_error(&o, 2);
    assert!(err.contains("test books"), "{err}");
    // --data and --whole-books are two different evaluations
    let o = vort(&[
        "eval",
        "--run",
        run.to_str().unwrap(),
        "--whole-books",
        "--data",
        "x.safetensors",
    ]);
    assert_eq!(o.status.code(), Some(2));
}
