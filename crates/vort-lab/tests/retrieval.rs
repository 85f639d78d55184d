//! The retrieval probe (issue #40): the texts it builds, the bytes it scores, and its bits
//! against the streaming evaluation's on a tiny model.

use candle_core::Device;
use candle_nn::VarMap;
use vort::model::{Config, Model, ModelConfig};
use vort_lab::train::retrieval::{
    copy_bits, longest_stream, markdown, name_lags, names_text, probe, repeated_string, NameRow,
    RetrievalOptions,
};
use vort_lab::train::stream::{byte_bits, stream_text};

fn tiny(kind: &str) -> Model {
    let cfg = ModelConfig {
        mixer: vort::Mixer::of_kind(kind).unwrap(),
        d_model: 16,
        layers: 2,
        heads: 2,
        head_dim: 8,
        features: 8,
        chunk: 8,
        mlp_mult: 1,
        ..ModelConfig::default()
    };
    Model::seeded(
        &Config::new(cfg, 256, 4096),
        2,
        &VarMap::new(),
        &Device::Cpu,
    )
    .unwrap()
}

/// A string of random letters written `copies` times, and the bits of each copy taken from
/// the right bytes (copy 1 without the unscored first byte).
#[test]
fn repeats_are_copies_of_random_letters_and_each_copy_is_scored_apart() {
    let s = repeated_string(40, 5, 7);
    assert_eq!(s.len(), 200);
    assert!(s.iter().all(u8::is_ascii_lowercase));
    for k in 1..5 {
        assert_eq!(s[..40], s[40 * k..40 * (k + 1)]);
    }
    assert_ne!(repeated_string(40, 5, 8), s, "the seed draws the string");
    // bits[i] is byte i + 1's: give byte j the value j, so copy k's mean is its bytes' mean
    let bits: Vec<f32> = (1..200).map(|j| j as f32).collect();
    let means = copy_bits(&bits, 40, 5);
    assert_eq!(means[0], (1..40).sum::<usize>() as f64 / 39.0);
    assert_eq!(means[4], (160..200).sum::<usize>() as f64 / 40.0);
}

/// Each name is written over the text twice, `lag` apart, at the positions reported; the
/// text keeps its length and its other bytes; a lag the text cannot hold is skipped.
#[test]
fn names_are_written_twice_lag_apart_over_the_text() {
    let text: Vec<u8> = (0..20_000)
        .map(|i| b"the quick brown fox "[i % 20])
        .collect();
    let (out, rows, skipped) = names_text(&text, &[1024, 8192, 50_000], 1, 0);
    assert_eq!(out.len(), text.len());
    assert_eq!(skipped, vec![50_000]);
    assert_eq!(rows.len(), 2);
    let mut changed = vec![false; text.len()];
    for r in &rows {
        let name = format!(" {} ", r.name);
        assert_eq!(r.at.1 - r.at.0, r.lag);
        for at in [r.at.0, r.at.1] {
            assert_eq!(&out[at..at + name.len()], name.as_bytes());
            changed[at..at + name.len()]
                .iter_mut()
                .for_each(|c| *c = true);
        }
        let words: Vec<&str> = r.name.split(' ').collect();
        assert_eq!(words.len(), 2);
        assert!(words.iter().all(|w| w.as_bytes()[0].is_ascii_uppercase()));
    }
    assert_ne!(rows[0].name, rows[1].name);
    for (i, c) in changed.iter().enumerate() {
        if !c {
            assert_eq!(out[i], text[i], "byte {i}");
        }
    }
    // one name a lag draws the same names at the same places as before the option existed
    // (the committed probes: lag 1024's name at byte 256, lag 8192's at 320)
    assert_eq!((rows[0].at.0, rows[1].at.0), (256, 320));

    // 8 names a lag, lags that are multiples of the 64-byte slots (so second occurrences fall
    // on the slots): every name written twice, lag apart, none over another occurrence, every
    // name new; a lag whose copies would run past the text is skipped
    let long: Vec<u8> = (0..70_000).map(|i| text[i % text.len()]).collect();
    let lags = [1024, 8192, 65536, 69_990];
    let (out, rows, skipped) = names_text(&long, &lags, 8, 3);
    assert_eq!(skipped, vec![69_990]);
    assert_eq!(rows.len(), 24);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for r in &rows {
        let name = format!(" {} ", r.name);
        assert_eq!(r.at.1 - r.at.0, r.lag);
        for at in [r.at.0, r.at.1] {
            assert_eq!(&out[at..at + name.len()], name.as_bytes());
            assert!(spans.iter().all(|&(a, b)| at + name.len() <= a || b <= at));
            spans.push((at, at + name.len()));
        }
    }
    let mut names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 24, "every name is new");
    // the stream the probe needs covers every second occurrence
    let opts = RetrievalOptions {
        periods: vec![],
        lags: lags.to_vec(),
        names_per_lag: 8,
        ..RetrievalOptions::default()
    };
    let end = rows
        .iter()
        .map(|r| r.at.1 + r.name.len() + 2)
        .max()
        .unwrap();
    assert!(longest_stream(&opts, long.len()) >= end);
}

