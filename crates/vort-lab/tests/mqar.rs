//! MQAR as Zoology generates it, data files in Zoology's format, and the pieces of Zoology's
//! recipe (short convolution, RetNet decays, weight decay on matrices only, early stopping).

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use safetensors::tensor::{Dtype, TensorView};
use vort::model::{Config, Model, ModelConfig};
use vort::Mixer;
use vort_lab::tasks::external::LabelledSet;
use vort_lab::tasks::mqar::{gap_weights, weighted_without_replacement};
use vort_lab::tasks::{MqarTask, Source, Stream, TaskConfig, TaskError, TaskSpec};
use vort_lab::train::checkpoint::Checkpoint;
use vort_lab::train::{self, RunConfig, RunOptions, TrainConfig};
use vort_math::rng::SplitMix64;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-mqar-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mqar(seq_len: usize, k: usize, v: usize, a: f64) -> TaskConfig {
    TaskConfig {
        spec: TaskSpec::Mqar(MqarTask {
            vocab_size: v,
            num_kv_pairs: k,
            power_a: a,
            random_non_queries: false,
            ..MqarTask::default()
        }),
        seq_len,
    }
}

/// The MQAR settings of `c`, to edit.
fn q(c: &mut TaskConfig) -> &mut MqarTask {
    c.mqar_mut().expect("an MQAR config")
}

/// Zoology's layout: pairs first, key i repeated at slot 2·g_i of the query region with its
/// value as the label there, keys in [1, V/2) and values in [V/2, V) distinct, every other
/// position ignored, filler 0, and lags = query position - value position.
#[test]
fn sequences_follow_zoologys_layout() {
    let c = mqar(64, 4, 128, 0.01);
    c.validate().unwrap();
    for index in 0..200 {
        let s = c.sample(7, Stream::Train, index);
        let k = 4;
        let keys: Vec<u32> = (0..k).map(|i| s.tokens[2 * i]).collect();
        let values: Vec<u32> = (0..k).map(|i| s.tokens[2 * i + 1]).collect();
        assert!(keys.iter().all(|&x| (1..64).contains(&x)), "{keys:?}");
        assert!(values.iter().all(|&x| (64..128).contains(&x)), "{values:?}");
        let mut kd = keys.clone();
        kd.sort_unstable();
        kd.dedup();
        let mut vd = values.clone();
        vd.sort_unstable();
        vd.dedup();
        assert_eq!((kd.len(), vd.len()), (k, k), "keys and values are distinct");
        let answers: Vec<usize> = (0..64).filter(|&p| s.mask[p]).collect();
        assert_eq!(answers.len(), k, "every key is queried once");
        for &p in &answers {
            assert!(
                p >= 2 * k && (p - 2 * k) % 2 == 0,
                "query at an even slot: {p}"
            );
            let i = keys.iter().position(|&x| x == s.tokens[p]).unwrap();
            assert_eq!(s.targets[p], values[i]);
            assert_eq!(s.lags[p] as usize, p - (2 * i + 1));
        }
        for p in 2 * k..64 {
            if !s.mask[p] {
                assert_eq!(s.tokens[p], 0, "filler is 0 without random_non_queries");
            }
        }
        assert_eq!(
            s,
            c.sample(7, Stream::Train, index),
            "a pure function of the index"
        );
    }
    // random filler: Zoology draws it from the whole vocabulary
    let mut r = c.clone();
    q(&mut r).random_non_queries = true;
    let s = r.sample(7, Stream::Train, 3);
    assert!((8..64).filter(|&p| !s.mask[p]).any(|p| s.tokens[p] != 0));
    // train, validation and test never share a sequence
    assert_ne!(c.sample(7, Stream::Train, 0), c.sample(7, Stream::Eval, 0));
    assert_ne!(c.sample(7, Stream::Valid, 0), c.sample(7, Stream::Eval, 0));
    // the training set is train_examples sequences, seen in epochs
    let mut e = c.clone();
    q(&mut e).train_examples = 10;
    assert_eq!(
        e.sample(1, Stream::Train, 3),
        e.sample(1, Stream::Train, 13)
    );
}

