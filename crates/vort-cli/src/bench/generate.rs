//! `vort bench generate`: how long a books model takes to show its first sampled byte, with
//! the certified node tables cold (built), warm on disk (read and checked) and warm in the
//! process (issue #43: 9.4 s before the cache, most of it rebuilding one 2^20-lag node set
//! in every layer).
//!
//! Each repeat times the whole path a user waits for, in this process: read and verify the
//! run, build the model, rebuild its tables for the stream, prefill the prompt, sample the
//! first byte; then the rest of the bytes. Uncached is the baseline of the ratios: the cache
//! turned off ([`cache::set_enabled`]), so every layer builds and certifies its own tables, as
//! before the cache. Cold starts from an empty temporary cache directory and an empty
//! in-process cache (layers share what the first one built), warm-disk from that directory
//! filled by the cold run, warm-process from both. The 1-minute load average is recorded
//! before and after: compare only quiet runs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use vort::nodes::cache;
use vort_lab::train::eval::TrainedModel;
use vort_lab::train::generate::{generate, GenerateOptions};
use vort_lab::train::TrainError;

/// Seconds from the start of loading to the first byte, and to the last.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Load, build, tables, prefill and the first sample.
    pub first_byte_s: f64,
    /// The same to the last byte.
    pub total_s: f64,
}

/// The medians over the repeats of each start, and every repeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateBench {
    /// The run or export sampled from.
    pub run: PathBuf,
    /// Bytes generated per repeat.
    pub bytes: usize,
    /// Prompt length in bytes.
    pub prompt_bytes: usize,
    /// The stream's certified horizon (None: a model without node tables).
    pub horizon: Option<u64>,
    /// Median over the repeats: no cache (the baseline).
    pub uncached: Timing,
    /// Median: empty caches.
    pub cold: Timing,
    /// Median: tables read from the disk cache (in-process cache emptied).
    pub warm_disk: Timing,
    /// Median: tables from the in-process cache.
    pub warm_process: Timing,
    /// Uncached first byte / cold first byte.
    pub speedup_cold: f64,
    /// Uncached first byte / warm-disk first byte.
    pub speedup_disk: f64,
    /// Uncached first byte / warm-process first byte.
    pub speedup_process: f64,
    /// Every repeat: [uncached, cold, warm_disk, warm_process].
    pub repeats: Vec<[Timing; 4]>,
    /// 1-minute load average before the run.
    pub load_avg_before: Option<f64>,
    /// 1-minute load average after the run.
    pub load_avg_after: Option<f64>,
}

/// One timed generate from `path` (greedy, so every repeat draws the same bytes).
fn timed(path: &Path, prompt: &[u8], bytes: usize) -> Result<(Timing, Option<u64>), TrainError> {
    let start = Instant::now();
    let (_, mut model, _vm, _) = TrainedModel::load(path)?.build()?;
    let mut first = None;
    let opts = GenerateOptions {
        bytes,
        temperature: 0.0,
        seed: 0,
    };
    let summary = generate(&mut model, prompt, &opts, |_| {
        first.get_or_insert_with(|| start.elapsed().as_secs_f64());
        Ok(())
    })?;
    let total_s = start.elapsed().as_secs_f64();
    let timing = Timing {
        first_byte_s: first.unwrap_or(total_s),
        total_s,
    };
    Ok((timing, summary.horizon))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

fn median_timing(ts: &[Timing]) -> Timing {
    Timing {
        first_byte_s: median(ts.iter().map(|t| t.first_byte_s).collect()),
        total_s: median(ts.iter().map(|t| t.total_s).collect()),
    }
}

/// Runs `repeats` (>= 1) rounds of uncached, cold, warm-disk and warm-process generates of
/// `bytes` bytes after `prompt` (empty: `vort generate`'s default), each round in a fresh
/// temporary cache directory under `scratch` (removed after). The cache settings in force
/// before are restored.
///
/// # Errors
/// The run's load, build or generate errors; the scratch directory cannot be made.
pub fn bench_generate(
    path: &Path,
    prompt: &[u8],
    bytes: usize,
    repeats: usize,
    scratch: &Path,
    mut progress: impl FnMut(usize, &[Timing; 4]),
) -> Result<GenerateBench, TrainError> {
    let prompt = if prompt.is_empty() {
        vort_lab::train::generate::DEFAULT_PROMPT
    } else {
        prompt
    };
    let before = (cache::disk_dir(), cache::enabled());
    let load_avg_before = super::load_avg_1min();
    let dir = scratch.join(format!("vort-bench-generate-{}", std::process::id()));
    let result = (|| {
        let mut rounds = Vec::with_capacity(repeats);
        let mut horizon = None;
        for r in 0..repeats.max(1) {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|source| TrainError::Io {
                path: dir.display().to_string(),
                source,
            })?;
            cache::set_enabled(false);
            let uncached = timed(path, prompt, bytes);
            cache::set_enabled(true);
            let (uncached, _) = uncached?;
            cache::use_disk(Some(dir.clone()));
            cache::clear_memory();
            let (cold, h) = timed(path, prompt, bytes)?;
            cache::clear_memory();
            let (warm_disk, _) = timed(path, prompt, bytes)?;
            let (warm_process, _) = timed(path, prompt, bytes)?;
            horizon = h;
            let round = [uncached, cold, warm_disk, warm_process];
            progress(r + 1, &round);
            rounds.push(round);
        }
        Ok::<_, TrainError>((rounds, horizon))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    cache::use_disk(before.0);
    cache::set_enabled(before.1);
    let (repeats, horizon) = result?;
    let of = |k: usize| median_timing(&repeats.iter().map(|r| r[k]).collect::<Vec<_>>());
    let (uncached, cold, warm_disk, warm_process) = (of(0), of(1), of(2), of(3));
    Ok(GenerateBench {
        run: path.to_path_buf(),
        bytes,
        prompt_bytes: prompt.len(),
        horizon,
        uncached,
        cold,
        warm_disk,
        warm_process,
        speedup_cold: uncached.first_byte_s / cold.first_byte_s,
        speedup_disk: uncached.first_byte_s / warm_disk.first_byte_s,
        speedup_process: uncached.first_byte_s / warm_process.first_byte_s,
        repeats,
        load_avg_before,
        load_avg_after: super::load_avg_1min(),
    })
}
