//! End-to-end tests of the `vort` binary: JSON outputs, plots and every error path.

use std::path::PathBuf;
mod common;

use common::{assert_one_line_error, vort};

use serde_json::Value;

/// Runs a command that must succeed and returns its stdout.
fn ok(args: &[&str]) -> String {
    let out = vort(args);
    assert!(
        out.status.success(),
        "vort {args:?} failed with {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

fn json(args: &[&str]) -> Value {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("vort {args:?}: bad JSON ({e}): {text}"))
}

/// A fresh path under cargo's per-test temporary directory.
fn tmp_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vort-cli-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn assert_png(path: &PathBuf) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.len() > 1000,
        "{} is only {} bytes",
        path.display(),
        bytes.len()
    );
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        path.display()
    );
}

/// Exact w_j(a) by the product Π (i - 1 + a) / i (accurate to ~j ulps; fine for j <= 1e4).
fn product_weight(a: f64, j: u64) -> f64 {
    (1..=j).fold(1.0, |w, i| w * ((i - 1) as f64 + a) / i as f64)
}

fn field<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key)
        .unwrap_or_else(|| panic!("missing field {key:?} in {v}"))
}

fn f(v: &Value, key: &str) -> f64 {
    field(v, key)
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {v}"))
}

fn u(v: &Value, key: &str) -> u64 {
    field(v, key)
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not an integer in {v}"))
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    field(v, key)
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array in {v}"))
}

#[test]
fn weights_json_has_lags_and_exact_values() {
    let v = json(&[
        "kernel",
        "weights",
        "--alpha",
        "0.5",
        "--lags",
        "1,10,1000",
        "--json",
    ]);
    assert_eq!(f(&v, "alpha"), 0.5);
    let w = arr(&v, "weights");
    assert_eq!(w.len(), 3);
    let lags: Vec<u64> = w.iter().map(|e| u(e, "lag")).collect();
    assert_eq!(lags, [1, 10, 1000]);
    // w_1(a) = a exactly; w_10(1/2) = 46189 / 262144 exactly.
    assert_eq!(f(&w[0], "w"), 0.5);
    assert_eq!(f(&w[1], "w"), 46189.0 / 262144.0);
    let w1000 = f(&w[2], "w");
    let exact = product_weight(0.5, 1000);
    assert!((w1000 / exact - 1.0).abs() < 1e-12, "{w1000} vs {exact}");
}

#[test]
fn weights_accept_large_lags_and_exponent_forms() {
    let v = json(&[
        "kernel",
        "weights",
        "--alpha",
        "0.5",
        "--lags",
        "0,1e9,1_000",
        "--json",
    ]);
    let w = arr(&v, "weights");
    assert_eq!(u(&w[0], "lag"), 0);
    assert_eq!(f(&w[0], "w"), 1.0);
    assert_eq!(u(&w[1], "lag"), 1_000_000_000);
    // w_j ~ j^(a-1) / Γ(a) (1 - a(1-a)/(2j)): at j = 1e9 the asymptote is exact to ~1e-10.
    let asymptote = 1e9_f64.powf(-0.5) / std::f64::consts::PI.sqrt();
    assert!((f(&w[1], "w") / asymptote - 1.0).abs() < 1e-9);
    assert_eq!(u(&w[2], "lag"), 1000);
}

#[test]
fn weights_table_is_readable() {
    let text = ok(&["kernel", "weights", "--alpha", "0.25", "--lags", "1,2"]);
    assert!(text.contains("a = 0.25"), "{text}");
    assert!(text.contains("2.5000000000000000e-1"), "{text}");
}

fn check_soe_json(v: &Value, alpha: f64, horizon: u64, eps: f64) {
    assert_eq!(f(v, "alpha"), alpha);
    assert_eq!(u(v, "horizon"), horizon);
    assert_eq!(f(v, "eps"), eps);
    let terms = arr(v, "terms");
    assert_eq!(u(v, "S") as usize, terms.len());
    let err = f(v, "max_rel_error");
    assert!((0.0..=eps).contains(&err), "certificate {err} > eps {eps}");
    assert!(!field(v, "checked").as_str().unwrap().is_empty());
    let argmax = u(v, "argmax_lag");
    assert!((1..=horizon).contains(&argmax));
    for t in terms {
        assert!(f(t, "c").is_finite() && f(t, "u") >= 0.0, "{t}");
        assert!((f(t, "lambda") - (-f(t, "u")).exp()).abs() < 1e-15);
    }
}

/// ŵ_j recomputed from the printed terms.
fn soe_at(v: &Value, j: u64) -> f64 {
    arr(v, "terms")
        .iter()
        .map(|t| f(t, "c") * (-f(t, "u") * j as f64).exp())
        .sum()
}

