//! The retention core: `vort retention`'s checked forms ([`vort::retention::checked`]) and the
//! fused op for vort.torch.

use candle_core::{DType, Tensor};
use numpy::ndarray::{Array2, ArrayD, IxDyn};
use numpy::{
    AllowTypeChange, IntoPyArray as _, PyArrayDyn, PyArrayLikeDyn, PyUntypedArrayMethods as _,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::{
    bytes_of, count, fits, guarded, holding, input, rank, real_array, whole, Failure, Res,
};
use vort::error::VortError;
use vort::nodes::NodeMode;
use vort::retention::checked::{retention_checked, Form, HeadInputs, RetentionOpts};
use vort::retention::Rates;

/// An array as the CLI's reader hands it over (values as f64, the shape), for `HeadInputs`.
pub(crate) fn flat(x: &PyArrayLikeDyn<'_, f64, AllowTypeChange>) -> vort::st::Flat {
    vort::st::Flat {
        data: x.as_array().iter().copied().collect(),
        shape: x.shape().to_vec(),
        dtype: "F64".into(),
    }
}

/// retention(phi_q, phi_k, v, alpha, *, form="chunked", mode="shared", delta=0.1,
/// eps=1e-3, horizon=None, eps_den=1e-6, banks=None, chunk=None) -> numpy.ndarray
///
/// The layer's retention core on one head, the computation of `vort retention` (the README's
/// "What `vort retention` computes"): phi_q, phi_k [T, F] (features >= 0), v [T, D], alpha
/// [T] in [0, 1] -> y [T, D]. float32 for the chunked and fused forms (they compute in f32),
/// float64 for naive and recurrent. `banks` (None: 4) and `chunk` (None: 64) take any whole
/// number. `mode` is the node mode, shared or banks (`memory=`, its older name, is accepted).
/// The GIL is released while it runs.
///
/// Raises ValueError with the CLI's message for every bad input or option.
#[pyfunction]
#[pyo3(signature = (phi_q, phi_k, v, alpha, *, form = "chunked", mode = None, memory = None,
    delta = 0.1, eps = 1e-3, horizon = None, eps_den = 1e-6, banks = None, chunk = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn retention<'py>(
    py: Python<'py>,
    phi_q: &Bound<'py, PyAny>,
    phi_k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    alpha: &Bound<'py, PyAny>,
    form: &str,
    mode: Option<&str>,
    memory: Option<&str>,
    delta: f64,
    eps: f64,
    horizon: Option<&Bound<'py, PyAny>>,
    eps_den: f64,
    banks: Option<&Bound<'py, PyAny>>,
    chunk: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    // None: the defaults (4 banks, chunks of 64); any number else, checked as a whole number
    let banks = banks.map_or(Ok(4), |b| whole(b, "banks", 0, 1 << 20))? as usize;
    let chunk = chunk.map_or(Ok(64), |c| whole(c, "chunk", 0, 1 << 31))? as usize;
    let (phi_q, phi_k) = (real_array(phi_q, "phi_q")?, real_array(phi_k, "phi_k")?);
    let (v, alpha) = (real_array(v, "v")?, real_array(alpha, "alpha")?);
    rank(&phi_q, "phi_q", &["T", "F"])?;
    rank(&phi_k, "phi_k", &["T", "F"])?;
    rank(&v, "v", &["T", "D"])?;
    rank(&alpha, "alpha", &["T"])?;
    let form: Form = form.parse().map_err(|e: VortError| Failure::from(e))?;
    let mode = node_mode(mode, memory)?;
    // the CLI's own checks (vort-cli's layer.rs), with its words
    if chunk == 0 {
        return Err(input("--chunk must be >= 1").into());
    }
    let horizon = match horizon {
        Some(h) if !h.is_none() => Some(count(h, "horizon")?),
        _ => None,
    };
    if !(eps_den.is_finite() && eps_den > 0.0) {
        return Err(input(format!("eps_den = {eps_den:?} must be finite and > 0")).into());
    }
    let opts = RetentionOpts {
        form,
        mode,
        eps,
        horizon,
        banks,
        delta,
        chunk,
        eps_den,
    };
    // the host copies of the inputs (f64), the forms' working tensors (allowed 4x the inputs)
    // and the output: refused before any copy
    let inputs = phi_q.len() + phi_k.len() + v.len() + alpha.len();
    fits(
        "retention",
        bytes_of(inputs, 5 * 8) + bytes_of(v.len(), 2 * 8),
    )?;
    let (q, k, vv, a) = (flat(&phi_q), flat(&phi_k), flat(&v), flat(&alpha));
    let (y, t, d) = guarded(py, move || {
        opts.node_spec(1).validate()?;
        let x = HeadInputs::new(q, k, vv, a)?;
        let (y, _) = retention_checked(&x, &opts)?;
        Ok((y, x.t, x.d))
    })?;
    holding(|| {
        let arr = Array2::from_shape_vec((t, d), y)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(if matches!(form, Form::Chunked | Form::Fused) {
            arr.mapv(|x| x as f32).into_pyarray(py).into_any()
        } else {
            arr.into_pyarray(py).into_any()
        })
    })
}

