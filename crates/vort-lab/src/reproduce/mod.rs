//! `reproduce`: the experiments that put the paper's claims beside measurements, each with its
//! report: `recall` (Zoology's MQAR: the gate, the grid, the lag claim), `exp2` (the paper's
//! entity label copy at uniform lags, on recall's runner), `ruler` (RULER's offline tasks,
//! byte-level, scored past the trained length), `books` (byte-level language modelling, the
//! PG-19 claim) and the superseded synthetic tasks (this module's [`run`]). Each is an
//! [`Experiment`] ([`Recall`], [`Exp2`], [`Ruler`], [`Books`], [`Synthetic`]: what its presets
//! train, a shard, the whole run and its report), which `vort reproduce` dispatches to. The
//! helpers they share are here: the scale, training or reusing a run, and the paper's learned
//! orders.

/// The mixer kinds of the synthetic and books reproductions, in report order (RetNet's fixed
/// decays joined with the recall reproduction).
pub const KINDS: [&str; 5] = ["vort", "power-law", "exponential", "mixture", "softmax"];

pub mod books;
pub mod experiment;
pub mod paper;
pub mod preset;
pub mod recall;
pub mod router;
pub mod ruler;
pub mod runner;
pub mod stats;
mod synthetic;

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::plot::Series;
use crate::train::{RunConfig, TrainError};
pub use experiment::{Books, Exp2, Experiment, Recall, Ruler, Synthetic};
use preset::NamedRun;
pub use synthetic::{paper_number, preset, run, run_plan, Plan, Report, Row};

/// How large a reproduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// About 15-18 minutes on 2 CPU cores (small models, few steps; still T = 2048, lags to
    /// 2000).
    Quick,
    /// About an hour on 2 CPU cores: a wider model and twice the steps of the quick scale
    /// (the largest synthetic reproduction run on the development machine).
    Medium,
    /// Paper-scale settings (hours on 2 cores; meant for a GPU).
    Full,
}

impl Scale {
    /// Lower-case name ("quick", "medium", "full").
    pub fn name(self) -> &'static str {
        match self {
            Scale::Quick => "quick",
            Scale::Medium => "medium",
            Scale::Full => "full",
        }
    }
}

/// One of `count` deterministic slices of an experiment's runs (`--shard i/n`), for running a
/// preset on several machines with no shared state (a SLURM array: `--shard
/// $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT` with `--array=1-N`).
///
/// `index` is 1-based (1 <= index <= count). The units of the preset, in its order, are dealt
/// round-robin: unit k (0-based) belongs to shard `k % count + 1`. For recall a unit is a
/// (cell, mixer) pair: its learning-rate sweep on the first seed and the other seeds at the
/// best rate depend on each other, so one shard owns all of them. For books and synthetic a
/// unit is a run. Two shards never own the same run directory, so no lock is shared between
/// machines; the union of the shards' `runs/` trees is the unsharded run's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based: this is the `index`-th slice.
    pub index: usize,
    /// How many slices.
    pub count: usize,
}

impl Shard {
    /// Whether unit `k` (0-based, in the preset's order) is this shard's.
    pub fn owns(&self, k: usize) -> bool {
        k % self.count + 1 == self.index
    }

