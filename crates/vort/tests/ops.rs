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

fn to_f64(t: &Tensor) -> Vec<f64> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

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
