//! The VORT memory layer (docs/DESIGN.md §2), on candle 0.11.1.
//!
//! One head stores token i with order α_i and is queried at t >= i (normalised retention):
//!
//! ```text
//! y_t = Σ_{i<=t} K_i(t-i) φ(q_t)·φ(k_i) v_i / (Σ_{i<=t} K_i(t-i) φ(q_t)·φ(k_i) + eps_den)
//! ```
//!
//! with K_i(j) the Grünwald–Letnikov weight w_j(α_i) (exact in [`retention::exact_gl`]) or its
//! certified sum of exponentials Σ_n c_n(α_i) e^(-u_n j), j >= 1, K_i(0) = 1 (every form).
//!
//! - [`mixer`]: the choice of mixer (VORT or a baseline) with each kind's own settings.
//! - [`nodes`]: node modes (banks, shared nodes, fixed mixtures) as node tables {u_n, c_n(a)}.
//! - [`retention`]: the four forms of the retention core under one contract, with fla's names,
//!   and what they share (table checks, node weights, normalisation, the state):
//!   - [`retention::naive()`]: the O(T²) f64 reference of the SOE kernel (beside it,
//!     [`retention::exact_gl`], the same sum with the exact GL kernel);
//!   - [`retention::naive_recurrent()`]: the streaming form, token by token with an explicit
//!     state (save/restore to safetensors), O(N F D) per token;
//!   - [`retention::chunk()`]: the training form in plain candle ops (autodiff twin of the
//!     fused op);
//!   - [`retention::fused_chunk()`]: the fused CustomOp with hand-written backward (gemm on
//!     blocks, rayon).
//! - [`dims`]: the sizes of a retention call.
//! - [`features`]: FAVOR+ positive orthogonal random features, ELU+1.
//! - [`attention`]: causal and sliding-window softmax attention (the baseline).
//! - [`ops`]: elementwise ops fused and parallel where candle's are single-threaded (GELU).
//! - [`block`]: projections, q/k normalisation, router, VORT and the baselines in one block.
//! - [`model`]: the sequence model (embeddings, blocks with short convolution and MLP, head),
//!   its configuration, and streaming with [`model::ModelState`].
//! - [`pretrained`]: a `vort export` file's config and tensors, for [`Model::new`].
//! - [`tol`]: named tolerances and the relative-RMS error; [`error`]: the typed errors.
//!
//! # Use as a library
//!
//! A [`block::Block`] is a candle layer: its weights come from any [`candle_nn::VarBuilder`]
//! (a `VarMap` filled by [`block::Block::init`], or a safetensors file), it implements
//! [`candle_nn::Module`], and [`block::Block::step`] streams one token at a time with a state
//! whose size does not grow with the context. The whole model is [`Model`], built by
//! `Model::new(&Config, vb)` from its tensors alone (the FAVOR+ projections are stored);
//! [`pretrained::load`] reads both from a `vort export` file:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use candle_core::{DType, Device, Tensor};
//! let dev = Device::Cpu;
//! // vort export --run RUN --out model.safetensors
//! let (cfg, vb) = vort::pretrained::load("model.safetensors".as_ref(), DType::F32, &dev)?;
//! let model = vort::Model::new(&cfg, vb)?;
//! let hidden = model.forward(&Tensor::new(&[[1u32, 2, 3]], &dev)?)?.hidden; // [B, T, d_model]
//! let logits = model.logits(&hidden)?; // [B, T, vocab]
//! # Ok(())
//! # }
//! ```
//!
//! Streaming: [`Model::forward_with_state`] continues B streams by a piece each (a prompt's
//! prefill), [`Model::decode`] by one token each (tokens `[B]` -> logits `[B, V]`), both through
//! the same [`model::ModelState`]; [`Model::step`] is decode at batch 1.
//!
//! Devices: the fused ops ([`ops`], the fused retention) have CPU kernels only; on any other
//! candle device (CUDA, Metal) every one falls back to its plain candle twin
//! ([`ops::fused_on`]), which gives the same outputs, states and gradients within f32 rounding
//! (tested on the CPU through [`ops::with_plain_ops`]: `tests/plain_ops.rs`). Decode copies
//! the retention state to the host per token, which is slow off the CPU.
//!
//! ```
//! use candle_core::{DType, Device, IndexOp, Tensor};
//! use candle_nn::{Module, VarBuilder, VarMap};
//! use vort::block::{Block, BlockConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = Device::Cpu;
//! // d_model 64, 4 heads × 16, 32 FAVOR+ features, VORT with shared nodes (δ 0.1, horizon 4096)
//! let cfg = BlockConfig::default();
//!
//! // seeded weights into a VarMap, saved as safetensors, and read back as a user's model would
//! let vm = VarMap::new();
//! Block::init(&cfg, &vm, "layer0", &dev)?;
//! let file = std::env::temp_dir().join(format!("vort-doc-{}.safetensors", std::process::id()));
//! vm.save(&file)?;
//! // SAFETY: the file is not modified while it is mapped.
//! let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&file], DType::F32, &dev)? };
//! let block = Block::new(cfg.clone(), vb.pp("layer0"))?;
//!
//! // training form: x [B, T, d_model] -> y [B, T, d_model]
//! let x = Tensor::randn(0f32, 1.0, (1, 10, cfg.d_model), &dev)?;
//! let y = block.forward(&x)?; // or block.forward_with_entropy(&x, entropy) for α and more
//! assert_eq!(y.dims(), &[1, 10, 64]);
//!
//! // streaming form: one token at a time, the state carried (None: a new stream)
//! let mut state = None;
//! let mut worst = 0f32;
//! for t in 0..10 {
//!     let out = block.step(&x.narrow(1, t, 1)?, None, &mut state)?;
//!     let diff = (out.y.i((0, 0))? - y.i((0, t))?)?.abs()?.max(0)?.to_scalar::<f32>()?;
//!     worst = worst.max(diff);
//! }
//! println!("forward {:?}, max |step - forward| = {worst:.1e}", y.dims());
//! assert!(worst < 1e-4);
//! std::fs::remove_file(&file)?;
//! # Ok(())
//! # }
//! ```
//!
//! Tests chain the forms (docs/DESIGN.md §5): naive <- naive_recurrent <- chunk <- fused_chunk,
//! for outputs, final states and gradients (q, k, v, α, and the learned decay of the
//! exponential baseline).

pub mod attention;
pub mod block;
pub mod dims;
pub mod error;
pub mod features;
pub mod fsio;
pub mod mixer;
pub mod model;
pub mod nodes;
pub mod ops;
pub mod pretrained;
pub mod retention;
pub mod st;
pub mod tol;

pub use dims::Dims;
pub use error::{Result, VortError};
pub use mixer::{Mixer, MixerKind, Routing};
pub use model::{Config, Model};
pub use nodes::{NodeMode, NodeSpec, NodeTable};
pub use vort_math;