/// Several names a lag: the mean difference later − first and its SE over the names, by
/// hand; one name a lag has no SE.
#[test]
fn name_lags_average_the_names_of_each_lag() {
    let row = |lag: usize, first: f64, later: f64| NameRow {
        lag,
        name: "X".into(),
        at: (0, lag),
        first,
        later,
    };
    // lag 100: differences −1, −2, −3 (mean −2, sd 1, SE 1/√3); lag 50: one name, +0.5
    let rows = [
        row(100, 9.0, 8.0),
        row(50, 8.0, 8.5),
        row(100, 10.0, 8.0),
        row(100, 8.0, 5.0),
    ];
    let l = name_lags(&rows);
    assert_eq!(l.len(), 2);
    assert_eq!(
        (l[0].lag, l[0].names, l[1].lag, l[1].names),
        (100, 3, 50, 1)
    );
    assert!((l[0].diff + 2.0).abs() < 1e-12 && (l[0].se - 1.0 / 3f64.sqrt()).abs() < 1e-12);
    assert!((l[0].first - 9.0).abs() < 1e-12 && (l[0].later - 7.0).abs() < 1e-12);
    assert!((l[1].diff - 0.5).abs() < 1e-12 && l[1].se.is_nan());
}

/// byte_bits is the streaming evaluation per byte: its mean is stream_text's BPC, and the
/// piece length changes nothing but rounding; the probe reports every copy and name, finite,
/// and refuses what it cannot probe.
#[test]
fn the_probe_scores_the_streams_bytes() {
    let dev = Device::Cpu;
    for kind in ["vort", "exponential"] {
        let model = tiny(kind);
        let text: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 96 + 32) as u8).collect();
        let bits = byte_bits(&model, &text, 64, &dev, |_| {}).unwrap();
        assert_eq!(bits.len(), text.len() - 1);
        let mean = bits.iter().map(|&b| f64::from(b)).sum::<f64>() / bits.len() as f64;
        let whole = stream_text(&model, &text, 64, &dev, |_| {}).unwrap();
        assert!((mean - whole.bits).abs() < 1e-5 * whole.bits, "{kind}");
        let other = byte_bits(&model, &text, 37, &dev, |_| {}).unwrap();
        let worst = bits
            .iter()
            .zip(&other)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-3, "{kind}: pieces of 64 vs 37 differ by {worst}");

        let opts = RetrievalOptions {
            periods: vec![16, 100],
            copies: 3,
            lags: vec![512, 2000, 100_000],
            seed: 1,
            names_per_lag: 1,
        };
        assert_eq!(longest_stream(&opts, text.len()), 256 + 64 + 2000 + 20);
        // the committed probes' horizon (the test books, 1,458,027 bytes): the 1M lag's name
        // at slot 4, 256 + 4·64 + 10^6 + 20 (unchanged by the names-per-lag option)
        let books = RetrievalOptions::default();
        assert_eq!(longest_stream(&books, 1_458_027), 1_000_532);
        let cut = RetrievalOptions::default().within(128 * 1024);
        assert_eq!(cut.periods, vec![40, 64, 256, 1024, 4096, 16384]);
        assert_eq!(cut.lags, vec![1024, 8192, 65536]);
        let mut calls = 0;
        let r = probe(&model, &text, &opts, 64, &dev, |_, _| calls += 1).unwrap();
        assert!(calls > 0);
        assert_eq!(r.repeats.len(), 2);
        assert!(r.repeats.iter().all(|x| x.bits.len() == 3));
        assert_eq!(r.lags_skipped, vec![100_000]);
        assert_eq!(r.names.len(), 2);
        let values = r
            .repeats
            .iter()
            .flat_map(|x| x.bits.clone())
            .chain(r.names.iter().flat_map(|n| [n.first, n.later]));
        assert!(values.into_iter().all(|b| b.is_finite() && b > 0.0));
        let md = markdown(&r);
        assert!(
            md.contains("| 100 |") && md.contains(&r.names[0].name),
            "{md}"
        );

        let bad = RetrievalOptions {
            copies: 1,
            ..opts.clone()
        };
        assert!(probe(&model, &text, &bad, 64, &dev, |_, _| {}).is_err());
    }
}
