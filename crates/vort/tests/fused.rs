//! The fused op (hand-written backward) against candle's autodiff of the plain chunked form:
//! outputs and the gradients of q, k, v and the node weights (hence α), in f64 and f32.

mod common;

use candle_core::{DType, Device, Tensor, Var};
use common::*;
use vort::retention::{chunk, fused_chunk, node_weights, normalise, with_ones};
use vort::tol::*;
use vort::{Dims, NodeMode, NodeSpec, NodeTable};

fn check(dims: Dims, chunk: usize, tables: &[NodeTable], dt: DType, seed: u64) {
    let inp = Inputs::new(dims, 0.25, seed);
    let (q, k, v, a) = inp.tensors(dt);
    let w = Tensor::from_vec(
        inp.cotangent(seed + 1),
        (dims.b, dims.h, dims.t, dims.d),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(dt)
    .unwrap();
    let u_rows: Vec<Vec<f64>> = tables.iter().map(|t| t.u.clone()).collect();
    let u_t = vort::retention::Rates::of_tables(tables)
        .unwrap()
        .tensor(&Device::Cpu)
        .unwrap();
    let run = |fused: bool| {
        let cw = node_weights(a.as_tensor(), tables).unwrap();
        let vp = with_ones(&v).unwrap();
        let o = if fused {
            fused0(&q, &k, &vp, &cw, &u_rows, chunk).unwrap()
        } else {
            chunked0(&q, &k, &vp, &cw, &u_t, chunk).unwrap()
        };
        let y = normalise(&o, 1e-6).unwrap();
        let g = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let grads: Vec<Vec<f64>> = [&q, &k, &v, &a]
            .iter()
            .map(|x| match g.get(x.as_tensor()) {
                Some(t) => to_f64(t),
                // no path (no memory nodes: α cannot matter)
                None => vec![0.0; x.as_tensor().elem_count()],
            })
            .collect();
        (to_f64(&y), grads)
    };
    let (yp, gp) = run(false);
    let (yf, gf) = run(true);
    let (ty, tg) = if dt == DType::F64 {
        (F64_SAME_KERNEL_REL, F64_GRAD_REL)
    } else {
        (F32_SAME_KERNEL_REL, F32_GRAD_REL)
    };
    let e = rel_rms(&yf, &yp);
    assert!(e <= ty, "{dims:?} C={chunk} {dt:?}: y {e:e}");
    for (i, name) in ["q", "k", "v", "alpha"].iter().enumerate() {
        let e = rel_rms(&gf[i], &gp[i]);
        assert!(e <= tg, "{dims:?} C={chunk} {dt:?}: grad {name} {e:e}");
    }
}

#[test]
fn fused_matches_autodiff_of_plain_chunked_f64() {
    for mode in [NodeMode::Banks, NodeMode::Shared] {
        let tb = NodeSpec {
            mode,
            banks: 3,
            delta: 0.25,
            horizon: 128,
            eps: 1e-5,
        }
        .build()
        .unwrap();
        let t = std::slice::from_ref(&tb);
        check(Dims::new(1, 2, 1, 3, 2), 4, t, DType::F64, 1);
        check(Dims::new(2, 2, 63, 5, 4), 16, t, DType::F64, 2);
        check(Dims::new(1, 2, 63, 5, 4), 1, t, DType::F64, 3);
        check(Dims::new(1, 1, 40, 60, 60), 7, t, DType::F64, 4);
        check(Dims::new(1, 2, 20, 4, 3), 32, t, DType::F64, 5);
    }
}

#[test]
fn fused_matches_autodiff_f32_and_per_head_rates() {
    let tb = NodeSpec {
        mode: NodeMode::Shared,
        banks: 3,
        delta: 0.25,
        horizon: 256,
        eps: 1e-4,
    }
    .build()
    .unwrap();
    check(
        Dims::new(2, 2, 100, 8, 6),
        32,
        std::slice::from_ref(&tb),
        DType::F32,
        6,
    );
    // order 0: no nodes at all (y_t = v_t up to eps_den)
    let t0 = NodeTable::banks_at(&[0.0], 64, 1e-4).unwrap();
    check(
        Dims::new(1, 2, 30, 4, 3),
        8,
        std::slice::from_ref(&t0),
        DType::F64,
        8,
    );
    // per-head rates (baseline mixtures): two fixed tables with the same N
    let t0 = NodeTable::fixed(vec![0.01, 0.1, 1.0], vec![0.5, 0.3, 0.2]).unwrap();
    let t1 = NodeTable::fixed(vec![0.002, 0.05, 0.7], vec![0.2, 0.2, 0.6]).unwrap();
    check(Dims::new(1, 2, 45, 4, 3), 8, &[t0, t1], DType::F64, 7);
}

#[test]
fn fused_is_zero_state_chunked_for_long_horizon_slow_modes() {
    // u ~ 1e-7 (λ rounds to 1 in f32): the μ form keeps the f32 fused op on the f64 answer.
    let tb = NodeTable::fixed(vec![1e-7, 1e-3], vec![0.5, 0.5]).unwrap();
    let dims = Dims::new(1, 1, 300, 4, 3);
    let inp = Inputs::new(dims, 0.0, 9);
    let (q, k, v, a) = inp.tensors(DType::F64);
    let cw = node_weights(a.as_tensor(), std::slice::from_ref(&tb)).unwrap();
    let u = vec![tb.u.clone()];
    let y64 = to_f64(&fused0(&q, &k, &with_ones(&v).unwrap(), &cw, &u, 32).unwrap());
    let c = |x: &Var| x.as_tensor().to_dtype(DType::F32).unwrap();
    let y32 = to_f64(
        &fused0(
            &c(&q),
            &c(&k),
            &with_ones(&c(&v)).unwrap(),
            &cw.to_dtype(DType::F32).unwrap(),
            &u,
            32,
        )
        .unwrap(),
    );
    let e = rel_rms(&y32, &y64);
    assert!(e <= F32_SAME_KERNEL_REL, "{e:e}");
}

/// The fused form's final state (the chunked state recurrence alone, its prefill path for
/// decoding) equals the recurrent form's, continuing from a non-empty state.
#[test]
fn fused_final_state_equals_recurrent_state() {
    use vort::retention::State;
    let tb = NodeSpec {
        mode: NodeMode::Banks,
        banks: 2,
        delta: 0.3,
        horizon: 512,
        eps: 1e-4,
    }
    .build()
    .unwrap();
    let tables = std::slice::from_ref(&tb);
    let dims = Dims::new(2, 2, 75, 5, 4);
    let inp = Inputs::new(dims, 0.3, 10);
    let mut st = State::<f64>::zeros(2, 2, tb.len(), 5, 4);
    recurrent_y(
        &mut st, &inp.q, &inp.k, &inp.v, &inp.alpha, dims, tables, 1e-6,
    )
    .unwrap();
    let mut pre = None;
    // two calls: the second continues from a non-empty state
    let cut = |x: &[f64], w: usize, t0: usize, t1: usize| -> Vec<f64> {
        (0..4)
            .flat_map(|bh| x[(bh * 75 + t0) * w..(bh * 75 + t1) * w].to_vec())
            .collect()
    };
    for (t0, t1) in [(0, 40), (40, 75)] {
        let ([q, k, vp, cw], rates) = host_call(
            &cut(&inp.q, 5, t0, t1),
            &cut(&inp.k, 5, t0, t1),
            &cut(&inp.v, 4, t0, t1),
            &cut(&inp.alpha, 1, t0, t1),
            Dims::new(2, 2, t1 - t0, 5, 4),
            tables,
        )
        .unwrap();
        let x = vort::retention::Inputs {
            q: &q,
            k: &k,
            vp: &vp,
            cw: &cw,
        };
        pre = fused_chunk::<f64>(&x, &rates, 16, pre.as_ref(), true)
            .unwrap()
            .1;
    }
    let pre = pre.unwrap();
    assert_eq!(pre.pos, 75);
    let e = rel_rms(&pre.host().unwrap(), &st.host().unwrap());
    assert!(e <= F64_SAME_KERNEL_REL, "{e:e}");
}

#[test]
fn fused_f32_long_sequence_stays_close_to_f64_recurrent() {
    use vort::retention::State;
    for mode in [NodeMode::Banks, NodeMode::Shared] {
        let tb = NodeSpec {
            mode,
            banks: 4,
            delta: 0.1,
            horizon: 4096,
            eps: 1e-3,
        }
        .build()
        .unwrap();
        let tables = std::slice::from_ref(&tb);
        let dims = Dims::new(1, 1, 4096, 4, 3);
        let inp = Inputs::new(dims, 0.1, 20);
        let mut st = State::<f64>::zeros(1, 1, tb.len(), 4, 3);
        let y64 = recurrent_y(
            &mut st, &inp.q, &inp.k, &inp.v, &inp.alpha, dims, tables, 1e-6,
        )
        .unwrap();
        let (q, k, v, a) = inp.tensors(DType::F32);
        let cw = node_weights(a.as_tensor(), tables).unwrap();
        let o = fused0(
            &q,
            &k,
            &with_ones(&v).unwrap(),
            &cw,
            std::slice::from_ref(&tb.u),
            64,
        )
        .unwrap();
        let y32 = to_f64(&normalise(&o, 1e-6).unwrap());
        let e = rel_rms(&y32, &y64);
        assert!(e <= F32_SAME_KERNEL_REL, "{mode:?}: {e:e}");
    }
}

/// The retention contract, chained on pieces of uneven length (one token, less than a chunk,
/// several chunks and a tail) with the state carried from piece to piece: naive <- recurrent
/// <- chunked <- fused agree on every piece's output and on the state after it, in both
/// memory modes and with one table per head; the gradients of q, k, v' and the node weights
/// within each piece agree between chunked (autodiff) and fused (hand-written backward plus
/// the initial state's readout).
#[test]
fn the_four_forms_agree_on_uneven_pieces_with_carried_states() {
    use vort::retention::{naive, naive_recurrent, Inputs as Call, Rates, State};
    let dims = Dims::new(2, 2, 61, 4, 3);
    let lens = [1usize, 7, 30, 23];
    for (mode, per_head) in [
        (NodeMode::Banks, false),
        (NodeMode::Shared, false),
        (NodeMode::Shared, true),
    ] {
        let spec = NodeSpec {
            mode,
            banks: 3,
            delta: 0.25,
            horizon: 64,
            eps: 1e-5,
        };
        let tables: Vec<NodeTable> = if per_head {
            // two heads with different node sets of the same size
            vec![
                spec.build().unwrap(),
                spec.with_horizon(61).build().unwrap(),
            ]
        } else {
            vec![spec.build().unwrap()]
        };
        // (S = 17 for both horizons: per-head tables must share their node count)
        assert!(tables.iter().all(|t| t.len() == tables[0].len()));
        let rates = Rates::of_tables(&tables).unwrap();
        let inp = Inputs::new(dims, 0.25, 17);
        let (q, k, v, a) = inp.tensors(DType::F64);
        let cw_all = node_weights(a.as_tensor(), &tables).unwrap();
        let vp_all = with_ones(&v).unwrap();
        // one state per form: naive, recurrent, chunked, fused
        let mut states: [Option<State<f64>>; 4] = [None, None, None, None];
        let mut s0 = 0;
        for &len in &lens {
            let piece = |x: &Tensor| x.narrow(2, s0, len).unwrap();
            // fresh leaves per piece so that each piece's gradients are its own
            let leaf = |x: &Tensor| Var::from_tensor(&piece(x)).unwrap();
            let (qp, kp, vpp, cwp) = (
                leaf(q.as_tensor()),
                leaf(k.as_tensor()),
                leaf(&vp_all),
                leaf(&cw_all),
            );
            let x = Call {
                q: qp.as_tensor(),
                k: kp.as_tensor(),
                vp: vpp.as_tensor(),
                cw: cwp.as_tensor(),
            };
            let w =
                Tensor::randn(0f64, 1.0, (dims.b, dims.h, len, dims.d + 1), &Device::Cpu).unwrap();
            let mut outs = Vec::new();
            for (i, st) in states.iter_mut().enumerate() {
                let run = match i {
                    0 => naive,
                    1 => naive_recurrent,
                    2 => chunk,
                    _ => fused_chunk,
                };
                let (o, g) = run(&x, &rates, 8, st.as_ref(), true).unwrap();
                let g = g.unwrap();
                assert_eq!(g.pos, (s0 + len) as u64);
                let grads = if i >= 2 {
                    let gr = (&o * &w).unwrap().sum_all().unwrap().backward().unwrap();
                    [&qp, &kp, &vpp, &cwp]
                        .iter()
                        .map(|x| to_f64(gr.get(x.as_tensor()).unwrap()))
                        .collect()
                } else {
                    Vec::new()
                };
                outs.push((to_f64(&o), g.host().unwrap(), grads));
                *st = Some(g);
            }
            let names = ["naive", "naive_recurrent", "chunk", "fused_chunk"];
            for i in 1..4 {
                let e = rel_rms(&outs[i].0, &outs[0].0);
                assert!(
                    e <= F64_SAME_KERNEL_REL,
                    "{mode:?} piece {len} {}: o {e:e}",
                    names[i]
                );
                let e = rel_rms(&outs[i].1, &outs[0].1);
                assert!(
                    e <= F64_SAME_KERNEL_REL,
                    "{mode:?} piece {len} {}: state {e:e}",
                    names[i]
                );
            }
            for (j, name) in ["q", "k", "vp", "cw"].iter().enumerate() {
                let e = rel_rms(&outs[3].2[j], &outs[2].2[j]);
                assert!(e <= F64_GRAD_REL, "{mode:?} piece {len}: grad {name} {e:e}");
            }
            s0 += len;
        }
        assert_eq!(s0, dims.t);
        // the stream now stands at 61 of 64 certified lags: 4 more tokens are refused by
        // every form, before anything is computed
        let x = Call {
            q: &q.as_tensor().narrow(2, 0, 4).unwrap(),
            k: &k.as_tensor().narrow(2, 0, 4).unwrap(),
            vp: &vp_all.narrow(2, 0, 4).unwrap(),
            cw: &cw_all.narrow(2, 0, 4).unwrap(),
        };
        for (i, st) in states.iter().enumerate() {
            let run = match i {
                0 => naive,
                1 => naive_recurrent,
                2 => chunk,
                _ => fused_chunk,
            };
            let horizon = if per_head { 61 } else { 64 };
            match run(&x, &rates, 8, st.as_ref(), true) {
                Err(vort::VortError::BeyondHorizon {
                    context: 65,
                    horizon: h,
                }) => {
                    assert_eq!(h, horizon)
                }
                other => panic!(
                    "form {i}: expected BeyondHorizon, got {:?}",
                    other.map(|_| ())
                ),
            }
        }
    }
}

/// Learned rates (the exponential baseline's, and any node count): the fused op's
/// hand-written rate gradient against candle's autodiff of the plain chunked form, with the
/// gradients of q, k, v' and cw, on awkward shapes (T not a multiple of the chunk, chunk 1,
/// one rate row for all heads or one per head, N = 1 with unit weights and N = 3 with random
/// weights), from a zero state and from a carried state (whose readout also depends on u).
#[test]
fn fused_rate_gradient_matches_autodiff_of_chunked() {
    use vort::retention::{Inputs as Call, Rates, State};
    let cases = [
        // (B, H, T, F, D, N, rate rows, chunk, dtype)
        (1, 2, 37, 3, 2, 1, 2, 8, DType::F64),
        (2, 2, 50, 4, 3, 3, 1, 16, DType::F64),
        (1, 1, 9, 2, 2, 2, 1, 1, DType::F64),
        (2, 3, 70, 8, 5, 1, 3, 32, DType::F32),
    ];
    for (case, &(b, h, t, f, d, n, hu, chunk, dt)) in cases.iter().enumerate() {
        let dims = Dims::new(b, h, t, f, d);
        let inp = Inputs::new(dims, 0.25, 40 + case as u64);
        let (q, k, v, _) = inp.tensors(dt);
        let dev = Device::Cpu;
        let mut r = Rng::new(90 + case as u64);
        let rand = |r: &mut Rng, len: usize, lo: f64, hi: f64| -> Vec<f64> {
            (0..len).map(|_| lo + (hi - lo) * r.unif()).collect()
        };
        let var = |x: Vec<f64>, shape: &[usize]| {
            Var::from_tensor(
                &Tensor::from_vec(x, shape, &dev)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap(),
            )
            .unwrap()
        };
        // rates from fast to slow (u in [0.01, 1.5]); weights of either sign
        let u = var(rand(&mut r, hu * n, 0.01, 1.5), &[hu, n]);
        let cw = var(
            if n == 1 {
                vec![1.0; b * h * t]
            } else {
                rand(&mut r, b * h * t * n, -0.5, 1.0)
            },
            &[b, h, t, n],
        );
        let vp = with_ones(&v).unwrap();
        let w = Tensor::from_vec(
            rand(&mut r, b * h * t * (d + 1), -1.0, 1.0),
            (b, h, t, d + 1),
            &dev,
        )
        .unwrap()
        .to_dtype(dt)
        .unwrap();
        // a carried state from 11 earlier tokens (f64 state, cast inside the forms)
        let g0: Vec<f64> = rand(&mut r, b * h * n * f * (d + 1), -0.3, 0.3);
        let s0 = State::<f64>::from_host(b, h, n, f, d, 11, g0, &Device::Cpu).unwrap();
        let (tg, to) = if dt == DType::F64 {
            (F64_GRAD_REL, F64_SAME_KERNEL_REL)
        } else {
            (F32_GRAD_REL, F32_SAME_KERNEL_REL)
        };
        for initial in [None, Some(&s0)] {
            let rates = Rates::Learned(u.as_tensor().clone());
            let x = Call {
                q: q.as_tensor(),
                k: k.as_tensor(),
                vp: &vp,
                cw: cw.as_tensor(),
            };
            let run = |fused: bool| {
                let (o, st) = if fused {
                    fused_chunk::<f64>(&x, &rates, chunk, initial, true).unwrap()
                } else {
                    vort::retention::chunk::<f64>(&x, &rates, chunk, initial, true).unwrap()
                };
                let gr = (&o * &w).unwrap().sum_all().unwrap().backward().unwrap();
                let grads: Vec<Vec<f64>> = [&q, &k, &v, &cw, &u]
                    .iter()
                    .map(|x| to_f64(gr.get(x.as_tensor()).expect("a gradient")))
                    .collect();
                (to_f64(&o), st.unwrap().host().unwrap(), grads)
            };
            let (oc, sc, gc) = run(false);
            let (of, sf, gf) = run(true);
            let tag = format!("case {case} initial {}", initial.is_some());
            let e = rel_rms(&of, &oc);
            assert!(e <= to, "{tag}: o {e:e}");
            let e = rel_rms(&sf, &sc);
            assert!(e <= to, "{tag}: final state {e:e}");
            for (j, name) in ["q", "k", "v", "cw", "u"].iter().enumerate() {
                let e = rel_rms(&gf[j], &gc[j]);
                assert!(e <= tg, "{tag}: grad {name} {e:e}");
            }
            // the rate gradient is not trivially zero
            assert!(
                gf[4].iter().any(|x| x.abs() > 1e-3),
                "{tag}: du {:?}",
                gf[4]
            );
        }
    }
}

/// The fused rate gradient against central finite differences of the fused forward (f64):
/// an independent check of the hand-written du, not only agreement with autodiff.
#[test]
fn fused_rate_gradient_matches_finite_differences() {
    use vort::retention::{Inputs as Call, Rates};
    let dims = Dims::new(1, 2, 29, 3, 2);
    let inp = Inputs::new(dims, 0.25, 7);
    let (q, k, v, _) = inp.tensors(DType::F64);
    let dev = Device::Cpu;
    let vp = with_ones(&v).unwrap();
    let cw = Tensor::ones((1, 2, 29, 2), DType::F64, &dev).unwrap();
    let w = Tensor::randn(0f64, 1.0, (1, 2, 29, 3), &dev).unwrap();
    let u0 = vec![0.05, 0.7, 0.3, 0.01];
    let loss = |u: &[f64]| -> (f64, Vec<f64>) {
        let uv = Var::from_tensor(&Tensor::from_vec(u.to_vec(), (2, 2), &dev).unwrap()).unwrap();
        let x = Call {
            q: q.as_tensor(),
            k: k.as_tensor(),
            vp: &vp,
            cw: &cw,
        };
        let rates = Rates::Learned(uv.as_tensor().clone());
        let (o, _) = fused_chunk::<f64>(&x, &rates, 8, None, false).unwrap();
        let l = (&o * &w).unwrap().sum_all().unwrap();
        let g = l.backward().unwrap();
        (
            l.to_scalar::<f64>().unwrap(),
            to_f64(g.get(uv.as_tensor()).unwrap()),
        )
    };
    let (_, du) = loss(&u0);
    let step = 1e-6;
    let fd: Vec<f64> = (0..u0.len())
        .map(|i| {
            let (mut p, mut m) = (u0.clone(), u0.clone());
            p[i] += step;
            m[i] -= step;
            (loss(&p).0 - loss(&m).0) / (2.0 * step)
        })
        .collect();
    let e = rel_rms(&du, &fd);
    assert!(e <= FD_GRAD_REL, "du {du:?} vs fd {fd:?}: {e:e}");
}
