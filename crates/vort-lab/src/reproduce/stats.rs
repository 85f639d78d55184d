//! What every reproduction report states about an accuracy, shared by the synthetic, recall
//! and books reports: counts pooled over seeds, a Wilson 95% interval, whether a run learned,
//! and the rule that turns two accuracies into a verdict.

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

/// A comparison of two memories run over seeds ([`compare_seeds`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SeedComparison {
    /// Pooled accuracy of a minus that of b.
    pub diff: f64,
    /// The standard error the rule used.
    pub se: f64,
    /// Seeds with answers, of a and of b.
    pub seeds: (usize, usize),
    /// Whether `se` includes the spread across seeds (both sides have >= 2 seeds).
    pub over_seeds: bool,
    /// "higher" | "lower" | "not distinguishable" | "inconclusive (no answers)".
    pub word: &'static str,
}

impl SeedComparison {
    /// How the SE was obtained, for a report line.
    pub fn basis(&self) -> String {
        if self.over_seeds {
            format!("SE over seeds, {} and {} seeds", self.seeds.0, self.seeds.1)
        } else {
            "binomial SE; one seed, so the spread across seeds is not measured".into()
        }
    }
}

/// The rule of a comparison of two memories, each given as (correct, answers) per seed: the
/// difference of the pooled accuracies against twice its standard error. The SE is the larger
/// of the binomial SE of the pooled answers ([`compare`]) and, when both sides have at least
/// two seeds, Welch's SE of the per-seed accuracies, sqrt(s_a²/n_a + s_b²/n_b): a seed draws
/// the initialisation and the training data, and seeds of one memory differ by far more than
/// their test answers' binomial noise (MQAR: 15.9% to 38.7% for one cell). Seeds without
/// answers are left out.
pub fn compare_seeds(a: &[(usize, usize)], b: &[(usize, usize)]) -> SeedComparison {
    let pool = |s: &[(usize, usize)]| s.iter().fold((0, 0), |(k, n), &(c, m)| (k + c, n + m));
    let (diff, binomial, word) = compare(pool(a), pool(b));
    let rates = |s: &[(usize, usize)]| -> Vec<f64> {
        s.iter()
            .filter(|r| r.1 > 0)
            .map(|&(k, n)| k as f64 / n as f64)
            .collect()
    };
    let (ra, rb) = (rates(a), rates(b));
    let var_of_mean = |r: &[f64]| {
        let n = r.len() as f64;
        let mean = r.iter().sum::<f64>() / n;
        r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) / n
    };
    let over_seeds = ra.len() >= 2 && rb.len() >= 2;
    let se = if over_seeds {
        binomial.max((var_of_mean(&ra) + var_of_mean(&rb)).sqrt())
    } else {
        binomial
    };
    let word = if word.starts_with("inconclusive") {
        word
    } else if diff > 2.0 * se {
        "higher"
    } else if -diff > 2.0 * se {
        "lower"
    } else {
        "not distinguishable"
    };
    SeedComparison {
        diff,
        se,
        seeds: (ra.len(), rb.len()),
        over_seeds,
        word,
    }
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

/// The verdict on a paper claim "a recalls better than b" from [`compare`]'s word.
pub fn claim_verdict(word: &str) -> &'static str {
    match word {
        "higher" => "reproduced",
        "lower" => "not reproduced (the opposite)",
        "not distinguishable" => "not reproduced (no difference)",
        _ => "inconclusive",
    }
}

/// The rule of a paired comparison of a loss (lower is better) on the same units (test
/// windows): the mean of the differences `a − b` against twice its standard error (sample sd
/// over units / √units). Returns (mean difference, SE, units, "lower" | "higher" | "not
/// distinguishable" | "inconclusive (fewer than 2 windows)"); NaN differences are skipped.
pub fn compare_paired(diffs: &[f64]) -> (f64, f64, usize, &'static str) {
    let d: Vec<f64> = diffs.iter().copied().filter(|x| x.is_finite()).collect();
    let n = d.len();
    if n < 2 {
        return (f64::NAN, f64::NAN, n, "inconclusive (fewer than 2 windows)");
    }
    let mean = d.iter().sum::<f64>() / n as f64;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    let word = if mean < -2.0 * se {
        "lower"
    } else if mean > 2.0 * se {
        "higher"
    } else {
        "not distinguishable"
    };
    (mean, se, n, word)
}

