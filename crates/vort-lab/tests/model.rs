//! The model: every memory kind builds and runs with the expected shapes; VORT returns orders
//! in [δ, 1] per layer; initialisation is a function of the seed; the router bias override.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use vort::model::{Config, Model, ModelConfig};
use vort::Mixer;
use vort_lab::train::named_vars;

fn cfg(memory: &str) -> ModelConfig {
    ModelConfig {
        mixer: Mixer::of_kind(memory).unwrap(),
        d_model: 16,
        layers: 2,
        heads: 2,
        head_dim: 8,
        features: 8,
        chunk: 16,
        ..ModelConfig::default()
    }
}

#[test]
fn every_kind_runs_with_expected_shapes() {
    let dev = Device::Cpu;
    let tokens = Tensor::from_vec(
        (0..2 * 37).map(|i| (i % 11) as u32).collect::<Vec<_>>(),
        (2, 37),
        &dev,
    )
    .unwrap();
    for kind in vort_lab::reproduce::KINDS {
        let vm = VarMap::new();
        let m = Model::seeded(&Config::new(cfg(kind), 11, 37), 3, &vm, &dev).unwrap();
        let out = m.forward(&tokens).unwrap();
        assert_eq!(out.hidden.dims(), &[2, 37, 16], "{kind}");
        let logits = m.logits_at(&out.hidden, &[0, 40, 73]).unwrap();
        assert_eq!(logits.dims(), &[3, 11]);
        if kind == "vort" {
            assert_eq!(out.alphas.len(), 2);
            assert_eq!(out.entity_logits.len(), 2);
            let a: Vec<f32> = out.alphas[0].flatten_all().unwrap().to_vec1().unwrap();
            assert!(a.iter().all(|&x| (0.1..=1.0).contains(&x)), "{a:?}");
            assert!(out.bigram_logits.is_some());
        } else {
            assert!(
                out.alphas.is_empty() && out.bigram_logits.is_none(),
                "{kind}"
            );
        }
    }
}

#[test]
fn initialisation_is_a_function_of_the_seed() {
    let dev = Device::Cpu;
    let params = |seed: u64| -> Vec<Vec<f32>> {
        let vm = VarMap::new();
        Model::seeded(&Config::new(cfg("vort"), 11, 37), seed, &vm, &dev).unwrap();
        named_vars(&vm)
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all().unwrap().to_vec1().unwrap())
            .collect()
    };
    assert_eq!(params(4), params(4));
    assert_ne!(params(4), params(5));
}

