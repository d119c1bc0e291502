//! `tigac compile` artifacts: the checked, lowered IR of one or more kernels,
//! so the runtime can load and run them without the source.
//!
//! Format: JSON, `{"format": "tiga-artifact", "version": 2, "checksum":
//! "crc32:XXXXXXXX", "kernels": [..]}` where each kernel is the pipeline
//! result (captured IR, lowered IR, pass records). Version 2 lowered IR may
//! hold a segment's `pre_step` (a first pass over the edges,
//! `precompute-row-max`), which a version-1 reader would drop without a word
//! and then run wrongly: it refuses version 2. Version-1 artifacts (no
//! pre-pass: the online form) still load.
//!
//! **An artifact is code**: loading one runs what it says, so trust it as
//! you would trust a binary. Two checks stand between a damaged file and a
//! back end. The checksum, the CRC-32 of the exact bytes of the `kernels`
//! array, catches an edit or a flipped bit (a changed constant would
//! otherwise run as if nothing happened); it is not a signature, and files
//! written before it existed, which have none, still load. And loading
//! re-verifies every kernel (every handle in range, every type), so even an
//! artifact with a correct checksum that breaks the IR's rules is refused
//! with an error instead of reaching a back end.

use std::io::Write as _;
use std::path::Path;

use serde::Deserialize;
use tiga_compiler::passes::Compiled;

use crate::error::{Error, Result};
use crate::kernel::Kernel;

pub const FORMAT: &str = "tiga-artifact";
pub const VERSION: u32 = 2;
/// The oldest version this tiga still reads.
pub const OLDEST_VERSION: u32 = 1;

/// What is read before the kernels: the kernels stay raw text until their
/// checksum is checked.
#[derive(Deserialize)]
struct ArtifactHead<'a> {
    #[serde(default)]
    format: serde_json::Value,
    #[serde(default)]
    version: serde_json::Value,
    #[serde(default)]
    checksum: Option<String>,
    #[serde(borrow)]
    kernels: Option<&'a serde_json::value::RawValue>,
}

/// The checksum of the kernels' JSON text, as written in the file.
fn checksum(kernels_json: &str) -> String {
    format!("crc32:{:08x}", crc32fast::hash(kernels_json.as_bytes()))
}

fn err(path: &Path, message: impl Into<String>) -> Error {
    Error::Artifact { path: path.display().to_string(), message: message.into() }
}

/// Write kernels atomically: a temp file in the same folder, fsync, rename.
pub fn save(path: &Path, kernels: &[&Kernel]) -> Result<()> {
    let compiled: Vec<&Compiled> = kernels.iter().map(|k| k.compiled()).collect();
    let kernels_json = serde_json::to_string(&compiled).map_err(|e| err(path, e.to_string()))?;
    let text = format!(
        "{{\"format\":\"{FORMAT}\",\"version\":{VERSION},\"checksum\":\"{}\",\"kernels\":{kernels_json}}}",
        checksum(&kernels_json)
    );
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| err(path, format!("cannot create a temp file: {e}")))?;
    tmp.write_all(text.as_bytes()).map_err(|e| err(path, e.to_string()))?;
    // Temp files start owner-only; an artifact is an ordinary file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(|e| err(path, e.to_string()))?;
    }
    tmp.as_file().sync_all().map_err(|e| err(path, e.to_string()))?;
    tmp.persist(path).map_err(|e| err(path, e.to_string()))?;
    Ok(())
}

/// Is this file an artifact (rather than kernel source)?
pub fn looks_like_artifact(bytes: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]);
    head.trim_start().starts_with('{') && head.contains(FORMAT)
}

pub fn load(path: &Path) -> Result<Vec<Kernel>> {
    let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
    parse(path, &text)
}

pub fn parse(path: &Path, text: &str) -> Result<Vec<Kernel>> {
    let head: ArtifactHead<'_> = serde_json::from_str(text).map_err(|e| err(path, format!("not valid JSON: {e}")))?;
    let format = head.format.as_str().unwrap_or("");
    if format != FORMAT {
        return Err(err(path, format!("not a tiga artifact (format `{format}`)")));
    }
    let version = head.version.as_u64().unwrap_or(0);
    if !(u64::from(OLDEST_VERSION)..=u64::from(VERSION)).contains(&version) {
        return Err(err(path, format!("artifact version {version}; this tiga reads versions {OLDEST_VERSION} to {VERSION}")));
    }
    let raw = head.kernels.ok_or_else(|| err(path, "malformed artifact: no `kernels`"))?;
    if let Some(want) = &head.checksum {
        let got = checksum(raw.get());
        if *want != got {
            return Err(err(
                path,
                format!(
                    "checksum mismatch: the file says {want}, its kernels hash to {got}; the artifact was edited or \
                     damaged after `tigac compile` wrote it (compile it again)"
                ),
            ));
        }
    }
    let kernels: Vec<Compiled> = serde_json::from_str(raw.get()).map_err(|e| err(path, format!("malformed artifact: {e}")))?;
    kernels
        .into_iter()
        .map(|c| Kernel::from_compiled(c).map_err(|e| err(path, format!("kernel fails verification: {e}"))))
        .collect()
}
