//! `vort bench train` on tiny models: every field measured and sane, and the FLOP formula
//! checked by hand on one configuration.

use vort::model::ModelConfig;
use vort::Mixer;
use vort_cli::bench::train::{bench_train, flops_per_token, mixers, Reference};
use vort_lab::train::RunConfig;

#[test]
fn tiny_bench_measures_every_mixer() {
    let refs: Vec<Reference> = mixers(8)
        .into_iter()
        .map(|(name, m)| {
            let mut c = RunConfig::default();
            c.task.seq_len = 32;
            c.train.batch_size = 2;
            c.model = ModelConfig {
                d_model: 16,
                layers: 1,
                heads: 2,
                head_dim: 8,
                features: 8,
                chunk: 8,
                ..m
            };
            Reference {
                name,
                config: c,
                vocab: 40,
                labelled: Some(4),
            }
        })
        .collect();
    let mut seen = 0;
    let r = bench_train(&refs, 1, 1, |_| seen += 1).unwrap();
    assert_eq!(seen, refs.len());
    assert!(r.sgemm_gflops > 0.0);
    assert_eq!(r.runs.len(), 6);
    for run in &r.runs {
        assert!(
            run.tokens_per_s > 0.0 && run.tokens_per_s.is_finite(),
            "{run:?}"
        );
        assert!(
            run.flops_per_token > 0.0 && run.mfu > 0.0 && run.mfu.is_finite(),
            "{run:?}"
        );
        assert_eq!(run.steps, 1);
        if cfg!(target_os = "linux") {
            // CPU time comes in 10 ms ticks: a tiny step may read 0, never less or NaN
            assert!(
                run.busy_cores >= 0.0 && run.busy_cores.is_finite(),
                "{run:?}"
            );
            assert!(run.peak_rss_bytes > 0, "{run:?}");
        }
        assert_eq!(
            run.nodes == 0,
            run.mixer == vort::MixerKind::Softmax,
            "{run:?}"
        );
    }
    assert!(bench_train(&refs, 0, 0, |_| {}).is_err(), "0 timed steps");
}

/// The formula of `flops_per_token`, evaluated by hand for one retention and one softmax
/// configuration.
#[test]
fn flops_per_token_follows_its_documented_formula() {
    let m = ModelConfig {
        mixer: Mixer::default(),
        d_model: 64,
        layers: 2,
        heads: 4,
        head_dim: 16,
        features: 16,
        mlp_mult: 0,
        chunk: 64,
        ..ModelConfig::default()
    };
    // per layer: proj 4·2·64·64 = 32768; features 2·2·16·16·4 = 4096;
    // retention 4·[2·64·(16+17) + 4·20·16·17] = 4·(4224 + 21760) = 103936
    let per_layer = 32768.0 + 4096.0 + 103936.0;
    let head = 2.0 * 64.0 * 8192.0 * (16.0 / 256.0);
    let want = 3.0 * (2.0 * per_layer + head);
    let got = flops_per_token(&m, 20, 256, 8192, 16.0 / 256.0);
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
    let s = ModelConfig {
        mixer: Mixer::Softmax { window: 0 },
        ..m.clone()
    };
    // softmax over a mean of (256 + 1) / 2 keys: 4 heads · 4 · 128.5 · 16 = 32896
    let want = 3.0 * (2.0 * (32768.0 + 32896.0) + head);
    let got = flops_per_token(&s, 0, 256, 8192, 16.0 / 256.0);
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
    // a short convolution of width 4 adds 2·4·64 = 512 per layer
    let c = ModelConfig {
        short_conv: 4,
        ..m.clone()
    };
    let want = 3.0 * (2.0 * (per_layer + 512.0) + head);
    let got = flops_per_token(&c, 20, 256, 8192, 16.0 / 256.0);
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
}
