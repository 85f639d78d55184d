//! Does a byte-level model retrieve? (issue #40) Two probes, each streamed with the state
//! carried ([`byte_bits`]), so a byte's context is everything before it:
//!
//! - **repeats**: a string of `period` random lower-case letters written `copies` times in a
//!   row. A model that retrieves predicts the second copy onward from the first (near 0 bits
//!   a byte); one that carries only smoothed statistics pays its copy-1 price on every copy
//!   (a model of English, far more than the log2(26) ≈ 4.7 bits of a uniform guess among the
//!   letters). The bits of each copy are reported (copy 1 without its first byte, which has
//!   no context).
//! - **names**: made-up names (two capitalised words of random letters) written into a text,
//!   each once early and once again `lag` bytes later, over the text's own bytes (positions
//!   stay those of the text). The bits of each occurrence are over the name's letters after
//!   its first (the first letter cannot be expected either time); retrieval shows as the
//!   later occurrence costing less than the first. Every name has its own lag, and no other
//!   occurrence of it sits between the two. With several names per lag
//!   ([`RetrievalOptions::names_per_lag`]) the difference later − first gets a standard error
//!   over the names ([`name_lags`]): one name is one sample, and first occurrences alone range
//!   over several bits.

use candle_core::Device;
use serde::{Deserialize, Serialize};

use super::stream::byte_bits;
use super::TrainError;
use vort::model::Model;
use vort_math::rng::SplitMix64;

/// What to probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalOptions {
    /// Periods of the repeated strings, in bytes.
    pub periods: Vec<usize>,
    /// Copies of each string (>= 2).
    pub copies: usize,
    /// Lags of the names' second occurrences, in bytes.
    pub lags: Vec<usize>,
    /// Seed of the random strings and names.
    pub seed: u64,
    /// Made-up names per lag (>= 1; 1 in results written before the option existed, which
    /// omit it).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub names_per_lag: usize,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl Default for RetrievalOptions {
    /// Issue #40's grid: periods 40 (its 40-letter test) and 64 B to 64 KiB, 5 copies; name
    /// lags 1K, 8K, 64K, 256K and 1M (10^6, within the 2^20-lag stream tables).
    fn default() -> Self {
        RetrievalOptions {
            periods: vec![40, 64, 256, 1024, 4096, 16384, 65536],
            copies: 5,
            lags: vec![1024, 8192, 65536, 262_144, 1_000_000],
            seed: 0,
            names_per_lag: 1,
        }
    }
}

impl RetrievalOptions {
    /// The grid cut to streams of at most `max_bytes`: the periods whose copies fit, and the
    /// lags up to it (a quick report streams 128 KiB, not the 1M-byte lag).
    pub fn within(&self, max_bytes: usize) -> RetrievalOptions {
        RetrievalOptions {
            periods: self
                .periods
                .iter()
                .copied()
                .filter(|p| p.saturating_mul(self.copies) <= max_bytes)
                .collect(),
            lags: self
                .lags
                .iter()
                .copied()
                .filter(|&l| l <= max_bytes)
                .collect(),
            ..self.clone()
        }
    }
}

/// One repeated string: the mean bits per byte of each copy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatRow {
    /// Its length in bytes.
    pub period: usize,
    /// Mean bits per byte of copy 1, 2, ... (copy 1 without its first byte).
    pub bits: Vec<f64>,
}

/// One made-up name written twice, `lag` bytes apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NameRow {
    /// Bytes from the first occurrence to the second.
    pub lag: usize,
    /// The name.
    pub name: String,
    /// Where the name starts the first time and the second time (byte offsets in the text).
    pub at: (usize, usize),
    /// Mean bits per byte of its letters after the first, the first time.
    pub first: f64,
    /// The same, the second time.
    pub later: f64,
}

/// What [`probe`] measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalResult {
    /// The options probed.
    pub options: RetrievalOptions,
    /// One row per period.
    pub repeats: Vec<RepeatRow>,
    /// One row per lag that fits the text.
    pub names: Vec<NameRow>,
    /// Lags the text was too short for (it needs lag + a few hundred bytes).
    pub lags_skipped: Vec<usize>,
    /// Bytes streamed in all.
    pub bytes: usize,
    /// Throughput (bytes/s).
    pub bytes_per_s: f64,
}

