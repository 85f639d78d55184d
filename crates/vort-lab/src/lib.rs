//! Experiments over the VORT layer: tasks and data, the training loop, evaluation,
//! reproduction reports and plots. The model itself is [`vort::model`].
//!
//! Cargo features: `corpus` (the books data and task) and `reports` (`reproduce`, the theory
//! report, plots and compressor anchors; implies `corpus`), both on by default. Without them
//! the crate is the tasks, the trainer and the loaders (what the Python wheel links).
#[cfg(feature = "corpus")]
pub mod data;
#[cfg(feature = "reports")]
pub mod plot;
#[cfg(feature = "reports")]
pub mod reproduce;
pub mod tasks;
#[cfg(feature = "reports")]
pub mod theory_report;
pub mod train;
pub use train::eval;
