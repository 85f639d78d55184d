//! Task generators: determinism, lag laws (chi-square with a fixed seed), recoverable answers.

use vort_lab::tasks::{bucket_of, PlantedPairs, Source, Stream, TaskConfig, TaskKind};

fn cfg(kind: TaskKind) -> TaskConfig {
    let mut c = TaskConfig::of_kind(kind);
    c.seq_len = 2048;
    let p = c.planted_mut().unwrap();
    p.max_lag = 2000;
    p.queries = 16;
    c
}

/// The planted pairs of a Zipf or label-copy config.
fn pairs(c: &TaskConfig) -> &PlantedPairs {
    c.planted().unwrap()
}

/// Lags of `n` sequences.
fn lags(c: &TaskConfig, n: u64) -> Vec<usize> {
    (0..n)
        .flat_map(|i| {
            let s = c.sample(7, Stream::Train, i);
            s.lags
                .iter()
                .zip(&s.mask)
                .filter(|(_, &m)| m)
                .map(|(&l, _)| l as usize)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Pearson chi-square of observed lags against `pmf` on the bins given by `edges`
/// (bin i = [edges[i], edges[i+1])), returning (statistic, degrees of freedom).
fn chi_square(lags: &[usize], pmf: &[f64], edges: &[usize]) -> (f64, usize) {
    let n = lags.len() as f64;
    let mut stat = 0.0;
    for w in edges.windows(2) {
        let p: f64 = (w[0]..w[1]).map(|l| pmf[l - 1]).sum();
        let obs = lags.iter().filter(|&&l| l >= w[0] && l < w[1]).count() as f64;
        stat += (obs - n * p).powi(2) / (n * p);
    }
    (stat, edges.len() - 2)
}

#[test]
fn zipf_lags_follow_the_zipf_law() {
    let c = cfg(TaskKind::Zipf);
    let l = lags(&c, 1500); // ~24k lags
    assert!(l.len() > 23_000, "{} lags placed", l.len());
    // doubling bins 1, 2-3, 4-7, ..., 1024-2000: expected counts all >= ~200
    let mut edges = vec![1];
    while *edges.last().unwrap() * 2 <= pairs(&c).max_lag {
        edges.push(edges.last().unwrap() * 2);
    }
    edges.push(pairs(&c).max_lag + 1);
    let (stat, df) = chi_square(&l, &c.lag_pmf(), &edges);
    // chi-square 0.999 quantile at df = 10 is 29.6
    assert_eq!(df, 10);
    assert!(stat < 29.6, "chi-square {stat} with {df} dof");
    // and the law is not uniform: the same test against uniform fails massively
    let uni = vec![1.0 / pairs(&c).max_lag as f64; pairs(&c).max_lag];
    assert!(chi_square(&l, &uni, &edges).0 > 1000.0);
    // long lags exist
    assert!(l.iter().filter(|&&x| x > 1000).count() > 1000);
}

#[test]
fn label_copy_lags_are_uniform() {
    let c = cfg(TaskKind::LabelCopy);
    let l = lags(&c, 1000); // ~16k lags
    let edges: Vec<usize> = (0..=20).map(|i| 1 + i * 100).collect(); // 20 bins of 100
    let (stat, df) = chi_square(&l, &c.lag_pmf(), &edges);
    // chi-square 0.999 quantile at df = 19 is 43.8
    assert_eq!(df, 19);
    assert!(stat < 43.8, "chi-square {stat} with {df} dof");
    let buckets = l.iter().fold([0usize; 3], |mut a, &x| {
        a[bucket_of(x)] += 1;
        a
    });
    assert!(buckets[2] > 7000, "{buckets:?}");
}

#[test]
fn answers_are_recoverable_by_lookup() {
    for kind in TaskKind::SYNTHETIC {
        let c = cfg(kind);
        for i in 0..50 {
            let s = c.sample(3, Stream::Eval, i);
            assert_eq!(s.tokens.len(), c.seq_len);
            assert!(s.tokens.iter().all(|&x| (x as usize) < c.vocab()));
            let answers: Vec<usize> = (0..c.seq_len).filter(|&p| s.mask[p]).collect();
            assert!(
                answers.len() >= pairs(&c).queries - 1,
                "{kind}: {answers:?}"
            );
            for a in answers {
                let key = s.tokens[a];
                assert!(key >= pairs(&c).key0() && key < pairs(&c).value0());
                // the key's first occurrence, followed by its value
                let p = s.tokens.iter().position(|&x| x == key).unwrap();
                assert!(p < a);
                let value = s.tokens[p + 1];
                assert_eq!(value, s.targets[a], "{kind} seq {i} pos {a}");
                let lag = s.lags[a] as usize;
                match kind {
                    TaskKind::Zipf => {
                        assert_eq!(s.tokens[a - 1], pairs(&c).qry());
                        assert_eq!(a - 1 - (p + 1), lag);
                    }
                    TaskKind::LabelCopy => {
                        assert!(s.entity[a] && s.entity[p]);
                        assert_eq!(a - (p + 1), lag);
                    }
                    TaskKind::Books | TaskKind::Mqar | TaskKind::Ruler => {
                        unreachable!("only the sparse synthetic tasks are generated here")
                    }
                }
                assert!(lag >= 1 && lag <= pairs(&c).max_lag);
                // exactly two occurrences of the key
                assert_eq!(s.tokens.iter().filter(|&&x| x == key).count(), 2);
            }
        }
    }
}

#[test]
fn generation_is_deterministic_and_streams_differ() {
    let c = cfg(TaskKind::Zipf);
    let src = Source::open(&c).unwrap();
    assert_eq!(
        src.batch(5, Stream::Train, 9, 3),
        src.batch(5, Stream::Train, 9, 3)
    );
    assert_ne!(
        src.batch(5, Stream::Train, 9, 3).tokens,
        src.batch(5, Stream::Eval, 9, 3).tokens
    );
    assert_ne!(
        src.batch(5, Stream::Train, 9, 3).tokens,
        src.batch(6, Stream::Train, 9, 3).tokens
    );
    // batch b of step s is samples s*B .. s*B+B
    let b = src.batch(5, Stream::Train, 2, 3);
    assert_eq!(
        &b.tokens[..c.seq_len],
        &c.sample(5, Stream::Train, 6).tokens[..]
    );
}

#[test]
fn invalid_configs_are_refused() {
    let mut c = cfg(TaskKind::Zipf);
    c.planted_mut().unwrap().max_lag = c.seq_len;
    assert!(c.validate().is_err());
    let mut c = cfg(TaskKind::Zipf);
    c.planted_mut().unwrap().queries = 1000;
    assert!(c.validate().is_err());
    assert!("nope".parse::<TaskKind>().is_err());
    let err = toml::from_str::<TaskConfig>("kind = \"zipf\"\nbogus = 1\n").unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
    assert!(cfg(TaskKind::LabelCopy).validate().is_ok());
}

/// Label copy on a mixture of shorter lengths (as MQAR's curriculum): step s trains on entry
/// s mod n at the same tokens per step, with that entry's queries and lags that fit it; the
/// held-out streams stay at the config's length. The flat reader takes each kind's own count
/// per entry and refuses the other's.
#[test]
fn label_copy_trains_on_a_mixture_of_lengths() {
    let text = "kind = \"label-copy\"\nseq_len = 1024\nmax_lag = 1020\nqueries = 32\n\
                n_keys = 64\ntrain_mix = [{ seq_len = 128, queries = 8 }, \
                { seq_len = 512, queries = 16 }]\n";
    let c: TaskConfig = toml::from_str(text).unwrap();
    c.validate().unwrap();
    assert_eq!(c.train_lengths(), [128, 512]);
    let src = Source::open(&c).unwrap();
    for step in 0..4u64 {
        let b = src.batch(3, Stream::Train, step, 2);
        let (t, q) = [(128, 8), (512, 16)][(step % 2) as usize];
        assert_eq!((b.t, b.b * b.t), (t, 2 * 1024), "step {step}");
        let answers = b.mask.iter().filter(|&&m| m).count();
        assert!(
            answers <= b.b * q && answers >= b.b * q - 2,
            "step {step}: {answers}"
        );
        assert!(b.lags.iter().all(|&l| (l as usize) <= t - 4));
    }
    let held = src.batch(3, Stream::Eval, 0, 2);
    assert_eq!(held.t, 1024);
    // written back, the mixture reads back
    let again: TaskConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(again, c);
    // each kind's count, and only it
    let mqar_entry = text.replace("queries = 8 }", "num_kv_pairs = 8 }");
    let e = toml::from_str::<TaskConfig>(&mqar_entry)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("task.train_mix[0] needs seq_len and queries"),
        "{e}"
    );
    let mqar = "kind = \"mqar\"\ntrain_mix = [{ seq_len = 64, queries = 4 }]\n";
    let e = toml::from_str::<TaskConfig>(mqar).unwrap_err().to_string();
    assert!(e.contains("needs seq_len and num_kv_pairs"), "{e}");
    // an entry longer than the sequence, or too dense for its length, is refused
    let refused = |t: String| {
        let cfg = toml::from_str::<TaskConfig>(&t).unwrap();
        cfg.validate().unwrap_err().to_string()
    };
    let e = refused(text.replace("seq_len = 512", "seq_len = 2048"));
    assert!(e.contains("train_mix[1].seq_len"), "{e}");
    let e = refused(text.replace("queries = 8 }", "queries = 40 }"));
    assert!(e.contains("train_mix[0]: queries = 40"), "{e}");
}
