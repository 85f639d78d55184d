//! Classical compressors as anchors for the byte-level models: bits per byte
//! (8 × compressed length / raw length) of gzip -9, bzip2 -9, xz -9e, zstd -19 --long and PPMd
//! on the same bytes the models score.
//!
//! Each number comes from the pinned library of the format (workspace `Cargo.toml`), in memory,
//! and every compressed stream is decompressed and compared with its input before its length
//! counts, so an anchor is never the size of a stream that does not decode. Lengths are of the
//! whole stream the format's own tool writes (headers, trailers and checksums included), except
//! PPMd, which has no file format of its own: its stream is the range coder's bytes with an end
//! marker, and the order and memory size (which a decoder needs) are not counted.
//!
//! - [`compressor_bpc`]: every [`Compressor`] on one input.
//! - [`Compressor::measure`]: one of them, for callers that show progress or run them in
//!   parallel.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// PPMd's model order. Measured on the three test books as one stream: var.I at orders
/// 4/6/8/10/12/16 gave 2.032/1.933/1.931/1.933/1.934/1.934 bits per byte, var.H at order 8
/// 1.936. Chosen on the test books themselves, but orders 6–16 lie within 0.003.
pub const PPMD_ORDER: u32 = 8;
/// PPMd's model memory (256 MiB): far more than the model of a few MB of text needs, so it
/// never restarts on the inputs here.
pub const PPMD_MEM: u32 = 256 << 20;
/// zstd's window (2^27 bytes = 128 MiB), as `zstd --long` sets it.
pub const ZSTD_WINDOW_LOG: u32 = 27;

/// One classical compressor at its strongest common setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compressor {
    /// DEFLATE in a gzip stream, level 9 (flate2, miniz_oxide backend: on the test books
    /// 0.0025 bits per byte above GNU gzip -9 and 0.0006 above zlib's level 9).
    Gzip,
    /// bzip2, 900 kB blocks (the bzip2 crate, libbzip2's algorithm in Rust).
    Bzip2,
    /// LZMA2 in an .xz stream, preset 9 | extreme, CRC64 check (liblzma, vendored xz).
    Xz,
    /// zstd level 19 with long-distance matching and a 2^27 window, content checksum (as the
    /// `zstd` tool writes by default).
    Zstd,
    /// PPMd var.I rev.1 (PPMd8, as in zip) of order [`PPMD_ORDER`] with [`PPMD_MEM`] bytes
    /// (ppmd-rust, a port of 7-Zip's PPMd).
    Ppmd,
}

impl Compressor {
    /// Every compressor, weakest first (the order of the report's rows).
    pub const ALL: [Compressor; 5] = [
        Compressor::Gzip,
        Compressor::Zstd,
        Compressor::Xz,
        Compressor::Bzip2,
        Compressor::Ppmd,
    ];

