//! RULER's offline synthetic tasks (Hsieh et al. 2024; NVIDIA/RULER `scripts/synthetic.yaml`
//! and `scripts/data/synthetic/{niah,variable_tracking,freq_words_extraction}.py`), byte-level:
//! the prompt, the answer prefix and the answer are UTF-8 bytes (vocabulary 256, as books), and
//! RULER's token budget `max_seq_length` is the sequence length in bytes.
//!
//! - `niah_single_1`: the noise haystack ("The grass is green. ..." repeated, one sentence a
//!   line) with one needle "One of the special magic numbers for {key} is: {value}.", key an
//!   adjective-noun word, value a 7-digit number.
//! - `niah_multikey_2`: the haystack is needles of other word keys and numbers.
//! - `niah_multikey_3`: the same with UUID keys and UUID values.
//! - `vt`: variable tracking, one chain of 4 hops (`VAR ABCDE = 12345`, `VAR FGHIJ = VAR
//!   ABCDE `, ...) in the noise haystack; the answer is the chain's 5 variables.
//! - `fwe`: frequent words: coded 6-letter words with counts ∝ k^-2 (RULER's α = 2), the most
//!   frequent shown as '...'; the answer is the 3 next most frequent.
//!
//! As RULER: the same templates and answer prefixes (the niah template made singular for one
//! needle and one value, as `niah.py` does), needles inserted at uniformly random places of
//! the haystack (`random.sample` over its sentences), the haystack as long as fits. Unlike
//! RULER: the sequence is exactly `seq_len` bytes (the fitted prompt is left-padded with
//! spaces), the answer follows its prefix in the sequence (`" The special magic number for
//! {key} mentioned in the provided text is 1234567"`), and a model is scored by teacher forcing:
//! an answer item counts when every byte of it is the model's most likely next byte, which is
//! when greedy decoding writes it (RULER's `string_match_all` then counts the items found,
//! in any order; greedy decoding here writes them in the reference order). The keys' words are
//! wonderwords 3.0.1's adjective and noun lists (data/ruler/, MIT), as RULER's.

use serde::{Deserialize, Serialize};
use vort::vort_math::rng::SplitMix64;

use super::Sample;

/// One of RULER's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RulerKind {
    /// Single needle in the noise haystack, word key, 7-digit number.
    #[serde(rename = "niah_single_1")]
    NiahSingle1,
    /// Single needle among distractor needles, word keys, numbers.
    #[serde(rename = "niah_multikey_2")]
    NiahMultikey2,
    /// Single needle among distractor needles, UUID keys and values.
    #[serde(rename = "niah_multikey_3")]
    NiahMultikey3,
    /// Variable tracking: one chain of 4 hops in the noise haystack.
    #[serde(rename = "vt")]
    Vt,
    /// Frequent words: the 3 most frequent coded words (after the '...' noise word).
    #[serde(rename = "fwe")]
    Fwe,
}

impl RulerKind {
    /// The five offline tasks, in RULER's order.
    pub const ALL: [RulerKind; 5] = [
        RulerKind::NiahSingle1,
        RulerKind::NiahMultikey2,
        RulerKind::NiahMultikey3,
        RulerKind::Vt,
        RulerKind::Fwe,
    ];

    /// RULER's name of the task.
    pub fn name(self) -> &'static str {
        match self {
            RulerKind::NiahSingle1 => "niah_single_1",
            RulerKind::NiahMultikey2 => "niah_multikey_2",
            RulerKind::NiahMultikey3 => "niah_multikey_3",
            RulerKind::Vt => "vt",
            RulerKind::Fwe => "fwe",
        }
    }

    /// The shortest sequence (bytes) the task fits in: its prompt, answer and a little
    /// haystack.
    pub fn min_len(self) -> usize {
        match self {
            RulerKind::NiahMultikey3 => 768,
            // the 4th most frequent word must occur: about 55 words after the template
            RulerKind::Fwe => 1024,
            _ => 512,
        }
    }
}

/// One generated RULER sequence: the sample, the task, and the byte spans of its answer items
/// (positions in the sequence of each reference's bytes, for `string_match_all`).
#[derive(Debug, Clone, PartialEq)]
pub struct RulerSample {
    /// Tokens (bytes), answer targets and masks, lags to each answer byte's source.
    pub sample: Sample,
    /// The task.
    pub kind: RulerKind,
    /// The answer items: each reference's bytes, as positions in the sequence.
    pub refs: Vec<std::ops::Range<usize>>,
    /// Where the (first) needle sits in the context, 0 (start) to 1 (end); NaN for fwe.
    pub depth: f64,
}

