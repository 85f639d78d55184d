//! The VORT memory layer (docs/DESIGN.md §2), on candle 0.11.1.
//!
//! One head stores token i with order α_i and is queried at t >= i (normalised retention):
//!
//! ```text
//! y_t = Σ_{i<=t} K_i(t-i) φ(q_t)·φ(k_i) v_i / (Σ_{i<=t} K_i(t-i) φ(q_t)·φ(k_i) + eps_den)
//! ```
//!
//! with K_i(j) the Grünwald–Letnikov weight w_j(α_i) (exact in [`retention::naive`]) or its certified
//! sum of exponentials Σ_n c_n(α_i) e^(-u_n j), j >= 1, K_i(0) = 1 (every other form).
//!
//! - [`nodes`]: memory modes (banks, shared nodes, fixed mixtures) as node tables {u_n, c_n(a)}.
//! - [`retention`]: the four forms of the retention core and what they share (table checks,
//!   node weights, normalisation):
//!   - [`retention::naive`]: the O(T²) f64 reference (exact GL kernel or the table's SOE);
//!   - [`retention::recurrent`]: the streaming form with an explicit state (save/restore to
//!     safetensors), O(N F D) per token;
//!   - [`retention::chunked`]: the training form in plain candle ops (autodiff twin of the
//!     fused op);
//!   - [`retention::fused`]: the fused CustomOp with hand-written backward (gemm on blocks,
//!     rayon), and the prefill of a recurrent state.
//! - [`features`]: FAVOR+ positive orthogonal random features, ELU+1.
//! - [`attention`]: causal and sliding-window softmax attention (the baseline).
//! - [`ops`]: elementwise ops fused and parallel where candle's are single-threaded (GELU).
//! - [`block`]: projections, q/k normalisation, router, VORT and the baselines in one block.
//! - [`io`]: `vort retention` on safetensors files, with typed input validation.
//! - [`mod@bench`]: the benchmark functions behind `vort bench layer` and `vort bench stream`.
//! - [`tol`]: named tolerances and the relative-RMS error; [`error`]: the typed errors.
//!
//! Tests chain the forms (docs/DESIGN.md §5): naive <- recurrent <- chunked <- fused, for outputs, final
//! states and gradients (q, k, v, α, and the learned decay of the exponential baseline).

pub mod attention;
pub mod bench;
pub mod block;
pub mod dims;
pub mod error;
pub mod features;
pub mod fsio;
pub mod io;
pub mod nodes;
pub mod ops;
pub mod retention;
pub mod st;
pub mod tol;

pub use dims::Dims;
pub use error::{Result, VortError};
pub use nodes::{MemoryMode, NodeSpec, NodeTable};
pub use vort_math;
