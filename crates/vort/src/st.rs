//! Small safetensors helpers (f32/f64 tensors as flat f64 buffers) with typed errors, and the
//! project's one safetensors serialiser ([`serialize`]): the header's metadata keys in sorted
//! order, so that one content is one byte string (`cmp` verifies a resume or a reproduction).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensorError, SafeTensors, TensorView};

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
    pub metadata: BTreeMap<String, String>,
}

impl File {
    /// Takes a tensor out, or [`VortError::MissingTensor`].
    pub fn take(&mut self, name: &str) -> Result<Flat> {
        self.tensors
            .remove(name)
            .ok_or_else(|| VortError::MissingTensor(name.into()))
    }
}

fn st_err(e: SafeTensorError) -> VortError {
    VortError::SafeTensors(describe(&e))
}

/// A safetensors parse error in words (the library's texts are its variant names, such as
/// `TensorInvalidInfo` or `InvalidOffset("inputs")`).
pub fn describe(e: &SafeTensorError) -> String {
    use SafeTensorError as E;
    match e {
        E::InvalidHeader => "its header is not UTF-8 text".into(),
        E::InvalidHeaderStart => "its header does not start with `{`".into(),
        E::InvalidHeaderDeserialization => "its header is not the JSON of a tensor list".into(),
        E::HeaderTooLarge => "its header is larger than 100 MB".into(),
        E::HeaderTooSmall => "it is too short to hold a safetensors header".into(),
        E::InvalidHeaderLength => "the header length it declares runs past its end".into(),
        E::TensorNotFound(n) => format!("it has no tensor `{n}`"),
        E::TensorInvalidInfo => "a tensor's byte range does not match its shape and dtype".into(),
        E::InvalidOffset(n) => {
            format!("tensor `{n}`'s byte range does not start where the previous tensor ends")
        }
        E::IoError(e) => format!("it cannot be read ({e})"),
        E::JsonError(e) => format!("its header is not valid JSON ({e})"),
        E::InvalidTensorView(dt, shape, n) => {
            format!("a {dt:?} tensor of shape {shape:?} cannot hold {n} bytes")
        }
        E::MetadataIncompleteBuffer => {
            "its tensors' byte ranges do not cover its data exactly".into()
        }
        E::ValidationOverflow => {
            "a tensor's shape is too large to be real (its size overflows)".into()
        }
    }
}

/// Any JSON value, refused when one of its objects repeats a key (serde_json keeps the last
/// one silently: a header with two `config` entries, or two entries for one tensor, would be
/// read as whichever came last).
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NoDuplicateKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
                Ok(NoDuplicateKeys)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                while a.next_element::<NoDuplicateKeys>()?.is_some() {}
                Ok(NoDuplicateKeys)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(k) = a.next_key::<String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "the key `{k}` appears twice"
                        )));
                    }
                    a.next_value::<NoDuplicateKeys>()?;
                }
                Ok(NoDuplicateKeys)
            }
        }
        d.deserialize_any(V)
    }
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
    // the kind first: opening a FIFO for reading blocks until a writer comes (forever)
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(bad("not a regular file".into()));
    }
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
    serde_json::from_slice::<NoDuplicateKeys>(&json)
        .map_err(|e| bad(format!("header is not valid JSON ({e})")))?;
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
    let metadata = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
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
    metadata: &BTreeMap<String, String>,
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
    let bytes = serialize(views, metadata)?;
    crate::fsio::write_atomic(path, &bytes).map_err(|e| VortError::Write {
        path: path.display().to_string(),
        source: e,
    })
}

