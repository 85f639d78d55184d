//! The retention contract on one head with every input checked: the forms behind `vort
//! retention` and Python's `vort.retention`, read from / written to safetensors, so anyone can
//! check the core against their own implementation.
//!
//! Input file: f32 or f64 tensors `phi_q` [T, F], `phi_k` [T, F] (nonnegative features),
//! `v` [T, D] and `alpha` `[T]` (orders in [0, 1]). Output file: `y` [T, D] (f32), with the
//! options and the node count in the header metadata. Every bad input is a typed error.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::dims::Dims;
use crate::error::{Result, VortError};
use crate::nodes::{NodeMode, NodeSpec};
use crate::retention::{
    chunk, exact_gl, fused_chunk, naive_recurrent, node_weights, normalise, with_ones, Inputs,
    OwnedInputs, Rates,
};
use crate::st::{self, Precision};

/// Longest input the naive (O(T²) memory) form accepts: its T x T f64 kernel is 2.1 GB here.
pub const NAIVE_MAX_T: usize = 16_384;

/// Which form computes the retention. Each also answers to the library's name: `exact_gl` (the
/// exact GL kernel; the library's `naive` is the SOE summed pair by pair, another function),
/// and fla's `naive_recurrent`, `chunk` and `fused_chunk` for the SOE forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    /// O(T²), exact GL kernel, f64 ([`crate::retention::exact_gl`]).
    #[serde(alias = "exact_gl")]
    Naive,
    /// One token at a time with the SOE states, f64 ([`crate::retention::naive_recurrent()`]).
    #[serde(alias = "naive_recurrent")]
    Recurrent,
    /// Chunked candle form with the SOE states, f32 (the training form's autodiff twin,
    /// [`crate::retention::chunk()`]).
    #[default]
    #[serde(alias = "chunk")]
    Chunked,
    /// The fused op with the SOE states, f32 (the training form,
    /// [`crate::retention::fused_chunk()`]).
    #[serde(alias = "fused_chunk")]
    Fused,
}

impl std::str::FromStr for Form {
    type Err = VortError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "naive" | "exact_gl" => Ok(Form::Naive),
            "recurrent" | "naive_recurrent" => Ok(Form::Recurrent),
            "chunked" | "chunk" => Ok(Form::Chunked),
            "fused" | "fused_chunk" => Ok(Form::Fused),
            _ => Err(VortError::InvalidArgument(format!(
                "form `{s}` is not one of naive|recurrent|chunked|fused (or the library's \
                 exact_gl|naive_recurrent|chunk|fused_chunk)"
            ))),
        }
    }
}

/// Options of [`retention_from_safetensors`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionOpts {
    /// Which form computes y.
    pub form: Form,
    /// The node mode: banks (the paper) or shared nodes (`memory` in older files).
    #[serde(alias = "memory")]
    pub mode: NodeMode,
    /// SOE relative tolerance (certified on lags 1..=horizon).
    pub eps: f64,
    /// Certified horizon H of the node table; None: H = T of the input. An input with T > H
    /// is refused (`VortError::BeyondHorizon`), whatever the form.
    pub horizon: Option<u64>,
    /// Number of banks K (banks mode).
    pub banks: usize,
    /// Smallest order δ of the banks / shared node set; orders below it are clamped to it.
    pub delta: f64,
    /// Chunk length of the chunked forms (chunked, fused).
    pub chunk: usize,
    /// eps_den of the normalisation y = num / (den + eps_den).
    pub eps_den: f64,
}

impl Default for RetentionOpts {
    fn default() -> Self {
        RetentionOpts {
            form: Form::Chunked,
            mode: NodeMode::Shared,
            eps: 1e-4,
            horizon: None,
            banks: 4,
            delta: 0.1,
            chunk: 64,
            eps_den: 1e-6,
        }
    }
}

/// What [`retention_from_safetensors`] computed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionReport {
    /// Tokens T.
    pub t: usize,
    /// Feature dim F.
    pub f: usize,
    /// Value dim D.
    pub d: usize,
    /// Memory nodes N (all banks' terms together, or the shared S).
    pub nodes: usize,
    /// Certified horizon H of the node table (T unless `--horizon` was given).
    pub horizon: u64,
    /// Certified max relative error of the kernel over lags 1..=T (0 for the naive form).
    pub kernel_max_rel_error: f64,
    /// Orders below δ that were clamped to δ.
    pub clamped_orders: usize,
}

/// One head's inputs, validated: phi_q, phi_k [T, F], v [T, D], alpha `[T]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadInputs {
    /// φ(q) [T, F].
    pub phi_q: Vec<f64>,
    /// φ(k) [T, F].
    pub phi_k: Vec<f64>,
    /// v [T, D].
    pub v: Vec<f64>,
    /// α `[T]`.
    pub alpha: Vec<f64>,
    /// T, F, D.
    pub t: usize,
    /// F.
    pub f: usize,
    /// D.
    pub d: usize,
}

fn check_finite(name: &str, x: &[f64]) -> Result<()> {
    match x.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(VortError::NonFinite {
            name: name.into(),
            index,
        }),
        None => Ok(()),
    }
}