    /// The elements of `units` this shard owns, in order.
    pub fn slice<T: Clone>(&self, units: &[T]) -> Vec<T> {
        units
            .iter()
            .enumerate()
            .filter(|(k, _)| self.owns(*k))
            .map(|(_, u)| u.clone())
            .collect()
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `i/n` with 1 <= i <= n (1-based, as SLURM array task ids from `--array=1-N`).
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("{s:?} is not i/n with 1 <= i <= n (i is 1-based, e.g. 1/4)");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// Trains (or reuses) the runs of `runs` (books or synthetic runs) that `shard` owns into
/// `out_dir`, and writes no report (merge the shards' `runs/` trees, then `--report-only`):
/// how many runs it owns, and the directories of those that diverged.
///
/// # Errors
/// As [`runner::train_all`].
pub fn train_shard(
    runs: &[NamedRun],
    shard: Shard,
    out_dir: &Path,
    progress: bool,
) -> Result<(usize, Vec<runner::DivergedRun>), TrainError> {
    let mine = shard.slice(runs);
    std::fs::create_dir_all(out_dir).map_err(|e| crate::train::checkpoint::io(out_dir, e))?;
    let t = train_named(&mine, out_dir, runner::Mode::train(progress))?;
    Ok((mine.len(), t.diverged))
}

fn mean_sd(x: &[f64]) -> (f64, f64) {
    let v: Vec<f64> = x.iter().copied().filter(|v| v.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let sd = if v.len() > 1 {
        (v.iter().map(|a| (a - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
    } else {
        0.0
    };
    (m, sd)
}

/// The run directory of a books or synthetic run of the mixer named `mixer`
/// ([`runner::run_path`]: the task is the cell, no rate is swept). Books names a run by its
/// preset mixer's name, synthetic by its kind ([`NamedRun::by_kind`]).
fn run_path(mixer: &str, c: &RunConfig) -> String {
    runner::run_path(c.task.kind().name(), mixer, None, c.seed)
}

/// Trains (or reuses) the books or synthetic runs `runs` into `out_dir` ([`runner::train_all`]),
/// each in the directory of its name; every finished run's evaluation carries that name as
/// its [`EvalResult::label`], so the report's rows, tables and figures keep mixers of one
/// kind apart.
fn train_named(
    runs: &[NamedRun],
    out_dir: &Path,
    mode: runner::Mode,
) -> Result<runner::TrainedRuns, TrainError> {
    let paths: Vec<(String, RunConfig)> = runs
        .iter()
        .map(|r| (run_path(&r.name, &r.config), r.config.clone()))
        .collect();
    let mut t = runner::train_all(out_dir, &paths, mode)?;
    for (e, &i) in t.results.iter_mut().zip(&t.finished) {
        e.label = Some(runs[i].name.clone());
    }
    Ok(t)
}

/// Fraction of values in each of 40 bins on [0, 1] (a density, to compare token classes).
fn density(v: &[f64]) -> Vec<(f64, f64)> {
    let bins = 40;
    let mut c = vec![0usize; bins];
    for &x in v {
        c[((x * bins as f64) as usize).min(bins - 1)] += 1;
    }
    let n = v.len().max(1) as f64;
    c.iter()
        .enumerate()
        .map(|(i, &k)| ((i as f64 + 0.5) / bins as f64, k as f64 / n))
        .collect()
}

/// The paper's learned orders (docs/DESIGN.md §3): entities ≈ 0.80, function words ≈ 0.35.
pub const PAPER_ALPHA_ENTITY: f64 = 0.80;
/// See [`PAPER_ALPHA_ENTITY`].
pub const PAPER_ALPHA_FUNCTION: f64 = 0.35;

/// `series` (densities of α by class) with the paper's two orders added as dashed vertical
/// lines over the curves' height, coloured like the classes they describe.
pub(crate) fn with_paper_alpha(
    mut series: Vec<Series>,
    entity_color: usize,
    function_color: usize,
) -> Vec<Series> {
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max);
    for (name, x, c) in [
        ("paper: entities", PAPER_ALPHA_ENTITY, entity_color),
        (
            "paper: function words",
            PAPER_ALPHA_FUNCTION,
            function_color,
        ),
    ] {
        series.push(
            Series::dashed(format!("{name} ≈ {x:.2}"), vec![(x, 0.0), (x, top)]).with_color(c),
        );
    }
    series
}

#[cfg(test)]
mod tests {
    use super::Shard;

    /// `i/n` is 1-based with 1 <= i <= n; the n slices of any list partition it, in order.
    #[test]
    fn shards_parse_and_partition() {
        let s: Shard = "2/3".parse().unwrap();
        assert_eq!((s.index, s.count), (2, 3));
        assert_eq!(s.to_string(), "2/3");
        for bad in [
            "0/3", "4/3", "1/0", "3", "a/3", "1/b", "", "/", "-1/3", "1/3/5",
        ] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let units: Vec<usize> = (0..10).collect();
        for n in 1..=12 {
            let mut all: Vec<usize> = (1..=n)
                .flat_map(|i| Shard { index: i, count: n }.slice(&units))
                .collect();
            all.sort_unstable();
            assert_eq!(all, units, "n = {n}");
        }
        assert_eq!(Shard { index: 1, count: 3 }.slice(&units), [0, 3, 6, 9]);
    }
}
