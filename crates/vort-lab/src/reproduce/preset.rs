//! The preset: the one TOML schema of every experiment (recall, books, synthetic): a base run
//! config, mixers, cells, seeds and learning rates, and the run config of each (cell, mixer,
//! learning rate, seed). The shipped presets are `configs/{recall,books,synthetic}/*.toml`,
//! embedded in the binary.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::train::{RunConfig, TrainError};

/// The embedded presets: (experiment, scale, TOML text).
pub const PRESETS: [(&str, &str, &str); 12] = [
    (
        "recall",
        "quick",
        include_str!("../../../../configs/recall/quick.toml"),
    ),
    (
        "recall",
        "medium",
        include_str!("../../../../configs/recall/medium.toml"),
    ),
    (
        "recall",
        "full",
        include_str!("../../../../configs/recall/full.toml"),
    ),
    (
        "exp2",
        "quick",
        include_str!("../../../../configs/exp2/quick.toml"),
    ),
    (
        "ruler",
        "quick",
        include_str!("../../../../configs/ruler/quick.toml"),
    ),
    (
        "ruler",
        "medium",
        include_str!("../../../../configs/ruler/medium.toml"),
    ),
    (
        "books",
        "quick",
        include_str!("../../../../configs/books/quick.toml"),
    ),
    (
        "books",
        "medium",
        include_str!("../../../../configs/books/medium.toml"),
    ),
    (
        "books",
        "full",
        include_str!("../../../../configs/books/full.toml"),
    ),
    (
        "synthetic",
        "quick",
        include_str!("../../../../configs/synthetic/quick.toml"),
    ),
    (
        "synthetic",
        "medium",
        include_str!("../../../../configs/synthetic/medium.toml"),
    ),
    (
        "synthetic",
        "full",
        include_str!("../../../../configs/synthetic/full.toml"),
    ),
];

/// Whether `name` is the name of an embedded preset of `experiment`.
pub fn is_embedded(experiment: &str, name: &str) -> bool {
    PRESETS
        .iter()
        .any(|(e, n, _)| *e == experiment && *n == name)
}

/// The section of the recall report a cell belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// Softmax attention must reach the gate accuracy here, or the stack is broken.
    Gate,
    /// Zoology's (L, K) grid: accuracy against width and state size.
    Grid,
    /// The paper's claim: accuracy by lag bucket at long L.
    Lags,
    /// An experiment without sections (books, synthetic: the cell is the task).
    #[default]
    None,
}

/// What a mixer is in the experiment: the verdicts key on these roles, which the preset
/// declares (`role = "gate"`), never on the mixers' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The sanity baseline (softmax attention): it must solve the gate cell, and a cell
    /// compares memories only where it learned.
    Gate,
    /// The memory under test (VORT): every verdict is about it.
    Claim,
    /// A memory the paper compares the claim with (the exponentials), in preset order.
    Baseline,
    /// Beyond the paper: the claim without one of its parts (the fixed power law, no routing);
    /// a difference is stated, no claim is checked.
    Ablation,
    /// Reported, in no verdict.
    #[default]
    Other,
}

/// One mixer: a name for the report, its role in the verdicts, and a patch of the run config.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MixerSpec {
    /// Name in the report and the run directory.
    pub name: String,
    /// Its role in the verdicts (default: none).
    #[serde(default)]
    pub role: Role,
    /// `[model]` fields of this mixer.
    #[serde(default)]
    pub model: toml::Table,
    /// `[train]` fields of this mixer.
    #[serde(default)]
    pub train: toml::Table,
    /// Learning rates swept for this mixer (default: the preset's; a cell's own list wins).
    pub lrs: Option<Vec<f64>>,
    /// Seeds of this mixer (default: the preset's; a cell's own list wins), e.g. one seed for
    /// a costly baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<u64>>,
}

