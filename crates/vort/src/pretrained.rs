//! A trained model from a `vort export` file with nothing but this crate and candle: the
//! [`Config`] from the file's metadata (key [`CONFIG_KEY`], JSON), the tensors through a
//! candle [`VarBuilder`] under [`TENSOR_PREFIX`], for [`crate::Model::new`].
//!
//! The file is the lab's checkpoint format (docs/checkpoint.md): its `config` metadata is the
//! whole run config (TOML, read by vort-lab), its checksum is checked by vort-lab's loader.
//! This reader checks what the layer needs: a regular safetensors file whose sizes match its
//! header ([`crate::st::read_checked`]), a config that validates, and, in `Model::new`, every
//! tensor's name and shape.

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;

use crate::model::{Config, ModelError};

/// The metadata key of an export that holds its [`Config`] as JSON.
pub const CONFIG_KEY: &str = "vort_config";

/// The prefix of an export's tensor names, before a slash (`param/blocks.0.mix.wq`, ...).
pub const TENSOR_PREFIX: &str = "param";

/// Reads a `vort export` file: its config and a [`VarBuilder`] over its tensors (in `dtype`,
/// on `dev`) that reads each name under [`TENSOR_PREFIX`], so `Model::new(&cfg, vb)` builds
/// the model.
///
/// # Errors
/// [`ModelError::Layer`] for an unreadable, short or malformed file; [`ModelError::Invalid`]
/// for a file without the config (a run's own `weights.safetensors` or checkpoint, or an
/// export written before exports carried it: `vort export` it again) or a config that does
/// not validate.
pub fn load(
    path: &Path,
    dtype: DType,
    dev: &Device,
) -> Result<(Config, VarBuilder<'static>), ModelError> {
    let bytes = crate::st::read_checked(path)?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| {
        crate::VortError::SafeTensors(format!("{}: {}", path.display(), crate::st::describe(&e)))
    })?;
    let text = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get(CONFIG_KEY))
        .ok_or_else(|| {
            ModelError::Invalid(format!(
                "{} has no `{CONFIG_KEY}` in its metadata: it is not a `vort export` file, or \
                 one written before exports carried it (export the run again with `vort export`)",
                path.display()
            ))
        })?;
    let cfg: Config = serde_json::from_str(text).map_err(|e| {
        ModelError::Invalid(format!(
            "{}: `{CONFIG_KEY}` is not a model config ({e})",
            path.display()
        ))
    })?;
    cfg.validate()?;
    let vb = VarBuilder::from_buffered_safetensors(bytes, dtype, dev)?;
    // `param/emb`: a slash, where VarBuilder::pp would join with a dot
    Ok((cfg, vb.rename_f(|name| format!("{TENSOR_PREFIX}/{name}"))))
}
