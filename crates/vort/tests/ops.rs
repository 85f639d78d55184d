//! The fused parallel GELU against candle's `Tensor::gelu` (the same tanh approximation, in
//! plain ops): outputs and gradients, f32 and f64, on awkward sizes (empty, one element, one
//! past a parallel chunk, a non-contiguous input); and its gradient against central
//! differences.

/// Candle's GELU backward uses √(2/π)/2 and 3·0.044715·√(2/π)/2 rounded to six digits
/// (0.398942, 0.0535161; candle-core backprop.rs), so its gradient is ~4e-6 off the exact
/// derivative, which the fused op computes (checked by finite differences below).
const CANDLE_GELU_GRAD_REL: f64 = 1e-5;

use candle_core::{DType, Device, Tensor, Var};
use vort::tol::rel_rms;

mod common;

use common::to_f64;

#[test]
fn fused_gelu_matches_candles_gelu_values_and_gradients() {
    let dev = Device::Cpu;
    for (dt, tol) in [(DType::F64, 1e-13), (DType::F32, 1e-6)] {
        for shape in [
            vec![0usize],
            vec![1],
            vec![3, 5477],
            vec![16385],
            vec![7, 9],
        ] {
            let n: usize = shape.iter().product();
            // values over [-6, 6]: both tails and the bend
            let xs: Vec<f64> = (0..n)
                .map(|i| -6.0 + 12.0 * ((i * 7919) % 1000) as f64 / 999.0)
                .collect();
            let x = Var::from_tensor(
                &Tensor::from_vec(xs, shape.as_slice(), &dev)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap(),
            )
            .unwrap();
            // a non-contiguous view for the 2-D shapes
            let input = if shape.len() == 2 {
                x.as_tensor().t().unwrap()
            } else {
                x.as_tensor().clone()
            };
            let w = Tensor::randn(0f64, 1.0, input.dims(), &dev)
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let run = |fused: bool| {
                let y = if fused {
                    vort::ops::gelu(&input).unwrap()
                } else {
                    input.gelu().unwrap()
                };
                let g = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
                let gx = g.get(x.as_tensor()).map(to_f64).unwrap_or_default();
                (y.dims().to_vec(), to_f64(&y), gx)
            };
            let (dp, yp, gp) = run(false);
            let (df, yf, gf) = run(true);
            assert_eq!(dp, df, "{dt:?} {shape:?}: shape");
            if n == 0 {
                continue;
            }
            let e = rel_rms(&yf, &yp);
            assert!(e <= tol, "{dt:?} {shape:?}: y {e:e}");
            let e = rel_rms(&gf, &gp);
            assert!(e <= CANDLE_GELU_GRAD_REL, "{dt:?} {shape:?}: grad {e:e}");
        }
    }
    // other dtypes are refused, not mangled
    let i = Tensor::new(&[1u32, 2], &dev).unwrap();
    assert!(vort::ops::gelu(&i).is_err());
}

#[test]
fn fused_gelu_gradient_is_the_exact_derivative() {
    let dev = Device::Cpu;
    let xs: Vec<f64> = (0..97).map(|i| -6.0 + 12.0 * i as f64 / 96.0).collect();
    let x = Var::from_tensor(&Tensor::new(xs.as_slice(), &dev).unwrap()).unwrap();
    let y = vort::ops::gelu(x.as_tensor()).unwrap();
    let g = to_f64(
        y.sum_all()
            .unwrap()
            .backward()
            .unwrap()
            .get(x.as_tensor())
            .unwrap(),
    );
    let f = |v: f64| to_f64(&vort::ops::gelu(&Tensor::new(&[v], &dev).unwrap()).unwrap())[0];
    let h = 1e-5;
    let fd: Vec<f64> = xs
        .iter()
        .map(|&v| (f(v + h) - f(v - h)) / (2.0 * h))
        .collect();
    let e = rel_rms(&g, &fd);
    assert!(e <= 1e-9, "{e:e}");
}