/// One cell of the experiment.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CellSpec {
    /// Name in the report and the run directory.
    pub name: String,
    /// Report section (recall).
    #[serde(default)]
    pub section: Section,
    /// `[task]` fields (seq_len, num_kv_pairs, power_a, ...).
    #[serde(default)]
    pub task: toml::Table,
    /// `[model]` fields (d_model, ...).
    #[serde(default)]
    pub model: toml::Table,
    /// `[train]` fields (steps, ...).
    #[serde(default)]
    pub train: toml::Table,
    /// The mixers run in this cell (empty: all).
    #[serde(default)]
    pub mixers: Vec<String>,
    /// Seeds (default: the preset's).
    pub seeds: Option<Vec<u64>>,
    /// Seeds of single mixers in this cell, winning over every other list, e.g.
    /// `{ softmax = [0] }`: the sanity gate at one seed in a 3-seed cell.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub seeds_by_mixer: BTreeMap<String, Vec<u64>>,
    /// Learning rates swept (default: the preset's).
    pub lrs: Option<Vec<f64>>,
    /// Learning rates swept for single mixers in this cell, winning over every other list,
    /// e.g. `{ "power-law-0.95" = [1e-3, 3e-3] }`: one rung's sweep where the cell runs one
    /// rate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lrs_by_mixer: BTreeMap<String, Vec<f64>>,
    /// Lengths at which every trained model of the cell is also scored, streamed in pieces of
    /// the training length with the state carried, node tables certified for the length, and
    /// softmax restricted to a window of the training length (length extrapolation; the gaps,
    /// so the lags, grow with the length).
    #[serde(default)]
    pub extrapolate: Vec<usize>,
    /// Test sequences per extrapolation length.
    #[serde(default = "default_extrapolate_examples")]
    pub extrapolate_examples: usize,
    /// Write the first seed's trained weights at the rate its sweep chose
    /// (`weights.safetensors`, no optimizer state) beside its config, for release, as soon as
    /// the sweep has chosen: `vort eval --run DIR --data F` re-scores them.
    #[serde(default)]
    pub release_weights: bool,
    /// An ablation ladder (recall, issue #39): the report ranks this cell's mixers by
    /// accuracy at lags > 1000, pairs each with the claim, and draws the size trend over the
    /// cells of the same task at other widths.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ladder: bool,
}

fn default_extrapolate_examples() -> usize {
    16
}

/// One run of a preset that sweeps no rate (books, synthetic): its mixer's name (the run
/// directory `runs/<cell>/<name>/seed<k>` and the report's row) and role, and its config.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedRun {
    /// The mixer's name in the preset.
    pub name: String,
    /// The mixer's role in the verdicts.
    pub role: Role,
    /// The run config.
    pub config: RunConfig,
}

impl NamedRun {
    /// A run named by its mixer's kind, in no role (the synthetic experiment, whose rows are
    /// the kinds).
    pub fn by_kind(config: RunConfig) -> NamedRun {
        NamedRun {
            name: config.model.mixer.kind().to_string(),
            role: Role::Other,
            config,
        }
    }
}

/// An experiment (one preset file).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// Name ("quick", ...).
    pub name: String,
    /// One paragraph for the report: what this preset is and what it costs.
    pub description: String,
    /// Seeds of every cell (the first one also sweeps the learning rate).
    pub seeds: Vec<u64>,
    /// Learning rates swept on the first seed.
    pub lrs: Vec<f64>,
    /// Accuracy the gate mixer must reach in the gate cell (recall).
    #[serde(default)]
    pub gate_accuracy: f64,
    /// A test accuracy from which a seed counts as having learned the task (recall).
    #[serde(default)]
    pub learned_accuracy: f64,
    /// Books: every model (every seed with weights or a checkpoint) also streams every test
    /// book whole, the state carried and reset (`vort eval --whole-books`; the report's
    /// whole-books section, its paired verdicts, and its figure).
    #[serde(default)]
    pub whole_books: bool,
    /// RULER: the lengths (bytes) every trained model is scored at, one table column each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ruler_lengths: Vec<usize>,
    /// RULER: samples per (task, length).
    #[serde(default)]
    pub ruler_samples: usize,
    /// The base run config (a `[base.task]`, `[base.model]`, `[base.train]`).
    pub base: toml::Table,
    /// The mixers.
    pub mixers: Vec<MixerSpec>,
    /// The cells.
    pub cells: Vec<CellSpec>,
}

