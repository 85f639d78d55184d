//! Helpers shared by the binary's end-to-end tests.
#![allow(dead_code)] // each test binary uses its own subset of the helpers

use std::process::{Command, Output};

/// The node cache the tests' `vort` processes share: under cargo's scratch directory for
/// integration tests, so a test neither reads nor fills the user's `~/.cache/vort/nodes` (a
/// warm user cache would make a table build that a test times or interrupts instantaneous).
pub const TEST_NODE_CACHE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/node-cache");

/// The `vort` binary as every test starts it: backtrace variables cleared (an error's stderr
/// is what a user sees) and the node cache at [`TEST_NODE_CACHE`].
pub fn vort_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vort"));
    c.env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env("VORT_CACHE_DIR", TEST_NODE_CACHE);
    c
}

/// Runs [`vort_command`] with `args`.
pub fn vort(args: &[&str]) -> Output {
    vort_command()
        .args(args)
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

/// A books model (untrained: generation needs no data) written as a run directory.
pub fn books_run(dir: &std::path::Path) -> std::path::PathBuf {
    books_run_on(dir, "data/books")
}

/// [`books_run`] whose config reads the books in `data_dir`.
pub fn books_run_on(dir: &std::path::Path, data_dir: &str) -> std::path::PathBuf {
    use vort_lab::tasks::TaskConfig;
    use vort_lab::train::checkpoint::{Checkpoint, HostTensor};
    use vort_lab::train::{named_vars, run_model, RunConfig};
    let mut c = RunConfig {
        task: TaskConfig::books(data_dir, 32),
        ..RunConfig::default()
    };
    c.model.d_model = 16;
    c.model.layers = 1;
    c.model.heads = 2;
    c.model.head_dim = 8;
    c.model.features = 8;
    c.model.chunk = 16;
    c.train.steps = 1;
    let vm = candle_nn::VarMap::new();
    run_model(&c, &vm, &candle_core::Device::Cpu).unwrap();
    let tensors = named_vars(&vm)
        .into_iter()
        .map(|(n, v)| {
            let t = v.as_tensor();
            (
                format!("param/{n}"),
                HostTensor {
                    shape: t.dims().to_vec(),
                    data: t.flatten_all().unwrap().to_vec1().unwrap(),
                },
            )
        })
        .collect();
    let run = dir.join("books");
    std::fs::create_dir_all(&run).unwrap();
    let text = c.to_toml().unwrap();
    std::fs::write(run.join("config.toml"), &text).unwrap();
    Checkpoint {
        step: 0,
        adam_t: 0,
        config: text,
        tensors,
    }
    .save(&run.join("weights.safetensors"))
    .unwrap();
    run
}

/// A books directory as `vort data fetch books` writes it, in `dir`: one book per split, two
/// in test (5000 and 3000 bytes).
pub fn books_dir(dir: &std::path::Path) -> std::path::PathBuf {
    use vort_lab::data::books::{write_manifest, ManifestEntry};
    use vort_lab::data::{sha256_hex, Split};
    std::fs::create_dir_all(dir.join("books")).unwrap();
    let text = |n: usize, salt: &str| -> Vec<u8> {
        format!("It was the best of times, said {salt}, and the worst of them. ")
            .bytes()
            .cycle()
            .take(n)
            .collect()
    };
    let books = [
        ("train-a", Split::Train, text(4000, "Anne")),
        ("val-b", Split::Validation, text(2000, "Ben")),
        ("test-c", Split::Test, text(5000, "Cara")),
        ("test-d", Split::Test, text(3000, "Dov")),
    ];
    let mut manifest = Vec::new();
    for (book, split, bytes) in books {
        std::fs::write(dir.join("books").join(format!("{book}.txt")), &bytes).unwrap();
        manifest.push(ManifestEntry {
            book: book.into(),
            title: format!("Title {book}"),
            source: "test@0".into(),
            bytes: bytes.len() as u64,
            split,
            sha256: sha256_hex(&bytes),
            note: None,
        });
    }
    write_manifest(dir, &manifest).unwrap();
    dir.to_path_buf()
}
