//! The tools behind the `vort` binary that are not part of the layer: the benchmarks
//! ([`mod@bench`]) and `vort retention` on safetensors files ([`retention_file`]). The binary's
//! subcommands (`src/main.rs`) are thin wrappers over these and over `vort-lab`.

pub mod bench;
pub mod retention_file;
