//! The one error type of the layer crate: invalid input is a typed error, never a panic.

use vort_math::MathError;

/// Why a layer computation refused its input.
#[derive(Debug, thiserror::Error)]
pub enum VortError {
    /// A math-level precondition failed (order, horizon, tolerance, certificate).
    #[error(transparent)]
    Math(#[from] MathError),
    /// An error raised inside candle (shape mismatch, dtype, backward).
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// A tensor has the wrong shape; the message names it and the expected shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected}")]
    Shape {
        name: String,
        got: Vec<usize>,
        expected: String,
    },
    /// A tensor that the computation needs is absent (e.g. from a safetensors file).
    #[error("tensor `{0}` is missing")]
    MissingTensor(String),
    /// A tensor holds NaN or an infinity.
    #[error("tensor `{name}` holds a non-finite value at flat index {index}")]
    NonFinite { name: String, index: usize },
    /// Features must be nonnegative (docs/DESIGN.md §2: φ is a positive feature map).
    #[error("tensor `{name}` holds a negative feature {value} at flat index {index}")]
    NegativeFeature {
        name: String,
        index: usize,
        value: f64,
    },
    /// An order α outside its domain.
    #[error("order `{name}` = {value} at flat index {index} is outside [{lo}, {hi}]")]
    OrderOutOfRange {
        name: String,
        index: usize,
        value: f64,
        lo: f64,
        hi: f64,
    },
    /// A tensor has an unsupported dtype.
    #[error("tensor `{name}` has dtype {got}, expected {expected}")]
    DType {
        name: String,
        got: String,
        expected: String,
    },
    /// A stream or sequence would reach lags past the node table's certified horizon, where
    /// the SOE kernel is no longer the GL kernel to eps. Build the table for a longer horizon
    /// (`NodeSpec::horizon`; models stream with a 2^20 table by default).
    #[error(
        "context of {context} tokens exceeds the memory's certified horizon of {horizon} \
         (build the node table for a longer horizon)"
    )]
    BeyondHorizon { context: u64, horizon: u64 },
    /// Any other argument out of its domain (the message names it).
    #[error("{0}")]
    InvalidArgument(String),
    /// Reading a file failed (a path the user can fix: exit status 2).
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing a file failed (the environment: a full disk, a read-only directory; exit
    /// status 1). The old file, if any, is untouched.
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A safetensors file could not be parsed or written.
    #[error("safetensors: {0}")]
    SafeTensors(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, VortError>;

impl VortError {
    /// True for errors caused by the caller's input (a bad file, tensor, option or argument),
    /// as opposed to an internal failure; the CLI maps these to exit status 2.
    pub fn is_input_error(&self) -> bool {
        match self {
            // a write refused by the output rule (crate::fsio) is the user's path to fix
            VortError::Write { source, .. } => crate::fsio::is_refused(source),
            VortError::Candle(_) => false,
            _ => true,
        }
    }

    /// This error as candle's, for the `Module` impls: a candle error unwrapped, any other
    /// wrapped (its message kept).
    pub fn into_candle(self) -> candle_core::Error {
        match self {
            VortError::Candle(e) => e,
            other => candle_core::Error::wrap(other),
        }
    }
}
