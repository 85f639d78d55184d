//! VORT's router (docs/DESIGN.md §2): α_i = δ + (1-δ) σ(a·e_i - b·H_i + g·h_i + c), per head,
//! with e_i = σ(p·h_i) the entity probe and H_i the bigram entropy (stop-gradient). The
//! ablation ladder's rungs (issue #39) drop parts of it: [`Routing::Learned`] keeps c alone
//! (one order per head); [`Routing::Fixed`] and [`Routing::Oracle`] have no router at all.

use candle_core::{DType, Tensor};

use crate::error::{Result, VortError};
use crate::mixer::Routing;

/// The learned router: α = δ + (1-δ) σ(z) with z = c (a learned order per head) plus, for the
/// per-token routings, the terms of [`TokenSignals`].
pub(super) struct Router {
    signals: Option<TokenSignals>, // None: Routing::Learned
    c: Tensor,                     // [H]
    delta: f64,
    routing: Routing,
}

/// The per-token terms of the router, a·e - b·H + g·h (docs/DESIGN.md §2).
struct TokenSignals {
    probe: Tensor, // [Dm, 1]
    g: Tensor,     // [Dm, H]
    a: Tensor,     // [H]
    b: Tensor,     // [H]
}

/// σ(x) with the gradient σ(1 − σ) taken from the output. Composed as 1 / (1 + e^(−x)),
/// autodiff multiplies −1/u² = 0 by e^(−x) = inf once x < −88 (f32): a NaN gradient from a
/// finite loss (the router's logits reach that at lr 3e-2, results/recall-medium/notes.md).
fn sigmoid(x: &Tensor) -> Result<Tensor> {
    Ok(candle_nn::ops::sigmoid(x)?)
}

impl Router {
    /// The router of `routing` (None for the rule-set orders, which are checked against
    /// [δ, 1] here), its parameters read by `get(shape, name)`.
    pub(super) fn new(
        routing: Routing,
        delta: f64,
        (dm, h): (usize, usize),
        get: &dyn Fn(&[usize], &str) -> Result<Tensor>,
    ) -> Result<Option<Router>> {
        for (name, alpha) in routing.rule_orders() {
            if !(delta..=1.0).contains(&alpha) {
                return Err(VortError::InvalidArgument(format!(
                    "{name} {alpha} is outside [δ = {delta}, 1]"
                )));
            }
        }
        if !routing.learned() {
            return Ok(None);
        }
        let signals = if routing == Routing::Learned {
            None
        } else {
            Some(TokenSignals {
                probe: get(&[dm, 1], "router.probe")?,
                g: get(&[dm, h], "router.g")?,
                a: get(&[h], "router.a")?,
                b: get(&[h], "router.b")?,
            })
        };
        Ok(Some(Router {
            signals,
            c: get(&[h], "router.c")?,
            delta,
            routing,
        }))
    }

    /// α [B, H, T] from z [B, T, H]: δ + (1-δ) σ(z), heads first.
    fn orders(&self, z: &Tensor) -> Result<Tensor> {
        Ok(((sigmoid(z)? * (1.0 - self.delta))? + self.delta)?
            .transpose(1, 2)?
            .contiguous()?)
    }

    /// Orders α [B, H, T] and entity logits [B, T] (None for the learned order per head) from
    /// x [B, T, Dm] and the entropy [B, T] (None = 0; detached).
    pub(super) fn route(
        &self,
        x: &Tensor,
        entropy: Option<&Tensor>,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (b, t, dm) = x.dims3()?;
        let h = self.c.dim(0)?;
        let Some(s) = &self.signals else {
            // a learned order per head, the same at every token
            let z = self.c.reshape((1, 1, h))?.broadcast_as((b, t, h))?;
            return Ok((Some(self.orders(&z)?), None));
        };
        let x2 = x.reshape((b * t, dm))?;
        let logit_e = x2.matmul(&s.probe)?.reshape((b, t, 1))?;
        let mut z = x2
            .matmul(&s.g)?
            .reshape((b, t, h))?
            .broadcast_add(&self.c.reshape((1, 1, h))?)?;
        if self.routing.uses_probe() {
            let e = sigmoid(&logit_e)?;
            z = (z + e.broadcast_mul(&s.a.reshape((1, 1, h))?)?)?;
        }
        if self.routing.uses_entropy() {
            if let Some(ent) = entropy {
                if ent.dims() != [b, t] {
                    return Err(VortError::Shape {
                        name: "entropy".into(),
                        got: ent.dims().to_vec(),
                        expected: format!("[{b}, {t}]"),
                    });
                }
                let ent = ent.detach().to_dtype(x.dtype())?.reshape((b, t, 1))?;
                z = (z - ent.broadcast_mul(&s.b.reshape((1, 1, h))?)?)?;
            }
        }
        Ok((Some(self.orders(&z)?), Some(logit_e.reshape((b, t))?)))
    }
}

/// The oracle's orders α [B, H, T]: `entity` where `marks` [B, T] is >= 0.5, `other`
/// elsewhere ([`Routing::Oracle`]).
pub(super) fn oracle_orders(
    marks: Option<&Tensor>,
    (b, h, t): (usize, usize, usize),
    entity: f64,
    other: f64,
) -> Result<Tensor> {
    let m = marks.ok_or_else(|| {
        VortError::InvalidArgument(
            "oracle routing needs the memorable marks [B, T] of every token \
             (Model::forward_marked); this call has none"
                .into(),
        )
    })?;
    if m.dims() != [b, t] {
        return Err(VortError::Shape {
            name: "marks".into(),
            got: m.dims().to_vec(),
            expected: format!("[{b}, {t}]"),
        });
    }
    let dev = m.device();
    let marked = m
        .to_dtype(DType::F32)?
        .ge(0.5)?
        .reshape((b, 1, t))?
        .broadcast_as((b, h, t))?;
    let full = |v: f64| Tensor::full(v as f32, (b, h, t), dev);
    Ok(marked.where_cond(&full(entity)?, &full(other)?)?)
}
