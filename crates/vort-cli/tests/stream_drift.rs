//! `vort bench stream` in the library: f32 against f64 recurrent streaming on a short stream.

use vort::VortError;
use vort_cli::bench::stream::{bench_stream_drift, StreamDriftOpts, STREAM_DRIFT_BUDGET};

fn tiny() -> StreamDriftOpts {
    // The stream is as long as the tables' horizon (allowed), fed in uneven pieces.
    StreamDriftOpts {
        tokens: 4096,
        horizon: 4096,
        piece: 1000,
        ..StreamDriftOpts::default()
    }
}

#[test]
fn tiny_stream_drift_is_small_and_bins_cover_the_stream_once() {
    let o = tiny();
    let r = bench_stream_drift(&o).unwrap();
    assert_eq!(r.tokens, 4096);
    assert_eq!(r.budget, STREAM_DRIFT_BUDGET);
    let names: Vec<&str> = r.modes.iter().map(|m| m.mode.as_str()).collect();
    assert_eq!(names, ["shared", "banks"]);
    for m in &r.modes {
        assert!(m.nodes > 0, "{}", m.mode);
        for x in [m.rel_rms_overall, m.rel_rms_max_bin, m.state_rel_rms_final] {
            assert!(x.is_finite() && x < STREAM_DRIFT_BUDGET, "{}: {x}", m.mode);
        }
        assert_eq!(m.state_by_node.len(), m.nodes, "{}", m.mode);
        assert!(m
            .state_by_node
            .iter()
            .all(|x| x.num_rel_rms.is_finite() && x.den_rel_rms.is_finite()));
        // f32 does differ from f64 (the comparison is not vacuous).
        assert!(m.rel_rms_overall > 0.0, "{}", m.mode);
        assert!(m.rel_rms_overall <= m.rel_rms_max_bin, "{}", m.mode);
        // Windows: in order, non-empty, contiguous, from 0 to the end of the stream.
        let b = &m.bins;
        assert!(b.len() > 10 && b.len() <= o.bins, "{} bins", b.len());
        assert_eq!(b[0].lo, 0);
        assert_eq!(b.last().unwrap().hi, o.tokens);
        assert!(b.iter().all(|x| x.lo < x.hi && x.rel_rms.is_finite()));
        assert!(b.windows(2).all(|w| w[0].hi == w[1].lo));
        let covered: u64 = b.iter().map(|x| x.hi - x.lo).sum();
        assert_eq!(covered, o.tokens);
    }
    // Same seed, same inputs: the errors are reproducible bit for bit.
    let again = bench_stream_drift(&StreamDriftOpts { piece: 4096, ..o }).unwrap();
    for (a, b) in r.modes.iter().zip(&again.modes) {
        assert_eq!(a.bins, b.bins, "{}: piece size changed the result", a.mode);
    }
}

#[test]
fn streams_past_the_horizon_and_empty_streams_are_refused() {
    for tokens in [0, 4097] {
        let o = StreamDriftOpts { tokens, ..tiny() };
        assert!(matches!(
            bench_stream_drift(&o),
            Err(VortError::InvalidArgument(_))
        ));
    }
}