/// `period` random lower-case letters, `copies` times in a row.
pub fn repeated_string(period: usize, copies: usize, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed ^ (period as u64).wrapping_mul(0x9E37_79B9));
    let one: Vec<u8> = (0..period).map(|_| b'a' + rng.below(26) as u8).collect();
    one.repeat(copies)
}

/// Mean bits of each copy of a `period`-byte string from the bits of a stream over it
/// (`bits[i]` is byte i + 1's).
pub fn copy_bits(bits: &[f32], period: usize, copies: usize) -> Vec<f64> {
    (0..copies)
        .map(|k| {
            // targets k·period .. (k+1)·period, the first byte of the stream unscored
            let lo = (k * period).max(1);
            let hi = (k + 1) * period;
            let s: f64 = bits[lo - 1..hi - 1].iter().map(|&b| f64::from(b)).sum();
            s / (hi - lo) as f64
        })
        .collect()
}

/// A made-up name: a space, two capitalised words of 6 and 8 random letters, a space.
fn made_up_name(rng: &mut SplitMix64) -> Vec<u8> {
    let mut word = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|i| {
                let c = b'a' + rng.below(26) as u8;
                if i == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect()
    };
    [
        b" ".to_vec(),
        word(6),
        b" ".to_vec(),
        word(8),
        b" ".to_vec(),
    ]
    .concat()
}

/// `text` with `per_lag` made-up names written over it for each lag, each at `first` and at
/// `first + lag`, and the names' rows without their bits; the lags that do not fit. First
/// occurrences take the first free slots 64 bytes apart from byte 256 on, none over another
/// occurrence; a lag whose copies would run past the text is skipped whole.
pub fn names_text(
    text: &[u8],
    lags: &[usize],
    per_lag: usize,
    seed: u64,
) -> (Vec<u8>, Vec<NameRow>, Vec<usize>) {
    let (rows, skipped) = name_rows(text.len(), lags, per_lag, seed);
    let mut out = text.to_vec();
    for r in &rows {
        let name = format!(" {} ", r.name);
        for at in [r.at.0, r.at.1] {
            out[at..at + name.len()].copy_from_slice(name.as_bytes());
        }
    }
    (out, rows, skipped)
}

/// Where [`names_text`] writes its names in a text of `text_len` bytes: the rows without their
/// bits, and the lags that do not fit. First occurrences take slots 64 bytes apart from byte
/// 256 on, in order, each the first slot at which neither occurrence lies over one already
/// placed (a lag that is a multiple of 64 puts second occurrences on the slots; one name a
/// lag puts lag i's name at slot i). A lag is placed whole or not at all: it is skipped when
/// a name's second occurrence would run past the text.
fn name_rows(
    text_len: usize,
    lags: &[usize],
    per_lag: usize,
    seed: u64,
) -> (Vec<NameRow>, Vec<usize>) {
    let mut rng = SplitMix64::new(seed ^ 0x4E41_4D45);
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    // the byte ranges placed so far: no occurrence may lie over another
    let mut taken: Vec<(usize, usize)> = Vec::new();
    for &lag in lags {
        let names: Vec<Vec<u8>> = (0..per_lag).map(|_| made_up_name(&mut rng)).collect();
        let mut placed = taken.clone();
        let mut firsts = Vec::new();
        for name in &names {
            let Some(first) = free_slot(&placed, name.len(), lag, text_len) else {
                break;
            };
            placed.extend([first, first + lag].map(|at| (at, at + name.len())));
            firsts.push(first);
        }
        if firsts.len() < names.len() {
            skipped.push(lag);
            continue;
        }
        taken = placed;
        rows.extend(names.iter().zip(firsts).map(|(name, first)| NameRow {
            lag,
            name: String::from_utf8_lossy(name).trim().to_string(),
            at: (first, first + lag),
            first: f64::NAN,
            later: f64::NAN,
        }));
    }
    (rows, skipped)
}

