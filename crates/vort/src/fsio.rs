//! The one atomic file writer that every file the project writes goes through (outputs,
//! plots, reports, JSON, checkpoints, state files, data): the bytes go to a temporary file in
//! the target's directory, which is fsynced, renamed over the target, and the directory is
//! fsynced. A reader, a crash or a full disk leaves the old file or the new one, never a torn
//! or truncated one, and a failed write removes its temporary file.

use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Moves the finished temporary file `tmp` over `path`: fsync, rename, fsync of the
/// directory. On error `tmp` is removed and `path` is untouched.
///
/// # Errors
/// The I/O error of the step that failed.
pub fn commit(tmp: &Path, path: &Path) -> std::io::Result<()> {
    let done = (|| {
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

/// Writes `bytes` to `path` atomically (see the module doc).
///
/// # Errors
/// The I/O error (the old file, if any, is untouched; no temporary file is left).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
/// `draw`'s error, or the commit's I/O error converted with `io_err`.
pub fn write_with<E>(
    path: &Path,
    draw: impl FnOnce(&Path) -> Result<(), E>,
    io_err: impl FnOnce(std::io::Error) -> E,
) -> Result<(), E> {
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
}
