//! The ablation ladder (issue #39): what VORT's *variable* order does. In a cell the preset
//! marks `ladder = true`, every rung (the exponential, fixed orders, one learned order per
//! head, VORT routed by each signal, oracle routing) is ranked by its accuracy at lags > 1000,
//! with counts per lag bucket, its chosen rate and its sweep, and paired with the claim (VORT)
//! seed by seed. Then the size trend (`acc_vs_state_lag.png`): accuracy at lags > 1000
//! against state floats per layer over the cells of the same task at other widths, with the
//! state each memory would need to reach the paper's 79.4% read off a fit in log state.

use std::path::Path;

use super::{
    color_of, lr_label, mixer_names, pooled, CellResult, RecallReport, Role, Section, SweepPlace,
};
use crate::plot::{panels_plot, Panel, Series};
use crate::reproduce::stats::{compare_pairs, pct, wilson, Paired, Scores};
use crate::tasks::BUCKETS;
use crate::train::{RunConfig, TrainError};
use vort::{Mixer, Routing};

/// The index of the bucket of lags > 1000 in [`BUCKETS`] (the paper's lag claim).
const LONG: usize = 2;

/// The paper's accuracy at lags > 1000 of its power-law memory under the report's claim
/// (percent).
fn paper_long(rep: &RecallReport) -> f64 {
    crate::reproduce::paper::number(rep.claim(), "power-law").unwrap_or(f64::NAN)
}

