//! The chain naive <- naive_recurrent <- chunk (docs/DESIGN.md §5), for both memory modes:
//! outputs, final states and gradients, with awkward shapes; and the SOE forms against the exact
//! GL kernel ([`vort::retention::exact_gl`]) within the certificate.

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use vort::retention::{exact_gl, State};
use vort::tol::*;
use vort::{Dims, NodeMode, NodeSpec, NodeTable};

const EPS_DEN: f64 = 1e-6;
const DELTA: f64 = 0.2;

fn table(mode: NodeMode, horizon: u64) -> NodeTable {
    NodeSpec {
        mode,
        banks: 4,
        delta: DELTA,
        horizon,
        eps: TEST_SOE_EPS,
    }
    .build()
    .unwrap()
}

fn dims(b: usize, h: usize, t: usize, f: usize, d: usize) -> Dims {
    Dims::new(b, h, t, f, d)
}

/// Which kernel the naive sum uses: the exact GL one ([`exact_gl`]) or the table's SOE (the
/// contract's [`vort::retention::naive()`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Exact,
    Soe,
}

fn run_naive(inp: &Inputs, tb: &NodeTable, kernel: Kernel) -> Vec<f64> {
    let f = match kernel {
        Kernel::Exact => exact_gl,
        Kernel::Soe => naive_y,
    };
    f(
        &inp.q,
        &inp.k,
        &inp.v,
        &inp.alpha,
        inp.dims,
        std::slice::from_ref(tb),
        EPS_DEN,
    )
    .unwrap()
}

fn run_recurrent(inp: &Inputs, tb: &NodeTable) -> (Vec<f64>, State<f64>) {
    let Dims { b, h, f, d, .. } = inp.dims;
    let mut st = State::<f64>::zeros(b, h, tb.len(), f, d);
    let y = recurrent_y(
        &mut st,
        &inp.q,
        &inp.k,
        &inp.v,
        &inp.alpha,
        inp.dims,
        std::slice::from_ref(tb),
        EPS_DEN,
    )
    .unwrap();
    (y, st)
}

fn run_chunked(inp: &Inputs, tb: &NodeTable, chunk: usize, dt: DType) -> (Tensor, Tensor) {
    let (q, k, v, a) = inp.tensors(dt);
    let (y, st) = chunk_y::<f64>(
        &q,
        &k,
        &v,
        &a,
        std::slice::from_ref(tb),
        chunk,
        None,
        EPS_DEN,
    )
    .unwrap();
    (y, st.to_tensor(&candle_core::Device::Cpu).unwrap())
}

const MODES: [NodeMode; 2] = [NodeMode::Banks, NodeMode::Shared];

#[test]
fn naive_soe_kernel_is_within_certificate_of_exact() {
    for mode in MODES {
        let tb = table(mode, 64);
        assert!(tb.max_rel_error <= TEST_SOE_EPS);
        let inp = Inputs::new(dims(1, 2, 63, 5, 4), DELTA, 1);
        let exact = run_naive(&inp, &tb, Kernel::Exact);
        let soe = run_naive(&inp, &tb, Kernel::Soe);
        let e = vort::tol::rel_rms(&soe, &exact);
        eprintln!(
            "{mode:?}: N = {}, exact vs SOE output rel-RMS {e:.2e}",
            tb.len()
        );
        assert!(e <= EXACT_VS_SOE_REL, "{mode:?}: {e:e}");
        assert!(
            e > 0.0,
            "{mode:?}: SOE and exact kernels should differ slightly"
        );
        // every kernel value within the certificate at these lags
        for &a in &inp.alpha[..10] {
            for j in 1..64 {
                let x = tb.exact_kernel(a, j).unwrap();
                let s = tb.kernel(a, j);
                assert!(
                    (s / x - 1.0).abs() <= 1.01 * TEST_SOE_EPS,
                    "{mode:?} a={a} j={j}"
                );
            }
        }
    }
}

#[test]
fn recurrent_matches_naive_soe_f64() {
    for mode in MODES {
        let tb = table(mode, 64);
        for d in [
            dims(1, 2, 1, 3, 2),
            dims(2, 2, 63, 5, 4),
            dims(1, 1, 40, 60, 60),
        ] {
            let inp = Inputs::new(d, DELTA, 2);
            let yn = run_naive(&inp, &tb, Kernel::Soe);
            let (yr, st) = run_recurrent(&inp, &tb);
            let e = vort::tol::rel_rms(&yr, &yn);
            assert!(e <= F64_SAME_KERNEL_REL, "{mode:?} {d:?}: {e:e}");
            assert_eq!(st.pos, d.t as u64);
        }
    }
}

