//! The quick theory report is complete: every section, every figure, parsable JSON, and the
//! measurements that the report's verdicts rest on.

use std::path::PathBuf;
use vort_lab::theory_report::{run, Scale, FIGURES};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vort-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn quick_report_has_every_section_figure_and_number() {
    let out = scratch("theory");
    let mut stages = Vec::new();
    let r = run(&out, Scale::Quick, |s| stages.push(s.to_string())).unwrap();
    assert!(stages.len() >= 5);

    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for section in [
        "## Theorem 3.1",
        "## Theorem 4.1",
        "## Proposition 4.2",
        "## Theorem 5.1",
    ] {
        assert!(md.contains(section), "missing {section}");
    }
    for fig in FIGURES {
        let bytes = std::fs::read(out.join(fig)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{fig} is not a PNG");
        assert!(md.contains(fig), "report does not show {fig}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("theory.json")).unwrap()).unwrap();
    assert!(json["soe_sweep"].as_array().unwrap().len() == r.soe_sweep.len());

    // The facts the verdicts state.
    assert!(r.soe_sweep.iter().all(|row| row.max_rel_error <= row.eps));
    for l in r.lipschitz.iter().filter(|l| l.alpha <= 0.5) {
        assert!((l.value - 1.0).abs() < 1e-12 && l.argmax_lag == 1);
    }
    let l1 = |t| {
        r.lipschitz
            .iter()
            .find(|l| l.alpha == 1.0 && l.horizon == t)
            .unwrap()
            .value
    };
    assert!(l1(100_000) > l1(1_000) + 3.0, "L(1, T) grows like ln T");
    for b in &r.banks {
        assert!(b.snap.measured <= b.snap.bound * (1.0 + 1e-9));
        assert!(b.split.measured < b.snap.measured);
    }
    let high = r.lower_bound.iter().find(|l| l.alpha == 0.8).unwrap();
    assert!(
        high.nnls_slope > 0.3,
        "a = 0.8: error grows at least like T^(a-1/2)"
    );
    let low = r.lower_bound.iter().find(|l| l.alpha == 0.35).unwrap();
    assert!(low.single_slope < 0.05, "a = 0.35: error saturates");
    assert!(low.nnls_slope < high.nnls_slope - 0.1);
    for case in &r.plasticity {
        let res = &case.result;
        assert!(res.fitted_rate.unwrap() < 1.0, "{}: not linear", case.label);
        let (first, last) = (res.trajectory[0], *res.trajectory.last().unwrap());
        assert!(
            last.gap <= 1e-2 * first.gap,
            "{}: gap did not shrink",
            case.label
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