/// The gap law p(g) ∝ (g+1)^(a-1): uniform at a = 1; at a = 0.01 the first gap is drawn about
/// as often as its law says (one gap per sequence, so no without-replacement effect).
#[test]
fn gaps_follow_the_power_law() {
    let w = gap_weights(30, 0.01);
    let z: f64 = w.iter().sum();
    let mut rng = SplitMix64::new(3);
    let n = 20_000;
    let mut first = 0;
    for _ in 0..n {
        let g = weighted_without_replacement(&mut rng, &w, 1);
        first += usize::from(g[0] == 0);
    }
    let p = w[0] / z;
    let se = (p * (1.0 - p) / n as f64).sqrt();
    let got = first as f64 / n as f64;
    assert!((got - p).abs() < 4.0 * se, "P(g = 0) {got} vs {p} ± {se}");
    // without replacement: k distinct gaps
    let g = weighted_without_replacement(&mut rng, &gap_weights(10, 1.0), 10);
    let mut s = g.clone();
    s.sort_unstable();
    assert_eq!(s, (0..10).collect::<Vec<_>>());
}

#[test]
fn zoologys_asserts_are_config_errors() {
    for (c, field) in [
        (mqar(63, 4, 128, 0.01), "seq_len"),
        (mqar(64, 4, 8, 0.01), "vocab_size"),
        (mqar(64, 17, 128, 0.01), "num_kv_pairs"),
        (mqar(64, 0, 128, 0.01), "num_kv_pairs"),
        (mqar(64, 4, 128, 0.0), "power_a"),
        (mqar(64, 4, 128, f64::NAN), "power_a"),
    ] {
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
}

/// Samples as Zoology's `inputs` and `labels` ([N·L] each, -100 where nothing is scored).
fn zoology_arrays(samples: &[vort_lab::tasks::Sample]) -> (Vec<i64>, Vec<i64>) {
    let inputs = samples
        .iter()
        .flat_map(|s| s.tokens.iter().map(|&x| i64::from(x)))
        .collect();
    let labels = samples
        .iter()
        .flat_map(|s| {
            s.targets
                .iter()
                .zip(&s.mask)
                .map(|(&t, &m)| if m { i64::from(t) } else { -100 })
        })
        .collect();
    (inputs, labels)
}

fn write_set(path: &Path, inputs: &[i64], labels: &[i64], n: usize, l: usize, dtype: Dtype) {
    let enc = |x: &[i64]| -> Vec<u8> {
        match dtype {
            Dtype::I32 => x.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
            Dtype::F32 => x.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
            _ => x.iter().flat_map(|&v| v.to_le_bytes()).collect(),
        }
    };
    let (a, b) = (enc(inputs), enc(labels));
    let views = vec![
        ("inputs", TensorView::new(dtype, vec![n, l], &a).unwrap()),
        ("labels", TensorView::new(dtype, vec![n, l], &b).unwrap()),
    ];
    std::fs::write(path, safetensors::serialize(views, &None).unwrap()).unwrap();
}

/// A file in Zoology's format is read as the generator's sequences, with the same lags; every
/// malformed file is one typed error naming what is wrong.
#[test]
fn zoology_files_round_trip_and_bad_ones_are_refused() {
    let d = tmp("files");
    let c = mqar(32, 3, 64, 0.5);
    let samples: Vec<_> = (0..5).map(|i| c.sample(2, Stream::Eval, i)).collect();
    let (inputs, labels) = zoology_arrays(&samples);
    for dtype in [Dtype::I64, Dtype::I32] {
        let f = d.join(format!("ok-{dtype:?}.safetensors"));
        write_set(&f, &inputs, &labels, 5, 32, dtype);
        let set = LabelledSet::load(&f, 64).unwrap();
        assert_eq!((set.n, set.l), (5, 32));
        for (i, s) in samples.iter().enumerate() {
            let r = set.sample(i as u64);
            assert_eq!(r.tokens, s.tokens);
            assert_eq!(r.mask, s.mask);
            assert_eq!(r.lags, s.lags, "lags recovered from the pairs");
        }
    }
    let f = d.join("bad.safetensors");
    let expect = |msg: &str, vocab: usize| {
        let e = LabelledSet::load(&f, vocab).unwrap_err();
        assert!(matches!(e, TaskError::BadFile(_)), "{e:?}");
        assert!(e.to_string().contains(msg), "{e} lacks {msg}");
        assert_eq!(e.to_string().lines().count(), 1);
    };
    write_set(&f, &inputs, &labels, 5, 32, Dtype::F32);
    expect("integer tensor", 64);
    write_set(&f, &inputs, &labels, 5, 32, Dtype::I64);
    expect("outside the model's vocabulary", 32);
    let mut big = labels.clone();
    big[8] = 64;
    write_set(&f, &inputs, &big, 5, 32, Dtype::I64);
    expect("neither -100", 64);
    write_set(&f, &inputs, &labels, 10, 16, Dtype::I64);
    let st = std::fs::read(&f).unwrap();
    assert!(!st.is_empty());
    // mismatched shapes
    let a: Vec<u8> = inputs.iter().flat_map(|v| v.to_le_bytes()).collect();
    let b: Vec<u8> = labels[..4 * 32]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let views = vec![
        (
            "inputs",
            TensorView::new(Dtype::I64, vec![5, 32], &a).unwrap(),
        ),
        (
            "labels",
            TensorView::new(Dtype::I64, vec![4, 32], &b).unwrap(),
        ),
    ];
    std::fs::write(&f, safetensors::serialize(views, &None).unwrap()).unwrap();
    expect("but `labels` is [4, 32]", 64);
    // a missing tensor; an empty one
    let views = vec![(
        "inputs",
        TensorView::new(Dtype::I64, vec![5, 32], &a).unwrap(),
    )];
    std::fs::write(&f, safetensors::serialize(views, &None).unwrap()).unwrap();
    expect("no tensor `labels`", 64);
    let views = vec![
        (
            "inputs",
            TensorView::new(Dtype::I64, vec![0, 32], &[]).unwrap(),
        ),
        (
            "labels",
            TensorView::new(Dtype::I64, vec![0, 32], &[]).unwrap(),
        ),
    ];
    std::fs::write(&f, safetensors::serialize(views, &None).unwrap()).unwrap();
    expect("empty", 64);
    std::fs::write(&f, b"not safetensors").unwrap();
    expect("header of", 64);
    // a training file of another length than the run's is refused when the source opens
    let ok = d.join("ok-I64.safetensors");
    let mut other = mqar(64, 3, 128, 0.5);
    q(&mut other).train_data = ok.display().to_string();
    let e = Source::open(&other).unwrap_err().to_string();
    assert!(e.contains("seq_len is 64"), "{e}");
}

fn tiny_model(memory: &str, conv: usize) -> ModelConfig {
    ModelConfig {
        mixer: Mixer::of_kind(memory).unwrap(),
        d_model: 16,
        layers: 2,
        heads: 2,
        head_dim: 8,
        features: 8,
        chunk: 8,
        mlp_mult: 0,
        token_shift: false,
        short_conv: conv,
        ..ModelConfig::default()
    }
}

/// The short convolution is causal (a change at position p moves nothing before p) and a
/// stream fed in pieces carries its window: pieces give the one-pass hidden states.
#[test]
fn short_convolution_is_causal_and_streams() {
    let dev = Device::Cpu;
    for memory in ["retnet", "vort", "softmax"] {
        let cfg = tiny_model(memory, 4);
        let vm = VarMap::new();
        let model = Model::seeded(&Config::new(cfg.clone(), 50, 40), 3, &vm, &dev).unwrap();
        let toks: Vec<u32> = (0..40).map(|i| (i * 7 % 50) as u32).collect();
        let t = Tensor::from_vec(toks.clone(), (1, 40), &dev).unwrap();
        let full: Vec<f32> = model
            .forward(&t)
            .unwrap()
            .hidden
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut changed = toks.clone();
        changed[25] = 49;
        let t2 = Tensor::from_vec(changed, (1, 40), &dev).unwrap();
        let h2: Vec<f32> = model
            .forward(&t2)
            .unwrap()
            .hidden
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(&full[..25 * 16], &h2[..25 * 16], "{memory}: causal");
        assert_ne!(&full[25 * 16..26 * 16], &h2[25 * 16..26 * 16]);
        let mut st = model.new_state();
        let mut pieces = Vec::new();
        for (lo, len) in [(0, 3), (3, 1), (4, 17), (21, 19)] {
            let p = t.narrow(1, lo, len).unwrap();
            let h: Vec<f32> = model
                .forward_with_state(&p, &mut st)
                .unwrap()
                .hidden
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            pieces.extend(h);
        }
        let worst = full
            .iter()
            .zip(&pieces)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 2e-4,
            "{memory}: pieces differ from one pass by {worst}"
        );
    }
    assert!(tiny_model("vort", 1).validate().is_err());
    assert!(tiny_model("vort", 17).validate().is_err());
}

