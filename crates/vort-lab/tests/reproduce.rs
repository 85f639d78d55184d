//! The reproduction pipeline end to end on a tiny plan: runs, reuse of finished runs, report,
//! plots and JSON.

use vort::Mixer;
use vort_lab::reproduce::runner::Mode;
use vort_lab::reproduce::{self, Plan, Scale};
use vort_lab::tasks::TaskKind;

fn shrink(mut c: vort_lab::train::RunConfig) -> vort_lab::train::RunConfig {
    c.task.seq_len = 96;
    let pairs = c.task.planted_mut().expect("a synthetic task");
    (pairs.max_lag, pairs.queries) = (80, 4);
    c.model.chunk = 32;
    c.train.steps = 3;
    c.train.eval_sequences = 4;
    c
}

#[test]
fn tiny_plan_writes_report_plots_and_json() {
    let out = std::env::temp_dir().join(format!("vort-lab-repro-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut runs = Vec::new();
    for task in TaskKind::SYNTHETIC {
        for memory in ["vort", "exponential"] {
            for seed in [0, 1] {
                runs.push(shrink(
                    reproduce::preset(Scale::Quick, task, memory, seed).unwrap(),
                ));
            }
        }
    }
    let plan = Plan {
        label: "test".into(),
        runs,
    };
    let rep = reproduce::run_plan(&plan, &out, Mode::train(false)).unwrap();
    assert_eq!(rep.runs.len(), 8);
    assert_eq!(rep.rows.len(), 4);
    for f in [
        "report.md",
        "results.json",
        "acc_vs_lag_zipf.png",
        "acc_vs_lag_label-copy.png",
        "alpha_hist_zipf.png",
        "alpha_by_class_label-copy.png",
    ] {
        let m = std::fs::metadata(out.join(f)).unwrap();
        assert!(m.len() > 0, "{f}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("79.4") && md.contains("52.3") && md.contains("82.7") && md.contains("58.4")
    );
    let vort_row = rep.rows.iter().find(|r| r.mixer == "vort").unwrap();
    assert!(vort_row.alpha_means.is_some());
    assert_eq!(vort_row.seeds, vec![0, 1]);
    // a second call reuses every finished run (no retraining: same evaluations)
    let t0 = std::time::Instant::now();
    let again = reproduce::run_plan(&plan, &out, Mode::train(false)).unwrap();
    assert!(t0.elapsed().as_secs_f64() < 10.0);
    assert_eq!(
        serde_json::to_string(&again.runs).unwrap(),
        serde_json::to_string(&rep.runs).unwrap()
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
#[ignore = "probe: PROBE_TASK, PROBE_MEMORY, PROBE_STEPS at the quick preset; prints accuracy and time"]
fn probe_quick_preset() {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.into());
    for task in env("PROBE_TASK", "zipf").split(',') {
        for m in env("PROBE_MEMORY", "vort").split(',') {
            let mut c = reproduce::preset(Scale::Quick, task.parse().unwrap(), m, 0).unwrap();
            if std::env::var("PROBE_ELU").is_ok() {
                c.model.feature_map = vort::features::FeatureMap::Elu;
            }
            if let Ok(s) = std::env::var("PROBE_BIAS") {
                if let Mixer::Vort {
                    router_bias_init, ..
                } = &mut c.model.mixer
                {
                    *router_bias_init = s.parse().unwrap();
                }
            }
            if let Ok(s) = std::env::var("PROBE_STEPS") {
                c.train.steps = s.parse().unwrap();
            }
            let dir = std::env::temp_dir().join(format!("vort-probe-{task}-{m}"));
            let _ = std::fs::remove_dir_all(&dir);
            let t0 = std::time::Instant::now();
            let s = vort_lab::train::run_with(&c, &dir, false, &Default::default()).unwrap();
            let e = s.eval.unwrap();
            let b: Vec<String> = e
                .buckets
                .iter()
                .map(|b| format!("{} {:.3} (n={})", b.label, b.accuracy, b.n))
                .collect();
            eprintln!(
                "{task} {m}: acc {:.3} [{}] loss {:.3}; {:.1}s total, {:.0} tok/s",
                e.accuracy,
                b.join(", "),
                e.loss,
                t0.elapsed().as_secs_f64(),
                s.tokens_per_s
            );
        }
    }
}

#[test]
#[ignore = "the quick reproduction (~18 min on 2 cores): REPRO_OUT=dir"]
fn quick_reproduction() {
    let out = std::env::var("REPRO_OUT").unwrap_or_else(|_| "results/synthetic-quick".into());
    let rep = reproduce::run(Scale::Quick, std::path::Path::new(&out)).unwrap();
    eprintln!("wall {:.0} s", rep.wall_s);
}