/// RULER's noise haystack sentence.
const NOISE: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back \
                     again.";

const NIAH_SINGLE: &str = "A special magic {v} is hidden within the following text. Make sure to \
     memorize it. I will quiz you about the {v} afterwards.\n{context}\nWhat is the special magic \
     {v} for {query} mentioned in the provided text? The special magic {v} for {query} mentioned \
     in the provided text is";

const VT: &str = "Memorize and track the chain(s) of variable assignment hidden in the following \
     text.\n\n{context}\nQuestion: Find all variables that are assigned the value {query} in the \
     text above. Answer: According to the chain(s) of variable assignment in the text above, 5 \
     variables are assigned the value {query}, they are:";

const FWE: &str = "Read the following coded text and track the frequency of each coded word. \
     Find the three most frequently appeared coded words. {context}\nQuestion: Do not provide any \
     explanation. Please ignore the dots '....'. What are the three most frequently appeared \
     words in the above coded text? Answer: According to the coded text above, the three most \
     frequently appeared words are:";

fn words(text: &'static str) -> Vec<&'static str> {
    let mut w: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    w.sort_unstable();
    w.dedup();
    w
}

/// wonderwords 3.0.1's adjectives and nouns (RULER's key words: "{adjective}-{noun}").
fn word_lists() -> &'static (Vec<&'static str>, Vec<&'static str>) {
    static LISTS: std::sync::OnceLock<(Vec<&str>, Vec<&str>)> = std::sync::OnceLock::new();
    LISTS.get_or_init(|| {
        (
            words(include_str!("../../data/ruler/adjectivelist.txt")),
            words(include_str!("../../data/ruler/nounlist.txt")),
        )
    })
}

fn word_key(rng: &mut SplitMix64) -> String {
    let (adjs, nouns) = word_lists();
    let a = adjs[rng.below(adjs.len() as u64) as usize];
    let n = nouns[rng.below(nouns.len() as u64) as usize];
    format!("{a}-{n}")
}

fn number(rng: &mut SplitMix64, digits: u32) -> String {
    let lo = 10u64.pow(digits - 1);
    rng.range(lo, 10 * lo - 1).to_string()
}

