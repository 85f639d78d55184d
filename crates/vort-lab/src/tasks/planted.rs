//! The planted-pair tasks (docs/DESIGN.md §3): Zipf-lag retrieval and entity label copy, on
//! the vocabulary `n_filler` filler tokens, then `n_keys` key / entity tokens, then `n_values`
//! value / label tokens, then one query marker `QRY`.
//!
//! - **Zipf-lag key–value retrieval** ([`ZipfTask`]): filler with planted pairs
//!   `[key][value]`; later a query `[QRY][key]` at which the model must emit the value (it
//!   also follows in the sequence). The lag ℓ = position(QRY) - position(value) follows the
//!   truncated Zipf law P(ℓ) ∝ ℓ^(-s) on [1, L_max]. Keys are distinct within a sequence.
//! - **Entity label copy with uniform lags** ([`PlantedPairs`]): an entity appears with its
//!   label `[entity][label]`; later the entity reappears and the model must emit its label.
//!   The lag ℓ = position(reappearance) - position(label) is uniform on [1, L_max], so the lag
//!   prior favours no kernel. Entities are distinct within a sequence; entity positions are
//!   flagged (labels for the router's entity probe).
//!
//! A query whose lag cannot be placed (every admissible position taken, only possible for lags
//! within a few tokens of `seq_len`) is dropped rather than re-drawn, so the placed lags keep
//! their law.

use vort::vort_math::rng::SplitMix64;

use super::config::{PlantedPairs, ZipfTask};
use super::Sample;

impl PlantedPairs {
    /// First key / entity token.
    pub fn key0(&self) -> u32 {
        self.n_filler as u32
    }
    /// First value / label token.
    pub fn value0(&self) -> u32 {
        (self.n_filler + self.n_keys) as u32
    }
    /// The query marker.
    pub fn qry(&self) -> u32 {
        (self.n_filler + self.n_keys + self.n_values) as u32
    }
    /// The uniform lag law of label copy: P(ℓ) for ℓ = 1..=max_lag (index ℓ - 1).
    pub fn lag_pmf(&self) -> Vec<f64> {
        normalised((1..=self.max_lag).map(|_| 1.0).collect())
    }
}

impl ZipfTask {
    /// The lag law P(ℓ) ∝ ℓ^(-s) for ℓ = 1..=max_lag (index ℓ - 1).
    pub fn lag_pmf(&self) -> Vec<f64> {
        let s = self.zipf_exponent;
        normalised(
            (1..=self.pairs.max_lag)
                .map(|l| (l as f64).powf(-s))
                .collect(),
        )
    }
}

fn normalised(w: Vec<f64>) -> Vec<f64> {
    let z: f64 = w.iter().sum();
    w.into_iter().map(|x| x / z).collect()
}

/// Checks the pairs' fields at sequence length `seq_len`.
///
/// # Errors
/// A message naming the field.
pub(super) fn validate(p: &PlantedPairs, seq_len: usize) -> Result<(), String> {
    for (i, e) in p.train_mix.iter().enumerate() {
        super::config::mix_entry_fits(i, e.seq_len, seq_len)?;
        let entry = PlantedPairs {
            queries: e.queries,
            max_lag: p.max_lag.min(e.seq_len - 4),
            train_mix: Vec::new(),
            ..p.clone()
        };
        validate(&entry, e.seq_len).map_err(|m| format!("train_mix[{i}]: {m}"))?;
    }
    if p.max_lag < 1 || p.max_lag + 4 > seq_len {
        return Err(format!(
            "max_lag = {} must be in [1, seq_len - 4 = {}]",
            p.max_lag,
            seq_len - 4
        ));
    }
    if p.queries == 0 || p.queries > p.n_keys {
        return Err(format!(
            "queries = {} must be in [1, n_keys = {}] (keys are distinct per sequence)",
            p.queries, p.n_keys
        ));
    }
    if 5 * p.queries > seq_len / 2 {
        return Err(format!(
            "queries = {} is too many for seq_len = {seq_len} (at most seq_len / 10)",
            p.queries
        ));
    }
    if p.n_filler == 0 || p.n_values < 2 {
        return Err("n_filler must be >= 1 and n_values >= 2".into());
    }
    if p.n_filler + p.n_keys + p.n_values + 1 > u32::MAX as usize / 2 {
        return Err("vocabulary too large".into());
    }
    Ok(())
}

