//! Every committed results folder's run configs stay readable after the mixer got its own
//! table: one config.toml of each mixer kind from each folder, copied verbatim into
//! tests/data/committed-configs/ (named `<results folder>--<mixer>.toml`; the flat fields
//! `memory`, `vort_mode`, `router`, `softmax_window`, ... of the old form). Each parses into
//! the mixer it names with the settings it held, and its rewrite in the new form
//! (`[model.mixer]`) parses back to the same config.

use std::path::Path;
use vort::{Mixer, NodeMode, Routing};
use vort_lab::train::RunConfig;

/// The old flat value of `key` in the `[model]` table of `text` (None when absent).
fn flat(text: &str, key: &str) -> Option<String> {
    let model = text.split("[model]").nth(1)?.split("\n[").next()?;
    model.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

#[test]
fn every_committed_config_reads_into_its_mixer_and_round_trips() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/committed-configs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 14, "{} files", files.len());
    let mut folders = std::collections::BTreeSet::new();
    for path in &files {
        let name = path.file_stem().unwrap().to_str().unwrap();
        let (folder, kind) = name.split_once("--").unwrap();
        folders.insert(folder.to_string());
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.contains("memory = "), "{name}: not an old-form config");
        let c = RunConfig::from_toml(&text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.model.mixer.kind().name(), kind, "{name}");
        let num = |k: &str| flat(&text, k).unwrap().parse::<f64>().unwrap();
        match &c.model.mixer {
            Mixer::Vort {
                nodes,
                routing,
                router_bias_init,
            } => {
                let mode = match flat(&text, "vort_mode").unwrap().as_str() {
                    "banks" => NodeMode::Banks,
                    _ => NodeMode::Shared,
                };
                assert_eq!(nodes.mode, mode, "{name}");
                assert_eq!(nodes.banks as f64, num("banks"), "{name}");
                assert_eq!(nodes.delta, num("delta"), "{name}");
                assert_eq!(nodes.horizon as f64, num("horizon"), "{name}");
                assert_eq!(nodes.eps, num("soe_eps"), "{name}");
                assert_eq!(*router_bias_init, num("router_bias_init"), "{name}");
                let want = match flat(&text, "router").unwrap().as_str() {
                    "entity-only" => Routing::EntityOnly,
                    "entropy-only" => Routing::EntropyOnly,
                    _ => Routing::Full,
                };
                assert_eq!(*routing, want, "{name}");
            }
            Mixer::Mixture { m, min_rate } => {
                assert_eq!(*m as f64, num("mixture_m"), "{name}");
                assert_eq!(*min_rate, num("mixture_min_rate"), "{name}");
            }
            Mixer::Softmax { window } => {
                assert_eq!(*window as f64, num("softmax_window"), "{name}")
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
        let new = c.to_toml().unwrap();
        assert!(
            new.contains("[model.mixer]") && !new.contains("memory = "),
            "{new}"
        );
        let back = RunConfig::from_toml(&new, "rewritten").unwrap();
        assert_eq!(back, c, "{name}");
    }
    // one folder per committed results folder that holds run configs
    assert_eq!(folders.len(), 8, "{folders:?}");
}

/// The books pilot configs, rewritten in the new form, are the runs they trained: the same
/// config as the run's own config.toml (old form).
#[test]
fn the_rewritten_pilot_config_is_the_committed_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    let run = read(&root.join("tests/data/committed-configs/books-pilots--vort.toml"));
    let preset = read(&root.join("../../configs/books/pilot-d256-lr2e-3.toml"));
    assert!(preset.contains("[model.mixer]") && !preset.contains("memory = "));
    assert_eq!(
        RunConfig::from_toml(&preset, "pilot").unwrap(),
        RunConfig::from_toml(&run, "run").unwrap()
    );
}

/// The old flat fields beside a `[model.mixer]` table are refused, naming both forms.
#[test]
fn mixing_the_old_and_new_forms_is_refused() {
    let text = "[model]\nmemory = \"vort\"\n[model.mixer]\nkind = \"vort\"\n";
    let e = RunConfig::from_toml(text, "both.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("[model.mixer]") && e.contains("flat"), "{e}");
    let e = RunConfig::from_toml("[model.mixer]\nkind = \"lstm\"\n", "x.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lstm"), "{e}");
}

