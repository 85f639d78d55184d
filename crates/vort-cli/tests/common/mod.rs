//! Helpers shared by the binary's end-to-end tests.
#![allow(dead_code)] // each test binary uses its own subset of the helpers

use std::process::{Command, Output};

/// Runs the `vort` binary with `args` (backtrace variables cleared, so an error's stderr is
/// what a user sees).
pub fn vort(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vort"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("the vort binary runs")
}

/// Exit status `code`, nothing on stdout, exactly one stderr line, `error: <message>`, and no
/// panic or backtrace; returns stderr.
pub fn assert_one_line_error(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr {stderr:?}");
    assert!(
        out.stdout.is_empty(),
        "stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr:?}");
    assert!(lines[0].starts_with("error: "), "{stderr:?}");
    assert!(lines[0].len() > "error: ".len() + 5, "{stderr:?}");
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "internal error"] {
        assert!(!stderr.contains(bad), "{stderr:?}");
    }
    stderr
}

/// Writes a Zoology-format file: `inputs`, `labels` [n, l] as I64.
pub fn zoology_file(path: &std::path::Path, inputs: &[i64], labels: &[i64], n: usize, l: usize) {
    use safetensors::tensor::{Dtype, TensorView};
    let a: Vec<u8> = inputs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let b: Vec<u8> = labels.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        (
            "inputs",
            TensorView::new(Dtype::I64, vec![n, l], &a).unwrap(),
        ),
        (
            "labels",
            TensorView::new(Dtype::I64, vec![n, l], &b).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}
