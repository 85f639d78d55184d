//! S of the shared node set over a grid of (δ, T, eps), with its certificate, the smallest
//! weight and the worst weight over the tabulated orders; one JSON object per line.
//!
//! `cargo run --release -p vort-math --example shared_nodes`
use vort_math::shared::SharedSoe;

fn main() {
    for delta in [0.05, 0.1, 0.2] {
        for horizon in [1_000u64, 8_192, 100_000, 1 << 20] {
            for eps in [1e-2, 1e-3, 1e-4, 1e-6] {
                let t0 = std::time::Instant::now();
                match SharedSoe::build(delta, horizon, eps) {
                    Ok(s) => {
                        let min_c = s
                            .weights
                            .iter()
                            .flatten()
                            .copied()
                            .fold(f64::INFINITY, f64::min);
                        println!(
                            "{{\"delta\":{delta},\"horizon\":{horizon},\"eps\":{eps},\"s\":{},\"certificate\":{:.3e},\"min_weight\":{min_c:.3e},\"build_s\":{:.2}}}",
                            s.len(),
                            s.certificate.max_rel_error,
                            t0.elapsed().as_secs_f64()
                        );
                    }
                    Err(e) => println!(
                        "{{\"delta\":{delta},\"horizon\":{horizon},\"eps\":{eps},\"error\":\"{e}\"}}"
                    ),
                }
            }
        }
    }
}
