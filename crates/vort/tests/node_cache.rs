//! The node-table cache (issue #43, a fast first byte): a table from the disk or the process is
//! the one that was built and certified, bit for bit, and a file that is torn, edited, forged
//! or not a file is never used (it is rebuilt). The cache is process-global, so the cases run
//! one after another in one test.

use std::path::{Path, PathBuf};

use vort::nodes::cache::{self, Stats};
use vort::NodeTable;

const DELTA: f64 = 0.1;
const HORIZON: u64 = 3000;
const EPS: f64 = 1e-3;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vort-node-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every float of the table as bits: equality here is bit-identity.
fn bits(t: &NodeTable) -> (Vec<u64>, Vec<Vec<u64>>, Vec<u64>) {
    (
        t.u.iter().map(|x| x.to_bits()).collect(),
        t.weights
            .iter()
            .map(|r| r.iter().map(|x| x.to_bits()).collect())
            .collect(),
        t.grid.iter().map(|x| x.to_bits()).collect(),
    )
}

/// Counts since `before`.
fn since(before: Stats) -> Stats {
    let now = cache::stats();
    Stats {
        built: now.built - before.built,
        from_disk: now.from_disk - before.from_disk,
        from_memory: now.from_memory - before.from_memory,
    }
}

fn shared_cold() -> (NodeTable, Stats) {
    cache::clear_memory();
    let before = cache::stats();
    let t = NodeTable::shared(DELTA, HORIZON, EPS).unwrap();
    (t, since(before))
}

/// FNV-1a 64, the checksum of the file's payload line (the test's twin of the cache's own).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Rewrites the payload with `edit` and, when `reseal`, the header's checksum to match, as a
/// forger would.
fn tamper(file: &Path, edit: impl Fn(&mut serde_json::Value), reseal: bool) {
    let text = std::fs::read_to_string(file).unwrap();
    let (header, payload) = text.split_once('\n').unwrap();
    let mut value: serde_json::Value = serde_json::from_str(payload).unwrap();
    edit(&mut value);
    let payload = serde_json::to_string(&value).unwrap();
    let header = if reseal {
        let mut h: serde_json::Value = serde_json::from_str(header).unwrap();
        h["checksum"] = format!("{:016x}", fnv1a(payload.as_bytes())).into();
        h.to_string()
    } else {
        header.to_string()
    };
    std::fs::write(file, format!("{header}\n{payload}")).unwrap();
}

#[test]
fn cached_tables_are_the_certified_ones() {
    let dir = scratch("main");
    cache::use_disk(Some(dir.clone()));
    let file = cache::shared_file(&dir, DELTA, HORIZON, EPS);

    // cold: built, certified, written
    let (built, s) = shared_cold();
    assert_eq!((s.built, s.from_disk), (1, 0), "{s:?}");
    assert!(file.is_file(), "no cache file at {}", file.display());

    // warm in the process: every layer of a model shares it
    let before = cache::stats();
    let again = NodeTable::shared(DELTA, HORIZON, EPS).unwrap();
    assert_eq!(since(before).from_memory, 1);
    assert_eq!(bits(&again), bits(&built));

    // warm on disk (a new process): read, checked, and bit-identical, Hermite table included
    let (read, s) = shared_cold();
    assert_eq!((s.built, s.from_disk), (0, 1), "{s:?}");
    assert_eq!(bits(&read), bits(&built));
    assert_eq!(read, built);

    // torn or edited without the checksum: rebuilt, and the file repaired
    tamper(&file, |v| v["weights"][3][2] = 0.5.into(), false);
    let (t, s) = shared_cold();
    assert_eq!(
        (s.built, s.from_disk),
        (1, 0),
        "edited file was used: {s:?}"
    );
    assert_eq!(bits(&t), bits(&built));
    let (_, s) = shared_cold();
    assert_eq!(
        s.from_disk, 1,
        "the rebuilt table was not written back: {s:?}"
    );

    // forged with a valid checksum: a weight 10% off fails the kernel's spot check
    tamper(
        &file,
        |v| {
            let c = v["weights"][3][2].as_f64().unwrap();
            v["weights"][3][2] = (1.1 * c).into();
        },
        true,
    );
    let (t, s) = shared_cold();
    assert_eq!(
        (s.built, s.from_disk),
        (1, 0),
        "forged file was used: {s:?}"
    );
    assert_eq!(bits(&t), bits(&built));

    // forged recipe: a table certified for a shorter horizon, relabelled
    tamper(&file, |v| v["horizon"] = 1000.into(), true);
    let (_, s) = shared_cold();
    assert_eq!(
        (s.built, s.from_disk),
        (1, 0),
        "relabelled file was used: {s:?}"
    );

    // a single order's SOE (banks, the fixed power law) is cached the same way
    cache::clear_memory();
    let banks = NodeTable::banks_at(&[0.3, 0.7], HORIZON, EPS).unwrap();
    cache::clear_memory();
    let before = cache::stats();
    let banks_read = NodeTable::banks_at(&[0.3, 0.7], HORIZON, EPS).unwrap();
    let s = since(before);
    assert_eq!((s.built, s.from_disk), (0, 2), "{s:?}");
    assert_eq!(bits(&banks_read), bits(&banks));

    // a FIFO in place of the file never blocks the load (issue #43 B); it is left alone
    #[cfg(unix)]
    {
        std::fs::remove_file(&file).unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(&file)
            .status()
            .unwrap();
        assert!(status.success());
        let (t, s) = shared_cold();
        assert_eq!(s.built, 1, "{s:?}");
        assert_eq!(bits(&t), bits(&built));
        std::fs::remove_file(&file).unwrap();
    }

    // a cache directory that cannot be made costs only the build
    let blocked = scratch("blocked");
    std::fs::write(&blocked, b"a file where the directory should be").unwrap();
    cache::use_disk(Some(blocked.join("nodes")));
    let (t, s) = shared_cold();
    assert_eq!(s.built, 1, "{s:?}");
    assert_eq!(bits(&t), bits(&built));

    // turned off: built every time, as before the cache, and the same table
    cache::set_enabled(false);
    let before = cache::stats();
    let off = NodeTable::shared(DELTA, HORIZON, EPS).unwrap();
    let s = since(before);
    cache::set_enabled(true);
    assert_eq!((s.built, s.from_disk, s.from_memory), (1, 0, 0), "{s:?}");
    assert_eq!(bits(&off), bits(&built));

    // errors are not cached: a bad recipe fails every time
    for _ in 0..2 {
        assert!(NodeTable::shared(1.5, HORIZON, EPS).is_err());
    }

    cache::use_disk(None);
    let _ = std::fs::remove_file(&blocked);
    let _ = std::fs::remove_dir_all(&dir);
}
