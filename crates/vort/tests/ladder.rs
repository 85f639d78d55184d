//! The ablation ladder's rungs in the layer (issue #39): a learned order per head (no router)
//! and oracle routing (α fixed by the token's class).
//! - The learned order's gradient in its parameter c (α_h = δ + (1-δ) σ(c_h)) against central
//!   finite differences, through the block's plain candle form in f64, then the fused f32 op
//!   that training uses against that f64 gradient.
//! - Oracle routing gives exactly the stated α per class, and refuses a call without marks.

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use vort::block::{Block, BlockConfig};
use vort::features::FeatureMap;
use vort::model::{Config, Model, ModelConfig};
use vort::tol::{F32_GRAD_REL, FD_GRAD_REL, FD_STEP};
use vort::{Mixer, NodeMode, NodeSpec, Routing};

fn vort(routing: Routing) -> Mixer {
    Mixer::Vort {
        nodes: NodeSpec {
            mode: NodeMode::Shared,
            banks: 4,
            delta: 0.1,
            horizon: 128,
            eps: 1e-4,
        },
        routing,
        router_bias_init: 0.4,
    }
}

/// A small block with awkward sizes: 3 heads, head dim 5, T = 37 with chunk 8.
fn cfg(mixer: Mixer, fused: bool) -> BlockConfig {
    BlockConfig {
        d_model: 10,
        heads: 3,
        head_dim: 5,
        features: 7,
        feature_map: FeatureMap::Favor,
        mixer,
        chunk: 8,
        eps_den: 1e-6,
        qk_scale_init: 1.0,
        seed: 11,
        fused,
    }
}

/// Deterministic inputs in [-1, 1]: x [B, T, d_model] and a cotangent of the same shape.
fn pattern(n: usize, salt: f64) -> Vec<f64> {
    (0..n)
        .map(|i| (i as f64 * 0.7548776662 + salt).fract() * 2.0 - 1.0)
        .collect()
}