/// The ladder section: for every ladder cell, the rungs ranked at lags > 1000 with their
/// paired differences from the claim, the verdict lines, then the size trend.
pub(super) fn section(rep: &RecallReport, out: &Path) -> Result<String, TrainError> {
    let ladder_cells: Vec<&str> = rep
        .preset
        .cells
        .iter()
        .filter(|c| c.ladder)
        .map(|c| c.name.as_str())
        .collect();
    if ladder_cells.is_empty() {
        return Ok(String::new());
    }
    let mut s = String::from(
        "## The ablation ladder: order or routing?\n\n\
         Each rung adds one cause to the one below it: a learned exponential, one fixed order \
         α (no routing), one learned order per head (no routing), VORT routed by one signal or \
         both, and the paper's assignment by rule (oracle). Rungs are ranked by test accuracy \
         at lags > 1000, all seeds pooled (correct / answers). Δ vs the claim is paired: \
         seed k of the rung against seed k of the claim (same data order, same test set), the \
         mean of the per-seed differences at lags > 1000 ± the SE over those differences \
         (n = pairs; with one pair, the binomial SE of the two accuracies).\n\n",
    );
    for cell in &ladder_cells {
        let rungs: Vec<&CellResult> = rep.cells.iter().filter(|c| c.cell == *cell).collect();
        s.push_str(&rung_table(rep, cell, &rungs));
        s.push_str(&verdict_lines(rep, &rungs));
        s.push_str(&answer(rep, cell, &rungs));
        let pending: Vec<&String> = rep
            .pending
            .iter()
            .filter(|p| p.starts_with(&format!("{cell} /")))
            .collect();
        if !pending.is_empty() {
            s.push_str(&format!(
                "Rungs still training (not in the table): {}.\n\n",
                pending
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    s.push_str(&size_trend(rep, &ladder_cells, out)?);
    Ok(s)
}

/// The run config of (cell, mixer) `c` at its chosen rate (seed 0), from the preset.
fn config_of(rep: &RecallReport, c: &CellResult) -> Option<RunConfig> {
    let cell = rep.preset.cells.iter().find(|x| x.name == c.cell)?;
    let mixer = rep.preset.mixers.iter().find(|m| m.name == c.mixer)?;
    rep.preset.run_config(cell, mixer, c.best_lr, 0).ok()
}

/// What a rung is, from its config: the kind and, for VORT, how α is set ("?" when the
/// preset does not hold the run's cell or mixer).
pub(super) fn rung_label(rep: &RecallReport, c: &CellResult) -> String {
    rung_description(rep, c).unwrap_or_else(|| "?".into())
}

/// [`rung_label`], or None when the preset does not hold the run's cell or mixer.
pub(super) fn rung_description(rep: &RecallReport, c: &CellResult) -> Option<String> {
    let cfg = config_of(rep, c)?;
    let probe = if cfg.train.entity_aux_weight > 0.0 {
        "supervised probe"
    } else {
        "unsupervised probe"
    };
    Some(match &cfg.model.mixer {
        Mixer::Exponential => "exponential, learned rate per head".into(),
        Mixer::PowerLaw { alpha, .. } => format!("fixed order α = {alpha}"),
        Mixer::Mixture { m, .. } => format!("{m} fixed exponentials, learned weights"),
        Mixer::Retnet => "RetNet's fixed decays".into(),
        Mixer::Softmax { .. } => "softmax attention (the sanity gate)".into(),
        Mixer::Vort { routing, .. } => match routing {
            Routing::Learned => "one learned order per head".into(),
            Routing::Fixed { alpha } => format!("fixed order α = {alpha} (shared nodes)"),
            Routing::Oracle { entity, other } => {
                format!("oracle: α = {entity} on keys and values, {other} elsewhere")
            }
            Routing::EntropyOnly => "routed by entropy".into(),
            Routing::EntityOnly => format!("routed by the entity probe ({probe})"),
            Routing::Full => format!("routed by entropy and the entity probe ({probe})"),
        },
    })
}

/// Pooled accuracy at lags > 1000 (NaN without answers there).
fn long_accuracy(c: &CellResult) -> f64 {
    let (k, n) = pooled(c, Some(LONG));
    if n == 0 {
        f64::NAN
    } else {
        k as f64 / n as f64
    }
}

/// Each seed's (correct, answers) at lags > 1000, for [`compare_pairs`].
fn long_scores(c: &CellResult) -> Vec<(u64, Scores)> {
    c.seeds
        .iter()
        .filter_map(|r| {
            r.buckets
                .get(LONG)
                .map(|b| (r.seed, Scores::Counts(b.correct, b.n)))
        })
        .collect()
}

/// The claim's result in the rungs (the preset's `role = "claim"` mixer).
fn claim<'a>(rep: &RecallReport, rungs: &[&'a CellResult]) -> Option<&'a CellResult> {
    let name = rep.preset.with_role(Role::Claim).first().copied()?;
    rungs.iter().copied().find(|c| c.mixer == name)
}

/// The rungs of one ladder cell ranked by accuracy at lags > 1000.
fn rung_table(rep: &RecallReport, cell: &str, rungs: &[&CellResult]) -> String {
    let claim = claim(rep, rungs);
    let mut ranked: Vec<&CellResult> = rungs.to_vec();
    ranked.sort_by(|a, b| long_accuracy(b).total_cmp(&long_accuracy(a)));
    let mut s = format!(
        "### {cell}\n\n| rank | rung | what | lr (validation % at each swept lr) | seeds | \
         > 1000 per seed % | > 1000 pooled % (correct / answers) |"
    );
    for (label, _, _) in BUCKETS.iter().take(LONG) {
        s.push_str(&format!(" {label} % |"));
    }
    s.push_str(" Δ vs claim at > 1000 (paired) |\n|---|---|---|---|---|---|---|");
    for _ in 0..LONG {
        s.push_str("---|");
    }
    s.push_str("---|\n");
    for (i, c) in ranked.iter().enumerate() {
        let sweep: Vec<String> = c
            .sweep
            .iter()
            .map(|r| format!("{}: {}", lr_label(r.lr), pct(r.val_accuracy)))
            .collect();
        let per_seed: Vec<String> = c
            .seeds
            .iter()
            .map(|r| match r.buckets.get(LONG) {
                Some(b) if b.n > 0 => format!(
                    "s{}: {}{}",
                    r.seed,
                    pct(b.correct as f64 / b.n as f64),
                    if r.learned { "" } else { " (not learned)" }
                ),
                _ => format!("s{}: -", r.seed),
            })
            .collect();
        let (k, n) = pooled(c, Some(LONG));
        let edge = match c.sweep_place() {
            SweepPlace::Smallest | SweepPlace::Largest => ", at the edge of its sweep",
            SweepPlace::OneRate | SweepPlace::Inside => "",
        };
        s.push_str(&format!(
            "| {} | {} | {} | {}{edge} ({}) | {} | {} | {} ({k}/{n}) |",
            i + 1,
            c.mixer,
            rung_label(rep, c),
            lr_label(c.best_lr),
            sweep.join(", "),
            c.seeds.len(),
            per_seed.join("; "),
            pct(long_accuracy(c)),
        ));
        for b in 0..LONG {
            let (k, n) = pooled(c, Some(b));
            s.push_str(&format!(" {} ({k}/{n}) |", pct(k as f64 / n.max(1) as f64)));
        }
        let delta = match claim {
            Some(v) if v.mixer != c.mixer => {
                let p = compare_pairs(&long_scores(c), &long_scores(v));
                format!("{} (n = {})", signed_points(&p), p.pairs.len())
            }
            Some(_) => "the claim".into(),
            None => "-".into(),
        };
        s.push_str(&format!(" {delta} |\n"));
    }
    s.push_str(&format!(
        "\nA seed *learned* the task at >= 50% over all lags; \"not learned\" marks the seeds \
         below it. The paper's accuracy at lags > 1000: {}.\n\n",
        crate::reproduce::paper::accuracies(rep.claim())
    ));
    s
}

/// "+3.1 ± 1.2 points" (a paired difference in accuracy, as percentage points).
fn signed_points(p: &Paired) -> String {
    if p.diff.is_nan() {
        return "n/a".into();
    }
    format!("{:+.1} ± {:.1} points", 100.0 * p.diff, 100.0 * p.se)
}

/// The verdict lines of a ladder cell: every rung against the claim, then the claim against
/// the best fixed order and against the learned order.
fn verdict_lines(rep: &RecallReport, rungs: &[&CellResult]) -> String {
    let Some(v) = claim(rep, rungs) else {
        return match rep.preset.with_role(Role::Claim).first() {
            Some(name) => format!(
                "The claim ({name}) has not finished every run in this cell yet: no paired \
                 verdicts.\n\n"
            ),
            None => {
                "No claim rung (`role = \"claim\"`) in the preset: no paired verdicts.\n\n".into()
            }
        };
    };
    let line = |a: &CellResult, b: &CellResult, why: &str| -> String {
        let p = compare_pairs(&long_scores(a), &long_scores(b));
        format!(
            "- {why}{} − {} at lags > 1000: {}: **{}** ({}).\n",
            a.mixer,
            b.mixer,
            signed_points(&p),
            p.word,
            p.describe(&a.mixer, &b.mixer)
        )
    };
    let mut s =
        String::from("Paired verdicts at lags > 1000 (a difference counts beyond 2 SE):\n\n");
    for (what, c, _) in single_orders(rep, v, rungs) {
        s.push_str(&line(v, c, &format!("the claim against {what}: ")));
    }
    for c in rungs.iter().filter(|c| c.mixer != v.mixer) {
        s.push_str(&line(c, v, ""));
    }
    s.push('\n');
    s
}

/// The cell's answer to "order or routing?" in one paragraph, from the paired verdicts at
/// lags > 1000: *order* when the best fixed order or one learned order per head recalls more
/// than the learned router, *routing* when the router beats both, open while the learned
/// order is missing; then the rungs that ran one rate, and the paper's assignment by rule
/// (oracle), where it ran.
fn answer(rep: &RecallReport, cell: &str, rungs: &[&CellResult]) -> String {
    let Some(v) = claim(rep, rungs) else {
        return String::new();
    };
    let singles = single_orders(rep, v, rungs);
    // each single order − the claim in accuracy: "higher" means the single order recalls more
    let outcomes: Vec<Option<bool>> = singles
        .iter()
        .map(|(_, _, p)| crate::reproduce::stats::beats(p.word, "higher"))
        .collect();
    let has_learned = singles.iter().any(|(what, _, _)| *what == LEARNED);
    let verdict =
        crate::reproduce::stats::order_or_routing(&outcomes, has_learned, "recalls the long lags");
    let mut s = format!(
        "**Order or routing? ({cell})** {verdict}. At lags > 1000, {}, {}, recalls {}%",
        v.mixer,
        rung_label(rep, v),
        pct(long_accuracy(v))
    );
    for (what, c, p) in &singles {
        s.push_str(&format!(
            "; {what} ({}) {}%, {} − {} = {} (n = {})",
            c.mixer,
            pct(long_accuracy(c)),
            c.mixer,
            v.mixer,
            signed_points(p),
            p.pairs.len()
        ));
    }
    s.push('.');
    s.push_str(&unbracketed_note(v, &singles, &outcomes));
    s.push_str(&oracle_note(rep, v, rungs));
    s.push_str("\n\n");
    s
}

/// What [`answer`] calls one learned order per head.
const LEARNED: &str = "one learned order per head";

/// The single orders of a ladder cell against the claim `v`, each as (what, its rung, the
/// paired difference rung − claim at lags > 1000): the best fixed order (by pooled accuracy
/// at lags > 1000) and one learned order per head, where they ran.
fn single_orders<'a>(
    rep: &RecallReport,
    v: &CellResult,
    rungs: &[&'a CellResult],
) -> Vec<(&'static str, &'a CellResult, Paired)> {
    let mixer_of = |c: &CellResult| config_of(rep, c).map(|cfg| cfg.model.mixer);
    let best_fixed = rungs
        .iter()
        .filter(|c| matches!(mixer_of(c), Some(Mixer::PowerLaw { .. })))
        .max_by(|a, b| long_accuracy(a).total_cmp(&long_accuracy(b)));
    let learned = rungs
        .iter()
        .find(|c| mixer_of(c).and_then(|m| m.routing()) == Some(Routing::Learned));
    [("the best fixed order", best_fixed), (LEARNED, learned)]
        .into_iter()
        .filter_map(|(what, c)| Some((what, *c?, compare_pairs(&long_scores(c?), &long_scores(v)))))
        .collect()
}

/// " Not yet at a rate shown to be its own: ..." naming the claim or single orders that ran
/// one rate in the cell, or chose the smallest or largest rate they swept (#39 item 2: a
/// sweep that does not bracket an optimum has not found the rung's rate); empty when every
/// one was bracketed. Each is said to be behind, level or ahead at that rate: a rung behind
/// might close its gap at its own rate, so the answer waits on a wider sweep; one ahead would
/// keep its rate or take one that does better on validation, so its sweep can hardly reverse
/// the answer. `outcomes` are [`answer`]'s, one per single order: Some(true) where it recalls
/// more than the claim.
fn unbracketed_note(
    v: &CellResult,
    singles: &[(&str, &CellResult, Paired)],
    outcomes: &[Option<bool>],
) -> String {
    // the claim is behind when any single order beat it, ahead when it beat them all
    let claim_place = if outcomes.contains(&Some(true)) {
        Some(false)
    } else if !outcomes.is_empty() && outcomes.iter().all(|o| *o == Some(false)) {
        Some(true)
    } else {
        None
    };
    let places = std::iter::once((v, claim_place))
        .chain(singles.iter().zip(outcomes).map(|((_, c, _), o)| (*c, *o)));
    let (mut ahead, mut behind, mut level) = (vec![], vec![], vec![]);
    for (c, place) in places {
        let Some(why) = c.sweep_place().unbracketed() else {
            continue;
        };
        let named = format!("{} ({why})", c.mixer);
        match place {
            Some(true) => ahead.push(named),
            Some(false) => behind.push(named),
            None => level.push(named),
        }
    }
    let groups = [
        (
            behind,
            "behind at that rate, so at its own rate it may close the gap",
        ),
        (level, "not distinguishable at that rate"),
        (
            ahead,
            "ahead at that rate, so a wider sweep keeps that rate or takes one better on \
             validation",
        ),
    ];
    let said: Vec<String> = groups
        .iter()
        .filter(|(names, _)| !names.is_empty())
        .map(|(names, why)| format!("{why}: {}", names.join(", ")))
        .collect();
    if said.is_empty() {
        return String::new();
    }
    format!(
        " Not yet at a rate shown to be its own (one rate ran, or validation chose the \
         smallest or largest rate swept, so a better one may lie beyond): {}.",
        said.join("; ")
    )
}

/// The paper's assignment by rule (the oracle rung) against the claim `v`, or nothing where
/// the cell has no oracle.
fn oracle_note(rep: &RecallReport, v: &CellResult, rungs: &[&CellResult]) -> String {
    let routing_of = |c: &CellResult| config_of(rep, c).and_then(|cfg| cfg.model.mixer.routing());
    let Some(o) = rungs
        .iter()
        .find(|c| matches!(routing_of(c), Some(Routing::Oracle { .. })))
    else {
        return String::new();
    };
    let p = compare_pairs(&long_scores(o), &long_scores(v));
    format!(
        " The paper's assignment given by rule ({}) recalls {}%, {} the router ({}, n = {}): \
         per-token order {} when the roles are given.",
        o.mixer,
        pct(long_accuracy(o)),
        match p.word {
            "higher" => "higher than",
            "lower" => "lower than",
            _ => "not distinguishable from",
        },
        signed_points(&p),
        p.pairs.len(),
        if p.word == "higher" {
            "helps"
        } else {
            "does not help"
        }
    )
}

/// One point of the size trend: a mixer at one width, seed 0.
struct SizePoint {
    mixer: String,
    d_model: usize,
    floats_per_layer: f64,
    correct: usize,
    answers: usize,
}

impl SizePoint {
    /// Its accuracy at lags > 1000, a fraction.
    fn accuracy(&self) -> f64 {
        self.correct as f64 / self.answers.max(1) as f64
    }
}

/// The size trend over the lags cells of each ladder cell's task (the same L, K and gaps) at
/// every width: `acc_vs_state_lag.png` and its table, seed 0.
fn size_trend(rep: &RecallReport, ladder: &[&str], out: &Path) -> Result<String, TrainError> {
    let names = mixer_names(rep);
    let paper = paper_long(rep);
    let mut panels = Vec::new();
    let mut s = String::new();
    // two ladder cells of one task at two widths share one trend: draw it once
    let mut drawn: Vec<(usize, usize, Option<f64>)> = Vec::new();
    for cell in ladder {
        let Some(base) = rep.cells.iter().find(|c| c.cell == *cell) else {
            continue;
        };
        if drawn.contains(&task_key(base)) {
            continue;
        }
        drawn.push(task_key(base));
        let (widths, points) = size_points(rep, base);
        // mixers measured at two widths or more
        let mut mixers: Vec<String> = points.iter().map(|p| p.mixer.clone()).collect();
        mixers.sort();
        mixers.dedup();
        mixers.retain(|m| points.iter().filter(|p| &p.mixer == m).count() >= 2);
        if widths.len() < 2 || mixers.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "### Size trend: {} at d_model {} (seed 0)\n\n\
             Accuracy at lags > 1000 against the recurrent state per layer (floats at L = {}; \
             softmax: its KV cache). The last column fits accuracy = a + b·log10(state) to \
             each memory's points and reads off the state at which the fit reaches the \
             paper's {paper}% (an extrapolation: a line through 2-3 points).\n\n\
             | mixer | state floats per layer: > 1000 % (correct / answers) | slope per 10× \
             state | state for {paper}% |\n|---|---|---|---|\n",
            cell,
            widths
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            base.seq_len()
        ));
        let mut series = Vec::new();
        for m in &mixers {
            let mut pts: Vec<&SizePoint> = points.iter().filter(|p| &p.mixer == m).collect();
            pts.sort_by(|a, b| a.floats_per_layer.total_cmp(&b.floats_per_layer));
            let (row, line) = size_row(m, &pts, paper);
            s.push_str(&row);
            series.push(line.with_color(color_of(&names, m)));
        }
        s.push_str(&lead_by_width(rep, &widths, &points));
        let (lo, hi) = points.iter().fold((f64::INFINITY, 0f64), |(l, h), p| {
            (l.min(p.floats_per_layer), h.max(p.floats_per_layer))
        });
        series.push(Series::dashed(
            format!("paper, power law at lags > 1000: {paper}%"),
            vec![(lo, paper / 100.0), (hi, paper / 100.0)],
        ));
        panels.push(Panel {
            title: format!("{cell}: accuracy at lags > 1000 against state (seed 0, Wilson 95%)"),
            x_label: "recurrent state per layer (floats)".into(),
            y_label: "accuracy at lags > 1000".into(),
            log_x: true,
            log_y: false,
            series,
        });
        s.push('\n');
    }
    if !panels.is_empty() {
        panels_plot(&out.join("acc_vs_state_lag.png"), &panels)?;
        s.push_str("Plot: `acc_vs_state_lag.png`.\n\n");
    }
    Ok(s)
}

