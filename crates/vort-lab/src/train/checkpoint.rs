//! Checkpoints: one safetensors file holding the parameters, the AdamW moments, the step and
//! the resolved run config, with an FNV-1a 64 checksum of every tensor in its metadata.
//! Written atomically (temp file, fsync, rename), so a killed run leaves either the previous
//! checkpoint or the new one, never a torn file; read back with every field checked, so a
//! corrupt or foreign checkpoint is an error before anything is touched.
//!
//! Tensors: `param/<name>`, `adam_m/<name>`, `adam_v/<name>` (f32, little-endian).
//! Metadata: `format` = [`FORMAT`], `step` (steps completed), `adam_t`, `config` (TOML of the
//! run config), `checksum`. The checksum covers the metadata too (format, step, adam_t,
//! config): an edited step or config is a corrupt checkpoint, not a silently wrong resume.
//! Files of the previous format ([`FORMAT_V1`], checksum over the tensors only) are still
//! read.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use super::TrainError;

/// Format tag in the metadata.
pub const FORMAT: &str = "vort-lab-checkpoint-v2";
/// The previous format: its checksum covers the tensors only.
pub const FORMAT_V1: &str = "vort-lab-checkpoint-v1";

/// A host tensor: shape and f32 data.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major data.
    pub data: Vec<f32>,
}

impl HostTensor {
    /// `t` on the host: its shape and its values as f32, row-major.
    ///
    /// # Errors
    /// candle errors.
    pub fn of(t: &candle_core::Tensor) -> Result<HostTensor, TrainError> {
        Ok(HostTensor {
            shape: t.dims().to_vec(),
            data: t
                .flatten_all()?
                .to_dtype(candle_core::DType::F32)?
                .to_vec1()?,
        })
    }
}

/// The content of a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Steps completed (the next step to run).
    pub step: u64,
    /// AdamW step counter.
    pub adam_t: u64,
    /// TOML of the resolved run config.
    pub config: String,
    /// Tensors by name (`param/…`, `adam_m/…`, `adam_v/…`).
    pub tensors: BTreeMap<String, HostTensor>,
}

/// FNV-1a 64 over (name, shape, data) of every tensor in name order ([`FORMAT_V1`]).
fn checksum(tensors: &BTreeMap<String, HostTensor>) -> u64 {
    fnv_tensors(0xcbf2_9ce4_8422_2325, tensors)
}

