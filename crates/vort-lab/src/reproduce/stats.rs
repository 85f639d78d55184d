//! What every reproduction report states about an accuracy, shared by the synthetic, recall
//! and books reports: counts pooled over seeds, a Wilson 95% interval, whether a run learned,
//! the rule that turns two pooled accuracies into a verdict, and the paired rule
//! ([`compare_pairs`]: seed k of one memory against seed k of the other) of the recall and
//! books verdicts.

use crate::train::eval::LagAccuracy;

/// Wilson score interval (95%) of `k` successes in `n`.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let den = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / den;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / den;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// A fraction as a percentage with one decimal ("-" for NaN).
pub fn pct(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{:.1}", 100.0 * x)
    }
}

/// "p% [lo, hi] (k/n)": an accuracy with its Wilson interval and counts ("-" with no answers).
pub fn pct_ci(k: usize, n: usize) -> String {
    if n == 0 {
        return "- (0 answers)".into();
    }
    let (lo, hi) = wilson(k, n);
    format!(
        "{} [{}, {}] ({k}/{n})",
        pct(k as f64 / n as f64),
        pct(lo),
        pct(hi)
    )
}

/// (correct, answers) summed over `rows` (one row per seed).
pub fn sum_rows<'a>(rows: impl Iterator<Item = &'a LagAccuracy>) -> (usize, usize) {
    rows.fold((0, 0), |(k, n), r| (k + r.correct, n + r.n))
}

/// Whether `k` of `n` answers shows learning beyond `chance`: the Wilson interval's lower end
/// is above it.
pub fn above_chance(k: usize, n: usize, chance: f64) -> bool {
    n > 0 && wilson(k, n).0 > chance
}

/// The rule of a comparison: the difference of two pooled accuracies against twice its
/// binomial standard error. Returns (difference, SE, "higher" | "lower" | "not
/// distinguishable" | "inconclusive (no answers)").
pub fn compare(a: (usize, usize), b: (usize, usize)) -> (f64, f64, &'static str) {
    let p = |(k, n): (usize, usize)| k as f64 / n.max(1) as f64;
    let (pa, pb) = (p(a), p(b));
    let se = (pa * (1.0 - pa) / a.1.max(1) as f64 + pb * (1.0 - pb) / b.1.max(1) as f64).sqrt();
    let word = if a.1 == 0 || b.1 == 0 {
        "inconclusive (no answers)"
    } else if pa - pb > 2.0 * se {
        "higher"
    } else if pb - pa > 2.0 * se {
        "lower"
    } else {
        "not distinguishable"
    };
    (pa - pb, se, word)
}

/// One run's test scores, for a paired comparison ([`compare_pairs`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Scores {
    /// One score per test unit (books: a window's BPC in a context bucket), the same units in
    /// the same order in every run compared; NaN where a unit has nothing scored.
    Units(Vec<f64>),
    /// Only the run's aggregate accuracy, as (correct, answers) (recall: a run's eval.json
    /// keeps counts per lag bucket, not per sequence). A run without answers has no result.
    Counts(usize, usize),
}

/// What the standard error of a [`Paired`] comparison is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairBasis {
    /// Units (windows): each unit's difference averaged over the pairs.
    Units,
    /// The per-pair differences (at least two pairs of counts).
    Pairs,
    /// One pair of counts: the binomial SE of the difference of its two accuracies.
    Binomial,
    /// Nothing: no pair, or fewer than two units with a difference.
    None,
}

/// A paired comparison of memories a and b ([`compare_pairs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Paired {
    /// The mean difference a − b (NaN when there is none).
    pub diff: f64,
    /// Its standard error (NaN when there is none).
    pub se: f64,
    /// The differences the SE is over: one per unit (NaN where one is unscored) or one per
    /// pair.
    pub diffs: Vec<f64>,
    /// The seeds both memories have: the pairs, n = `pairs.len()`.
    pub pairs: Vec<u64>,
    /// Seeds of a without a result of b at the same seed, and of b without a's: left out.
    pub missing: (Vec<u64>, Vec<u64>),
    /// What the SE is over.
    pub basis: PairBasis,
    /// "higher" | "lower" (a than b) | "not distinguishable" | "inconclusive (...)".
    pub word: &'static str,
}