/// RetNet's decays are fixed: γ_h = 1 - 2^(-5-h), no parameter of its own, one node per head.
#[test]
fn retnet_decays_are_fixed_per_head() {
    let dev = Device::Cpu;
    let vm = VarMap::new();
    let model = Model::seeded(&Config::new(tiny_model("retnet", 0), 20, 16), 1, &vm, &dev).unwrap();
    assert_eq!(model.blocks().next().unwrap().nodes(), 1);
    let names: Vec<String> = train::named_vars(&vm).into_iter().map(|(n, _)| n).collect();
    assert!(
        !names
            .iter()
            .any(|n| n.contains("decay_rho") || n.contains("mix_logits")),
        "{names:?}"
    );
    // the rates themselves are checked in vort's block tests (retnet_rates_are_retnets)
    let t = Tensor::from_vec((0..16u32).collect(), (1, 16), &dev).unwrap();
    let h: Vec<f32> = model
        .forward(&t)
        .unwrap()
        .hidden
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(h.iter().all(|x| x.is_finite()));
}

fn tiny_run(memory: &str, steps: u64) -> RunConfig {
    let mut c = RunConfig {
        seed: 0,
        task: {
            let mut t = mqar(32, 2, 40, 1.0);
            (q(&mut t).test_examples, q(&mut t).train_examples) = (64, 0);
            t
        },
        model: tiny_model(memory, 3),
        train: TrainConfig {
            steps,
            batch_size: 16,
            lr: 1e-2,
            warmup_steps: 0,
            min_lr_ratio: 0.0,
            weight_decay: 0.1,
            decay_matrices_only: true,
            checkpoint_every: 1000,
            log_every: 10,
            entity_aux_weight: 0.0,
            ..TrainConfig::default()
        },
    };
    c.model.qk_scale_init = 4.0;
    c
}

