//! Labelled sequences from a file in Zoology's format: a safetensors file with `inputs` [N, L]
//! and `labels` [N, L], both integer tensors (I64 or I32), where a label of −100 means "not
//! scored" and any other label is the token expected at that position. This is what
//! `zoology/data/multiquery_ar.py` returns (`DataSegment.inputs`, `.labels`), so models can be
//! trained and scored on data made by Zoology's own code (`vort train --train-data`,
//! `vort eval --data`).

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use super::mqar::IGNORE;
use super::{Sample, TaskError};

/// N sequences of length L with their labels.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledSet {
    /// Where it was read from (for messages).
    pub origin: String,
    /// Sequences N.
    pub n: usize,
    /// Length L.
    pub l: usize,
    /// [N, L] tokens.
    pub inputs: Vec<u32>,
    /// [N, L] labels (−100: not scored).
    pub labels: Vec<i64>,
}

fn bad(origin: &str, what: impl std::fmt::Display) -> TaskError {
    TaskError::BadFile(format!("{origin}: {what}"))
}

/// Reads a 2-D integer tensor (I64 or I32) as i64 values and its shape.
fn int_matrix(
    st: &SafeTensors,
    name: &str,
    origin: &str,
) -> Result<(Vec<i64>, usize, usize), TaskError> {
    let t = st.tensor(name).map_err(|_| {
        bad(
            origin,
            format!("no tensor `{name}` (expected `inputs` and `labels`)"),
        )
    })?;
    let shape = t.shape();
    if shape.len() != 2 {
        return Err(bad(
            origin,
            format!("`{name}` has shape {shape:?}, expected [N, L]"),
        ));
    }
    let (n, l) = (shape[0], shape[1]);
    if n == 0 || l == 0 {
        return Err(bad(origin, format!("`{name}` is empty ({n} × {l})")));
    }
    let bytes = t.data();
    let values: Vec<i64> = match t.dtype() {
        Dtype::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
        Dtype::I32 => bytes
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect(),
        other => {
            return Err(bad(
                origin,
                format!("`{name}` has dtype {other:?}; expected an integer tensor (I64 or I32)"),
            ))
        }
    };
    if values.len() != n * l {
        return Err(bad(
            origin,
            format!("`{name}` holds {} values for {n} × {l}", values.len()),
        ));
    }
    Ok((values, n, l))
}

impl LabelledSet {
    /// Reads and checks `path` against a model vocabulary of `vocab` tokens: both tensors
    /// present, integer, of one shape [N, L] with N, L >= 1; every token in [0, vocab); every
    /// label −100 or in [0, vocab).
    ///
    /// # Errors
    /// [`TaskError::BadFile`] with one line naming the file and what is wrong (the CLI's exit
    /// status 2), an unreadable file included.
    pub fn load(path: &Path, vocab: usize) -> Result<LabelledSet, TaskError> {
        let origin = path.display().to_string();
        // sizes checked against the header before the data is read (`/dev/zero` is refused)
        let bytes = vort::st::read_checked(path).map_err(|e| match e {
            vort::VortError::Io { source, .. } => TaskError::BadFile(format!("{origin}: {source}")),
            other => TaskError::BadFile(other.to_string()),
        })?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| {
            bad(
                &origin,
                format!("not a safetensors file ({})", vort::st::describe(&e)),
            )
        })?;
        let (inputs, n, l) = int_matrix(&st, "inputs", &origin)?;
        let (labels, nl, ll) = int_matrix(&st, "labels", &origin)?;
        if (n, l) != (nl, ll) {
            return Err(bad(
                &origin,
                format!("`inputs` is [{n}, {l}] but `labels` is [{nl}, {ll}]"),
            ));
        }
        if let Some((i, &x)) = inputs
            .iter()
            .enumerate()
            .find(|(_, &x)| x < 0 || x >= vocab as i64)
        {
            return Err(bad(
                &origin,
                format!(
                    "token {x} at sequence {}, position {} is outside the model's vocabulary [0, {vocab})",
                    i / l,
                    i % l
                ),
            ));
        }
        if let Some((i, &y)) = labels
            .iter()
            .enumerate()
            .find(|(_, &y)| y != IGNORE && (y < 0 || y >= vocab as i64))
        {
            return Err(bad(
                &origin,
                format!(
                    "label {y} at sequence {}, position {} is neither -100 nor in [0, {vocab})",
                    i / l,
                    i % l
                ),
            ));
        }
        if labels.iter().all(|&y| y == IGNORE) {
            return Err(bad(&origin, "every label is -100: nothing to score"));
        }
        Ok(LabelledSet {
            origin,
            n,
            l,
            inputs: inputs.into_iter().map(|x| x as u32).collect(),
            labels,
        })
    }

    /// Sequence `index` (modulo N). The lag of a scored position p is p minus the position
    /// of the value token of its pair: the last earlier position q + 1 with `inputs[q]` equal to
    /// the query token and inputs[q + 1] equal to the label (MQAR's `k v`); 0 when there is no
    /// such pair (the lag is then unknown and the position enters no lag bucket).
    pub fn sample(&self, index: u64) -> Sample {
        let i = (index % self.n as u64) as usize;
        let l = self.l;
        let tokens = self.inputs[i * l..(i + 1) * l].to_vec();
        let labels = &self.labels[i * l..(i + 1) * l];
        let mut targets = vec![0u32; l];
        let mut mask = vec![false; l];
        let mut lags = vec![0u32; l];
        for p in 0..l {
            if labels[p] == IGNORE {
                continue;
            }
            targets[p] = labels[p] as u32;
            mask[p] = true;
            lags[p] = (0..p.saturating_sub(1))
                .rev()
                .find(|&q| tokens[q] == tokens[p] && tokens[q + 1] == targets[p])
                .map_or(0, |q| (p - (q + 1)) as u32);
        }
        Sample {
            tokens,
            targets,
            mask,
            lags,
            entity: vec![false; l],
            memorable: vec![false; l],
            function: vec![false; l],
        }
    }
}
