//! `vort._vort`: the Python bindings of the Rust core (PyO3 + rust-numpy, built by maturin).
//!
//! Every function is a thin wrapper over a public function of the crates: the GL weights and
//! the certified SOE builders of `vort-math`, the node tables of `vort`, `vort retention`'s
//! computation (`vort_cli::retention_file`), and the loaders and the sampler of `vort-lab`
//! (`eval::load_inference`, `generate::generate`). Nothing is reimplemented here.
//!
//! Errors: a user error (the CLI's exit status 2) is a `ValueError` whose message is the line
//! the CLI prints after `error: `; a failure of the run or of the environment is a
//! `RuntimeError`. Every call runs under `catch_unwind`, so a panic becomes a `RuntimeError`
//! too, never an abort or a `PanicException`. Long computations release the GIL.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Tensor};
use candle_nn::VarMap;
use numpy::ndarray::{Array1, Array2, ArrayD, IxDyn};
use numpy::{AllowTypeChange, IntoPyArray, PyArray1, PyArray2, PyArrayDyn, PyArrayLike1};
use numpy::{PyArrayLike2, PyArrayLikeDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use vort::error::VortError;
use vort::model::{Model as RustModel, ModelError, ModelState};
use vort::nodes::{NodeMode, NodeSpec, NodeTable, TableKind};
use vort::retention::Rates;
use vort_cli::retention_file::{retention_checked, Form, HeadInputs, RetentionOpts};
use vort_lab::tasks::TaskKind;
use vort_lab::train::generate::{generate as lab_generate, GenerateOptions};
use vort_lab::train::{buffer_vars, eval, trainable_vars, RunConfig, TrainError};
use vort_math::shared::SharedSoe;
use vort_math::{gl, MathError, Soe as RustSoe};

// ---------------------------------------------------------------------------------------
// errors and the panic guard

/// Joins a multi-line message into one line (as the CLI does before printing it).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a guarded call can fail with: built without the GIL, turned into a Python exception
/// after it is taken back.
enum Failure {
    /// The user's input (the CLI's exit status 2): `ValueError`.
    Input(String),
    /// The run or the environment (exit status 1), or a panic: `RuntimeError`.
    Run(String),
}

type Res<T> = std::result::Result<T, Failure>;

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Input(m) => PyValueError::new_err(m),
            Failure::Run(m) => PyRuntimeError::new_err(m),
        }
    }
}

impl From<VortError> for Failure {
    fn from(e: VortError) -> Failure {
        let m = one_line(&e.to_string());
        if e.is_input_error() {
            Failure::Input(m)
        } else {
            Failure::Run(m)
        }
    }
}

impl From<TrainError> for Failure {
    fn from(e: TrainError) -> Failure {
        let m = one_line(&e.to_string());
        if e.is_bad_input() {
            Failure::Input(m)
        } else {
            Failure::Run(m)
        }
    }
}

impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Failure {
        TrainError::from(e).into()
    }
}

impl From<MathError> for Failure {
    // the CLI maps every MathError to exit status 2 (a parameter out of its domain)
    fn from(e: MathError) -> Failure {
        Failure::Input(one_line(&e.to_string()))
    }
}

impl From<candle_core::Error> for Failure {
    fn from(e: candle_core::Error) -> Failure {
        Failure::Run(one_line(&format!("candle: {e}")))
    }
}

fn input(m: impl Into<String>) -> Failure {
    Failure::Input(m.into())
}

/// The panic payload as text.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f` without the GIL and with panics caught: a panic is a `RuntimeError` with the
/// CLI's wording for an internal error.
fn guarded<T: Send>(py: Python<'_>, f: impl FnOnce() -> Res<T> + Send) -> PyResult<T> {
    py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(PyErr::from),
        Err(p) => Err(PyRuntimeError::new_err(format!(
            "internal error: {} (please report this)",
            one_line(&panic_message(p.as_ref()))
        ))),
    })
}

/// `catch_unwind` for the (short) parts that must hold the GIL (building Python objects).
fn holding<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(PyRuntimeError::new_err(format!(
            "internal error: {} (please report this)",
            one_line(&panic_message(p.as_ref()))
        ))),
    }
}

/// A count such as a horizon: a Python int, or a float with an integer value (1e5), >= 1.
fn count(x: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    if let Ok(v) = x.extract::<u64>() {
        if v >= 1 {
            return Ok(v);
        }
    } else if let Ok(v) = x.extract::<f64>() {
        if v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= 2f64.powi(53) {
            return Ok(v as u64);
        }
    }
    Err(PyValueError::new_err(format!(
        "{name} = {} must be an integer >= 1 (such as 4096 or 1e5)",
        x.repr().map_or_else(|_| "?".to_string(), |r| r.to_string())
    )))
}

// ---------------------------------------------------------------------------------------
// the kernel: GL weights and certified SOEs