#[test]
fn recurrent_final_state_is_the_decayed_sum() {
    // G_n(T-1) = Σ_i e^(-u_n (T-1-i)) c_n(α_i) φk_i v'_iᵀ, checked directly in f64.
    let tb = table(NodeMode::Shared, 64);
    let inp = Inputs::new(dims(1, 1, 17, 3, 2), DELTA, 3);
    let (_, st) = run_recurrent(&inp, &tb);
    let g = st.host().unwrap();
    let (t, f, d1) = (17, 3, 3);
    for (n, &u) in tb.u.iter().enumerate() {
        for x in 0..f {
            for c in 0..d1 {
                let mut want = 0.0;
                for i in 0..t {
                    let vc = if c < 2 { inp.v[i * 2 + c] } else { 1.0 };
                    want += (-u * (t - 1 - i) as f64).exp()
                        * tb.weights_at(inp.alpha[i])[n]
                        * inp.k[i * f + x]
                        * vc;
                }
                let got = g[(n * f + x) * d1 + c];
                assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "n={n}");
            }
        }
    }
}

#[test]
fn chunked_matches_recurrent_outputs_and_state() {
    for mode in MODES {
        let tb = table(mode, 64);
        for (d, chunk) in [
            (dims(1, 2, 1, 3, 2), 4),
            (dims(2, 2, 63, 5, 4), 16),
            (dims(1, 2, 63, 5, 4), 1),
            (dims(1, 2, 63, 5, 4), 64),
            (dims(1, 1, 40, 60, 60), 7),
        ] {
            let inp = Inputs::new(d, DELTA, 4);
            let (yr, st) = run_recurrent(&inp, &tb);
            let (yc, gc) = run_chunked(&inp, &tb, chunk, DType::F64);
            let e = vort::tol::rel_rms(&to_f64(&yc), &yr);
            assert!(
                e <= F64_SAME_KERNEL_REL,
                "{mode:?} {d:?} C={chunk}: y {e:e}"
            );
            let es = vort::tol::rel_rms(&to_f64(&gc), &st.host().unwrap());
            assert!(
                es <= F64_SAME_KERNEL_REL,
                "{mode:?} {d:?} C={chunk}: state {es:e}"
            );
            // f32 chunked against f64
            let (y32, g32) = run_chunked(&inp, &tb, chunk, DType::F32);
            let e = vort::tol::rel_rms(&to_f64(&y32), &yr);
            eprintln!("{mode:?} {d:?} C={chunk}: f32 chunked vs f64 recurrent {e:.2e}");
            assert!(
                e <= F32_SAME_KERNEL_REL,
                "{mode:?} {d:?} C={chunk}: f32 y {e:e}"
            );
            let es = vort::tol::rel_rms(&to_f64(&g32), &st.host().unwrap());
            assert!(
                es <= F32_SAME_KERNEL_REL,
                "{mode:?} {d:?} C={chunk}: f32 state {es:e}"
            );
        }
    }
}

#[test]
fn recurrent_f32_matches_f64() {
    let tb = table(NodeMode::Shared, 64);
    let inp = Inputs::new(dims(1, 2, 63, 5, 4), DELTA, 5);
    let (y64, _) = run_recurrent(&inp, &tb);
    let c = |x: &Vec<f64>| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let mut st = State::<f32>::zeros(1, 2, tb.len(), 5, 4);
    let y32 = recurrent_y(
        &mut st,
        &c(&inp.q),
        &c(&inp.k),
        &c(&inp.v),
        &inp.alpha,
        inp.dims,
        std::slice::from_ref(&tb),
        EPS_DEN,
    )
    .unwrap();
    let y32: Vec<f64> = y32.iter().map(|&v| v as f64).collect();
    let e = vort::tol::rel_rms(&y32, &y64);
    assert!(e <= F32_SAME_KERNEL_REL, "{e:e}");
}

/// Autodiff of the f64 chunked form against finite differences of the naive SOE form (same
/// kernel: tight) and of the naive exact form (q, k, v at the certificate; α looser, see below).
#[test]
fn chunked_gradients_match_finite_differences_of_naive() {
    for mode in MODES {
        let tb = table(mode, 64);
        let inp = Inputs::new(dims(1, 2, 23, 4, 3), DELTA + 0.01, 6);
        let w = inp.cotangent(7);
        let (q, k, v, a) = inp.tensors(DType::F64);
        let wt = Tensor::from_vec(w.clone(), (1, 2, 23, 3), &Device::Cpu).unwrap();
        let (y, _) =
            chunk_y::<f64>(&q, &k, &v, &a, std::slice::from_ref(&tb), 5, None, EPS_DEN).unwrap();
        let grads = (y * &wt).unwrap().sum_all().unwrap().backward().unwrap();
        for (which, var) in [&q, &k, &v, &a].into_iter().enumerate() {
            let g = to_f64(grads.get(var.as_tensor()).unwrap());
            for kernel in [Kernel::Soe, Kernel::Exact] {
                let loss = |x: &Inputs| dot(&run_naive(x, &tb, kernel), &w);
                let (idx, fd) = fd_grad(&inp, which, 3, FD_STEP, &loss);
                let ad: Vec<f64> = idx.iter().map(|&i| g[i]).collect();
                let e = vort::tol::rel_rms(&ad, &fd);
                let tol = match kernel {
                    Kernel::Soe => FD_GRAD_REL,
                    Kernel::Exact => EXACT_VS_SOE_REL,
                };
                eprintln!("{mode:?} {kernel:?} input {which}: grad rel-RMS {e:.2e}");
                assert!(
                    e <= tol,
                    "{mode:?} {kernel:?} input {which}: {e:e} > {tol:e}"
                );
            }
        }
    }
}

