//! `vort._vort`: the Python bindings of the Rust core (PyO3 + rust-numpy, built by maturin).
//!
//! Every function is a thin wrapper over a public function of the crates: the GL weights and
//! the certified SOE builders of `vort-math`, the node tables of `vort`, `vort retention`'s
//! computation (`vort::retention::checked`), and the loaders and the sampler of `vort-lab`
//! (`eval::load_inference`, `generate::generate`). Nothing is reimplemented here. One module
//! per concept: [`errors`], [`kernel`], [`retention`], [`model`] and [`train`] (the hooks of
//! vort.torch and its trainer).
//!
//! Errors: a user error (the CLI's exit status 2) is a `ValueError` whose message is the line
//! the CLI prints after `error: `; a failure of the run or of the environment is a
//! `RuntimeError`. Every call runs under `catch_unwind`, so a panic becomes a `RuntimeError`
//! too, never an abort or a `PanicException`. Long computations release the GIL.

use pyo3::prelude::*;

mod errors;
mod kernel;
mod model;
mod retention;
mod train;

/// The Rust core of the `vort` Python package.
#[pymodule]
fn _vort(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // certified node tables are built once per recipe and kept on disk, as the CLI does
    // (VORT_CACHE_DIR="" turns that off)
    vort::nodes::cache::use_disk(vort::nodes::cache::default_dir());
    m.add_function(wrap_pyfunction!(kernel::gl_weights, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::soe, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::shared_nodes, m)?)?;
    m.add_function(wrap_pyfunction!(retention::retention, m)?)?;
    m.add_function(wrap_pyfunction!(model::load, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::_node_table, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_panic, m)?)?;
    m.add_function(wrap_pyfunction!(retention::_fused_chunk, m)?)?;
    m.add_function(wrap_pyfunction!(train::_init, m)?)?;
    m.add_function(wrap_pyfunction!(train::_save_export, m)?)?;
    m.add_function(wrap_pyfunction!(train::_task_batch, m)?)?;
    m.add_function(wrap_pyfunction!(train::_decayed_params, m)?)?;
    m.add_function(wrap_pyfunction!(train::_check_memory, m)?)?;
    m.add_function(wrap_pyfunction!(train::_check_output, m)?)?;
    m.add_function(wrap_pyfunction!(train::_write_atomic, m)?)?;
    m.add_class::<kernel::PySoe>()?;
    m.add_class::<kernel::PyShared>()?;
    m.add_class::<model::PyModel>()?;
    m.add_class::<model::PyState>()?;
    Ok(())
}