/// y and the gradients of a and b of the loss Σ y ∘ g.
fn value_and_grads(y: &Tensor, g: &Var, a: &Var, b: &Var) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let gr = (y * g.as_tensor())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    (
        to_f64(y),
        to_f64(gr.get(a.as_tensor()).unwrap()),
        to_f64(gr.get(b.as_tensor()).unwrap()),
    )
}

/// Deterministic values in [-2, 2) for a shape.
fn filled(shape: &[usize], seed: u64, dt: DType) -> Var {
    let n: usize = shape.iter().product();
    let mut r = vort::vort_math::rng::XorShift64Star::new(seed);
    let v: Vec<f64> = (0..n).map(|_| 4.0 * r.unif() - 2.0).collect();
    Var::from_tensor(
        &Tensor::from_vec(v, shape, &Device::Cpu)
            .unwrap()
            .to_dtype(dt)
            .unwrap(),
    )
    .unwrap()
}

/// The fused RMSNorm against the plain candle form: outputs and the gradients of x and the
/// gain, f32 and f64, one row, odd widths, and more rows than one parallel task takes.
#[test]
fn fused_rms_norm_matches_the_plain_form() {
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
        for shape in [vec![1, 1], vec![3, 7, 5], vec![2, 300, 64]] {
            let d = *shape.last().unwrap();
            let x = filled(&shape, 1, dt);
            let w = filled(&[d], 2, dt);
            let g = filled(&shape, 3, dt);
            let run = |fused: bool| {
                let y = if fused {
                    vort::ops::rms_norm(x.as_tensor(), w.as_tensor(), 1e-6).unwrap()
                } else {
                    vort::ops::reference::rms_norm(x.as_tensor(), w.as_tensor(), 1e-6).unwrap()
                };
                value_and_grads(&y, &g, &x, &w)
            };
            let (yp, xp, wp) = run(false);
            let (yf, xf, wf) = run(true);
            for (name, a, b) in [("y", &yf, &yp), ("dx", &xf, &xp), ("dw", &wf, &wp)] {
                if d == 1 && name == "dx" {
                    // one column: dy/dx = w eps / (x² + eps)^(3/2) ~ 1e-6 is all cancellation
                    // (r g w - x c with both terms O(1)); compare on the O(1) scale
                    let worst = a
                        .iter()
                        .zip(b)
                        .map(|(p, q)| (p - q).abs())
                        .fold(0.0, f64::max);
                    assert!(worst <= tol, "{dt:?} {shape:?}: dx {worst:e}");
                    continue;
                }
                let e = rel_rms(a, b);
                assert!(e <= tol, "{dt:?} {shape:?}: {name} {e:e}");
            }
        }
    }
    // a gain of the wrong width is refused
    let x = Tensor::ones((2, 3), DType::F32, &Device::Cpu).unwrap();
    let w = Tensor::ones(4, DType::F32, &Device::Cpu).unwrap();
    assert!(vort::ops::rms_norm(&x, &w, 1e-6).is_err());
}

/// The fused short convolution against the plain candle form: outputs, carried tails and the
/// gradients of x, the weights and the previous piece's tail, for kernels 2-5, one token,
/// one channel, and pieces chained with the carried tail.
#[test]
fn fused_short_conv_matches_the_plain_form() {
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-6)] {
        for &(b, t, c, k) in &[(1, 1, 3, 2), (2, 7, 5, 4), (3, 20, 64, 3), (1, 5, 1, 5)] {
            for with_prev in [false, true] {
                let x = filled(&[b, t, c], 4, dt);
                let w = filled(&[k, c], 5, dt);
                let p = filled(&[b, k - 1, c], 6, dt);
                let g = filled(&[b, t, c], 7, dt);
                let prev = with_prev.then(|| p.as_tensor());
                let run = |fused: bool| {
                    let (y, tail) = if fused {
                        vort::ops::short_conv(x.as_tensor(), w.as_tensor(), prev).unwrap()
                    } else {
                        vort::ops::reference::short_conv(x.as_tensor(), w.as_tensor(), prev)
                            .unwrap()
                    };
                    let gr = (&y * g.as_tensor())
                        .unwrap()
                        .sum_all()
                        .unwrap()
                        .backward()
                        .unwrap();
                    let grad = |v: &Var| gr.get(v.as_tensor()).map(to_f64).unwrap_or_default();
                    (to_f64(&y), to_f64(&tail), grad(&x), grad(&w), grad(&p))
                };
                let plain = run(false);
                let fused = run(true);
                let tag = format!("{dt:?} B{b} T{t} C{c} K{k} prev {with_prev}");
                for (name, a, r) in [
                    ("y", &fused.0, &plain.0),
                    ("tail", &fused.1, &plain.1),
                    ("dx", &fused.2, &plain.2),
                    ("dw", &fused.3, &plain.3),
                    ("dprev", &fused.4, &plain.4),
                ] {
                    assert_eq!(a.len(), r.len(), "{tag}: {name} length");
                    if !a.is_empty() {
                        let e = rel_rms(a, r);
                        assert!(e <= tol, "{tag}: {name} {e:e}");
                    }
                }
            }
        }
    }
}