/// The rule weight decay followed before the model listed its decayed parameters (matched on
/// names): rank 2 and none of the router's, decays', mixture's, convolution's or bigram's.
fn old_weight_matrix_rule(name: &str, shape: &[usize]) -> bool {
    shape.len() == 2
        && !name.contains(".router.")
        && !name.ends_with(".conv")
        && !name.ends_with("decay_rho")
        && !name.ends_with("mix_logits")
        && name != Model::BIGRAM_PARAM
}

/// With decay on matrices only, exactly the model's listed parameters decay (embeddings,
/// projections, MLPs, head), the same set as the old name rule for every mixer, with a
/// convolution, an MLP, the token shift and the router's bigram table in the model.
#[test]
fn weight_decay_follows_the_models_list_of_matrices() {
    for kind in [
        "vort",
        "power-law",
        "exponential",
        "retnet",
        "mixture",
        "softmax",
    ] {
        let mut c = tiny_run(kind, 1);
        c.model.mlp_mult = 2;
        c.model.token_shift = true;
        if let Mixer::Vort { routing, .. } = &mut c.model.mixer {
            *routing = vort::Routing::Full; // the bigram table too
        }
        let vm = VarMap::new();
        let _model = train::run_model(&c, &vm, &Device::Cpu).unwrap();
        let opt = train::optimizer(&c, &vm).unwrap();
        for s in &opt.slots {
            assert_eq!(
                s.decays,
                old_weight_matrix_rule(&s.name, s.var.as_tensor().dims()),
                "{kind}: {}",
                s.name
            );
        }
        assert!(opt.slots.iter().any(|s| s.decays) && opt.slots.iter().any(|s| !s.decays));
    }
}

