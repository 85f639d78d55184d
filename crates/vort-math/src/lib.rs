//! The mathematics of VORT (arXiv 2605.08966), with no ML dependencies.
//!
//! - [`gl`]: Grünwald–Letnikov weights w_j(a) ~ j^(a-1), their step response and a-derivative.
//! - [`soe`]: certified sums of exponentials ŵ_j = Σ c_s e^(-u_s j) (recipe R1).
//! - [`shared`]: one node set {u_s} for every order in [δ, 1], with weights c_s(a).
//! - [`rng`]: the seeded generators (data, noise, initialisation).
//! - [`recurrence`]: the one-step recurrences that run an SOE in O(S) per token.
//! - [`theory`]: quantisation constant, exponential lower bound, α-learning (plasticity).
//! - [`limits`]: the domains of the inputs (largest lag and horizon, tolerance range).
//! - [`tol`]: the named tolerances that tests and reports share.

pub mod error;
pub mod gl;
pub mod interrupt;
pub mod limits;
pub mod recurrence;
pub mod rng;
pub mod shared;
pub mod soe;
pub mod theory;
pub mod tol;

pub use error::MathError;
pub use soe::{Certificate, Soe, SoeTerm};
