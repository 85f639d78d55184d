//! `vort bench train`: full training steps (forward, backward, clipping, AdamW) of named
//! reference models, timed against an sgemm measured in the same run.
//!
//! Each run reports tokens/s, the model's FLOPs per token ([`flops_per_token`], formula
//! documented there), the model FLOP utilisation MFU = FLOPs/token × tokens/s ÷ same-run
//! sgemm FLOP/s, the average busy cores over the timed steps (process CPU time ÷ wall time,
//! from /proc/self/stat) and the peak resident memory of the run (VmHWM from /proc/self/status,
//! reset before each run through /proc/self/clear_refs). The 1-minute load average is recorded
//! before and after: compare numbers only between quiet runs.
//!
//! The batches are random tokens with the reference model's labelled positions; data content
//! does not change the cost of a step. A step is `vort_lab::train::optimizer_step`, the training
//! loop's own.

use std::time::Instant;

use candle_core::Device;
use candle_nn::VarMap;
use serde::{Deserialize, Serialize};
use vort::vort_math::rng::SplitMix64;

use vort::model::{Model, ModelConfig, ModelError};
use vort::{Mixer, NodeMode, Routing};
use vort_lab::tasks::Batch;
use vort_lab::train::{optimizer, optimizer_step, RunConfig, TrainError};

/// One reference model: its config, vocabulary and which positions carry a loss.
#[derive(Debug, Clone)]
pub struct Reference {
    /// Name in reports (e.g. `books-d256`).
    pub name: String,
    /// The run config (model, sequence length, batch size).
    pub config: RunConfig,
    /// Vocabulary size V.
    pub vocab: usize,
    /// Labelled positions per sequence (the loss and the unembedding run only there);
    /// None: every position (language modelling).
    pub labelled: Option<usize>,
}

/// The memory kinds a reference model is benchmarked with: VORT shared and banks, the fixed
/// power law, the learned exponential, the mixture and softmax (windowed where full attention
/// does not fit).
pub fn mixers(window: usize) -> Vec<(String, ModelConfig)> {
    let base = ModelConfig::default();
    let with = |kind: &str| ModelConfig {
        mixer: Mixer::of_kind(kind).expect("a mixer kind"),
        ..base.clone()
    };
    let mut banks = with("vort");
    if let Mixer::Vort { nodes, .. } = &mut banks.mixer {
        nodes.mode = NodeMode::Banks;
    }
    vec![
        ("vort-shared".into(), with("vort")),
        ("vort-banks".into(), banks),
        ("power-law".into(), with("power-law")),
        ("exponential".into(), with("exponential")),
        ("mixture".into(), with("mixture")),
        (
            if window > 0 {
                format!("softmax-w{window}")
            } else {
                "softmax".into()
            },
            ModelConfig {
                mixer: Mixer::Softmax { window },
                ..base.clone()
            },
        ),
    ]
}

/// The named reference models of the issue, every mixer each:
/// - `mqar-d64`: Zoology's MQAR recipe as the recall presets run it: 2 layers, d_model 64
///   (4 heads × 16, 16 features), a short causal convolution of width 4 before each mixer, no
///   MLP, VORT's router on the entity signal only (the full router's bigram entropy table is
///   V² = 67 M parameters at this vocabulary), T = 256, vocabulary 8192, loss at 16 labelled
///   positions per sequence (MQAR with K = 16), batch 32; full softmax.
/// - `books-d256`: byte level, 4 layers, d_model 256 (4 heads × 64, 64 features), MLP 2×,
///   T = 2048, batch 4, loss at every position; softmax over a 128-byte window.
///
/// `quick` shrinks both to smoke-test sizes (T and batch quartered, one layer fewer).
pub fn references(quick: bool) -> Vec<Reference> {
    let shrink = |x: usize| if quick { (x / 4).max(1) } else { x };
    let mut out = Vec::new();
    let mut add = |name: &str, m: ModelConfig, t: usize, batch: usize, vocab: usize, lab| {
        let mut c = RunConfig::default();
        // only the sequence length of the task matters here: the batches are random
        c.task.seq_len = t;
        c.model = m;
        c.train.batch_size = batch;
        c.train.steps = 1000;
        out.push(Reference {
            name: name.into(),
            config: c,
            vocab,
            labelled: lab,
        });
    };
    for (mixer, mut m) in mixers(0) {
        if let Mixer::Vort { routing, .. } = &mut m.mixer {
            *routing = Routing::EntityOnly;
        }
        let model = ModelConfig {
            d_model: 64,
            layers: if quick { 1 } else { 2 },
            heads: 4,
            head_dim: 16,
            features: 16,
            mlp_mult: 0,
            short_conv: 4,
            ..m
        };
        add(
            &format!("mqar-d64/{mixer}"),
            model,
            shrink(256),
            shrink(32),
            8192,
            Some(16),
        );
    }
    for (mixer, m) in mixers(128) {
        let model = ModelConfig {
            d_model: 256,
            layers: if quick { 3 } else { 4 },
            heads: 4,
            head_dim: 64,
            features: 64,
            mlp_mult: 2,
            ..m
        };
        add(
            &format!("books-d256/{mixer}"),
            model,
            shrink(2048),
            4,
            256,
            None,
        );
    }
    out
}