/// Causal softmax attention through the fused masked row softmax against the plain form (an
/// additive -inf mask and candle-nn's softmax): outputs and the gradients of q, k and v, with
/// as many keys as queries and with a cache of earlier keys, one query, f32 and f64.
#[test]
fn fused_causal_softmax_matches_the_plain_form() {
    use vort::attention::{causal_softmax, causal_softmax_reference};
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
        for &(b, h, t, s, d) in &[
            (1, 1, 1, 1, 3),
            (2, 3, 17, 17, 5),
            (1, 2, 9, 40, 4),
            (2, 1, 1, 6, 2),
        ] {
            let q = filled(&[b, h, t, d], 8, dt);
            let k = filled(&[b, h, s, d], 9, dt);
            let v = filled(&[b, h, s, d], 10, dt);
            let g = filled(&[b, h, t, d], 11, dt);
            let run = |fused: bool| {
                let (qq, kk, vv) = (q.as_tensor(), k.as_tensor(), v.as_tensor());
                let y = if fused {
                    causal_softmax(qq, kk, vv).unwrap()
                } else {
                    causal_softmax_reference(qq, kk, vv).unwrap()
                };
                let gr = (&y * g.as_tensor())
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                let grad = |x: &Var| to_f64(gr.get(x.as_tensor()).unwrap());
                (to_f64(&y), grad(&q), grad(&k), grad(&v))
            };
            let plain = run(false);
            let fused = run(true);
            for (name, a, r) in [
                ("y", &fused.0, &plain.0),
                ("dq", &fused.1, &plain.1),
                ("dk", &fused.2, &plain.2),
                ("dv", &fused.3, &plain.3),
            ] {
                let e = rel_rms(a, r);
                assert!(e <= tol, "{dt:?} B{b} H{h} T{t} S{s}: {name} {e:e}");
            }
        }
    }
    // the masked entries are exactly zero, each row sums to one
    let l = Tensor::new(&[[[1f32, 2.0, 3.0], [0.5, -1.0, 9.0]]], &Device::Cpu).unwrap();
    let p = vort::ops::causal_softmax_rows(&l, 1)
        .unwrap()
        .to_vec3::<f32>()
        .unwrap();
    assert_eq!(p[0][0][2], 0.0);
    assert!((p[0][0][0] + p[0][0][1] - 1.0).abs() < 1e-6);
    assert!((p[0][1].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    assert!(vort::ops::causal_softmax_rows(&l, 0).is_err());
}

/// The fused q/k normalisation against the plain candle form: outputs and the gradients of z
/// and of the per-head scale, f32 and f64, on one row of width 1, odd sizes, more rows than a
/// parallel task, and a non-contiguous input.
#[test]
fn fused_qk_norm_matches_the_plain_form() {
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-6)] {
        for shape in [vec![1, 1, 1, 1], vec![2, 3, 7, 5], vec![2, 2, 300, 16]] {
            let h = shape[1];
            let z = filled(&shape, 4, dt);
            let s = filled(&[h], 5, dt);
            let g = filled(&shape, 6, dt);
            let run = |fused: bool| {
                let y = if fused {
                    vort::ops::qk_norm(z.as_tensor(), s.as_tensor()).unwrap()
                } else {
                    vort::ops::reference::qk_norm(z.as_tensor(), s.as_tensor()).unwrap()
                };
                value_and_grads(&y, &g, &z, &s)
            };
            let (yp, zp, sp) = run(false);
            let (yf, zf, sf) = run(true);
            for (name, a, b) in [("y", &yf, &yp), ("dz", &zf, &zp), ("ds", &sf, &sp)] {
                if shape[3] == 1 && name == "dz" {
                    // width 1: z/|z| is flat, dz is 1e-12-scale cancellation in both forms
                    let worst = a
                        .iter()
                        .zip(b)
                        .map(|(p, q)| (p - q).abs())
                        .fold(0.0, f64::max);
                    assert!(worst <= 1e-6, "{dt:?} {shape:?}: dz {worst:e}");
                    continue;
                }
                let e = rel_rms(a, b);
                assert!(e <= tol, "{dt:?} {shape:?}: {name} {e:e}");
            }
        }
    }
    // a non-contiguous z (the head and time axes swapped) gives the contiguous result
    let z = filled(&[2, 5, 3, 4], 7, DType::F32);
    let zt = z.as_tensor().transpose(1, 2).unwrap();
    let s = Tensor::new(&[1.5f32, 2.0, 0.5], &Device::Cpu).unwrap();
    let a = to_f64(&vort::ops::qk_norm(&zt, &s).unwrap());
    let b = to_f64(&vort::ops::reference::qk_norm(&zt, &s).unwrap());
    assert!(rel_rms(&a, &b) <= 2e-6);
    // no tokens: an empty result, not a panic
    let empty = Tensor::zeros((2, 3, 0, 4), DType::F32, &Device::Cpu).unwrap();
    let s3 = Tensor::ones(3, DType::F32, &Device::Cpu).unwrap();
    assert_eq!(
        vort::ops::qk_norm(&empty, &s3).unwrap().dims(),
        [2, 3, 0, 4]
    );
    // a scale of the wrong length is refused
    assert!(vort::ops::qk_norm(&zt, &Tensor::ones(2, DType::F32, &Device::Cpu).unwrap()).is_err());
}

