//! The block: every memory (VORT banks/shared, baselines) in the same code path; streaming in
//! pieces equals one pass; gradients reach every parameter; the feature map's properties; the
//! baselines' kernels chained naive <- recurrent <- chunked.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use common::*;
use vort::block::{causal_softmax, Block, BlockConfig, BlockState, Memory, Routing};
use vort::chunked::{chunked_raw, normalise, with_ones};
use vort::features::{orthogonal_gaussian, FeatureMap, Features};
use vort::naive::{naive, Kernel};
use vort::recurrent::{recurrent, State};
use vort::tol::*;
use vort::{Dims, MemoryMode, NodeTable};

fn memories() -> Vec<Memory> {
    let vort = |mode, routing| Memory::Vort {
        mode,
        banks: 3,
        delta: 0.2,
        horizon: 256,
        eps: 1e-4,
        routing,
    };
    vec![
        vort(MemoryMode::Shared, Routing::Full),
        vort(MemoryMode::Banks, Routing::Full),
        vort(MemoryMode::Shared, Routing::EntityOnly),
        vort(MemoryMode::Banks, Routing::EntropyOnly),
        vort(MemoryMode::Shared, Routing::Fixed { alpha: 0.6 }),
        Memory::PowerLaw {
            alpha: 0.5,
            horizon: 256,
            eps: 1e-4,
        },
        Memory::Exponential,
        Memory::ExpMixture {
            m: 5,
            min_rate: 1e-3,
        },
        Memory::Softmax,
    ]
}

fn cfg(memory: Memory, map: FeatureMap) -> BlockConfig {
    BlockConfig {
        d_model: 12,
        heads: 2,
        head_dim: 6,
        features: 10,
        feature_map: map,
        memory,
        chunk: 8,
        eps_den: 1e-6,
        qk_scale_init: 1.0,
        seed: 3,
        fused: true,
    }
}

fn input(b: usize, t: usize, dm: usize, seed: u64) -> (Tensor, Tensor) {
    let mut r = Rng::new(seed);
    let x: Vec<f32> = (0..b * t * dm)
        .map(|_| (2.0 * r.unif() - 1.0) as f32)
        .collect();
    let e: Vec<f32> = (0..b * t).map(|_| (3.0 * r.unif()) as f32).collect();
    (
        Tensor::from_vec(x, (b, t, dm), &Device::Cpu).unwrap(),
        Tensor::from_vec(e, (b, t), &Device::Cpu).unwrap(),
    )
}

#[test]
fn every_memory_streams_in_pieces_like_one_pass() {
    for map in [FeatureMap::Favor, FeatureMap::Elu] {
        for mem in memories() {
            let vm = VarMap::new();
            let blk = Block::new(cfg(mem.clone(), map), &vm, "blk", &Device::Cpu).unwrap();
            let (x, ent) = input(2, 29, 12, 5);
            let one = blk.forward_with_state(&x, Some(&ent), None).unwrap();
            // the training forward (fused op where the rates are fixed) gives the same y
            let train = blk.forward(&x, Some(&ent)).unwrap();
            let e = rel_rms_tensor(&train.y, &one.y).unwrap();
            assert!(
                e <= F32_SAME_KERNEL_REL,
                "{map:?} {mem:?}: fused vs plain {e:e}"
            );
            assert_eq!(one.y.dims(), &[2, 29, 12]);
            if let Some(a) = &one.alpha {
                let a = to_f64(a);
                assert!(a.iter().all(|&v| (0.2..=1.0).contains(&v)), "{mem:?}");
            }
            let mut state: Option<BlockState> = None;
            let mut ys = Vec::new();
            let mut t0 = 0;
            for l in [1, 1, 9, 13, 5] {
                let out = blk
                    .forward_with_state(
                        &x.narrow(1, t0, l).unwrap(),
                        Some(&ent.narrow(1, t0, l).unwrap()),
                        state.as_ref(),
                    )
                    .unwrap();
                ys.push(out.y);
                state = out.state;
                t0 += l;
            }
            let y = Tensor::cat(&ys, 1).unwrap();
            let e = rel_rms_tensor(&y, &one.y).unwrap();
            assert!(e <= STREAMING_F32_REL, "{map:?} {mem:?}: {e:e}");
        }
    }
}