/// gl_weights(alpha, lags) -> numpy.ndarray
///
/// The Grünwald–Letnikov weights w_j(alpha) = Γ(j + alpha) / (Γ(alpha) Γ(j + 1)) at every
/// lag j of `lags` (an int or an array of ints >= 0), as float64 of the same shape
/// (`vort kernel weights --alpha A --lags J,J,...`).
///
/// Raises ValueError for an order outside the kernel's domain or a negative lag.
#[pyfunction]
fn gl_weights<'py>(
    py: Python<'py>,
    alpha: f64,
    lags: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let shape = lags.shape().to_vec();
    let lags: Vec<i64> = whole_numbers(&lags, "lag")?;
    let w = guarded(py, move || {
        lags.iter()
            .map(|&j| {
                let j = u64::try_from(j).map_err(|_| input(format!("lag {j} must be >= 0")))?;
                Ok(gl::weight(alpha, j)?)
            })
            .collect::<Res<Vec<f64>>>()
    })?;
    holding(|| {
        let a = ArrayD::from_shape_vec(IxDyn(&shape), w)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(a.into_pyarray(py))
    })
}

/// A certified sum of exponentials of the GL kernel for one order:
/// w_j(alpha) ≈ Σ_s c_s e^(-u_s j), within `max_rel_error` (<= eps) at every lag 1..=horizon.
#[pyclass(frozen, module = "vort", name = "Soe")]
struct PySoe {
    inner: RustSoe,
}

#[pymethods]
impl PySoe {
    /// The order alpha.
    #[getter]
    fn alpha(&self) -> f64 {
        self.inner.alpha
    }
    /// The certified horizon T (lags 1..=T).
    #[getter]
    fn horizon(&self) -> u64 {
        self.inner.horizon
    }
    /// The tolerance asked for.
    #[getter]
    fn eps(&self) -> f64 {
        self.inner.eps
    }
    /// The number of terms S.
    #[getter(S)]
    fn s(&self) -> usize {
        self.inner.len()
    }
    /// The weights c_s, float64 [S].
    #[getter]
    fn c<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        let c: Vec<f64> = self.inner.terms.iter().map(|t| t.c).collect();
        c.into_pyarray(py)
    }
    /// The rates u_s, float64 [S].
    #[getter]
    fn u<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        let u: Vec<f64> = self.inner.terms.iter().map(|t| t.u).collect();
        u.into_pyarray(py)
    }
    /// The certificate: max over every lag 1..=horizon of |ŵ_j / w_j - 1|.
    #[getter]
    fn max_rel_error(&self) -> f64 {
        self.inner.certificate.max_rel_error
    }
    /// The lag where the certificate's maximum is reached.
    #[getter]
    fn argmax_lag(&self) -> u64 {
        self.inner.certificate.argmax_lag
    }
    /// The trapezoid step h of recipe R1.
    #[getter]
    fn step(&self) -> f64 {
        self.inner.step
    }
    /// The SOE kernel Σ_s c_s e^(-u_s j) at the lags given (float64, their shape).
    fn kernel<'py>(
        &self,
        py: Python<'py>,
        lags: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let shape = lags.shape().to_vec();
        let mut out = Vec::with_capacity(lags.len());
        for j in whole_numbers(&lags, "lag")? {
            let j = u64::try_from(j)
                .map_err(|_| PyValueError::new_err(format!("lag {j} must be >= 0")))?;
            out.push(self.inner.kernel(j));
        }
        let a = ArrayD::from_shape_vec(IxDyn(&shape), out)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(a.into_pyarray(py))
    }
    fn __repr__(&self) -> String {
        format!(
            "Soe(alpha={}, horizon={}, eps={:e}, S={}, max_rel_error={:.3e})",
            self.inner.alpha,
            self.inner.horizon,
            self.inner.eps,
            self.inner.len(),
            self.inner.certificate.max_rel_error
        )
    }
}

/// soe(alpha, horizon, eps) -> Soe
///
/// The certified SOE of recipe R1 (`Soe::build`, the same as `vort kernel soe`): the smallest
/// candidate whose certificate over every lag 1..=horizon is <= eps. Not a fit.
///
/// Raises ValueError for parameters out of the builder's domain.
#[pyfunction]
fn soe(py: Python<'_>, alpha: f64, horizon: &Bound<'_, PyAny>, eps: f64) -> PyResult<PySoe> {
    let horizon = count(horizon, "horizon")?;
    let inner = guarded(py, move || Ok(RustSoe::build(alpha, horizon, eps)?))?;
    Ok(PySoe { inner })
}

/// One node set {u_s} for every order in [delta, 1], with weights c_s(alpha): the shared
/// memory of VORT (`vort kernel shared`).
#[pyclass(frozen, module = "vort", name = "SharedNodes")]
struct PyShared {
    inner: SharedSoe,
}