fn merge(into: &mut toml::Table, patch: &toml::Table) {
    for (k, v) in patch {
        match (into.get_mut(k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

impl Preset {
    /// The names of the mixers of `role`, in preset order.
    pub fn with_role(&self, role: Role) -> Vec<&str> {
        self.mixers
            .iter()
            .filter(|m| m.role == role)
            .map(|m| m.name.as_str())
            .collect()
    }

    /// Parses a preset (unknown fields are errors) and resolves every run config once, so a
    /// bad field fails before anything is trained.
    ///
    /// # Errors
    /// [`TrainError::Config`] naming the file and the field.
    pub fn from_toml(text: &str, origin: &str) -> Result<Preset, TrainError> {
        let bad = |message: String| TrainError::Config {
            path: origin.into(),
            message,
        };
        let p: Preset = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if p.seeds.is_empty() || p.lrs.is_empty() || p.cells.is_empty() || p.mixers.is_empty() {
            return Err(bad("seeds, lrs, cells and mixers must be non-empty".into()));
        }
        let lists = p
            .cells
            .iter()
            .filter_map(|c| c.lrs.as_ref())
            .chain(p.mixers.iter().filter_map(|m| m.lrs.as_ref()))
            .chain(p.cells.iter().flat_map(|c| c.lrs_by_mixer.values()))
            .chain([&p.lrs]);
        for l in lists {
            if l.is_empty() || l.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
                return Err(bad(format!(
                    "learning-rate lists must be non-empty and positive: {l:?}"
                )));
            }
        }
        for c in &p.cells {
            if c.seeds.as_ref().is_some_and(Vec::is_empty) {
                return Err(bad(format!("cell {}: seeds must be non-empty", c.name)));
            }
            for (m, seeds) in &c.seeds_by_mixer {
                if seeds.is_empty() || !p.mixers_of(c).any(|x| &x.name == m) {
                    return Err(bad(format!(
                        "cell {}: seeds_by_mixer.{m} must be non-empty and name a mixer of \
                         the cell",
                        c.name
                    )));
                }
            }
            if let Some(m) = c
                .lrs_by_mixer
                .keys()
                .find(|m| !p.mixers_of(c).any(|x| &x.name == *m))
            {
                return Err(bad(format!(
                    "cell {}: lrs_by_mixer.{m} must name a mixer of the cell",
                    c.name
                )));
            }
        }
        for m in &p.mixers {
            if m.seeds.as_ref().is_some_and(Vec::is_empty) {
                return Err(bad(format!("mixer {}: seeds must be non-empty", m.name)));
            }
        }
        for cell in &p.cells {
            for m in &cell.mixers {
                if !p.mixers.iter().any(|x| &x.name == m) {
                    return Err(bad(format!("cell {}: unknown mixer `{m}`", cell.name)));
                }
            }
            for mixer in p.mixers_of(cell) {
                p.run_config(cell, mixer, p.lrs[0], p.seeds[0])
                    .map_err(|e| bad(format!("cell {} / mixer {}: {e}", cell.name, mixer.name)))?;
            }
        }
        Ok(p)
    }

    /// The embedded preset `name` ("quick", "medium", "full") of `experiment` ("recall",
    /// "books", "synthetic"; "exp2" has "quick" until its pilots choose a setting).
    ///
    /// # Errors
    /// An unknown name; a preset that does not parse (a bug, caught by the tests).
    pub fn embedded(experiment: &str, name: &str) -> Result<Preset, TrainError> {
        let (_, _, text) = PRESETS
            .iter()
            .find(|(e, n, _)| *e == experiment && *n == name)
            .ok_or_else(|| TrainError::Config {
                path: format!("{experiment}/{name}"),
                message: "unknown preset (quick|medium|full of recall|books|synthetic; quick of \
                          exp2; quick|medium of ruler)"
                    .into(),
            })?;
        Self::from_toml(text, &format!("configs/{experiment}/{name}.toml"))
    }

    /// The task of the base run config (`[base.task]`'s kind; a cell may change its settings,
    /// not its kind).
    pub fn task_kind(&self) -> crate::tasks::TaskKind {
        self.base
            .get("task")
            .and_then(|t| t.get("kind"))
            .and_then(|k| k.as_str())
            .and_then(|k| k.parse().ok())
            .unwrap_or_default()
    }

    /// Every run of the preset in order (cell, mixer, the preset's first learning rate, seed),
    /// for the experiments that sweep no rate (books, synthetic).
    ///
    /// # Errors
    /// A field the run config refuses.
    pub fn unswept_runs(&self) -> Result<Vec<RunConfig>, TrainError> {
        Ok(self.named_runs()?.into_iter().map(|r| r.config).collect())
    }

    /// [`Preset::unswept_runs`] with each run's mixer name and role: the books experiment
    /// keys its run directories and report rows by the name, so that several mixers of one
    /// kind (the ablation ladder's fixed orders, learned order, oracle) stay apart.
    ///
    /// # Errors
    /// A field the run config refuses.
    pub fn named_runs(&self) -> Result<Vec<NamedRun>, TrainError> {
        let mut runs = Vec::new();
        for cell in &self.cells {
            for mixer in self.mixers_of(cell) {
                let lr = self.lrs_of(cell, mixer)[0];
                for seed in self.seeds_of(cell, mixer) {
                    runs.push(NamedRun {
                        name: mixer.name.clone(),
                        role: mixer.role,
                        config: self.run_config(cell, mixer, lr, seed)?,
                    });
                }
            }
        }
        Ok(runs)
    }

    /// Narrows the preset to the cells named in `names` (in the preset's order), and says so
    /// at the top of its description: the report of a narrowed preset is partial, and the
    /// next run of the whole preset (which reuses these runs) replaces it.
    ///
    /// # Errors
    /// A name no cell has (the message lists the cells).
    pub fn only(&mut self, names: &[String]) -> Result<(), String> {
        if let Some(bad) = names
            .iter()
            .find(|n| !self.cells.iter().any(|c| &c.name == *n))
        {
            let all: Vec<&str> = self.cells.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "no cell {bad:?} in the {} preset (cells: {})",
                self.name,
                all.join(", ")
            ));
        }
        self.cells.retain(|c| names.contains(&c.name));
        self.description = format!(
            "**Partial run** (`--cell {}`): only these cells of the {} preset; the run of the \
             whole preset replaces this report. {}",
            names.join(" --cell "),
            self.name,
            self.description
        );
        Ok(())
    }

    /// The learning rates swept for (cell, mixer): the cell's list for this mixer, else the
    /// cell's, else the mixer's, else the preset's.
    pub fn lrs_of(&self, cell: &CellSpec, mixer: &MixerSpec) -> Vec<f64> {
        cell.lrs_by_mixer
            .get(&mixer.name)
            .cloned()
            .or_else(|| cell.lrs.clone())
            .or_else(|| mixer.lrs.clone())
            .unwrap_or_else(|| self.lrs.clone())
    }

    /// The seeds of (cell, mixer): the cell's list for this mixer, else the cell's, else the
    /// mixer's, else the preset's.
    pub fn seeds_of(&self, cell: &CellSpec, mixer: &MixerSpec) -> Vec<u64> {
        cell.seeds_by_mixer
            .get(&mixer.name)
            .cloned()
            .or_else(|| cell.seeds.clone())
            .or_else(|| mixer.seeds.clone())
            .unwrap_or_else(|| self.seeds.clone())
    }

    /// The mixers of a cell, in the order they run: the cell's list when it has one (so a
    /// cell runs its most important comparisons first), else every mixer of the preset.
    pub fn mixers_of<'a>(&'a self, cell: &'a CellSpec) -> impl Iterator<Item = &'a MixerSpec> {
        let listed = cell
            .mixers
            .iter()
            .filter_map(|n| self.mixers.iter().find(|m| &m.name == n));
        let all = self.mixers.iter().filter(|_| cell.mixers.is_empty());
        listed.chain(all)
    }

    /// The run config of (cell, mixer) at learning rate `lr` and `seed`: base, then the cell's
    /// patch, then the mixer's.
    ///
    /// # Errors
    /// A field the run config refuses.
    pub fn run_config(
        &self,
        cell: &CellSpec,
        mixer: &MixerSpec,
        lr: f64,
        seed: u64,
    ) -> Result<RunConfig, TrainError> {
        let mut t = self.base.clone();
        let section = |name: &str, patch: &toml::Table| {
            let mut x = toml::Table::new();
            x.insert(name.into(), toml::Value::Table(patch.clone()));
            x
        };
        merge(&mut t, &section("task", &cell.task));
        merge(&mut t, &section("model", &cell.model));
        merge(&mut t, &section("train", &cell.train));
        merge(&mut t, &section("model", &mixer.model));
        merge(&mut t, &section("train", &mixer.train));
        let mut lr_patch = toml::Table::new();
        lr_patch.insert("lr".into(), toml::Value::Float(lr));
        merge(&mut t, &section("train", &lr_patch));
        t.insert("seed".into(), toml::Value::Integer(seed as i64));
        let text = toml::to_string(&t).map_err(|e| TrainError::Serialise(e.to_string()))?;
        RunConfig::from_toml(&text, &format!("{}/{}", cell.name, mixer.name))
    }

    /// Runs in the order they are trained (sweep first, then the other seeds), for the
    /// progress count.
    pub(crate) fn run_count(&self) -> usize {
        self.units()
            .into_iter()
            .map(|(c, m)| self.unit_run_count(c, m))
            .sum()
    }

    /// The (cell, mixer) pairs, in the order the report lists them: the units a `--shard`
    /// deals out ([`Shard`](super::Shard)).
    pub fn units(&self) -> Vec<(&CellSpec, &MixerSpec)> {
        self.cells
            .iter()
            .flat_map(|c| self.mixers_of(c).map(move |m| (c, m)))
            .collect()
    }

    /// How many runs (cell, mixer) trains: its sweep on the first seed, then the other seeds.
    pub(crate) fn unit_run_count(&self, cell: &CellSpec, mixer: &MixerSpec) -> usize {
        self.lrs_of(cell, mixer).len() + self.seeds_of(cell, mixer).len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vort::Mixer;

    #[test]
    fn every_embedded_preset_resolves() {
        for (experiment, name, _) in PRESETS {
            let p = Preset::embedded(experiment, name).unwrap();
            assert!(p.run_count() > 0, "{experiment}/{name}");
            assert_eq!(
                p.cells.iter().any(|c| c.section == Section::Gate),
                experiment == "recall",
                "{experiment}/{name}: a recall preset has a gate cell, the others none"
            );
            if experiment == "ruler" {
                assert_eq!(p.task_kind(), crate::tasks::TaskKind::Ruler);
                assert!(!p.ruler_lengths.is_empty() && p.ruler_samples > 0);
            }
            if experiment == "exp2" {
                // its gate is the softmax run of each lags cell
                assert_eq!(p.task_kind(), crate::tasks::TaskKind::LabelCopy);
                assert!(p.cells.iter().all(|c| c.section == Section::Lags));
                assert_eq!(p.with_role(Role::Gate), ["softmax"]);
            }
        }
    }

    /// The README's single-run example config is a valid MQAR run.
    #[test]
    fn example_config_is_valid() {
        let c = RunConfig::from_toml(
            include_str!("../../../../configs/example-mqar.toml"),
            "configs/example-mqar.toml",
        )
        .unwrap();
        assert_eq!(c.task.kind(), crate::tasks::TaskKind::Mqar);
        assert_eq!(c.model.short_conv, 4);
    }

    /// The top of the tests' tiny presets: names, seeds 0-1, one rate, a 64-token MQAR task.
    const TINY_HEAD: &str = r#"
name = "t"
description = "d"
seeds = [0, 1]
lrs = [1e-3]
gate_accuracy = 0.99
learned_accuracy = 0.5
[base.task]
kind = "mqar"
seq_len = 64
vocab_size = 256
"#;

    #[test]
    fn cell_and_mixer_patches_apply_in_order() {
        let text = TINY_HEAD.to_string()
            + r#"[base.model]
d_model = 32
memory = "vort"
[[mixers]]
name = "softmax"
model = { memory = "softmax", qk_scale_init = 4.0 }
[[cells]]
name = "gate"
section = "gate"
task = { num_kv_pairs = 8 }
model = { d_model = 48, qk_scale_init = 1.0 }
"#;
        let p = Preset::from_toml(&text, "t").unwrap();
        let c = p.run_config(&p.cells[0], &p.mixers[0], 3e-3, 1).unwrap();
        assert_eq!(c.seed, 1);
        assert_eq!(c.train.lr, 3e-3);
        assert_eq!(c.task.mqar().unwrap().num_kv_pairs, 8);
        assert_eq!(c.model.d_model, 48);
        // the mixer's patch comes last
        assert_eq!(c.model.qk_scale_init, 4.0);
        assert_eq!(c.model.mixer, Mixer::Softmax { window: 0 });
        // a bad field fails when the preset is read, naming the cell
        let bad = text.replace("num_kv_pairs = 8", "num_kv_pairs = 80");
        let e = Preset::from_toml(&bad, "t").unwrap_err().to_string();
        assert!(e.contains("gate") && e.contains("num_kv_pairs"), "{e}");
    }

    /// Seeds and rates resolve as documented: a cell's list for one mixer, else the cell's,
    /// else the mixer's, else the preset's; a list for a mixer the cell does not run is
    /// refused.
    #[test]
    fn seeds_and_rates_resolve_from_the_most_specific_list() {
        let text = |cell: &str| {
            format!(
                r#"{TINY_HEAD}[[mixers]]
name = "softmax"
model = {{ mixer = {{ kind = "softmax" }} }}
[[mixers]]
name = "vort"
seeds = [3]
[[cells]]
name = "c"
{cell}
"#
            )
        };
        let seeds = |cell: &str| {
            let p = Preset::from_toml(&text(cell), "t").unwrap();
            let of = |m: usize| p.seeds_of(&p.cells[0], &p.mixers[m]);
            (of(0), of(1), p.run_count())
        };
        assert_eq!(seeds(""), (vec![0, 1], vec![3], 3));
        assert_eq!(
            seeds("seeds = [0, 1, 2]"),
            (vec![0, 1, 2], vec![0, 1, 2], 6)
        );
        assert_eq!(
            seeds("seeds = [0, 1, 2]\nseeds_by_mixer = { softmax = [0] }"),
            (vec![0], vec![0, 1, 2], 4)
        );
        // rates resolve the same way
        let p = Preset::from_toml(
            &text("lrs = [3e-3]\nlrs_by_mixer = { vort = [1e-3, 3e-3] }"),
            "t",
        )
        .unwrap();
        assert_eq!(p.lrs_of(&p.cells[0], &p.mixers[0]), vec![3e-3]);
        assert_eq!(p.lrs_of(&p.cells[0], &p.mixers[1]), vec![1e-3, 3e-3]);
        for bad in [
            "lrs_by_mixer = { mixture = [1e-3] }",
            "lrs_by_mixer = { vort = [] }",
            "lrs_by_mixer = { vort = [-1e-3] }",
        ] {
            let e = Preset::from_toml(&text(bad), "t").unwrap_err().to_string();
            assert!(
                e.contains("lrs_by_mixer") || e.contains("learning-rate"),
                "{bad}: {e}"
            );
        }
        for bad in [
            "seeds_by_mixer = { mixture = [0] }",
            "mixers = [\"vort\"]\nseeds_by_mixer = { softmax = [0] }",
            "seeds_by_mixer = { softmax = [] }",
        ] {
            let e = Preset::from_toml(&text(bad), "t").unwrap_err().to_string();
            assert!(e.contains("seeds_by_mixer"), "{bad}: {e}");
        }
    }
}