/// The books and synthetic presets moved from Rust functions to configs/{books,synthetic}/
/// *.toml without changing a run: tests/data/preset-configs/ holds the seed-0 config.toml of
/// every run the functions built at 8fbaca3 (`<experiment>-<scale>--[<task>-]<mixer>-seed0`,
/// written by `RunConfig::to_toml`), and the TOML presets build exactly these configs, in the
/// same order, with the same seeds.
#[test]
fn books_and_synthetic_presets_build_the_runs_the_rust_presets_built() {
    use vort_lab::reproduce::{books, Plan, Scale};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/preset-configs");
    let read = |name: String| {
        let text = std::fs::read_to_string(dir.join(format!("{name}.toml")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        RunConfig::from_toml(&text, &name).unwrap()
    };
    let mut checked = 0;
    for scale in [Scale::Quick, Scale::Medium, Scale::Full] {
        let s = scale.name();
        let full = scale == Scale::Full;
        let books = books::plan(scale, "data/books").unwrap();
        // the shipped presets name every mixer by its kind: their run directories
        // (runs/books/<name>/seed<k>) are the kinds' as before
        assert!(
            books
                .iter()
                .all(|r| r.name == r.config.model.mixer.kind().name()),
            "books {s}"
        );
        let books: Vec<RunConfig> = books.into_iter().map(|r| r.config).collect();
        let kinds = ["vort", "power-law", "exponential", "mixture", "softmax"];
        let seeds: &[u64] = if full { &[0, 1, 2] } else { &[0] };
        let order: Vec<(String, u64)> = books
            .iter()
            .map(|c| (c.model.mixer.kind().to_string(), c.seed))
            .collect();
        let want: Vec<(String, u64)> = kinds
            .iter()
            .flat_map(|k| seeds.iter().map(move |&x| (k.to_string(), x)))
            .collect();
        assert_eq!(order, want, "books {s}");
        for c in &books {
            let mut old = read(format!("books-{s}--{}-seed0", c.model.mixer.kind()));
            old.seed = c.seed;
            assert_eq!(*c, old, "books {s} {}", c.model.mixer.kind());
            checked += 1;
        }
        let synthetic = Plan::for_scale(scale).unwrap().runs;
        let kinds = if full { &kinds[..] } else { &kinds[..4] };
        let mut want = Vec::new();
        for task in ["zipf", "label-copy"] {
            for k in kinds {
                for seed in [0, 1, 2] {
                    want.push((task.to_string(), k.to_string(), seed));
                }
            }
        }
        let order: Vec<_> = synthetic
            .iter()
            .map(|c| {
                let kind = c.model.mixer.kind().to_string();
                (c.task.kind().name().to_string(), kind, c.seed)
            })
            .collect();
        assert_eq!(order, want, "synthetic {s}");
        for c in &synthetic {
            let (task, kind) = (c.task.kind().name(), c.model.mixer.kind());
            let mut old = read(format!("synthetic-{s}--{task}-{kind}-seed0"));
            old.seed = c.seed;
            assert_eq!(*c, old, "synthetic {s} {task} {kind}");
            checked += 1;
        }
    }
    assert_eq!(checked, 5 + 5 + 15 + 24 + 24 + 30);
}

/// The books-d256 preset's VORT seed-0 run is the standalone run config that started it
/// (configs/books/d256-vort-lr3e-3.toml), so that run is reused by the preset, not retrained.
#[test]
fn the_d256_preset_contains_the_standalone_d256_run() {
    use vort_lab::reproduce::preset::Preset;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/books");
    let text = std::fs::read_to_string(root.join("d256.toml")).unwrap();
    let p = Preset::from_toml(&text, "d256.toml").unwrap();
    let runs = p.unswept_runs().unwrap();
    let names: Vec<(&str, u64)> = runs
        .iter()
        .map(|c| (c.model.mixer.kind().name(), c.seed))
        .collect();
    assert_eq!(
        names,
        [
            ("vort", 0),
            ("vort", 1),
            ("vort", 2),
            ("exponential", 0),
            ("exponential", 1),
            ("exponential", 2),
            ("power-law", 0),
            ("softmax", 0)
        ],
        "a mixer's own seeds"
    );
    let single = std::fs::read_to_string(root.join("d256-vort-lr3e-3.toml")).unwrap();
    let single = RunConfig::from_toml(&single, "d256-vort-lr3e-3.toml").unwrap();
    assert_eq!(runs[0], single);
    // the exponential runs differ from it only in the mixer and the seed
    let mut exp = runs[3].clone();
    assert_eq!(
        (exp.model.mixer.kind().name(), exp.seed),
        ("exponential", 0)
    );
    exp.model.mixer = single.model.mixer.clone();
    assert_eq!(exp, single);
}

/// The d256-long preset is the d256 preset's VORT and exponential seed 0 trained for 3000
/// steps with validation checks, and nothing else changed (so its runs compare with d256's).
#[test]
fn the_d256_long_preset_is_d256_for_longer_with_validation() {
    use vort_lab::reproduce::preset::Preset;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/books");
    let runs = |file: &str| {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        Preset::from_toml(&text, file)
            .unwrap()
            .unswept_runs()
            .unwrap()
    };
    let (short, long) = (runs("d256.toml"), runs("d256-long.toml"));
    let kinds: Vec<(&str, u64)> = long
        .iter()
        .map(|c| (c.model.mixer.kind().name(), c.seed))
        .collect();
    assert_eq!(kinds, [("vort", 0), ("exponential", 0)]);
    for (l, s) in long.iter().zip([&short[0], &short[3]]) {
        assert_eq!(
            (l.train.steps, l.train.eval_every, l.train.val_sequences),
            (3000, 250, 32)
        );
        let mut l = l.clone();
        l.train.steps = s.train.steps;
        l.train.eval_every = s.train.eval_every;
        l.train.val_sequences = s.train.val_sequences;
        assert_eq!(&l, s, "{}", s.model.mixer.kind());
    }
}

/// The books ladder preset (#39) is books-d256's setting: its VORT and exponential are
/// d256's seed-0 runs (copied into results/books-ladder, whose config.toml files are these
/// configs, so they are reused), and each rung differs from VORT only in its mixer.
#[test]
fn the_books_ladder_reuses_d256_and_changes_only_the_mixer() {
    use vort::{Mixer, Routing};
    use vort_lab::reproduce::preset::{Preset, Role};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |file: &str| {
        let text = std::fs::read_to_string(root.join("configs/books").join(file)).unwrap();
        Preset::from_toml(&text, file)
            .unwrap()
            .named_runs()
            .unwrap()
    };
    let (d256, ladder) = (read("d256.toml"), read("ladder.toml"));
    let names: Vec<(&str, Role, u64)> = ladder
        .iter()
        .map(|r| (r.name.as_str(), r.role, r.config.seed))
        .collect();
    assert_eq!(
        names,
        [
            ("vort", Role::Claim, 0),
            ("exponential", Role::Baseline, 0),
            ("power-law-0.2", Role::Ablation, 0),
            ("learned-order", Role::Ablation, 0),
            ("oracle", Role::Ablation, 0),
            ("power-law-0.95", Role::Ablation, 0),
        ]
    );
    assert_eq!(ladder[0].config, d256[0].config);
    assert_eq!(ladder[1].config, d256[3].config);
    for (r, name) in ladder[..2].iter().zip(["vort", "exponential"]) {
        let path = format!("results/books-ladder/runs/books/{name}/seed0/config.toml");
        let text = std::fs::read_to_string(root.join(&path)).unwrap();
        assert_eq!(
            RunConfig::from_toml(&text, &path).unwrap(),
            r.config,
            "{path}"
        );
    }
    let mixers: Vec<Mixer> = ladder[2..]
        .iter()
        .map(|r| r.config.model.mixer.clone())
        .collect();
    let vort = |routing| Mixer::Vort {
        nodes: match &d256[0].config.model.mixer {
            Mixer::Vort { nodes, .. } => *nodes,
            m => panic!("{m:?}"),
        },
        routing,
        router_bias_init: 0.0,
    };
    assert_eq!(
        mixers,
        [
            Mixer::PowerLaw {
                alpha: 0.2,
                horizon: 0,
                eps: 1e-3
            },
            vort(Routing::Learned),
            vort(Routing::Oracle {
                entity: 0.8,
                other: 0.35
            }),
            Mixer::PowerLaw {
                alpha: 0.95,
                horizon: 0,
                eps: 1e-3
            },
        ]
    );
    for r in &ladder[2..] {
        let mut c = r.config.clone();
        c.model.mixer = d256[0].config.model.mixer.clone();
        assert_eq!(c, d256[0].config, "{}", r.name);
    }
}

/// Every config under configs/ parses and resolves: a preset (`[[mixers]]`, every run config it
/// makes validated) or a run config for `vort train`. A typo in a committed preset fails here,
/// not hours into a background run.
#[test]
fn every_config_under_configs_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut stack = vec![root];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            if text.lines().any(|l| l.trim() == "[[mixers]]") {
                let p = vort_lab::reproduce::preset::Preset::from_toml(&text, &name)
                    .unwrap_or_else(|e| panic!("{e}"));
                // a process following the preset compares it serialised: it must serialise,
                // and the same file read again must serialise the same (no spurious stop)
                let s = toml::to_string(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
                let again = vort_lab::reproduce::preset::Preset::from_toml(&text, &name).unwrap();
                assert_eq!(toml::to_string(&again).unwrap(), s, "{name}");
            } else {
                RunConfig::from_toml(&text, &name).unwrap_or_else(|e| panic!("{e}"));
            }
            seen += 1;
        }
    }
    assert!(seen >= 20, "{seen} configs");
}

