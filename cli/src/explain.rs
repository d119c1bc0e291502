//! `tigac explain`: what the compiler did to a kernel, without running it.
//!
//! The report itself is the facade's `Kernel::explain` (reducer class,
//! fusion, each pass with its remarks, the loop nest), so the CLI, the
//! library and the docs describe a kernel in the same words. This command
//! only finds the kernels, from source or from an artifact.

use std::io::Write as _;
use std::path::Path;

use crate::inputs::load_kernels;
use crate::report::Failure;

pub fn explain(file: &Path, kernel: Option<&str>) -> Result<(), Failure> {
    let kernels = load_kernels(file, kernel)?;
    let text: Vec<String> = kernels.iter().map(|k| k.explain()).collect();
    let mut out = std::io::stdout().lock();
    // A closed pipe (`tigac explain .. | head`) is not an error worth a message.
    let _ = out.write_all(text.join("\n").as_bytes());
    let _ = out.flush();
    Ok(())
}
