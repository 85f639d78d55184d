//! A trained books model for the commands that stream bytes through it (`vort retrieval`,
//! `vort eval --whole-books`): the run read and checked to be a books run, then built with
//! node tables certified for the longest stream, and a progress bar in bytes.

use std::path::Path;

use vort::model::Model;
use vort_lab::tasks::TaskKind;
use vort_lab::train::eval::TrainedModel;
use vort_lab::train::TrainError;

use crate::error::CliError;

/// The trained model of `run`, refused (exit 2) unless it is a books run; `needs` ends the
/// refusal ("the retrieval probe needs a byte-level books model").
pub fn load(run: &Path, needs: &str) -> Result<TrainedModel, CliError> {
    let trained = TrainedModel::load(run)?;
    if trained.cfg.task.kind() != TaskKind::Books {
        return Err(CliError::Usage(format!(
            "{} is a {} run; {needs}",
            run.display(),
            trained.cfg.task.kind()
        )));
    }
    Ok(trained)
}

/// Builds `trained` with its node tables certified for streams of `longest` lags where the
/// run's are shorter (said on stderr; the weights do not depend on the node tables).
pub fn build_for(trained: TrainedModel, longest: u64) -> Result<Model, CliError> {
    let (_, mut model, _vm, _) = trained.build()?;
    if model.horizon().is_some_and(|h| h < longest) {
        model.set_horizon(longest).map_err(TrainError::from)?;
        eprintln!("node tables rebuilt and certified for {longest} lags");
    }
    Ok(model)
}

/// A progress bar of bytes streamed (its length set as the stream learns its total).
pub fn bytes_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} bytes {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// The progress callback of a byte stream, `(done, total)`, drawn on `bar`.
pub fn track(bar: &indicatif::ProgressBar) -> impl Fn(usize, usize) + '_ {
    |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    }
}
