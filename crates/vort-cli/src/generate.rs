//! `vort generate`: sample bytes from a trained books model, printed as they come.

use std::io::Write;
use std::path::PathBuf;

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
    let (cfg, mut model, _vm) = eval::load_inference_model(&a.run)?;
    if cfg.task.kind != TaskKind::Books {
        return Err(CliError::Usage(format!(
            "{} is a {} run; generate needs a books model (`vort train --task books`)",
            a.run.display(),
            cfg.task.kind
        )));
    }
    let opts = GenerateOptions {
        bytes: usize::try_from(a.bytes).unwrap_or(usize::MAX),
        temperature: a.temperature,
        seed: a.seed,
    };
    let mut out = std::io::stdout().lock();
    let summary = generate(&mut model, &prompt, &opts, |b| {
        // bytes go out as they are drawn: a user watches the text appear
        out.write_all(&[b])
            .and_then(|()| out.flush())
            .map_err(|e| TrainError::Serialise(format!("stdout: {e}")))
    })?;
    out.write_all(b"\n")
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Io(format!("stdout: {e}")))?;
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