/// What makes two lags cells one task at two widths: (L, K, the gaps' exponent a).
fn task_key(c: &CellResult) -> (usize, usize, Option<f64>) {
    (
        c.seq_len(),
        c.num_kv_pairs(),
        c.task.mqar().map(|m| m.power_a),
    )
}

/// The widths of the lags cells of `base`'s task (the same L, K and gaps), and every seed-0
/// point of theirs at lags > 1000.
fn size_points(rep: &RecallReport, base: &CellResult) -> (Vec<usize>, Vec<SizePoint>) {
    let same_task = |c: &&CellResult| c.section == Section::Lags && task_key(c) == task_key(base);
    let mut widths: Vec<usize> = rep
        .cells
        .iter()
        .filter(same_task)
        .map(|c| c.d_model)
        .collect();
    widths.sort_unstable();
    widths.dedup();
    let points = rep
        .cells
        .iter()
        .filter(same_task)
        .filter_map(|c| {
            let b = c.seeds.iter().find(|r| r.seed == 0)?.buckets.get(LONG)?;
            Some(SizePoint {
                mixer: c.mixer.clone(),
                d_model: c.d_model,
                floats_per_layer: c.state_floats as f64 / layers_of(rep, c).max(1) as f64,
                correct: b.correct,
                answers: b.n,
            })
        })
        .collect();
    (widths, points)
}

