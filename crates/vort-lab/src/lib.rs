//! Experiments over the VORT layer: reports, plots and (later) training.
pub mod plot;
pub mod theory_report;