/// An array as a candle tensor of `dtype` (the values come as float64).
pub(crate) fn tensor_of(x: &PyArrayLikeDyn<'_, f64, AllowTypeChange>, dtype: DType) -> Res<Tensor> {
    let shape = x.shape().to_vec();
    let data: Vec<f64> = x.as_array().iter().copied().collect();
    Ok(Tensor::from_vec(data, shape, &candle_core::Device::Cpu)?.to_dtype(dtype)?)
}

/// A tensor's values as an f64 array of its shape.
pub(crate) fn host_f64(t: &Tensor) -> Res<(Vec<usize>, Vec<f64>)> {
    Ok((
        t.dims().to_vec(),
        t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?,
    ))
}

pub(crate) fn to_numpy<'py>(
    py: Python<'py>,
    (shape, data): (Vec<usize>, Vec<f64>),
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let a = ArrayD::from_shape_vec(IxDyn(&shape), data)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    Ok(a.into_pyarray(py))
}

/// _fused_chunk(q, k, vp, cw, u, chunk, dtype, grad_o=None)
///
/// The Rust layer's fused chunked op (`vort::retention::fused_chunk`, the training form with
/// its hand-written backward) from an empty state: q, k [B, H, T, F], vp [B, H, T, D+1], cw
/// [B, H, T, N], rates u [1 or H, N] (learned: they get a gradient), computed in `dtype`
/// ("f32" or "f64"). Returns o [B, H, T, D+1]; with `grad_o` (dL/do), the gradients
/// (dq, dk, dvp, dcw, du) of L = Σ o · grad_o instead, by candle's backward through the op.
/// No horizon is checked here (vort.torch checks it).
#[pyfunction]
#[pyo3(signature = (q, k, vp, cw, u, chunk, dtype, grad_o = None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _fused_chunk<'py>(
    py: Python<'py>,
    q: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    k: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    vp: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    cw: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    u: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    chunk: usize,
    dtype: &str,
    grad_o: Option<PyArrayLikeDyn<'py, f64, AllowTypeChange>>,
) -> PyResult<Bound<'py, PyAny>> {
    let dt = match dtype {
        "f32" => DType::F32,
        "f64" => DType::F64,
        _ => return Err(input(format!("dtype `{dtype}` is not one of f32|f64")).into()),
    };
    if chunk == 0 {
        return Err(input("--chunk must be >= 1").into());
    }
    let mut ts = Vec::new();
    for x in [&q, &k, &vp, &cw, &u] {
        ts.push(tensor_of(x, dt)?);
    }
    let go = grad_o.map(|g| tensor_of(&g, dt)).transpose()?;
    let out = guarded(py, move || {
        let vars = ts
            .iter()
            .map(|t| Ok(candle_core::Var::from_tensor(t)?))
            .collect::<Res<Vec<_>>>()?;
        let inputs = vort::retention::Inputs {
            q: vars[0].as_tensor(),
            k: vars[1].as_tensor(),
            vp: vars[2].as_tensor(),
            cw: vars[3].as_tensor(),
        };
        let rates = Rates::Learned(vars[4].as_tensor().clone());
        let o = if dt == DType::F32 {
            vort::retention::fused_chunk::<f32>(&inputs, &rates, chunk, None, false)?.0
        } else {
            vort::retention::fused_chunk::<f64>(&inputs, &rates, chunk, None, false)?.0
        };
        match go {
            None => Ok(vec![host_f64(&o)?]),
            Some(g) => {
                let loss = (&o * &g)?.sum_all()?;
                let grads = loss.backward()?;
                vars.iter()
                    .map(|v| match grads.get(v.as_tensor()) {
                        Some(d) => host_f64(d),
                        None => host_f64(&v.as_tensor().zeros_like()?),
                    })
                    .collect()
            }
        }
    })?;
    holding(|| {
        if out.len() == 1 {
            let o = out.into_iter().next().expect("one output");
            return Ok(to_numpy(py, o)?.into_any());
        }
        let list = PyList::empty(py);
        for g in out {
            list.append(to_numpy(py, g)?)?;
        }
        Ok(list.into_any())
    })
}

/// The node mode of `mode=` or of `memory=`, its older name (not both; default shared).
pub(crate) fn node_mode(mode: Option<&str>, memory: Option<&str>) -> PyResult<NodeMode> {
    let name = match (mode, memory) {
        (Some(_), Some(_)) => {
            return Err(
                input("give the node mode as mode= (or memory=, its older name), not both").into(),
            )
        }
        (m, old) => m.or(old).unwrap_or("shared"),
    };
    Ok(name.parse().map_err(|e: VortError| Failure::from(e))?)
}
