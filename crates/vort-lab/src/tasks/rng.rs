//! SplitMix64: a tiny seedable generator whose state is one `u64`, so that every sample of a
//! task is a pure function of (seed, stream, index) and data order survives a resume.
//!
//! The generator itself is `vort_math::theory::SplitMix64`; this wrapper adds stream
//! derivation and the integer draws the tasks need.

use vort_math::theory::SplitMix64;

/// SplitMix64 (Steele, Lea & Flood 2014) with integer helpers.
#[derive(Debug, Clone)]
pub struct SplitMix(SplitMix64);

/// Mixes three words into one seed (distinct streams and indices give unrelated generators).
pub fn derive(seed: u64, stream: u64, index: u64) -> u64 {
    let mut r = SplitMix::new(seed ^ 0x6A09_E667_F3BC_C908);
    let a = r.next_u64() ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut r = SplitMix::new(a);
    let b = r.next_u64() ^ index.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    SplitMix::new(b).next_u64()
}

impl SplitMix {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix(SplitMix64::new(seed))
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// Uniform in [0, 1).
    pub fn unif(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform integer in [0, n) (n >= 1), by rejection (no modulo bias).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n >= 1, "below(0)");
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }
    /// Uniform integer in [lo, hi] (inclusive, lo <= hi).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// A uniformly random k-subset of 0..n in random order (partial Fisher–Yates).
    pub fn choose(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = i + self.below((n - i) as u64) as usize;
            v.swap(i, j);
        }
        v.truncate(k.min(n));
        v
    }
}
