//! Where `tigac` may write. Every output is written as a temporary file in
//! the target's folder, synced and renamed over the target, so a crash
//! never leaves a torn file; this module decides, before anything runs,
//! which path that rename goes to, and refuses the writes that would
//! destroy something:
//! - a symbolic link is followed to the file it names (the rename then
//!   replaces that file, and the link stays a link);
//! - a target that exists and is not a regular file (`/dev/null`, a FIFO, a
//!   directory) is refused: renaming over it would replace a device node or
//!   a pipe with a regular file;
//! - a target that is the same file as one of the command's inputs (the
//!   same device and inode, however the two paths are spelled, through
//!   links or `..`) is refused: it would overwrite the input.

use std::path::{Path, PathBuf};

use crate::report::Failure;

/// The most symbolic links followed from one output path.
const MAX_LINKS: usize = 40;

/// The path an output written to `path` (for `flag`) is renamed to: `path`
/// itself, or the file its symbolic links lead to. Refused when that file
/// exists and is not a regular file, or is one of `inputs`.
pub fn output_path(flag: &str, path: &Path, inputs: &[&Path]) -> Result<PathBuf, Failure> {
    let target = follow_links(flag, path)?;
    if let Some(same) = same_file_as(&target, inputs) {
        return Err(Failure::new(format!(
            "{flag} {} is the input {}: writing it would overwrite the input; choose another output path",
            path.display(),
            same.display()
        )));
    }
    Ok(target)
}

/// `path`, or the file its chain of symbolic links ends at; an error when
/// that exists and is not a regular file, or the chain does not end.
fn follow_links(flag: &str, path: &Path) -> Result<PathBuf, Failure> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(Failure::new(format!("{flag} {}: {e}", path.display()))),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            let to = std::fs::read_link(&p).map_err(|e| Failure::new(format!("{flag} {}: {e}", path.display())))?;
            p = match p.parent() {
                Some(dir) if to.is_relative() => dir.join(to),
                _ => to,
            };
            continue;
        }
        if kind.is_file() {
            return Ok(p);
        }
        let what = if kind.is_dir() { "a directory" } else { "not a regular file (a device, a FIFO or a socket)" };
        return Err(Failure::new(format!(
            "{flag} {}: {} is {what}; tigac writes outputs by replacing a regular file, which would destroy it",
            path.display(),
            p.display()
        )));
    }
    Err(Failure::new(format!("{flag} {}: more than {MAX_LINKS} symbolic links", path.display())))
}

/// One spelling per file for outputs that may not exist yet: the canonical
/// path of an existing file, else of its folder joined with its name (`x.npy`,
/// `./x.npy`, `sub/../x.npy` and `$PWD/x.npy` are one), else the path as
/// given. Two outputs with one key would write one file.
pub fn output_key(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

/// The input that is the same file as `target`, if any (by device and
/// inode; a target that does not exist yet is no input).
pub fn same_file_as<'a>(target: &Path, inputs: &[&'a Path]) -> Option<&'a Path> {
    let t = std::fs::metadata(target).ok()?;
    inputs.iter().copied().find(|i| std::fs::metadata(i).is_ok_and(|m| same_file(&t, &m)))
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    false
}
