//! The memory a run needs, estimated before anything is allocated, against what the machine
//! has.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

/// A coarse estimate of the memory a training run needs, for refusing absurd configs before
/// anything is allocated (it errs high: every activation of a step kept for the backward
/// pass). Bytes, f32 throughout.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryEstimate {
    /// Parameters with their gradients and both AdamW moments (4 copies).
    pub parameters: f64,
    /// Activations: of the largest training step (one length of the mixture, if any), kept
    /// for the backward pass, or of an evaluation batch at the config's length (forward
    /// only), whichever is larger.
    pub activations: f64,
}

impl MemoryEstimate {
    /// Total bytes.
    pub fn total(&self) -> f64 {
        self.parameters + self.activations
    }
}

impl RunConfig {
    /// The memory estimate of this run's largest step, training or evaluation (see
    /// [`MemoryEstimate`]).
    pub fn estimate_memory(&self) -> MemoryEstimate {
        let (params, activations) = self.estimate_parts();
        let l = self.model.layers as f64;
        // a training step keeps every layer for the backward pass (4 copies of the scores);
        // with a length mixture, each step has one entry's length at the same tokens per step
        let mix = self.task.train_lengths().len().max(1) as u64;
        let train = (0..mix)
            .map(|step| {
                let (tc, b) = self.task.train_length(step, self.train.batch_size);
                activations(b as f64, tc.seq_len as f64, l, 4.0)
            })
            .fold(0.0, f64::max);
        let eval = self.estimate_eval_activations(self.task.seq_len as u64);
        MemoryEstimate {
            parameters: 4.0 * 4.0 * params,
            activations: 4.0 * train.max(eval),
        }
    }

    /// The memory of inference only (eval, generate, retention --model, an export's load)
    /// at sequences of `seq_len` tokens: the parameters twice (the checkpoint read into host
    /// memory, then the model's copy; no gradients or moments) and one forward batch of
    /// [`RunConfig::estimate_memory`]'s evaluation.
    pub fn estimate_inference_memory(&self, seq_len: u64) -> MemoryEstimate {
        let (params, _) = self.estimate_parts();
        MemoryEstimate {
            parameters: 2.0 * 4.0 * params,
            activations: 4.0 * self.estimate_eval_activations(seq_len),
        }
    }

    /// Floats of an evaluation batch at `seq_len` (forward only: one layer live at a time;
    /// the scores and their softmax counted 3 times, to err high).
    fn estimate_eval_activations(&self, seq_len: u64) -> f64 {
        let (_, activations) = self.estimate_parts();
        activations(self.train.eval_batch() as f64, seq_len as f64, 1.0, 3.0)
    }

    /// The parameter count, and the activation floats of `b` sequences of `t` tokens through
    /// `kept` layers with `scores` copies of softmax's scores.
    #[allow(clippy::type_complexity)]
    fn estimate_parts(&self) -> (f64, Box<dyn Fn(f64, f64, f64, f64) -> f64 + '_>) {
        let m = &self.model;
        let (v, dm) = (self.task.vocab() as f64, m.d_model as f64);
        let (l, h, dh) = (m.layers as f64, m.heads as f64, m.head_dim as f64);
        let hd = h * dh;
        let mlp = (m.mlp_mult as f64) * dm;
        let mut params = v * dm * 2.0 + l * (4.0 * dm * hd + 2.0 * dm * mlp + 4.0 * dm);
        if m.token_shift {
            params += v * dm;
        }
        if m.uses_entropy() {
            params += v * v;
        }
        let feats = match m.feature_map {
            vort::features::FeatureMap::Elu => dh,
            _ => m.features as f64,
        };
        // floats of `b` sequences of `t` tokens through `kept` layers at once, with `scores`
        // copies of softmax's T x window scores. Per layer: the residual stream and its norms,
        // projections, the feature maps, the node weights (VORT: up to ~32 nodes), the MLP
        let activations = move |b: f64, t: f64, kept: f64, scores: f64| {
            let nodes = 32.0;
            let mixer = if let vort::Mixer::Softmax { window } = m.mixer {
                let window = match window {
                    0 => t,
                    w => (w as f64).min(t),
                };
                scores * h * t * window
            } else {
                h * t * (4.0 * feats + 3.0 * (dh + 1.0) + 2.0 * nodes)
            };
            let per_layer = b * (t * (12.0 * dm + 6.0 * hd + 3.0 * mlp) + mixer);
            let mut act = kept * per_layer + b * t * dm * 4.0;
            if m.uses_entropy() {
                act += 3.0 * b * t * v;
            }
            act
        };
        (params, Box::new(activations))
    }