/// One Zipf-lag retrieval sequence of length `t`.
pub(super) fn zipf(task: &ZipfTask, t: usize, rng: &mut SplitMix64) -> Sample {
    let p = &task.pairs;
    plant(
        p,
        t,
        &cumulative(&task.lag_pmf()),
        rng,
        |s, rng, key, val, lag| {
            // [key][value] ... lag ... [QRY][key] -> value (answer at QRY + 1)
            // value at v, QRY at m = v + lag, answer at m + 1, value echoed at m + 2
            let (lo, hi) = (1, t - 3 - lag); // v range so that m + 2 <= t - 1
            let v = place(rng, &s.used, lo, hi, |v| {
                vec![v - 1, v, v + lag, v + lag + 1, v + lag + 2]
            })?;
            let m = v + lag;
            for q in [v - 1, v, m, m + 1, m + 2] {
                s.used[q] = true;
            }
            s.sample.tokens[v - 1] = key;
            s.sample.tokens[v] = val;
            s.sample.tokens[m] = p.qry();
            s.sample.tokens[m + 1] = key;
            s.sample.tokens[m + 2] = val;
            s.answer(m + 1, val, lag);
            s.sample.memorable[v - 1] = true;
            s.sample.memorable[v] = true;
            Some(())
        },
    )
}

/// One entity label copy sequence of length `t`.
pub(super) fn label_copy(p: &PlantedPairs, t: usize, rng: &mut SplitMix64) -> Sample {
    plant(
        p,
        t,
        &cumulative(&p.lag_pmf()),
        rng,
        |s, rng, key, val, lag| {
            // [entity][label] ... lag ... [entity] -> label (echoed after)
            // label at q, reappearance at r = q + lag, label echoed at r + 1
            let (lo, hi) = (1, t - 2 - lag);
            let q = place(rng, &s.used, lo, hi, |q| {
                vec![q - 1, q, q + lag, q + lag + 1]
            })?;
            let r = q + lag;
            for i in [q - 1, q, r, r + 1] {
                s.used[i] = true;
            }
            s.sample.tokens[q - 1] = key;
            s.sample.tokens[q] = val;
            s.sample.tokens[r] = key;
            s.sample.tokens[r + 1] = val;
            s.answer(r, val, lag);
            s.sample.entity[q - 1] = true;
            s.sample.entity[r] = true;
            s.sample.memorable[q - 1] = true;
            s.sample.memorable[q] = true;
            Some(())
        },
    )
}

/// A sequence being planted: the sample and which positions are taken.
struct Planting {
    sample: Sample,
    used: Vec<bool>,
}

impl Planting {
    /// Position `at` asks for `target`, `lag` tokens after its value.
    fn answer(&mut self, at: usize, target: u32, lag: usize) {
        self.sample.targets[at] = target;
        self.sample.mask[at] = true;
        self.sample.lags[at] = lag as u32;
    }
}

/// Filler of length `t` with `queries` distinct keys planted, each with a random value at a
/// lag drawn from `cdf` by `put(planting, rng, key token, value token, lag)` (None: the lag did
/// not fit and the query is dropped). The draws are made in the order the generator has
/// always made them: filler, keys, then per key its lag, value and place.
fn plant(
    p: &PlantedPairs,
    t: usize,
    cdf: &[f64],
    rng: &mut SplitMix64,
    mut put: impl FnMut(&mut Planting, &mut SplitMix64, u32, u32, usize) -> Option<()>,
) -> Sample {
    let tokens: Vec<u32> = (0..t)
        .map(|_| rng.below(p.n_filler as u64) as u32)
        .collect();
    let mut s = Planting {
        sample: Sample::unlabelled(tokens),
        used: vec![false; t],
    };
    let keys = rng.choose(p.n_keys, p.queries);
    for &key in &keys {
        let u = rng.unif();
        let lag = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) + 1;
        let key_tok = p.key0() + key as u32;
        let val_tok = p.value0() + rng.below(p.n_values as u64) as u32;
        // a lag that does not fit drops its query (the placed lags keep their law)
        let _ = put(&mut s, rng, key_tok, val_tok, lag);
    }
    s.sample
}

/// A uniformly random anchor in [lo, hi] whose slots are all free (up to 64 tries, then a
/// scan from a random start), or None when none is free.
fn place(
    rng: &mut SplitMix64,
    used: &[bool],
    lo: usize,
    hi: usize,
    slots: impl Fn(usize) -> Vec<usize>,
) -> Option<usize> {
    if lo > hi {
        return None;
    }
    let free = |a: usize| slots(a).iter().all(|&p| !used[p]);
    for _ in 0..64 {
        let a = rng.range(lo as u64, hi as u64) as usize;
        if free(a) {
            return Some(a);
        }
    }
    let n = hi - lo + 1;
    let start = rng.below(n as u64) as usize;
    (0..n).map(|i| lo + (start + i) % n).find(|&a| free(a))
}

fn cumulative(pmf: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    let mut c: Vec<f64> = pmf
        .iter()
        .map(|p| {
            acc += p;
            acc
        })
        .collect();
    if let Some(last) = c.last_mut() {
        *last = 1.0;
    }
    c
}
