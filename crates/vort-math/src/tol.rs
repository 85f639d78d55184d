//! Named tolerances, in one place (statrs `prec.rs` style). Tests and reports use these names.

/// GL weights against the 50-digit reference values (issue: <= 1e-13; the method reaches ~1e-15).
pub const GL_WEIGHT_REL: f64 = 1e-13;
/// Step response S_t against its closed form or the reference values.
pub const STEP_RESPONSE_REL: f64 = 1e-13;
/// f64 recurrence against direct convolution with the same SOE kernel (rounding only).
pub const RECURRENCE_VS_CONVOLUTION_REL: f64 = 1e-11;
/// Independent recomputation of a certificate (sampled vs exhaustive evaluation).
pub const CERTIFICATE_RECOMPUTE_REL: f64 = 1e-9;