/// A version-4 UUID as Python's `uuid.UUID(int=getrandbits(128), version=4)` prints it.
fn uuid(rng: &mut SplitMix64) -> String {
    let (hi, lo) = (rng.next_u64(), rng.next_u64());
    let hi = (hi & !0xf000) | 0x4000; // version 4
    let lo = (lo & !(0xc000 << 48)) | (0x8000 << 48); // RFC 4122 variant
    let h = format!("{hi:016x}{lo:016x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn shuffle<T>(v: &mut [T], rng: &mut SplitMix64) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// The largest n in [0, hi] with `fits(n)` (`fits` monotone: true up to some n), or None when
/// even 0 does not fit.
fn largest_fitting(hi: usize, fits: impl Fn(usize) -> bool) -> Option<usize> {
    if !fits(0) {
        return None;
    }
    let (mut lo, mut hi) = (0, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// A prompt being assembled: the text, and the spans of the needle and of the answer items.
struct Prompt {
    text: String,
    /// (the needle's start, its end) in `text`, for the depth.
    needle: std::ops::Range<usize>,
    /// The context's span in `text`.
    context: std::ops::Range<usize>,
    /// Each answer item, and where in `text` its bytes were shown (their source).
    answers: Vec<(String, usize)>,
}

/// `template` with `{v}`, `{query}` and `{context}` filled; the spans of `context` and of the
/// needle inside it (`needle` is its span within `context`).
fn fill(
    template: &str,
    v: &str,
    query: &str,
    context: &str,
    needle: std::ops::Range<usize>,
) -> Prompt {
    let head = template.split("{context}").next().unwrap_or_default();
    let head = head.replace("{v}", v).replace("{query}", query);
    let tail = template
        .split("{context}")
        .nth(1)
        .unwrap_or_default()
        .replace("{v}", v)
        .replace("{query}", query);
    let start = head.len();
    Prompt {
        text: format!("{head}{context}{tail}"),
        needle: start + needle.start..start + needle.end,
        context: start..start + context.len(),
        answers: Vec::new(),
    }
}

/// `lines` joined by newlines, with each `(at, line)` of `inserts` placed before line `at` of
/// `lines` (as RULER's `list.insert`; inserted from the last, so every `at` indexes the
/// original lines); the span of the first inserted line in the text.
fn joined_with(
    lines: Vec<String>,
    inserts: &[(usize, String)],
) -> (String, std::ops::Range<usize>) {
    let mut all = lines;
    for (at, line) in inserts.iter().rev() {
        all.insert((*at).min(all.len()), line.clone());
    }
    let first = &inserts[0].1;
    let mut text = String::new();
    let mut span = 0..0;
    for (i, l) in all.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        if span.end == 0 && l == first {
            span = text.len()..text.len() + l.len();
        }
        text.push_str(l);
    }
    (text, span)
}

/// One sequence of `kind` in `t` bytes (None below [`RulerKind::min_len`]).
pub fn generate(kind: RulerKind, t: usize, rng: &mut SplitMix64) -> Option<RulerSample> {
    if t < kind.min_len() {
        return None;
    }
    let prompt = match kind {
        RulerKind::NiahSingle1 | RulerKind::NiahMultikey2 | RulerKind::NiahMultikey3 => {
            niah(kind, t, rng)?
        }
        RulerKind::Vt => vt(t, rng)?,
        RulerKind::Fwe => fwe(t, rng)?,
    };
    Some(finish(kind, prompt, t))
}

/// The answer bytes' lengths once written after the prompt: " a b c".
fn answer_len(answers: &[String]) -> usize {
    answers.iter().map(|a| a.len() + 1).sum()
}

fn niah(kind: RulerKind, t: usize, rng: &mut SplitMix64) -> Option<Prompt> {
    let uuids = kind == RulerKind::NiahMultikey3;
    let (v, plural) = if uuids {
        ("uuid", "uuids")
    } else {
        ("number", "numbers")
    };
    let draw = |rng: &mut SplitMix64| -> (String, String) {
        if uuids {
            (uuid(rng), uuid(rng))
        } else {
            (word_key(rng), number(rng, 7))
        }
    };
    let needle_of =
        |k: &str, x: &str| format!("One of the special magic {plural} for {k} is: {x}.");
    let (key, value) = draw(rng);
    let needle = needle_of(&key, &value);
    // the haystack: noise sentences, or distractor needles drawn up front (as many as could
    // fit: a needle is at least 50 bytes)
    let unit_min = if kind == RulerKind::NiahSingle1 {
        NOISE.len()
    } else {
        50
    };
    let cap = t / (unit_min + 1) + 1;
    let hay: Vec<String> = match kind {
        RulerKind::NiahSingle1 => vec![NOISE.to_string(); cap],
        _ => (0..cap)
            .map(|_| {
                let (k, x) = draw(rng);
                needle_of(&k, &x)
            })
            .collect(),
    };
    let frame = fill(NIAH_SINGLE, v, &key, "", 0..0).text.len();
    let size = |n: usize| {
        let context: usize = hay[..n].iter().map(|s| s.len() + 1).sum::<usize>() + needle.len();
        frame + context + value.len() + 1
    };
    let n = largest_fitting(cap, |n| size(n) <= t)?;
    // RULER: `random.sample(range(num_haystack), 1)`, inserted before that sentence
    let at = rng.below(n.max(1) as u64) as usize;
    let (context, span) = joined_with(hay[..n].to_vec(), &[(at, needle.clone())]);
    let mut p = fill(NIAH_SINGLE, v, &key, &context, span);
    let source = p.needle.end - 1 - value.len();
    p.answers = vec![(value, source)];
    Some(p)
}

fn vt(t: usize, rng: &mut SplitMix64) -> Option<Prompt> {
    let mut vars: Vec<String> = Vec::new();
    while vars.len() < 5 {
        let v: String = (0..5)
            .map(|_| (b'A' + rng.below(26) as u8) as char)
            .collect();
        if !vars.contains(&v) {
            vars.push(v);
        }
    }
    let value = number(rng, 5);
    let mut chain = vec![format!("VAR {} = {value}", vars[0])];
    chain.extend((0..4).map(|j| format!("VAR {} = VAR {} ", vars[j + 1], vars[j])));
    let cap = t / (NOISE.len() + 1) + 1;
    let chain_len: usize = chain.iter().map(String::len).sum();
    let frame = fill(VT, "", &value, "", 0..0).text.len();
    let size = |n: usize| {
        // n noise lines and the chain's lines, one newline between each two
        let context = n * NOISE.len() + chain_len + (n + chain.len() - 1);
        frame + context + answer_len(&vars)
    };
    let n = largest_fitting(cap, |n| size(n) <= t)?;
    // RULER: sorted positions among the haystack sentences, each shifted by the lines before
    let positions = {
        let mut p = rng.choose(n.max(chain.len()), chain.len());
        p.sort_unstable();
        p
    };
    let inserts: Vec<(usize, String)> = positions
        .iter()
        .zip(&chain)
        .enumerate()
        .map(|(j, (&pi, line))| (pi + j, line.clone()))
        .collect();
    let mut lines = vec![NOISE.to_string(); n];
    for (at, line) in &inserts {
        lines.insert((*at).min(lines.len()), line.clone());
    }
    let context = lines.join("\n");
    let first = context.find(&chain[0]).unwrap_or(0);
    let mut p = fill(VT, "", &value, &context, first..first + chain[0].len());
    // each variable's source: its assignment line (`VAR X = ...`)
    p.answers = vars
        .iter()
        .map(|v| {
            let at = context.rfind(&format!("VAR {v} =")).unwrap_or(0) + 4;
            (v.clone(), p.context.start + at)
        })
        .collect();
    Some(p)
}

fn fwe(t: usize, rng: &mut SplitMix64) -> Option<Prompt> {
    let vocab_size = (t / 50).max(8);
    let mut vocab: Vec<String> = Vec::new();
    while vocab.len() < vocab_size {
        let w: String = (0..6)
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect();
        if !vocab.contains(&w) {
            vocab.push(w);
        }
    }
    vocab.sort_unstable();
    shuffle(&mut vocab, rng);
    vocab[0] = "...".into();
    // counts ∝ k^-α / ζ(α), α = 2 (ζ(2) = π²/6), as RULER's `num_words·k^-α/zeta(α)` truncated
    let counts = |num_words: usize| -> Vec<usize> {
        let z = std::f64::consts::PI.powi(2) / 6.0;
        (1..=vocab.len())
            .map(|k| (num_words as f64 * (k as f64).powi(-2) / z) as usize)
            .collect()
    };
    let answers: Vec<String> = vocab[1..4].to_vec();
    let frame = fill(FWE, "", "", "", 0..0).text.len();
    let size = |num_words: usize| {
        let c = counts(num_words);
        let words: usize = c.iter().zip(&vocab).map(|(n, w)| n * (w.len() + 1)).sum();
        frame + words.saturating_sub(1) + answer_len(&answers)
    };
    let n = largest_fitting(t, |n| size(n) <= t)?;
    // the answer is well posed only when its three words occur and outnumber the rest
    let c = counts(n);
    if c.len() < 5 || c[3] == 0 || c[3] <= c[4] {
        return None;
    }
    let mut sampled: Vec<&str> = counts(n)
        .iter()
        .zip(&vocab)
        .flat_map(|(&c, w)| std::iter::repeat_n(w.as_str(), c))
        .collect();
    shuffle(&mut sampled, rng);
    let context = sampled.join(" ");
    let mut p = fill(FWE, "", "", &context, 0..0);
    p.answers = answers
        .into_iter()
        .map(|w| {
            let at = context.rfind(&w).map_or(0, |i| p.context.start + i);
            (w, at)
        })
        .collect();
    Some(p)
}

/// The prompt, then " item item ..." as the answer, left-padded with spaces to `t` bytes; the
/// answer bytes are scored (the target at the position before each), each with its lag to the
/// byte it copies.
fn finish(kind: RulerKind, p: Prompt, t: usize) -> RulerSample {
    let mut text = p.text.clone().into_bytes();
    let mut refs = Vec::new();
    let mut sources = Vec::new();
    for (item, source) in &p.answers {
        text.push(b' ');
        refs.push(text.len()..text.len() + item.len());
        sources.push(*source);
        text.extend_from_slice(item.as_bytes());
    }
    let pad = t.saturating_sub(text.len());
    let mut tokens = vec![u32::from(b' '); pad];
    tokens.extend(text.iter().map(|&b| u32::from(b)));
    tokens.truncate(t);
    let mut sample = Sample::unlabelled(tokens);
    let refs: Vec<std::ops::Range<usize>> = refs
        .into_iter()
        .map(|r| r.start + pad..r.end + pad)
        .collect();
    for (r, &src) in refs.iter().zip(&sources) {
        for (i, at) in r.clone().enumerate() {
            // the byte at `at` is predicted at `at - 1`, from its copy at `pad + src + i`
            let (p_at, copy) = (at - 1, pad + src + i);
            sample.targets[p_at] = sample.tokens[at];
            sample.mask[p_at] = true;
            sample.lags[p_at] = (at - copy) as u32;
        }
    }
    for q in p.needle.clone() {
        sample.memorable[pad + q] = true;
    }
    let depth = if p.needle.is_empty() || p.context.is_empty() {
        f64::NAN
    } else {
        (p.needle.start - p.context.start) as f64 / p.context.len() as f64
    };
    RulerSample {
        sample,
        kind,
        refs,
        depth,
    }
}
