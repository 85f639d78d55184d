//! Named tolerances, in one place (statrs `prec.rs` style). Tests and reports use these names.

/// GL weights against the 50-digit reference values (issue: <= 1e-13; the method reaches ~1e-15).
pub const GL_WEIGHT_REL: f64 = 1e-13;
/// Step response S_t against its closed form or the reference values.
pub const STEP_RESPONSE_REL: f64 = 1e-13;
/// f64 recurrence against direct convolution with the same SOE kernel (rounding only).
pub const RECURRENCE_VS_CONVOLUTION_REL: f64 = 1e-11;
/// Independent recomputation of a certificate (sampled vs exhaustive evaluation).
pub const CERTIFICATE_RECOMPUTE_REL: f64 = 1e-9;
/// Absolute floor of that comparison. The certificate evaluates w_j and λ^j by recursions
/// restarted every `gl::RESTART_EVERY` = 1024 lags, each good to ~1e-13 relative; the
/// recomputation uses closed forms (~1e-15). A relative error δ in w_j moves |ŵ_j/w_j - 1|
/// by about δ, so the two maxima can differ by up to ~2e-13 (measured: 1.02e-13 at a = 0.3145,
/// T = 17,233, eps = 5.2e-7, where the earlier floor of 1e-13 failed).
pub const CERTIFICATE_RECOMPUTE_ABS: f64 = 2e-13;
