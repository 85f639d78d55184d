//! The one atomic file writer that every file the project writes goes through (outputs,
//! plots, reports, JSON, checkpoints, state files, data): the bytes go to a temporary file in
//! the target's directory, which is fsynced, renamed over the target, and the directory is
//! fsynced. A reader, a crash or a full disk leaves the old file or the new one, never a torn
//! or truncated one, and a failed write removes its temporary file.
//!
//! # The output rule (every command, every file)
//!
//! - A target that does not exist, or is a regular file, is written (replaced atomically).
//! - A symlink is followed (its whole chain); the file it names is replaced atomically and the
//!   link is kept. A dangling link creates the file it names.
//! - An existing target that is anything else (a directory, a character or block device, a
//!   FIFO, a socket) is refused before anything is written: renaming over it would turn
//!   `/dev/null` or a pipe into a regular file. Refusals are [`Refused`] errors
//!   ([`is_refused`]), which the CLI reports with exit status 2.
//! - A command that reads a run (a run directory, a checkpoint, an export) refuses an output
//!   that is one of the files it reads or lies inside a run directory it reads, with exit
//!   status 2: `vort export --out RUN/checkpoint.safetensors` would otherwise destroy the
//!   run. That part is the lab's (run files are its format): `vort_lab::train::check_output`.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A write refused by the output rule (see the module doc) before anything was written: the
/// user's to fix (another path).
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refused(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, Refused(message))
}

/// True when `e` is a refusal of the output rule ([`Refused`]), not a failure of the
/// environment (a full disk, a read-only directory).
pub fn is_refused(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Refused>())
}

/// What a non-regular file is, in words.
fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
}

/// Symlinks followed before a chain is refused as a loop (Linux's own limit).
const MAX_LINKS: usize = 40;

/// The file a write of `path` replaces (see the module doc): `path` itself, or the end of its
/// symlink chain.
///
/// # Errors
/// [`Refused`] for an existing target that is not a regular file or a symlink loop; the I/O
/// error of a path that cannot be inspected.
pub fn target(path: &Path) -> std::io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match std::fs::symlink_metadata(&p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
            Ok(m) => m,
        };
        if meta.file_type().is_symlink() {
            // a relative link is relative to the link's directory; an absolute one replaces it
            let link = std::fs::read_link(&p)?;
            p = match p.parent() {
                Some(dir) => dir.join(link),
                None => link,
            };
            continue;
        }
        if meta.is_file() {
            return Ok(p);
        }
        let via = if p == path {
            String::new()
        } else {
            format!(
                " (the symlink {} points to {})",
                path.display(),
                p.display()
            )
        };
        return Err(refused(format!(
            "{} is {}{via}, not a regular file: vort writes regular files only and leaves it \
             as it is; choose a file path",
            path.display(),
            kind_of(&meta)
        )));
    }
    Err(refused(format!(
        "{} is a chain of more than {MAX_LINKS} symlinks (a loop?); choose a file path",
        path.display()
    )))
}

/// The temporary path a write of `path` goes through: same directory, a name of its own
/// (`<stem>.tmp-<pid>.<ext>`, keeping the extension so that writers that choose a format by
/// extension, like the PNG backend, still do).
pub fn temp_path(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map_or_else(|| "out".into(), |s| s.to_string_lossy().into_owned());
    let name = match path.extension() {
        Some(ext) => format!(
            "{stem}.tmp-{}.{}",
            std::process::id(),
            ext.to_string_lossy()
        ),
        None => format!("{stem}.tmp-{}", std::process::id()),
    };
    path.with_file_name(name)
}