/// The first slot (byte 256 + 64·s) at which a name of `len` bytes and its copy `lag` bytes
/// later lie over none of `taken` and end inside a text of `text_len` bytes; None when the
/// copy would run past the text (later slots only move it further).
fn free_slot(taken: &[(usize, usize)], len: usize, lag: usize, text_len: usize) -> Option<usize> {
    let free = |a: usize| taken.iter().all(|&(c, d)| a + len <= c || d <= a);
    (0..)
        .map(|s| 256 + 64 * s)
        .take_while(|first| first + lag + len < text_len)
        .find(|&first| lag >= len && free(first) && free(first + lag))
}

/// The names of one lag, summarised: the mean bits the first time and later, and the mean
/// difference later − first with its standard error over the names (NaN with one name).
#[derive(Debug, Clone, PartialEq)]
pub struct NameLag {
    /// Bytes from a name's first occurrence to its second.
    pub lag: usize,
    /// Names at this lag.
    pub names: usize,
    /// Mean bits per byte the first time.
    pub first: f64,
    /// Mean bits per byte later.
    pub later: f64,
    /// Mean of later − first over the names.
    pub diff: f64,
    /// Its standard error, sd / √names (NaN with one name).
    pub se: f64,
}

/// [`NameLag`] for each lag of `names`, in the order the lags first appear.
pub fn name_lags(names: &[NameRow]) -> Vec<NameLag> {
    let mut lags: Vec<usize> = Vec::new();
    for r in names {
        if !lags.contains(&r.lag) {
            lags.push(r.lag);
        }
    }
    lags.into_iter()
        .map(|lag| {
            let rows: Vec<&NameRow> = names.iter().filter(|r| r.lag == lag).collect();
            let n = rows.len() as f64;
            let mean = |f: &dyn Fn(&NameRow) -> f64| rows.iter().map(|r| f(r)).sum::<f64>() / n;
            let diff = mean(&|r| r.later - r.first);
            let se = if rows.len() < 2 {
                f64::NAN
            } else {
                let ss: f64 = rows
                    .iter()
                    .map(|r| (r.later - r.first - diff).powi(2))
                    .sum();
                (ss / (n - 1.0)).sqrt() / n.sqrt()
            };
            NameLag {
                lag,
                names: rows.len(),
                first: mean(&|r| r.first),
                later: mean(&|r| r.later),
                diff,
                se,
            }
        })
        .collect()
}

/// Mean bits of the name at byte `at` (its letters after the first: bytes at + 2 .. end, the
/// space before the second word included, the closing space left out).
fn name_bits(bits: &[f32], at: usize, len: usize) -> f64 {
    // the name is " Xxxxxx Xxxxxxxx ": byte at + 1 is the first letter
    let (lo, hi) = (at + 2, at + len - 1);
    let s: f64 = bits[lo - 1..hi - 1].iter().map(|&b| f64::from(b)).sum();
    s / (hi - lo) as f64
}

