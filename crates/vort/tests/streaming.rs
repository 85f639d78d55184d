//! Streaming: feeding a sequence in pieces equals one pass; State save/restore round trip.

mod common;

use candle_core::{DType, Device};
use common::*;
use vort::retention::State;
use vort::tol::*;
use vort::{Dims, NodeMode, NodeSpec, VortError};

const EPS_DEN: f64 = 1e-6;

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "vort-test-{}-{name}.safetensors",
        std::process::id()
    ))
}

/// Slice [B, H, T, X] buffers to tokens [t0, t1).
fn slice_t(x: &[f64], dims: Dims, width: usize, t0: usize, t1: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for bh in 0..dims.b * dims.h {
        out.extend_from_slice(&x[(bh * dims.t + t0) * width..(bh * dims.t + t1) * width]);
    }
    out
}

fn piece(inp: &Inputs, t0: usize, t1: usize) -> Inputs {
    let d = inp.dims;
    Inputs {
        dims: Dims { t: t1 - t0, ..d },
        q: slice_t(&inp.q, d, d.f, t0, t1),
        k: slice_t(&inp.k, d, d.f, t0, t1),
        v: slice_t(&inp.v, d, d.d, t0, t1),
        alpha: slice_t(&inp.alpha, d, 1, t0, t1),
    }
}

/// Reassemble pieces' outputs [B, H, t_i, D] into [B, H, T, D].
fn join(parts: &[Vec<f64>], lens: &[usize], dims: Dims) -> Vec<f64> {
    let mut out = vec![0.0; dims.b * dims.h * dims.t * dims.d];
    let mut t0 = 0;
    for (p, &l) in parts.iter().zip(lens) {
        for bh in 0..dims.b * dims.h {
            for t in 0..l {
                for x in 0..dims.d {
                    out[(bh * dims.t + t0 + t) * dims.d + x] = p[(bh * l + t) * dims.d + x];
                }
            }
        }
        t0 += l;
    }
    out
}

const LENS: [usize; 5] = [1, 7, 16, 30, 9]; // T = 63

fn f32s(x: &[f64]) -> Vec<f32> {
    x.iter().map(|&v| v as f32).collect()
}

#[test]
fn recurrent_in_pieces_equals_one_pass_f32() {
    for mode in [NodeMode::Banks, NodeMode::Shared] {
        let tb = NodeSpec {
            mode,
            banks: 3,
            delta: 0.3,
            horizon: 1000,
            eps: 1e-4,
        }
        .build()
        .unwrap();
        let dims = Dims::new(2, 2, 63, 6, 5);
        let inp = Inputs::new(dims, 0.3, 11);
        let tables = std::slice::from_ref(&tb);
        let mut one = State::<f32>::zeros(2, 2, tb.len(), 6, 5);
        let y1 = recurrent_y(
            &mut one,
            &f32s(&inp.q),
            &f32s(&inp.k),
            &f32s(&inp.v),
            &inp.alpha,
            dims,
            tables,
            EPS_DEN,
        )
        .unwrap();
        let mut st = State::<f32>::zeros(2, 2, tb.len(), 6, 5);
        let mut parts = Vec::new();
        let mut t0 = 0;
        for &l in &LENS {
            let p = piece(&inp, t0, t0 + l);
            let y = recurrent_y(
                &mut st,
                &f32s(&p.q),
                &f32s(&p.k),
                &f32s(&p.v),
                &p.alpha,
                p.dims,
                tables,
                EPS_DEN,
            )
            .unwrap();
            parts.push(y.iter().map(|&x| x as f64).collect());
            t0 += l;
        }
        let y1: Vec<f64> = y1.iter().map(|&x| x as f64).collect();
        let e = rel_rms(&join(&parts, &LENS, dims), &y1);
        assert!(e <= STREAMING_F32_REL, "{mode:?}: {e:e}");
        assert_eq!(st.pos, 63);
        assert_eq!(
            st.host().unwrap(),
            one.host().unwrap(),
            "same operations in the same order: identical state"
        );
    }
}

