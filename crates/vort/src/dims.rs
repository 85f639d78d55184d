//! Shapes shared by every form of the retention.

use crate::error::{Result, VortError};

/// Sizes of one retention call: batch B, heads H, tokens T, feature dim F, value dim D.
///
/// Flat buffers are row-major: features `[B, H, T, F]`, values and outputs `[B, H, T, D]`,
/// orders `[B, H, T]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    /// Batch B.
    pub b: usize,
    /// Heads H.
    pub h: usize,
    /// Tokens T.
    pub t: usize,
    /// Feature dim F (of φ(q), φ(k)).
    pub f: usize,
    /// Value dim D.
    pub d: usize,
}

impl Dims {
    /// Checks the lengths of flat q, k [B, H, T, F], v [B, H, T, D] and α [B, H, T] buffers.
    ///
    /// # Errors
    /// [`VortError::Shape`] naming the first buffer with a wrong length.
    pub fn check(&self, q: usize, k: usize, v: usize, alpha: usize) -> Result<()> {
        let (b, h, t, f, d) = (self.b, self.h, self.t, self.f, self.d);
        for (name, got, want, shape) in [
            ("q", q, b * h * t * f, "[B, H, T, F]"),
            ("k", k, b * h * t * f, "[B, H, T, F]"),
            ("v", v, b * h * t * d, "[B, H, T, D]"),
            ("alpha", alpha, b * h * t, "[B, H, T]"),
        ] {
            if got != want {
                return Err(VortError::Shape {
                    name: name.into(),
                    got: vec![got],
                    expected: format!("{want} elements ({shape} with {self:?})"),
                });
            }
        }
        Ok(())
    }
}