#[test]
fn gradients_reach_every_parameter() {
    for mem in memories() {
        let vm = VarMap::new();
        let blk = Block::new(
            cfg(mem.clone(), FeatureMap::Favor),
            &vm,
            "blk",
            &Device::Cpu,
        )
        .unwrap();
        let (x, ent) = input(1, 20, 12, 6);
        let out = blk.forward(&x, Some(&ent)).unwrap();
        let mut loss = out.y.sqr().unwrap().sum_all().unwrap();
        if let Some(l) = &out.entity_logit {
            loss = (loss + l.sum_all().unwrap()).unwrap();
        }
        let grads = loss.backward().unwrap();
        let data = vm.data().lock().unwrap();
        for (name, var) in data.iter() {
            let skip_entropy_free = matches!(
                mem,
                Memory::Vort {
                    routing: Routing::EntityOnly,
                    ..
                }
            ) && name.ends_with("router.b");
            let skip_entity_free = matches!(
                mem,
                Memory::Vort {
                    routing: Routing::EntropyOnly,
                    ..
                }
            ) && name.ends_with("router.a");
            if skip_entropy_free || skip_entity_free {
                continue;
            }
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("{mem:?}: no grad for {name}"));
            let n: f64 = to_f64(g).iter().map(|x| x * x).sum::<f64>().sqrt();
            assert!(n > 0.0 && n.is_finite(), "{mem:?}: grad of {name} = {n}");
        }
    }
}

#[test]
fn favor_rows_are_orthogonal_in_blocks_and_features_positive() {
    let d = 8;
    let w = orthogonal_gaussian(20, d, 9).unwrap();
    for blk in 0..2 {
        for i in 0..d {
            for j in 0..i {
                let (ri, rj) = (blk * d + i, blk * d + j);
                let dot: f64 = (0..d).map(|x| w[ri * d + x] * w[rj * d + x]).sum();
                assert!(dot.abs() < 1e-10, "rows {ri}, {rj}: {dot}");
            }
        }
    }
    let f = Features::new(FeatureMap::Favor, d, 20, 1, &Device::Cpu).unwrap();
    let z = Tensor::randn(0f32, 3f32, (5, d), &Device::Cpu).unwrap();
    let phi = to_f64(&f.apply(&z).unwrap());
    assert!(phi.iter().all(|&p| p >= 0.0) && phi.iter().any(|&p| p > 0.0));
}

#[test]
fn favor_estimates_the_softmax_kernel() {
    // E[φ(q)·φ(k)] = exp(q·k). One draw of m iid features has relative standard deviation
    // sqrt((exp(|q+k|²) - 1) / m) (FAVOR+, Choromanski et al. 2021, Lemma 1; orthogonal rows
    // only lower it): ≈ 6.7% at |q+k|² = 3.6, m = 8192. Averaging R = 16 independent feature
    // draws divides it by 4, so the 5% tolerance below is at least 3 standard deviations.
    let (d, m, draws) = (8, 8192, 16u64);
    let maps: Vec<Features> = (0..draws)
        .map(|seed| Features::new(FeatureMap::Favor, d, m, seed + 2, &Device::Cpu).unwrap())
        .collect();
    let mut r = Rng::new(4);
    for _ in 0..5 {
        let mut q: Vec<f64> = (0..d).map(|_| r.unif() - 0.5).collect();
        let mut k: Vec<f64> = (0..d).map(|_| r.unif() - 0.5).collect();
        for z in [&mut q, &mut k] {
            let n = z.iter().map(|x| x * x).sum::<f64>().sqrt();
            z.iter_mut().for_each(|x| *x /= n);
        }
        let t = |z: &Vec<f64>| {
            Tensor::from_vec(z.clone(), (1, d), &Device::Cpu)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
        };
        let est = maps
            .iter()
            .map(|f| {
                let pq = to_f64(&f.apply(&t(&q)).unwrap());
                let pk = to_f64(&f.apply(&t(&k)).unwrap());
                dot(&pq, &pk)
            })
            .sum::<f64>()
            / draws as f64;
        let exact = dot(&q, &k).exp();
        assert!((est / exact - 1.0).abs() < 0.05, "{est} vs {exact}");
    }
}

