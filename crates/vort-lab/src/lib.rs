//! Experiments over the VORT layer: tasks and data, the training loop, evaluation,
//! reproduction reports and plots. The model itself is [`vort::model`].
pub mod data;
pub mod plot;
pub mod tasks;
pub mod theory_report;
pub mod train;
pub use train::eval;
pub mod reproduce;