/// The fused FAVOR+ exponential against the plain candle form: outputs and the gradients of
/// the projections and of the rows, f32 and f64, one row, odd widths, more rows than a
/// parallel task; mismatched row counts are refused.
#[test]
fn fused_favor_exp_matches_the_plain_form() {
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-6)] {
        for (r, m, d) in [(1, 1, 1), (7, 5, 3), (600, 32, 16)] {
            let p = filled(&[r, m], 8, dt);
            let z = filled(&[r, d], 9, dt);
            let g = filled(&[r, m], 10, dt);
            let run = |fused: bool| {
                let y = if fused {
                    vort::ops::favor_exp(p.as_tensor(), z.as_tensor()).unwrap()
                } else {
                    vort::ops::reference::favor_exp(p.as_tensor(), z.as_tensor()).unwrap()
                };
                value_and_grads(&y, &g, &p, &z)
            };
            let (yp, pp, zp) = run(false);
            let (yf, pf, zf) = run(true);
            for (name, a, b) in [("y", &yf, &yp), ("dp", &pf, &pp), ("dz", &zf, &zp)] {
                let e = rel_rms(a, b);
                assert!(e <= tol, "{dt:?} ({r}, {m}, {d}): {name} {e:e}");
            }
        }
    }
    let p = Tensor::ones((3, 4), DType::F32, &Device::Cpu).unwrap();
    let z = Tensor::ones((2, 4), DType::F32, &Device::Cpu).unwrap();
    assert!(vort::ops::favor_exp(&p, &z).is_err());
    let no_width = Tensor::ones((3, 0), DType::F32, &Device::Cpu).unwrap();
    assert!(vort::ops::favor_exp(&p, &no_width).is_err());
}
