//! Multi-query associative recall (MQAR) exactly as Zoology generates it
//! (HazyResearch/zoology, `zoology/data/multiquery_ar.py`, Arora, Eyuboglu et al. 2023).
//!
//! A sequence of length L holds K key–value pairs first, `k v k v …`, then a query region of
//! (L − 2K)/2 slots. Keys are drawn without replacement from [1, V/2) and values from
//! [V/2, V). Key i is repeated at slot 2·g_i of the query region, with the gaps g_i drawn
//! without replacement from p(g) ∝ (g+1)^(a−1), g = 0..(L−2K)/2 − 1 (a → 0: Zipf-like, most
//! queries soon after the pairs; a = 1: uniform). The label, key i's value, sits at the query
//! position (the model predicts it as the next token); every other position is ignored
//! (Zoology's −100). Filler is token 0, or uniform random tokens in [0, V) with
//! `random_non_queries` (Zoology's default; a filler token may then equal a key, as in
//! Zoology).
//!
//! The lag of an answer is the query position minus the position of its pair's value token.
//!
//! Zoology draws whole datasets from numpy's global RNG; here sequence `index` of a stream is a
//! pure function of (seed, stream, index), like every task of this crate. The law of a
//! sequence is Zoology's; the exact sequences are not (`vort train --train-data` takes Zoology's
//! own files for that).

use vort::vort_math::rng::SplitMix64;

use super::{MqarTask, Sample};

/// The label at positions that are not scored (Zoology's ignore index).
pub const IGNORE: i64 = -100;

/// Checks the MQAR fields of `cfg` at length `l` (Zoology's asserts, plus room for the pairs).
///
/// # Errors
/// A message naming the field.
pub fn validate(cfg: &MqarTask, l: usize) -> Result<(), String> {
    let (v, k) = (cfg.vocab_size, cfg.num_kv_pairs);
    if !l.is_multiple_of(2) {
        return Err(format!("seq_len = {l} must be even (MQAR)"));
    }
    // Zoology also asserts V > L. Nothing in the generator needs it, and scoring a model
    // trained at L = 2048 on 128K-token sequences of the same vocabulary (length
    // extrapolation) breaks it, so it is not enforced.
    if v > 1 << 24 {
        return Err(format!("vocab_size = {v} must be <= 2^24"));
    }
    if k == 0 || 4 * k > l {
        return Err(format!(
            "num_kv_pairs = {k} must be in [1, seq_len / 4 = {}] (2K pair tokens and K query \
             slots of 2 tokens)",
            l / 4
        ));
    }
    if k >= v / 2 {
        return Err(format!(
            "num_kv_pairs = {k} must be < vocab_size / 2 = {} (distinct keys from [1, V/2))",
            v / 2
        ));
    }
    if !(cfg.power_a.is_finite() && cfg.power_a > 0.0 && cfg.power_a <= 1.0) {
        return Err(format!(
            "power_a = {:?} must be in (0, 1] (1 = uniform gaps)",
            cfg.power_a
        ));
    }
    Ok(())
}

/// Weights of the gap law p(g) ∝ (g+1)^(a−1), g = 0..space (unnormalised).
pub fn gap_weights(space: usize, power_a: f64) -> Vec<f64> {
    (1..=space)
        .map(|g| (g as f64).powf(power_a - 1.0))
        .collect()
}

/// Draws `k` distinct indices with probabilities proportional to `w`, one after another,
/// each from the weights left (numpy's `choice(replace=False, p=w)` has this law).
pub fn weighted_without_replacement(rng: &mut SplitMix64, w: &[f64], k: usize) -> Vec<usize> {
    let mut w = w.to_vec();
    let mut left: f64 = w.iter().sum();
    let mut out = Vec::with_capacity(k);
    for _ in 0..k {
        let mut u = rng.unif() * left;
        let mut pick = None;
        for (i, &wi) in w.iter().enumerate() {
            if wi <= 0.0 {
                continue;
            }
            pick = Some(i);
            if u < wi {
                break;
            }
            u -= wi;
        }
        // rounding can run past the end: the last index with weight left is taken
        let Some(i) = pick else { break };
        left -= w[i];
        w[i] = 0.0;
        out.push(i);
    }
    out
}

/// One MQAR sequence of length `l` from `rng` (config assumed valid).
pub fn generate(cfg: &MqarTask, l: usize, rng: &mut SplitMix64) -> Sample {
    let (v, k) = (cfg.vocab_size, cfg.num_kv_pairs);
    let half = v / 2;
    let context = 2 * k;
    let space = (l - context) / 2;
    // keys from [1, V/2), values from [V/2, V), distinct within the sequence
    let keys: Vec<u32> = rng
        .choose(half - 1, k)
        .into_iter()
        .map(|i| 1 + i as u32)
        .collect();
    let values: Vec<u32> = rng
        .choose(v - half, k)
        .into_iter()
        .map(|i| (half + i) as u32)
        .collect();
    let gaps = weighted_without_replacement(rng, &gap_weights(space, cfg.power_a), k);
    let mut tokens = vec![0u32; l];
    let mut targets = vec![0u32; l];
    let mut mask = vec![false; l];
    let mut lags = vec![0u32; l];
    let mut memorable = vec![false; l];
    let mut query = vec![false; l];
    for i in 0..k {
        tokens[2 * i] = keys[i];
        tokens[2 * i + 1] = values[i];
        memorable[2 * i] = true;
        memorable[2 * i + 1] = true;
    }
    for (i, &g) in gaps.iter().enumerate() {
        let p = context + 2 * g;
        tokens[p] = keys[i];
        targets[p] = values[i];
        mask[p] = true;
        lags[p] = (p - (2 * i + 1)) as u32;
        query[p] = true;
    }
    if cfg.random_non_queries {
        // Zoology replaces every 0 of the query region (the pairs hold no 0: keys start at 1)
        for p in context..l {
            if !query[p] {
                tokens[p] = rng.below(v as u64) as u32;
            }
        }
    }
    Sample {
        tokens,
        targets,
        mask,
        lags,
        entity: vec![false; l],
        memorable,
        function: vec![false; l],
    }
}