#[pymethods]
impl PyShared {
    /// The smallest order δ.
    #[getter]
    fn delta(&self) -> f64 {
        self.inner.delta
    }
    /// The certified horizon.
    #[getter]
    fn horizon(&self) -> u64 {
        self.inner.horizon
    }
    /// The tolerance asked for.
    #[getter]
    fn eps(&self) -> f64 {
        self.inner.eps
    }
    /// The number of nodes S.
    #[getter(S)]
    fn s(&self) -> usize {
        self.inner.len()
    }
    /// The shared rates u_s, float64 [S].
    #[getter]
    fn u<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        self.inner.nodes_u.clone().into_pyarray(py)
    }
    /// The certificate over the order grid and every lag 1..=horizon.
    #[getter]
    fn max_rel_error(&self) -> f64 {
        self.inner.certificate.max_rel_error
    }
    /// The weights c_s(alpha) for an order or an array of orders in [delta, 1]: float64 of
    /// shape alpha.shape + (S,) (`vort kernel shared --alpha A` prints the same c).
    fn weights<'py>(
        &self,
        py: Python<'py>,
        alpha: PyArrayLikeDyn<'py, f64, AllowTypeChange>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let mut shape = alpha.shape().to_vec();
        let a: Vec<f64> = alpha.as_array().iter().copied().collect();
        let delta = self.inner.delta;
        if let Some(bad) = a
            .iter()
            .find(|&&x| !(x.is_finite() && x >= delta && x <= 1.0))
        {
            return Err(PyValueError::new_err(format!(
                "alpha {bad:?} must be in [delta = {delta:?}, 1]"
            )));
        }
        let s = self.inner.len();
        let inner = &self.inner;
        let w = guarded(py, move || {
            Ok(a.iter()
                .flat_map(|&x| inner.weights_at(x))
                .collect::<Vec<f64>>())
        })?;
        shape.push(s);
        let arr = ArrayD::from_shape_vec(IxDyn(&shape), w)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(arr.into_pyarray(py))
    }
    fn __repr__(&self) -> String {
        format!(
            "SharedNodes(delta={}, horizon={}, eps={:e}, S={}, max_rel_error={:.3e})",
            self.inner.delta,
            self.inner.horizon,
            self.inner.eps,
            self.inner.len(),
            self.inner.certificate.max_rel_error
        )
    }
}

/// shared_nodes(delta, horizon, eps) -> SharedNodes
///
/// The certified shared node set (`SharedSoe::build`, the same as `vort kernel shared`).
///
/// Raises ValueError for parameters out of the builder's domain.
#[pyfunction]
fn shared_nodes(
    py: Python<'_>,
    delta: f64,
    horizon: &Bound<'_, PyAny>,
    eps: f64,
) -> PyResult<PyShared> {
    let horizon = count(horizon, "horizon")?;
    let inner = guarded(py, move || Ok(SharedSoe::build(delta, horizon, eps)?))?;
    Ok(PyShared { inner })
}

// ---------------------------------------------------------------------------------------
// node tables as the layer uses them (for vort.torch)

/// A node table as a dict of arrays: what `vort.torch` needs to compute c_n(α) exactly as
/// the layer does (the shared memory's cubic Hermite table, the banks' linear split).
fn table_dict<'py>(py: Python<'py>, t: &NodeTable) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("u", t.u.clone().into_pyarray(py))?;
    d.set_item("horizon", t.horizon)?;
    d.set_item("max_rel_error", t.max_rel_error)?;
    d.set_item("grid", t.grid.clone().into_pyarray(py))?;
    let n = t.len();
    let w: Vec<f64> = t.weights.iter().flatten().copied().collect();
    let w = Array2::from_shape_vec((t.weights.len(), n), w)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    d.set_item("weights", w.into_pyarray(py))?;
    match &t.kind {
        TableKind::Shared { table, soe } => {
            d.set_item("kind", "shared")?;
            d.set_item("delta", soe.delta)?;
            d.set_item("hermite_a0", table.a0)?;
            d.set_item("hermite_h", table.h)?;
            let shape = (table.points, table.n);
            let c = Array2::from_shape_vec(shape, table.c.clone())
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            let dc = Array2::from_shape_vec(shape, table.dc.clone())
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            d.set_item("hermite_c", c.into_pyarray(py))?;
            d.set_item("hermite_dc", dc.into_pyarray(py))?;
        }
        TableKind::Banks { .. } => d.set_item("kind", "banks")?,
        TableKind::Fixed => d.set_item("kind", "fixed")?,
    }
    Ok(d)
}

/// _node_table(memory, delta, horizon, eps, banks) -> dict: the node table `vort retention`
/// and the layer build for these settings (`NodeSpec::build`).
#[pyfunction]
#[pyo3(signature = (memory, delta, horizon, eps, banks = 4))]
fn _node_table<'py>(
    py: Python<'py>,
    memory: &str,
    delta: f64,
    horizon: &Bound<'py, PyAny>,
    eps: f64,
    banks: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let horizon = count(horizon, "horizon")?;
    let mode: NodeMode = memory.parse().map_err(|e: VortError| Failure::from(e))?;
    let spec = NodeSpec {
        mode,
        banks,
        delta,
        horizon,
        eps,
    };
    let t = guarded(py, move || Ok(spec.build()?))?;
    holding(|| table_dict(py, &t))
}

// ---------------------------------------------------------------------------------------
// the retention core (`vort retention`)

/// An array as the CLI's reader hands it over (values as f64, the shape), for `HeadInputs`.
fn flat2(x: &PyArrayLike2<'_, f64, AllowTypeChange>) -> vort::st::Flat {
    vort::st::Flat {
        data: x.as_array().iter().copied().collect(),
        shape: x.shape().to_vec(),
        dtype: "F64".into(),
    }
}

