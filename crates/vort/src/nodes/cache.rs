//! Certified SOEs are built once per recipe and reused (issue #43: `vort generate` spent 9 s
//! before its first byte, rebuilding the same 2^20-lag shared nodes in every layer).
//!
//! A node set is a pure function of its recipe: (δ, horizon, eps) for shared nodes, (a,
//! horizon, eps) for one order's SOE. Two levels keep what was built:
//!
//! - **in the process**, always: every layer, every `set_horizon` and every model loaded in
//!   the process shares one copy (the shared table with its Hermite tabulation);
//! - **on disk**, where [`use_disk`] names a directory (the CLI and the Python package name
//!   [`default_dir`]; a library user opts in). One JSON file per recipe: a header line with
//!   the recipe, the builder's version and an FNV-1a checksum of the payload line, then the
//!   [`SharedSoe`] or [`Soe`] exactly as built (`serde_json`'s float round trip keeps every
//!   bit).
//!
//! A table read from disk is used only when it is the one that was certified: the header names
//! this recipe and this version of the builder, the checksum matches, the payload's own recipe
//! and certificate (<= eps) agree, and a spot check of the kernel against the exact GL weight
//! at ~40 lags from 1 to the horizon, at every order it covers, stays within eps. Anything
//! else is rebuilt and the file replaced. The disk is best effort: a directory that cannot be
//! read or written only costs the build.

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::de::DeserializeOwned;
use serde::Serialize;
use vort_math::shared::SharedSoe;
use vort_math::{gl, Soe};

use super::NodeTable;
use crate::error::Result;

/// The file format; bump it when the builders change their output for the same recipe (the
/// crate version is in the key as well).
const FORMAT: &str = "vort-node-cache-v1";
/// The largest cache file read (a shared table at 2^20 lags is ~16 KB of JSON).
const MAX_FILE_BYTES: u64 = 16 << 20;
/// Recipes kept in the process; one more empties the map, which refills as tables are asked for
/// (a shared table at 2^20 lags, with its Hermite tabulation, is ~1.5 MB).
const MEMORY_ENTRIES: usize = 64;

/// A recipe, with every float as its bits (the key is exact).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Recipe {
    /// `SharedSoe::build(delta, horizon, eps)`.
    Shared { delta: u64, horizon: u64, eps: u64 },
    /// `Soe::build(alpha, horizon, eps)`.
    Order { alpha: u64, horizon: u64, eps: u64 },
}

impl Recipe {
    fn file_name(&self) -> String {
        let (kind, a, horizon, eps) = match *self {
            Recipe::Shared {
                delta,
                horizon,
                eps,
            } => ("shared", delta, horizon, eps),
            Recipe::Order {
                alpha,
                horizon,
                eps,
            } => ("order", alpha, horizon, eps),
        };
        let mut h = fnv1a(FNV_OFFSET, FORMAT.as_bytes());
        h = fnv1a(h, env!("CARGO_PKG_VERSION").as_bytes());
        for word in [a, horizon, eps] {
            h = fnv1a(h, &word.to_le_bytes());
        }
        format!(
            "{kind}-a{}-h{horizon}-e{:e}-{h:016x}.json",
            f64::from_bits(a),
            f64::from_bits(eps)
        )
    }

    /// The header line that names this recipe (compared whole on load).
    fn header(&self, checksum: u64) -> String {
        serde_json::json!({
            "format": FORMAT,
            "vort": env!("CARGO_PKG_VERSION"),
            "recipe": format!("{self:?}"),
            "checksum": format!("{checksum:016x}"),
        })
        .to_string()
    }
}

/// What the process has built: recipe -> a `NodeTable` (shared) or a `Soe` (one order).
type Memory = HashMap<Recipe, Arc<dyn Any + Send + Sync>>;

fn memory() -> &'static Mutex<Memory> {
    static MEMORY: std::sync::OnceLock<Mutex<Memory>> = std::sync::OnceLock::new();
    MEMORY.get_or_init(|| Mutex::new(HashMap::new()))
}

static DISK: RwLock<Option<PathBuf>> = RwLock::new(None);
static ENABLED: AtomicBool = AtomicBool::new(true);
static BUILT: AtomicU64 = AtomicU64::new(0);
static FROM_DISK: AtomicU64 = AtomicU64::new(0);
static FROM_MEMORY: AtomicU64 = AtomicU64::new(0);

/// Where the node sets handed out in this process came from (counts since it started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Built and certified.
    pub built: u64,
    /// Read from the disk cache and checked.
    pub from_disk: u64,
    /// From the in-process cache.
    pub from_memory: u64,
}

