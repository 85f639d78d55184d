//! Named tolerances and the relative-RMS error used by tests and reports (statrs `prec.rs`,
//! fla's `assert_close`). Every comparison in this crate's tests goes through these names.

/// f64 forms that compute the same sum in a different order (naive SOE kernel vs recurrent).
pub const F64_SAME_KERNEL_REL: f64 = 1e-11;
/// f64 gradients of the same kernel by two different algorithms (fused backward vs autodiff):
/// the quotient rule of the normalisation cancels (num' den - num den'), so gradients keep
/// fewer digits than outputs when den is dominated by the current token.
pub const F64_GRAD_REL: f64 = 1e-9;
/// f32 forms of the same kernel (recurrent vs chunked vs fused) against each other / f64.
pub const F32_SAME_KERNEL_REL: f64 = 2e-5;
/// f32 gradients of the same kernel (autodiff of the plain chunked form vs fused backward).
pub const F32_GRAD_REL: f64 = 5e-5;
/// SOE tolerance used in tests that compare the SOE forms with the exact GL kernel.
pub const TEST_SOE_EPS: f64 = 1e-6;
/// Exact-kernel (naive) vs SOE forms built at [`TEST_SOE_EPS`]: the kernel error is <= eps
/// relative per weight, so the normalised output error is a small multiple of it.
pub const EXACT_VS_SOE_REL: f64 = 1e-5;
/// Central finite differences in f64 (step [`FD_STEP`]) against analytic / autodiff gradients.
pub const FD_GRAD_REL: f64 = 1e-6;
/// Step of the central finite differences.
pub const FD_STEP: f64 = 1e-6;
/// Streaming in pieces vs one pass, f32.
pub const STREAMING_F32_REL: f64 = 1e-5;

/// Relative RMS error ‖a - b‖₂ / ‖b‖₂ (b is the reference); 0 when both are zero.
pub fn rel_rms(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "rel_rms: length mismatch");
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = b.iter().map(|y| y * y).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// [`rel_rms`] for two tensors of the same element count (any float dtype, any shape).
pub fn rel_rms_tensor(
    a: &candle_core::Tensor,
    b: &candle_core::Tensor,
) -> candle_core::Result<f64> {
    let a = a
        .flatten_all()?
        .to_dtype(candle_core::DType::F64)?
        .to_vec1::<f64>()?;
    let b = b
        .flatten_all()?
        .to_dtype(candle_core::DType::F64)?
        .to_vec1::<f64>()?;
    if a.len() != b.len() {
        candle_core::bail!("rel_rms_tensor: {} vs {} elements", a.len(), b.len());
    }
    Ok(rel_rms(&a, &b))
}
