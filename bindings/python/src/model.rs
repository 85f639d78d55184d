//! Trained models (`vort eval`, `vort generate`): `vort.load`, `Model` and its `State`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Tensor};
use candle_nn::VarMap;
use numpy::ndarray::{Array1, Array2, ArrayD, IxDyn};
use numpy::{IntoPyArray as _, PyArray1, PyArray2, PyUntypedArrayMethods as _};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::{
    bytes_of, check_signals, count, fits, guarded, holding, input, rank, real_array, whole,
    whole_numbers, Failure, Res,
};
use crate::kernel::table_dict;
use crate::retention::{host_f64, to_numpy};
use vort::model::{Model as RustModel, ModelState};
use vort::retention::Rates;
use vort_lab::tasks::TaskKind;
use vort_lab::train::generate::{generate as lab_generate, GenerateOptions};
use vort_lab::train::{eval, trainable_vars, RunConfig, TrainError};

/// A trained model loaded by `vort.load`: a run directory or a `vort export` file.
#[pyclass(frozen, module = "vort", name = "Model")]
pub(crate) struct PyModel {
    pub(crate) model: Mutex<RustModel>,
    pub(crate) vm: VarMap,
    pub(crate) cfg: RunConfig,
    /// The training steps of the parameters (0 for a seeded model).
    pub(crate) steps: u64,
    /// Where it was loaded from (`<config>` for a seeded model).
    pub(crate) path: PathBuf,
}

/// A streaming state of a [`PyModel`] (flat in the stream length for the retention
/// memories): from `Model.state()`, advanced by `Model.step`.
#[pyclass(frozen, module = "vort", name = "State")]
pub(crate) struct PyState {
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

pub(crate) fn lock(m: &Mutex<RustModel>) -> std::sync::MutexGuard<'_, RustModel> {
    // a panic while the lock was held left the model as it was (every call builds new tensors)
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn check_tokens(tokens: &[i64], vocab: usize) -> Res<Vec<u32>> {
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
        self.cfg.model.mixer.kind().name()
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
        tokens: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let tokens = real_array(tokens, "tokens")?;
        rank(&tokens, "tokens", &["T"])?;
        let vocab = self.vocab();
        // the tokens, the logits (f32, and the numpy copy), then the model's activations at
        // this length (the CLI's inference estimate): refused before anything is allocated
        fits(
            "Model.logits",
            bytes_of(tokens.len(), 2 * 8) + bytes_of(tokens.len(), vocab * 2 * 4),
        )?;
        self.cfg
            .check_inference_memory(tokens.len() as u64, None)
            .map_err(Failure::from)?;
        let toks: Vec<i64> = whole_numbers(&tokens, "token")?;
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
        token: &Bound<'py, PyAny>,
        state: &PyState,
    ) -> PyResult<(Bound<'py, PyArray1<f32>>, PyState)> {
        let vocab = self.vocab();
        // out of i64 is outside every vocabulary too: check_tokens names it
        let token = whole(token, "token", i64::MIN.into(), i64::MAX.into())? as i64;
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

    /// generate(prompt, n, temperature=1.0, seed=None) -> bytes (seed None: 0, as the CLI's)
    ///
    /// Samples n bytes after `prompt` from a books model, as `vort generate` does (the same
    /// sampler and seed give the same bytes). The node tables are rebuilt for 2^20 lags for
    /// the stream and restored afterwards.
    #[pyo3(signature = (prompt, n, temperature = 1.0, seed = None))]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &[u8],
        n: &Bound<'py, PyAny>,
        temperature: f64,
        seed: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if whole(n, "n", i128::MIN, i128::MAX).is_ok_and(|n| n < 1) {
            return Err(input("--bytes must be >= 1").into());
        }
        let n = whole(n, "n", 1, i64::MAX.into())? as i64;
        // None: seed 0, as `vort generate`
        let seed = seed.map_or(Ok(0), |s| whole(s, "seed", 0, u64::MAX.into()))? as u64;
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(input(format!("--temperature {temperature:?} must be >= 0")).into());
        }
        if self.cfg.task.kind() != TaskKind::Books {
            return Err(input(format!(
                "{} is a {} run; generate needs a books model (`vort train --task books`)",
                self.path.display(),
                self.cfg.task.kind()
            ))
            .into());
        }
        // the output and its Python copy, one byte each per generated byte
        fits(
            "generate",
            bytes_of(usize::try_from(n).unwrap_or(usize::MAX), 2),
        )?;
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
            // Ctrl-C is looked at every 64 bytes (a decode step is ~ms, the check ~µs)
            let (mut emitted, mut stop) = (0u64, None);
            let r = lab_generate(&mut m, &prompt, &opts, |_| {
                emitted += 1;
                if emitted % 64 == 0 {
                    // the stop our SIGINT handler requests, or (off the main thread, where
                    // it is not installed) Python's own signal check
                    if vort::vort_math::interrupt::requested() {
                        return Err(TrainError::Flag("interrupted".into()));
                    }
                    if let Err(f) = check_signals() {
                        stop = Some(f);
                        return Err(TrainError::Flag("interrupted".into()));
                    }
                }
                Ok(())
            });
            if let Some(h) = restore {
                m.set_horizon(h)?;
            }
            if let Some(f) = stop {
                return Err(f);
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
        tokens: &Bound<'py, PyAny>,
        labels: &Bound<'py, PyAny>,
    ) -> PyResult<(f64, Bound<'py, PyDict>)> {
        let (tokens, labels) = (real_array(tokens, "tokens")?, real_array(labels, "labels")?);
        rank(&tokens, "tokens", &["B", "T"])?;
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
pub(crate) fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyModel> {
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

/// The CLI's check of a trained path (`vort eval --run`, `vort generate --run`), same words.
pub(crate) fn check_trained_path(path: &Path) -> Res<()> {
    Ok(vort_lab::train::RunDir::check_trained(
        path,
        "train one with `vort train`",
    )?)
}
