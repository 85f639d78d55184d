//! The books task as a data source: byte windows, context "lags", class flags, window laws.
//! Built from in-memory books (no download, no ../shared).

use vort_lab::data::lexicon::{tag_bytes, Lexicon, TokenClass};
use vort_lab::tasks::books::{BookCorpus, TaggedBook};
use vort_lab::tasks::{Stream, TaskError};

fn lexicon() -> Lexicon {
    Lexicon::new(
        ["Alice", "London"].map(String::from),
        ["the", "and", "of"].map(String::from),
    )
}

/// A text of `n` bytes built from a repeated sentence with entities and function words.
fn text(n: usize, salt: u8) -> Vec<u8> {
    let base = format!("Alice walked to London and the end of day {salt}. ");
    base.bytes().cycle().take(n).collect()
}

/// The tokens of window `k` of `book` cut into consecutive windows of `t + 1` bytes.
fn window_tokens(book: &[u8], k: u64, t: usize) -> Vec<u32> {
    let start = k as usize * (t + 1);
    book[start..start + t]
        .iter()
        .map(|&x| u32::from(x))
        .collect()
}

fn corpus(t: usize) -> BookCorpus {
    let lex = lexicon();
    BookCorpus::from_books(
        vec![
            TaggedBook::new("a".into(), text(3000, 1), &lex),
            TaggedBook::new("b".into(), text(1000, 2), &lex),
        ],
        vec![
            TaggedBook::new("v".into(), text(250, 5), &lex),
            TaggedBook::new("w".into(), text(400, 6), &lex),
        ],
        vec![
            TaggedBook::new("c".into(), text(700, 3), &lex),
            TaggedBook::new("d".into(), text(300, 4), &lex),
        ],
        t,
    )
    .expect("books are long enough")
}

#[test]
fn windows_are_next_byte_prediction_with_context_lags() {
    let t = 64;
    let c = corpus(t);
    for stream in [Stream::Train, Stream::Eval, Stream::Valid] {
        for i in 0..20 {
            let s = c.sample(t, 7, stream, i);
            assert_eq!(s.tokens.len(), t);
            assert!(s.mask.iter().all(|&m| m), "every byte is an answer");
            assert_eq!(s.lags, (1..=t as u32).collect::<Vec<_>>());
            for p in 0..t - 1 {
                assert_eq!(s.targets[p], s.tokens[p + 1], "target = next byte");
            }
            assert_eq!(s, c.sample(t, 7, stream, i), "deterministic");
        }
    }
}

#[test]
fn class_flags_follow_the_lexicon() {
    let t = 64;
    let c = corpus(t);
    let lex = lexicon();
    // eval window 0 is bytes 0..t of the first test book; classes come from the whole book,
    // so a word cut by the window's end keeps its class
    let s = c.sample(t, 3, Stream::Eval, 0);
    let cls = tag_bytes(&text(700, 3), &lex);
    for (p, &c) in cls.iter().take(t).enumerate() {
        assert_eq!(s.entity[p], c == TokenClass::Entity, "byte {p}");
        assert_eq!(s.function[p], c == TokenClass::Function, "byte {p}");
        assert_eq!(s.memorable[p], s.entity[p]);
    }
    assert!(s.entity.iter().any(|&e| e) && s.function.iter().any(|&f| f));
}

/// Window i of `stream` is the i-th window of `t + 1` bytes of `books`, book by book, and the
/// index wraps around after the last.
fn assert_windows_tile(c: &BookCorpus, stream: Stream, books: &[Vec<u8>], t: usize) {
    let windows: Vec<Vec<u32>> = books
        .iter()
        .flat_map(|b| (0..(b.len() / (t + 1)) as u64).map(move |k| window_tokens(b, k, t)))
        .collect();
    for (i, want) in windows.iter().enumerate() {
        assert_eq!(&c.sample(t, 0, stream, i as u64).tokens, want, "window {i}");
    }
    let n = windows.len() as u64;
    assert_eq!(c.sample(t, 0, stream, n), c.sample(t, 0, stream, 0));
}

#[test]
fn eval_windows_tile_the_test_books_without_overlap() {
    let t = 99; // windows of 100 bytes: 7 in book c (700 B), 3 in book d (300 B)
    let c = corpus(t);
    assert_eq!(c.test_windows(t), 10);
    assert_windows_tile(&c, Stream::Eval, &[text(700, 3), text(300, 4)], t);
}