#[test]
fn soe_json_is_certified_and_reproducible_from_its_terms() {
    let (alpha, eps) = (0.35, 1e-4);
    let v = json(&[
        "kernel",
        "soe",
        "--alpha",
        "0.35",
        "--horizon",
        "1e5",
        "--eps",
        "1e-4",
        "--json",
    ]);
    check_soe_json(&v, alpha, 100_000, eps);
    let s = u(&v, "S");
    assert!((5..=40).contains(&s), "S = {s}");
    // Independent check at a few lags against the product form of w_j.
    for j in [1, 2, 3, 10, 77, 1000, 4321, 10_000] {
        let exact = product_weight(alpha, j);
        let rel = (soe_at(&v, j) / exact - 1.0).abs();
        assert!(rel <= eps * (1.0 + 1e-6), "j = {j}: {rel}");
    }
}

#[test]
fn horizon_forms_are_equivalent() {
    let base = [
        "kernel",
        "soe",
        "--alpha",
        "0.8",
        "--eps",
        "1e-3",
        "--json",
        "--horizon",
    ];
    let outs: Vec<String> = ["10000", "1e4", "10_000", "1.0E4"]
        .iter()
        .map(|h| {
            let mut a = base.to_vec();
            a.push(h);
            ok(&a)
        })
        .collect();
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
    check_soe_json(&serde_json::from_str(&outs[0]).unwrap(), 0.8, 10_000, 1e-3);
}

#[test]
fn soe_exact_cases() {
    let one = json(&[
        "kernel",
        "soe",
        "--alpha",
        "1",
        "--horizon",
        "100",
        "--eps",
        "1e-6",
        "--json",
    ]);
    check_soe_json(&one, 1.0, 100, 1e-6);
    let t = arr(&one, "terms");
    assert_eq!(t.len(), 1);
    assert_eq!((f(&t[0], "c"), f(&t[0], "u")), (1.0, 0.0));
    assert_eq!(f(&one, "max_rel_error"), 0.0);
    let zero = json(&[
        "kernel",
        "soe",
        "--alpha",
        "0",
        "--horizon",
        "100",
        "--eps",
        "1e-6",
        "--json",
    ]);
    assert!(arr(&zero, "terms").is_empty());
    assert_eq!(u(&zero, "S"), 0);
}

