//! The hooks of vort.torch and its trainer: a seeded model of a run config, the export
//! writer, the task's batches and the decayed parameter names.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_nn::VarMap;
use numpy::ndarray::Array2;
use numpy::{
    AllowTypeChange, IntoPyArray as _, PyArray2, PyArrayLikeDyn, PyUntypedArrayMethods as _,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::{bytes_of, fits, guarded, input, Failure};
use crate::model::PyModel;
use vort_lab::train::{buffer_vars, trainable_vars, RunConfig, TrainError};

/// _init(config_toml) -> Model: a freshly seeded model of a run config (the parameters a
/// `vort train` run starts from, step 0), for `vort.torch.VortLM.from_config`.
#[pyfunction]
pub(crate) fn _init(py: Python<'_>, config_toml: String) -> PyResult<PyModel> {
    let (cfg, model, vm) = guarded(py, move || {
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        // the parameters and one token's activations must fit before they are allocated (a
        // d_model of 10^8 aborted the interpreter); not the training length: VortAttention
        // builds its block from a config whose seq_len is only the node tables' horizon
        cfg.check_inference_memory(1, None)?;
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
pub(crate) fn _save_export(
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
        ck.save_export(&path, &cfg.model_config())?;
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
pub(crate) fn _task_batch<'py>(
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
        // tokens and targets (u32), the mask, and their numpy copies
        fits("a task batch", bytes_of(b, cfg.task.seq_len) * 2.0 * 9.0)?;
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
pub(crate) fn _decayed_params(py: Python<'_>, config_toml: String) -> PyResult<Vec<String>> {
    guarded(py, move || {
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        Ok(cfg.model.decayed_params())
    })
}

/// _check_memory(config_toml): `vort train`'s check of a run config's memory estimate
/// (parameters, AdamW state and the activations of one batch) against what this process may
/// allocate; the torch trainer calls it before it writes anything. ValueError with the sizes
/// that drive it (the CLI's words) when it does not fit.
#[pyfunction]
pub(crate) fn _check_memory(py: Python<'_>, config_toml: String) -> PyResult<()> {
    guarded(py, move || {
        let cfg = RunConfig::from_toml(&config_toml, "<config>")?;
        Ok(cfg.check_memory(None)?)
    })
}

/// An error of the output rule: a refusal (not a regular file: a FIFO, /dev/null, a
/// directory) is the user's, a ValueError; any other I/O failure is the environment's.
fn output_error(path: &Path, e: std::io::Error) -> Failure {
    if vort::fsio::is_refused(&e) {
        // the refusal names the path itself
        input(e.to_string())
    } else {
        Failure::Run(format!("{}: {e}", path.display()))
    }
}

/// _check_output(path): the CLI's output rule for a file about to be written
/// (`vort::fsio::target`): a FIFO, a device, a directory or a symlink chain ending in
/// one is refused (ValueError) before anything is written.
#[pyfunction]
pub(crate) fn _check_output(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    guarded(py, move || {
        vort::fsio::target(&path)
            .map(|_| ())
            .map_err(|e| output_error(&path, e))
    })
}

/// _write_atomic(path, data): the CLI's one atomic writer (`vort::fsio::write_atomic`: a
/// temporary file, fsync, rename over the target, fsync of the directory; a symlink is
/// followed and kept; a non-regular target is refused, ValueError), for the torch trainer's
/// files.
#[pyfunction]
pub(crate) fn _write_atomic(py: Python<'_>, path: PathBuf, data: Vec<u8>) -> PyResult<()> {
    guarded(py, move || {
        vort::fsio::write_atomic(&path, &data).map_err(|e| output_error(&path, e))
    })
}
