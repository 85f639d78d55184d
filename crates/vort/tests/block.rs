//! The block: every memory (VORT banks/shared, baselines) in the same code path; streaming in
//! pieces equals one pass; gradients reach every parameter; the feature map's properties; the
//! baselines' kernels chained naive <- naive_recurrent <- chunk.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use common::*;
use vort::attention::{causal_softmax, sliding_softmax};
use vort::block::{Block, BlockConfig, BlockState, PastHorizon};
use vort::features::{orthogonal_gaussian, FeatureMap, Features};
use vort::retention::State;
use vort::retention::{normalise, with_ones};
use vort::tol::*;
use vort::{Dims, NodeMode, NodeSpec, NodeTable, VortError};
use vort::{Mixer, Routing};

fn memories() -> Vec<Mixer> {
    let vort = |mode, routing| Mixer::Vort {
        nodes: NodeSpec {
            mode,
            banks: 3,
            delta: 0.2,
            horizon: 256,
            eps: 1e-4,
        },
        routing,
        router_bias_init: 0.0,
    };
    vec![
        vort(NodeMode::Shared, Routing::Full),
        vort(NodeMode::Banks, Routing::Full),
        vort(NodeMode::Shared, Routing::EntityOnly),
        vort(NodeMode::Banks, Routing::EntropyOnly),
        vort(NodeMode::Shared, Routing::Fixed { alpha: 0.6 }),
        Mixer::PowerLaw {
            alpha: 0.5,
            horizon: 256,
            eps: 1e-4,
        },
        Mixer::Exponential,
        Mixer::Mixture {
            m: 5,
            min_rate: 1e-3,
        },
        Mixer::Softmax { window: 0 },
        // shorter than the T = 29 / 20 of the shared tests, so the window really slides
        Mixer::Softmax { window: 5 },
    ]
}

