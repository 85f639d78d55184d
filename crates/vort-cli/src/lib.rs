//! The tools behind the `vort` binary that are not part of the layer: the benchmarks
//! ([`mod@bench`]). `vort retention` on safetensors files is [`vort::retention::checked`]. The
//! binary's subcommands (`src/main.rs`) are thin wrappers over these and over `vort-lab`.

pub mod bench;