/// Σ y·w of the block built from `vm` in `dtype`, and d/dc of it (autodiff).
fn loss_and_grad(vm: &VarMap, c: &BlockConfig, dtype: DType) -> (f64, Vec<f64>) {
    let dev = Device::Cpu;
    let blk = Block::new(c.clone(), VarBuilder::from_varmap(vm, dtype, &dev).pp("b")).unwrap();
    let (b, t, dm) = (2, 37, c.d_model);
    let x = Tensor::from_vec(pattern(b * t * dm, 0.1), (b, t, dm), &dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let w = Tensor::from_vec(pattern(b * t * dm, 0.37), (b, t, dm), &dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let out = blk.forward_with_entropy(&x, None).unwrap();
    assert!(out.entity_logit.is_none(), "a learned order has no probe");
    let loss = (out.y * w).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let cvar = vm.data().lock().unwrap()["b.router.c"].clone();
    let g = grads.get(cvar.as_tensor()).expect("a gradient reaches c");
    let g = g.to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap();
    let loss = loss
        .to_dtype(DType::F64)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap();
    (loss, g)
}

/// A VarMap of the block's parameters in f64 (seeded in f32, then widened), with c = `c`.
fn params_f64(c: &BlockConfig, cvals: &[f64]) -> VarMap {
    let seeded = VarMap::new();
    Block::init(c, &seeded, "b", &Device::Cpu).unwrap();
    let vm = VarMap::new();
    for (name, var) in seeded.data().lock().unwrap().iter() {
        let mut t = var.as_tensor().to_dtype(DType::F64).unwrap();
        if name == "b.router.c" {
            t = Tensor::from_vec(cvals.to_vec(), cvals.len(), &Device::Cpu).unwrap();
        }
        vm.data()
            .lock()
            .unwrap()
            .insert(name.clone(), candle_core::Var::from_tensor(&t).unwrap());
    }
    vm
}

#[test]
fn learned_order_gradient_matches_finite_differences() {
    // plain candle chunked form in f64: autodiff against central differences of the same
    // forward (α moves by ~2e-7 per step, inside one segment of the interpolated c_n(α))
    let c64 = cfg(vort(Routing::Learned), false);
    let c0 = [0.4, -1.1, 2.0]; // orders ≈ 0.64, 0.29, 0.89
    let (_, ad) = loss_and_grad(&params_f64(&c64, &c0), &c64, DType::F64);
    for h in 0..3 {
        let at = |d: f64| {
            let mut cc = c0;
            cc[h] += d;
            loss_and_grad(&params_f64(&c64, &cc), &c64, DType::F64).0
        };
        let fd = (at(FD_STEP) - at(-FD_STEP)) / (2.0 * FD_STEP);
        assert!(
            (ad[h] - fd).abs() <= FD_GRAD_REL * fd.abs().max(1e-3) + 1e-8,
            "head {h}: autodiff {} vs finite differences {fd}",
            ad[h]
        );
        assert!(
            fd.abs() > 1e-4,
            "head {h}: the order moves the output ({fd})"
        );
    }
    // the fused f32 op (what training runs) against the f64 gradient
    let c32 = cfg(vort(Routing::Learned), true);
    let vm = VarMap::new();
    Block::init(&c32, &vm, "b", &Device::Cpu).unwrap();
    let t = Tensor::from_vec(c0.iter().map(|&v| v as f32).collect(), 3, &Device::Cpu).unwrap();
    vm.data().lock().unwrap()["b.router.c"].set(&t).unwrap();
    let (_, g32) = loss_and_grad(&vm, &c32, DType::F32);
    let num: f64 = g32.iter().zip(&ad).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = ad.iter().map(|b| b * b).sum();
    // relative RMS over the three heads: f32 against f64 of the same kernel
    assert!(
        (num / den).sqrt() <= F32_GRAD_REL,
        "fused f32 {g32:?} vs f64 {ad:?}"
    );
}

#[test]
fn learned_order_is_one_alpha_per_head_and_has_only_c() {
    let c = cfg(vort(Routing::Learned), true);
    let vm = VarMap::new();
    Block::init(&c, &vm, "b", &Device::Cpu).unwrap();
    let names: Vec<String> = vm.data().lock().unwrap().keys().cloned().collect();
    assert!(names.iter().any(|n| n == "b.router.c"));
    assert!(!names
        .iter()
        .any(|n| n.contains("router.probe") || n.contains("router.g")));
    let blk = Block::new(
        c.clone(),
        VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu).pp("b"),
    )
    .unwrap();
    let x = Tensor::from_vec(pattern(2 * 9 * 10, 0.2), (2, 9, 10), &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let a = blk.forward_with_entropy(&x, None).unwrap().alpha.unwrap();
    assert_eq!(a.dims(), [2, 3, 9]);
    let a: Vec<Vec<Vec<f32>>> = a.to_vec3().unwrap();
    // router_bias_init 0.4: α = 0.1 + 0.9 σ(0.4) at every token of every head
    let want = 0.1 + 0.9 / (1.0 + (-0.4f64).exp());
    for row in a.iter().flatten() {
        for &v in row {
            assert!((f64::from(v) - want).abs() < 1e-6, "{v} vs {want}");
        }
    }
}

fn model_cfg(routing: Routing) -> ModelConfig {
    let mut m = ModelConfig {
        d_model: 10,
        layers: 2,
        heads: 2,
        head_dim: 5,
        features: 6,
        chunk: 8,
        ..ModelConfig::default()
    };
    m.mixer = vort(routing);
    m
}

#[test]
fn oracle_routing_gives_the_stated_alpha_per_class() {
    let (entity, other) = (0.8, 0.35);
    let mc = model_cfg(Routing::Oracle { entity, other });
    let dev = Device::Cpu;
    let model = Model::seeded(&Config::new(mc.clone(), 20, 64), 5, &VarMap::new(), &dev).unwrap();
    let (b, t) = (2, 13);
    let toks: Vec<u32> = (0..b * t).map(|i| (i * 7 % 20) as u32).collect();
    let marked: Vec<bool> = (0..b * t).map(|i| i % 3 == 1 || i == 0).collect();
    let tokens = Tensor::from_vec(toks, (b, t), &dev).unwrap();
    let marks = Tensor::from_vec(
        marked.iter().map(|&m| u8::from(m)).collect::<Vec<u8>>(),
        (b, t),
        &dev,
    )
    .unwrap();
    let out = model.forward_marked(&tokens, Some(&marks), None).unwrap();
    assert_eq!(out.alphas.len(), 2, "one α tensor per block");
    assert!(out.entity_logits.is_empty(), "the oracle has no probe");
    for a in &out.alphas {
        let a: Vec<Vec<Vec<f32>>> = a.to_vec3().unwrap();
        for (i, heads) in a.iter().enumerate() {
            for row in heads {
                for (j, &v) in row.iter().enumerate() {
                    let want = if marked[i * t + j] { entity } else { other };
                    assert_eq!(f64::from(v), f64::from(want as f32), "seq {i} pos {j}");
                }
            }
        }
    }
    // streaming in pieces with the marks gives the same hidden states as one pass
    let mut st = model.new_state();
    let first = model
        .forward_marked(
            &tokens.narrow(1, 0, 6).unwrap(),
            Some(&marks.narrow(1, 0, 6).unwrap()),
            Some(&mut st),
        )
        .unwrap();
    let rest = model
        .forward_marked(
            &tokens.narrow(1, 6, t - 6).unwrap(),
            Some(&marks.narrow(1, 6, t - 6).unwrap()),
            Some(&mut st),
        )
        .unwrap();
    let streamed = Tensor::cat(&[&first.hidden, &rest.hidden], 1).unwrap();
    let diff = (streamed - &out.hidden)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff < 1e-4, "streamed vs one pass: {diff}");
    // without marks, or with marks of another shape, the oracle refuses
    assert!(model.forward(&tokens).is_err());
    let short = marks.narrow(1, 0, 5).unwrap();
    assert!(model.forward_marked(&tokens, Some(&short), None).is_err());
    // marks change nothing for a mixer that does not read them
    let plain = Model::seeded(
        &Config::new(model_cfg(Routing::EntityOnly), 20, 64),
        5,
        &VarMap::new(),
        &dev,
    )
    .unwrap();
    let a = plain.forward(&tokens).unwrap().hidden;
    let b2 = plain
        .forward_marked(&tokens, Some(&marks), None)
        .unwrap()
        .hidden;
    let same = (a - b2).unwrap().abs().unwrap().max_all().unwrap();
    assert_eq!(same.to_scalar::<f32>().unwrap(), 0.0);
}

#[test]
fn rule_orders_outside_delta_are_refused() {
    let vm = VarMap::new();
    let c = cfg(
        vort(Routing::Oracle {
            entity: 0.8,
            other: 0.05,
        }),
        true,
    );
    let err = Block::seeded(c, &vm, "b", &Device::Cpu).err().unwrap();
    assert!(err.to_string().contains("oracle other"), "{err}");
    let bad = vort(Routing::Oracle {
        entity: 1.5,
        other: 0.3,
    });
    assert!(bad.validate().is_err());
    // the routings' serialised forms (a run config's TOML has the same shape)
    let m: Mixer = serde_json::from_str(
        r#"{"kind": "vort", "routing": {"oracle": {"entity": 0.8, "other": 0.35}}}"#,
    )
    .unwrap();
    assert_eq!(
        m.routing(),
        Some(Routing::Oracle {
            entity: 0.8,
            other: 0.35
        })
    );
    let m: Mixer = serde_json::from_str(r#"{"kind": "vort", "routing": "learned"}"#).unwrap();
    assert_eq!(m.routing(), Some(Routing::Learned));
}
