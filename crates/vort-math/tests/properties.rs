//! Property tests of the math crate (proptest).

use proptest::prelude::*;
use vort_math::gl;
use vort_math::recurrence::{convolve, SoeRecurrence};
use vort_math::soe::{certify, Soe};
use vort_math::tol;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// w_j(a) is non-increasing in j and non-decreasing in a (dw/da = w (ψ(j+a) - ψ(a)) >= 0).
    #[test]
    fn weights_are_monotone(a in 0.0f64..1.0, da in 0.0f64..0.2, j in 0u64..100_000) {
        let w = gl::weight(a, j).unwrap();
        prop_assert!(gl::weight(a, j + 1).unwrap() <= w);
        let a2 = (a + da).min(1.0);
        prop_assert!(gl::weight(a2, j).unwrap() >= w * (1.0 - 1e-15));
        prop_assert!(w > 0.0 || a == 0.0);
    }

    /// Σ_{j<=t} w_j(a) = Γ(t+1+a) / (Γ(1+a) Γ(t+1)).
    #[test]
    fn step_response_identity(a in 0.0f64..=1.0, t in 0u64..3000) {
        let sum: f64 = gl::weights_upto(a, t).unwrap().iter().sum();
        let closed = gl::step_response(a, t).unwrap();
        prop_assert!((sum / closed - 1.0).abs() <= tol::STEP_RESPONSE_REL * 10.0,
            "sum {} vs closed {}", sum, closed);
    }

    /// The recurrence is the causal convolution with its own kernel ŵ_0 = 1, ŵ_j = Σ c λ^j.
    #[test]
    fn recurrence_equals_convolution(
        a in 0.05f64..0.999,
        xs in prop::collection::vec(-1.0f64..1.0, 1..300),
    ) {
        let soe = Soe::build(a, 1000, 1e-4).unwrap();
        let kernel: Vec<f64> = (0..xs.len() as u64).map(|j| soe.kernel(j)).collect();
        let direct = convolve(&kernel, &xs);
        let rec = SoeRecurrence::run(&soe.terms, &xs);
        let scale: f64 = xs.iter().map(|x| x.abs()).sum::<f64>().max(1e-300);
        for (r, d) in rec.iter().zip(&direct) {
            prop_assert!((r - d).abs() <= tol::RECURRENCE_VS_CONVOLUTION_REL * scale);
        }
    }

    /// An independent recomputation of the certificate (plain exp() and gl::weight at every lag)
    /// agrees with the one the builder returned, and both are within eps.
    #[test]
    fn certificate_recomputed_independently(
        a in 0.01f64..0.99,
        t in 1u64..20_000,
        eps_exp in 2.0f64..8.0,
    ) {
        check_certificate(a, t, eps_exp)?;
    }
}

/// The property of `certificate_recomputed_independently` at one (a, T, eps = 10^-eps_exp).
fn check_certificate(a: f64, t: u64, eps_exp: f64) -> Result<(), TestCaseError> {
    let eps = 10f64.powf(-eps_exp);
    let soe = Soe::build(a, t, eps).unwrap();
    let recomputed = (1..=t)
        .map(|j| {
            let approx: f64 = soe
                .terms
                .iter()
                .map(|s| s.c * (-s.u * j as f64).exp())
                .sum();
            (approx / gl::weight(a, j).unwrap() - 1.0).abs()
        })
        .fold(0.0, f64::max);
    let cert = soe.certificate.max_rel_error;
    prop_assert!(cert <= eps);
    prop_assert!(
        (recomputed - cert).abs()
            <= tol::CERTIFICATE_RECOMPUTE_REL * cert + tol::CERTIFICATE_RECOMPUTE_ABS,
        "recomputed {} vs certificate {}",
        recomputed,
        cert
    );
    let again = certify(&soe.terms, a, t).unwrap();
    prop_assert_eq!(again.max_rel_error, cert);
    Ok(())
}

/// The case proptest found where the two evaluations differ by 1.02e-13 (see
/// `tol::CERTIFICATE_RECOMPUTE_ABS`), kept so every run checks it.
#[test]
fn certificate_recomputed_regression_cases() {
    check_certificate(0.3144904143433665, 17233, 6.284658505067778).unwrap();
}

#[test]
fn exact_cases_have_exact_soes() {
    let zero = Soe::build(0.0, 1000, 1e-6).unwrap();
    assert!(zero.is_empty());
    let one = Soe::build(1.0, 1000, 1e-6).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one.kernel(999), 1.0);
}

#[test]
fn invalid_soe_arguments_are_errors() {
    use vort_math::MathError::*;
    assert!(matches!(Soe::build(1.5, 10, 1e-3), Err(OrderOutOfRange(_))));
    assert!(matches!(
        Soe::build(f64::NAN, 10, 1e-3),
        Err(OrderOutOfRange(_))
    ));
    assert!(matches!(
        Soe::build(0.5, 0, 1e-3),
        Err(HorizonOutOfRange(0))
    ));
    assert!(matches!(
        Soe::build(0.5, 10, 0.0),
        Err(ToleranceOutOfRange(_))
    ));
    assert!(matches!(
        Soe::build(0.5, 10, f64::INFINITY),
        Err(ToleranceOutOfRange(_))
    ));
}

/// Orders at the ends of [0, 1] (the router's sigmoid reaches them in f32) build and certify
/// quickly: near a = 1 almost all of the Laplace mass sits at u -> 0, which once sent the node
/// search below f64's range.
#[test]
fn orders_near_the_ends_build_and_certify() {
    for a in [1e-12, 1e-6, 0.999, 0.999999, 1.0 - 1e-10] {
        for (t, eps) in [(1_000u64, 1e-3), (100_000, 1e-6), (1_000_000, 1e-8)] {
            let soe = Soe::build(a, t, eps).unwrap();
            assert!(
                soe.certificate.max_rel_error <= eps,
                "a={a} T={t} eps={eps}"
            );
            assert!(soe
                .terms
                .iter()
                .all(|s| s.c.is_finite() && s.u.is_finite() && s.u >= 0.0));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Shared nodes are a positive mixture (issue: the moment-matched tail had c_s < 0 and the
    /// kernel turned negative at ~11 T): every weight is >= 0 at random orders, not only at the
    /// grid, and the kernel stays positive and decreasing far past the horizon.
    #[test]
    fn shared_nodes_are_a_positive_mixture(
        delta in 0.02f64..0.6,
        log_t in 2.5f64..5.5,
        eps_exp in 2.0f64..5.0,
        orders in proptest::collection::vec(0.0f64..1.0, 8),
    ) {
        let horizon = 10f64.powf(log_t) as u64;
        let eps = 10f64.powf(-eps_exp);
        let s = vort_math::shared::SharedSoe::build(delta, horizon, eps).unwrap();
        prop_assert!(s.certificate.max_rel_error <= eps);
        let mut alphas: Vec<f64> = s.alpha_grid.clone();
        alphas.extend(orders.iter().map(|x| delta + (1.0 - delta) * x));
        for a in alphas {
            let c = s.weights_at(a);
            prop_assert!(c.iter().all(|&x| x >= 0.0), "a = {a}: {c:?}");
            let mut prev = f64::INFINITY;
            for lag in [1u64, 2, 10, horizon / 2, horizon, 10 * horizon, 100 * horizon, 1 << 40] {
                let k: f64 = c.iter().zip(&s.nodes_u).map(|(c, u)| c * (-u * lag as f64).exp()).sum();
                prop_assert!(k > 0.0 && k <= prev, "a = {a}, lag {lag}: K = {k}, before {prev}");
                prev = k;
            }
        }
    }
}
