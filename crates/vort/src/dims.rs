//! The sizes of one retention call, shared by every form.

use crate::error::{Result, VortError};

/// Sizes of one retention call: batch B, heads H, tokens T, feature dim F, value dim D, memory
/// nodes N, and the position the call starts at (tokens before it).
///
/// Flat buffers are row-major: features `[B, H, T, F]`, values and outputs `[B, H, T, D]`,
/// orders `[B, H, T]`, node weights `[B, H, T, N]`, states `[B, H, N, F, D+1]`. The host
/// references ([`crate::retention::exact_gl`], [`crate::retention::node_weights_host`]) read
/// B, H, T, F and D only: [`Dims::new`] leaves N and the position at 0 for them.
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
    /// Value dim D (the forms' v' and outputs have D + 1 columns).
    pub d: usize,
    /// Memory nodes N (columns of the node weights).
    pub n: usize,
    /// Tokens before this call (the initial state's position, or 0).
    pub pos: u64,
}

impl Dims {
    /// B, H, T, F and D, with N = 0 and position 0.
    pub fn new(b: usize, h: usize, t: usize, f: usize, d: usize) -> Dims {
        Dims {
            b,
            h,
            t,
            f,
            d,
            n: 0,
            pos: 0,
        }
    }

    /// D + 1: the columns of v' = [v, 1], of the unnormalised output and of the state.
    pub fn d1(&self) -> usize {
        self.d + 1
    }

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