/// Softmax attention with Zoology's recipe solves a tiny MQAR, and stops early once the
/// validation accuracy reaches the target: the run is finished (evaluated) at that step.
#[test]
fn softmax_learns_tiny_mqar_and_stops_early() {
    let d = tmp("early");
    let mut c = tiny_run("softmax", 600);
    c.train.eval_every = 25;
    c.train.val_sequences = 64;
    c.train.early_stop_accuracy = 0.95;
    let s = train::run_with(&c, &d, false, &RunOptions::default()).unwrap();
    let e = s.eval.expect("an early-stopped run is evaluated");
    assert!(s.steps < 600, "stopped at {}", s.steps);
    assert_eq!(s.steps % 25, 0);
    assert_eq!(e.step, s.steps);
    assert!(e.accuracy > 0.85, "test accuracy {}", e.accuracy);
    assert_eq!(e.positions, 64 * 2);
    let metrics = std::fs::read_to_string(d.join(train::METRICS_FILE)).unwrap();
    let last: train::Metrics = serde_json::from_str(metrics.lines().last().unwrap()).unwrap();
    assert!(last.val_acc.unwrap() >= 0.95);
    // the same model scored on a file of its own test sequences gives the same accuracy
    let samples: Vec<_> = (0..64)
        .map(|i| c.task.sample(c.seed, Stream::Eval, i))
        .collect();
    let (inputs, labels) = zoology_arrays(&samples);
    let f = d.join("test.safetensors");
    write_set(&f, &inputs, &labels, 64, 32, Dtype::I32);
    let r = train::eval::run_on_file(&d, &f).unwrap();
    assert_eq!(r.positions, e.positions);
    assert!(
        (r.accuracy - e.accuracy).abs() < 1e-12,
        "{} vs {}",
        r.accuracy,
        e.accuracy
    );
    let counts = |b: &[vort_lab::train::eval::LagAccuracy]| -> Vec<(usize, usize)> {
        b.iter().map(|x| (x.n, x.correct)).collect()
    };
    assert_eq!(counts(&r.buckets), counts(&e.buckets));
    // streamed in pieces with the state carried, the same answers come out
    let (model, vm) = train::eval::load_params_as(&d, &c).unwrap();
    let source = Source::open(&c.task).unwrap();
    let score = |piece| {
        train::eval::evaluate_stream(
            &model,
            &source,
            &c,
            0,
            Stream::Eval,
            64,
            piece,
            &Device::Cpu,
        )
        .unwrap()
    };
    let (one, streamed) = (score(None), score(Some(7)));
    assert_eq!(counts(&one.buckets), counts(&e.buckets));
    assert_eq!(counts(&streamed.buckets), counts(&one.buckets));
    assert!(
        (streamed.loss - one.loss).abs() < 1e-4,
        "{} vs {}",
        streamed.loss,
        one.loss
    );
    // a model with non-finite outputs is refused with a typed error (exit 1 in the CLI), not
    // scored as a NaN accuracy (weights scaled by 1e30 are not enough: the RMSNorms absorb
    // them; NaN weights stand for any corruption that survives the checksum)
    for var in vm.data().lock().unwrap().values() {
        var.set(&(var.as_tensor() * f64::NAN).unwrap()).unwrap();
    }
    for piece in [None, Some(7)] {
        match train::eval::evaluate_stream(
            &model,
            &source,
            &c,
            0,
            Stream::Eval,
            8,
            piece,
            &Device::Cpu,
        ) {
            Err(e @ train::TrainError::NonFinite(_)) => assert!(!e.is_bad_input()),
            other => panic!(
                "piece {piece:?}: expected NonFinite, got {:?}",
                other.map(|r| r.accuracy)
            ),
        }
    }
    // released weights alone (no optimizer state, no checkpoint) score the same
    let ck_path = d.join(train::CHECKPOINT_FILE);
    let ck = vort_lab::train::checkpoint::Checkpoint::load(&ck_path).unwrap();
    ck.weights_only()
        .save(&d.join(train::WEIGHTS_FILE))
        .unwrap();
    std::fs::remove_file(&ck_path).unwrap();
    let w = train::eval::run_on_file(&d, &f).unwrap();
    assert_eq!(counts(&w.buckets), counts(&r.buckets));
    // the checkpoint holds each parameter with both moments and each buffer (the FAVOR+
    // projections) alone; the weights hold both
    let w = ck.weights_only();
    let buffers = w
        .tensors
        .keys()
        .filter(|k| vort::block::is_buffer(k))
        .count();
    assert_eq!(
        buffers, 0,
        "softmax applies no feature map: no projection is stored"
    );
    assert_eq!(3 * (w.tensors.len() - buffers) + buffers, ck.tensors.len());
}

