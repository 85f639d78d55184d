//! Criterion benchmarks of vort-math (issue 2, point 5):
//!
//! - `gl_weight/j`: one GL weight w_j(a) at lags 1 .. 1e9 (product form below 32, Stirling above);
//! - `soe_build/...`: `Soe::build` including its certificate, for (0.35, 1e5, 1e-4) and
//!   (0.95, 1e6, 1e-6) (exhaustive over 1e6 lags);
//! - `soe_certify/...`: the certificate alone for the same terms (build - certify = construction);
//! - `recurrence_step/S`: one token of the SOE recurrence (h += x - μh; y = x + Σ cλh).
//!
//! Run: `cargo bench -p vort-math -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use vort_math::recurrence::SoeRecurrence;
use vort_math::{gl, soe, Soe};

fn gl_weight(c: &mut Criterion) {
    let mut g = c.benchmark_group("gl_weight");
    for j in [1_u64, 10, 1_000, 1_000_000, 1_000_000_000] {
        g.bench_with_input(BenchmarkId::from_parameter(j), &j, |b, &j| {
            b.iter(|| gl::weight(black_box(0.35), black_box(j)).unwrap())
        });
    }
    g.finish();
}

const SOE_CASES: [(f64, u64, f64); 2] = [(0.35, 100_000, 1e-4), (0.95, 1_000_000, 1e-6)];

fn case_name(&(a, t, eps): &(f64, u64, f64)) -> String {
    format!("a={a}_T={t:e}_eps={eps:e}")
}

fn soe_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("soe_build");
    g.sample_size(10);
    for case in SOE_CASES {
        let (a, t, eps) = case;
        g.bench_function(case_name(&case), |b| {
            b.iter(|| Soe::build(black_box(a), black_box(t), black_box(eps)).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("soe_certify");
    g.sample_size(10);
    for case in SOE_CASES {
        let (a, t, eps) = case;
        let terms = Soe::build(a, t, eps).unwrap().terms;
        g.bench_function(case_name(&case), |b| {
            b.iter(|| soe::certify(black_box(&terms), black_box(a), black_box(t)).unwrap())
        });
    }
    g.finish();
}

fn recurrence_step(c: &mut Criterion) {
    let soe = Soe::build(0.35, 100_000, 1e-4).unwrap();
    let mut r = SoeRecurrence::new(&soe.terms);
    let mut x = 0.5_f64;
    c.bench_function(&format!("recurrence_step/S={}", soe.len()), |b| {
        b.iter(|| {
            // A bounded, non-constant input so the state neither overflows nor stays constant.
            x = if x > 0.0 { -0.25 } else { 0.5 };
            r.step(black_box(x))
        })
    });
}

criterion_group!(benches, gl_weight, soe_build, recurrence_step);
criterion_main!(benches);
