//! The one-step recurrences that run an SOE kernel in O(S) per token (docs/DESIGN.md §1,
//! SOE_RECIPE.md).
//!
//! For input x_t (x_t = 0 for t < 0) and terms (c_s, u_s), λ_s = e^(-u_s), μ_s = 1 - λ_s:
//!
//! ```text
//! y_t   = x_t + Σ_s c_s λ_s h_s(t-1)      (the j = 0 weight w_0 = 1 is applied exactly)
//! h_s(t) = h_s(t-1) + x_t - μ_s h_s(t-1)   (= λ_s h_s(t-1) + x_t, written in μ form)
//! ```
//!
//! so y_t = Σ_{j=0}^{t} ŵ_j x_{t-j} with ŵ_0 = 1 and ŵ_j = Σ_s c_s λ_s^j. The μ form keeps the
//! slowest modes (u ~ 0.02/T) exact where λ would round to 1.

use crate::soe::SoeTerm;

/// Running state of a scalar SOE recurrence: one accumulator h_s per term.
#[derive(Debug, Clone, PartialEq)]
pub struct SoeRecurrence {
    c_lambda: Vec<f64>,
    mu: Vec<f64>,
    state: Vec<f64>,
}

impl SoeRecurrence {
    /// A recurrence for the given terms, with zero history.
    pub fn new(terms: &[SoeTerm]) -> Self {
        SoeRecurrence {
            c_lambda: terms.iter().map(|t| t.c * t.lambda()).collect(),
            mu: terms.iter().map(SoeTerm::mu).collect(),
            state: vec![0.0; terms.len()],
        }
    }

    /// Feeds x_t and returns y_t = x_t + Σ_s c_s λ_s h_s(t-1).
    pub fn step(&mut self, x: f64) -> f64 {
        let mut y = x;
        for ((h, cl), mu) in self.state.iter_mut().zip(&self.c_lambda).zip(&self.mu) {
            y += cl * *h;
            *h += x - mu * *h;
        }
        y
    }

    /// The accumulators h_s(t) after the last step.
    pub fn state(&self) -> &[f64] {
        &self.state
    }

    /// Runs the recurrence over a whole sequence from zero history.
    pub fn run(terms: &[SoeTerm], xs: &[f64]) -> Vec<f64> {
        let mut r = SoeRecurrence::new(terms);
        xs.iter().map(|&x| r.step(x)).collect()
    }
}

/// Direct causal convolution y_t = Σ_{j=0}^{t} k_j x_{t-j}, O(T²): the reference for
/// [`SoeRecurrence`] (with k = the SOE kernel) and for exact-kernel checks (k = w).
pub fn convolve(kernel: &[f64], xs: &[f64]) -> Vec<f64> {
    assert!(kernel.len() >= xs.len(), "kernel shorter than the sequence");
    (0..xs.len())
        .map(|t| (0..=t).map(|j| kernel[j] * xs[t - j]).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gl;
    use crate::soe::Soe;

    #[test]
    fn step_response_of_the_soe_matches_the_exact_one_within_the_certificate() {
        // Reference (gl_soe_golden.json, "recurrence_step_response" of the R1 SOE for a = 0.35):
        // y_1000 = 12.593656791175132, exact S_1000 = 12.593633746753023.
        let soe = Soe::build_r1(0.35, 100_000, 1e-4).unwrap();
        let ys = SoeRecurrence::run(&soe.terms, &[1.0; 1001]);
        assert!((ys[1000] / 12.593656791175132 - 1.0).abs() < 1e-13);
        let exact = gl::step_response(0.35, 1000).unwrap();
        assert!((ys[1000] / exact - 1.0).abs() <= soe.certificate.max_rel_error);
    }
}