/// retention(phi_q, phi_k, v, alpha, *, form="chunked", memory="shared", delta=0.1,
/// eps=1e-3, horizon=None, eps_den=1e-6, banks=4, chunk=64) -> numpy.ndarray
///
/// The layer's retention core on one head, the computation of `vort retention` (the README's
/// "What `vort retention` computes"): phi_q, phi_k [T, F] (features >= 0), v [T, D], alpha
/// [T] in [0, 1] -> y [T, D]. float32 for the chunked and fused forms (they compute in f32),
/// float64 for naive and recurrent. The GIL is released while it runs.
///
/// Raises ValueError with the CLI's message for every bad input or option.
#[pyfunction]
#[pyo3(signature = (phi_q, phi_k, v, alpha, *, form = "chunked", memory = "shared",
    delta = 0.1, eps = 1e-3, horizon = None, eps_den = 1e-6, banks = 4, chunk = 64))]
#[allow(clippy::too_many_arguments)]
fn retention<'py>(
    py: Python<'py>,
    phi_q: PyArrayLike2<'py, f64, AllowTypeChange>,
    phi_k: PyArrayLike2<'py, f64, AllowTypeChange>,
    v: PyArrayLike2<'py, f64, AllowTypeChange>,
    alpha: PyArrayLike1<'py, f64, AllowTypeChange>,
    form: &str,
    memory: &str,
    delta: f64,
    eps: f64,
    horizon: Option<&Bound<'py, PyAny>>,
    eps_den: f64,
    banks: usize,
    chunk: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let form: Form = form.parse().map_err(|e: VortError| Failure::from(e))?;
    let memory: NodeMode = memory.parse().map_err(|e: VortError| Failure::from(e))?;
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
        memory,
        eps,
        horizon,
        banks,
        delta,
        chunk,
        eps_den,
    };
    let (q, k, vv) = (flat2(&phi_q), flat2(&phi_k), flat2(&v));
    let a = vort::st::Flat {
        data: alpha.as_array().iter().copied().collect(),
        shape: alpha.shape().to_vec(),
        dtype: "F64".into(),
    };
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
fn tensor_of(x: &PyArrayLikeDyn<'_, f64, AllowTypeChange>, dtype: DType) -> Res<Tensor> {
    let shape = x.shape().to_vec();
    let data: Vec<f64> = x.as_array().iter().copied().collect();
    Ok(Tensor::from_vec(data, shape, &candle_core::Device::Cpu)?.to_dtype(dtype)?)
}

/// A tensor's values as an f64 array of its shape.
fn host_f64(t: &Tensor) -> Res<(Vec<usize>, Vec<f64>)> {
    Ok((
        t.dims().to_vec(),
        t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?,
    ))
}

fn to_numpy<'py>(
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
fn _fused_chunk<'py>(
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

// ---------------------------------------------------------------------------------------
// trained models (`vort eval`, `vort generate`)

/// A trained model loaded by `vort.load`: a run directory or a `vort export` file.
#[pyclass(frozen, module = "vort", name = "Model")]
struct PyModel {
    model: Mutex<RustModel>,
    vm: VarMap,
    cfg: RunConfig,
    steps: u64,
    path: PathBuf,
}

/// A streaming state of a [`PyModel`] (flat in the stream length for the retention
/// memories): from `Model.state()`, advanced by `Model.step`.
#[pyclass(frozen, module = "vort", name = "State")]
struct PyState {
    inner: ModelState,
    tokens: u64,
}

#[pymethods]
impl PyState {
    /// Resident bytes of the state (retention states or KV caches).
    #[getter]
    fn bytes(&self) -> usize {
        self.inner.bytes()
    }
    /// Tokens fed so far.
    #[getter]
    fn tokens(&self) -> u64 {
        self.tokens
    }
    fn __repr__(&self) -> String {
        format!(
            "State(tokens={}, bytes={})",
            self.tokens,
            self.inner.bytes()
        )
    }
}

fn lock(m: &Mutex<RustModel>) -> std::sync::MutexGuard<'_, RustModel> {
    // a panic while the lock was held left the model as it was (every call builds new tensors)
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The whole numbers of an array read as float64 (`what` names them in the error): a value
/// with a fraction, NaN, inf or past ±2^53 is refused, where reading it as int64 truncated
/// 1.7 to 1 and overflowed on 10**30 (an OverflowError).
fn whole_numbers<'py, D: numpy::ndarray::Dimension>(
    a: &numpy::PyArrayLike<'py, f64, D, AllowTypeChange>,
    what: &str,
) -> Res<Vec<i64>> {
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53: every whole f64 below is exact
    a.as_array()
        .iter()
        .map(|&x| {
            if x.is_finite() && x.fract() == 0.0 && x.abs() <= LIMIT {
                Ok(x as i64)
            } else {
                Err(input(format!(
                    "{what} {x:?} is not a whole number in ±2^53"
                )))
            }
        })
        .collect()
}