/// The bytes of a safetensors file holding `tensors` and `metadata`, laid out as
/// `safetensors::serialize` lays them out (tensors by descending dtype alignment, then name;
/// the header padded with spaces to a multiple of 8), but with the metadata keys in sorted
/// order: the library takes a `HashMap`, whose order changes from run to run, so two writes of
/// one content differed at byte 27.
///
/// # Errors
/// [`VortError::SafeTensors`] for a view whose bytes do not match its shape (not expected).
pub fn serialize<'a>(
    tensors: impl IntoIterator<Item = (String, TensorView<'a>)>,
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut tensors: Vec<(String, TensorView<'a>)> = tensors.into_iter().collect();
    tensors.sort_by(|(ln, l), (rn, r)| r.dtype().cmp(&l.dtype()).then(ln.cmp(rn)));
    let mut header = String::from("{");
    let mut first = true;
    if !metadata.is_empty() {
        header += &format!("\"__metadata__\":{}", json(metadata));
        first = false;
    }
    let mut offset = 0usize;
    for (name, t) in &tensors {
        let n = t.data().len();
        let shape = t.shape().iter().map(usize::to_string).collect::<Vec<_>>();
        if !first {
            header.push(',');
        }
        first = false;
        header += &format!(
            "{}:{{\"dtype\":\"{:?}\",\"shape\":[{}],\"data_offsets\":[{offset},{}]}}",
            json(name),
            t.dtype(),
            shape.join(","),
            offset + n
        );
        offset += n;
    }
    header.push('}');
    let mut head = header.into_bytes();
    head.resize(head.len().div_ceil(8) * 8, b' ');
    let mut out = Vec::with_capacity(8 + head.len() + offset);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for (_, t) in &tensors {
        out.extend_from_slice(t.data());
    }
    Ok(out)
}

/// JSON text of a string or a string map (serde_json does not fail on these).
fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serialiser writes what the library writes (one metadata key: no order to differ)
    /// and is the same byte string whatever order the metadata was built in.
    #[test]
    fn serialize_matches_the_library_with_sorted_metadata() {
        let a: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b: Vec<u8> = [4.0f64].iter().flat_map(|x| x.to_le_bytes()).collect();
        let views = || {
            vec![
                (
                    "w/a".to_string(),
                    TensorView::new(Dtype::F32, vec![3], &a).unwrap(),
                ),
                (
                    "b".to_string(),
                    TensorView::new(Dtype::F64, vec![1, 1], &b).unwrap(),
                ),
            ]
        };
        let one: BTreeMap<String, String> = [("k".to_string(), "v\"q".to_string())].into();
        let lib = safetensors::tensor::serialize(
            views(),
            &Some(one.clone().into_iter().collect::<HashMap<_, _>>()),
        )
        .unwrap();
        assert_eq!(serialize(views(), &one).unwrap(), lib);
        assert_eq!(
            serialize(views(), &BTreeMap::new()).unwrap(),
            safetensors::tensor::serialize(views(), &None).unwrap()
        );
        let keys = ["format", "step", "config", "checksum", "adam_t"];
        let fwd: BTreeMap<String, String> =
            keys.iter().map(|k| (k.to_string(), k.repeat(2))).collect();
        let rev: BTreeMap<String, String> = keys
            .iter()
            .rev()
            .map(|k| (k.to_string(), k.repeat(2)))
            .collect();
        let bytes = serialize(views(), &fwd).unwrap();
        assert_eq!(bytes, serialize(views(), &rev).unwrap());
        let text = String::from_utf8_lossy(&bytes);
        let pos = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
        assert!(pos("adam_t") < pos("checksum") && pos("checksum") < pos("step"));
        // and it reads back
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("w/a").unwrap().data(), &a[..]);
    }

    /// A header that repeats a key is refused, naming the key.
    #[test]
    fn duplicate_header_keys_are_refused() {
        let d = std::env::temp_dir().join(format!("vort-st-dup-{}", std::process::id()));
        let header = br#"{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&1.0f32.to_le_bytes());
        std::fs::write(&d, &bytes).unwrap();
        let e = read_checked(&d).unwrap_err().to_string();
        assert!(e.contains("`x` appears twice"), "{e}");
        let _ = std::fs::remove_file(&d);
    }
}
