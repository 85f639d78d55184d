//! Reads the character vectors of an installed R package's lazy-load data
//! (`data/Rdata.rdb`), as Debian's `r-cran-*` packages ship them, without R.
//!
//! An `.rdb` file is a sequence of objects, each a 4-byte big-endian length (of the serialised
//! object) followed by its zlib stream (R's `compress = TRUE`, the default; bzip2 and xz
//! objects start with a type byte instead and are refused here). A serialised object is R's XDR
//! format: `X\n`, the format version (2 or 3), two R versions, for version 3 the native
//! encoding, then the object. Only the object type of text data is read: a character vector
//! (STRSXP, no attributes) of strings (CHARSXP; length -1 is NA and is skipped).

use std::io::Read;

/// R's type codes.
const STRSXP: u32 = 16;
const CHARSXP: u32 = 9;
/// Flag bit of an object that has attributes.
const HAS_ATTR: u32 = 1 << 9;

/// Every object of `rdb`, in file order, as the strings of a character vector.
///
/// # Errors
/// A description of the first thing that is not a zlib-compressed character vector.
pub fn character_vectors(rdb: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < rdb.len() {
        let len = be32(rdb, pos).ok_or("truncated object length")? as usize;
        let body = &rdb[pos + 4..];
        if body.first() != Some(&0x78) {
            return Err(format!(
                "object at byte {pos} is not zlib-compressed (type byte {:?})",
                body.first().map(|b| *b as char)
            ));
        }
        let mut z = flate2::read::ZlibDecoder::new(body);
        let mut raw = Vec::with_capacity(len);
        z.read_to_end(&mut raw)
            .map_err(|e| format!("object at byte {pos}: {e}"))?;
        if raw.len() != len {
            return Err(format!(
                "object at byte {pos}: {} bytes, its header says {len}",
                raw.len()
            ));
        }
        out.push(unserialize_strings(&raw).map_err(|e| format!("object at byte {pos}: {e}"))?);
        pos += 4 + z.total_in() as usize;
    }
    Ok(out)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The strings of one serialised character vector.
fn unserialize_strings(raw: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if !raw.starts_with(b"X\n") {
        return Err("not R's XDR serialisation".into());
    }
    let mut p = 2;
    let int = |p: &mut usize| -> Result<u32, String> {
        let v = be32(raw, *p).ok_or("truncated")?;
        *p += 4;
        Ok(v)
    };
    let version = int(&mut p)?;
    int(&mut p)?; // writer's R version
    int(&mut p)?; // oldest R that reads it
    match version {
        2 => {}
        3 => p += int(&mut p)? as usize, // the native encoding's name
        v => return Err(format!("serialisation version {v}")),
    }
    let flags = int(&mut p)?;
    if flags & 0xff != STRSXP || flags & HAS_ATTR != 0 {
        return Err(format!("not a plain character vector (flags {flags:#x})"));
    }
    let n = int(&mut p)?;
    if n == u32::MAX {
        return Err("long vectors are not read".into());
    }
    let mut strings = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let f = be32(raw, p).ok_or("truncated string")?;
        let len = be32(raw, p + 4).ok_or("truncated string")?;
        p += 8;
        if f & 0xff != CHARSXP {
            return Err(format!("element flags {f:#x} are not a string"));
        }
        if len == u32::MAX {
            continue; // NA
        }
        let s = raw
            .get(p..p + len as usize)
            .ok_or("truncated string bytes")?;
        strings.push(s.to_vec());
        p += len as usize;
    }
    if p != raw.len() {
        return Err(format!("{} bytes after the vector", raw.len() - p));
    }
    Ok(strings)
}

#[doc(hidden)]
/// Test fixtures: an `.rdb` as R writes it (version 3, zlib), for this module's tests and the
/// fetch tests.
pub mod fixture {
    use std::io::Write;

    /// The serialised character vector of `strings` (`None`: NA).
    pub fn serialize(strings: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = b"X\n".to_vec();
        let int = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_be_bytes());
        for v in [3, 0x0004_0201, 0x0003_0500, 5] {
            int(&mut b, v);
        }
        b.extend_from_slice(b"UTF-8");
        int(&mut b, super::STRSXP);
        int(&mut b, strings.len() as u32);
        for s in strings {
            // gp bits: UTF-8 (8) or ASCII (64) as R marks them; not read
            int(&mut b, super::CHARSXP | (64 << 12));
            match s {
                Some(s) => {
                    int(&mut b, s.len() as u32);
                    b.extend_from_slice(s);
                }
                None => int(&mut b, u32::MAX),
            }
        }
        b
    }

    /// An `.rdb` of `objects`, each a character vector.
    pub fn rdb(objects: &[Vec<Option<&[u8]>>]) -> Vec<u8> {
        let mut out = Vec::new();
        for o in objects {
            let raw = serialize(o);
            out.extend_from_slice(&(raw.len() as u32).to_be_bytes());
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(&raw).expect("in memory");
            out.extend(z.finish().expect("in memory"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_vector_and_skips_na() {
        let a: Vec<Option<&[u8]>> = vec![Some(b"EMMA"), Some(b""), None, Some(b"\xc2\xa3 20")];
        let b: Vec<Option<&[u8]>> = vec![Some(b"PERSUASION")];
        let got = character_vectors(&fixture::rdb(&[a, b])).unwrap();
        assert_eq!(
            got,
            vec![
                vec![b"EMMA".to_vec(), b"".to_vec(), b"\xc2\xa3 20".to_vec()],
                vec![b"PERSUASION".to_vec()],
            ]
        );
    }

    #[test]
    fn refuses_what_it_does_not_read() {
        let good = fixture::rdb(&[vec![Some(b"x".as_slice())]]);
        assert!(
            character_vectors(&good[..good.len() - 3]).is_err(),
            "truncated"
        );
        let mut xz = good.clone();
        xz[4] = b'X';
        assert!(character_vectors(&xz).unwrap_err().contains("not zlib"));
        // an integer vector (INTSXP = 13) is not text
        let mut raw = fixture::serialize(&[]);
        let at = raw.len() - 8;
        raw[at..at + 4].copy_from_slice(&13u32.to_be_bytes());
        assert!(unserialize_strings(&raw)
            .unwrap_err()
            .contains("character vector"));
        assert!(character_vectors(&[]).unwrap().is_empty());
    }
}
