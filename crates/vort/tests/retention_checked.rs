//! `retention_from_safetensors`: forms agree on a file; bad files are typed errors.

use std::collections::BTreeMap;
use std::path::PathBuf;

use vort::retention::checked::{retention_from_safetensors, Form, RetentionOpts};
use vort::st::{self, Precision};
use vort::vort_math::rng::XorShift64Star as Rng;
use vort::{NodeMode, VortError};

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vort-io-{}-{name}.safetensors", std::process::id()))
}

struct Good {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    a: Vec<f64>,
}

fn good(t: usize, f: usize, d: usize) -> Good {
    let mut r = Rng::new(21);
    Good {
        q: (0..t * f).map(|_| r.unif()).collect(),
        k: (0..t * f).map(|_| r.unif()).collect(),
        v: (0..t * d).map(|_| 2.0 * r.unif() - 1.0).collect(),
        a: (0..t).map(|_| 0.2 + 0.8 * r.unif()).collect(),
    }
}

fn write(path: &std::path::Path, items: &[(&str, &[f64], Vec<usize>)]) {
    let t: Vec<(&str, &[f64], Vec<usize>, Precision)> = items
        .iter()
        .map(|(n, d, s)| (*n, *d, s.clone(), Precision::F32))
        .collect();
    st::write(path, &t, &BTreeMap::new()).unwrap();
}

#[test]
fn forms_agree_on_a_file() {
    for t in [1, 50] {
        forms_agree(t);
    }
}

fn forms_agree(t: usize) {
    let (f, d) = (6, 5);
    let g = good(t, f, d);
    let inp = tmp(&format!("in{t}"));
    write(
        &inp,
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &g.v, vec![t, d]),
            ("alpha", &g.a, vec![t]),
        ],
    );
    for memory in [NodeMode::Banks, NodeMode::Shared] {
        let mut ys = Vec::new();
        for form in [Form::Naive, Form::Recurrent, Form::Chunked, Form::Fused] {
            let out = tmp(&format!("out-{t}-{memory:?}-{form:?}"));
            let opts = RetentionOpts {
                form,
                mode: memory,
                eps: 1e-5,
                chunk: 16,
                delta: 0.2,
                ..Default::default()
            };
            let rep = retention_from_safetensors(&inp, &out, &opts).unwrap();
            assert_eq!((rep.t, rep.f, rep.d), (t, f, d));
            let mut file = st::read(&out).unwrap();
            let y = file.take("y").unwrap();
            assert_eq!(y.shape, vec![t, d]);
            assert_eq!(y.dtype, "F32");
            ys.push(y.data);
            let _ = std::fs::remove_file(out);
        }
        // naive (exact kernel) vs the SOE forms: within the certificate (plus f32 rounding)
        assert!(vort::tol::rel_rms(&ys[1], &ys[0]) <= 1e-4, "{memory:?}");
        assert!(
            vort::tol::rel_rms(&ys[2], &ys[1]) <= vort::tol::F32_SAME_KERNEL_REL,
            "{memory:?}"
        );
        assert!(
            vort::tol::rel_rms(&ys[3], &ys[2]) <= vort::tol::F32_SAME_KERNEL_REL,
            "{memory:?}: fused vs chunked"
        );
    }
    let _ = std::fs::remove_file(inp);
}

#[test]
fn bad_files_are_typed_errors() {
    let (t, f, d) = (8, 3, 2);
    let g = good(t, f, d);
    let opts = RetentionOpts::default();
    let out = tmp("bad-out");
    let run = |items: &[(&str, &[f64], Vec<usize>)], name: &str| {
        let p = tmp(name);
        write(&p, items);
        let r = retention_from_safetensors(&p, &out, &opts);
        let _ = std::fs::remove_file(p);
        r.unwrap_err()
    };
    // missing tensor
    let e = run(
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &g.v, vec![t, d]),
        ],
        "missing",
    );
    assert!(
        matches!(e, VortError::MissingTensor(ref n) if n == "alpha"),
        "{e}"
    );
    // wrong shape
    let e = run(
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![f, t]),
            ("v", &g.v, vec![t, d]),
            ("alpha", &g.a, vec![t]),
        ],
        "shape",
    );
    assert!(
        matches!(e, VortError::Shape { ref name, .. } if name == "phi_k"),
        "{e}"
    );
    // negative feature
    let mut q = g.q.clone();
    q[4] = -0.5;
    let e = run(
        &[
            ("phi_q", &q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &g.v, vec![t, d]),
            ("alpha", &g.a, vec![t]),
        ],
        "neg",
    );
    assert!(
        matches!(e, VortError::NegativeFeature { index: 4, .. }),
        "{e}"
    );
    // alpha out of range
    let mut a = g.a.clone();
    a[3] = 1.5;
    let e = run(
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &g.v, vec![t, d]),
            ("alpha", &a, vec![t]),
        ],
        "alpha",
    );
    assert!(
        matches!(e, VortError::OrderOutOfRange { index: 3, .. }),
        "{e}"
    );
    // NaN
    let mut v = g.v.clone();
    v[1] = f64::NAN;
    let e = run(
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &v, vec![t, d]),
            ("alpha", &g.a, vec![t]),
        ],
        "nan",
    );
    assert!(matches!(e, VortError::NonFinite { index: 1, .. }), "{e}");
    // not a safetensors file
    let p = tmp("garbage");
    std::fs::write(&p, b"hello").unwrap();
    let e = retention_from_safetensors(&p, &out, &opts).unwrap_err();
    assert!(matches!(e, VortError::SafeTensors(_)), "{e}");
    let _ = std::fs::remove_file(p);
    // absent file
    let e = retention_from_safetensors(&tmp("nope"), &out, &opts).unwrap_err();
    assert!(matches!(e, VortError::Io { .. }), "{e}");
    assert!(e.is_input_error(), "a missing input is the user's to fix");
}

/// A write that fails (here: the output's directory does not exist) is the environment's
/// error (exit status 1), names the path, and leaves no file behind.
#[test]
fn a_failed_write_is_an_environment_error() {
    let (t, f, d) = (6, 2, 2);
    let input = tmp("write-fail-in");
    let g = good(t, f, d);
    write(
        &input,
        &[
            ("phi_q", &g.q, vec![t, f]),
            ("phi_k", &g.k, vec![t, f]),
            ("v", &g.v, vec![t, d]),
            ("alpha", &g.a, vec![t]),
        ],
    );
    let out = std::env::temp_dir().join("vort-no-such-dir-xyz/y.safetensors");
    let e = retention_from_safetensors(&input, &out, &RetentionOpts::default()).unwrap_err();
    assert!(matches!(e, VortError::Write { .. }), "{e}");
    assert!(!e.is_input_error());
    assert!(e.to_string().contains("y.safetensors"), "{e}");
    let _ = std::fs::remove_file(input);
}