#[test]
fn training_windows_are_uniform_over_window_starts() {
    // book a has 3000 - 64 starts, book b 1000 - 64: P(a) = 2936 / 3872 = 0.7583
    let t = 64;
    let c = corpus(t);
    let n = 4000;
    let from_a = (0..n)
        .filter(|&i| {
            let s = c.sample(t, 11, Stream::Train, i);
            // the two books differ in their salt digit; a window of 64 bytes always holds it
            let bytes: Vec<u8> = s.tokens.iter().map(|&x| x as u8).collect();
            bytes.windows(5).any(|w| w == b"day 1")
        })
        .count();
    let p = 2936.0 / 3872.0;
    let sd = (p * (1.0 - p) / n as f64).sqrt();
    let got = from_a as f64 / n as f64;
    assert!(
        (got - p).abs() < 4.0 * sd,
        "P(book a) = {got:.4}, expected {p:.4} ± {sd:.4}"
    );
}

#[test]
fn a_split_without_a_long_enough_book_is_refused() {
    let lex = lexicon();
    let book = |name: &str, n: usize| vec![TaggedBook::new(name.into(), text(n, 1), &lex)];
    let err =
        BookCorpus::from_books(book("a", 3000), book("v", 300), book("c", 100), 128).unwrap_err();
    assert!(
        matches!(err, TaskError::Data(ref m) if m.contains("test")),
        "{err}"
    );
    let err =
        BookCorpus::from_books(book("a", 3000), book("v", 100), book("c", 300), 128).unwrap_err();
    assert!(
        matches!(err, TaskError::Data(ref m) if m.contains("validation")),
        "{err}"
    );
}

#[test]
fn validation_windows_tile_the_validation_books_and_never_a_test_byte() {
    let t = 99; // windows of 100 bytes: 2 in book v (250 B), 4 in book w (400 B)
    let c = corpus(t);
    assert_eq!(c.valid_windows(t), 6);
    assert_windows_tile(&c, Stream::Valid, &[text(250, 5), text(400, 6)], t);
    for i in 0..6u64 {
        assert_eq!(c.valid_book(t, i), if i < 2 { "v" } else { "w" });
        // the books differ in their salt digit: a validation window holds no test book's
        let s = c.sample(t, 0, Stream::Valid, i);
        let bytes: Vec<u8> = s.tokens.iter().map(|&x| x as u8).collect();
        assert!(!bytes.windows(5).any(|w| w == b"day 3" || w == b"day 4"));
    }
}

#[test]
fn evaluation_scores_each_test_window_once_and_by_book() {
    use std::sync::Arc;
    use vort::model::{Config, Model};
    use vort::Mixer;
    use vort_lab::tasks::{Source, TaskConfig, TaskKind};
    use vort_lab::train::{eval, RunConfig};
    let t = 99; // 10 test windows of 100 bytes (see above)
    let mut cfg = RunConfig {
        task: TaskConfig {
            seq_len: t,
            ..TaskConfig::of_kind(TaskKind::Books)
        },
        ..RunConfig::default()
    };
    cfg.model.mixer = Mixer::Exponential;
    cfg.model.d_model = 8;
    cfg.model.layers = 1;
    cfg.model.heads = 1;
    cfg.model.head_dim = 8;
    cfg.model.features = 8;
    cfg.model.chunk = 16;
    let source = Source::Books(cfg.task.clone(), Arc::new(corpus(t)));
    assert_eq!((source.eval_len(), source.valid_len()), (Some(10), Some(6)));
    let dev = candle_core::Device::Cpu;
    let vm = candle_nn::VarMap::new();
    let model = Model::seeded(&Config::new(cfg.model.clone(), 256, t), 0, &vm, &dev).unwrap();
    for (asked, scored) in [(3, 3), (10, 10), (1000, 10)] {
        cfg.train.eval_sequences = asked;
        let r = eval::evaluate(&model, &source, &cfg, 0, &dev).unwrap();
        assert_eq!(r.sequences, scored, "asked {asked}");
        let bytes: usize = r.buckets.iter().map(|b| b.n).sum();
        assert_eq!(
            bytes,
            scored * t,
            "asked {asked}: every byte of a window is scored"
        );
        // by book: windows 0-6 are book c's, 7-9 book d's
        let by_book: Vec<(&str, usize)> =
            r.per_book.iter().map(|b| (b.label.as_str(), b.n)).collect();
        let want: Vec<(&str, usize)> = match scored {
            3 => vec![("c", 3 * t)],
            _ => vec![("c", 7 * t), ("d", 3 * t)],
        };
        assert_eq!(by_book, want, "asked {asked}");
        let pooled: f64 = r.per_book.iter().map(|b| b.nll * b.n as f64).sum::<f64>() / bytes as f64;
        assert!((pooled - r.loss).abs() < 1e-9, "{pooled} vs {}", r.loss);
    }
    // validation (`train.eval_every`) scores the validation books' windows, by their titles
    let r = eval::evaluate_stream(&model, &source, &cfg, 0, Stream::Valid, 6, None, &dev).unwrap();
    let by_book: Vec<(&str, usize)> = r.per_book.iter().map(|b| (b.label.as_str(), b.n)).collect();
    assert_eq!(by_book, vec![("v", 2 * t), ("w", 4 * t)]);
}

