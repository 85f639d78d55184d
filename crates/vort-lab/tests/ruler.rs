//! RULER's offline tasks, byte-level: each sequence is exactly T bytes of RULER's prompt (its
//! template, haystack and needles), the answer prefix and the answer; every scored byte is
//! the next byte and has a copy `lag` bytes earlier; the answers are what RULER asks for.

use vort_lab::tasks::ruler::{generate, RulerKind, RulerSample};
use vort_lab::tasks::{Stream, TaskConfig, TaskKind};
use vort_math::rng::SplitMix64;

fn text(s: &RulerSample) -> String {
    let bytes: Vec<u8> = s.sample.tokens.iter().map(|&b| b as u8).collect();
    String::from_utf8(bytes).unwrap()
}

fn item(s: &RulerSample, i: usize) -> String {
    text(s)[s.refs[i].clone()].to_string()
}

fn draw(kind: RulerKind, t: usize, index: u64) -> RulerSample {
    let mut rng = SplitMix64::new(1000 + index);
    generate(kind, t, &mut rng).unwrap_or_else(|| panic!("{kind:?} does not fit {t}"))
}

/// The frame every task shares: T bytes, the prompt padded on the left with less than one
/// haystack unit, every scored byte the next byte with an identical copy `lag` bytes back.
#[test]
fn every_task_fills_t_bytes_and_scores_the_answer_bytes_against_their_copies() {
    for kind in RulerKind::ALL {
        for t in [kind.min_len(), 4096] {
            for index in 0..20 {
                let s = draw(kind, t, index);
                let x = &s.sample;
                assert_eq!(x.tokens.len(), t, "{kind:?}");
                let pad = x
                    .tokens
                    .iter()
                    .take_while(|&&b| b == u32::from(b' '))
                    .count();
                assert!(pad < 130, "{kind:?} T {t}: {pad} bytes of padding");
                let scored: Vec<usize> = (0..t).filter(|&p| x.mask[p]).collect();
                let in_refs: usize = s.refs.iter().map(|r| r.len()).sum();
                assert_eq!(scored.len(), in_refs, "{kind:?}");
                assert_eq!(*s.refs.last().unwrap(), s.refs.last().unwrap().start..t);
                for p in scored {
                    assert_eq!(x.targets[p], x.tokens[p + 1]);
                    let lag = x.lags[p] as usize;
                    assert!(lag >= 1 && lag <= p + 1, "{kind:?}");
                    assert_eq!(x.tokens[p + 1 - lag], x.targets[p], "{kind:?} copy of {p}");
                }
            }
        }
    }
}

#[test]
fn niah_single_1_asks_for_the_seven_digit_number_of_its_one_needle() {
    let s = draw(RulerKind::NiahSingle1, 4096, 3);
    let t = text(&s);
    let body = t.trim_start();
    assert!(body.starts_with(
        "A special magic number is hidden within the following text. Make sure to memorize it. \
         I will quiz you about the number afterwards.\nThe grass is green."
    ));
    let answer = item(&s, 0);
    assert!(
        answer.len() == 7 && answer.bytes().all(|b| b.is_ascii_digit()),
        "{answer}"
    );
    let needle = format!(" is: {answer}.");
    assert_eq!(t.matches(&needle).count(), 1);
    let key = t
        .split("One of the special magic numbers for ")
        .nth(1)
        .unwrap();
    let key = key.split(" is: ").next().unwrap();
    assert!(key.contains('-'), "{key}");
    assert!(t.ends_with(&format!(
        "What is the special magic number for {key} mentioned in the provided text? The special \
         magic number for {key} mentioned in the provided text is {answer}"
    )));
    // the haystack is the noise sentence, one a line, with the needle on a line of its own
    let lines: Vec<&str> = t.lines().collect();
    let noise = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and \
                 back again.";
    assert!(lines.iter().filter(|l| **l == noise).count() > 30);
    assert!(lines
        .iter()
        .any(|l| l.starts_with("One of the special magic numbers for ")));
}

#[test]
fn niah_multikey_hides_the_needle_among_distractor_needles() {
    for (kind, v) in [
        (RulerKind::NiahMultikey2, "numbers"),
        (RulerKind::NiahMultikey3, "uuids"),
    ] {
        let s = draw(kind, 4096, 5);
        let t = text(&s);
        let needles = t
            .matches(&format!("One of the special magic {v} for "))
            .count();
        assert!(needles > 20, "{kind:?}: {needles}");
        let answer = item(&s, 0);
        // the asked key's needle holds the answer, once
        let asked = t.rsplit(" for ").next().unwrap();
        let key = asked.split(" mentioned").next().unwrap();
        assert_eq!(
            t.matches(&format!("for {key} is: {answer}.")).count(),
            1,
            "{kind:?}"
        );
        if kind == RulerKind::NiahMultikey3 {
            // 8-4-4-4-12 lowercase hex, version 4, RFC 4122 variant
            let parts: Vec<&str> = answer.split('-').collect();
            let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            assert_eq!(lens, [8, 4, 4, 4, 12], "{answer}");
            assert!(
                parts[2].starts_with('4') && "89ab".contains(&parts[3][..1]),
                "{answer}"
            );
            assert!(t.contains("What is the special magic uuid for "));
        }
    }
}

