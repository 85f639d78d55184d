//! The kernel: the GL weights and certified SOEs of `vort-math`, and the node tables as the
//! layer uses them (for vort.torch).

use numpy::ndarray::{Array2, ArrayD, IxDyn};
use numpy::{IntoPyArray as _, PyArray1, PyArrayDyn, PyUntypedArrayMethods as _};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{
    bytes_of, count, fits, guarded, holding, input, real_array, whole_numbers, Failure, Res,
};
use vort::error::VortError;
use vort::nodes::{NodeMode, NodeSpec, NodeTable, TableKind};
use vort_math::shared::SharedSoe;
use vort_math::{gl, Soe as RustSoe};

/// gl_weights(alpha, lags) -> numpy.ndarray
///
/// The Grünwald–Letnikov weights w_j(alpha) = Γ(j + alpha) / (Γ(alpha) Γ(j + 1)) at every
/// lag j of `lags` (an int or an array of ints >= 0), as float64 of the same shape
/// (`vort kernel weights --alpha A --lags J,J,...`).
///
/// Raises ValueError for an order outside the kernel's domain or a negative lag.
#[pyfunction]
pub(crate) fn gl_weights<'py>(
    py: Python<'py>,
    alpha: f64,
    lags: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    at_lags(py, lags, "gl_weights", |j| Ok(gl::weight(alpha, j)?))
}

/// `f` at every lag of `lags` (whole numbers >= 0, any shape) as float64 of that shape, with
/// the GIL released while `f` runs; `what` names the call in the size check (the lags, the
/// values and the numpy array: 3 x 8 bytes a lag, checked before anything is copied).
fn at_lags<'py>(
    py: Python<'py>,
    lags: &Bound<'py, PyAny>,
    what: &str,
    f: impl Fn(u64) -> Res<f64> + Send,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let lags = real_array(lags, "lags")?;
    let shape = lags.shape().to_vec();
    fits(what, bytes_of(lags.len(), 3 * 8))?;
    let lags: Vec<i64> = whole_numbers(&lags, "lag")?;
    let w = guarded(py, move || {
        lags.iter()
            .map(|&j| {
                let j = u64::try_from(j).map_err(|_| input(format!("lag {j} must be >= 0")))?;
                f(j)
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
pub(crate) struct PySoe {
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
        lags: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let inner = &self.inner;
        at_lags(py, lags, "Soe.kernel", |j| Ok(inner.kernel(j)))
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
pub(crate) fn soe(
    py: Python<'_>,
    alpha: f64,
    horizon: &Bound<'_, PyAny>,
    eps: f64,
) -> PyResult<PySoe> {
    let horizon = count(horizon, "horizon")?;
    let inner = guarded(py, move || Ok(RustSoe::build(alpha, horizon, eps)?))?;
    Ok(PySoe { inner })
}

/// One node set {u_s} for every order in [delta, 1], with weights c_s(alpha): the shared
/// memory of VORT (`vort kernel shared`).
#[pyclass(frozen, module = "vort", name = "SharedNodes")]
pub(crate) struct PyShared {
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
        alpha: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let alpha = real_array(alpha, "alpha")?;
        let mut shape = alpha.shape().to_vec();
        // the orders, then S weights each, as a Vec and as the numpy array
        let per = 8 * (1 + 2 * self.inner.len());
        fits("SharedNodes.weights", bytes_of(alpha.len(), per))?;
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
pub(crate) fn shared_nodes(
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
pub(crate) fn table_dict<'py>(py: Python<'py>, t: &NodeTable) -> PyResult<Bound<'py, PyDict>> {
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

/// _node_table(mode, delta, horizon, eps, banks) -> dict: the node table `vort retention`
/// and the layer build for these settings (`NodeSpec::build`).
#[pyfunction]
#[pyo3(signature = (mode, delta, horizon, eps, banks = 4))]
pub(crate) fn _node_table<'py>(
    py: Python<'py>,
    mode: &str,
    delta: f64,
    horizon: &Bound<'py, PyAny>,
    eps: f64,
    banks: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let horizon = count(horizon, "horizon")?;
    let mode: NodeMode = mode.parse().map_err(|e: VortError| Failure::from(e))?;
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