fn cfg(mixer: Mixer, map: FeatureMap) -> BlockConfig {
    BlockConfig {
        d_model: 12,
        heads: 2,
        head_dim: 6,
        features: 10,
        feature_map: map,
        mixer,
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
    for map in [FeatureMap::Favor, FeatureMap::Elu, FeatureMap::Taylor] {
        for mem in memories() {
            let vm = VarMap::new();
            let blk = Block::seeded(cfg(mem.clone(), map), &vm, "blk", &Device::Cpu).unwrap();
            let (x, ent) = input(2, 29, 12, 5);
            let one = blk.forward_with_state(&x, Some(&ent), &mut None).unwrap();
            // the training forward (fused op where the rates are fixed) gives the same y
            let train = blk.forward_with_entropy(&x, Some(&ent)).unwrap();
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
                        &mut state,
                    )
                    .unwrap();
                ys.push(out.y);
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
        let blk = Block::seeded(
            cfg(mem.clone(), FeatureMap::Favor),
            &vm,
            "blk",
            &Device::Cpu,
        )
        .unwrap();
        let (x, ent) = input(1, 20, 12, 6);
        let out = blk.forward_with_entropy(&x, Some(&ent)).unwrap();
        let mut loss = out.y.sqr().unwrap().sum_all().unwrap();
        if let Some(l) = &out.entity_logit {
            loss = (loss + l.sum_all().unwrap()).unwrap();
        }
        let grads = loss.backward().unwrap();
        let data = vm.data().lock().unwrap();
        for (name, var) in data.iter() {
            let skip_entropy_free = matches!(
                mem,
                Mixer::Vort {
                    routing: Routing::EntityOnly,
                    ..
                }
            ) && name.ends_with("router.b");
            let skip_entity_free = matches!(
                mem,
                Mixer::Vort {
                    routing: Routing::EntropyOnly,
                    ..
                }
            ) && name.ends_with("router.a");
            if skip_entropy_free || skip_entity_free {
                continue;
            }
            // the FAVOR+ projection is a buffer: stored, never trained, no gradient
            if vort::block::is_buffer(name) {
                assert!(grads.get(var.as_tensor()).is_none(), "{mem:?}: {name}");
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

/// Based's Taylor map: φ(q)·φ(k) = 1 + s + s²/2 with s = q·k/√d exactly (the second-order
/// expansion of exp(s)), m = 1 + d + d(d+1)/2, on awkward shapes (d = 1, d = 5, leading
/// dims [2, 3]).
#[test]
fn taylor_features_give_the_second_order_kernel() {
    for d in [1usize, 5, 8] {
        let f = Features::new(FeatureMap::Taylor, d, 999, 0, &Device::Cpu).unwrap();
        assert_eq!(f.m, 1 + d + d * (d + 1) / 2);
        assert_eq!(FeatureMap::Taylor.dim(d, 999), f.m);
        let mut r = Rng::new(d as u64);
        let n = 6;
        let z: Vec<f64> = (0..2 * n * d).map(|_| 3.0 * (r.unif() - 0.5)).collect();
        let zt = Tensor::from_vec(z.clone(), (2, n, d), &Device::Cpu).unwrap();
        let phi = to_f64(&f.apply(&zt).unwrap());
        assert_eq!(phi.len(), 2 * n * f.m);
        let (q, k) = (&z[..n * d], &z[n * d..]);
        for i in 0..n {
            for j in 0..n {
                let s: f64 =
                    (0..d).map(|x| q[i * d + x] * k[j * d + x]).sum::<f64>() / (d as f64).sqrt();
                let dot: f64 = (0..f.m)
                    .map(|x| phi[i * f.m + x] * phi[(n + j) * f.m + x])
                    .sum();
                let want = 1.0 + s + s * s / 2.0;
                assert!(
                    (dot - want).abs() < 1e-12 * want.max(1.0),
                    "d {d}: {dot} vs {want}"
                );
                assert!(want >= 0.5);
            }
        }
    }
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
    let dims = Dims::new(1, 2, 37, 4, 3);
    let inp = Inputs::new(dims, 0.0, 17);
    // per head: head 0 a single exponential, head 1 a 2-term mixture (padded to N = 2)
    let u = [vec![0.05, 0.5], vec![0.01, 0.3]];
    let c = [vec![1.0, 0.0], vec![0.7, 0.3]];
    let tables: Vec<NodeTable> = (0..2)
        .map(|i| NodeTable::fixed(u[i].clone(), c[i].clone()).unwrap())
        .collect();
    let yn = naive_y(&inp.q, &inp.k, &inp.v, &inp.alpha, dims, &tables, 1e-6).unwrap();
    let mut st = State::<f64>::zeros(1, 2, 2, 4, 3);
    let yr = recurrent_y(
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
    let vp = with_ones(&v).unwrap();
    let x = vort::retention::Inputs {
        q: &q,
        k: &k,
        vp: &vp,
        cw: &cw,
    };
    let rates = vort::retention::Rates::Learned(uvar.as_tensor().clone());
    let (o, g) = vort::retention::chunk::<f64>(&x, &rates, 6, None, true).unwrap();
    let y = normalise(&o, 1e-6).unwrap();
    assert!(rel_rms(&to_f64(&y), &yr) <= F64_SAME_KERNEL_REL);
    assert!(rel_rms(&g.unwrap().host().unwrap(), &st.host().unwrap()) <= F64_SAME_KERNEL_REL);
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
                &naive_y(&inp.q, &inp.k, &inp.v, &inp.alpha, dims, &tb, 1e-6).unwrap(),
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
    let mut c = cfg(Mixer::Softmax { window: 0 }, FeatureMap::Elu);
    c.heads = 0;
    assert!(Block::seeded(c, &vm, "x", &Device::Cpu).is_err());
    let c = cfg(
        Mixer::Vort {
            nodes: NodeSpec {
                mode: NodeMode::Shared,
                banks: 2,
                delta: 0.3,
                horizon: 64,
                eps: 1e-3,
            },
            routing: Routing::Fixed { alpha: 0.1 },
            router_bias_init: 0.0,
        },
        FeatureMap::Elu,
    );
    assert!(Block::seeded(c, &vm, "y", &Device::Cpu).is_err());
    let blk = Block::seeded(
        cfg(Mixer::Exponential, FeatureMap::Elu),
        &vm,
        "z",
        &Device::Cpu,
    )
    .unwrap();
    let (x, _) = input(1, 5, 11, 1);
    assert!(blk.forward_with_entropy(&x, None).is_err(), "wrong d_model");
    let (x, _) = input(1, 5, 12, 1);
    let kv = BlockState::Kv {
        k: Tensor::zeros((1, 2, 1, 6), DType::F32, &Device::Cpu).unwrap(),
        v: Tensor::zeros((1, 2, 1, 6), DType::F32, &Device::Cpu).unwrap(),
    };
    assert!(
        blk.forward_with_state(&x, None, &mut Some(kv)).is_err(),
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
        let mem = Mixer::Vort {
            nodes: NodeSpec {
                mode: NodeMode::Banks,
                banks: 2,
                delta,
                horizon: 64,
                eps: 1e-3,
            },
            routing,
            router_bias_init: 0.0,
        };
        let blk = Block::seeded(cfg(mem, FeatureMap::Elu), &vm, "r", &Device::Cpu).unwrap();
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
        let out = blk.forward_with_entropy(&x, Some(&ent)).unwrap();
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

/// Random f64 [B, H, n, d] with entries of size ~1, so the logits q·k spread over a few units
/// and the softmax weights are far from uniform.
fn randn4(r: &mut Rng, b: usize, h: usize, n: usize, d: usize) -> Tensor {
    Tensor::from_vec(r.normals(b * h * n * d, 1.0), (b, h, n, d), &Device::Cpu).unwrap()
}

/// The reference twin of [`sliding_softmax`]: O(T·S) loops over every (query, key) pair with
/// the explicit mask j in (p - window, p], p = S - T + i the query's position; f64.
fn sliding_reference(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    (bh, t, s, d, dv): (usize, usize, usize, usize, usize),
    window: usize,
) -> Vec<f64> {
    let mut y = vec![0.0; bh * t * dv];
    for g in 0..bh {
        for i in 0..t {
            let p = s - t + i;
            let logits: Vec<f64> = (0..s)
                .map(|j| {
                    if j <= p && j + window > p {
                        (0..d)
                            .map(|x| q[(g * t + i) * d + x] * k[(g * s + j) * d + x])
                            .sum()
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
            for x in 0..dv {
                y[(g * t + i) * dv + x] = (0..s)
                    .map(|j| (logits[j] - m).exp() / z * v[(g * s + j) * dv + x])
                    .sum();
            }
        }
    }
    y
}

/// window >= S: the sliding form is full causal softmax, outputs and gradients in q, k, v, in
/// f64 at the function level (with and without cached keys before the queries).
#[test]
fn sliding_softmax_with_a_wide_window_is_full_softmax_in_f64() {
    let mut r = Rng::new(21);
    for (t, s) in [(7, 7), (4, 11), (1, 6)] {
        for window in [s, s + 3, 1000] {
            let q = Var::from_tensor(&randn4(&mut r, 2, 2, t, 3)).unwrap();
            let k = Var::from_tensor(&randn4(&mut r, 2, 2, s, 3)).unwrap();
            let v = Var::from_tensor(&randn4(&mut r, 2, 2, s, 4)).unwrap();
            let w = randn4(&mut r, 2, 2, t, 4);
            let ys = sliding_softmax(&q, &k, &v, window).unwrap();
            let yf = causal_softmax(&q, &k, &v).unwrap();
            let e = rel_rms_tensor(&ys, &yf).unwrap();
            assert!(e <= F64_SAME_KERNEL_REL, "T {t} S {s} w {window}: y {e:e}");
            let gs = (ys * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let gf = (yf * &w).unwrap().sum_all().unwrap().backward().unwrap();
            for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
                let (a, b) = (gs.get(x).unwrap(), gf.get(x).unwrap());
                let e = rel_rms_tensor(a, b).unwrap();
                assert!(e <= F64_GRAD_REL, "T {t} S {s} w {window}: d{name} {e:e}");
            }
        }
    }
}

/// window >= T at the block level: the same y and the same gradient in every parameter and in
/// x as `Mixer::Softmax { window: 0 }` (the block's parameters are f32, so f32 with the same-kernel
/// tolerances: both run the same ops on the same keys, only the masking code differs).
#[test]
fn sliding_block_with_a_wide_window_is_the_softmax_block() {
    for window in [29, 64] {
        let vm = VarMap::new();
        let full = Block::seeded(
            cfg(Mixer::Softmax { window: 0 }, FeatureMap::Elu),
            &vm,
            "b",
            &Device::Cpu,
        )
        .unwrap();
        // same prefix: the second block reuses the first one's parameters
        let slid = Block::seeded(
            cfg(Mixer::Softmax { window }, FeatureMap::Elu),
            &vm,
            "b",
            &Device::Cpu,
        )
        .unwrap();
        let (x, _) = input(2, 29, 12, 22);
        let x = Var::from_tensor(&x).unwrap();
        let yf = full.forward_with_entropy(&x, None).unwrap().y;
        let ys = slid.forward_with_entropy(&x, None).unwrap().y;
        let e = rel_rms_tensor(&ys, &yf).unwrap();
        assert!(e <= F32_SAME_KERNEL_REL, "window {window}: y {e:e}");
        let gf = yf.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let gs = ys.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let data = vm.data().lock().unwrap();
        let mut vars: Vec<(String, Tensor)> = data
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        vars.push(("x".into(), x.as_tensor().clone()));
        for (name, var) in &vars {
            let e = rel_rms_tensor(gs.get(var).unwrap(), gf.get(var).unwrap()).unwrap();
            assert!(e <= F32_GRAD_REL, "window {window}: d{name} {e:e}");
        }
    }
}

/// window < T on awkward shapes (T = 1, 7, 37 with window 1, 5, 16: T a multiple of the
/// window, not, or smaller; with 0, 3 or 20 cached keys before the queries) against the
/// O(T·S) reference twin, in f64.
#[test]
fn sliding_softmax_matches_the_masked_reference_twin() {
    let mut r = Rng::new(23);
    let (b, h, d, dv) = (2, 2, 3, 4);
    for t in [1, 7, 37] {
        for window in [1, 5, 16] {
            for cached in [0, 3, 20] {
                let s = t + cached;
                let (q, k, v) = (
                    randn4(&mut r, b, h, t, d),
                    randn4(&mut r, b, h, s, d),
                    randn4(&mut r, b, h, s, dv),
                );
                let y = sliding_softmax(&q, &k, &v, window).unwrap();
                assert_eq!(y.dims(), &[b, h, t, dv]);
                let want = sliding_reference(
                    &to_f64(&q),
                    &to_f64(&k),
                    &to_f64(&v),
                    (b * h, t, s, d, dv),
                    window,
                );
                let e = rel_rms(&to_f64(&y), &want);
                assert!(
                    e <= F64_SAME_KERNEL_REL,
                    "T {t} window {window} cached {cached}: {e:e}"
                );
            }
        }
    }
}

/// The gradients of the blocked form (padding, overlapping key blocks) against central finite
/// differences of the reference twin, every entry of q, k and v, in f64.
#[test]
fn sliding_softmax_gradients_match_finite_differences_of_the_twin() {
    let mut r = Rng::new(24);
    let (b, h, d, dv) = (1, 2, 3, 2);
    for (t, s, window) in [(37, 40, 5), (7, 7, 16), (9, 9, 1)] {
        let shape = (b * h, t, s, d, dv);
        let (q, k, v) = (
            randn4(&mut r, b, h, t, d),
            randn4(&mut r, b, h, s, d),
            randn4(&mut r, b, h, s, dv),
        );
        let w = to_f64(&randn4(&mut r, b, h, t, dv));
        let (qv, kv, vv) = (
            Var::from_tensor(&q).unwrap(),
            Var::from_tensor(&k).unwrap(),
            Var::from_tensor(&v).unwrap(),
        );
        let y = sliding_softmax(&qv, &kv, &vv, window).unwrap();
        let wt = Tensor::from_vec(w.clone(), (b, h, t, dv), &Device::Cpu).unwrap();
        let grads = (y * wt).unwrap().sum_all().unwrap().backward().unwrap();
        let host = [to_f64(&q), to_f64(&k), to_f64(&v)];
        for (which, var) in [qv, kv, vv].iter().enumerate() {
            let ad = to_f64(grads.get(var).unwrap());
            let fd: Vec<f64> = (0..host[which].len())
                .map(|i| {
                    let loss = |du: f64| {
                        let mut x = host.clone();
                        x[which][i] += du;
                        dot(&sliding_reference(&x[0], &x[1], &x[2], shape, window), &w)
                    };
                    (loss(FD_STEP) - loss(-FD_STEP)) / (2.0 * FD_STEP)
                })
                .collect();
            let e = rel_rms(&ad, &fd);
            assert!(
                e <= FD_GRAD_REL,
                "T {t} S {s} window {window}: grad of input {which}: {e:e}"
            );
        }
    }
}

/// Streaming in pieces shorter and longer than the window equals one pass and the training
/// forward, and the KV cache never holds more than `window` tokens.
#[test]
fn sliding_block_streams_in_pieces_with_a_bounded_cache() {
    for window in [1, 5, 16] {
        let vm = VarMap::new();
        let blk = Block::seeded(
            cfg(Mixer::Softmax { window }, FeatureMap::Elu),
            &vm,
            "s",
            &Device::Cpu,
        )
        .unwrap();
        let (x, _) = input(2, 37, 12, 25);
        let one = blk.forward_with_state(&x, None, &mut None).unwrap();
        let train = blk.forward_with_entropy(&x, None).unwrap();
        let e = rel_rms_tensor(&train.y, &one.y).unwrap();
        assert!(
            e <= STREAMING_F32_REL,
            "window {window}: train vs one pass {e:e}"
        );
        let mut state: Option<BlockState> = None;
        let (mut ys, mut t0) = (Vec::new(), 0);
        for l in [1, 3, 7, 1, 16, 9] {
            let out = blk
                .forward_with_state(&x.narrow(1, t0, l).unwrap(), None, &mut state)
                .unwrap();
            ys.push(out.y);
            t0 += l;
            match &state {
                Some(BlockState::Kv { k, v }) => {
                    assert_eq!(k.dim(2).unwrap(), window.min(t0), "window {window}");
                    assert_eq!(v.dim(2).unwrap(), window.min(t0), "window {window}");
                }
                other => panic!("window {window}: state {other:?}"),
            }
        }
        let y = Tensor::cat(&ys, 1).unwrap();
        let e = rel_rms_tensor(&y, &one.y).unwrap();
        assert!(
            e <= STREAMING_F32_REL,
            "window {window}: pieces vs one pass {e:e}"
        );
    }
}

/// window = 0 is a typed error of the sliding-window function (a block's window 0 is full
/// softmax), as is a retention state given to a softmax block.
#[test]
fn sliding_window_zero_and_wrong_state_are_typed_errors() {
    let vm = VarMap::new();
    let q = Tensor::zeros((1, 1, 3, 2), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        sliding_softmax(&q, &q, &q, 0),
        Err(VortError::InvalidArgument(_))
    ));
    let k = Tensor::zeros((1, 1, 2, 2), DType::F32, &Device::Cpu).unwrap();
    assert!(
        sliding_softmax(&q, &k, &k, 2).is_err(),
        "fewer keys than queries"
    );
    let blk = Block::seeded(
        cfg(Mixer::Softmax { window: 3 }, FeatureMap::Elu),
        &vm,
        "w",
        &Device::Cpu,
    )
    .unwrap();
    let (x, _) = input(1, 5, 12, 1);
    let g = BlockState::Retention(State::<f32>::zeros(1, 2, 1, 6, 6));
    assert!(matches!(
        blk.forward_with_state(&x, None, &mut Some(g)),
        Err(VortError::InvalidArgument(_))
    ));
}

/// The block refuses a stream past its tables' horizon (training forward and streaming
/// alike), and streams on after `set_horizon` with the same parameters.
#[test]
fn block_streams_refuse_the_horizon_until_retargeted() {
    for mode in [NodeMode::Shared, NodeMode::Banks] {
        let vm = VarMap::new();
        let mem = Mixer::Vort {
            nodes: NodeSpec {
                mode,
                banks: 2,
                delta: 0.2,
                horizon: 16,
                eps: 1e-3,
            },
            routing: Routing::Full,
            router_bias_init: 0.0,
        };
        let mut blk = Block::seeded(cfg(mem, FeatureMap::Favor), &vm, "h", &Device::Cpu).unwrap();
        assert_eq!(blk.horizon(), Some(16));
        let x = input(1, 12, 12, 1).0;
        let long = input(1, 17, 12, 2).0;
        assert!(matches!(
            blk.forward_with_entropy(&long, None),
            Err(VortError::BeyondHorizon {
                context: 17,
                horizon: 16
            })
        ));
        let mut s1 = None;
        blk.forward_with_state(&x, None, &mut s1).unwrap();
        // (Debug shows a tensor's shape only: the values are compared)
        let values = |s: &Option<BlockState>| match s {
            Some(BlockState::Retention(r)) => (r.pos, r.host().unwrap()),
            other => panic!("{other:?}"),
        };
        let before = values(&s1);
        let e = blk
            .forward_with_state(&x, None, &mut s1)
            .expect_err("12 + 12 > 16");
        // a refused piece leaves the stream as it was
        assert_eq!(values(&s1), before, "{mode:?}");
        assert!(
            matches!(
                e,
                VortError::BeyondHorizon {
                    context: 24,
                    horizon: 16
                }
            ),
            "{e}"
        );
        // or weighs the lags past it by the tables' own exponential tail: the first piece is
        // the refusing block's bit for bit, and the stream in two pieces is one 24-token pass
        assert_eq!(blk.context_limit(), Some(16));
        let refusing = blk.forward_with_state(&x, None, &mut None).unwrap().y;
        blk.set_past_horizon(PastHorizon::SoeTail).unwrap();
        assert_eq!((blk.horizon(), blk.context_limit()), (Some(16), None));
        let mut stream = None;
        let a = blk.forward_with_state(&x, None, &mut stream).unwrap();
        assert_eq!(to_f64(&a.y), to_f64(&refusing), "{mode:?}");
        let b = blk.forward_with_state(&x, None, &mut stream).unwrap();
        let whole = blk
            .forward_with_entropy(&Tensor::cat(&[&x, &x], 1).unwrap(), None)
            .unwrap();
        let e = rel_rms_tensor(&whole.y, &Tensor::cat(&[&a.y, &b.y], 1).unwrap()).unwrap();
        assert!(e <= STREAMING_F32_REL, "{mode:?}: pieces vs one pass {e:e}");
        for tau in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                blk.set_past_horizon(PastHorizon::Tempered { tau }),
                Err(VortError::InvalidArgument(_))
            ));
        }
        blk.set_past_horizon(PastHorizon::Refuse).unwrap();
        assert!(blk.forward_with_entropy(&long, None).is_err());
        blk.set_horizon(1 << 20).unwrap();
        assert_eq!(blk.horizon(), Some(1 << 20));
        let mut stream = None;
        blk.forward_with_state(&x, None, &mut stream).unwrap();
        blk.forward_with_state(&x, None, &mut stream).unwrap();
        match stream {
            Some(BlockState::Retention(s)) => assert_eq!(s.pos, 24),
            _ => panic!("retention state expected"),
        }
    }
}

/// Streaming states come back outside the autodiff graph (for every memory kind: retention
/// states live on the host, KV caches are detached), so a stream does not keep every earlier
/// piece's activations alive: memory stays flat. The retention state counts its tokens.
#[test]
fn streaming_states_are_detached() {
    let (x, e) = input(1, 9, 12, 4);
    for mem in memories() {
        let vm = VarMap::new();
        let blk =
            Block::seeded(cfg(mem.clone(), FeatureMap::Favor), &vm, "d", &Device::Cpu).unwrap();
        let mut stream = None;
        blk.forward_with_state(&x, Some(&e), &mut stream).unwrap();
        let s1 = stream.clone();
        blk.forward_with_state(&x, Some(&e), &mut stream).unwrap();
        for s in [s1, stream] {
            match s.expect("a state") {
                BlockState::Retention(st) => assert!(st.pos == 9 || st.pos == 18, "{mem:?}"),
                BlockState::Kv { k, v } => {
                    assert!(!k.track_op() && !v.track_op(), "{mem:?}")
                }
            }
        }
    }
}

/// `Block::step` (the recurrent form, one token) continues a stream exactly like the streaming
/// forward does, for every memory kind, and refuses more than one token.
#[test]
fn block_step_equals_streaming_forward() {
    let (x, e) = input(1, 12, 12, 6);
    for mem in memories() {
        let vm = VarMap::new();
        let blk =
            Block::seeded(cfg(mem.clone(), FeatureMap::Favor), &vm, "s", &Device::Cpu).unwrap();
        let whole = blk.forward_with_entropy(&x, Some(&e)).unwrap().y;
        let mut state = None;
        let mut rows = Vec::new();
        for t in 0..12 {
            let xt = x.narrow(1, t, 1).unwrap();
            let et = e.narrow(1, t, 1).unwrap();
            let out = blk.step(&xt, Some(&et), &mut state).unwrap();
            rows.push(out.y);
        }
        let stepped = Tensor::cat(&rows, 1).unwrap();
        let err = rel_rms(&to_f64(&stepped), &to_f64(&whole));
        assert!(err < 1e-5, "{mem:?}: {err:e}");
        assert!(
            blk.step(&x, Some(&e), &mut None).is_err(),
            "{mem:?}: T = 12"
        );
    }
}

/// A router driven to saturation (α pinned at δ or at 1, the entity gate at 0 or 1) and an
/// exponential decay rate far out keep every gradient finite. The router's σ composed as
/// 1 / (1 + e^(−z)) gave a NaN gradient from a finite loss once z < −88 (f32), which stopped
/// VORT runs at lr 3e-2 (results/recall-medium/notes.md, session 21).
#[test]
fn saturated_routers_and_rates_keep_gradients_finite() {
    let vort = |routing| Mixer::Vort {
        nodes: NodeSpec {
            mode: NodeMode::Shared,
            banks: 1,
            delta: 0.2,
            horizon: 64,
            eps: 1e-3,
        },
        routing,
        router_bias_init: 0.0,
    };
    for mem in [
        vort(Routing::Full),
        vort(Routing::EntityOnly),
        Mixer::Exponential,
    ] {
        let vm = VarMap::new();
        let blk =
            Block::seeded(cfg(mem.clone(), FeatureMap::Favor), &vm, "s", &Device::Cpu).unwrap();
        {
            let data = vm.data().lock().unwrap();
            let set = |name: &str, v: &[f32], shape: &[usize]| {
                data[name]
                    .set(&Tensor::from_vec(v.to_vec(), shape, &Device::Cpu).unwrap())
                    .unwrap();
            };
            if data.contains_key("s.router.c") {
                // head 0 far below (α = δ), head 1 far above (α = 1); the probe saturates the
                // entity gate in both directions across tokens
                set("s.router.c", &[-300.0, 300.0], &[2]);
                set("s.router.probe", &[400.0; 12], &[12, 1]);
            } else {
                set("s.decay_rho", &[-300.0, 300.0], &[2, 1]);
            }
        }
        let (x, ent) = input(1, 20, 12, 11);
        let out = blk.forward_with_entropy(&x, Some(&ent)).unwrap();
        let mut loss = out.y.sqr().unwrap().sum_all().unwrap();
        if let Some(l) = &out.entity_logit {
            loss = (loss + l.tanh().unwrap().sum_all().unwrap()).unwrap();
        }
        assert!(to_f64(&loss)[0].is_finite(), "{mem:?}: loss");
        let grads = loss.backward().unwrap();
        for (name, var) in vm.data().lock().unwrap().iter() {
            if let Some(g) = grads.get(var.as_tensor()) {
                assert!(
                    to_f64(g).iter().all(|v| v.is_finite()),
                    "{mem:?}: non-finite gradient of {name}"
                );
            }
        }
    }
}