/// Moves the finished temporary file `tmp` over `path` (over the file it names, if a
/// symlink): fsync, rename, fsync of the directory. On error `tmp` is removed and `path` is
/// untouched. `tmp` must be [`temp_path`] of the [`target`] of `path` (same directory).
///
/// # Errors
/// The I/O error of the step that failed.
pub fn commit(tmp: &Path, path: &Path) -> std::io::Result<()> {
    let done = (|| {
        let path = &target(path)?;
        std::fs::OpenOptions::new()
            .write(true)
            .open(tmp)?
            .sync_all()?;
        std::fs::rename(tmp, path)?;
        sync_dir(path);
        Ok(())
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    done
}

/// Writes `bytes` to `path` atomically under the output rule (see the module doc).
///
/// # Errors
/// [`Refused`] for a target that is not a regular file, before anything is written; the
/// I/O error (the old file, if any, is untouched; no temporary file is left).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let path = &target(path)?;
    let tmp = temp_path(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    commit(&tmp, path)
}

/// Runs `draw` on the temporary path of `path` (a writer that needs a path, such as the PNG
/// backend), then commits it; on any error the temporary file is removed and `path` is left
/// as it was.
///
/// # Errors
/// `draw`'s error, or the output rule's refusal or the commit's I/O error converted with
/// `io_err`.
pub fn write_with<E>(
    path: &Path,
    draw: impl FnOnce(&Path) -> Result<(), E>,
    io_err: impl FnOnce(std::io::Error) -> E,
) -> Result<(), E> {
    let path = &match target(path) {
        Ok(p) => p,
        Err(e) => return Err(io_err(e)),
    };
    let tmp = temp_path(path);
    if let Err(e) = draw(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    commit(&tmp, path).map_err(io_err)
}

/// Best effort: makes the rename durable (a directory that cannot be opened, e.g. on some
/// platforms, is skipped; the rename itself already happened).
fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vort-fsio-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn writes_replace_and_leave_no_temporary() {
        let d = dir("ok");
        let p = d.join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        assert!(temp_path(&d.join("x.png"))
            .to_string_lossy()
            .ends_with(".png"));
    }

    /// A failed draw leaves the old file as it was (the old plot code truncated it first).
    #[test]
    fn a_failed_writer_keeps_the_old_file() {
        let d = dir("fail");
        let p = d.join("p.txt");
        std::fs::write(&p, b"x\n").unwrap();
        let r: Result<(), String> = write_with(
            &p,
            |tmp| {
                std::fs::write(tmp, b"half").unwrap();
                Err("unknown extension".into())
            },
            |e| e.to_string(),
        );
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"x\n");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            1,
            "temporary removed"
        );
        // a directory that does not exist is the plain I/O error, nothing created
        assert!(write_atomic(&d.join("no/such/dir.json"), b"1").is_err());
    }

    /// A symlink's target is replaced and the link kept; a directory, a FIFO and a symlink to
    /// a directory are refused (a refusal, not an I/O failure) and left as they were.
    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_and_non_regular_targets_refused() {
        let d = dir("kinds");
        let tgt = d.join("tgt.st");
        std::fs::write(&tgt, b"old").unwrap();
        std::os::unix::fs::symlink("tgt.st", d.join("lnk.st")).unwrap();
        write_atomic(&d.join("lnk.st"), b"new").unwrap();
        assert_eq!(std::fs::read(&tgt).unwrap(), b"new");
        assert!(std::fs::symlink_metadata(d.join("lnk.st"))
            .unwrap()
            .file_type()
            .is_symlink());
        // a dangling link creates the file it names
        std::os::unix::fs::symlink(d.join("later.st"), d.join("dangling.st")).unwrap();
        write_atomic(&d.join("dangling.st"), b"x").unwrap();
        assert_eq!(std::fs::read(d.join("later.st")).unwrap(), b"x");
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::os::unix::fs::symlink(&sub, d.join("to-dir")).unwrap();
        for p in [sub.clone(), d.join("to-dir")] {
            let e = write_atomic(&p, b"1").unwrap_err();
            assert!(is_refused(&e), "{e}");
            assert!(e.to_string().contains("a directory"), "{e}");
        }
        let fifo = d.join("ff");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = write_atomic(&fifo, b"1").unwrap_err();
            assert!(is_refused(&e) && e.to_string().contains("FIFO"), "{e}");
            use std::os::unix::fs::FileTypeExt;
            assert!(std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo());
        }
        assert!(!is_refused(
            &write_atomic(&d.join("no/dir.json"), b"1").unwrap_err()
        ));
    }
}