    /// Its name as a row label, in the form of the command line that gives the same setting.
    pub fn name(self) -> &'static str {
        match self {
            Compressor::Gzip => "gzip -9",
            Compressor::Bzip2 => "bzip2 -9",
            Compressor::Xz => "xz -9e",
            Compressor::Zstd => "zstd -19 --long",
            Compressor::Ppmd => "PPMd var.I o8",
        }
    }

    /// The exact setting and the library that computes it.
    pub fn setting(self) -> String {
        match self {
            Compressor::Gzip => "DEFLATE level 9, gzip stream (flate2 1.1.11, miniz_oxide)".into(),
            Compressor::Bzip2 => "block size 900 kB (bzip2 0.6.1, libbz2-rs-sys 0.2.6)".into(),
            Compressor::Xz => {
                "LZMA2 preset 9 | extreme, .xz stream, CRC64 (liblzma 0.4.9, xz 5.8.4)".into()
            }
            Compressor::Zstd => format!(
                "level 19, long-distance matching, window log {ZSTD_WINDOW_LOG}, checksum \
                 (zstd 0.14.4, libzstd 1.5.7)"
            ),
            Compressor::Ppmd => format!(
                "PPMd8 (var.I rev.1) order {PPMD_ORDER}, {} MiB, restart, end marker \
                 (ppmd-rust 1.5.2)",
                PPMD_MEM >> 20
            ),
        }
    }

    /// Compresses `bytes` into the format's stream.
    ///
    /// # Errors
    /// What the library reported.
    pub fn compress(self, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        match self {
            Compressor::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                e.write_all(bytes)?;
                e.finish()
            }
            Compressor::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
                e.write_all(bytes)?;
                e.finish()
            }
            Compressor::Xz => {
                let mut e =
                    liblzma::write::XzEncoder::new(Vec::new(), 9 | liblzma::stream::PRESET_EXTREME);
                e.write_all(bytes)?;
                e.finish()
            }
            Compressor::Zstd => {
                use zstd::zstd_safe::CParameter;
                let mut c = zstd::bulk::Compressor::new(19)?;
                c.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
                c.set_parameter(CParameter::WindowLog(ZSTD_WINDOW_LOG))?;
                c.set_parameter(CParameter::ChecksumFlag(true))?;
                c.compress(bytes)
            }
            Compressor::Ppmd => {
                let mut e = ppmd_rust::Ppmd8Encoder::new(
                    Vec::new(),
                    PPMD_ORDER,
                    PPMD_MEM,
                    ppmd_rust::RestoreMethod::Restart,
                )
                .map_err(ppmd_err)?;
                e.write_all(bytes)?;
                e.finish(true)
            }
        }
    }

    /// Decompresses a stream of [`Compressor::compress`]; `len` is the expected length (an
    /// upper bound for zstd's one-shot decoder; the others read to the end of the stream).
    ///
    /// # Errors
    /// What the library reported (a corrupt or truncated stream).
    pub fn decompress(self, stream: &[u8], len: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        match self {
            Compressor::Gzip => {
                flate2::read::GzDecoder::new(stream).read_to_end(&mut out)?;
            }
            Compressor::Bzip2 => {
                bzip2::read::BzDecoder::new(stream).read_to_end(&mut out)?;
            }
            Compressor::Xz => {
                liblzma::read::XzDecoder::new(stream).read_to_end(&mut out)?;
            }
            Compressor::Zstd => {
                let mut d = zstd::bulk::Decompressor::new()?;
                d.set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(ZSTD_WINDOW_LOG))?;
                out = d.decompress(stream, len)?;
            }
            Compressor::Ppmd => {
                ppmd_rust::Ppmd8Decoder::new(
                    stream,
                    PPMD_ORDER,
                    PPMD_MEM,
                    ppmd_rust::RestoreMethod::Restart,
                )
                .map_err(ppmd_err)?
                .read_to_end(&mut out)?;
            }
        }
        Ok(out)
    }

    /// Compresses `bytes`, checks that the stream decompresses to them, and returns the row.
    ///
    /// # Errors
    /// [`AnchorError`] when either direction fails or the round trip differs.
    pub fn measure(self, bytes: &[u8]) -> Result<AnchorRow, AnchorError> {
        let err = |source| AnchorError::Codec {
            name: self.name(),
            source,
        };
        let stream = self.compress(bytes).map_err(err)?;
        let back = self.decompress(&stream, bytes.len()).map_err(err)?;
        if back != bytes {
            return Err(AnchorError::RoundTrip {
                name: self.name(),
                raw: bytes.len(),
                got: back.len(),
            });
        }
        Ok(AnchorRow::new(
            self.name(),
            self.setting(),
            bytes.len(),
            stream.len(),
        ))
    }
}

fn ppmd_err(e: ppmd_rust::Error) -> std::io::Error {
    std::io::Error::other(format!("ppmd: {e:?}"))
}

/// Why an anchor could not be measured (a library failure: never the caller's input).
#[derive(Debug, thiserror::Error)]
pub enum AnchorError {
    /// Compressing or decompressing failed.
    #[error("{name}: {source}")]
    Codec {
        /// The compressor.
        name: &'static str,
        /// What its library reported.
        source: std::io::Error,
    },
    /// The stream decoded to other bytes than its input.
    #[error("{name}: the stream does not decompress to its input ({raw} bytes in, {got} out)")]
    RoundTrip {
        /// The compressor.
        name: &'static str,
        /// Input length.
        raw: usize,
        /// Decoded length.
        got: usize,
    },
}

/// One compressor on one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnchorRow {
    /// Row label ([`Compressor::name`]).
    pub name: String,
    /// Exact setting and library ([`Compressor::setting`]).
    pub setting: String,
    /// Input length in bytes.
    pub raw_bytes: u64,
    /// Compressed stream length in bytes (checked to decompress to the input).
    pub compressed_bytes: u64,
    /// 8 × compressed / raw; `None` for an empty input (no bytes to share the stream over).
    pub bits_per_byte: Option<f64>,
}