#[test]
fn chunked_in_pieces_with_state_equals_one_pass() {
    let tb = NodeSpec {
        mode: NodeMode::Shared,
        banks: 3,
        delta: 0.3,
        horizon: 1000,
        eps: 1e-4,
    }
    .build()
    .unwrap();
    let dims = Dims::new(1, 2, 63, 6, 5);
    let inp = Inputs::new(dims, 0.3, 12);
    let tables = std::slice::from_ref(&tb);
    for dt in [DType::F64, DType::F32] {
        let (q, k, v, a) = inp.tensors(dt);
        let (y1, g1) = chunk_y::<f64>(&q, &k, &v, &a, tables, 8, None, EPS_DEN).unwrap();
        let mut state = None;
        let mut parts = Vec::new();
        let mut t0 = 0;
        for &l in &LENS {
            let p = piece(&inp, t0, t0 + l);
            let (q, k, v, a) = p.tensors(dt);
            let (y, g) = chunk_y(&q, &k, &v, &a, tables, 8, state.as_ref(), EPS_DEN).unwrap();
            parts.push(to_f64(&y));
            state = Some(g);
            t0 += l;
        }
        let tol = if dt == DType::F64 {
            F64_SAME_KERNEL_REL
        } else {
            STREAMING_F32_REL
        };
        let e = rel_rms(&join(&parts, &LENS, dims), &to_f64(&y1));
        assert!(e <= tol, "{dt:?}: y {e:e}");
        let last: &vort::retention::State<f64> = state.as_ref().unwrap();
        assert_eq!(last.pos, 63);
        let es = rel_rms(&last.host().unwrap(), &g1.host().unwrap());
        assert!(es <= tol, "{dt:?}: state {es:e}");
    }
}

#[test]
fn state_save_restore_round_trip_and_resume() {
    let tb = NodeSpec {
        mode: NodeMode::Banks,
        banks: 2,
        delta: 0.4,
        horizon: 500,
        eps: 1e-3,
    }
    .build()
    .unwrap();
    let dims = Dims::new(1, 3, 40, 4, 3);
    let inp = Inputs::new(dims, 0.4, 13);
    let tables = std::slice::from_ref(&tb);
    let run = |st: &mut State<f64>, p: &Inputs| {
        recurrent_y(st, &p.q, &p.k, &p.v, &p.alpha, p.dims, tables, EPS_DEN).unwrap()
    };
    let mut one = State::<f64>::zeros(1, 3, tb.len(), 4, 3);
    let y_all = run(&mut one, &inp);
    let mut st = State::<f64>::zeros(1, 3, tb.len(), 4, 3);
    let y_a = run(&mut st, &piece(&inp, 0, 25));
    let path = tmp("resume");
    st.save(&path, &tb.u).unwrap();
    let mut back = State::<f64>::load(&path, &tb.u).unwrap();
    assert_eq!(back, st, "f64 round trip is bitwise");
    let y_b = run(&mut back, &piece(&inp, 25, 40));
    let e = rel_rms(&join(&[y_a, y_b], &[25, 15], dims), &y_all);
    assert!(e <= F64_SAME_KERNEL_REL, "{e:e}");
    // a state is never restored into a layer with other nodes
    let other = NodeSpec {
        mode: NodeMode::Banks,
        banks: 3,
        delta: 0.4,
        horizon: 500,
        eps: 1e-3,
    }
    .build()
    .unwrap();
    assert!(matches!(
        State::<f64>::load(&path, &other.u),
        Err(VortError::InvalidArgument(_))
    ));
    // f32 states round trip exactly too
    let g: Vec<f32> = (0..3 * tb.len() * 4 * 4)
        .map(|i| (i as f32).sin())
        .collect();
    let s32 = State::<f32>::from_host(1, 3, tb.len(), 4, 3, 7, g, &Device::Cpu).unwrap();
    let p32 = tmp("f32");
    s32.save(&p32, &tb.u).unwrap();
    assert_eq!(State::<f32>::load(&p32, &tb.u).unwrap(), s32);
    // missing file: typed I/O error
    assert!(matches!(
        State::<f32>::load(&tmp("absent"), &tb.u),
        Err(VortError::Io { .. })
    ));
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(p32);
}

