//! The error of a subcommand and its exit status.

use vort_math::MathError;

/// Why a subcommand failed; [`CliError::exit_code`] maps it to the exit status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An argument outside its domain found after parsing (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The mathematics refused an argument or could not certify a result (exit status 2).
    #[error(transparent)]
    Math(#[from] MathError),
    /// An output could not be written (exit status 1).
    #[error("{0}")]
    Io(String),
    /// Stopped by a signal (exit status 128 + the signal: 130 for SIGINT, 143 for SIGTERM).
    #[error("{message}")]
    Interrupted {
        /// The signal number.
        signal: i32,
        /// What was kept.
        message: String,
    },
}

impl CliError {
    /// 2 for bad arguments (usage and math errors), 1 for failures to write outputs.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Math(_) => 2,
            CliError::Io(_) => 1,
            CliError::Interrupted { signal, .. } => u8::try_from(128 + signal).unwrap_or(130),
        }
    }
}

impl From<vort_lab::plot::PlotError> for CliError {
    fn from(e: vort_lab::plot::PlotError) -> Self {
        match e {
            vort_lab::plot::PlotError::Invalid(m) => CliError::Usage(m),
            other => CliError::Io(other.to_string()),
        }
    }
}
