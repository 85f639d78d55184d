//! The one error type of the math crate: every invalid input is a typed error, never a panic.

/// Why a computation of `vort-math` refused its input or could not certify its output.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MathError {
    /// The fractional order must be a finite number in [0, 1].
    #[error("order a = {0:?} is outside [0, 1]")]
    OrderOutOfRange(f64),
    /// The lag is beyond the range where the weights are guaranteed (2^53, exact in f64).
    #[error("lag j = {0} is larger than the supported maximum {max}", max = crate::limits::MAX_LAG)]
    LagTooLarge(u64),
    /// The horizon T of an SOE must satisfy 1 <= T <= MAX_HORIZON.
    #[error("horizon T = {0} must be between 1 and {max}", max = crate::limits::MAX_HORIZON)]
    HorizonOutOfRange(u64),
    /// The relative tolerance must lie in [MIN_EPS, MAX_EPS].
    #[error("tolerance eps = {0:?} must be between {min:e} and {max}", min = crate::limits::MIN_EPS, max = crate::limits::MAX_EPS)]
    ToleranceOutOfRange(f64),
    /// Any other argument out of its domain (the message names it).
    #[error("{0}")]
    InvalidArgument(String),
    /// The builder could not reach the requested tolerance (reported, never silently accepted).
    #[error("could not certify an SOE for a = {alpha:?}, T = {horizon}, eps = {eps:e}: best max relative error {achieved:e}")]
    NotCertified {
        alpha: f64,
        horizon: u64,
        eps: f64,
        achieved: f64,
    },
    /// A stop was requested while the computation ran ([`crate::interrupt`]: Ctrl-C from
    /// Python); nothing was built.
    #[error("interrupted")]
    Interrupted,
}

/// Checks that `a` is a finite order in [0, 1].
pub fn check_order(a: f64) -> Result<f64, MathError> {
    if a.is_finite() && (0.0..=1.0).contains(&a) {
        Ok(a)
    } else {
        Err(MathError::OrderOutOfRange(a))
    }
}