fn check_tokens(tokens: &[i64], vocab: usize) -> Res<Vec<u32>> {
    if tokens.is_empty() {
        return Err(input("tokens must hold at least one token"));
    }
    tokens
        .iter()
        .map(|&t| {
            if t < 0 || t as u64 >= vocab as u64 {
                Err(input(format!(
                    "token {t} is outside the vocabulary of {vocab}"
                )))
            } else {
                Ok(t as u32)
            }
        })
        .collect()
}

#[pymethods]
impl PyModel {
    /// Vocabulary size V.
    #[getter]
    fn vocab(&self) -> usize {
        self.cfg.task.vocab()
    }
    /// The training sequence length.
    #[getter]
    fn seq_len(&self) -> usize {
        self.cfg.task.seq_len
    }
    /// The training steps of the parameters.
    #[getter]
    fn steps(&self) -> u64 {
        self.steps
    }
    /// The mixer kind (vort, power-law, exponential, retnet, mixture, softmax).
    #[getter]
    fn mixer(&self) -> &'static str {
        self.cfg.model.mixer.kind()
    }
    /// The certified horizon of the memory (None for memories without node tables).
    #[getter]
    fn horizon(&self) -> Option<u64> {
        lock(&self.model).horizon()
    }
    /// The run config as JSON (the `config.toml` of the run, every field).
    #[getter]
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.cfg).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
    /// The run config as TOML (what `config.toml` and an export's metadata hold).
    #[getter]
    fn config_toml(&self) -> PyResult<String> {
        self.cfg
            .to_toml()
            .map_err(|e| PyErr::from(Failure::from(e)))
    }

    /// logits(tokens) -> numpy.ndarray float32 [T, V]
    ///
    /// Next-token logits at every position of one sequence (the training forward, as
    /// `vort eval` scores it). Refused past the memory's certified horizon.
    fn logits<'py>(
        &self,
        py: Python<'py>,
        tokens: PyArrayLike1<'py, f64, AllowTypeChange>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let toks: Vec<i64> = whole_numbers(&tokens, "token")?;
        let vocab = self.vocab();
        let model = &self.model;
        let (l, t) = guarded(py, move || {
            let toks = check_tokens(&toks, vocab)?;
            let t = toks.len();
            let m = lock(model);
            let x = Tensor::from_vec(toks, (1, t), m.device())?;
            let out = m.forward(&x)?;
            let pos: Vec<usize> = (0..t).collect();
            let l = m.logits_at(&out.hidden, &pos)?;
            let l: Vec<f32> = l.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
            Ok((l, t))
        })?;
        holding(|| {
            let arr = Array2::from_shape_vec((t, vocab), l)
                .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
            Ok(arr.into_pyarray(py))
        })
    }

    /// state() -> State: an empty streaming state.
    fn state(&self) -> PyState {
        PyState {
            inner: lock(&self.model).new_state(),
            tokens: 0,
        }
    }

    /// step(token, state) -> (logits float32 [V], State)
    ///
    /// Feeds one token after the stream in `state` through the recurrent form and returns the
    /// next-token logits with the new state (`state` itself is not changed). A stream past
    /// the certified horizon is refused: call `set_horizon` first for longer streams (as
    /// `generate` does).
    fn step<'py>(
        &self,
        py: Python<'py>,
        token: i64,
        state: &PyState,
    ) -> PyResult<(Bound<'py, PyArray1<f32>>, PyState)> {
        let vocab = self.vocab();
        let model = &self.model;
        let mut st = state.inner.clone();
        let tokens = state.tokens + 1;
        let (l, st) = guarded(py, move || {
            let tok = check_tokens(&[token], vocab)?[0];
            let m = lock(model);
            let l = m.step(tok, &mut st)?;
            let l: Vec<f32> = l.to_dtype(DType::F32)?.to_vec1()?;
            Ok((l, st))
        })?;
        Ok((
            Array1::from_vec(l).into_pyarray(py),
            PyState { inner: st, tokens },
        ))
    }

    /// set_horizon(horizon): rebuilds the node tables for lags 1..=horizon (parameters
    /// unchanged; states made before no longer fit). A no-op without node tables.
    fn set_horizon(&self, py: Python<'_>, horizon: &Bound<'_, PyAny>) -> PyResult<()> {
        let h = count(horizon, "horizon")?;
        let model = &self.model;
        guarded(py, move || Ok(lock(model).set_horizon(h)?))
    }

    /// set_past_horizon(mode, tau=None): what the memory does with a context past its node
    /// tables' horizon, as `Model::set_past_horizon` in Rust: "refuse" (the default), "soe-tail"
    /// (the tables' own exponential tail weighs those lags) or "tempered" (every kernel times
    /// e^(-j/tau), u_n -> u_n + 1/tau, within the horizon too: the books report's stream that
    /// beats the reset, at tau = the training length). Start new states afterwards. A no-op
    /// without node tables.
    #[pyo3(signature = (mode, tau = None))]
    fn set_past_horizon(&self, py: Python<'_>, mode: &str, tau: Option<f64>) -> PyResult<()> {
        use vort::block::PastHorizon;
        let past = match (mode, tau) {
            ("refuse", None) => PastHorizon::Refuse,
            ("soe-tail", None) => PastHorizon::SoeTail,
            ("tempered", Some(tau)) => PastHorizon::Tempered { tau },
            ("tempered", None) => {
                return Err(input("set_past_horizon(\"tempered\") needs tau > 0").into())
            }
            ("refuse" | "soe-tail", Some(_)) => {
                return Err(input(format!("tau is for \"tempered\" only, not {mode:?}")).into())
            }
            (other, _) => {
                return Err(input(format!(
                    "past-horizon mode {other:?} is not one of refuse, soe-tail, tempered"
                ))
                .into())
            }
        };
        let model = &self.model;
        guarded(py, move || Ok(lock(model).set_past_horizon(past)?))
    }

    /// generate(prompt, n, temperature=1.0, seed=0) -> bytes
    ///
    /// Samples n bytes after `prompt` from a books model, as `vort generate` does (the same
    /// sampler and seed give the same bytes). The node tables are rebuilt for 2^20 lags for
    /// the stream and restored afterwards.
    #[pyo3(signature = (prompt, n, temperature = 1.0, seed = 0))]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &[u8],
        n: i64,
        temperature: f64,
        seed: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if n < 1 {
            return Err(input("--bytes must be >= 1").into());
        }
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(input(format!("--temperature {temperature:?} must be >= 0")).into());
        }
        if self.cfg.task.kind != TaskKind::Books {
            return Err(input(format!(
                "{} is a {} run; generate needs a books model (`vort train --task books`)",
                self.path.display(),
                self.cfg.task.kind
            ))
            .into());
        }
        let prompt = prompt.to_vec();
        let model = &self.model;
        let out = guarded(py, move || {
            let mut m = lock(model);
            // the horizon the caller set (set_horizon), not the one at load time
            let restore = m.horizon();
            let opts = GenerateOptions {
                bytes: usize::try_from(n).unwrap_or(usize::MAX),
                temperature,
                seed,
            };
            let r = lab_generate(&mut m, &prompt, &opts, |_| Ok(()));
            if let Some(h) = restore {
                m.set_horizon(h)?;
            }
            Ok(r?.output)
        })?;
        Ok(PyBytes::new(py, &out))
    }

    /// _task_grads(tokens [B, T], labels [B, T]) -> (loss, {name: gradient})
    ///
    /// The trainer's answer cross-entropy (`vort_lab::train::losses`' task term: the mean over
    /// the labelled positions, label -100 = not scored) of the training forward, and its
    /// gradient with respect to every parameter, by candle's backward (the fused op's
    /// hand-written one inside).
    fn _task_grads<'py>(
        &self,
        py: Python<'py>,
        tokens: PyArrayLike2<'py, f64, AllowTypeChange>,
        labels: PyArrayLike2<'py, f64, AllowTypeChange>,
    ) -> PyResult<(f64, Bound<'py, PyDict>)> {
        let shape = tokens.shape().to_vec();
        if labels.shape() != shape.as_slice() {
            return Err(input(format!(
                "labels {:?} must have the shape of tokens {shape:?}",
                labels.shape()
            ))
            .into());
        }
        let toks: Vec<i64> = whole_numbers(&tokens, "token")?;
        let labs: Vec<i64> = whole_numbers(&labels, "label")?;
        let vocab = self.vocab();
        let model = &self.model;
        let vars = trainable_vars(&self.vm);
        let (loss, grads) = guarded(py, move || {
            let toks = check_tokens(&toks, vocab)?;
            let pos: Vec<usize> = (0..labs.len()).filter(|&i| labs[i] != -100).collect();
            if pos.is_empty() {
                return Err(input("every label is -100: nothing to score"));
            }
            let tgt = check_tokens(&pos.iter().map(|&i| labs[i]).collect::<Vec<_>>(), vocab)?;
            let m = lock(model);
            let x = Tensor::from_vec(toks, (shape[0], shape[1]), m.device())?;
            let out = m.forward(&x)?;
            let logits = m.logits_at(&out.hidden, &pos)?;
            let tgt = Tensor::from_vec(tgt, pos.len(), m.device())?;
            let loss = candle_nn::loss::cross_entropy(&logits, &tgt)?;
            let g = loss.backward()?;
            let grads = vars
                .iter()
                .map(|(name, var)| {
                    let d = match g.get(var.as_tensor()) {
                        Some(d) => d.clone(),
                        None => var.as_tensor().zeros_like()?,
                    };
                    Ok((name.clone(), host_f64(&d)?))
                })
                .collect::<Res<Vec<_>>>()?;
            Ok((loss.to_dtype(DType::F64)?.to_scalar::<f64>()?, grads))
        })?;
        holding(|| {
            let d = PyDict::new(py);
            for (name, g) in grads {
                d.set_item(name, to_numpy(py, g)?)?;
            }
            Ok((loss, d))
        })
    }

    /// The parameters by name, float32 arrays (`param/<name>` of a `vort export` file).
    fn _parameters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let vars = trainable_vars(&self.vm);
        let host = guarded(py, move || {
            vars.into_iter()
                .map(|(name, var)| {
                    let t = var.as_tensor();
                    let dims = t.dims().to_vec();
                    let data: Vec<f32> = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
                    Ok((name, dims, data))
                })
                .collect::<Res<Vec<_>>>()
        })?;
        holding(|| {
            let d = PyDict::new(py);
            for (name, dims, data) in host {
                let a = ArrayD::from_shape_vec(IxDyn(&dims), data)
                    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                d.set_item(name, a.into_pyarray(py))?;
            }
            Ok(d)
        })
    }

    /// What each block keeps that is not a parameter: the FAVOR+ projection (from the run
    /// seed), the node tables and the fixed rates. A list of dicts, one per block.
    fn _buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let m = lock(&self.model);
        holding(|| {
            let out = PyList::empty(py);
            for blk in m.blocks() {
                let d = PyDict::new(py);
                let f = blk.features();
                d.set_item("feature_map", format!("{:?}", f.map).to_lowercase())?;
                d.set_item("features", f.m)?;
                if let Some(p) = f.projection() {
                    let (r, c) = p
                        .dims2()
                        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                    let data: Vec<f32> = p
                        .flatten_all()
                        .and_then(|x| x.to_vec1())
                        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                    let a = Array2::from_shape_vec((r, c), data)
                        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
                    d.set_item("projection", a.into_pyarray(py))?;
                }
                let tables = PyList::empty(py);
                for t in blk.tables() {
                    tables.append(table_dict(py, t)?)?;
                }
                d.set_item("tables", tables)?;
                if let Some(Rates::Fixed { u, .. }) = blk.fixed_rates() {
                    d.set_item("fixed_rates", u.clone())?;
                }
                out.append(d)?;
            }
            Ok(out)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Model(path={:?}, mixer={}, vocab={}, seq_len={}, steps={})",
            self.path.display().to_string(),
            self.cfg.model.mixer.kind(),
            self.cfg.task.vocab(),
            self.cfg.task.seq_len,
            self.steps
        )
    }
}

