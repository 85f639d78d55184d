//! `cargo run --release -p vort-cli --example bench_layer [plain] [decode] [crossover] [chunk=N]`:
//! the layer benchmarks of `vort_cli::bench::layer` as JSON (the CLI's `vort bench layer` wraps the
//! same functions).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> vort::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let has = |s: &str| args.iter().any(|a| a == s);
    if has("decode-only") {
        let ctx = [1u64 << 10, 1 << 14, 1 << 17];
        for r in vort_cli::bench::layer::bench_decode(
            &ctx,
            vort::NodeMode::Shared,
            4,
            64,
            64,
            1e-3,
            0.1,
            200,
        )? {
            println!("decode {}", serde_json::to_string(&r).unwrap());
        }
        return Ok(());
    }
    let sgemm = vort_cli::bench::layer::bench_sgemm(2048, 5)?;
    println!("sgemm {}", serde_json::to_string(&sgemm).unwrap());
    // `chunk=N`: the chunk length of the fused op (default: the bench's 64)
    let chunk = args
        .iter()
        .find_map(|a| a.strip_prefix("chunk=")?.parse().ok());
    let defaults = vort_cli::bench::layer::LayerBenchOpts::default();
    let opts = vort_cli::bench::layer::LayerBenchOpts {
        plain: has("plain"),
        chunk: chunk.unwrap_or(defaults.chunk),
        ..defaults
    };
    for r in vort_cli::bench::layer::bench_layer(&opts)? {
        println!(
            "layer {} ({:.0}% of sgemm)",
            serde_json::to_string(&r).unwrap(),
            100.0 * r.fwd_bwd_gflops / sgemm.gflops
        );
    }
    if has("decode") {
        let ctx = [1u64 << 10, 1 << 14, 1 << 17, 1 << 20];
        for r in vort_cli::bench::layer::bench_decode(
            &ctx,
            vort::NodeMode::Shared,
            4,
            64,
            64,
            1e-3,
            0.1,
            200,
        )? {
            println!("decode {}", serde_json::to_string(&r).unwrap());
        }
    }
    if has("crossover") {
        for r in vort_cli::bench::layer::bench_crossover(
            &[1024, 2048, 4096, 8192, 16384],
            1,
            64,
            1e-3,
            3,
        )? {
            println!("crossover {}", serde_json::to_string(&r).unwrap());
        }
    }
    Ok(())
}