#[test]
fn router_bias_override_reaches_the_layer() {
    let dev = Device::Cpu;
    let vm = VarMap::new();
    let mut c = cfg("vort");
    if let Mixer::Vort {
        router_bias_init, ..
    } = &mut c.mixer
    {
        *router_bias_init = 2.5;
    }
    let m = Model::seeded(&Config::new(c.clone(), 11, 37), 0, &vm, &dev).unwrap();
    let bias: Vec<f32> = named_vars(&vm)
        .into_iter()
        .find(|(n, _)| n == "blocks.1.mix.router.c")
        .unwrap()
        .1
        .as_tensor()
        .to_vec1()
        .unwrap();
    assert_eq!(bias, vec![2.5, 2.5]);
    // a larger bias means larger initial orders
    let tokens = Tensor::zeros((1, 20), candle_core::DType::U32, &dev).unwrap();
    let mean = |m: &Model| -> f32 {
        m.forward(&tokens).unwrap().alphas[0]
            .mean_all()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    let vm0 = VarMap::new();
    let m0 = Model::seeded(&Config::new(cfg("vort"), 11, 37), 0, &vm0, &dev).unwrap();
    assert!(mean(&m) > mean(&m0) + 0.1);
}

/// Relative RMS difference of two tensors.
fn rel_rms(a: &Tensor, b: &Tensor) -> f64 {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    let num: f64 = a
        .iter()
        .zip(&b)
        .map(|(x, y)| f64::from(x - y).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (num / den).sqrt()
}

/// The streaming forward (recurrent state carried between pieces, token shift across the
/// boundary) equals one training pass for every kind, including the sliding-window softmax,
/// on pieces that do not divide the chunk; the retention state does not grow with the stream.
#[test]
fn streaming_in_pieces_equals_one_pass() {
    let dev = Device::Cpu;
    let t = 37;
    let tokens = Tensor::from_vec(
        (0..2 * t)
            .map(|i| ((i * 7) % 11) as u32)
            .collect::<Vec<_>>(),
        (2, t),
        &dev,
    )
    .unwrap();
    for kind in vort_lab::reproduce::KINDS {
        for window in [0, 5] {
            if window > 0 && kind != "softmax" {
                continue;
            }
            let mut c = cfg(kind);
            if window > 0 {
                c.mixer = Mixer::Softmax { window };
            }
            let vm = VarMap::new();
            let m = Model::seeded(&Config::new(c.clone(), 11, t), 5, &vm, &dev).unwrap();
            let whole = m.forward(&tokens).unwrap().hidden;
            let mut st = m.new_state();
            let mut parts = Vec::new();
            let mut sizes = Vec::new();
            let mut s = 0;
            for len in [5, 1, 16, 15] {
                let out = m
                    .forward_with_state(&tokens.narrow(1, s, len).unwrap(), &mut st)
                    .unwrap();
                parts.push(out.hidden);
                sizes.push(st.bytes());
                s += len;
            }
            let streamed = Tensor::cat(&parts.iter().collect::<Vec<_>>(), 1).unwrap();
            let err = rel_rms(&streamed, &whole);
            // f32 fused chunked vs plain recurrent forms of the same kernel: rounding only
            assert!(err < 1e-5, "{kind} window {window}: rel-RMS {err:.2e}");
            if kind != "softmax" || window > 0 {
                assert!(
                    sizes.windows(2).all(|w| w[1] <= w[0].max(sizes[0])),
                    "{kind}: state grew {sizes:?}"
                );
            }
        }
    }
}

/// `stream_text` scores every byte on its successor with the state carried across pieces:
/// its mean BPC equals the cross-entropy of one pass over the whole text.
#[test]
fn stream_text_bpc_equals_one_pass_cross_entropy() {
    use vort_lab::train::stream::stream_text;
    let dev = Device::Cpu;
    let text: Vec<u8> = b"It was the best of times, it was the worst of times; Alice said so."
        .iter()
        .cycle()
        .take(150)
        .copied()
        .collect();
    let vm = VarMap::new();
    let m = Model::seeded(&Config::new(cfg("vort"), 256, 150), 9, &vm, &dev).unwrap();
    let n = text.len() - 1;
    let tokens: Vec<u32> = text[..n].iter().map(|&b| u32::from(b)).collect();
    let out = m
        .forward(&Tensor::from_vec(tokens, (1, n), &dev).unwrap())
        .unwrap();
    let logits = m
        .logits_at(&out.hidden, &(0..n).collect::<Vec<_>>())
        .unwrap();
    let tgt: Vec<u32> = text[1..].iter().map(|&b| u32::from(b)).collect();
    let ce = candle_nn::loss::cross_entropy(&logits, &Tensor::from_vec(tgt, n, &dev).unwrap())
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let want = f64::from(ce) / std::f64::consts::LN_2;
    let r = stream_text(&m, &text, 16, &dev, |_| {}).unwrap();
    assert!((r.bits - want).abs() < 1e-5 * want, "{} vs {want}", r.bits);
    assert_eq!(r.bins.iter().map(|b| b.n).sum::<usize>(), n);
    assert_eq!(r.state_bytes.len(), n.div_ceil(16));
    assert!(
        r.state_bytes.iter().all(|s| s.1 == r.state_bytes[0].1),
        "flat state"
    );
    assert!(stream_text(&m, &text, 0, &dev, |_| {}).is_err());
}

/// A stream reset every R pieces scores each run of R pieces as a text of its own (the
/// context counted from the reset); R = 0, or R past the last piece, is the carried stream.
#[test]
fn a_stream_reset_every_r_pieces_is_its_segments_streamed_alone() {
    use vort_lab::train::stream::{stream_text, stream_text_resetting};
    let dev = Device::Cpu;
    let text: Vec<u8> = b"Call me Ishmael. Some years ago, never mind how long precisely; "
        .iter()
        .cycle()
        .take(130)
        .copied()
        .collect();
    for kind in ["vort", "exponential"] {
        let vm = VarMap::new();
        let m = Model::seeded(&Config::new(cfg(kind), 256, 130), 4, &vm, &dev).unwrap();
        let carried = stream_text(&m, &text, 16, &dev, |_| {}).unwrap();
        for r in [0, 9, 100] {
            let same = stream_text_resetting(&m, &text, 16, r, &dev, |_| {}).unwrap();
            assert!((same.bits - carried.bits).abs() < 1e-9, "{kind} R = {r}");
        }
        // R = 2: segments of 32 scored bytes; segment k streams text[32k..=32k+32]
        let reset = stream_text_resetting(&m, &text, 16, 2, &dev, |_| {}).unwrap();
        let (mut nats, mut n) = (0.0, 0);
        for lo in (0..129).step_by(32) {
            let hi = (lo + 33).min(130);
            let alone = stream_text(&m, &text[lo..hi], 16, &dev, |_| {}).unwrap();
            nats += alone.bits * (hi - lo - 1) as f64;
            n += hi - lo - 1;
        }
        assert_eq!(n, 129);
        let want = nats / n as f64;
        assert!(
            (reset.bits - want).abs() < 1e-5,
            "{kind}: {} vs {want}",
            reset.bits
        );
        assert!(
            (reset.bits - carried.bits).abs() > 1e-6,
            "{kind}: the resets change it"
        );
        // contexts restart at every reset: none exceeds 32
        assert!(reset.bins.iter().all(|b| b.lo <= 32), "{:?}", reset.bins);
    }
}

/// `Model::step` token by token gives the logits of one training pass, for every memory kind
/// (the sliding-window softmax too), with a state that does not grow for the retention kinds.
#[test]
fn step_by_step_decoding_equals_one_pass() {
    let dev = Device::Cpu;
    let t = 29;
    let toks: Vec<u32> = (0..t).map(|i| ((i * 5 + 3) % 11) as u32).collect();
    for kind in vort_lab::reproduce::KINDS {
        for window in [0, 4] {
            if window > 0 && kind != "softmax" {
                continue;
            }
            let mut c = cfg(kind);
            if window > 0 {
                c.mixer = Mixer::Softmax { window };
            }
            let vm = VarMap::new();
            let m = Model::seeded(&Config::new(c.clone(), 11, t), 2, &vm, &dev).unwrap();
            let whole = m
                .forward(&Tensor::from_vec(toks.clone(), (1, t), &dev).unwrap())
                .unwrap()
                .hidden;
            let want = m.logits_at(&whole, &(0..t).collect::<Vec<_>>()).unwrap();
            let mut st = m.new_state();
            let mut rows = Vec::new();
            let mut sizes = Vec::new();
            for &tok in &toks {
                rows.push(m.step(tok, &mut st).unwrap());
                sizes.push(st.bytes());
            }
            let got = Tensor::stack(&rows, 0).unwrap();
            let err = rel_rms(&got, &want);
            // the fused chunked pass against one-token pieces of the plain form: rounding only
            assert!(err < 1e-5, "{kind} window {window}: rel-RMS {err:.2e}");
            if kind != "softmax" || window > 0 {
                assert!(
                    sizes.iter().skip(window).all(|&s| s == sizes[window]),
                    "{kind}: state grew {sizes:?}"
                );
            }
        }
    }
    let vm = VarMap::new();
    let m = Model::seeded(&Config::new(cfg("vort"), 11, t), 2, &vm, &dev).unwrap();
    assert!(
        m.step(11, &mut m.new_state()).is_err(),
        "outside the vocabulary"
    );
}

/// `Model::decode` runs B streams at once: each row's logits are those of its own batch-1
/// stream (`step`), for every mixer kind, and its refusals are typed.
#[test]
fn batched_decode_is_each_stream_on_its_own() {
    let dev = Device::Cpu;
    let t = 13;
    let rows = 3;
    let seq = |r: usize| -> Vec<u32> { (0..t).map(|i| ((i * (r + 2) + r) % 11) as u32).collect() };
    for kind in vort_lab::reproduce::KINDS {
        let vm = VarMap::new();
        let m = Model::seeded(&Config::new(cfg(kind), 11, t), 2, &vm, &dev).unwrap();
        // the B = 3 streams together, after a batched prefill of their first 5 tokens
        let prefix: Vec<u32> = (0..rows).flat_map(|r| seq(r)[..5].to_vec()).collect();
        let mut st = m.new_state();
        m.forward_with_state(&Tensor::from_vec(prefix, (rows, 5), &dev).unwrap(), &mut st)
            .unwrap();
        let mut together = Vec::new();
        for i in 5..t {
            let col: Vec<u32> = (0..rows).map(|r| seq(r)[i]).collect();
            let logits = m.decode(&Tensor::from_vec(col, rows, &dev).unwrap(), &mut st);
            let logits = logits.unwrap();
            assert_eq!(logits.dims(), [rows, 11], "{kind}");
            together.push(logits);
        }
        // each stream alone, at batch 1
        for r in 0..rows {
            let mut one = m.new_state();
            let head = Tensor::from_vec(seq(r)[..5].to_vec(), (1, 5), &dev).unwrap();
            m.forward_with_state(&head, &mut one).unwrap();
            for (k, i) in (5..t).enumerate() {
                let alone = m.step(seq(r)[i], &mut one).unwrap();
                let got = together[k].get(r).unwrap();
                let err = rel_rms(&got, &alone);
                // the same recurrence per row; only the products' blocking may differ
                assert!(err < 1e-6, "{kind} row {r} position {i}: rel-RMS {err:.2e}");
            }
        }
        let bad = [
            Tensor::from_vec(vec![1u32, 2], (1, 2), &dev).unwrap(),
            Tensor::from_vec(vec![1f32, 2., 3.], 3, &dev).unwrap(),
            Tensor::from_vec(vec![1u32, 11, 2], 3, &dev).unwrap(),
            Tensor::from_vec(vec![1u32, 2], 2, &dev).unwrap(),
        ];
        for tokens in &bad {
            let e = m.decode(tokens, &mut st).unwrap_err().to_string();
            assert!(
                e.contains("[B]") || e.contains("vocabulary") || e.contains("batch"),
                "{kind}: {e}"
            );
        }
    }
}

/// A stream longer than the memory's certified horizon is refused before anything is scored;
/// after `set_horizon` the same model streams it, with identical scores on the prefix.
#[test]
fn streams_respect_the_horizon() {
    use vort_lab::train::stream::stream_text;
    let dev = Device::Cpu;
    let text: Vec<u8> = (0..200u32).map(|i| (i * 31 % 251) as u8).collect();
    for kind in ["vort", "power-law"] {
        let vm = VarMap::new();
        let mut m = Model::seeded(&Config::new(cfg(kind), 256, 64), 1, &vm, &dev).unwrap();
        assert_eq!(m.horizon(), Some(64));
        let e = stream_text(&m, &text, 16, &dev, |_| {}).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
        assert!(
            e.to_string().contains("199") && e.to_string().contains("64"),
            "{e}"
        );
        let short = stream_text(&m, &text[..65], 16, &dev, |_| {}).unwrap();
        m.set_horizon(vort::nodes::STREAM_HORIZON).unwrap();
        assert_eq!(m.horizon(), Some(vort::nodes::STREAM_HORIZON));
        let long = stream_text(&m, &text, 16, &dev, |_| {}).unwrap();
        assert_eq!(long.bins.iter().map(|b| b.n).sum::<usize>(), 199);
        // the first 64 bytes, scored with either table: same to the tables' certificates
        let first = |r: &vort_lab::train::stream::StreamResult| {
            r.bins.iter().take(6).map(|b| b.bits).collect::<Vec<_>>()
        };
        for (a, b) in first(&short).iter().zip(first(&long)) {
            assert!((a - b).abs() < 1e-3 * a.abs(), "{kind}: {a} vs {b}");
        }
    }
    // exponentials have no certified horizon: any length streams
    let vm = VarMap::new();
    let m = Model::seeded(&Config::new(cfg("exponential"), 256, 64), 1, &vm, &dev).unwrap();
    assert_eq!(m.horizon(), None);
    assert!(stream_text(&m, &text, 16, &dev, |_| {}).is_ok());
}

/// `Model::normaliser_mass` reads the retention state's normaliser: none before any token or
/// for softmax; positive, the same whether the text came in pieces or in one call (it is a
/// function of the state), and its slow share a fraction that shrinks as the window it is
/// measured against grows (every node is slower than 0 tokens).
#[test]
fn normaliser_mass_reads_the_state_and_its_slow_share_is_a_fraction() {
    let dev = Device::Cpu;
    let t = 37;
    let tokens = Tensor::from_vec(
        (0..t).map(|i| ((i * 5) % 13) as u32).collect::<Vec<_>>(),
        (1, t),
        &dev,
    )
    .unwrap();
    for kind in vort_lab::reproduce::KINDS {
        let vm = VarMap::new();
        let m = Model::seeded(&Config::new(cfg(kind), 13, t), 3, &vm, &dev).unwrap();
        let empty = m.new_state();
        assert!(m
            .normaliser_mass(&empty, 8.0)
            .unwrap()
            .iter()
            .all(Option::is_none));
        let mut whole = m.new_state();
        m.forward_with_state(&tokens, &mut whole).unwrap();
        let mut pieces = m.new_state();
        for (lo, len) in [(0, 10), (10, 1), (11, 26)] {
            m.forward_with_state(&tokens.narrow(1, lo, len).unwrap(), &mut pieces)
                .unwrap();
        }
        let (a, b) = (
            m.normaliser_mass(&whole, 8.0).unwrap(),
            m.normaliser_mass(&pieces, 8.0).unwrap(),
        );
        assert_eq!(a.len(), 2, "{kind}: one entry per block");
        for (x, y) in a.iter().zip(&b) {
            let (Some(x), Some(y)) = (x, y) else {
                assert!(kind == "softmax" && x.is_none() && y.is_none(), "{kind}");
                continue;
            };
            assert!(x.mass.is_finite() && x.mass > 0.0, "{kind}: {x:?}");
            assert!(
                (x.mass - y.mass).abs() <= 1e-5 * x.mass,
                "{kind}: {x:?} {y:?}"
            );
            assert!((x.slow_share - y.slow_share).abs() <= 1e-6, "{kind}");
        }
        if kind == "softmax" {
            continue;
        }
        let shares: Vec<Vec<f64>> = [0.0, 1.0, 10.0, 1e3, 1e6]
            .iter()
            .map(|&w| {
                m.normaliser_mass(&whole, w)
                    .unwrap()
                    .iter()
                    .map(|x| x.unwrap().slow_share)
                    .collect()
            })
            .collect();
        for block in 0..2 {
            let s: Vec<f64> = shares.iter().map(|v| v[block]).collect();
            assert_eq!(s[0], 1.0, "{kind}: every node is slower than 0 tokens");
            assert!(
                s.windows(2).all(|w| w[1] <= w[0]) && s.iter().all(|x| (0.0..=1.0).contains(x)),
                "{kind}: {s:?}"
            );
        }
    }
}