/// load(path) -> Model
///
/// A trained model from a run directory (`vort train --out DIR`) or a weights file
/// (`vort export`), loaded as `vort eval` and `vort generate` load it.
///
/// Raises ValueError for a path that is neither, or a missing, corrupt or mismatched config
/// or checkpoint (the CLI's message).
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyModel> {
    let p = path.clone();
    let (cfg, model, vm, steps) = guarded(py, move || {
        check_trained_path(&p)?;
        Ok(eval::load_inference(&p)?)
    })?;
    Ok(PyModel {
        model: Mutex::new(model),
        vm,
        cfg,
        steps,
        path,
    })
}

/// _init(config_toml) -> Model: a freshly seeded model of a run config (the parameters a
/// `vort train` run starts from, step 0), for `vort.torch.VortLM.from_config`.
#[pyfunction]
fn _init(py: Python<'_>, config_toml: String) -> PyResult<PyModel> {
    let (cfg, model, vm) = guarded(py, move || {
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        let vm = VarMap::new();
        let model = vort_lab::train::run_model(&cfg, &vm, &vort_lab::train::device())?;
        Ok((cfg, model, vm))
    })?;
    Ok(PyModel {
        model: Mutex::new(model),
        vm,
        cfg,
        steps: 0,
        path: PathBuf::from("<config>"),
    })
}

