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

/// Writes `value` as pretty JSON (one trailing newline) to `path`, atomically under the output
/// rule (`--out FILE` of the benches and probes).
pub fn write_json<T: Serialize>(path: &std::path::Path, value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Io(format!("cannot serialise the result: {e}")))?;
    vort_lab::train::checkpoint::write_atomic(path, (text + "\n").as_bytes())?;
    Ok(())
}

/// Refuses an `--out` that is one of `run`'s files or lies inside its directory (the output
/// rule for commands that read a run), exit 2; an unreadable path is exit 1.
pub fn check_out_beside_run(out: &std::path::Path, run: &std::path::Path) -> Result<(), CliError> {
    vort_lab::train::check_output(out, &vort_lab::train::protected_paths(run)).map_err(|e| {
        if vort::fsio::is_refused(&e) {
            CliError::Usage(format!("--out {e}"))
        } else {
            CliError::Io(format!("--out {}: {e}", out.display()))
        }
    })
}

/// Formats a real for tables: 17 significant digits in exponent form.
pub fn sci(v: f64) -> String {
    format!("{v:.16e}")
}

/// Formats a real compactly: 3 significant digits in exponent form.
pub fn short(v: f64) -> String {
    format!("{v:.2e}")
}
