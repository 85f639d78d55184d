//! Small safetensors helpers (f32/f64 tensors as flat f64 buffers) with typed errors.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::error::{Result, VortError};

/// A tensor read from a file: flat values (as f64), its shape and its stored dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct Flat {
    /// Row-major values.
    pub data: Vec<f64>,
    /// Shape.
    pub shape: Vec<usize>,
    /// Stored dtype ("F32" or "F64").
    pub dtype: String,
}

/// A parsed file: tensors by name and the header metadata.
#[derive(Debug, Clone, Default)]
pub struct File {
    /// Tensors by name.
    pub tensors: HashMap<String, Flat>,
    /// `__metadata__` of the header.
    pub metadata: HashMap<String, String>,
}

impl File {
    /// Takes a tensor out, or [`VortError::MissingTensor`].
    pub fn take(&mut self, name: &str) -> Result<Flat> {
        self.tensors
            .remove(name)
            .ok_or_else(|| VortError::MissingTensor(name.into()))
    }
}

fn st_err(e: impl std::fmt::Display) -> VortError {
    VortError::SafeTensors(e.to_string())
}

/// Largest safetensors header read (the JSON that lists the tensors).
const MAX_HEADER: u64 = 100 << 20;

/// The bytes of a safetensors file, read only after its size is checked against what its
/// header declares: a regular file, a header of at most 100 MB, and exactly 8 + header +
/// the data its tensors' offsets cover. `/dev/zero`, a FIFO or a file whose header promises
/// terabytes is refused before anything large is read.
///
/// # Errors
/// [`VortError::Io`] for an unreadable path, [`VortError::SafeTensors`] naming the
/// mismatch.
pub fn read_checked(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |source| VortError::Io {
        path: path.display().to_string(),
        source,
    };
    let bad = |m: String| VortError::SafeTensors(format!("{}: {m}", path.display()));
    let mut f = std::fs::File::open(path).map_err(io)?;
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()));
    }
    let len = meta.len();
    let mut head = [0u8; 8];
    f.read_exact(&mut head)
        .map_err(|_| bad(format!("{len} bytes: too short for a safetensors header")))?;
    let n = u64::from_le_bytes(head);
    if n > MAX_HEADER || 8 + n > len {
        return Err(bad(format!(
            "header of {n} bytes declared in a file of {len} bytes (at most {MAX_HEADER})"
        )));
    }
    let mut json = vec![0u8; n as usize];
    f.read_exact(&mut json).map_err(io)?;
    let header: serde_json::Value =
        serde_json::from_slice(&json).map_err(|e| bad(format!("header is not JSON ({e})")))?;
    let end = header
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| k.as_str() != "__metadata__")
                .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    if 8 + n + end != len {
        return Err(bad(format!(
            "{len} bytes, but its header declares {} (8 + {n} of header + {end} of data)",
            8 + n + end
        )));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    bytes.extend_from_slice(&head);
    bytes.extend_from_slice(&json);
    f.read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// Reads every F32/F64 tensor of a safetensors file (other dtypes are a typed error).
///
/// # Errors
/// I/O, parse errors, unsupported dtypes.
pub fn read(path: &Path) -> Result<File> {
    let bytes = read_checked(path)?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(st_err)?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).map_err(st_err)?;
    let mut tensors = HashMap::new();
    for (name, view) in st.tensors() {
        let data: Vec<f64> = match view.dtype() {
            Dtype::F32 => view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
                .collect(),
            Dtype::F64 => view
                .data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
            other => {
                return Err(VortError::DType {
                    name,
                    got: format!("{other:?}"),
                    expected: "F32 or F64".into(),
                })
            }
        };
        tensors.insert(
            name,
            Flat {
                data,
                shape: view.shape().to_vec(),
                dtype: format!("{:?}", view.dtype()),
            },
        );
    }
    Ok(File { tensors, metadata })
}

/// Element type of a tensor to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// 32-bit floats.
    F32,
    /// 64-bit floats.
    F64,
}

/// Writes tensors (name, values, shape, precision) and header metadata to a file.
///
/// # Errors
/// Shape/length mismatch, I/O.
pub fn write(
    path: &Path,
    tensors: &[(&str, &[f64], Vec<usize>, Precision)],
    metadata: HashMap<String, String>,
) -> Result<()> {
    let mut bufs: Vec<(String, Vec<u8>, Vec<usize>, Dtype)> = Vec::new();
    for (name, data, shape, prec) in tensors {
        if shape.iter().product::<usize>() != data.len() {
            return Err(VortError::Shape {
                name: (*name).into(),
                got: vec![data.len()],
                expected: format!("{shape:?}"),
            });
        }
        let (bytes, dt) = match prec {
            Precision::F32 => (
                data.iter()
                    .flat_map(|&x| (x as f32).to_le_bytes())
                    .collect::<Vec<u8>>(),
                Dtype::F32,
            ),
            Precision::F64 => (
                data.iter().flat_map(|&x| x.to_le_bytes()).collect(),
                Dtype::F64,
            ),
        };
        bufs.push(((*name).into(), bytes, shape.clone(), dt));
    }
    let views: Vec<(String, TensorView<'_>)> = bufs
        .iter()
        .map(|(n, b, s, dt)| {
            Ok((
                n.clone(),
                TensorView::new(*dt, s.clone(), b).map_err(st_err)?,
            ))
        })
        .collect::<Result<_>>()?;
    let meta = if metadata.is_empty() {
        None
    } else {
        Some(metadata)
    };
    let bytes = safetensors::tensor::serialize(views, &meta).map_err(st_err)?;
    crate::fsio::write_atomic(path, &bytes).map_err(|e| VortError::Write {
        path: path.display().to_string(),
        source: e,
    })
}
