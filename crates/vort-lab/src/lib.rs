//! Experiments over the VORT layer: reports, plots and (later) training.
pub mod data;
pub mod model;
pub mod plot;
pub mod tasks;
pub mod theory_report;
pub mod train;
pub use train::eval;
pub mod reproduce;
