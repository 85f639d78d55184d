//! The benchmarks behind `vort bench`: each claims speed as a ratio against a baseline measured
//! in the same run, and records the load average before and after (the machine is shared).
//!
//! - [`layer`]: the fused chunked layer forward and forward+backward against an sgemm, decode
//!   latency and state bytes from 1K to 1M context, softmax against the linear form;
//! - [`stream`]: the drift of the f32 recurrent form from f64 over up to 2^20 tokens;
//! - [`train`]: full training steps of the reference models with every mixer;
//! - [`generate`]: the first byte of a books model's generate, node tables cold and warm.

pub mod generate;
pub mod layer;
pub mod stream;
pub mod train;

/// The 1-minute load average from /proc/loadavg (None where it cannot be read).
pub fn load_avg_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