/// FNV-1a 64 over the format, step, adam_t and config (each length-prefixed), then every
/// tensor ([`FORMAT`]).
fn checksum_v2(
    step: u64,
    adam_t: u64,
    config: &str,
    tensors: &BTreeMap<String, HostTensor>,
) -> u64 {
    let mut h = fnv(0xcbf2_9ce4_8422_2325, FORMAT.as_bytes());
    for field in [
        &step.to_le_bytes()[..],
        &adam_t.to_le_bytes()[..],
        config.as_bytes(),
    ] {
        h = fnv(h, &(field.len() as u64).to_le_bytes());
        h = fnv(h, field);
    }
    fnv_tensors(h, tensors)
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn fnv_tensors(mut h: u64, tensors: &BTreeMap<String, HostTensor>) -> u64 {
    let mut eat = |bytes: &[u8]| h = fnv(h, bytes);
    for (name, t) in tensors {
        eat(name.as_bytes());
        for &d in &t.shape {
            eat(&(d as u64).to_le_bytes());
        }
        for &x in &t.data {
            eat(&x.to_le_bytes());
        }
    }
    h
}

impl Checkpoint {
    /// The same checkpoint without the optimizer moments: the trained weights to release
    /// (`weights.safetensors`, about a third of the size). Enough to evaluate or generate,
    /// not to resume.
    pub fn weights_only(&self) -> Checkpoint {
        Checkpoint {
            tensors: self
                .tensors
                .iter()
                .filter(|(k, _)| k.starts_with("param/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..self.clone()
        }
    }

    /// Refuses a checkpoint written with another config than `mine` (TOML), naming up to
    /// three differing lines.
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`].
    pub fn check_config(&self, mine: &str, path: &Path) -> Result<(), TrainError> {
        if self.config == mine {
            return Ok(());
        }
        // the same run when both parse to the same config: a checkpoint written before a
        // field existed holds that field's default, which is what it trained with
        let parse = |t: &str| super::RunConfig::from_toml(t, "<checkpoint>").ok();
        let (ours, theirs) = (parse(&self.config), parse(mine));
        if let (Some(a), Some(b)) = (&ours, &theirs) {
            if a == b {
                return Ok(());
            }
        }
        // compared key by key in one layout (both re-serialised where they parse): lines of
        // two layouts zipped named fields that did not change
        let layout = |c: &Option<super::RunConfig>, raw: &str| {
            keyed(
                &c.as_ref()
                    .and_then(|c| c.to_toml().ok())
                    .unwrap_or(raw.to_string()),
            )
        };
        let (a, b) = (layout(&ours, &self.config), layout(&theirs, mine));
        let diff: Vec<String> = a
            .keys()
            .chain(b.keys().filter(|k| !a.contains_key(*k)))
            .filter(|k| a.get(*k) != b.get(*k))
            .take(3)
            .map(|k| {
                let v = |m: &std::collections::BTreeMap<String, String>| {
                    m.get(k).map_or("absent".to_string(), |v| format!("`{v}`"))
                };
                format!("{k}: checkpoint {} vs config {}", v(&a), v(&b))
            })
            .collect();
        Err(mismatch(
            path,
            format!(
                "configs differ ({})",
                if diff.is_empty() {
                    "different number of lines".to_string()
                } else {
                    diff.join("; ")
                }
            ),
        ))
    }

    /// Refuses a step past the config's `steps`, or an AdamW counter past the step.
    fn check_counters(&self, steps: u64, path: &Path) -> Result<(), TrainError> {
        if self.step > steps {
            return Err(mismatch(
                path,
                format!(
                    "its step {} is past the {steps} steps its config trains for",
                    self.step
                ),
            ));
        }
        if self.adam_t > self.step {
            return Err(mismatch(
                path,
                format!(
                    "its optimizer counter adam_t = {} is past its step {}",
                    self.adam_t, self.step
                ),
            ));
        }
        Ok(())
    }

    /// Refuses contents that its config cannot have written: a step past the config's
    /// `train.steps` or an AdamW counter past the step, and any tensor set other than exactly
    /// the model's parameters (`param/<name>` for each of `params`), with or without both
    /// AdamW moments of each (`adam_m/`, `adam_v/`), and every one of its `buffers` (the
    /// FAVOR+ projections, `param/<name>` without moments) or none of them (files written
    /// before they were stored). An extra tensor (`param/zzz`, a lone `adam_m/emb`) or the
    /// router tensors of a VORT model under a softmax config would otherwise be ignored
    /// silently. Returns whether the buffers are stored.
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`] naming the first unexpected or missing tensor.
    pub fn check_contents(
        &self,
        steps: u64,
        (params, buffers): (&[String], &[String]),
        path: &Path,
    ) -> Result<bool, TrainError> {
        self.check_counters(steps, path)?;
        // a carried stream state (`stream/`, Trainer::restore reads it) is not a parameter
        let stream = super::STREAM_PREFIX;
        let has_moments = self
            .tensors
            .keys()
            .any(|k| !k.starts_with("param/") && !k.starts_with(stream));
        let kinds: &[&str] = if has_moments {
            &["param", "adam_m", "adam_v"]
        } else {
            &["param"]
        };
        // the buffers (no moments): every one or none (a file written before they were stored)
        let stored: Vec<&String> = buffers
            .iter()
            .filter(|n| self.tensors.contains_key(&format!("param/{n}")))
            .collect();
        if !stored.is_empty() && stored.len() < buffers.len() {
            let missing = buffers.iter().find(|n| !stored.contains(n));
            return Err(mismatch(
                path,
                format!(
                    "it holds some of the model's buffers but not `param/{}` (a file holds \
                     every FAVOR+ projection or, written before they were stored, none)",
                    missing.map_or("?", |s| s.as_str())
                ),
            ));
        }
        let want: std::collections::BTreeSet<String> = params
            .iter()
            .flat_map(|n| kinds.iter().map(move |k| format!("{k}/{n}")))
            .chain(stored.iter().map(|n| format!("param/{n}")))
            .collect();
        if let Some(extra) = self
            .tensors
            .keys()
            .find(|k| !want.contains(*k) && !k.starts_with(stream))
        {
            return Err(mismatch(
                path,
                format!(
                    "it holds a tensor `{extra}` that the model of its config does not have \
                     (a file of another model or mixer?)"
                ),
            ));
        }
        if let Some(missing) = want.iter().find(|k| !self.tensors.contains_key(*k)) {
            if has_moments && !missing.starts_with("param/") {
                return Err(mismatch(
                    path,
                    format!(
                        "it holds optimizer moments for some parameters but not `{missing}` (an \
                         export holds the parameters only, a checkpoint the parameters and both \
                         moments of each)"
                    ),
                ));
            }
            return Err(mismatch(path, format!("tensor {missing} missing")));
        }
        Ok(!stored.is_empty())
    }

    /// The tensor `name` as a candle tensor on `device`, checked against the shape `dims` the
    /// model expects.
    ///
    /// # Errors
    /// [`TrainError::CheckpointMismatch`] for a missing tensor or another shape.
    pub fn tensor(
        &self,
        name: &str,
        dims: &[usize],
        device: &candle_core::Device,
        path: &Path,
    ) -> Result<candle_core::Tensor, TrainError> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| mismatch(path, format!("tensor {name} missing")))?;
        if t.shape != dims {
            return Err(mismatch(
                path,
                format!("tensor {name} has shape {:?}, the model {dims:?}", t.shape),
            ));
        }
        Ok(candle_core::Tensor::from_vec(
            t.data.clone(),
            t.shape.clone(),
            device,
        )?)
    }

    /// Writes the checkpoint to `path` atomically (temp file in the same directory, fsync,
    /// rename).
    ///
    /// # Errors
    /// I/O or serialisation errors (the previous file, if any, is left intact).
    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        self.save_with(path, None)
    }

    /// [`Checkpoint::save`] for a `vort export` file: the metadata also carries the model's
    /// [`vort::Config`] as JSON ([`vort::pretrained::CONFIG_KEY`]), which
    /// [`vort::pretrained::load`] reads without this crate. The checksum is unchanged (the key
    /// is derived from `config`, which it covers).
    ///
    /// # Errors
    /// As [`Checkpoint::save`].
    pub fn save_export(&self, path: &Path, model: &vort::Config) -> Result<(), TrainError> {
        let json =
            serde_json::to_string(model).map_err(|e| TrainError::Serialise(e.to_string()))?;
        self.save_with(path, Some((vort::pretrained::CONFIG_KEY, json)))
    }

    fn save_with(&self, path: &Path, extra: Option<(&str, String)>) -> Result<(), TrainError> {
        let bytes: BTreeMap<&String, Vec<u8>> = self
            .tensors
            .iter()
            .map(|(n, t)| (n, t.data.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views = self
            .tensors
            .iter()
            .map(|(n, t)| {
                TensorView::new(Dtype::F32, t.shape.clone(), &bytes[n])
                    .map(|v| (n.clone(), v))
                    .map_err(|e| corrupt(path, format!("tensor {n}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // sorted keys (a BTreeMap): one checkpoint is one byte string
        let meta: BTreeMap<String, String> = [
            ("format".to_string(), FORMAT.to_string()),
            ("step".to_string(), self.step.to_string()),
            ("adam_t".to_string(), self.adam_t.to_string()),
            ("config".to_string(), self.config.clone()),
            (
                "checksum".to_string(),
                format!(
                    "{:016x}",
                    checksum_v2(self.step, self.adam_t, &self.config, &self.tensors)
                ),
            ),
        ]
        .into_iter()
        .chain(extra.map(|(k, v)| (k.to_string(), v)))
        .collect();
        let buf = vort::st::serialize(views, &meta)
            .map_err(|e| corrupt(path, format!("serialise: {e}")))?;
        write_atomic(path, &buf)
    }

    /// Reads and verifies a checkpoint (format, metadata, checksum).
    ///
    /// # Errors
    /// [`TrainError::NoCheckpoint`] when absent, [`TrainError::CheckpointCorrupt`] when it
    /// cannot be parsed or its checksum does not match.
    pub fn load(path: &Path) -> Result<Checkpoint, TrainError> {
        // sizes checked against the header before the data is read
        let buf = match vort::st::read_checked(path) {
            Ok(b) => b,
            Err(vort::VortError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(TrainError::NoCheckpoint(path.display().to_string()))
            }
            Err(vort::VortError::Io { source, .. }) => return Err(io(path, source)),
            Err(e) => return Err(corrupt(path, e.to_string())),
        };
        let (_, header) =
            SafeTensors::read_metadata(&buf).map_err(|e| corrupt(path, vort::st::describe(&e)))?;
        let meta = header
            .metadata()
            .clone()
            .ok_or_else(|| corrupt(path, "no metadata".into()))?;
        let get = |k: &str| {
            meta.get(k)
                .cloned()
                .ok_or_else(|| corrupt(path, format!("metadata `{k}` missing")))
        };
        let format = get("format")?;
        if format != FORMAT && format != FORMAT_V1 {
            return Err(corrupt(path, format!("format `{format}` is not {FORMAT}")));
        }
        let num = |k: &str| -> Result<u64, TrainError> {
            get(k)?
                .parse()
                .map_err(|_| corrupt(path, format!("metadata `{k}` is not a number")))
        };
        let (step, adam_t) = (num("step")?, num("adam_t")?);
        let config = get("config")?;
        let want = get("checksum")?;
        let st =
            SafeTensors::deserialize(&buf).map_err(|e| corrupt(path, vort::st::describe(&e)))?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != Dtype::F32 {
                return Err(corrupt(path, format!("tensor {name} is not f32")));
            }
            let data = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            tensors.insert(
                name,
                HostTensor {
                    shape: view.shape().to_vec(),
                    data,
                },
            );
        }
        let got = if format == FORMAT {
            checksum_v2(step, adam_t, &config, &tensors)
        } else {
            checksum(&tensors)
        };
        let got = format!("{got:016x}");
        if got != want {
            return Err(corrupt(
                path,
                format!("checksum {got} does not match the recorded {want}"),
            ));
        }
        Ok(Checkpoint {
            step,
            adam_t,
            config,
            tensors,
        })
    }
}

fn corrupt(path: &Path, reason: String) -> TrainError {
    TrainError::CheckpointCorrupt {
        path: path.display().to_string(),
        reason,
    }
}

pub(crate) fn io(path: &Path, source: std::io::Error) -> TrainError {
    TrainError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Writes `bytes` to `path` through the project's one atomic writer ([`vort::fsio`]).
///
/// # Errors
/// I/O errors (the old `path`, if any, is untouched).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    vort::fsio::write_atomic(path, bytes).map_err(|e| io(path, e))
}

/// `value` as pretty JSON through [`write_atomic`] (every cache and result file of the lab).
///
/// # Errors
/// Serialisation and I/O errors.
pub fn write_json<T: serde::Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), TrainError> {
    let json =
        serde_json::to_string_pretty(value).map_err(|e| TrainError::Serialise(e.to_string()))?;
    write_atomic(path, json.as_bytes())
}

/// `section.key` -> value of every assignment of a TOML text (line by line: the layout the
/// configs are written in, one key per line, tables as `[section]` headers).
fn keyed(toml: &str) -> std::collections::BTreeMap<String, String> {
    let mut section = String::new();
    let mut out = std::collections::BTreeMap::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') && line.ends_with(']') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            let key = if section.is_empty() {
                k.trim().to_string()
            } else {
                format!("{section}.{}", k.trim())
            };
            out.insert(key, v.trim().to_string());
        }
    }
    out
}

/// A checkpoint that does not belong to the run.
fn mismatch(path: &Path, reason: String) -> TrainError {
    TrainError::CheckpointMismatch {
        path: path.display().to_string(),
        reason,
    }
}