impl HeadInputs {
    /// Validates shapes (T, F, D >= 1 and consistent), finiteness, features >= 0, α in [0, 1].
    ///
    /// # Errors
    /// The first problem found, typed.
    pub fn new(
        phi_q: st::Flat,
        phi_k: st::Flat,
        v: st::Flat,
        alpha: st::Flat,
    ) -> Result<HeadInputs> {
        let shape_err = |name: &str, got: &[usize], expected: String| VortError::Shape {
            name: name.into(),
            got: got.to_vec(),
            expected,
        };
        let [t, f] = phi_q.shape[..] else {
            return Err(shape_err("phi_q", &phi_q.shape, "[T, F]".into()));
        };
        if t == 0 || f == 0 {
            return Err(shape_err(
                "phi_q",
                &phi_q.shape,
                "[T, F] with T, F >= 1".into(),
            ));
        }
        if phi_k.shape != [t, f] {
            return Err(shape_err(
                "phi_k",
                &phi_k.shape,
                format!("[{t}, {f}] like phi_q"),
            ));
        }
        let d = match v.shape[..] {
            [tv, d] if tv == t && d >= 1 => d,
            _ => return Err(shape_err("v", &v.shape, format!("[{t}, D] with D >= 1"))),
        };
        if alpha.shape != [t] {
            return Err(shape_err("alpha", &alpha.shape, format!("[{t}]")));
        }
        for (name, x) in [
            ("phi_q", &phi_q.data),
            ("phi_k", &phi_k.data),
            ("v", &v.data),
            ("alpha", &alpha.data),
        ] {
            check_finite(name, x)?;
        }
        for (name, x) in [("phi_q", &phi_q.data), ("phi_k", &phi_k.data)] {
            if let Some(index) = x.iter().position(|&v| v < 0.0) {
                return Err(VortError::NegativeFeature {
                    name: name.into(),
                    index,
                    value: x[index],
                });
            }
        }
        if let Some(index) = alpha.data.iter().position(|a| !(0.0..=1.0).contains(a)) {
            return Err(VortError::OrderOutOfRange {
                name: "alpha".into(),
                index,
                value: alpha.data[index],
                lo: 0.0,
                hi: 1.0,
            });
        }
        Ok(HeadInputs {
            phi_q: phi_q.data,
            phi_k: phi_k.data,
            v: v.data,
            alpha: alpha.data,
            t,
            f,
            d,
        })
    }

    /// Reads and validates the four tensors of a file.
    ///
    /// # Errors
    /// I/O, parse, missing tensor, and every check of [`HeadInputs::new`].
    pub fn read(path: &Path) -> Result<HeadInputs> {
        let mut file = st::read(path)?;
        let phi_q = file.take("phi_q")?;
        let phi_k = file.take("phi_k")?;
        let v = file.take("v")?;
        let alpha = file.take("alpha")?;
        Self::new(phi_q, phi_k, v, alpha)
    }
}

impl RetentionOpts {
    /// The node table's recipe for an input of `t` tokens (horizon: the option, or T).
    pub fn node_spec(&self, t: usize) -> NodeSpec {
        NodeSpec {
            mode: self.mode,
            banks: self.banks,
            delta: self.delta,
            horizon: self.horizon.unwrap_or(t.max(1) as u64),
            eps: self.eps,
        }
    }
}