/// A training mixture of lengths (Zoology trains MQAR on several (L, K) at once): step s draws
/// from entry s mod n with the same tokens per step, each entry's sequences follow its own
/// (L, K), batches are a pure function of (seed, step), and the held-out streams stay at the
/// config's (L, K).
#[test]
fn training_mixture_cycles_lengths_and_keeps_tokens_per_step() {
    use vort_lab::tasks::MixLength;
    let mut c = mqar(128, 8, 128, 1.0);
    q(&mut c).train_examples = 0;
    q(&mut c).train_mix = vec![
        MixLength {
            seq_len: 32,
            num_kv_pairs: 2,
        },
        MixLength {
            seq_len: 64,
            num_kv_pairs: 4,
        },
        MixLength {
            seq_len: 128,
            num_kv_pairs: 8,
        },
    ];
    c.validate().unwrap();
    let src = Source::open(&c).unwrap();
    for step in 0..7u64 {
        let b = src.batch(3, Stream::Train, step, 2);
        let want = [(32, 8, 2), (64, 4, 4), (128, 2, 8)][(step % 3) as usize];
        assert_eq!((b.t, b.b), (want.0, want.1), "step {step}");
        assert_eq!(b.b * b.t, 2 * 128, "tokens per step");
        // each sequence has K answers
        assert_eq!(b.mask.iter().filter(|&&m| m).count(), want.1 * want.2);
        let again = src.batch(3, Stream::Train, step, 2);
        assert_eq!(b.tokens, again.tokens);
    }
    // the same entry at its next turn draws new sequences
    assert_ne!(
        src.batch(3, Stream::Train, 0, 2).tokens,
        src.batch(3, Stream::Train, 3, 2).tokens
    );
    for stream in [Stream::Valid, Stream::Eval] {
        let b = src.batch(3, stream, 0, 2);
        assert_eq!((b.t, b.b), (128, 2));
    }
    // entries longer than seq_len, invalid (L, K), other tasks and train files are refused
    let refused = |f: &dyn Fn(&mut TaskConfig), field: &str| {
        let mut x = c.clone();
        f(&mut x);
        let e = x.validate().unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    };
    refused(&|x| q(x).train_mix[0].seq_len = 256, "train_mix[0].seq_len");
    refused(
        &|x| q(x).train_mix[1].num_kv_pairs = 17,
        "train_mix[1]: num_kv_pairs",
    );
    refused(
        &|x| q(x).train_mix[2].seq_len = 127,
        "train_mix[2]: seq_len",
    );
    refused(&|x| q(x).train_data = "f.safetensors".into(), "train_mix");
    // a training mixture belongs to MQAR: the reader refuses it on another kind
    let zipf = "kind = \"zipf\"\ntrain_mix = [{ seq_len = 32, num_kv_pairs = 2 }]\n";
    let e = toml::from_str::<TaskConfig>(zipf).unwrap_err().to_string();
    assert!(
        e.contains("task.train_mix") && e.contains("kind = \"zipf\""),
        "{e}"
    );
    // a config without a mixture serialises as before (old checkpoints still match)
    let mut plain = c.clone();
    q(&mut plain).train_mix.clear();
    let text = toml::to_string(&plain).unwrap();
    assert!(!text.contains("train_mix"), "{text}");
    let back: TaskConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
}

/// The validation accuracies a run logged, by step.
fn val_scores(dir: &Path) -> Vec<(u64, f64)> {
    train::RunDir::new(dir)
        .metrics()
        .into_iter()
        .filter_map(|m| m.val_acc.map(|v| (m.step, v)))
        .collect()
}

