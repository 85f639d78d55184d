//! A process-wide request to stop a long computation: the Python bindings set it from their
//! SIGINT handler while a call runs (Ctrl-C in a 166 s `shared_nodes` build kept running);
//! the CLI never sets it. The SOE builders and their certificates look at it between steps
//! and stop with [`MathError::Interrupted`]; whoever set it clears it ([`clear`]).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::MathError;

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every computation that checks to stop. Async-signal-safe (one atomic store).
pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Whether a stop was requested and not cleared yet.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Clears the request; returns whether there was one.
pub fn clear() -> bool {
    REQUESTED.swap(false, Ordering::Relaxed)
}

/// [`MathError::Interrupted`] when a stop was requested.
///
/// # Errors
/// [`MathError::Interrupted`].
pub fn check() -> Result<(), MathError> {
    if requested() {
        Err(MathError::Interrupted)
    } else {
        Ok(())
    }
}