/// Model FLOPs of one training token (forward + backward = 3 × forward), counted as 2 per
/// multiply-add of the matrix products; elementwise work is left out. Per layer, with
/// d = d_model, H heads of dh, F features, N nodes, chunk L, MLP width m·d:
///
/// ```text
/// projections   4 · 2 d (H dh)                     q, k, v, out
/// features      2 · 2 dh F · H                     φ(q), φ(k) (FAVOR+: a dh × F product)
/// retention     H · [2 L (F + dh + 1) + 4 N F (dh + 1)]
///               intra-chunk scores and mixing (an average token sees L/2 keys, twice for
///               both products, so 2 L (..)), plus the state readout and update
/// softmax       H · 4 ctx dh                       QKᵀ and AV over ctx = mean keys seen
/// MLP           2 · 2 d (m d)
/// short conv    2 w d                              depthwise, width w (0: none)
/// ```
///
/// plus the unembedding 2 d V at each labelled position (`labelled_fraction` of the tokens).
pub fn flops_per_token(
    m: &ModelConfig,
    nodes: usize,
    seq_len: usize,
    vocab: usize,
    labelled_fraction: f64,
) -> f64 {
    let (d, h, dh, f) = (
        m.d_model as f64,
        m.heads as f64,
        m.head_dim as f64,
        m.features as f64,
    );
    let proj = 4.0 * 2.0 * d * h * dh;
    let mlp = 2.0 * 2.0 * d * (m.mlp_mult as f64 * d);
    let mixer = match m.mixer {
        Mixer::Softmax { window } => {
            let t = seq_len as f64;
            let ctx = if window > 0 {
                (window as f64).min(t)
            } else {
                (t + 1.0) / 2.0
            };
            h * 4.0 * ctx * dh
        }
        _ => {
            let l = (m.chunk.min(seq_len)) as f64;
            let n = nodes as f64;
            2.0 * 2.0 * dh * f * h + h * (2.0 * l * (f + dh + 1.0) + 4.0 * n * f * (dh + 1.0))
        }
    };
    let conv = 2.0 * m.short_conv as f64 * d;
    let per_layer = proj + mlp + mixer + conv;
    let head = 2.0 * d * vocab as f64 * labelled_fraction;
    3.0 * (m.layers as f64 * per_layer + head)
}

/// One benchmarked model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainBenchRun {
    /// Reference model and mixer, e.g. `books-d256/vort-shared`.
    pub name: String,
    /// The mixer's kind (`memory` in older files).
    #[serde(alias = "memory")]
    pub mixer: vort::MixerKind,
    /// Training tokens per second over the timed steps.
    pub tokens_per_s: f64,
    /// Model FLOPs per training token ([`flops_per_token`]).
    pub flops_per_token: f64,
    /// FLOPs/token × tokens/s ÷ same-run sgemm FLOP/s (the better reading).
    pub mfu: f64,
    /// Process CPU time ÷ wall time over the timed steps.
    pub busy_cores: f64,
    /// Peak resident memory during this run (bytes; 0 where /proc is unavailable). The peak
    /// is reset before each run, but memory the allocator kept from earlier runs counts: for an
    /// isolated number, bench one model (`--only`).
    pub peak_rss_bytes: u64,
    /// Memory nodes N of the retention (0 for softmax).
    pub nodes: usize,
    /// Timed steps.
    pub steps: usize,
}

/// What [`bench_train`] measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainBenchResult {
    /// Same-run sgemm (2048³, f32, candle's gemm): GFLOP/s, the better of the readings before
    /// and after the runs; every MFU is against it.
    pub sgemm_gflops: f64,
    /// The sgemm reading before the runs.
    pub sgemm_gflops_before: f64,
    /// The sgemm reading after the runs.
    pub sgemm_gflops_after: f64,
    /// 1-minute load average before the runs.
    pub load_avg_before: Option<f64>,
    /// 1-minute load average after them.
    pub load_avg_after: Option<f64>,
    /// One row per model and mixer.
    pub runs: Vec<TrainBenchRun>,
}