impl Paired {
    /// n, what the SE is over and the missing pairs, for a verdict line comparing memories
    /// named `a` and `b`, e.g. "n = 3 pairs; SE over the 3 paired seed differences".
    pub fn describe(&self, a: &str, b: &str) -> String {
        let n = self.pairs.len();
        let units = self.diffs.iter().filter(|x| x.is_finite()).count();
        let mut s = format!("n = {n} pair{}", if n == 1 { "" } else { "s" });
        s += &match (self.basis, n) {
            (PairBasis::Units, 1) => format!(
                "; SE over {units} windows; one pair, so the spread across seeds is not measured"
            ),
            (PairBasis::Units, _) => {
                format!("; SE over {units} windows, each averaged over the pairs")
            }
            (PairBasis::Pairs, _) => format!("; SE over the {n} paired seed differences"),
            (PairBasis::Binomial, _) => "; binomial SE of the difference of the two \
                                         accuracies, as one pair does not measure the spread \
                                         across seeds"
                .into(),
            (PairBasis::None, _) => String::new(),
        };
        let seeds = |v: &[u64]| {
            let v: Vec<String> = v.iter().map(u64::to_string).collect();
            format!(
                "seed{} {}",
                if v.len() == 1 { "" } else { "s" },
                v.join(", ")
            )
        };
        let mut missing = Vec::new();
        if !self.missing.0.is_empty() {
            missing.push(format!("{a} {} without {b}", seeds(&self.missing.0)));
        }
        if !self.missing.1.is_empty() {
            missing.push(format!("{b} {} without {a}", seeds(&self.missing.1)));
        }
        if !missing.is_empty() {
            s += &format!("; missing pairs, left out: {}", missing.join(", "));
        }
        s
    }
}