#[test]
fn soe_table_and_plot() {
    let png = tmp_path("soe.png");
    let text = ok(&[
        "kernel",
        "soe",
        "--alpha",
        "0.6",
        "--horizon",
        "1e4",
        "--eps",
        "1e-5",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(text.contains("certificate: max"), "{text}");
    assert!(
        text.contains("checked: every lag j in [1, 10000]"),
        "{text}"
    );
    assert_png(&png);
}

#[test]
fn soe_json_with_plot_keeps_stdout_pure_json() {
    let png = tmp_path("soe-json.png");
    let v = json(&[
        "kernel",
        "soe",
        "--alpha",
        "0.95",
        "--horizon",
        "1e6",
        "--eps",
        "1e-6",
        "--json",
        "--plot",
        png.to_str().unwrap(),
    ]);
    check_soe_json(&v, 0.95, 1_000_000, 1e-6);
    assert_eq!(u(&v, "exhaustive_up_to"), 1_000_000);
    assert_png(&png);
}

#[test]
fn shared_json_has_the_grid_and_is_certified() {
    let (delta, eps) = (0.3, 1e-3);
    let v = json(&[
        "kernel",
        "shared",
        "--delta",
        "0.3",
        "--horizon",
        "1000",
        "--eps",
        "1e-3",
        "--json",
    ]);
    assert_eq!(f(&v, "delta"), delta);
    assert_eq!(u(&v, "horizon"), 1000);
    assert_eq!(f(&v, "eps"), eps);
    let s = u(&v, "S") as usize;
    let nodes = arr(&v, "nodes");
    assert_eq!(nodes.len(), s);
    let grid = arr(&v, "grid");
    assert!(grid.len() >= 2);
    assert_eq!(f(&grid[0], "alpha"), delta);
    assert_eq!(f(grid.last().unwrap(), "alpha"), 1.0);
    for g in grid {
        assert_eq!(arr(g, "c").len(), s);
        // a positive mixture: the kernel cannot change sign, inside the horizon or past it
        assert!(
            arr(g, "c").iter().all(|c| c.as_f64().unwrap() >= 0.0),
            "{g:?}"
        );
        assert!(u(g, "single_order_S") >= 1);
    }
    let err = f(&v, "max_rel_error");
    assert!((0.0..=eps).contains(&err), "{err}");
    assert!(u(&v, "single_order_S_max") >= u(&v, "single_order_S_min"));
    // Recompute the kernel of one grid order from the printed nodes and weights.
    let g = &grid[grid.len() / 2];
    let a = f(g, "alpha");
    let c = arr(g, "c");
    for j in [1, 5, 50, 999] {
        let approx: f64 = nodes
            .iter()
            .zip(c)
            .map(|(n, c)| c.as_f64().unwrap() * (-f(n, "u") * j as f64).exp())
            .sum();
        let rel = (approx / product_weight(a, j) - 1.0).abs();
        assert!(rel <= eps * (1.0 + 1e-6), "a = {a}, j = {j}: {rel}");
    }
}

#[test]
fn shared_table_and_plot() {
    let png = tmp_path("shared.png");
    let text = ok(&[
        "kernel",
        "shared",
        "--delta",
        "0.4",
        "--horizon",
        "2000",
        "--eps",
        "1e-3",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(text.contains("single-order"), "{text}");
    assert!(text.contains("certificate: max"), "{text}");
    assert_png(&png);
}

#[test]
fn help_and_version_exit_zero() {
    for args in [
        vec!["--help"],
        vec!["--version"],
        vec!["kernel", "--help"],
        vec!["kernel", "soe", "--help"],
        vec!["theory", "--help"],
    ] {
        let out = vort(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
}

/// Asserts the documented failure shape of `vort args`: the exit status, one `error:` line,
/// nothing on stdout, no panic message and no backtrace.
fn assert_fails(args: &[&str], code: i32) {
    assert_one_line_error(&vort(args), code);
}

#[test]
fn out_of_domain_values_exit_2() {
    let soe = |a: &str, t: &str, e: &str| {
        vec!["kernel", "soe", "--alpha", a, "--horizon", t, "--eps", e]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    for args in [
        soe("1.5", "1e5", "1e-4"),
        soe("-0.5", "1e5", "1e-4"),
        soe("0.5", "1e5", "0"),
        soe("0.5", "1e5", "-1e-3"),
        soe("0.5", "1e5", "0.9"),
        soe("0.5", "0", "1e-4"),
        soe("0.5", "1e13", "1e-4"),
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_fails(&a, 2);
    }
    assert_fails(&["kernel", "weights", "--alpha", "1.5", "--lags", "1"], 2);
    assert_fails(
        &[
            "kernel",
            "weights",
            "--alpha",
            "0.5",
            "--lags",
            "100000000000000000",
        ],
        2,
    );
    for delta in ["0", "1", "1.5", "-0.2"] {
        assert_fails(
            &[
                "kernel",
                "shared",
                "--delta",
                delta,
                "--horizon",
                "100",
                "--eps",
                "1e-3",
            ],
            2,
        );
    }
    assert_fails(
        &[
            "kernel",
            "shared",
            "--delta",
            "0.5",
            "--horizon",
            "0",
            "--eps",
            "1e-3",
        ],
        2,
    );
    assert_fails(
        &[
            "kernel",
            "shared",
            "--delta",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "0",
        ],
        2,
    );
}

#[test]
fn unparsable_values_exit_2() {
    for args in [
        vec![
            "kernel",
            "soe",
            "--alpha",
            "abc",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "nan",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "abc",
            "--eps",
            "1e-3",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "1.5",
            "--eps",
            "1e-3",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "-10",
            "--eps",
            "1e-3",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "x",
        ],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "inf",
        ],
        vec!["kernel", "weights", "--alpha", "0.5", "--lags", "1,two,3"],
        vec!["kernel", "weights", "--alpha", "0.5", "--lags", ""],
        vec![
            "kernel",
            "shared",
            "--delta",
            "?",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
        ],
    ] {
        assert_fails(&args, 2);
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["kernel"],
        vec!["kernel", "frobnicate"],
        vec!["kernel", "weights", "--alpha", "0.5"],
        vec!["kernel", "soe", "--alpha", "0.5", "--horizon", "100"],
        vec![
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
            "--frob",
        ],
        vec!["theory"],
    ] {
        assert_fails(&args, 2);
    }
}

#[test]
fn unwritable_plot_exits_1() {
    let missing_dir = tmp_path("no-such-dir").join("plot.png");
    assert_fails(
        &[
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
            "--plot",
            missing_dir.to_str().unwrap(),
        ],
        1,
    );
    assert_fails(
        &[
            "kernel",
            "shared",
            "--delta",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
            "--plot",
            missing_dir.to_str().unwrap(),
        ],
        1,
    );
}

/// A plot path of another format is refused before anything is computed, and an existing
/// file of that name is left as it was (it used to be truncated to 0 bytes).
#[test]
fn non_png_plot_path_is_refused_and_the_file_kept() {
    let p = tmp_path("keep-me.txt");
    std::fs::write(&p, b"x\n").unwrap();
    assert_fails(
        &[
            "kernel",
            "soe",
            "--alpha",
            "0.5",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
            "--plot",
            p.to_str().unwrap(),
        ],
        2,
    );
    assert_eq!(std::fs::read(&p).unwrap(), b"x\n");
    let _ = std::fs::remove_file(p);
}

#[test]
fn theory_quick_writes_the_report_and_figures() {
    let dir = tmp_path("theory-quick");
    let _ = std::fs::remove_dir_all(&dir);
    let text = ok(&["theory", "--out", dir.to_str().unwrap(), "--quick"]);
    assert!(text.contains("report.md"), "{text}");
    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md written");
    for section in [
        "Theorem 3.1",
        "Theorem 4.1",
        "Proposition 4.2",
        "Theorem 5.1",
    ] {
        assert!(md.contains(section), "report.md lacks {section}");
    }
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("theory.json")).unwrap()).unwrap();
    assert!(json.is_object());
    // Every figure the report links to is a PNG.
    let pngs: Vec<&str> = md
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|link| link.ends_with(".png"))
        .collect();
    assert!(pngs.len() >= 4, "{pngs:?}");
    for png in pngs {
        assert_png(&dir.join(png));
    }
}

#[test]
fn theory_into_an_unwritable_directory_exits_1() {
    let file = tmp_path("theory-blocker");
    std::fs::write(&file, b"not a directory").unwrap();
    let out = file.join("report");
    assert_fails(&["theory", "--out", out.to_str().unwrap(), "--quick"], 1);
}

/// `kernel shared --alpha A` gives what a user needs to rebuild the kernel at any order: the
/// weights c_s(A), which with the nodes u_s reproduce the GL weights w_j(A) to the
/// certificate (checked here at a few lags against the recurrence w_j = w_(j-1)(j-1+A)/j).
#[test]
fn shared_weights_at_any_order_rebuild_the_kernel() {
    let text = ok(&[
        "kernel",
        "shared",
        "--delta",
        "0.2",
        "--horizon",
        "1000",
        "--eps",
        "1e-3",
        "--alpha",
        "0.55",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let at = &v["at_alpha"];
    let c: Vec<f64> = at["c"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let u: Vec<f64> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["u"].as_f64().unwrap())
        .collect();
    assert_eq!(c.len(), u.len());
    assert!(c.iter().all(|&x| x >= 0.0));
    let cert = at["max_rel_error"].as_f64().unwrap();
    assert!(cert <= 1e-3, "{cert}");
    let mut w = 1.0;
    for j in 1..=1000u32 {
        w *= (f64::from(j) - 1.0 + 0.55) / f64::from(j);
        if [1, 7, 100, 999].contains(&j) {
            let k: f64 = c
                .iter()
                .zip(&u)
                .map(|(c, u)| c * (-u * f64::from(j)).exp())
                .sum();
            assert!((k / w - 1.0).abs() <= cert * 1.0001, "lag {j}: {k} vs {w}");
        }
    }
    assert_fails(
        &[
            "kernel",
            "shared",
            "--delta",
            "0.2",
            "--horizon",
            "100",
            "--eps",
            "1e-3",
            "--alpha",
            "0.1",
        ],
        2,
    );
}

/// Negative numbers are values, not flags: the message is about the value's domain.
#[test]
fn negative_numbers_get_a_domain_message() {
    for (args, field) in [
        (
            &["retention", "--input", "x", "--output", "y", "--eps", "-1"][..],
            "eps",
        ),
        (
            &[
                "retention",
                "--input",
                "x",
                "--output",
                "y",
                "--delta",
                "-0.1",
            ][..],
            "delta",
        ),
        (
            &[
                "generate",
                "--run",
                "x",
                "--bytes",
                "5",
                "--temperature",
                "-1",
            ][..],
            "temperature",
        ),
    ] {
        let o = vort(args);
        let err = assert_one_line_error(&o, 2);
        assert!(
            err.contains(field) && !err.contains("unexpected argument"),
            "{err}"
        );
    }
}

/// Huge numbers are echoed in short form (1e300, not 300 digits) in the refusal.
#[test]
fn huge_numbers_are_echoed_in_short_form() {
    for (args, shown) in [
        (
            &[
                "kernel",
                "soe",
                "--alpha",
                "1e300",
                "--horizon",
                "100",
                "--eps",
                "1e-3",
            ][..],
            "1e300",
        ),
        (
            &[
                "kernel",
                "soe",
                "--alpha",
                "0.5",
                "--horizon",
                "100",
                "--eps",
                "1e300",
            ][..],
            "1e300",
        ),
    ] {
        let o = vort(args);
        let err = assert_one_line_error(&o, 2);
        assert!(err.contains(shown) && err.len() < 200, "{err}");
    }
}