/// Process CPU time (user + system) in seconds, from /proc/self/stat (clock ticks of 1/100 s,
/// Linux's USER_HZ, so busy cores are meaningful only over timed steps much longer than
/// 10 ms); None where it cannot be read.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // fields after the command name (which is in parentheses and may hold spaces)
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Peak resident set (VmHWM) in bytes; 0 where unavailable.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Resets the peak resident set to the current one (Linux >= 4.0); best effort.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A random batch of `r`'s shape: uniform tokens, targets at the labelled positions (the last
/// `labelled` positions of each sequence, or every position).
fn random_batch(r: &Reference, seed: u64) -> Batch {
    let (b, t) = (r.config.train.batch_size, r.config.task.seq_len);
    let mut rng = SplitMix64::new(seed);
    let tokens: Vec<u32> = (0..b * t)
        .map(|_| rng.below(r.vocab as u64) as u32)
        .collect();
    let targets: Vec<u32> = (0..b * t)
        .map(|_| rng.below(r.vocab as u64) as u32)
        .collect();
    let mask: Vec<bool> = (0..b * t)
        .map(|i| match r.labelled {
            None => true,
            Some(k) => i % t >= t.saturating_sub(k),
        })
        .collect();
    Batch {
        b,
        t,
        tokens,
        targets,
        mask,
        lags: vec![0; b * t],
        entity: vec![false; b * t],
        memorable: vec![false; b * t],
        function: vec![false; b * t],
    }
}

/// Benchmarks each reference: `warmup` untimed steps, then `steps` timed ones. `progress` is
/// called with each finished run.
///
/// # Errors
/// Invalid configs, candle errors, a diverged step.
pub fn bench_train(
    refs: &[Reference],
    warmup: usize,
    steps: usize,
    mut progress: impl FnMut(&TrainBenchRun),
) -> Result<TrainBenchResult, TrainError> {
    if steps == 0 {
        return Err(TrainError::Config {
            path: "<bench>".into(),
            message: "timed steps must be >= 1".into(),
        });
    }
    let load_avg_before = super::load_avg_1min();
    // the same product as `vort bench layer` (2048³), so the two MFUs compare; measured
    // before and after the runs, the better one is the MFU's reference (on a shared VM one
    // sgemm reading can be half of another: 112 and 202 GFLOP/s in two runs an hour apart)
    let sgemm = || -> Result<f64, TrainError> {
        Ok(super::layer::bench_sgemm(2048, 7)
            .map_err(ModelError::Layer)?
            .gflops)
    };
    let sgemm_before = sgemm()?;
    let dev = Device::Cpu;
    let mut runs = Vec::new();
    for r in refs {
        // the model and the batch size (the task's other fields are not used)
        r.config.model.validate()?;
        if r.config.train.batch_size == 0 || r.config.task.seq_len == 0 {
            return Err(TrainError::Config {
                path: "<bench>".into(),
                message: format!("{}: batch size and sequence length must be >= 1", r.name),
            });
        }
        let vm = VarMap::new();
        let model = Model::seeded(
            &vort::Config::new(r.config.model.clone(), r.vocab, r.config.task.seq_len),
            r.config.seed,
            &vm,
            &dev,
        )?;
        let mut opt = optimizer(&r.config, &vm)?;
        let nodes = model.blocks().next().map_or(0, vort::block::Block::nodes);
        reset_peak_rss();
        for s in 0..warmup {
            optimizer_step(
                &model,
                &mut opt,
                &r.config,
                &random_batch(r, s as u64),
                s as u64,
                &dev,
                None,
            )?;
        }
        let batches: Vec<Batch> = (0..steps)
            .map(|s| random_batch(r, (warmup + s) as u64))
            .collect();
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        for (s, batch) in batches.iter().enumerate() {
            optimizer_step(
                &model,
                &mut opt,
                &r.config,
                batch,
                (warmup + s) as u64,
                &dev,
                None,
            )?;
        }
        let wall = t0.elapsed().as_secs_f64();
        let busy = match (cpu0, cpu_seconds()) {
            (Some(a), Some(b)) if wall > 0.0 => (b - a) / wall,
            _ => f64::NAN,
        };
        let t = r.config.task.seq_len;
        let tokens = (steps * r.config.train.batch_size * t) as f64;
        let tokens_per_s = tokens / wall.max(1e-9);
        let fraction = r.labelled.map_or(1.0, |k| k.min(t) as f64 / t as f64);
        let fpt = flops_per_token(&r.config.model, nodes, t, r.vocab, fraction);
        let run = TrainBenchRun {
            name: r.name.clone(),
            mixer: r.config.model.mixer.kind(),
            tokens_per_s,
            flops_per_token: fpt,
            mfu: fpt * tokens_per_s / (sgemm_before * 1e9),
            busy_cores: busy,
            peak_rss_bytes: peak_rss_bytes(),
            nodes,
            steps,
        };
        progress(&run);
        runs.push(run);
    }
    let sgemm_after = sgemm()?;
    let best = sgemm_before.max(sgemm_after);
    // MFU against the better of the two readings
    for run in &mut runs {
        run.mfu *= sgemm_before / best;
    }
    Ok(TrainBenchResult {
        sgemm_gflops: best,
        sgemm_gflops_before: sgemm_before,
        sgemm_gflops_after: sgemm_after,
        load_avg_before,
        load_avg_after: super::load_avg_1min(),
        runs,
    })
}