/// The verdict on a paper claim "a has the lower loss than b" from [`compare_paired`]'s word.
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

    /// Paired differences: the SE is over units, so a small but steady gap counts and a
    /// larger but noisy one does not.
    #[test]
    fn paired_comparisons_follow_the_two_standard_error_rule() {
        // steady: -0.02 ± 0.001 on 8 windows
        let steady: Vec<f64> = (0..8).map(|i| -0.02 + 0.001 * (i % 2) as f64).collect();
        let (m, se, n, w) = compare_paired(&steady);
        assert_eq!((n, w), (8, "lower"));
        assert!(
            (m + 0.0195).abs() < 1e-12 && se > 0.0 && se < 0.001,
            "{m} {se}"
        );
        assert_eq!(loss_claim_verdict(w), "reproduced");
        // noisy: mean -0.05 with ±0.5 swings
        let noisy = [0.45, -0.55, 0.45, -0.55];
        assert_eq!(compare_paired(&noisy).3, "not distinguishable");
        assert_eq!(compare_paired(&[0.3, 0.31, 0.29]).3, "higher");
        assert_eq!(
            loss_claim_verdict("higher"),
            "not reproduced (the opposite)"
        );
        // NaN windows (nothing scored in the bucket) are skipped; one window is not enough
        let (_, _, n, w) = compare_paired(&[f64::NAN, 0.1]);
        assert_eq!(n, 1);
        assert!(w.starts_with("inconclusive"));
        assert_eq!(loss_claim_verdict(w), "inconclusive");
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

    /// With several seeds the rule uses their spread: the Zipf lag cell's far buckets (VORT
    /// 206/1260, 183/1283, 303/1251 against the exponential 163/1260, 82/1283, 178/1251) are
    /// 7.1 points apart, "higher" on the pooled binomial SE (0.8) but not across seeds (SE
    /// 3.9); one seed falls back to the binomial SE and says so.
    #[test]
    fn seed_comparisons_count_the_spread_across_seeds() {
        let vort = [(206, 1260), (183, 1283), (303, 1251)];
        let exp = [(163, 1260), (82, 1283), (178, 1251)];
        let pool = |s: &[(usize, usize)]| s.iter().fold((0, 0), |(k, n), r| (k + r.0, n + r.1));
        assert_eq!(compare(pool(&vort), pool(&exp)).2, "higher");
        let c = compare_seeds(&vort, &exp);
        assert_eq!((c.seeds, c.over_seeds), ((3, 3), true));
        assert!((c.diff - 0.0709).abs() < 1e-3, "{c:?}");
        assert!((c.se - 0.0386).abs() < 1e-3, "{c:?}");
        assert_eq!(c.word, "not distinguishable");
        assert!(c.basis().contains("3 and 3 seeds"));
        // steady seeds: the binomial SE is the larger, and a clear gap counts
        let a = [(600, 1000), (601, 1000), (599, 1000)];
        let b = [(500, 1000), (500, 1000), (501, 1000)];
        let c = compare_seeds(&a, &b);
        assert_eq!(c.word, "higher");
        assert_eq!(c.se, compare(pool(&a), pool(&b)).1);
        assert_eq!(compare_seeds(&b, &a).word, "lower");
        // one seed a side: binomial only; a seed without answers does not count
        let c = compare_seeds(&[(600, 1000)], &[(500, 1000), (0, 0)]);
        assert_eq!((c.seeds, c.over_seeds, c.word), ((1, 1), false, "higher"));
        assert!(c.basis().contains("not measured"));
        assert!(compare_seeds(&[(1, 2)], &[])
            .word
            .starts_with("inconclusive"));
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
}