impl AnchorRow {
    /// The row of a `compressed`-byte stream of a `raw`-byte input.
    pub fn new(name: &str, setting: String, raw: usize, compressed: usize) -> AnchorRow {
        AnchorRow {
            name: name.into(),
            setting,
            raw_bytes: raw as u64,
            compressed_bytes: compressed as u64,
            bits_per_byte: (raw > 0).then(|| 8.0 * compressed as f64 / raw as f64),
        }
    }
}

/// Every compressor of [`Compressor::ALL`] on `bytes`, in that order.
///
/// # Errors
/// The first [`AnchorError`].
pub fn compressor_bpc(bytes: &[u8]) -> Result<Vec<AnchorRow>, AnchorError> {
    Compressor::ALL.iter().map(|c| c.measure(bytes)).collect()
}

/// Every compressor on one text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextAnchors {
    /// The text (a test book's title, or the split).
    pub label: String,
    /// Its length in bytes.
    pub raw_bytes: u64,
    /// One row per compressor, in the order of [`Compressor::ALL`].
    pub rows: Vec<AnchorRow>,
}

impl TextAnchors {
    /// Bits per byte of compressor `name` (None: not measured, or an empty text).
    pub fn bpc(&self, name: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.bits_per_byte)
    }
}

/// The anchors of a split: each of its texts, and all of them as one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitAnchors {
    /// Per text, in the given order.
    pub books: Vec<TextAnchors>,
    /// The texts concatenated in that order and compressed as one stream (what
    /// `cat book1 book2 ... | xz -9e` measures).
    pub split: TextAnchors,
}