/// The counts so far.
pub fn stats() -> Stats {
    Stats {
        built: BUILT.load(Ordering::Relaxed),
        from_disk: FROM_DISK.load(Ordering::Relaxed),
        from_memory: FROM_MEMORY.load(Ordering::Relaxed),
    }
}
/// One writer at a time in the process (the temporary file's name carries only the pid).
static WRITING: Mutex<()> = Mutex::new(());

/// Where the CLI and the Python package keep certified tables: `$VORT_CACHE_DIR` (empty: no
/// disk cache), else `$XDG_CACHE_HOME/vort/nodes`, else `$HOME/.cache/vort/nodes`; None when
/// none is set.
pub fn default_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(v) = std::env::var_os("VORT_CACHE_DIR") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    env("XDG_CACHE_HOME")
        .map(|d| PathBuf::from(d).join("vort").join("nodes"))
        .or_else(|| env("HOME").map(|d| PathBuf::from(d).join(".cache/vort/nodes")))
}

/// Keeps certified tables under `dir` from now on (None: in the process only, the default).
pub fn use_disk(dir: Option<PathBuf>) {
    *DISK.write().unwrap_or_else(PoisonError::into_inner) = dir;
}

/// The directory in use (None: no disk cache).
pub fn disk_dir() -> Option<PathBuf> {
    DISK.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Turns both levels on or off (on by default). Off, every table is built and certified
/// afresh, as before the cache existed: the baseline of `vort bench generate`.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether the cache is in use.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Forgets every table built in this process (benchmarks of a cold start; tests).
pub fn clear_memory() {
    memory()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}

/// The shared-node table for (δ, horizon, eps): [`NodeTable::from_shared`] of
/// `SharedSoe::build`, from the cache when it holds it.
pub(super) fn shared_table(delta: f64, horizon: u64, eps: f64) -> Result<NodeTable> {
    let recipe = Recipe::Shared {
        delta: delta.to_bits(),
        horizon,
        eps: eps.to_bits(),
    };
    cached(
        recipe,
        || Ok(SharedSoe::build(delta, horizon, eps)?),
        |s| shared_is_certified(s, delta, horizon, eps),
        NodeTable::from_shared,
    )
}

/// One order's SOE `Soe::build(a, horizon, eps)`, from the cache when it holds it.
pub(super) fn order_soe(alpha: f64, horizon: u64, eps: f64) -> Result<Soe> {
    let recipe = Recipe::Order {
        alpha: alpha.to_bits(),
        horizon,
        eps: eps.to_bits(),
    };
    cached(
        recipe,
        || Ok(Soe::build(alpha, horizon, eps)?),
        |s| order_is_certified(s, alpha, horizon, eps),
        Soe::clone,
    )
}

/// The one path of both levels: `recipe`'s value from the process, else its payload P from
/// disk (when `certified` accepts it), else `build` (written to disk); `wrap` makes the value
/// the process keeps from the payload (the shared table adds its Hermite tabulation).
fn cached<P, T>(
    recipe: Recipe,
    build: impl FnOnce() -> Result<P>,
    certified: impl Fn(&P) -> bool,
    wrap: impl FnOnce(&P) -> T,
) -> Result<T>
where
    P: Serialize + DeserializeOwned + PartialEq,
    T: Clone + Send + Sync + 'static,
{
    if !enabled() {
        let payload = build()?;
        BUILT.fetch_add(1, Ordering::Relaxed);
        return Ok(wrap(&payload));
    }
    if let Some(t) = remembered::<T>(&recipe) {
        return Ok(t);
    }
    let payload = match read_disk::<P>(&recipe, certified) {
        Some(p) => p,
        None => {
            let p = build()?;
            BUILT.fetch_add(1, Ordering::Relaxed);
            write_disk(&recipe, &p);
            p
        }
    };
    let value = wrap(&payload);
    remember(recipe, value.clone());
    Ok(value)
}

fn remembered<T: Clone + 'static>(recipe: &Recipe) -> Option<T> {
    let map = memory().lock().unwrap_or_else(PoisonError::into_inner);
    let hit = map.get(recipe)?.downcast_ref::<T>().cloned();
    if hit.is_some() {
        FROM_MEMORY.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

fn remember<T: Send + Sync + 'static>(recipe: Recipe, value: T) {
    let mut map = memory().lock().unwrap_or_else(PoisonError::into_inner);
    if map.len() >= MEMORY_ENTRIES {
        map.clear();
    }
    map.insert(recipe, Arc::new(value));
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, 64 bits: a checksum against torn or edited files, not a cryptographic hash.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The payload of `recipe`'s file, when the file exists, its header and checksum match and
/// `certified` accepts it.
fn read_disk<T: DeserializeOwned>(recipe: &Recipe, certified: impl Fn(&T) -> bool) -> Option<T> {
    let path = disk_dir()?.join(recipe.file_name());
    let meta = std::fs::metadata(&path).ok()?;
    // a FIFO or a device in the cache never blocks a model load (issue #43 B), and a file far
    // larger than any table (~16 KB at 2^20 lags) is not read
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let (header, payload) = text.split_once('\n')?;
    if header != recipe.header(fnv1a(FNV_OFFSET, payload.as_bytes())) {
        return None;
    }
    let value: T = serde_json::from_str(payload).ok()?;
    let ok = certified(&value);
    if ok {
        FROM_DISK.fetch_add(1, Ordering::Relaxed);
    }
    ok.then_some(value)
}

/// Best effort: a cache directory that cannot be written only means the next process builds
/// again. Written only when the payload reads back to the same value, bit for bit.
fn write_disk<T: Serialize + DeserializeOwned + PartialEq>(recipe: &Recipe, value: &T) {
    let Some(dir) = disk_dir() else { return };
    let Ok(payload) = serde_json::to_string(value) else {
        return;
    };
    let round_trip = serde_json::from_str::<T>(&payload)
        .ok()
        .and_then(|v| serde_json::to_string(&v).ok().filter(|_| &v == value));
    if round_trip.as_deref() != Some(payload.as_str()) {
        return;
    }
    let text = format!(
        "{}\n{payload}",
        recipe.header(fnv1a(FNV_OFFSET, payload.as_bytes()))
    );
    let _one = WRITING.lock().unwrap_or_else(PoisonError::into_inner);
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = crate::fsio::write_atomic(&dir.join(recipe.file_name()), text.as_bytes());
    }
}

/// Lags 1, 2, 3, ... growing by ~1.4x, and the horizon: where a spot check reads the kernel.
fn spot_lags(horizon: u64) -> Vec<u64> {
    let mut lags = vec![];
    let mut j = 1u64;
    while j < horizon {
        lags.push(j);
        j = (j + 1).max(j + j / 2 - j / 10);
    }
    lags.push(horizon);
    lags
}

/// Σ_n c_n e^(-u_n j) against w_j(a) within eps at the spot lags. The certificate was computed
/// with another summation order, hence the 1e-9 relative slack on eps (rounding, not a looser
/// bound: certified SOEs sit at or below eps by construction).
fn kernel_within(a: f64, terms: impl Fn(f64) -> f64, horizon: u64, eps: f64) -> bool {
    spot_lags(horizon).into_iter().all(|j| {
        let Ok(exact) = gl::weight(a, j) else {
            return false;
        };
        let approx = terms(j as f64);
        if exact == 0.0 {
            return approx.abs() <= f64::MIN_POSITIVE;
        }
        (approx / exact - 1.0).abs() <= eps * (1.0 + 1e-9)
    })
}

fn shared_is_certified(s: &SharedSoe, delta: f64, horizon: u64, eps: f64) -> bool {
    let shapes = s.weights.len() == s.alpha_grid.len()
        && s.weights.iter().all(|w| w.len() == s.nodes_u.len())
        && s.nodes_u.iter().all(|u| u.is_finite() && *u >= 0.0);
    shapes
        && s.delta.to_bits() == delta.to_bits()
        && s.horizon == horizon
        && s.eps.to_bits() == eps.to_bits()
        && s.certificate.max_rel_error <= eps
        && s.alpha_grid.iter().zip(&s.weights).all(|(&a, c)| {
            let k = |j: f64| {
                c.iter()
                    .zip(&s.nodes_u)
                    .map(|(c, u)| c * (-u * j).exp())
                    .sum()
            };
            kernel_within(a, k, horizon, eps)
        })
}

fn order_is_certified(s: &Soe, alpha: f64, horizon: u64, eps: f64) -> bool {
    let k = |j: f64| s.terms.iter().map(|t| t.c * (-t.u * j).exp()).sum();
    s.alpha.to_bits() == alpha.to_bits()
        && s.horizon == horizon
        && s.eps.to_bits() == eps.to_bits()
        && s.certificate.max_rel_error <= eps
        && s.terms.iter().all(|t| t.u.is_finite() && t.u >= 0.0)
        && kernel_within(alpha, k, horizon, eps)
}

/// The cache file of the shared table (δ, horizon, eps) under `dir` (for tests and tools).
pub fn shared_file(dir: &Path, delta: f64, horizon: u64, eps: f64) -> PathBuf {
    dir.join(
        Recipe::Shared {
            delta: delta.to_bits(),
            horizon,
            eps: eps.to_bits(),
        }
        .file_name(),
    )
}