#[test]
fn softmax_matches_f64_reference() {
    let (b, h, t, d) = (1, 2, 7, 3);
    let mut r = Rng::new(8);
    let mk = |r: &mut Rng| -> Vec<f64> { (0..b * h * t * d).map(|_| r.unif() - 0.5).collect() };
    let (q, k, v) = (mk(&mut r), mk(&mut r), mk(&mut r));
    let tt = |x: &Vec<f64>| Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap();
    let y = to_f64(&causal_softmax(&tt(&q), &tt(&k), &tt(&v)).unwrap());
    for bh in 0..b * h {
        for i in 0..t {
            let logits: Vec<f64> = (0..=i)
                .map(|j| {
                    (0..d)
                        .map(|x| q[(bh * t + i) * d + x] * k[(bh * t + j) * d + x])
                        .sum()
                })
                .collect();
            let m = logits.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
            for x in 0..d {
                let want: f64 = (0..=i)
                    .map(|j| (logits[j] - m).exp() / z * v[(bh * t + j) * d + x])
                    .sum();
                assert!((y[(bh * t + i) * d + x] - want).abs() < 1e-12);
            }
        }
    }
}

/// The exponential baselines through the generic core: chunked (learned rates u as a tensor)
/// <- recurrent <- naive, with per-head fixed tables, and the gradient in u by finite
/// differences of the naive form.
#[test]
fn exponential_baselines_chain_naive_recurrent_chunked() {
    let dims = Dims {
        b: 1,
        h: 2,
        t: 37,
        f: 4,
        d: 3,
    };
    let inp = Inputs::new(dims, 0.0, 17);
    // per head: head 0 a single exponential, head 1 a 2-term mixture (padded to N = 2)
    let u = [vec![0.05, 0.5], vec![0.01, 0.3]];
    let c = [vec![1.0, 0.0], vec![0.7, 0.3]];
    let tables: Vec<NodeTable> = (0..2)
        .map(|i| NodeTable::fixed(u[i].clone(), c[i].clone()).unwrap())
        .collect();
    let yn = naive(
        &inp.q,
        &inp.k,
        &inp.v,
        &inp.alpha,
        dims,
        &tables,
        Kernel::Soe,
        1e-6,
    )
    .unwrap();
    let mut st = State::<f64>::zeros(1, 2, 2, 4, 3);
    let yr = recurrent(
        &mut st, &inp.q, &inp.k, &inp.v, &inp.alpha, dims, &tables, 1e-6,
    )
    .unwrap();
    assert!(rel_rms(&yr, &yn) <= F64_SAME_KERNEL_REL);
    let (q, k, v, _) = inp.tensors(DType::F64);
    let uvar = Var::from_tensor(
        &Tensor::from_vec(vec![0.05, 0.5, 0.01, 0.3], (2, 2), &Device::Cpu).unwrap(),
    )
    .unwrap();
    let cw = Tensor::from_vec(vec![1.0, 0.0, 0.7, 0.3], (1, 2, 1, 2), &Device::Cpu)
        .unwrap()
        .broadcast_as((1, 2, 37, 2))
        .unwrap()
        .contiguous()
        .unwrap();
    let (o, g) = chunked_raw(&q, &k, &with_ones(&v).unwrap(), &cw, &uvar, 6, None).unwrap();
    let y = normalise(&o, 1e-6).unwrap();
    assert!(rel_rms(&to_f64(&y), &yr) <= F64_SAME_KERNEL_REL);
    assert!(rel_rms(&to_f64(&g), &st.g) <= F64_SAME_KERNEL_REL);
    // d loss / d u against finite differences of the naive form
    let w = inp.cotangent(18);
    let wt = Tensor::from_vec(w.clone(), (1, 2, 37, 3), &Device::Cpu).unwrap();
    let grads = (y * wt).unwrap().sum_all().unwrap().backward().unwrap();
    let gu = to_f64(grads.get(uvar.as_tensor()).unwrap());
    for (hh, n) in [(0, 0), (1, 0), (1, 1)] {
        let loss = |du: f64| {
            let mut uu = u.clone();
            uu[hh][n] += du;
            let tb: Vec<NodeTable> = (0..2)
                .map(|i| NodeTable::fixed(uu[i].clone(), c[i].clone()).unwrap())
                .collect();
            dot(
                &naive(
                    &inp.q,
                    &inp.k,
                    &inp.v,
                    &inp.alpha,
                    dims,
                    &tb,
                    Kernel::Soe,
                    1e-6,
                )
                .unwrap(),
                &w,
            )
        };
        let fd = (loss(FD_STEP) - loss(-FD_STEP)) / (2.0 * FD_STEP);
        let ad = gu[hh * 2 + n];
        assert!(
            (ad - fd).abs() <= FD_GRAD_REL * fd.abs().max(1e-3),
            "u[{hh}][{n}]: {ad} vs {fd}"
        );
    }
}

#[test]
fn config_round_trips_through_json() {
    for mem in memories() {
        let c = cfg(mem, FeatureMap::Favor);
        let s = serde_json::to_string(&c).unwrap();
        let back: BlockConfig = serde_json::from_str(&s).unwrap();
        assert_eq!(back, c, "{s}");
    }
}