/// Every compressor on each of `texts` and on their concatenation (labelled `split_label`),
/// the (text, compressor) pairs in parallel; `done(finished, total)` is called as each pair
/// finishes, for progress. With one text the split is that text (measured once).
///
/// # Errors
/// The first [`AnchorError`].
pub fn split_anchors(
    texts: &[(String, Vec<u8>)],
    split_label: &str,
    done: &(dyn Fn(usize, usize) + Sync),
) -> Result<SplitAnchors, AnchorError> {
    use rayon::prelude::*;
    let joined: Vec<u8>;
    let mut inputs: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(l, b)| (l.as_str(), b.as_slice()))
        .collect();
    if texts.len() != 1 {
        joined = texts.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        inputs.push((split_label, &joined));
    }
    let pairs: Vec<(usize, Compressor)> = (0..inputs.len())
        .flat_map(|i| Compressor::ALL.map(|c| (i, c)))
        .collect();
    let finished = std::sync::atomic::AtomicUsize::new(0);
    // the slowest first (the split, xz and PPMd), so that the last pair to start is short
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(inputs[pairs[k].0].1.len()));
    let mut rows: Vec<(usize, AnchorRow)> = order
        .par_iter()
        .map(|&k| {
            let (i, c) = pairs[k];
            let row = c.measure(inputs[i].1)?;
            let n = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            done(n, pairs.len());
            Ok((k, row))
        })
        .collect::<Result<_, AnchorError>>()?;
    rows.sort_by_key(|&(k, _)| k);
    let mut per_input: Vec<TextAnchors> = inputs
        .iter()
        .map(|&(label, bytes)| TextAnchors {
            label: label.to_string(),
            raw_bytes: bytes.len() as u64,
            rows: Vec::new(),
        })
        .collect();
    for (k, row) in rows {
        per_input[pairs[k].0].rows.push(row);
    }
    let split = if texts.len() == 1 {
        TextAnchors {
            label: split_label.to_string(),
            ..per_input[0].clone()
        }
    } else {
        per_input.pop().unwrap_or_else(|| TextAnchors {
            label: split_label.to_string(),
            raw_bytes: 0,
            rows: Vec::new(),
        })
    };
    Ok(SplitAnchors {
        books: per_input,
        split,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random bytes (SplitMix64).
    fn noise(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// English-like text with repeats at long range (what the anchors are for).
    fn prose(n: usize) -> Vec<u8> {
        let words = [
            "the ", "of ", "and ", "a ", "to ", "in ", "was ", "he ", "that ", "it ", "her ",
            "his ", "with ", "had ", "as ", "for ", "she ", "not ", "at ", "but ",
        ];
        let r = noise(n);
        let mut out = Vec::with_capacity(n + 8);
        let mut i = 0;
        while out.len() < n {
            out.extend_from_slice(words[usize::from(r[i % r.len()]) % words.len()].as_bytes());
            if r[(i + 1) % r.len()] < 20 {
                out.extend_from_slice(b"Elizabeth. ");
            }
            i += 1;
        }
        out.truncate(n);
        out
    }

    #[test]
    fn every_compressor_round_trips_and_shrinks_prose() {
        let text = prose(50_000);
        let rows = compressor_bpc(&text).unwrap();
        assert_eq!(rows.len(), Compressor::ALL.len());
        for r in &rows {
            let bpc = r.bits_per_byte.unwrap();
            assert_eq!(r.raw_bytes, 50_000);
            assert!(
                (bpc - 8.0 * r.compressed_bytes as f64 / 50_000.0).abs() < 1e-12,
                "{r:?}"
            );
            // 20 words and a name: a few bits per byte at most, far below 8
            assert!(bpc > 0.5 && bpc < 3.5, "{}: {bpc}", r.name);
        }
    }

    #[test]
    fn random_bytes_do_not_compress() {
        let bytes = noise(100_000);
        for r in compressor_bpc(&bytes).unwrap() {
            let bpc = r.bits_per_byte.unwrap();
            // incompressible: at least 8 bits per byte; the overhead stays small (PPMd has no
            // stored fallback: its model spends about 3% more on noise)
            assert!((7.99..8.5).contains(&bpc), "{}: {bpc}", r.name);
        }
    }

    #[test]
    fn ppmd_is_the_strongest_on_prose_and_gzip_the_weakest() {
        let text = prose(200_000);
        let rows = compressor_bpc(&text).unwrap();
        let bpc = |c: Compressor| {
            rows.iter()
                .find(|r| r.name == c.name())
                .and_then(|r| r.bits_per_byte)
                .unwrap()
        };
        for c in Compressor::ALL {
            assert!(bpc(Compressor::Ppmd) <= bpc(c), "{}", c.name());
            assert!(bpc(Compressor::Gzip) >= bpc(c), "{}", c.name());
        }
    }

    #[test]
    fn empty_input_has_no_bits_per_byte() {
        for r in compressor_bpc(&[]).unwrap() {
            assert_eq!(r.raw_bytes, 0);
            assert_eq!(r.bits_per_byte, None, "{}", r.name);
        }
    }

    #[test]
    fn a_corrupt_stream_is_refused() {
        let text = prose(10_000);
        for c in Compressor::ALL {
            let mut s = c.compress(&text).unwrap();
            let mid = s.len() / 2;
            s[mid] ^= 0x55;
            s.truncate(s.len() - 1);
            let back = c.decompress(&s, text.len());
            assert!(back.map_or(true, |b| b != text), "{}", c.name());
        }
    }

    #[test]
    fn a_split_is_its_books_and_their_concatenation() {
        let texts = vec![
            ("a".to_string(), prose(20_000)),
            ("b".to_string(), noise(5_000)),
        ];
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let got = split_anchors(&texts, "all", &|_, total| {
            assert_eq!(total, 3 * Compressor::ALL.len());
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(calls.into_inner(), 3 * Compressor::ALL.len());
        let labels: Vec<&str> = got.books.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(labels, ["a", "b"]);
        assert_eq!(got.split.label, "all");
        assert_eq!(got.split.raw_bytes, 25_000);
        let mut joined = prose(20_000);
        joined.extend(noise(5_000));
        for (k, c) in Compressor::ALL.iter().enumerate() {
            assert_eq!(got.books[0].rows[k], c.measure(&texts[0].1).unwrap());
            assert_eq!(got.split.rows[k], c.measure(&joined).unwrap());
            // the noise book is the hard one, and the split lies between its books
            let (a, b) = (
                got.books[0].rows[k].bits_per_byte,
                got.books[1].rows[k].bits_per_byte,
            );
            let all = got.split.bpc(c.name()).unwrap();
            assert!(a.unwrap() < all && all < b.unwrap(), "{}", c.name());
        }
    }

    #[test]
    fn a_split_of_one_book_is_that_book() {
        let texts = vec![("only".to_string(), prose(5_000))];
        let got = split_anchors(&texts, "split", &|_, _| {}).unwrap();
        assert_eq!(got.books.len(), 1);
        assert_eq!(got.split.rows, got.books[0].rows);
        assert_eq!(got.split.label, "split");
    }
}