/// The rule of a comparison of memories a and b, each given as (seed, [`Scores`]) per run.
/// Seed k of a is paired with seed k of b (the same training data order and the same test
/// set); a seed that one side lacks (or whose counts have no answers) is missing its pair and
/// is left out, and [`Paired::missing`] names it. With n pairs:
///
/// - every run has `Units` (per-window scores): W = the fewest units of any run in a pair;
///   per unit w < W, d_w = (1/n) Σ_k (a_k\[w\] − b_k\[w\]) (units with a NaN are skipped); diff =
///   mean_w d_w and SE = sd_w(d) / √W' over the W' finite d_w (sample sd, W' − 1); W' < 2 is
///   inconclusive;
/// - every run has `Counts` (aggregates only): per pair d_k = c_a,k / m_a,k − c_b,k / m_b,k;
///   with n >= 2, diff = mean_k d_k and SE = sd_k(d) / √n (sample sd, n − 1); with n = 1 the
///   spread across seeds is not measured and SE = √(p_a(1−p_a)/m_a + p_b(1−p_b)/m_b), the
///   binomial SE of the difference of the two accuracies;
/// - no pair, or `Units` against `Counts`: inconclusive.
///
/// The word: "higher" when diff > 2 SE, "lower" when diff < −2 SE, else "not
/// distinguishable" (a higher accuracy is better, a higher loss worse: the caller reads it).
pub fn compare_pairs(a: &[(u64, Scores)], b: &[(u64, Scores)]) -> Paired {
    let (pairs, both, missing) = pair_by_seed(a, b);
    let counts: Vec<_> = both
        .iter()
        .filter_map(|p| match p {
            (Scores::Counts(ca, ma), Scores::Counts(cb, mb)) => Some((*ca, *ma, *cb, *mb)),
            _ => None,
        })
        .collect();
    let units: Vec<_> = both
        .iter()
        .filter_map(|p| match p {
            (Scores::Units(ua), Scores::Units(ub)) => Some((ua, ub)),
            _ => None,
        })
        .collect();
    let (diffs, basis, se) = if both.is_empty() || (counts.len() + units.len() < both.len()) {
        (Vec::new(), PairBasis::None, f64::NAN)
    } else if units.len() == both.len() {
        let w = units.iter().map(|(x, y)| x.len().min(y.len())).min();
        let d: Vec<f64> = (0..w.unwrap_or(0))
            .map(|w| units.iter().map(|(x, y)| x[w] - y[w]).sum::<f64>() / units.len() as f64)
            .collect();
        (d, PairBasis::Units, f64::NAN)
    } else if let [(ca, ma, cb, mb)] = counts[..] {
        let (pa, pb) = (ca as f64 / ma as f64, cb as f64 / mb as f64);
        let se = (pa * (1.0 - pa) / ma as f64 + pb * (1.0 - pb) / mb as f64).sqrt();
        (vec![pa - pb], PairBasis::Binomial, se)
    } else {
        let d = counts
            .iter()
            .map(|&(ca, ma, cb, mb)| ca as f64 / ma as f64 - cb as f64 / mb as f64)
            .collect();
        (d, PairBasis::Pairs, f64::NAN)
    };
    let finite: Vec<f64> = diffs.iter().copied().filter(|x| x.is_finite()).collect();
    let (diff, se, basis) = match basis {
        PairBasis::Binomial => (finite[0], se, basis),
        _ if finite.len() < 2 => (f64::NAN, f64::NAN, PairBasis::None),
        _ => {
            let n = finite.len() as f64;
            let mean = finite.iter().sum::<f64>() / n;
            let var = finite.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
            (mean, (var / n).sqrt(), basis)
        }
    };
    let word = if pairs.is_empty() {
        "inconclusive (no pairs)"
    } else if basis == PairBasis::None {
        "inconclusive (fewer than 2 differences)"
    } else if diff > 2.0 * se {
        "higher"
    } else if diff < -2.0 * se {
        "lower"
    } else {
        "not distinguishable"
    };
    Paired {
        diff,
        se,
        diffs,
        pairs,
        missing,
        basis,
        word,
    }
}

/// The seeds a and b both have a result at (a run of counts without answers has none), each
/// once, with the two scores; and the seeds of a without b's, and of b without a's.
#[allow(clippy::type_complexity)]
fn pair_by_seed<'a>(
    a: &'a [(u64, Scores)],
    b: &'a [(u64, Scores)],
) -> (
    Vec<u64>,
    Vec<(&'a Scores, &'a Scores)>,
    (Vec<u64>, Vec<u64>),
) {
    let scored = |runs: &'a [(u64, Scores)]| {
        runs.iter()
            .filter(|(_, s)| !matches!(s, Scores::Counts(_, 0)))
    };
    let find = |runs: &'a [(u64, Scores)], seed: u64| {
        scored(runs).find(|(k, _)| *k == seed).map(|(_, s)| s)
    };
    let (mut pairs, mut both, mut missing) = (Vec::new(), Vec::new(), (Vec::new(), Vec::new()));
    for (seed, sa) in scored(a) {
        match find(b, *seed) {
            Some(sb) if !pairs.contains(seed) => {
                pairs.push(*seed);
                both.push((sa, sb));
            }
            Some(_) => {}
            None => missing.0.push(*seed),
        }
    }
    for (seed, _) in scored(b) {
        if find(a, *seed).is_none() && !missing.1.contains(seed) {
            missing.1.push(*seed);
        }
    }
    (pairs, both, missing)
}

/// Bins with fewer answers than this are left out of the lag plots (a 1-of-2 bin is noise).
pub const MIN_BIN: usize = 20;

