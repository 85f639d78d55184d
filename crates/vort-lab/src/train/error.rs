//! Why training (or evaluation) stopped: [`TrainError`], and which errors the user can fix.

// the module's shared imports and the other jobs' items (re-exported from `train`)
use super::*;

/// Why training (or evaluation) stopped.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The config file cannot be parsed (unknown field, wrong type) or is out of domain.
    #[error("config {path}: {message}")]
    Config {
        /// The file (or `<inline>`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The task configuration is invalid.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The model configuration is invalid, or the layer failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// candle failed.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `resume` was asked but the run has no checkpoint.
    #[error("no checkpoint at {0}: the run has not saved one (train it, or check the directory)")]
    NoCheckpoint(String),
    /// The checkpoint cannot be read or fails its checksum.
    #[error("checkpoint {path} is corrupt: {reason}")]
    CheckpointCorrupt {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The checkpoint belongs to another configuration or model.
    #[error("checkpoint {path} does not match this run: {reason}")]
    CheckpointMismatch {
        /// The file.
        path: String,
        /// What differs.
        reason: String,
    },
    /// A fresh run was asked in a directory that already holds one.
    #[error("{0} already holds a run (checkpoint present); resume it or choose another directory")]
    RunExists(String),
    /// Another process holds the run directory's lock ([`RunLock`]).
    #[error("{0} is in use by another vort process ({LOCK_FILE} is locked): wait for it to finish, or choose another directory")]
    RunBusy(String),
    /// Training diverged: a non-finite loss, or a non-finite gradient from a finite loss
    /// (caught before the update, which would have made every weight it reaches NaN).
    #[error("training diverged at step {step}: loss {loss}, gradient norm {grad_norm} (nothing was updated)")]
    Diverged {
        /// Step.
        step: u64,
        /// Loss.
        loss: f64,
        /// Global gradient norm (NaN when the loss already was not finite).
        grad_norm: f64,
    },
    /// The model's output at inference (evaluation, streams) is not finite: the weights or
    /// the activations overflowed. Nothing is reported or written from it (exit status 1).
    #[error("the model produced non-finite outputs ({0}); the checkpoint's weights or its activations overflow, so no score is reported")]
    NonFinite(String),
    /// Writing a plot failed.
    #[cfg(feature = "reports")]
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
    /// A compressor anchor of a books report could not be measured (a library failure).
    #[cfg(feature = "reports")]
    #[error("compressor anchor: {0}")]
    Anchor(#[from] crate::data::compressors::AnchorError),
    /// Serialising JSON or TOML failed.
    #[error("serialise: {0}")]
    Serialise(String),
    /// A command-line flag out of its domain (the message names the flag, not a file).
    #[error("{0}")]
    Flag(String),
}

impl TrainError {
    /// True for errors caused by the user's input (unknown task or memory kind, a config with
    /// a wrong field or value, a missing, corrupt or mismatched checkpoint, a fresh run in an
    /// existing run directory): the CLI maps these to exit status 2. In every such case
    /// nothing in the run directory was written.
    pub fn is_bad_input(&self) -> bool {
        if let TrainError::Model(ModelError::Layer(e)) = self {
            // the layer's refusals of its input (a stream past the horizon, a bad recipe)
            return e.is_input_error();
        }
        if let TrainError::Io { source, .. } = self {
            // a write refused by the output rule (vort::fsio): another path fixes it
            return vort::fsio::is_refused(source);
        }
        matches!(
            self,
            TrainError::Flag(_)
                | TrainError::Config { .. }
                | TrainError::Task(_)
                | TrainError::Model(ModelError::UnknownMixer(_) | ModelError::Invalid(_))
                | TrainError::NoCheckpoint(_)
                | TrainError::CheckpointCorrupt { .. }
                | TrainError::CheckpointMismatch { .. }
                | TrainError::RunExists(_)
                | TrainError::RunBusy(_)
        )
    }
}