/// Both probes on `model` (a byte-level model), the names written into `text`, streamed in
/// pieces of `piece` bytes. The model's node tables must be certified for the longest stream
/// (`Model::set_horizon`). `progress` is called with (bytes done, bytes in all).
///
/// # Errors
/// [`TrainError::Config`] for fewer than 2 copies or a period of 0; streaming errors (the
/// horizon included).
pub fn probe(
    model: &Model,
    text: &[u8],
    opts: &RetrievalOptions,
    piece: usize,
    device: &Device,
    mut progress: impl FnMut(usize, usize),
) -> Result<RetrievalResult, TrainError> {
    if opts.copies < 2 || opts.periods.contains(&0) || opts.names_per_lag == 0 {
        return Err(TrainError::Config {
            path: "<retrieval>".into(),
            message: format!(
                "copies = {} must be >= 2, every period >= 1 (periods {:?}) and names per lag \
                 >= 1 ({})",
                opts.copies, opts.periods, opts.names_per_lag
            ),
        });
    }
    let (named, mut names, lags_skipped) =
        names_text(text, &opts.lags, opts.names_per_lag, opts.seed);
    let name_len = names.iter().map(|r| r.name.len() + 2).max().unwrap_or(0);
    let names_end = names
        .iter()
        .map(|r| r.at.1 + name_len + 1)
        .max()
        .unwrap_or(0);
    let total = opts.periods.iter().map(|p| p * opts.copies).sum::<usize>() + names_end;
    let t0 = std::time::Instant::now();
    let mut done = 0;
    let mut repeats = Vec::new();
    for &period in &opts.periods {
        let s = repeated_string(period, opts.copies, opts.seed);
        let bits = byte_bits(model, &s, piece, device, |d| progress(done + d, total))?;
        done += s.len();
        repeats.push(RepeatRow {
            period,
            bits: copy_bits(&bits, period, opts.copies),
        });
    }
    if !names.is_empty() {
        let bits = byte_bits(model, &named[..names_end], piece, device, |d| {
            progress(done + d, total)
        })?;
        done += names_end;
        for r in &mut names {
            let len = r.name.len() + 2;
            r.first = name_bits(&bits, r.at.0, len);
            r.later = name_bits(&bits, r.at.1, len);
        }
    }
    Ok(RetrievalResult {
        options: opts.clone(),
        repeats,
        names,
        lags_skipped,
        bytes: done,
        bytes_per_s: done as f64 / t0.elapsed().as_secs_f64().max(1e-9),
    })
}

/// The longest stream [`probe`] runs for `opts` over a text of `text_len` bytes: what the
/// model's node tables must be certified for.
pub fn longest_stream(opts: &RetrievalOptions, text_len: usize) -> usize {
    // where the names go is fixed by the lags and the text's length alone: a name's second
    // occurrence plus 20 bytes (with one name a lag, lag i's name at slot i, as always)
    let (rows, _) = name_rows(text_len, &opts.lags, opts.names_per_lag.max(1), opts.seed);
    let names = rows.iter().map(|r| r.at.0 + r.lag + 20).max().unwrap_or(0);
    let repeats = opts
        .periods
        .iter()
        .map(|p| p * opts.copies)
        .max()
        .unwrap_or(0);
    names.max(repeats)
}

/// The result as a Markdown table (repeats) and a list (names).
pub fn markdown(r: &RetrievalResult) -> String {
    let copies = r.options.copies;
    let mut s = String::from("| period (bytes) |");
    for k in 1..=copies {
        s += &format!(" copy {k} |");
    }
    s += "\n|---|";
    s += &"---|".repeat(copies);
    s += "\n";
    for row in &r.repeats {
        s += &format!("| {} |", row.period);
        for b in &row.bits {
            s += &format!(" {b:.3} |");
        }
        s += "\n";
    }
    s += "\nBits per byte of a repeated string of random letters, by copy. A model that copies \
          approaches 0 bits from copy 2 on; log2 26 = 4.70 is a uniform guess among the \
          letters; a model of English that retrieves nothing pays its copy-1 price on every \
          copy.\n";
    if !r.names.is_empty() {
        s += "\n| name | lag (bytes) | first | later | later - first |\n|---|---|---|---|---|\n";
        for n in &r.names {
            s += &format!(
                "| {} | {} | {:.3} | {:.3} | {:+.3} |\n",
                n.name,
                n.lag,
                n.first,
                n.later,
                n.later - n.first
            );
        }
        s += "\nBits per byte of a made-up name's letters after its first, the first time and \
              `lag` bytes later (< 0: the model retrieved it).\n";
        let lags = name_lags(&r.names);
        if lags.iter().any(|l| l.names > 1) {
            s +=
                "\n| lag (bytes) | names | first | later | later - first (± SE over the names) |\n\
                  |---|---|---|---|---|\n";
            for l in &lags {
                s += &format!(
                    "| {} | {} | {:.3} | {:.3} | {:+.3} ± {:.3} |\n",
                    l.lag, l.names, l.first, l.later, l.diff, l.se
                );
            }
        }
    }
    if !r.lags_skipped.is_empty() {
        s += &format!("\nLags the text was too short for: {:?}.\n", r.lags_skipped);
    }
    s
}