/// A curve of accuracy against lag for a plot: one point per doubling bin with at least
/// [`MIN_BIN`] answers pooled over seeds, at the bin's geometric centre, with its Wilson 95%
/// interval as an error bar (x, lo, hi); accuracies times `scale` (1 or 100).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LagCurve {
    /// (lag, accuracy).
    pub points: Vec<(f64, f64)>,
    /// (lag, lo, hi).
    pub bars: Vec<(f64, f64, f64)>,
}

/// [`LagCurve`] of runs given by their lag bins (one slice per seed, the same bins each).
pub fn lag_curve(seeds: &[&[LagAccuracy]], scale: f64) -> LagCurve {
    let mut curve = LagCurve::default();
    let Some(first) = seeds.first() else {
        return curve;
    };
    for (i, bin) in first.iter().enumerate() {
        let (k, n) = sum_rows(seeds.iter().filter_map(|s| s.get(i)));
        if n >= MIN_BIN {
            let x = ((bin.lo * bin.hi) as f64).sqrt();
            let (lo, hi) = wilson(k, n);
            curve.points.push((x, scale * k as f64 / n as f64));
            curve.bars.push((x, scale * lo, scale * hi));
        }
    }
    curve
}

/// Whether a single order beat the learned router, from the word of the paired comparison
/// single − router: Some(true) when it is `better` ("higher" for accuracy, "lower" for
/// bits), Some(false) for the other direction, None when not distinguishable.
pub fn beats(word: &str, better: &str) -> Option<bool> {
    match word {
        "higher" | "lower" => Some(word == better),
        _ => None,
    }
}

/// The ablation ladder's answer to "order or routing?" (#39), from how each single order (the
/// best fixed order, one learned order per head, where they ran) fared against the learned
/// router ([`beats`]; at most two outcomes): **order** when one beat it, **routing** when the
/// router beat both, **open** while the learned order is missing, else **neither**. `does`
/// is what the task measures ("recalls the long lags").
pub fn order_or_routing(outcomes: &[Option<bool>], has_learned: bool, does: &str) -> String {
    let router_beats_all = !outcomes.is_empty() && outcomes.iter().all(|o| *o == Some(false));
    if outcomes.contains(&Some(true)) {
        format!("**order**: a single order {does} better than the learned router")
    } else if has_learned && outcomes.len() == 2 && router_beats_all {
        format!(
            "**routing**: the learned router {does} better than the best fixed order and \
             than one learned order per head"
        )
    } else if !has_learned && router_beats_all {
        format!(
            "**open**: the learned router {does} better than the best fixed order, and one \
             learned order per head has not finished here"
        )
    } else if !has_learned {
        "**open**: one learned order per head has not finished here".into()
    } else {
        "**neither**: the router and the single orders are not distinguishable".into()
    }
}

/// The verdict on a paper claim "a recalls better than b" from [`compare`]'s word.
pub fn claim_verdict(word: &str) -> &'static str {
    match word {
        "higher" => "reproduced",
        "lower" => "not reproduced (the opposite)",
        "not distinguishable" => "not reproduced (no difference)",
        _ => "inconclusive",
    }
}

