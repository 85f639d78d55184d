//! The streaming state of a [`Model`]: what B streams carry from one piece to the next, rows
//! that start anew while the others carry on (truncated backpropagation through documents of
//! different lengths), and the state as named tensors for a checkpoint.

use std::collections::BTreeMap;

use super::{LayerState, Model, ModelError};
use crate::block::BlockState;
use crate::retention::State;
use candle_core::{DType, Tensor};

/// Largest count a state tensor stores (f32 holds every whole number up to 2^24 exactly).
const EXACT_F32: u64 = 1 << 24;

/// Streaming state of a [`Model`]: each layer's state (its mixer's retention state or KV
/// cache, its convolution's window), the last token seen (for the one-token shift) and the
/// tokens each row has consumed since it started.
#[derive(Debug, Clone)]
pub struct ModelState {
    pub(super) layers: Vec<LayerState>,
    pub(super) last_token: Option<Tensor>,
    /// [B, 1, 1] f32: 0 on a row reset since its last token (its next token sees no previous
    /// one), 1 elsewhere; None when no row was reset.
    pub(super) shift_keep: Option<Tensor>,
    /// Tokens each row has consumed since it started or was reset (empty before any token).
    row_tokens: Vec<u64>,
}

impl ModelState {
    /// The empty state of a model of `layers` layers.
    pub(super) fn empty(layers: usize) -> ModelState {
        ModelState {
            layers: vec![LayerState::default(); layers],
            last_token: None,
            shift_keep: None,
            row_tokens: Vec::new(),
        }
    }

    /// Records a piece of `t` tokens over `b` rows whose last tokens are `last` [B].
    pub(super) fn consumed(&mut self, last: &Tensor, b: usize, t: usize) {
        self.last_token = Some(last.clone());
        self.shift_keep = None;
        if self.row_tokens.len() != b {
            self.row_tokens = vec![0; b];
        }
        for n in &mut self.row_tokens {
            *n += t as u64;
        }
    }

    /// Resident bytes of the block states (retention states or KV caches).
    pub fn bytes(&self) -> usize {
        let size = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        self.layers
            .iter()
            .filter_map(|l| l.mix.as_ref())
            .map(|s| match s {
                BlockState::Retention(s) => s.bytes(),
                BlockState::Kv { k, v } => size(k) + size(v),
            })
            .sum()
    }

    /// The position of the retention states (the longest context a row holds; None before
    /// the first piece or without a retention state).
    pub(super) fn position(&self) -> Option<u64> {
        self.layers
            .iter()
            .filter_map(|l| match &l.mix {
                Some(BlockState::Retention(s)) => Some(s.pos),
                _ => None,
            })
            .max()
    }

    /// Tokens each row has consumed since it started or was last reset (empty before the
    /// first piece).
    pub fn row_tokens(&self) -> &[u64] {
        &self.row_tokens
    }

    /// Starts the rows `r` with `reset[r]` anew (a new document in that row), as a fresh
    /// state would: their retention states and convolution windows become zeros and their
    /// next token sees no previous one; the other rows carry on. The position the forms check
    /// against the node tables' horizon becomes the longest context a row still holds. A state
    /// before its first piece has nothing to reset.
    ///
    /// # Errors
    /// `reset` of another length than the state's batch; a softmax KV cache (its rows share
    /// one length and cannot restart alone).
    pub fn reset_rows(&mut self, reset: &[bool]) -> Result<(), ModelError> {
        let b = self.row_tokens.len();
        if b > 0 && reset.len() != b {
            return Err(ModelError::Invalid(format!(
                "reset_rows: {} flags for a state of batch {b}",
                reset.len()
            )));
        }
        if b == 0 || !reset.iter().any(|&r| r) {
            return Ok(());
        }
        let dev = match &self.last_token {
            Some(t) => t.device().clone(),
            None => return Ok(()),
        };
        let keep: Vec<f32> = reset.iter().map(|&r| if r { 0.0 } else { 1.0 }).collect();
        let keep = Tensor::from_vec(keep, b, &dev)?;
        let row_keep = |rank: usize| -> Result<Tensor, ModelError> {
            let mut shape = vec![1usize; rank];
            shape[0] = b;
            Ok(keep.reshape(shape)?)
        };
        for (r, n) in reset.iter().zip(&mut self.row_tokens) {
            if *r {
                *n = 0;
            }
        }
        let pos = self.row_tokens.iter().copied().max().unwrap_or(0);
        for layer in &mut self.layers {
            match &mut layer.mix {
                Some(BlockState::Retention(s)) => {
                    let g = s.tensor().broadcast_mul(&row_keep(5)?)?;
                    *s = State::from_tensor(&g, pos)?;
                }
                Some(BlockState::Kv { .. }) => {
                    return Err(ModelError::Invalid(
                        "reset_rows: a softmax KV cache cannot restart single rows".into(),
                    ))
                }
                None => {}
            }
            if let Some(tail) = &layer.conv {
                layer.conv = Some(tail.broadcast_mul(&row_keep(3)?)?);
            }
        }
        let shift = row_keep(3)?;
        self.shift_keep = Some(match &self.shift_keep {
            Some(k) => (k * shift)?,
            None => shift,
        });
        Ok(())
    }