#[test]
fn scored_bytes_are_the_targets_of_the_scored_windows_by_book() {
    let t = 99; // 7 windows in book c, 3 in book d
    let c = corpus(t);
    for asked in [0usize, 1, 7, 8, 10, 25] {
        let got = c.scored_bytes(t, asked);
        // the evaluation caps the windows at what the books hold (no wrap-around repeats)
        let n = asked.min(10) as u64;
        let mut want: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..n {
            let title = c.eval_book(t, i).to_string();
            let s = c.sample(t, 0, Stream::Eval, i);
            let bytes: Vec<u8> = s.targets.iter().map(|&b| b as u8).collect();
            match want.last_mut() {
                Some((w, b)) if *w == title => b.extend(bytes),
                _ => want.push((title, bytes)),
            }
        }
        assert_eq!(got, want, "asked {asked}");
        let total: usize = got.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(total, n as usize * t, "T scored bytes per window");
    }
}

/// Training with the state carried: each lane reads its books in consecutive windows (the
/// next window's first byte is this one's last target), every training window once per
/// epoch, a new context at each book's start and every `cap` bytes, and window k is a pure
/// function of (seed, lane, k).
#[test]
fn lanes_stream_through_the_books_window_after_window() {
    use vort_lab::tasks::lanes::LanePlan;
    let t = 64;
    let c = corpus(t);
    // book a: 3000 bytes = 46 windows of 64 (+ 1 byte of target); book b: 1000 = 15
    let plan = c.lane_plan(t, 4 * t as u64).unwrap();
    assert_eq!(plan.epoch_windows(), 46 + 15);
    for lane in 0..3 {
        let mut seen = std::collections::BTreeSet::new();
        let mut prev: Option<vort_lab::tasks::Sample> = None;
        for k in 0..plan.epoch_windows() {
            let (s, fresh) = c.lane_sample(&plan, 11, lane, k);
            let (book, w, starts) = plan.window(11, lane, k);
            assert_eq!(fresh, starts);
            assert_eq!(
                fresh,
                w % 4 == 0,
                "lane {lane} window {k}: a context is 4 windows"
            );
            assert!(
                seen.insert((book, w)),
                "lane {lane}: window ({book}, {w}) twice"
            );
            if let (Some(p), false) = (&prev, fresh) {
                assert_eq!(s.tokens[0], p.targets[t - 1], "lane {lane} window {k}");
            }
            assert_eq!((s.clone(), fresh), c.lane_sample(&plan, 11, lane, k));
            prev = Some(s);
        }
        assert_eq!(
            seen.len() as u64,
            plan.epoch_windows(),
            "every window once an epoch"
        );
    }
    // a lane's next epoch reads the books in an order of its own (some seed shows it)
    let order = |seed, e: u64| -> Vec<usize> {
        (0..plan.epoch_windows())
            .map(|k| plan.window(seed, 0, e * plan.epoch_windows() + k).0)
            .collect()
    };
    assert!((0..8).any(|seed| order(seed, 0) != order(seed, 1)));
    assert!(
        LanePlan::new(&[10, 20], t, 1024).is_err(),
        "no book holds a window"
    );
    assert!(
        LanePlan::new(&[1000], t, 10).is_err(),
        "a cap below one window"
    );
    assert!(LanePlan::new(&[1000], 0, 1024).is_err(), "an empty window");
}