#[test]
fn shared_hermite_table_matches_the_closed_form() {
    let s = vort::vort_math::shared::SharedSoe::build(DELTA, 4096, 1e-6).unwrap();
    let tb = NodeTable::from_shared(&s);
    let mut r = Rng::new(99);
    let mut worst_c: f64 = 0.0;
    let mut worst_d: f64 = 0.0;
    for _ in 0..200 {
        let a = DELTA + (1.0 - DELTA) * r.unif();
        let (c0, d0) = (s.weights_at(a), s.dweights_da(a));
        let (c1, d1) = (tb.weights_at(a), tb.dweights_da(a));
        let scale_c: f64 = c0.iter().map(|x| x.abs()).sum();
        let scale_d: f64 = d0.iter().map(|x| x.abs()).sum();
        for k in 0..c0.len() {
            worst_c = worst_c.max((c1[k] - c0[k]).abs() / scale_c);
            worst_d = worst_d.max((d1[k] - d0[k]).abs() / scale_d);
        }
    }
    eprintln!("hermite table: worst value {worst_c:.2e}, worst slope {worst_d:.2e}");
    assert!(worst_c <= 1e-10, "{worst_c:e}");
    // the closed form's own slope is a finite difference (~1e-9 relative)
    assert!(worst_d <= 1e-6, "{worst_d:e}");
}

/// The fixed-order power-law baseline (one SOE, no routing) through the same chain.
#[test]
fn fixed_order_power_law_chain() {
    for a in [0.0, 0.35, 0.8, 1.0] {
        let tb = NodeTable::banks_at(&[a], 64, TEST_SOE_EPS).unwrap();
        assert_eq!(tb.is_empty(), a == 0.0, "a = 0 has no memory nodes");
        let inp = Inputs::new(dims(1, 2, 63, 5, 4), DELTA, 31);
        let exact = run_naive(&inp, &tb, Kernel::Exact);
        let soe = run_naive(&inp, &tb, Kernel::Soe);
        assert!(
            vort::tol::rel_rms(&soe, &exact) <= EXACT_VS_SOE_REL,
            "a={a}"
        );
        let (yr, st) = run_recurrent(&inp, &tb);
        assert!(
            vort::tol::rel_rms(&yr, &soe) <= F64_SAME_KERNEL_REL,
            "a={a}"
        );
        let (yc, gc) = run_chunked(&inp, &tb, 10, DType::F64);
        assert!(
            vort::tol::rel_rms(&to_f64(&yc), &yr) <= F64_SAME_KERNEL_REL,
            "a={a}"
        );
        assert!(
            vort::tol::rel_rms(&to_f64(&gc), &st.host().unwrap()) <= F64_SAME_KERNEL_REL,
            "a={a}"
        );
        // α has no effect on a fixed-order table: its gradient is exactly zero
        let (q, k, v, al) = inp.tensors(DType::F64);
        let (y, _) = chunk_y::<f64>(
            &q,
            &k,
            &v,
            &al,
            std::slice::from_ref(&tb),
            10,
            None,
            EPS_DEN,
        )
        .unwrap();
        let g = y.sum_all().unwrap().backward().unwrap();
        // (with no nodes at all, a = 0, α has no path to the output)
        if let Some(ga) = g.get(al.as_tensor()) {
            assert!(to_f64(ga).iter().all(|&x| x == 0.0), "a={a}");
        } else {
            assert_eq!(a, 0.0);
        }
    }
}

#[test]
fn kernels_stay_positive_at_every_lag() {
    // Inside the certified horizon every SOE kernel is within eps of w_j > 0; both modes are
    // positive mixtures, so far past it the kernel is still positive and non-increasing
    // (`covers` reports the horizon, past which the forms refuse to run).
    for mode in MODES {
        let tb = NodeSpec {
            mode,
            banks: 4,
            delta: 0.1,
            horizon: 4096,
            eps: 1e-3,
        }
        .build()
        .unwrap();
        assert!(tb.covers(4096) && !tb.covers(4097));
        for i in 0..=20 {
            let a = 0.1 + 0.9 * i as f64 / 20.0;
            let mut prev = f64::INFINITY;
            for j in [
                1u64,
                2,
                7,
                64,
                500,
                4096,
                1 << 16,
                1 << 18,
                1 << 20,
                1 << 30,
            ] {
                let k = tb.kernel(a, j);
                // banks have no u = 0 node below a = 1: far past the horizon their kernel
                // decays exponentially and underflows to 0, never below it
                let positive = if j <= 4096 { k > 0.0 } else { k >= 0.0 };
                assert!(
                    positive && k <= prev,
                    "{mode:?} a={a} j={j}: {k} after {prev}"
                );
                prev = k;
            }
        }
    }
}
