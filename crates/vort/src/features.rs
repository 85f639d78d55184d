//! Positive feature maps φ for the linear-attention form (docs/DESIGN.md §2).
//!
//! - FAVOR+ (Choromanski et al. 2021, "positive orthogonal random features"):
//!   φ(z) = exp(ω z - |z|²/2) / √m, rows of ω [m, d] drawn in blocks of d mutually orthogonal
//!   Gaussian directions, each row rescaled to the norm of an independent Gaussian vector, so
//!   E[φ(q)·φ(k)] = exp(q·k). q and k are L2-normalised times a learned scale before φ, so
//!   |z|² is known and no data-dependent stabiliser (a max over the sequence) is needed: a
//!   causal stream cannot look ahead.
//! - ELU+1 (Katharopoulos et al. 2020): φ(z) = elu(z) + 1, deterministic, m = d.

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::{Result, VortError};
use vort_math::rng::XorShift64Star;

/// Which feature map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum FeatureMap {
    /// Positive orthogonal random features (FAVOR+).
    #[default]
    Favor,
    /// elu(z) + 1 (deterministic; feature dim = head dim).
    Elu,
}

/// Gram–Schmidt orthonormalisation of the rows of a [d, d] matrix (f64, in place).
fn orthonormalise_rows(m: &mut [f64], d: usize) {
    for i in 0..d {
        for j in 0..i {
            let dot: f64 = (0..d).map(|x| m[i * d + x] * m[j * d + x]).sum();
            for x in 0..d {
                m[i * d + x] -= dot * m[j * d + x];
            }
        }
        let norm: f64 = (0..d).map(|x| m[i * d + x].powi(2)).sum::<f64>().sqrt();
        for x in 0..d {
            m[i * d + x] /= norm;
        }
    }
}

/// ω [m, d]: blocks of d orthogonal rows, each rescaled to a chi(d)-distributed norm.
pub fn orthogonal_gaussian(m: usize, d: usize, seed: u64) -> Result<Vec<f64>> {
    if m == 0 || d == 0 {
        return Err(VortError::InvalidArgument(format!(
            "random features: m = {m} and d = {d} must be >= 1"
        )));
    }
    let mut rng = XorShift64Star::new(seed);
    let mut out = Vec::with_capacity(m * d);
    while out.len() < m * d {
        let mut blk = rng.normals(d * d, 1.0);
        orthonormalise_rows(&mut blk, d);
        for r in 0..d {
            let norm = rng
                .normals(d, 1.0)
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt();
            out.extend(blk[r * d..(r + 1) * d].iter().map(|x| x * norm));
        }
    }
    out.truncate(m * d);
    Ok(out)
}

/// A feature map with its (fixed, non-trained) random matrix.
#[derive(Debug, Clone)]
pub struct Features {
    /// Which map.
    pub map: FeatureMap,
    /// Input dim d (head dim).
    pub d: usize,
    /// Feature dim m.
    pub m: usize,
    /// ω [d, m] (transposed for z ω), FAVOR+ only.
    omega_t: Option<Tensor>,
}

impl Features {
    /// FAVOR+ with m features (seeded), or ELU+1 (m = d).
    ///
    /// # Errors
    /// m or d = 0.
    pub fn new(map: FeatureMap, d: usize, m: usize, seed: u64, device: &Device) -> Result<Self> {
        match map {
            FeatureMap::Elu => Ok(Features {
                map,
                d,
                m: d,
                omega_t: None,
            }),
            FeatureMap::Favor => {
                let w = orthogonal_gaussian(m, d, seed)?;
                let omega = Tensor::from_vec(w, (m, d), device)?.to_dtype(DType::F32)?;
                Ok(Features {
                    map,
                    d,
                    m,
                    omega_t: Some(omega.t()?.contiguous()?),
                })
            }
        }
    }

    /// φ(z) for z [..., d] -> [..., m], every entry > 0.
    ///
    /// # Errors
    /// Last dim is not d.
    pub fn apply(&self, z: &Tensor) -> Result<Tensor> {
        let dims = z.dims().to_vec();
        if dims.last() != Some(&self.d) {
            return Err(VortError::Shape {
                name: "z".into(),
                got: dims,
                expected: format!("[..., {}]", self.d),
            });
        }
        match &self.omega_t {
            None => Ok((z.elu(1.0)? + 1.0)?),
            Some(wt) => {
                let rows: usize = dims[..dims.len() - 1].iter().product();
                let z2 = z.reshape((rows, self.d))?;
                let proj = z2.matmul(&wt.to_dtype(z.dtype())?)?; // [rows, m]
                let sq = (z2.sqr()?.sum_keepdim(1)? * 0.5)?;
                let phi = (proj.broadcast_sub(&sq)?.exp()? / (self.m as f64).sqrt())?;
                let mut out = dims[..dims.len() - 1].to_vec();
                out.push(self.m);
                Ok(phi.reshape(out)?)
            }
        }
    }
}