#[test]
fn vt_answers_the_five_variables_of_the_chain_in_order() {
    for index in 0..10 {
        let s = draw(RulerKind::Vt, 2048, index);
        let t = text(&s);
        let vars: Vec<String> = (0..5).map(|i| item(&s, i)).collect();
        let value = t.rsplit("assigned the value ").next().unwrap();
        let value = value.split(',').next().unwrap();
        assert_eq!(value.len(), 5);
        assert!(
            t.contains(&format!("VAR {} = {value}\n", vars[0]))
                || t.contains(&format!("VAR {} = {value}", vars[0]))
        );
        for j in 0..4 {
            assert!(
                t.contains(&format!("VAR {} = VAR {} ", vars[j + 1], vars[j])),
                "hop {j}"
            );
        }
        assert!(t.contains("5 variables are assigned the value"));
        // the chain's lines come in order
        let at = |needle: String| t.find(&needle).unwrap();
        let first = at(format!("VAR {} = {value}", vars[0]));
        let last = at(format!("VAR {} = VAR {} ", vars[4], vars[3]));
        assert!(first < last);
    }
}

#[test]
fn fwe_answers_the_three_most_frequent_words_after_the_noise_word() {
    for t in [1024, 8192] {
        let s = draw(RulerKind::Fwe, t, 2);
        let text = text(&s);
        let context = text
            .split("Find the three most frequently appeared coded words. ")
            .nth(1)
            .unwrap()
            .split("\nQuestion:")
            .next()
            .unwrap();
        let mut counts = std::collections::HashMap::new();
        for w in context.split(' ') {
            *counts.entry(w).or_insert(0usize) += 1;
        }
        let mut ranked: Vec<(&str, usize)> = counts.into_iter().collect();
        ranked.sort_by_key(|r| std::cmp::Reverse(r.1));
        assert_eq!(ranked[0].0, "...");
        let answers: Vec<String> = (0..3).map(|i| item(&s, i)).collect();
        let top: Vec<&str> = ranked[1..4].iter().map(|r| r.0).collect();
        assert_eq!(answers, top, "T {t}: {ranked:?}");
        // the three are strictly more frequent than every other word
        assert!(ranked[3].1 > ranked[4].1, "T {t}: {ranked:?}");
    }
}

/// Needles land anywhere in the haystack: RULER's random place, so the depth grid fills.
#[test]
fn needles_cover_every_depth() {
    let depths: Vec<f64> = (0..200)
        .map(|i| draw(RulerKind::NiahSingle1, 8192, i).depth)
        .collect();
    for decile in 0..10 {
        let lo = decile as f64 / 10.0;
        let n = depths.iter().filter(|&&d| d >= lo && d < lo + 0.1).count();
        assert!(n >= 10, "decile {decile}: {n} of 200 (20 expected)");
    }
}

/// A `[task]` of kind ruler: the mixture of tasks, validation, and sequences a pure function
/// of (seed, stream, index).
#[test]
fn the_ruler_task_config_mixes_its_tasks_deterministically() {
    let c: TaskConfig =
        toml::from_str("kind = \"ruler\"\nseq_len = 1024\ntasks = [\"vt\", \"fwe\"]\n").unwrap();
    assert_eq!(c.kind(), TaskKind::Ruler);
    c.validate().unwrap();
    assert_eq!(c.vocab(), 256);
    let a = c.sample(7, Stream::Train, 3);
    assert_eq!(a, c.sample(7, Stream::Train, 3));
    assert_ne!(a, c.sample(7, Stream::Eval, 3));
    let kinds: std::collections::BTreeSet<bool> = (0..20)
        .map(|i| {
            let s = c.sample(7, Stream::Train, i);
            let t: Vec<u8> = s.tokens.iter().map(|&b| b as u8).collect();
            String::from_utf8(t).unwrap().contains("coded text")
        })
        .collect();
    assert_eq!(kinds.len(), 2, "both tasks drawn");
    let short =
        toml::from_str::<TaskConfig>("kind = \"ruler\"\nseq_len = 600\ntasks = [\"fwe\"]\n");
    let e = short.unwrap().validate().unwrap_err().to_string();
    assert!(e.contains("1024"), "{e}");
    assert!(toml::from_str::<TaskConfig>("kind = \"ruler\"\ntasks = [\"qa_1\"]\n").is_err());
    let e = toml::from_str::<TaskConfig>("kind = \"mqar\"\ntasks = [\"vt\"]\n").unwrap_err();
    assert!(e.to_string().contains("task.tasks"), "{e}");
}

