//! Every `vort` command the README and docs/ show is one the binary accepts, and is run (issue
//! #42: no stale flags, form names or paths in the docs). Each command line is read from the
//! indented blocks of README.md and docs/*.md.
//! - Every line is given to the binary with `--help` appended: clap checks every subcommand,
//!   flag and value before it prints the help, so exit status 0 means the line parses.
//! - Every line is then run as written, in document order, in one scratch directory (the
//!   repository's `configs/` and the committed runs a line names are copied there, so nothing
//!   in the checkout is written), unless its comment says "not run by the tests" and why
//!   (hours of training, a benchmark, the books corpus, a placeholder for the reader's file).

mod common;

use std::path::{Path, PathBuf};

/// The indented lines of `text` that invoke vort (`vort …` or `cargo run … -p vort-cli -- …`),
/// joined across `\` continuations, as argument lists (the program name dropped).
fn commands(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let Some(body) = line.strip_prefix("    ") else {
            pending.clear();
            continue;
        };
        pending.push_str(body.trim_end_matches('\\'));
        pending.push(' ');
        if body.ends_with('\\') {
            continue;
        }
        let full = std::mem::take(&mut pending);
        let rest = if let Some(r) = full.strip_prefix("vort ") {
            r.to_string()
        } else if let Some(i) = full.find("-p vort-cli -- ") {
            full[i + "-p vort-cli -- ".len()..].to_string()
        } else {
            continue;
        };
        for args in alternatives(&rest) {
            out.push((full.trim().to_string(), args));
        }
    }
    out
}

/// One line as the argument lists it stands for: the comment dropped (`#` …), a parenthesis
/// dropped (an aside such as "(or model.safetensors)"), optional `[--flag value]` groups
/// included, and `a | b | c` alternatives each appended to the words before the first flag.
fn alternatives(line: &str) -> Vec<Vec<String>> {
    let line = line.split(" #").next().unwrap_or("");
    let mut clean = String::new();
    let mut depth = 0usize;
    for c in line.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '[' | ']' => {}
            _ if depth == 0 => clean.push(c),
            _ => {}
        }
    }
    let mut parts = clean.split(" | ");
    let first = words(parts.next().unwrap_or(""));
    let stem: Vec<String> = first
        .iter()
        .take_while(|w| !w.starts_with("--"))
        .cloned()
        .collect();
    let mut all = vec![first];
    for alt in parts {
        let mut a = stem.clone();
        a.extend(words(alt));
        all.push(a);
    }
    all
}

/// Shell words: split at spaces outside quotes, the quotes removed (`--prompt "It was"`).
fn words(s: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in s.chars() {
        match (quote, c) {
            (None, '"' | '\'') => (quote, any) = (Some(c), true),
            (Some(q), _) if c == q => quote = None,
            (None, ' ') => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            _ => (word.push(c), any = true).0,
        }
    }
    if any {
        out.push(word);
    }
    out
}

fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_documented_command_parses() {
    let mut checked = 0;
    let mut failed = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, mut args) in commands(&text) {
            args.push("--help".into());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = common::vort(&refs);
            checked += 1;
            if !out.status.success() {
                failed.push(format!(
                    "{}: `{line}` -> vort {}: {}",
                    file.file_name().unwrap().to_string_lossy(),
                    refs.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {checked}:\n{}",
        failed.len(),
        failed.join("\n")
    );
    // the README and docs/cli.md alone show 40
    assert!(
        checked >= 35,
        "only {checked} commands found: the reader lost them"
    );
}

/// What a documented line says when the tests do not run it (with the reason beside it).
const NOT_RUN: &str = "not run by the tests";

/// Copies `from` (a file or a directory tree) to `to`.
fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

/// The retention command's documented input: f32 phi_q [T, F], phi_k [T, F], v [T, D],
/// alpha [T] (T = 100, inside the horizon of the committed quick-recall run it names).
fn write_retention_input(path: &Path) {
    use safetensors::tensor::{Dtype, TensorView};
    let (t, f, d) = (100usize, 8usize, 4usize);
    let bytes = |n: usize, f: &dyn Fn(usize) -> f32| -> Vec<u8> {
        (0..n).flat_map(|i| f(i).to_le_bytes()).collect()
    };
    let feature = |i: usize| 0.1 + ((i * 37 % 101) as f32) / 101.0; // positive features
    let (q, k) = (bytes(t * f, &feature), bytes(t * f, &|i| feature(i + 7)));
    let v = bytes(t * d, &|i| ((i * 13 % 29) as f32) / 29.0 - 0.5);
    let alpha = bytes(t, &|i| 0.2 + 0.7 * ((i % 10) as f32) / 9.0);
    let views = vec![
        (
            "phi_q",
            TensorView::new(Dtype::F32, vec![t, f], &q).unwrap(),
        ),
        (
            "phi_k",
            TensorView::new(Dtype::F32, vec![t, f], &k).unwrap(),
        ),
        ("v", TensorView::new(Dtype::F32, vec![t, d], &v).unwrap()),
        (
            "alpha",
            TensorView::new(Dtype::F32, vec![t], &alpha).unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

/// `text` with the number in "Wall time of this call: N s" (a report's one varying figure)
/// replaced by `_`.
fn without_wall_time(text: &str) -> String {
    let key = "Wall time of this call: ";
    match text.find(key) {
        Some(i) => {
            let rest = &text[i + key.len()..];
            let end = rest.find(' ').unwrap_or(rest.len());
            format!("{}{key}_{}", &text[..i], &rest[end..])
        }
        None => text.to_string(),
    }
}

#[test]
fn every_documented_command_runs_or_says_why_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = &std::env::temp_dir().join(format!("vort-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(dir);
    copy_tree(&root.join("configs"), &dir.join("configs"));
    write_retention_input(&dir.join("IN.safetensors"));
    let (mut ran, mut marked, mut failed) = (0, 0, Vec::new());
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (line, args) in commands(&text) {
            if line.contains(NOT_RUN) {
                marked += 1;
                continue;
            }
            // the committed runs and results a line reads, copied into the scratch directory
            for a in args.iter().filter(|a| a.starts_with("results/")) {
                let src = root.join(a);
                if src.exists() && !dir.join(a).exists() {
                    copy_tree(&src, &dir.join(a));
                }
            }
            let out = common::vort_command()
                .args(&args)
                .current_dir(dir)
                .output()
                .expect("the vort binary runs");
            ran += 1;
            if !out.status.success() {
                failed.push(format!(
                    "{name}: `{line}` -> {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    // the report the docs regenerate is the committed one, number for number (only this
    // call's wall time differs)
    let report = "results/recall-medium/report.md";
    let regenerated = std::fs::read_to_string(dir.join(report)).ok();
    std::fs::remove_dir_all(dir).unwrap();
    if let Some(text) = regenerated {
        let committed = std::fs::read_to_string(root.join(report)).unwrap();
        assert_eq!(
            without_wall_time(&text),
            without_wall_time(&committed),
            "{report} regenerated by the docs' --report-only differs from the committed one"
        );
    }
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    // kernel x3, theory x2, retention x2, export and eval of the export, generate, report-only
    assert!(
        ran >= 11,
        "only {ran} commands run ({marked} marked as not run)"
    );
}

/// The reader: continuations, comments, asides, optional groups and alternatives.
#[test]
fn the_reader_expands_a_line_as_a_user_reads_it() {
    let text = "text\n    vort a b --x 1 [--y] # note\n    vort r --quick | --medium | --config c.toml\n    \
                vort e --in IN (or M) \\\n      --z 2\n    cargo run --release -p vort-cli -- t --out d\n    \
                vort g --prompt \"It was\" --x 'a b'\n";
    let got: Vec<Vec<String>> = commands(text).into_iter().map(|(_, a)| a).collect();
    let want: Vec<Vec<&str>> = vec![
        vec!["a", "b", "--x", "1", "--y"],
        vec!["r", "--quick"],
        vec!["r", "--medium"],
        vec!["r", "--config", "c.toml"],
        vec!["e", "--in", "IN", "--z", "2"],
        vec!["t", "--out", "d"],
        vec!["g", "--prompt", "It was", "--x", "a b"],
    ];
    assert_eq!(got, want);
}