/// One memory's row of the size-trend table (its points, the fit's slope and the state it
/// puts at the paper's accuracy) and its series, `pts` in order of state.
fn size_row(m: &str, pts: &[&SizePoint], paper_long: f64) -> (String, Series) {
    let acc = SizePoint::accuracy;
    let xy: Vec<(f64, f64)> = pts.iter().map(|p| (p.floats_per_layer, acc(p))).collect();
    let bars = pts
        .iter()
        .map(|p| {
            let (lo, hi) = wilson(p.correct, p.answers);
            (p.floats_per_layer, lo, hi)
        })
        .collect();
    let cells: Vec<String> = pts
        .iter()
        .map(|p| {
            let (state, a) = (p.floats_per_layer, pct(acc(p)));
            format!("{state:.0}: {a} ({}/{})", p.correct, p.answers)
        })
        .collect();
    let (slope, mut needed) = match log_fit(&xy) {
        Some((a, b)) if b > 0.0 => (
            format!("{:+.1} points", 100.0 * b),
            format!("{:.2e}", 10f64.powf((paper_long / 100.0 - a) / b)),
        ),
        Some((_, b)) => (
            format!("{:+.1} points", 100.0 * b),
            "never (does not rise)".into(),
        ),
        None => ("-".into(), "-".into()),
    };
    // a measured point at or above the paper's number answers without the fit
    if let Some(p) = pts.iter().find(|p| 100.0 * acc(p) >= paper_long) {
        needed = format!("reached at {:.0} (measured)", p.floats_per_layer);
    }
    let row = format!("| {m} | {} | {slope} | {needed} |\n", cells.join("; "));
    (row, Series::line(m, xy).with_bars(bars))
}