/// A preset that changes only a cell's early-stop threshold keeps what it can: a run that
/// stopped early under the old threshold is continued, bit for bit, into the run the new one
/// trains from scratch; a run that reached neither threshold is the same run; a run the new
/// threshold would have stopped before its checkpoint, or one that differs in anything else,
/// is not adopted and is left as it was.
#[test]
fn a_changed_early_stop_keeps_or_continues_the_run() {
    let steps = 60;
    let mut never = tiny_run("softmax", steps);
    never.train.eval_every = 10;
    never.train.val_sequences = 32;
    never.train.checkpoint_every = 10;
    let full = tmp("adopt-full");
    train::run_with(&never, &full, false, &RunOptions::default()).unwrap();
    let scores = val_scores(&full);
    assert_eq!(scores.len(), 6, "{scores:?}");
    // a threshold first reached before the last step: the run trained with it stops there
    let (stop, threshold) = scores
        .iter()
        .enumerate()
        .find(|(i, (s, v))| *s < steps && *v > 0.0 && scores[..*i].iter().all(|p| p.1 < *v))
        .map(|(_, p)| *p)
        .expect("a validation score above all earlier ones before the end");
    let mut early = never.clone();
    early.train.early_stop_accuracy = threshold;
    let cut = tmp("adopt-cut");
    let s = train::run_with(&early, &cut, false, &RunOptions::default()).unwrap();
    assert_eq!(s.steps, stop);
    assert!(cut.join(train::EVAL_FILE).exists());

    // without early stop, the stopped run is continued, not trained again
    assert_eq!(
        train::adopt_early_stop(&cut, &never).unwrap(),
        train::Adopted::Continues
    );
    assert!(
        !cut.join(train::EVAL_FILE).exists(),
        "its evaluation was the stopped run's"
    );
    let saved = std::fs::read_to_string(cut.join(train::CONFIG_FILE)).unwrap();
    assert_eq!(RunConfig::from_toml(&saved, "config.toml").unwrap(), never);
    let s = train::run_with(&never, &cut, true, &RunOptions::default()).unwrap();
    assert_eq!(s.steps, steps);
    let ck = |d: &Path| Checkpoint::load(&d.join(train::CHECKPOINT_FILE)).unwrap();
    let (a, b) = (ck(&full), ck(&cut));
    assert_eq!((a.step, a.adam_t), (b.step, b.adam_t));
    assert_eq!(a.tensors.len(), b.tensors.len());
    for (name, t) in &a.tensors {
        assert_eq!(
            t.data, b.tensors[name].data,
            "{name} differs after the continuation"
        );
    }
    assert_eq!(val_scores(&cut), scores);

    // a threshold the full run never reached: the same run, its evaluation kept
    let best = scores.iter().map(|p| p.1).fold(0.0, f64::max);
    if best < 1.0 {
        let mut higher = never.clone();
        higher.train.early_stop_accuracy = (best + 1.0) / 2.0;
        assert_eq!(
            train::adopt_early_stop(&full, &higher).unwrap(),
            train::Adopted::Same
        );
        assert!(full.join(train::EVAL_FILE).exists());
        let saved = std::fs::read_to_string(full.join(train::CONFIG_FILE)).unwrap();
        assert_eq!(RunConfig::from_toml(&saved, "config.toml").unwrap(), higher);
        assert_eq!(ck(&full).config, higher.to_toml().unwrap());
        // and back again
        assert_eq!(
            train::adopt_early_stop(&full, &never).unwrap(),
            train::Adopted::Same
        );
    }

    // the threshold that stopped `cut` would stop the full run before its checkpoint (at
    // step 60): that state is gone, so the run is not adopted, and nothing is rewritten
    let before = std::fs::read(full.join(train::CONFIG_FILE)).unwrap();
    assert_eq!(
        train::adopt_early_stop(&full, &early).unwrap(),
        train::Adopted::No
    );
    // another field than the threshold: not adopted either
    let mut other = never.clone();
    other.train.lr *= 2.0;
    assert_eq!(
        train::adopt_early_stop(&full, &other).unwrap(),
        train::Adopted::No
    );
    assert_eq!(
        std::fs::read(full.join(train::CONFIG_FILE)).unwrap(),
        before
    );
    // a run another process holds is refused with RunBusy
    let _held = train::RunLock::acquire(&full).unwrap();
    assert!(matches!(
        train::adopt_early_stop(&full, &early),
        Err(train::TrainError::RunBusy(_))
    ));
    for d in [full, cut] {
        let _ = std::fs::remove_dir_all(d);
    }
}