    /// The state as named f32 tensors (for a training checkpoint): `row_tokens` \[B\],
    /// `last_token` \[B\], `shift_keep` \[B, 1, 1\], and per layer l `layers.l.mix` (G
    /// \[B, H, N, F, D+1\]), `layers.l.mix_pos` \[1\] and `layers.l.conv`
    /// \[B, k-1, d_model\] where they exist. Counts and tokens are whole numbers below 2^24,
    /// exact in f32.
    ///
    /// # Errors
    /// A softmax KV cache (its length grows without bound: not a training state); a count
    /// of 2^24 or more.
    pub fn tensors(&self) -> Result<BTreeMap<String, Tensor>, ModelError> {
        let exact = |what: &str, n: u64| -> Result<f32, ModelError> {
            if n >= EXACT_F32 {
                return Err(ModelError::Invalid(format!(
                    "{what} = {n} is past 2^24, which a state tensor stores exactly"
                )));
            }
            Ok(n as f32)
        };
        let mut out = BTreeMap::new();
        let Some(last) = &self.last_token else {
            return Ok(out);
        };
        let dev = last.device();
        let rows = self
            .row_tokens
            .iter()
            .map(|&n| exact("a row's tokens", n))
            .collect::<Result<Vec<f32>, _>>()?;
        let b = rows.len();
        out.insert("row_tokens".into(), Tensor::from_vec(rows, b, dev)?);
        out.insert("last_token".into(), last.to_dtype(DType::F32)?);
        if let Some(k) = &self.shift_keep {
            out.insert("shift_keep".into(), k.clone());
        }
        for (l, layer) in self.layers.iter().enumerate() {
            match &layer.mix {
                Some(BlockState::Retention(s)) => {
                    out.insert(format!("layers.{l}.mix"), s.tensor().clone());
                    let pos = exact("a retention state's position", s.pos)?;
                    out.insert(
                        format!("layers.{l}.mix_pos"),
                        Tensor::from_vec(vec![pos], 1, dev)?,
                    );
                }
                Some(BlockState::Kv { .. }) => {
                    return Err(ModelError::Invalid(
                        "a softmax KV cache is not stored in a checkpoint".into(),
                    ))
                }
                None => {}
            }
            if let Some(tail) = &layer.conv {
                out.insert(format!("layers.{l}.conv"), tail.clone());
            }
        }
        Ok(out)
    }
}

impl Model {
    /// An empty streaming state for this model.
    pub fn new_state(&self) -> ModelState {
        ModelState::empty(self.layers.len())
    }

    /// The state [`ModelState::tensors`] wrote, checked against this model (every shape, the
    /// counts whole, the tokens inside the vocabulary, no tensor left over).
    ///
    /// # Errors
    /// A tensor missing, misshapen or unknown; a state of another model or batch.
    pub fn state_from_tensors(
        &self,
        named: &BTreeMap<String, Tensor>,
    ) -> Result<ModelState, ModelError> {
        let mut state = self.new_state();
        if named.is_empty() {
            return Ok(state);
        }
        let bad = |why: String| ModelError::Invalid(format!("stored stream state: {why}"));
        let get = |name: &str| {
            named
                .get(name)
                .ok_or_else(|| bad(format!("`{name}` is missing")))
        };
        let whole = |t: &Tensor, name: &str| -> Result<Vec<u64>, ModelError> {
            let v: Vec<f32> = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
            v.iter()
                .map(|&x| {
                    if x >= 0.0 && x.fract() == 0.0 && (x as u64) < EXACT_F32 {
                        Ok(x as u64)
                    } else {
                        Err(bad(format!("`{name}` holds {x}, not a whole count")))
                    }
                })
                .collect()
        };
        let rows = get("row_tokens")?;
        state.row_tokens = whole(rows, "row_tokens")?;
        let b = state.row_tokens.len();
        let last = get("last_token")?;
        if last.dims() != [b] {
            return Err(bad(format!(
                "`last_token` is {:?}, expected [{b}]",
                last.dims()
            )));
        }
        let ids: Vec<u32> = whole(last, "last_token")?
            .into_iter()
            .map(|x| x as u32)
            .collect();
        state.last_token = Some(Tensor::from_vec(ids, b, last.device())?);
        let mut used = 2;
        if let Some(k) = named.get("shift_keep") {
            if k.dims() != [b, 1, 1] || whole(k, "shift_keep")?.iter().any(|&x| x > 1) {
                return Err(bad("`shift_keep` must be [B, 1, 1] of 0 and 1".into()));
            }
            state.shift_keep = Some(k.to_dtype(DType::F32)?);
            used += 1;
        }
        for (l, layer) in state.layers.iter_mut().enumerate() {
            if let Some(g) = named.get(&format!("layers.{l}.mix")) {
                let pos = whole(get(&format!("layers.{l}.mix_pos"))?, "mix_pos")?;
                let pos = *pos
                    .first()
                    .ok_or_else(|| bad("an empty `mix_pos`".into()))?;
                layer.mix = Some(BlockState::Retention(State::from_tensor(g, pos)?));
                used += 2;
            }
            if let Some(c) = named.get(&format!("layers.{l}.conv")) {
                layer.conv = Some(c.to_dtype(DType::F32)?);
                used += 1;
            }
        }
        if used != named.len() {
            return Err(bad(format!(
                "{} tensors, of which {used} belong to a state of this model",
                named.len()
            )));
        }
        self.check_state(&state, b)?;
        Ok(state)
    }
}