/// The verdict on a paper claim "a has the lower loss than b" from [`compare_pairs`]'s word.
pub fn loss_claim_verdict(word: &str) -> &'static str {
    match word {
        "lower" => "reproduced",
        "higher" => "not reproduced (the opposite)",
        "not distinguishable" => "not reproduced (no difference)",
        _ => "inconclusive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds given as per-seed counts (recall), paired seed by seed. By hand: a has 30%,
    /// 50%, 40% at seeds 0, 1, 2 and b 20%, 30%, 30%, so d = 0.10, 0.20, 0.10; mean 0.4 / 3 =
    /// 0.1333; deviations −1/30, +2/30, −1/30, squares summing to 6/900, sample variance
    /// 3/900, SE = √(3/900 / 3) = 1/30 = 0.0333; 0.1333 > 2 × 0.0333: "higher". Pairs are
    /// found by seed, not by position.
    #[test]
    fn paired_se_over_three_pairs_of_counts() {
        let a = [
            (0, Scores::Counts(30, 100)),
            (1, Scores::Counts(50, 100)),
            (2, Scores::Counts(40, 100)),
        ];
        let b = [
            (2, Scores::Counts(30, 100)),
            (0, Scores::Counts(20, 100)),
            (1, Scores::Counts(30, 100)),
        ];
        let c = compare_pairs(&a, &b);
        assert_eq!(c.pairs, vec![0, 1, 2]);
        assert_eq!(c.missing, (vec![], vec![]));
        assert_eq!(c.basis, PairBasis::Pairs);
        assert!((c.diff - 0.4 / 3.0).abs() < 1e-12, "{c:?}");
        assert!((c.se - 1.0 / 30.0).abs() < 1e-12, "{c:?}");
        assert_eq!(c.word, "higher");
        assert_eq!(claim_verdict(c.word), "reproduced");
        assert_eq!(
            c.describe("vort", "exponential"),
            "n = 3 pairs; SE over the 3 paired seed differences"
        );
        let r = compare_pairs(&b, &a);
        assert_eq!(r.word, "lower");
        assert!((r.diff + 0.4 / 3.0).abs() < 1e-12 && (r.se - c.se).abs() < 1e-15);
        // The MQAR Zipf d64 cell's far buckets (VORT 206/1260, 183/1283, 303/1251 against the
        // exponential 163/1260, 82/1283, 178/1251): d = 43/1260, 101/1283, 125/1251 = 0.0341,
        // 0.0787, 0.0999, mean 0.0709, SE 0.0194, half the unpaired (Welch) SE of 0.0386.
        let vort = [(206, 1260), (183, 1283), (303, 1251)];
        let exp = [(163, 1260), (82, 1283), (178, 1251)];
        let seeded = |s: &[(usize, usize)]| -> Vec<(u64, Scores)> {
            (0..)
                .zip(s.iter().map(|&(k, n)| Scores::Counts(k, n)))
                .collect()
        };
        let c = compare_pairs(&seeded(&vort), &seeded(&exp));
        assert!((c.diff - 0.070923).abs() < 1e-6, "{c:?}");
        assert!((c.se - 0.019389).abs() < 1e-6, "{c:?}");
        assert_eq!(c.word, "higher");
    }

    /// Seeds given as per-window scores (books): each window's difference is averaged over
    /// the pairs, and the SE is over windows. By hand, 2 pairs of 3 windows: seed 0 gives
    /// differences 0.1, 0.0, 0.2 and seed 1 0.3, 0.1, NaN; per window d = 0.2, 0.05 (the
    /// third has a NaN and is skipped); mean 0.125, deviations ±0.075, sample variance
    /// 2 × 0.075² / 1 = 0.01125, SE = √(0.01125 / 2) = 0.075; 0.125 < 2 × 0.075: "not
    /// distinguishable".
    #[test]
    fn paired_se_over_windows_pools_the_pairs() {
        let run = |seed: u64, v: &[f64]| (seed, Scores::Units(v.to_vec()));
        let a = [run(0, &[1.0, 2.0, 3.0]), run(1, &[1.0, 2.1, f64::NAN])];
        let b = [run(0, &[0.9, 2.0, 2.8]), run(1, &[0.7, 2.0, 2.9])];
        let c = compare_pairs(&a, &b);
        assert_eq!(
            (c.pairs.as_slice(), c.basis),
            (&[0, 1][..], PairBasis::Units)
        );
        assert_eq!(c.diffs.len(), 3);
        assert!((c.diffs[0] - 0.2).abs() < 1e-12 && (c.diffs[1] - 0.05).abs() < 1e-12);
        assert!(c.diffs[2].is_nan());
        assert!((c.diff - 0.125).abs() < 1e-12, "{c:?}");
        assert!((c.se - 0.075).abs() < 1e-12, "{c:?}");
        assert_eq!(c.word, "not distinguishable");
        assert_eq!(loss_claim_verdict(c.word), "not reproduced (no difference)");
        assert_eq!(
            c.describe("vort", "exponential"),
            "n = 2 pairs; SE over 2 windows, each averaged over the pairs"
        );
        // a steady gap over windows counts: -0.02 and -0.019 alternating on 8 windows
        let steady: Vec<f64> = (0..8).map(|i| -0.02 + 0.001 * (i % 2) as f64).collect();
        let c = compare_pairs(&[run(0, &steady)], &[run(0, &[0.0; 8])]);
        assert_eq!(c.word, "lower");
        assert!((c.diff + 0.0195).abs() < 1e-12, "{c:?}");
        // sd = 0.0005 · √(8/7), SE = sd / √8 = 0.0005 / √7
        assert!((c.se - 0.0005 / 7f64.sqrt()).abs() < 1e-12, "{c:?}");
        assert!(c.describe("a", "b").contains("one pair, so the spread"));
        // one window with a difference is not enough
        let c = compare_pairs(&[run(0, &[f64::NAN, 0.1])], &[run(0, &[0.0, 0.0])]);
        assert_eq!(c.word, "inconclusive (fewer than 2 differences)");
        assert!(c.diff.is_nan() && c.se.is_nan());
    }

    /// A seed of one memory without the same seed of the other is left out and named; a run
    /// without answers has no result. One pair of counts falls back to the binomial SE:
    /// 60% against 50% of 1000 answers, SE = √(0.24/1000 + 0.25/1000) = 0.02214.
    #[test]
    fn missing_pairs_are_reported_and_one_pair_is_binomial() {
        let a = [
            (0, Scores::Counts(600, 1000)),
            (1, Scores::Counts(10, 20)),
            (2, Scores::Counts(300, 1000)),
        ];
        let b = [
            (0, Scores::Counts(500, 1000)),
            (1, Scores::Counts(0, 0)),
            (3, Scores::Counts(500, 1000)),
        ];
        let c = compare_pairs(&a, &b);
        assert_eq!(c.pairs, vec![0]);
        assert_eq!(c.missing, (vec![1, 2], vec![3]));
        assert_eq!(c.basis, PairBasis::Binomial);
        assert!((c.diff - 0.1).abs() < 1e-12, "{c:?}");
        assert!((c.se - 0.00049f64.sqrt()).abs() < 1e-12, "{c:?}");
        assert_eq!(c.word, "higher");
        assert_eq!(
            c.describe("vort", "exponential"),
            "n = 1 pair; binomial SE of the difference of the two accuracies, as one pair does \
             not measure the spread across seeds; missing pairs, left out: vort seeds 1, 2 \
             without exponential, exponential seed 3 without vort"
        );
        // no seed in common: nothing to compare, and every seed is named
        let c = compare_pairs(&a[2..], &b[2..]);
        assert_eq!(c.word, "inconclusive (no pairs)");
        assert_eq!(claim_verdict(c.word), "inconclusive");
        assert_eq!(
            c.describe("a", "b"),
            "n = 0 pairs; missing pairs, left out: a seed 2 without b, b seed 3 without a"
        );
        // per-window scores against counts do not compare
        let c = compare_pairs(&[(0, Scores::Units(vec![1.0, 2.0]))], &b[..1]);
        assert!(c.word.starts_with("inconclusive"), "{c:?}");
    }

    /// The verdict rule: a difference counts beyond twice its standard error.
    #[test]
    fn comparisons_follow_the_two_standard_error_rule() {
        // 60% vs 50% of 1000 answers each: SE ≈ 2.2 points, difference 10: higher
        assert_eq!(compare((600, 1000), (500, 1000)).2, "higher");
        assert_eq!(compare((500, 1000), (600, 1000)).2, "lower");
        // 52% vs 50% of 1000: 2 points < 2 SE (4.5 points)
        assert_eq!(compare((520, 1000), (500, 1000)).2, "not distinguishable");
        assert!(compare((1, 2), (0, 0)).2.starts_with("inconclusive"));
        let (d, se, _) = compare((600, 1000), (500, 1000));
        assert!((d - 0.1).abs() < 1e-12);
        assert!((se - (0.24f64 / 1000.0 + 0.25 / 1000.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn wilson_interval_brackets_the_rate() {
        let (lo, hi) = wilson(90, 100);
        assert!(lo < 0.9 && 0.9 < hi, "{lo} {hi}");
        assert!(
            (lo - 0.8256).abs() < 1e-3 && (hi - 0.9448).abs() < 1e-3,
            "{lo} {hi}"
        );
        let (lo, hi) = wilson(0, 50);
        assert_eq!(lo, 0.0);
        assert!(hi > 0.0 && hi < 0.08);
    }

    /// Lag curves pool seeds bin by bin, drop thin bins and bracket each point.
    #[test]
    fn lag_curves_pool_seeds_and_drop_thin_bins() {
        let bin = |lo: usize, hi: usize, correct: usize, n: usize| LagAccuracy {
            label: String::new(),
            lo,
            hi,
            n,
            correct,
            accuracy: f64::NAN,
            nll: f64::NAN,
            nll_sd: f64::NAN,
        };
        // bin [1, 1]: 3 + 4 answers (thin, dropped); bin [4, 9]: 10 + 30 answers
        let s0 = [bin(1, 1, 1, 3), bin(4, 9, 5, 10)];
        let s1 = [bin(1, 1, 2, 4), bin(4, 9, 15, 30)];
        let c = lag_curve(&[&s0, &s1], 100.0);
        assert_eq!(c.points, vec![(6.0, 50.0)]);
        let (x, lo, hi) = c.bars[0];
        assert_eq!(x, 6.0);
        assert!(lo < 50.0 && 50.0 < hi && (hi - lo) > 20.0, "{lo} {hi}");
        assert_eq!(lag_curve(&[], 1.0), LagCurve::default());
    }

    /// Learned means the interval clears chance, not only the point estimate.
    #[test]
    fn above_chance_needs_the_interval_to_clear_it() {
        // 8/100 against chance 1/16: the interval [4.1%, 15.0%] contains 6.25%
        assert!(!above_chance(8, 100, 1.0 / 16.0));
        assert!(above_chance(30, 100, 1.0 / 16.0));
        assert!(!above_chance(0, 0, 0.0));
        assert_eq!(pct_ci(0, 0), "- (0 answers)");
        assert_eq!(pct_ci(90, 100), "90.0 [82.6, 94.5] (90/100)");
    }

    /// The ladder's answer from the single orders' outcomes against the router, every
    /// branch: one single order ahead is order; both behind is routing, one behind without
    /// the learned order is open; a tie is neither.
    #[test]
    fn order_or_routing_reads_the_outcomes() {
        assert_eq!(beats("higher", "higher"), Some(true));
        assert_eq!(beats("higher", "lower"), Some(false));
        assert_eq!(beats("not distinguishable", "lower"), None);
        let word = |o: &[Option<bool>], learned| {
            let a = order_or_routing(o, learned, "does");
            a[2..a[2..].find("**").unwrap() + 2].to_string()
        };
        assert_eq!(word(&[Some(false), Some(true)], true), "order");
        assert_eq!(word(&[Some(true)], false), "order");
        assert_eq!(word(&[Some(false), Some(false)], true), "routing");
        // the learned order alone behind: no fixed order to have beaten
        assert_eq!(word(&[Some(false)], true), "neither");
        assert_eq!(word(&[Some(false)], false), "open");
        assert!(order_or_routing(&[Some(false)], false, "does").contains("does better than"));
        assert_eq!(word(&[], false), "open");
        assert_eq!(word(&[None, Some(false)], true), "neither");
    }
}