/// Whether the claim's lead at lags > 1000 grows or shrinks with width (issue #39, item 7): at
/// each width of `widths`, the claim's seed-0 accuracy minus the baseline's and minus the best
/// ablation rung's at that width, among the rungs measured at every width the claim is (a
/// rung run at one width only, such as the oracle at d128, would make the trend compare one
/// rung with another). One run a point, so no SE: a trend, not a verdict.
fn lead_by_width(rep: &RecallReport, widths: &[usize], points: &[SizePoint]) -> String {
    let (Some(claim), Some(base)) = (
        rep.preset.with_role(Role::Claim).first().copied(),
        rep.preset.with_role(Role::Baseline).first().copied(),
    ) else {
        return String::new();
    };
    let ablations = rep.preset.with_role(Role::Ablation);
    let acc = |p: &SizePoint| 100.0 * p.accuracy();
    let at = |w: usize, m: &str| points.iter().find(|p| p.d_model == w && p.mixer == m);
    let claim_points: Vec<&SizePoint> = widths.iter().filter_map(|&w| at(w, claim)).collect();
    let everywhere = |m: &str| claim_points.iter().all(|c| at(c.d_model, m).is_some());
    let mut parts = Vec::new();
    let mut leads = Vec::new();
    for &c in &claim_points {
        let w = c.d_model;
        let mut said = vec![];
        if let Some(b) = at(w, base) {
            said.push(format!("{:+.1} over {base}", acc(c) - acc(b)));
        }
        let best = points
            .iter()
            .filter(|p| p.d_model == w && ablations.contains(&p.mixer.as_str()))
            .filter(|p| everywhere(&p.mixer))
            .max_by(|a, b| acc(a).total_cmp(&acc(b)));
        if let Some(a) = best {
            said.push(format!("{:+.1} over {}", acc(c) - acc(a), a.mixer));
            leads.push(acc(c) - acc(a));
        }
        if !said.is_empty() {
            parts.push(format!("d_model {w}: {}", said.join(", ")));
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    let trend = if leads.len() < 2 {
        ""
    } else if leads.windows(2).all(|p| p[1] > p[0]) {
        " Against the best rung, it grows with width."
    } else if leads.windows(2).all(|p| p[1] < p[0]) {
        " Against the best rung, it shrinks with width."
    } else {
        " Against the best rung, it does not move one way with width."
    };
    format!(
        "\n{claim}'s lead at lags > 1000, in points (seed 0, one run a point, no SE; the best \
         ablation rung at each width among those measured at every width): {}.{trend}\n",
        parts.join("; ")
    )
}

/// Layers of the model of (cell, mixer) `c`.
fn layers_of(rep: &RecallReport, c: &CellResult) -> usize {
    config_of(rep, c).map_or(1, |cfg| cfg.model.layers)
}

/// Least squares y = a + b·log10(x) over `xy` (x > 0); None with fewer than two distinct x.
pub(super) fn log_fit(xy: &[(f64, f64)]) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = xy
        .iter()
        .filter(|(x, y)| *x > 0.0 && y.is_finite())
        .map(|&(x, y)| (x.log10(), y))
        .collect();
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return None;
    }
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{lag_cell, seed_with, RUNGS};
    use super::super::Preset;
    use super::*;

    /// The answer paragraph says what the paired verdicts at lags > 1000 say: order when a
    /// single order recalls more than the router, routing when the router beats both single
    /// orders, neither within 2 SE, open without the learned order; then the oracle.
    #[test]
    fn the_answer_follows_the_paired_verdicts() {
        let preset = Preset::from_toml(RUNGS, "t").unwrap();
        // correct answers at lags > 1000, out of 100, at seeds 0-2
        let rung = |mixer: &str, far: [usize; 3]| {
            let seeds = (0..3)
                .map(|k| {
                    let mut r = seed_with((far[k], 100), &[]);
                    r.seed = k as u64;
                    r
                })
                .collect();
            let mut c = lag_cell("vort", 64, seeds);
            (c.cell, c.mixer) = ("c".into(), mixer.into());
            c
        };
        let answer_of = |vort, fixed, learned: Option<[usize; 3]>| {
            let mut cells = vec![rung("vort", vort), rung("power-law-0.9", fixed)];
            cells.extend(learned.map(|l| rung("learned-order", l)));
            cells.push(rung("oracle", [90, 91, 93]));
            let rep = RecallReport {
                preset: preset.clone(),
                cells,
                gate_passed: None,
                wall_s: 0.0,
                reused: 0,
                pending: Vec::new(),
            };
            let rungs: Vec<&CellResult> = rep.cells.iter().collect();
            answer(&rep, "c", &rungs)
        };
        // the fixed order 30, 31, 31 points above VORT: mean 30.7, SE 0.33
        let a = answer_of([30, 32, 34], [60, 63, 65], Some([31, 33, 34]));
        assert!(a.contains("**order**"), "{a}");
        // the fixtures have no sweep: every compared rung ran one rate, and the answer says
        // which of them were behind (the router here), level and ahead at that rate
        assert!(
            a.contains(
                "so a better one may lie beyond): behind at that rate, so at its own rate it \
                 may close the gap: vort (one rate); not distinguishable at that rate: \
                 learned-order (one rate); ahead at that rate, so a wider sweep keeps that \
                 rate or takes one better on validation: power-law-0.9 (one rate)."
            ),
            "{a}"
        );
        for said in [
            "power-law-0.9 − vort = +30.7 ± 0.3 points (n = 3)",
            "(oracle) recalls 91.3%, higher than the router",
        ] {
            assert!(a.contains(said), "{a}");
        }
        let a = answer_of([60, 62, 64], [30, 33, 35], Some([40, 41, 45]));
        assert!(a.contains("**routing**"), "{a}");
        assert!(
            a.contains(
                "beyond): behind at that rate, so at its own rate it may close the gap: \
                 power-law-0.9 (one rate), learned-order (one rate); ahead at that rate, so a \
                 wider sweep keeps that rate or takes one better on validation: vort (one \
                 rate)."
            ),
            "{a}"
        );
        // differences −1, +1, +1 and +1, −1, 0: within 2 SE
        let a = answer_of([50, 52, 54], [49, 53, 55], Some([51, 51, 54]));
        assert!(a.contains("**neither**"), "{a}");
        assert!(
            a.contains(
                "beyond): not distinguishable at that rate: vort (one rate), power-law-0.9 \
                 (one rate), learned-order (one rate)."
            ),
            "{a}"
        );
        let a = answer_of([60, 62, 64], [30, 33, 35], None);
        assert!(
            a.contains(
                "**open**: the learned router recalls the long lags better than the \
                        best fixed order"
            ),
            "{a}"
        );
    }

    /// A rung whose validation chose the smallest or largest rate it swept is named in the
    /// answer as not yet at its own rate, as is one that ran one rate; a bracketed choice is
    /// not (the d128 grid 3e-3, 1e-2, 3e-2 chose its smallest rate for 8 of 12 rungs).
    #[test]
    fn a_choice_at_the_edge_of_its_sweep_is_not_called_the_rungs_own_rate() {
        let swept = |mixer: &str, lrs: &[f64], best: f64| {
            let mut c = lag_cell("vort", 64, vec![seed_with((50, 100), &[])]);
            c.mixer = mixer.into();
            c.sweep = lrs
                .iter()
                .map(|&lr| {
                    let mut r = seed_with((50, 100), &[]);
                    r.lr = lr;
                    r
                })
                .collect();
            c.best_lr = best;
            c
        };
        let v = swept("vort", &[1e-3, 3e-3, 1e-2], 1e-3);
        let fixed = swept("power-law-0.9", &[1e-2, 1e-3, 3e-3], 3e-3);
        let learned = swept("learned-order", &[3e-3, 1e-2, 3e-2, 1e-1], 1e-1);
        assert_eq!(v.sweep_place(), SweepPlace::Smallest);
        assert_eq!(
            fixed.sweep_place(),
            SweepPlace::Inside,
            "listed out of order"
        );
        assert_eq!(learned.sweep_place(), SweepPlace::Largest);
        assert_eq!(swept("x", &[3e-3], 3e-3).sweep_place(), SweepPlace::OneRate);
        assert_eq!(swept("x", &[], 3e-3).sweep_place(), SweepPlace::OneRate);
        let pair = |c: &CellResult| compare_pairs(&long_scores(c), &long_scores(&v));
        let singles = [
            ("the best fixed order", &fixed, pair(&fixed)),
            (LEARNED, &learned, pair(&learned)),
        ];
        // both single orders recall more than the claim: the claim is behind
        let note = unbracketed_note(&v, &singles, &[Some(true), Some(true)]);
        assert!(
            note.contains(
                "behind at that rate, so at its own rate it may close the gap: vort (the \
                 smallest rate swept); ahead at that rate, so a wider sweep keeps that rate \
                 or takes one better on validation: learned-order (the largest rate swept)."
            ),
            "{note}"
        );
        assert!(!note.contains("power-law-0.9"), "{note}");
        // every choice bracketed: nothing to say
        let note = unbracketed_note(&fixed, &singles[..1], &[None]);
        assert_eq!(note, "", "{note}");
    }

    /// The size trend states the claim's lead over the baseline and over the best ablation
    /// rung at each width (among the rungs at every width), and which way it moves; a
    /// measured point at the paper's number needs no fit.
    #[test]
    fn the_size_trend_states_the_lead_by_width() {
        let preset = Preset::from_toml(
            &RUNGS.replace(
                "[[cells]]",
                "[[mixers]]\nname = \"exponential\"\nrole = \"baseline\"\n\
                 model = { mixer = { kind = \"exponential\" } }\n[[cells]]",
            ),
            "t",
        )
        .unwrap();
        let rep = RecallReport {
            preset,
            cells: Vec::new(),
            gate_passed: None,
            wall_s: 0.0,
            reused: 0,
            pending: Vec::new(),
        };
        // (mixer, d_model, correct of 100 at lags > 1000)
        let points: Vec<SizePoint> = [
            ("vort", 64, 16),
            ("exponential", 64, 13),
            ("power-law-0.9", 64, 12),
            ("vort", 128, 33),
            ("exponential", 128, 21),
            ("power-law-0.9", 128, 62),
            // ahead of every rung, but at one width only: not the trend's rung
            ("learned-order", 128, 70),
            ("vort", 256, 93),
            ("exponential", 256, 4),
            ("power-law-0.9", 256, 88),
        ]
        .into_iter()
        .map(|(m, w, c)| SizePoint {
            mixer: m.into(),
            d_model: w,
            floats_per_layer: (w * w) as f64,
            correct: c,
            answers: 100,
        })
        .collect();
        let s = lead_by_width(&rep, &[64, 128, 256], &points);
        assert!(
            s.contains(
                "d_model 64: +3.0 over exponential, +4.0 over power-law-0.9; d_model 128: \
                 +12.0 over exponential, -29.0 over power-law-0.9; d_model 256: +89.0 over \
                 exponential, +5.0 over power-law-0.9. Against the best rung, it does not \
                 move one way with width."
            ),
            "{s}"
        );
        let grows = lead_by_width(&rep, &[64, 256], &points);
        assert!(grows.contains("it grows with width"), "{grows}");
        // vort reaches 79.4% at its d256 point: read off, not fitted
        let vort: Vec<&SizePoint> = points.iter().filter(|p| p.mixer == "vort").collect();
        let (row, _) = size_row("vort", &vort, 79.4);
        assert!(row.ends_with("| reached at 65536 (measured) |\n"), "{row}");
        let exp: Vec<&SizePoint> = points.iter().filter(|p| p.mixer == "exponential").collect();
        let (row, _) = size_row("exponential", &exp, 79.4);
        assert!(row.ends_with("| never (does not rise) |\n"), "{row}");
    }

    #[test]
    fn log_fit_recovers_a_line_in_log_state() {
        // y = 0.1 + 0.2 log10(x) at x = 10, 100, 1000: a = 0.1, b = 0.2
        let (a, b) = log_fit(&[(10.0, 0.3), (100.0, 0.5), (1000.0, 0.7)]).unwrap();
        assert!(
            (a - 0.1).abs() < 1e-12 && (b - 0.2).abs() < 1e-12,
            "{a} {b}"
        );
        // reaching 0.794 needs log10(x) = (0.794 - 0.1) / 0.2 = 3.47
        let x = 10f64.powf((0.794 - a) / b);
        assert!((x.log10() - 3.47).abs() < 1e-9);
        assert!(log_fit(&[(10.0, 0.3)]).is_none());
        assert!(log_fit(&[(10.0, 0.3), (10.0, 0.4)]).is_none());
    }
}
