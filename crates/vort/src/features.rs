//! Positive feature maps φ for the linear-attention form (docs/DESIGN.md §2).
//!
//! - FAVOR+ (Choromanski et al. 2021, "positive orthogonal random features"):
//!   φ(z) = exp(ω z - |z|²/2) / √m, rows of ω [m, d] drawn in blocks of d mutually orthogonal
//!   Gaussian directions, each row rescaled to the norm of an independent Gaussian vector, so
//!   E[φ(q)·φ(k)] = exp(q·k). q and k are L2-normalised times a learned scale before φ, so
//!   |z|² is known and no data-dependent stabiliser (a max over the sequence) is needed: a
//!   causal stream cannot look ahead.
//! - ELU+1 (Katharopoulos et al. 2020): φ(z) = elu(z) + 1, deterministic, m = d.
//! - Taylor (Zoology's Based, Arora et al. 2024): the second-order expansion of exp,
//!   φ(q)·φ(k) = 1 + s + s²/2 with s = q·k/√d, from φ(z) = [1, z/d^¼, z_i z_j/√d (i < j),
//!   z_i²/√(2d)], deterministic, m = 1 + d + d(d+1)/2. Its entries can be negative; the
//!   kernel 1 + s + s²/2 >= 1/2 is positive, so every normaliser stays positive.

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
    /// Second-order Taylor expansion of exp (Based; deterministic; feature dim
    /// 1 + d + d(d+1)/2 for head dim d, whatever `features` says).
    Taylor,
}

impl FeatureMap {
    /// Feature dim m of this map on head dim `d` when `features` are asked for (FAVOR+ takes
    /// `features`; the deterministic maps fix their own).
    pub fn dim(self, d: usize, features: usize) -> usize {
        match self {
            FeatureMap::Favor => features,
            FeatureMap::Elu => d,
            FeatureMap::Taylor => 1 + d + d * (d + 1) / 2,
        }
    }
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
    /// Taylor only: the flat indices i·d + j (i <= j) of the upper triangle of z zᵀ, and
    /// their scales (1/√(2d) on the diagonal, 1/√d off it).
    taylor: Option<(Tensor, Tensor)>,
}

/// The seeded FAVOR+ projection ωᵀ [d, m] (f32): m orthogonal Gaussian rows of dim d drawn
/// from `seed` ([`orthogonal_gaussian`], f64), rounded to f32 and transposed.
///
/// # Errors
/// m or d = 0.
pub fn seeded_projection(d: usize, m: usize, seed: u64, device: &Device) -> Result<Tensor> {
    let w = orthogonal_gaussian(m, d, seed)?;
    let omega = Tensor::from_vec(w, (m, d), device)?.to_dtype(DType::F32)?;
    Ok(omega.t()?.contiguous()?)
}

impl Features {
    /// FAVOR+ with m features (seeded), ELU+1 (m = d), or Taylor (m = 1 + d + d(d+1)/2).
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
                taylor: None,
            }),
            FeatureMap::Taylor => {
                if d == 0 {
                    return Err(VortError::InvalidArgument(
                        "Taylor features: head dim d must be >= 1".into(),
                    ));
                }
                let (mut idx, mut scale) = (Vec::new(), Vec::new());
                for i in 0..d {
                    for j in i..d {
                        idx.push((i * d + j) as u32);
                        // f64, cast to the input's dtype when applied
                        scale.push(if i == j {
                            1.0 / (2.0 * d as f64).sqrt()
                        } else {
                            1.0 / (d as f64).sqrt()
                        });
                    }
                }
                let n = idx.len();
                Ok(Features {
                    map,
                    d,
                    m: map.dim(d, m),
                    omega_t: None,
                    taylor: Some((
                        Tensor::from_vec(idx, n, device)?,
                        Tensor::from_vec(scale, (1, n), device)?,
                    )),
                })
            }
            FeatureMap::Favor => Features::favor(seeded_projection(d, m, seed, device)?),
        }
    }

    /// FAVOR+ with a given projection ωᵀ [d, m] (a stored buffer, [`Features::projection`]
    /// of a seeded map); it is detached: the random features are never trained.
    ///
    /// # Errors
    /// A projection that is not 2-D with d, m >= 1.
    pub fn favor(omega_t: Tensor) -> Result<Self> {
        let (d, m) = omega_t.dims2()?;
        if d == 0 || m == 0 {
            return Err(VortError::InvalidArgument(format!(
                "FAVOR+ projection of shape [{d}, {m}]: d and m must be >= 1"
            )));
        }
        Ok(Features {
            map: FeatureMap::Favor,
            d,
            m,
            omega_t: Some(omega_t.detach()),
            taylor: None,
        })
    }

    /// The FAVOR+ projection ωᵀ [d, m] (f32), None for the deterministic maps (ELU+1,
    /// Taylor): a buffer, not a parameter (drawn from a seed once, stored beside the
    /// parameters as `features.omega_t`, never trained).
    pub fn projection(&self) -> Option<&Tensor> {
        self.omega_t.as_ref()
    }

    /// φ(z) for z [..., d] -> [..., m] (every entry > 0 except for Taylor, whose kernel
    /// φ(q)·φ(k) is positive).
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
        if let Some((idx, scale)) = &self.taylor {
            let rows: usize = dims[..dims.len() - 1].iter().product();
            let d = self.d;
            let z2 = z.reshape((rows, d))?;
            // [1, z/d^¼, upper triangle of z zᵀ scaled]
            let outer = z2
                .reshape((rows, d, 1))?
                .broadcast_mul(&z2.reshape((rows, 1, d))?)?
                .reshape((rows, d * d))?;
            let second = outer
                .index_select(idx, 1)?
                .broadcast_mul(&scale.to_dtype(z.dtype())?)?;
            let first = (&z2 * (d as f64).powf(-0.25))?;
            let ones = Tensor::ones((rows, 1), z.dtype(), z.device())?;
            let phi = Tensor::cat(&[&ones, &first, &second], 1)?;
            let mut out = dims[..dims.len() - 1].to_vec();
            out.push(self.m);
            return Ok(phi.reshape(out)?);
        }
        match &self.omega_t {
            None => Ok((z.elu(1.0)? + 1.0)?),
            Some(wt) => {
                let rows: usize = dims[..dims.len() - 1].iter().product();
                let z2 = z.reshape((rows, self.d))?;
                // proj [rows, m]; then exp(proj - |z|²/2) / √m, one fused pass (twin:
                // ops::reference::favor_exp)
                let proj = z2.matmul(&wt.to_dtype(z.dtype())?)?;
                let phi = crate::ops::favor_exp(&proj, &z2)?;
                let mut out = dims[..dims.len() - 1].to_vec();
                out.push(self.m);
                Ok(phi.reshape(out)?)
            }
        }
    }
}