#[test]
fn bad_configs_and_inputs_are_typed_errors() {
    let vm = VarMap::new();
    let mut c = cfg(Memory::Softmax, FeatureMap::Elu);
    c.heads = 0;
    assert!(Block::new(c, &vm, "x", &Device::Cpu).is_err());
    let c = cfg(
        Memory::Vort {
            mode: MemoryMode::Shared,
            banks: 2,
            delta: 0.3,
            horizon: 64,
            eps: 1e-3,
            routing: Routing::Fixed { alpha: 0.1 },
        },
        FeatureMap::Elu,
    );
    assert!(Block::new(c, &vm, "y", &Device::Cpu).is_err());
    let blk = Block::new(
        cfg(Memory::Exponential, FeatureMap::Elu),
        &vm,
        "z",
        &Device::Cpu,
    )
    .unwrap();
    let (x, _) = input(1, 5, 11, 1);
    assert!(blk.forward(&x, None).is_err(), "wrong d_model");
    let (x, _) = input(1, 5, 12, 1);
    let kv = BlockState::Kv {
        k: Tensor::zeros((1, 2, 1, 6), DType::F32, &Device::Cpu).unwrap(),
        v: Tensor::zeros((1, 2, 1, 6), DType::F32, &Device::Cpu).unwrap(),
    };
    assert!(
        blk.forward_with_state(&x, None, Some(&kv)).is_err(),
        "wrong state kind"
    );
}

/// α = δ + (1-δ) σ(a·e - b·H + g·h + c) with e = σ(p·h), checked against a host computation
/// from the block's own parameters, for every routing option.
#[test]
fn router_computes_the_documented_formula() {
    let delta = 0.2;
    for routing in [Routing::Full, Routing::EntityOnly, Routing::EntropyOnly] {
        let vm = VarMap::new();
        let mem = Memory::Vort {
            mode: MemoryMode::Banks,
            banks: 2,
            delta,
            horizon: 64,
            eps: 1e-3,
            routing,
        };
        let blk = Block::new(cfg(mem, FeatureMap::Elu), &vm, "r", &Device::Cpu).unwrap();
        // make a, b, c non-trivial
        {
            let data = vm.data().lock().unwrap();
            data["r.router.a"]
                .set(&Tensor::new(&[1.5f32, -0.7], &Device::Cpu).unwrap())
                .unwrap();
            data["r.router.b"]
                .set(&Tensor::new(&[0.4f32, 1.1], &Device::Cpu).unwrap())
                .unwrap();
            data["r.router.c"]
                .set(&Tensor::new(&[0.3f32, -0.2], &Device::Cpu).unwrap())
                .unwrap();
        }
        let (x, ent) = input(2, 6, 12, 9);
        let out = blk.forward(&x, Some(&ent)).unwrap();
        let alpha = to_f64(out.alpha.as_ref().unwrap()); // [B, H, T]
        let get = |n: &str| to_f64(vm.data().lock().unwrap()[&format!("r.router.{n}")].as_tensor());
        let (p, g, a, b, c) = (get("probe"), get("g"), get("a"), get("b"), get("c"));
        let (xs, es) = (to_f64(&x), to_f64(&ent));
        let sig = |z: f64| 1.0 / (1.0 + (-z).exp());
        for bi in 0..2 {
            for t in 0..6 {
                let hrow = &xs[(bi * 6 + t) * 12..(bi * 6 + t + 1) * 12];
                let pe: f64 = (0..12).map(|i| hrow[i] * p[i]).sum();
                for hh in 0..2 {
                    let gh: f64 = (0..12).map(|i| hrow[i] * g[i * 2 + hh]).sum();
                    let mut z = gh + c[hh];
                    if matches!(routing, Routing::Full | Routing::EntityOnly) {
                        z += a[hh] * sig(pe);
                    }
                    if matches!(routing, Routing::Full | Routing::EntropyOnly) {
                        z -= b[hh] * es[bi * 6 + t];
                    }
                    let want = delta + (1.0 - delta) * sig(z);
                    let got = alpha[(bi * 2 + hh) * 6 + t];
                    assert!((got - want).abs() < 1e-5, "{routing:?}: {got} vs {want}");
                }
                let el = to_f64(out.entity_logit.as_ref().unwrap())[bi * 6 + t];
                assert!((el - pe).abs() < 1e-5);
            }
        }
    }
}
