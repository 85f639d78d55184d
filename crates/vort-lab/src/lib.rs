//! Experiments over the VORT layer: reports, plots and (later) training.