    /// Refuses a run whose [`RunConfig::estimate_memory`] exceeds `limit` bytes (default:
    /// [`memory_limit`], the tightest of the available memory, the address-space limit and
    /// the cgroup's), naming the sizes that drive it.
    ///
    /// # Errors
    /// [`TrainError::Config`] with the estimate, the limit and the fields involved.
    pub fn check_memory(&self, limit: Option<u64>) -> Result<(), TrainError> {
        self.check_estimate(&self.estimate_memory(), limit, "this run")
    }

    /// [`RunConfig::check_memory`] for inference at sequences of `seq_len` tokens
    /// ([`RunConfig::estimate_inference_memory`]): what loading a trained model checks before
    /// it allocates anything.
    ///
    /// # Errors
    /// As [`RunConfig::check_memory`].
    pub fn check_inference_memory(
        &self,
        seq_len: u64,
        limit: Option<u64>,
    ) -> Result<(), TrainError> {
        let what = "this model";
        let e = self.estimate_inference_memory(seq_len);
        self.check_estimate(&e, limit, what)
    }

    fn check_estimate(
        &self,
        e: &MemoryEstimate,
        limit: Option<u64>,
        what: &str,
    ) -> Result<(), TrainError> {
        let (limit, source) = match limit {
            Some(l) => (l, MemorySource::Flag),
            None => match memory_limit() {
                Some(l) => l,
                None => return Ok(()),
            },
        };
        // NaN or infinite (sizes past f64's range) is refused too
        if e.total() <= limit as f64 {
            return Ok(());
        }
        let gb = |x: f64| x / 1e9;
        Err(TrainError::Config {
            path: "<config>".into(),
            message: format!(
                "{what} needs about {:.1} GB (parameters{} {:.1} GB from \
                 vocabulary, d_model = {}, layers = {}, heads x head_dim = {} x {}; activations \
                 {:.1} GB from batch_size = {} x seq_len = {}), more than the {:.1} GB limit \
                 ({}; --max-memory overrides where a command has it)",
                gb(e.total()),
                if what == "this run" {
                    " and optimizer state"
                } else {
                    ""
                },
                gb(e.parameters),
                self.model.d_model,
                self.model.layers,
                self.model.heads,
                self.model.head_dim,
                gb(e.activations),
                self.train.batch_size,
                self.task.seq_len,
                gb(limit as f64),
                source.words()
            ),
        })
    }
}

/// Where a memory limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySource {
    /// `--max-memory`.
    Flag,
    /// `MemAvailable` of /proc/meminfo.
    Available,
    /// RLIMIT_AS (`ulimit -v`), less the address space already mapped.
    AddressSpace,
    /// The cgroup's memory.max (v2) or memory.limit_in_bytes (v1), less its current usage.
    Cgroup,
}

impl MemorySource {
    /// The limit's name in a message.
    pub fn words(self) -> &'static str {
        match self {
            MemorySource::Flag => "--max-memory",
            MemorySource::Available => "the available memory",
            MemorySource::AddressSpace => {
                "the address-space limit, ulimit -v, less what the process has mapped"
            }
            MemorySource::Cgroup => "the cgroup's memory limit, less its current usage",
        }
    }
}

