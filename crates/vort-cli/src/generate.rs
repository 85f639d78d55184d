//! `vort generate`: sample bytes from a trained books model, printed as they come.
//!
//! Every byte is written and flushed as it is drawn, so output redirected to a file keeps
//! every byte generated before an interruption. SIGINT and SIGTERM stop the stream after the
//! byte being written: stdout gets the final newline, stderr one line saying how many bytes
//! were kept, and the exit status is 128 + the signal (130 for SIGINT, 143 for SIGTERM). A
//! signal during the setup (loading, rebuilding the node tables, the prefill), before any
//! byte is out, exits at once with the same status and line.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use clap::Args;
use vort_lab::tasks::TaskKind;
use vort_lab::train::generate::{generate, GenerateOptions};
use vort_lab::train::{eval, TrainError};

use crate::args::{parse_count, parse_real};
use crate::error::CliError;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// A books run directory written by `vort train --task books` (config and checkpoint), or
    /// a weights file written from one by `vort export`.
    #[arg(long, value_name = "DIR|FILE")]
    run: PathBuf,
    /// Text to continue (default: one newline).
    #[arg(long, conflicts_with = "prompt_file")]
    prompt: Option<String>,
    /// File whose bytes are the prompt.
    #[arg(long, value_name = "F")]
    prompt_file: Option<PathBuf>,
    /// Bytes to generate (>= 1).
    #[arg(long, value_parser = parse_count)]
    bytes: u64,
    /// Softmax temperature (0 = greedy).
    #[arg(long, default_value = "0.8", value_parser = parse_real, allow_negative_numbers = true)]
    temperature: f64,
    /// Seed of the sampler.
    #[arg(long, default_value = "0", value_parser = parse_count)]
    seed: u64,
}

/// Phases of the signal protocol: the handler exits the process itself during the setup,
/// and only raises [`SIGNAL`] once bytes are being written (the loop stops after the byte it
/// is writing, so the count it reports is exact).
const SETUP: u8 = 0;
const STREAMING: u8 = 1;
const EXITING: u8 = 2;
static PHASE: AtomicU8 = AtomicU8::new(SETUP);
/// The signal received (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

fn signal_name(sig: i32) -> &'static str {
    if sig == libc::SIGTERM {
        "SIGTERM"
    } else {
        "SIGINT"
    }
}

/// Async-signal-safe: atomics, write(2) and _exit(2) only.
extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
    if PHASE
        .compare_exchange(SETUP, EXITING, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        let msg: &[u8] = if sig == libc::SIGTERM {
            b"error: interrupted by SIGTERM before the first byte was generated (nothing written)\n"
        } else {
            b"error: interrupted by SIGINT before the first byte was generated (nothing written)\n"
        };
        // SAFETY: write(2) and _exit(2) are async-signal-safe; msg is a static buffer
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(128 + sig);
        }
    }
}

/// Installs [`on_signal`] for SIGINT and SIGTERM (also where the parent ignored SIGINT, as a
/// non-interactive shell does for `&` jobs: an explicit signal still stops the stream cleanly).
fn install_signal_handler() {
    // SAFETY: a zeroed sigaction with an empty mask and a handler of the right signature
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

pub fn run(a: GenerateArgs) -> Result<(), CliError> {
    // every argument is checked before the model is loaded
    if a.bytes == 0 {
        return Err(CliError::Usage("--bytes must be >= 1".into()));
    }
    if !(a.temperature.is_finite() && a.temperature >= 0.0) {
        return Err(CliError::Usage(format!(
            "--temperature {:?} must be >= 0",
            a.temperature
        )));
    }
    crate::experiment::check_trained_path(&a.run, "train one with `vort train --task books`")?;
    let prompt = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) => p.as_bytes().to_vec(),
        (None, Some(f)) => std::fs::read(f)
            .map_err(|e| CliError::Usage(format!("--prompt-file {}: {e}", f.display())))?,
        (None, None) => Vec::new(),
    };
    // the config first (checked, memory estimate included): nothing is built for a model that
    // is not a books model
    let trained = eval::TrainedModel::load(&a.run)?;
    let cfg = &trained.cfg;
    if cfg.task.kind() != TaskKind::Books {
        return Err(CliError::Usage(format!(
            "{} is a {} run; generate needs a books model (`vort train --task books`)",
            a.run.display(),
            cfg.task.kind()
        )));
    }
    // the memory is certified for the whole prompt + output: more than the SOE builder's
    // largest horizon is refused as what the user asked for, not as a "horizon"
    let context = (prompt.len().max(1) as u64).saturating_add(a.bytes);
    if cfg.model.mixer.horizon().is_some() && context > vort::vort_math::limits::MAX_HORIZON {
        return Err(CliError::Usage(format!(
            "--bytes {} after a {}-byte prompt is more than the {:.0e} bytes this model's memory \
             can be certified for; ask for fewer bytes",
            a.bytes,
            prompt.len(),
            vort::vort_math::limits::MAX_HORIZON as f64
        )));
    }
    install_signal_handler();
    let (_, mut model, _vm, _) = trained.build()?;
    let opts = GenerateOptions {
        bytes: usize::try_from(a.bytes).unwrap_or(usize::MAX),
        temperature: a.temperature,
        seed: a.seed,
    };
    let mut out = std::io::stdout().lock();
    let mut written = 0u64;
    // the reader went away (`vort generate ... | head -c 10`): stop quietly, as Unix tools do
    let mut closed = false;
    let result = generate(&mut model, &prompt, &opts, |b| {
        if PHASE.load(Ordering::SeqCst) == SETUP
            && PHASE
                .compare_exchange(SETUP, STREAMING, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            // the handler is exiting the process (nothing written): wait for it
            loop {
                std::thread::park();
            }
        }
        if SIGNAL.load(Ordering::SeqCst) != 0 {
            return Err(TrainError::Flag("interrupted".into()));
        }
        // bytes go out as they are drawn (flushed one by one): a user watches the text
        // appear, and a file keeps every byte written before an interruption
        match out.write_all(&[b]).and_then(|()| out.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                closed = true;
                return Err(TrainError::Flag("stdout closed".into()));
            }
            Err(e) => {
                return Err(TrainError::Io {
                    path: "<stdout>".into(),
                    source: e,
                })
            }
        }
        written += 1;
        Ok(())
    });
    if closed {
        return Ok(());
    }
    let end = out.write_all(b"\n").and_then(|()| out.flush());
    let signal = SIGNAL.load(Ordering::SeqCst);
    if signal != 0 && (result.is_err() || written < a.bytes) {
        return Err(CliError::Interrupted {
            signal,
            message: format!(
                "interrupted by {} after {written} of {} bytes (the {written} bytes written are kept)",
                signal_name(signal),
                a.bytes
            ),
        });
    }
    let summary = result?;
    match end {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        end => end.map_err(|e| CliError::Io(format!("cannot write to stdout: {e}")))?,
    }
    eprintln!(
        "{} bytes after a {}-byte prompt; memory certified to {} lags, resident state {} bytes",
        summary.output.len(),
        summary.prompt_bytes,
        summary
            .horizon
            .map_or("any number of".to_string(), |h| h.to_string()),
        summary.state_bytes
    );
    Ok(())
}