/// _save_export(path, config_toml, params, step): writes a weights file in the format of
/// `vort export` (`param/<name>` f32, the run config, the step and the checksum in the
/// metadata) through the checkpoint writer (atomic: temp file, fsync, rename). Every
/// parameter of the config's model must be given with its shape, and no other, before
/// anything is written (the FAVOR+ projections, buffers, are the config's seeded ones, as
/// `_buffers` gave them); `vort eval --run` and `vort generate --run` take the file.
#[pyfunction]
fn _save_export(
    py: Python<'_>,
    path: PathBuf,
    config_toml: String,
    params: std::collections::HashMap<String, PyArrayLikeDyn<'_, f32, AllowTypeChange>>,
    step: u64,
) -> PyResult<()> {
    let host: std::collections::BTreeMap<String, (Vec<usize>, Vec<f32>)> = params
        .iter()
        .map(|(k, a)| {
            (
                k.clone(),
                (a.shape().to_vec(), a.as_array().iter().copied().collect()),
            )
        })
        .collect();
    guarded(py, move || {
        use vort_lab::train::checkpoint::{Checkpoint, HostTensor};
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        let vm = VarMap::new();
        vort_lab::train::run_model(&cfg, &vm, &vort_lab::train::device())?;
        let mut tensors = std::collections::BTreeMap::new();
        let names = trainable_vars(&vm);
        // the buffers (FAVOR+ projections) are the config's seeded ones, as the torch model
        // read them (`_buffers`): stored so that the file carries its function
        for (name, var) in buffer_vars(&vm) {
            tensors.insert(format!("param/{name}"), HostTensor::of(var.as_tensor())?);
        }
        for (name, var) in &names {
            let Some((shape, data)) = host.get(name) else {
                return Err(input(format!("parameter `{name}` is missing")));
            };
            if shape.as_slice() != var.dims() {
                return Err(input(format!(
                    "parameter `{name}` has shape {shape:?}, the config's model has {:?}",
                    var.dims()
                )));
            }
            if let Some(i) = data.iter().position(|x| !x.is_finite()) {
                return Err(input(format!(
                    "parameter `{name}` holds a non-finite value at flat index {i}"
                )));
            }
            tensors.insert(
                format!("param/{name}"),
                HostTensor {
                    shape: shape.clone(),
                    data: data.clone(),
                },
            );
        }
        if let Some(extra) = host.keys().find(|k| !names.iter().any(|(n, _)| n == *k)) {
            return Err(input(format!(
                "parameter `{extra}` is not one of the config's model"
            )));
        }
        let ck = Checkpoint {
            step,
            adam_t: 0,
            config: cfg.to_toml()?,
            tensors,
        };
        ck.save(&path)?;
        Ok(())
    })
}

