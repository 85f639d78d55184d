//! Every `vort` command the README and docs/ show is one the binary accepts (issue #42: no
//! stale flags or form names in the docs). Each command line is read from the indented blocks
//! of README.md and docs/*.md and given to the binary with `--help` appended: clap checks every
//! subcommand, flag and value before it prints the help, so exit status 0 means the line
//! parses as written. Running each command is the business of the tests of that command; the
//! long ones (`reproduce --medium`, hours) are only parsed here.

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