/// The memory this process may still allocate: the tightest of the machine's available
/// memory, the address-space limit (RLIMIT_AS less the mapped VmSize) and the cgroup's limit
/// (v2 memory.max, v1 memory.limit_in_bytes, less the usage), with the one that binds. None
/// where none can be read. A run checked against the available memory alone aborted under a
/// 6 GB `ulimit -v`.
pub fn memory_limit() -> Option<(u64, MemorySource)> {
    tightest(&[
        (available_memory(), MemorySource::Available),
        (address_space_left(), MemorySource::AddressSpace),
        (cgroup_left(), MemorySource::Cgroup),
    ])
}

/// The smallest of the limits that are known.
pub fn tightest(limits: &[(Option<u64>, MemorySource)]) -> Option<(u64, MemorySource)> {
    limits
        .iter()
        .filter_map(|&(l, s)| l.map(|l| (l, s)))
        .min_by_key(|&(l, _)| l)
}

/// RLIMIT_AS's soft limit less the address space already mapped (`VmSize`); None when
/// unlimited or unreadable. Read from /proc/self/limits (no libc call needed).
pub fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    // "Max address space   <soft>   <hard>   bytes": the soft limit binds
    let soft: u64 = line
        .trim_start_matches("Max address space")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?; // "unlimited" does not parse: no limit
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let mapped = kb_field(&status, "VmSize:").unwrap_or(0);
    Some(soft.saturating_sub(mapped))
}

/// The cgroup's memory limit less its usage: v2 (`memory.max` − `memory.current`) of this
/// process's cgroup or of the mount root, else v1 (`memory.limit_in_bytes` −
/// `memory.usage_in_bytes`); None when unlimited (`max`) or unreadable.
pub fn cgroup_left() -> Option<u64> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    // this process's cgroup path ("0::/path" in v2), tried before the mount root
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        })
        .filter(|p| p != "/");
    let mut dirs: Vec<String> = own
        .map(|p| format!("/sys/fs/cgroup{p}"))
        .into_iter()
        .collect();
    dirs.push("/sys/fs/cgroup".into());
    for d in dirs {
        if let Ok(max) = std::fs::read_to_string(format!("{d}/memory.max")) {
            let Ok(max) = max.trim().parse::<u64>() else {
                return None; // "max": unlimited
            };
            let used = read(&format!("{d}/memory.current")).unwrap_or(0);
            return Some(max.saturating_sub(used));
        }
    }
    // v1: this process's memory cgroup ("N:memory:/path"), then the mount root
    let own_v1 = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, ctl, path) = (f.next()?, f.next()?, f.next()?);
                ctl.split(',')
                    .any(|c| c == "memory")
                    .then(|| path.trim().to_string())
            })
        })
        .filter(|p| p != "/");
    let mut v1: Vec<String> = own_v1
        .map(|p| format!("/sys/fs/cgroup/memory{p}"))
        .into_iter()
        .collect();
    v1.push("/sys/fs/cgroup/memory".into());
    for d in v1 {
        let Some(max) = read(&format!("{d}/memory.limit_in_bytes")) else {
            continue;
        };
        // v1 reports "unlimited" as a huge number (about 2^63)
        if max >= 1 << 60 {
            return None;
        }
        let used = read(&format!("{d}/memory.usage_in_bytes")).unwrap_or(0);
        return Some(max.saturating_sub(used));
    }
    None
}

fn kb_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The machine's available memory in bytes (`MemAvailable` of /proc/meminfo; None elsewhere).
pub fn available_memory() -> Option<u64> {
    kb_field(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable:",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tightest known limit binds, whichever it is; unknown ones are skipped.
    #[test]
    fn the_tightest_limit_binds() {
        use MemorySource::*;
        let t = |a, s, c| tightest(&[(a, Available), (s, AddressSpace), (c, Cgroup)]);
        assert_eq!(t(Some(8), Some(6), Some(7)), Some((6, AddressSpace)));
        assert_eq!(t(Some(8), None, Some(7)), Some((7, Cgroup)));
        assert_eq!(t(Some(5), Some(6), None), Some((5, Available)));
        assert_eq!(t(None, None, None), None);
        // and this process's own limits read back as numbers where they exist
        if let Some((l, _)) = memory_limit() {
            assert!(l > 0);
        }
    }
}
