//! The domains of the math crate's inputs, in one place: the error type names them in its
//! messages and the builders check them, so neither has to import the other (the limits used
//! to live in `gl` and `soe`, which import `error`, which imported them back).

/// Largest supported lag: every integer up to 2^53 is exact in f64.
pub const MAX_LAG: u64 = 1 << 53;
/// Largest horizon accepted by the SOE builders.
pub const MAX_HORIZON: u64 = 1_000_000_000_000;
/// Smallest relative tolerance: below it f64 evaluation of ŵ_j cannot be certified.
pub const MIN_EPS: f64 = 1e-12;
/// Largest relative tolerance.
pub const MAX_EPS: f64 = 0.5;