/// The metric on a (tiny, untrained) model: every sample and item counted, scores in
/// [0, 100], the depth bins partition the niah samples, fwe has no depth; one pass and the
/// stream in pieces score alike; a length the task does not fit is refused.
#[test]
fn string_match_all_scores_a_model_by_task_and_depth() {
    use vort_lab::train::ruler_eval::{score, DEPTH_BINS};
    use vort_lab::train::{run_model, RunConfig};
    let mut cfg = RunConfig {
        task: toml::from_str("kind = \"ruler\"\nseq_len = 1024\n").unwrap(),
        ..RunConfig::default()
    };
    cfg.model.mixer = vort::Mixer::Exponential;
    (cfg.model.d_model, cfg.model.layers, cfg.model.heads) = (16, 1, 2);
    (cfg.model.head_dim, cfg.model.features, cfg.model.chunk) = (8, 8, 64);
    cfg.train.batch_size = 4;
    let dev = candle_core::Device::Cpu;
    let vm = candle_nn::VarMap::new();
    let model = run_model(&cfg, &vm, &dev).unwrap();
    for kind in RulerKind::ALL {
        let s = score(&model, &cfg, (kind, 1024, 6), None, &dev).unwrap();
        assert_eq!(s.samples, 6);
        let per_sample = match kind {
            RulerKind::Vt => 5,
            RulerKind::Fwe => 3,
            _ => 1,
        };
        assert_eq!(s.items, 6 * per_sample, "{kind:?}");
        assert!(
            s.found <= s.items && (0.0..=100.0).contains(&s.score),
            "{kind:?}"
        );
        if kind == RulerKind::Fwe {
            assert!(s.by_depth.is_empty());
        } else {
            assert_eq!(s.by_depth.len(), DEPTH_BINS);
            assert_eq!(s.by_depth.iter().map(|d| d.0).sum::<usize>(), 6, "{kind:?}");
        }
        let streamed = score(&model, &cfg, (kind, 1024, 6), Some(256), &dev).unwrap();
        assert_eq!(
            (streamed.items, streamed.found),
            (s.items, s.found),
            "{kind:?}"
        );
    }
    let e = score(&model, &cfg, (RulerKind::Fwe, 700, 2), None, &dev).unwrap_err();
    assert!(e.to_string().contains("1024"), "{e}");
}

/// `reproduce ruler` end to end on a tiny preset: the runs train on the mixture, every
/// (task, length) is scored once and cached in the run, the report holds RULER's table with
/// the softmax gate, the depth table and the plot; a second call reuses runs and scores.
#[test]
fn tiny_ruler_reproduction_trains_scores_and_reports() {
    use vort_lab::reproduce::preset::Preset;
    use vort_lab::reproduce::runner::Mode;
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/ruler/quick.toml"
    ))
    .unwrap();
    // the quick preset, shrunk: one layer of width 16, 3 steps, 2 samples per cell
    let mut preset = Preset::from_toml(&text, "quick").unwrap();
    preset.ruler_samples = 2;
    preset.ruler_lengths = vec![1024, 2048];
    preset.mixers.retain(|m| m.name != "vort");
    for (k, v) in [
        ("d_model", 16),
        ("layers", 1),
        ("head_dim", 8),
        ("features", 8),
    ] {
        preset.base["model"].as_table_mut().unwrap()[k] = toml::Value::Integer(v);
    }
    for (k, v) in [
        ("steps", 3),
        ("batch_size", 2),
        ("eval_sequences", 2),
        ("val_sequences", 2),
    ] {
        preset.base["train"].as_table_mut().unwrap()[k] = toml::Value::Integer(v);
    }
    let out = std::env::temp_dir().join(format!("vort-ruler-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let n = vort_lab::reproduce::ruler::run(&preset, &out, Mode::train(false)).unwrap();
    assert_eq!(n, 2);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.starts_with("# RULER's offline tasks, byte-level (quick)"));
    assert!(md.contains("**Gate** (softmax attention >= 90%"), "{md}");
    assert!(md.contains("| mixer | task | 1024 | 2048* |"), "{md}");
    for task in RulerKind::ALL {
        assert_eq!(
            md.matches(&format!("| {} |", task.name())).count(),
            2,
            "{md}"
        );
        let cached = out.join(format!(
            "runs/ruler/exponential/seed0/ruler-{}-L2048.json",
            task.name()
        ));
        assert!(cached.exists(), "{}", cached.display());
    }
    assert!(md.contains("## By needle depth") && md.contains("## Past the trained length"));
    for f in ["ruler_by_length.png", "ruler_depth.png", "results.json"] {
        assert!(out.join(f).exists(), "{f}");
    }
    // a second call trains nothing and scores nothing new: the caches are not rewritten
    let cache = out.join("runs/ruler/softmax/seed0/ruler-vt-L1024.json");
    let written = std::fs::metadata(&cache).unwrap().modified().unwrap();
    let again = vort_lab::reproduce::ruler::run(&preset, &out, Mode::train(false)).unwrap();
    assert_eq!(again, 2);
    assert_eq!(
        std::fs::metadata(&cache).unwrap().modified().unwrap(),
        written
    );
    let _ = std::fs::remove_dir_all(&out);
}