/// Every form refuses a context past its table's certified horizon with the typed error, and
/// the recurrent form leaves the state untouched when it refuses.
#[test]
fn every_form_refuses_contexts_past_the_horizon() {
    let horizon = 40;
    for mode in [NodeMode::Banks, NodeMode::Shared] {
        let spec = NodeSpec {
            mode,
            banks: 3,
            delta: 0.3,
            horizon,
            eps: 1e-3,
        };
        let tb = spec.build().unwrap();
        let tables = std::slice::from_ref(&tb);
        let inp = Inputs::new(Dims::new(1, 2, 41, 3, 2), 0.3, 5);
        let beyond = |e: VortError| match e {
            VortError::BeyondHorizon { context, horizon } => {
                assert_eq!((context, horizon), (41, 40));
                assert!(e.is_input_error());
                let msg = e.to_string();
                assert!(msg.contains("41") && msg.contains("40"), "{msg}");
            }
            other => panic!("expected BeyondHorizon, got {other}"),
        };
        beyond(
            naive_y(
                &inp.q, &inp.k, &inp.v, &inp.alpha, inp.dims, tables, EPS_DEN,
            )
            .unwrap_err(),
        );
        let (q, k, v, a) = inp.tensors(DType::F64);
        beyond(
            chunk_y::<f64>(
                q.as_tensor(),
                k.as_tensor(),
                v.as_tensor(),
                a.as_tensor(),
                tables,
                8,
                None,
                EPS_DEN,
            )
            .unwrap_err(),
        );
        // recurrent: 30 tokens pass, the next 11 would reach 41 and are refused as a whole
        let first = piece(&inp, 0, 30);
        let mut st = State::<f64>::zeros(1, 2, tb.len(), 3, 2);
        recurrent_y(
            &mut st,
            &first.q,
            &first.k,
            &first.v,
            &first.alpha,
            first.dims,
            tables,
            EPS_DEN,
        )
        .unwrap();
        let before = st.clone();
        let rest = piece(&inp, 30, 41);
        beyond(
            recurrent_y(
                &mut st,
                &rest.q,
                &rest.k,
                &rest.v,
                &rest.alpha,
                rest.dims,
                tables,
                EPS_DEN,
            )
            .unwrap_err(),
        );
        assert_eq!(st, before, "a refused call must not touch the state");
        // the same stream with a table for a longer horizon goes through
        let long = spec.with_horizon(1 << 20).build().unwrap();
        let mut st = State::<f64>::zeros(1, 2, long.len(), 3, 2);
        let y = recurrent_y(
            &mut st,
            &inp.q,
            &inp.k,
            &inp.v,
            &inp.alpha,
            inp.dims,
            std::slice::from_ref(&long),
            EPS_DEN,
        )
        .unwrap();
        assert!(y.iter().all(|x| x.is_finite()));
    }
}

/// A node recipe out of its domain is refused before anything is built.
#[test]
fn node_spec_refuses_bad_recipes() {
    let ok = NodeSpec {
        mode: NodeMode::Banks,
        banks: 2,
        delta: 0.2,
        horizon: 100,
        eps: 1e-3,
    };
    assert!(ok.validate().is_ok());
    for bad in [
        NodeSpec { delta: 1.0, ..ok },
        NodeSpec { delta: 1.5, ..ok },
        NodeSpec { delta: 0.0, ..ok },
        NodeSpec {
            delta: f64::NAN,
            ..ok
        },
        NodeSpec { horizon: 0, ..ok },
        NodeSpec { eps: 0.0, ..ok },
        NodeSpec { eps: 0.9, ..ok },
        NodeSpec { banks: 1, ..ok },
        NodeSpec { banks: 0, ..ok },
    ] {
        let e = bad.build().unwrap_err();
        assert!(matches!(e, VortError::InvalidArgument(_)), "{bad:?}: {e:?}");
    }
    // shared nodes ignore the bank count
    let shared = NodeSpec {
        mode: NodeMode::Shared,
        banks: 0,
        ..ok
    };
    assert!(shared.build().is_ok());
}

/// Shared-node weights are >= 0 at every order the layer can see (the Hermite table between
/// its points, the ends, clamped orders), so the kernel is positive at every lag.
#[test]
fn shared_table_weights_are_nonnegative_everywhere() {
    for (delta, horizon, eps) in [(0.1, 8192, 1e-3), (0.05, 1 << 20, 1e-4), (0.3, 300, 1e-6)] {
        let tb = NodeSpec {
            mode: NodeMode::Shared,
            banks: 4,
            delta,
            horizon,
            eps,
        }
        .build()
        .unwrap();
        let n = 20_011; // not a multiple of the table's 4096 cells: points fall inside cells
        for i in 0..=n + 20 {
            let a = delta - 0.01 + (1.0 - delta + 0.02) * i as f64 / n as f64;
            let c = tb.weights_at(a);
            assert!(c.iter().all(|&x| x >= 0.0), "a = {a}: {c:?}");
        }
    }
}

/// The chunked form keeps a carried state as the tensor it computed (on the call's device):
/// handing it to the next piece is no copy, and the host view is the same values.
#[test]
fn a_carried_state_is_its_tensor_not_a_host_copy() {
    let g: Vec<f64> = (0..2 * 3 * 5).map(|i| i as f64 * 0.25).collect();
    let st = State::<f64>::from_host(1, 2, 1, 3, 4, 9, g.clone(), &Device::Cpu).unwrap();
    assert_eq!(st.tensor().dims(), [1, 2, 1, 3, 5]);
    let same = st.to_tensor(&Device::Cpu).unwrap();
    assert_eq!(
        same.id(),
        st.tensor().id(),
        "same device: the state's own tensor"
    );
    assert_eq!(st.host().unwrap(), g);
    assert_eq!(st.bytes(), g.len() * 8);
    let back = State::<f64>::from_tensor(&same, 9).unwrap();
    assert_eq!(back, st);
    // a buffer of the wrong size is refused, not truncated
    assert!(State::<f64>::from_host(1, 2, 1, 3, 4, 0, vec![0.0; 7], &Device::Cpu).is_err());
}
