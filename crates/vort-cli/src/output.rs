//! Writing results to stdout and files.

use std::io::Write;

use serde::Serialize;

use crate::error::CliError;

/// Writes `text` to stdout. A closed pipe (`vort ... | head`) ends quietly; any other write
/// failure is an I/O error.
pub fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Io(format!("cannot write to stdout: {e}"))),
    }
}

/// Writes `value` as pretty JSON (one trailing newline) to stdout.
pub fn emit_json<T: Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Io(format!("cannot serialise the result: {e}")))?;
    emit(&(text + "\n"))
}

/// Formats a real for tables: 17 significant digits in exponent form.
pub fn sci(v: f64) -> String {
    format!("{v:.16e}")
}

/// Formats a real compactly: 3 significant digits in exponent form.
pub fn short(v: f64) -> String {
    format!("{v:.2e}")
}