/// Every committed config, written when `[task]` held all twenty fields of every kind, reads
/// into its kind's settings: each field the kind has keeps its value, and the others (left at
/// their defaults by the old writer) are dropped. The rewrite holds only the kind's fields and
/// reads back to the same config. Run once over the 214 config.toml files under results/
/// when the form changed; these copies keep the property tested.
#[test]
fn every_committed_task_table_reads_into_its_kind_and_round_trips() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut kinds = std::collections::BTreeSet::new();
    for sub in ["committed-configs", "preset-configs"] {
        for entry in std::fs::read_dir(root.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.display().to_string();
            let c = RunConfig::from_toml(&text, &name).unwrap_or_else(|e| panic!("{name}: {e}"));
            kinds.insert(c.task.kind());
            let new = c.to_toml().unwrap();
            let task = |t: &str| -> toml::Table {
                let v: toml::Table = toml::from_str(t).unwrap();
                v["task"].as_table().unwrap().clone()
            };
            let (old_task, new_task) = (task(&text), task(&new));
            for (k, v) in &new_task {
                if let Some(was) = old_task.get(k) {
                    assert_eq!(was, v, "{name}: task.{k}");
                }
            }
            let dropped: Vec<&String> = old_task
                .keys()
                .filter(|k| !new_task.contains_key(*k))
                .collect();
            let own: &[&str] = match c.task.kind() {
                vort_lab::tasks::TaskKind::Mqar => &["vocab_size", "num_kv_pairs", "power_a"],
                vort_lab::tasks::TaskKind::Books => &["data_dir"],
                _ => &["max_lag", "queries", "n_values"],
            };
            assert!(
                own.iter().all(|k| new_task.contains_key(*k)),
                "{name}: {new}"
            );
            assert!(!dropped.iter().any(|k| own.contains(&k.as_str())), "{name}");
            assert_eq!(
                RunConfig::from_toml(&new, "rewritten").unwrap(),
                c,
                "{name}"
            );
        }
    }
    assert_eq!(kinds.len(), 4, "{kinds:?}");
}
