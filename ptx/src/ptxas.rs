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

/// What `ptxas -v` reports for one entry or function: registers per
/// thread and local-memory traffic (a kernel that spills pays for it in
/// every row it runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub function: String,
    pub registers: u32,
    pub stack_frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
}

/// Assemble `file` for `sm_<sm>` with `-v` and return each function's
/// [`Resources`], in the order ptxas reports them.
pub fn resources(ptxas: &Path, file: &Path, sm: u32) -> Result<Vec<Resources>, String> {
    let out = Command::new(ptxas)
        .arg("-v")
        .arg(format!("-arch=sm_{sm}"))
        .arg(file)
        .args(["-o", "/dev/null"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(text);
    }
    parse_resources(&text)
}

/// The first number before `word` in `line` (`"0 bytes spill stores"`).
fn number_before(line: &str, word: &str) -> Option<u32> {
    let at = line.find(word)?;
    line[..at].split(|c: char| !c.is_ascii_digit()).rev().find(|s| !s.is_empty())?.parse().ok()
}

/// Parses `ptxas -v` diagnostics (see [`resources`]).
pub fn parse_resources(text: &str) -> Result<Vec<Resources>, String> {
    let mut out: Vec<Resources> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            out.push(Resources {
                function: rest.trim().to_string(),
                registers: 0,
                stack_frame_bytes: 0,
                spill_store_bytes: 0,
                spill_load_bytes: 0,
            });
        } else if line.contains("bytes stack frame") {
            let r = out.last_mut().ok_or_else(|| format!("ptxas -v: `{line}` before any function"))?;
            r.stack_frame_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
        } else if line.contains("Used ") && line.contains(" registers") {
            let r = out.last_mut().ok_or_else(|| format!("ptxas -v: `{line}` before any function"))?;
            r.registers = number_before(line, " registers").ok_or_else(|| format!("ptxas -v: no register count in `{line}`"))?;
        }
    }
    Ok(out)
}

/// `ptxas --version`'s last line (`Build cuda_13.5...`), or why not.
pub fn version(ptxas: &Path) -> Result<String, String> {
    let out = Command::new(ptxas).arg("--version").output().map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().last().map(|l| l.trim().to_string()).ok_or_else(|| "ptxas --version printed nothing".into())
}
