//! Finding NVIDIA's `ptxas`, for tests and tools that want PTX assembled.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `ptxas` is, if anywhere. Looked for, in order:
///
/// 1. `$TIGA_PTXAS`, if it names an existing file;
/// 2. `ptxas` in a directory of `$PATH`;
/// 3. the `nvidia-cuda-nvcc` wheel (`pip install nvidia-cuda-nvcc`):
///    `<site-packages>/nvidia/{cu13,cu12,cuda_nvcc}/bin/ptxas`, where
///    `<site-packages>` is asked of `python3` (`import nvidia`).
///
/// `None` when none of these exists; this crate never needs `ptxas` itself.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TIGA_PTXAS").map(PathBuf::from) {
        if p.is_file() {
            return Some(p);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(p) = std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file()) {
            return Some(p);
        }
    }
    let out =
        Command::new("python3").args(["-c", "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let site = String::from_utf8(out.stdout).ok()?;
    let site = Path::new(site.trim());
    ["cu13", "cu12", "cuda_nvcc"].iter().map(|d| site.join("nvidia").join(d).join("bin").join("ptxas")).find(|p| p.is_file())
}

/// Assemble the PTX file at `file` with `ptxas` for `sm_<sm>`, discarding
/// the output: `Err` carries ptxas's diagnostics (or why it did not run).
pub fn assemble(ptxas: &Path, file: &Path, sm: u32) -> Result<(), String> {
    let out = Command::new(ptxas)
        .arg(format!("-arch=sm_{sm}"))
        .arg(file)
        .args(["-o", "/dev/null"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
