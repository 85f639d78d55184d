//! The output rule's run-file part (docs/cli.md): a command that reads a run (a run
//! directory, a checkpoint, an export) refuses an output that is one of the files it reads or
//! lies inside a run directory it reads, both sides compared after resolving symlinks, before
//! it does any work. The rest of the rule (regular files only, symlinks followed, atomic) is
//! the writer's: [`vort::fsio`].

use std::path::{Path, PathBuf};

use vort::fsio::Refused;

fn refused(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, Refused(message))
}

/// The write target `t` ([`vort::fsio::target`]) with every symlink of its directory resolved
/// too, also when it does not exist yet (its directory resolved, the name kept); None when its
/// directory does not exist.
fn resolved(t: &Path) -> Option<PathBuf> {
    if let Ok(c) = t.canonicalize() {
        return Some(c);
    }
    let name = t.file_name()?;
    let dir = match t.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Some(dir.canonicalize().ok()?.join(name))
}

/// The whole output rule, checked before a command does any work: refuses `out` when
/// [`vort::fsio::target`] does (not a regular file), and when it is one of `protected` or lies
/// inside one of them (the files and directories the command reads), both compared after
/// resolving symlinks; protected paths that do not exist are skipped.
///
/// # Errors
/// [`Refused`] naming the reason; the I/O error of a path that cannot be inspected.
pub fn check_output<P: AsRef<Path>>(out: &Path, protected: &[P]) -> std::io::Result<()> {
    let Some(o) = resolved(&vort::fsio::target(out)?) else {
        return Ok(()); // its directory does not exist: the write itself will say so
    };
    for p in protected {
        let p = p.as_ref();
        let Ok(c) = p.canonicalize() else { continue };
        if o == c || (c.is_dir() && o.starts_with(&c)) {
            let what = if c.is_dir() {
                format!("lies inside {}, a directory", p.display())
            } else {
                format!("is {}", p.display())
            };
            return Err(refused(format!(
                "{} {what} that this command reads, and would be overwritten; write the \
                 output outside it",
                out.display()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vort::fsio::is_refused;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("vort-output-rule-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Outputs inside a protected directory, or equal to a protected file (through a symlink
    /// too), are refused; others pass.
    #[cfg(unix)]
    #[test]
    fn protected_paths_are_refused() {
        let d = dir("protect");
        let run = d.join("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::write(run.join("checkpoint.safetensors"), b"ck").unwrap();
        std::fs::write(d.join("export.st"), b"w").unwrap();
        std::os::unix::fs::symlink(d.join("export.st"), d.join("alias.st")).unwrap();
        let protected = [run.clone(), d.join("export.st")];
        for bad in [
            run.join("checkpoint.safetensors"),
            run.join("new.safetensors"),
            run.join("../run/config.toml"),
            d.join("export.st"),
            d.join("alias.st"),
        ] {
            let e = check_output(&bad, &protected).unwrap_err();
            assert!(is_refused(&e), "{}: {e}", bad.display());
        }
        check_output(&d.join("other.st"), &protected).unwrap();
        check_output(&d.join("no/such/dir.st"), &protected).unwrap();
    }
}