/// Computes y [T, D] for one validated head with the chosen form and node mode.
///
/// # Errors
/// Options out of domain (eps, δ, K, horizon, chunk), T past the horizon, or an SOE that
/// cannot be certified.
pub fn retention_head(x: &HeadInputs, opts: &RetentionOpts) -> Result<(Vec<f64>, RetentionReport)> {
    let spec = opts.node_spec(x.t);
    spec.validate()?;
    if x.t as u64 > spec.horizon {
        return Err(VortError::BeyondHorizon {
            context: x.t as u64,
            horizon: spec.horizon,
        });
    }
    if opts.form == Form::Naive && x.t > NAIVE_MAX_T {
        // the O(T²) reference keeps a T x T kernel: 34 GB at T = 65,536
        return Err(VortError::InvalidArgument(format!(
            "the naive form keeps a T x T kernel ({:.1} GB at T = {}); it is refused above \
             T = {NAIVE_MAX_T} ({:.1} GB): use --form recurrent, chunked or fused",
            (x.t as f64).powi(2) * 8.0 / 1e9,
            x.t,
            (NAIVE_MAX_T as f64).powi(2) * 8.0 / 1e9
        )));
    }
    let table = spec.build()?;
    let lo = table.grid.first().copied().unwrap_or(0.0).min(opts.delta);
    let clamped_orders = x.alpha.iter().filter(|&&a| a < lo).count();
    let dims = Dims::new(1, 1, x.t, x.f, x.d);
    let tables = std::slice::from_ref(&table);
    let rates = Rates::of_tables(tables)?;
    let dev = Device::Cpu;
    let host = |y: Tensor| -> Result<Vec<f64>> {
        Ok(y.flatten_all()?.to_dtype(DType::F64)?.to_vec1::<f64>()?)
    };
    let y = match opts.form {
        Form::Naive => exact_gl(
            &x.phi_q,
            &x.phi_k,
            &x.v,
            &x.alpha,
            dims,
            tables,
            opts.eps_den,
        )?,
        Form::Recurrent => {
            // f64, the node weights c_n(α) computed on the host
            let owned = OwnedInputs::from_host(&x.phi_q, &x.phi_k, &x.v, &x.alpha, dims, tables)?;
            let (o, _) = naive_recurrent::<f64>(&owned.inputs(), &rates, opts.chunk, None, false)?;
            host(normalise(&o, opts.eps_den)?)?
        }
        Form::Chunked | Form::Fused => {
            // f32 inputs (α too: the node weights are computed from its f32 values)
            let mk = |v: &[f64], s: &[usize]| -> Result<Tensor> {
                Ok(Tensor::from_vec(v.to_vec(), s, &dev)?.to_dtype(DType::F32)?)
            };
            let q = mk(&x.phi_q, &[1, 1, x.t, x.f])?;
            let k = mk(&x.phi_k, &[1, 1, x.t, x.f])?;
            let vp = with_ones(&mk(&x.v, &[1, 1, x.t, x.d])?)?;
            let cw = node_weights(&mk(&x.alpha, &[1, 1, x.t])?, tables)?;
            let inputs = Inputs {
                q: &q,
                k: &k,
                vp: &vp,
                cw: &cw,
            };
            let (o, _) = if opts.form == Form::Fused {
                fused_chunk::<f32>(&inputs, &rates, opts.chunk, None, false)?
            } else {
                chunk::<f32>(&inputs, &rates, opts.chunk, None, false)?
            };
            host(normalise(&o, opts.eps_den)?)?
        }
    };
    let report = RetentionReport {
        t: x.t,
        f: x.f,
        d: x.d,
        nodes: table.len(),
        horizon: spec.horizon,
        kernel_max_rel_error: if opts.form == Form::Naive {
            0.0
        } else {
            table.max_rel_error
        },
        clamped_orders,
    };
    Ok((y, report))
}

/// Refuses an output that is not finite in f32, the precision it is written in: finite inputs
/// whose products overflow (the chunked forms compute in f32, so φ near 1e19 or v near 3e38
/// overflow inside them; the f64 forms can still produce values past f32's range). Nothing is
/// written then.
///
/// # Errors
/// [`VortError::InvalidArgument`] naming the first bad element and what to do.
fn check_finite_f32(y: &[f64], d: usize, form: Form) -> Result<()> {
    let bad = y
        .iter()
        .position(|&v| !v.is_finite() || v.abs() > f64::from(f32::MAX));
    match bad {
        None => Ok(()),
        Some(i) => Err(VortError::InvalidArgument(format!(
            "y[{}, {}] = {} is not finite in f32 (form {form:?}): the inputs' magnitudes \
             overflow the computation; rescale phi_q, phi_k or v (the normalised output does \
             not change under scaling of phi_q or phi_k){}",
            i / d.max(1),
            i % d.max(1),
            y[i],
            if matches!(form, Form::Chunked | Form::Fused) {
                ", or use --form recurrent (f64)"
            } else {
                ""
            }
        ))),
    }
}

/// [`retention_head`], then the check `vort retention` makes before writing: every output
/// finite in f32 (the Python bindings call this, so they refuse what the CLI refuses).
///
/// # Errors
/// As [`retention_head`]; an output that is not finite in f32.
pub fn retention_checked(
    x: &HeadInputs,
    opts: &RetentionOpts,
) -> Result<(Vec<f64>, RetentionReport)> {
    let (y, report) = retention_head(x, opts)?;
    check_finite_f32(&y, x.d, opts.form)?;
    Ok((y, report))
}

/// `vort retention`: reads `input`, computes y with `opts`, writes `output` (`y` [T, D], f32).
///
/// # Errors
/// Every input problem as a typed [`VortError`] (missing tensor, wrong shape, negative
/// feature, α outside [0, 1], NaN/inf, unreadable file), options out of domain, I/O.
pub fn retention_from_safetensors(
    input: &Path,
    output: &Path,
    opts: &RetentionOpts,
) -> Result<RetentionReport> {
    let x = HeadInputs::read(input)?;
    let (y, report) = retention_checked(&x, opts)?;
    let mut meta = BTreeMap::new();
    meta.insert("opts".into(), opts_string(opts));
    meta.insert("nodes".into(), report.nodes.to_string());
    meta.insert(
        "kernel_max_rel_error".into(),
        format!("{:e}", report.kernel_max_rel_error),
    );
    st::write(output, &[("y", &y, vec![x.t, x.d], Precision::F32)], &meta)?;
    Ok(report)
}

/// A compact `key=value` rendering of the options for the output header.
fn opts_string(o: &RetentionOpts) -> String {
    format!(
        "form={:?} mode={:?} eps={:e} horizon={} banks={} delta={} chunk={} eps_den={:e}",
        o.form,
        o.mode,
        o.eps,
        o.horizon.map_or("T".into(), |h| h.to_string()),
        o.banks,
        o.delta,
        o.chunk,
        o.eps_den
    )
}