/// _task_batch(config_toml, step, stream, batch) -> (tokens, targets, mask): batch `step` of
/// the config's task stream ("train", "eval" or "valid"), `batch` sequences (the config's
/// batch size when None), as the Rust trainer draws it (`Source::batch` with the run's seed):
/// uint32 [B, T] tokens and targets, bool [B, T] answer positions. For
/// `python -m vort.torch.train`, whose ranks each take their rows of the same global batch.
#[pyfunction]
#[pyo3(signature = (config_toml, step, stream="train", batch=None))]
#[allow(clippy::type_complexity)]
fn _task_batch<'py>(
    py: Python<'py>,
    config_toml: String,
    step: u64,
    stream: &str,
    batch: Option<usize>,
) -> PyResult<(
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray2<u32>>,
    Bound<'py, PyArray2<bool>>,
)> {
    use vort_lab::tasks::{Source, Stream};
    let stream = match stream {
        "train" => Stream::Train,
        "eval" => Stream::Eval,
        "valid" => Stream::Valid,
        other => {
            return Err(PyValueError::new_err(format!(
                "stream {other:?} is not one of train, eval, valid"
            )))
        }
    };
    // the source of the last config asked for is kept: a trainer asks for a batch per step,
    // and opening a books corpus reads it whole
    static LAST: Mutex<Option<(String, RunConfig, Source)>> = Mutex::new(None);
    let bt = guarded(py, move || {
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (cfg, source) = match last.as_ref() {
            Some((text, cfg, source)) if *text == config_toml => (cfg.clone(), source.clone()),
            _ => {
                let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
                let source = Source::open(&cfg.task).map_err(TrainError::from)?;
                *last = Some((config_toml, cfg.clone(), source.clone()));
                (cfg, source)
            }
        };
        drop(last);
        let b = batch.unwrap_or(cfg.train.batch_size);
        if b == 0 {
            return Err(input("batch must be at least 1"));
        }
        Ok(source.batch(cfg.seed, stream, step, b))
    })?;
    let (b, t) = (bt.b, bt.t);
    let arr = |v: Vec<u32>| Array2::from_shape_vec((b, t), v).map(|a| a.into_pyarray(py));
    let tokens = arr(bt.tokens).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let targets = arr(bt.targets).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let mask = Array2::from_shape_vec((b, t), bt.mask)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?
        .into_pyarray(py);
    Ok((tokens, targets, mask))
}

/// _decayed_params(config_toml) -> list of the parameter names the weight decay applies to
/// when `train.decay_matrices_only` is set (the Rust optimizer's list).
#[pyfunction]
fn _decayed_params(py: Python<'_>, config_toml: String) -> PyResult<Vec<String>> {
    guarded(py, move || {
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        Ok(cfg.model.decayed_params())
    })
}

/// The CLI's check of a trained path (`vort eval --run`, `vort generate --run`), same words.
fn check_trained_path(path: &Path) -> Res<()> {
    if path.is_file() || path.join("config.toml").is_file() {
        return Ok(());
    }
    Err(input(format!(
        "{} is neither a run directory (no config.toml) nor a file of `vort export`; train one \
         with `vort train`",
        path.display()
    )))
}

/// _panic(): panics inside a guarded call (the tests check that it arrives as RuntimeError).
#[pyfunction]
fn _panic(py: Python<'_>) -> PyResult<()> {
    guarded(py, || -> Res<()> {
        panic!("deliberate panic for the tests")
    })
}

/// The Rust core of the `vort` Python package.
#[pymodule]
fn _vort(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(gl_weights, m)?)?;
    m.add_function(wrap_pyfunction!(soe, m)?)?;
    m.add_function(wrap_pyfunction!(shared_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(retention, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(_node_table, m)?)?;
    m.add_function(wrap_pyfunction!(_panic, m)?)?;
    m.add_function(wrap_pyfunction!(_fused_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(_init, m)?)?;
    m.add_function(wrap_pyfunction!(_save_export, m)?)?;
    m.add_function(wrap_pyfunction!(_task_batch, m)?)?;
    m.add_function(wrap_pyfunction!(_decayed_params, m)?)?;
    m.add_class::<PySoe>()?;
    m.add_class::<PyShared>()?;
    m.add_class::<PyModel>()?;
    m.add_class::<PyState>()?;
    Ok(())
}
