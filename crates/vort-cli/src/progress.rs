//! A spinner on stderr for work that takes more than a second (hidden when stderr is not a
//! terminal, so scripted use sees only the result).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How long work runs before the spinner appears.
const DELAY: Duration = Duration::from_secs(1);

/// Runs `work` on this thread; if it is still running after [`DELAY`], shows a spinner with
/// `message` and the elapsed time until it returns.
pub fn with_spinner<T>(message: &str, work: impl FnOnce() -> T) -> T {
    let (done, wait) = mpsc::channel::<()>();
    let message = message.to_string();
    let spinner = std::thread::spawn(move || {
        if wait.recv_timeout(DELAY) != Err(RecvTimeoutError::Timeout) {
            return;
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(message);
        bar.enable_steady_tick(Duration::from_millis(120));
        let _ = wait.recv();
        bar.finish_and_clear();
    });
    let out = work();
    drop(done);
    let _ = spinner.join();
    out
}
