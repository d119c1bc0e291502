//! `tigac info`: what a `.gfg` file holds, and whether its bytes are intact.
//!
//! Prints the manifest (version, counts, index widths, every section with
//! its type, shape, offset, length and CRC-32), the fields by role, then
//! checks every section's checksum (`GfgFile::verify`). A failed check is a
//! failure naming the section (exit 1), after the manifest was printed.

use std::io::Write as _;
use std::path::Path;

use tiga_runtime::storage::{FieldRole, GfgFile};

use crate::report::Failure;

pub fn info(path: &Path) -> Result<(), Failure> {
    let file = GfgFile::open(path).map_err(|e| Failure::new(e.to_string()))?;
    let m = file.manifest();
    let mut text = format!("file: {}\n", path.display());
    text.push_str(&m.to_string());
    let fields = file.fields();
    if fields.is_empty() {
        text.push_str("fields: none\n");
    } else {
        text.push_str("fields:\n");
        for role in [FieldRole::Src, FieldRole::Dst, FieldRole::Edge] {
            for f in fields.iter().filter(|f| f.role == role) {
                text.push_str(&format!("  {:<4} {:<20} {:<4} {:?}\n", role.name(), f.name, f.dtype.name(), f.shape));
            }
        }
    }
    text.push_str(&format!(
        "edge order: {}\n",
        if file.has_edge_ids() {
            "edge_ids maps CSR positions to the input's edge order"
        } else {
            "CSR order is the input's edge order (no edge_ids)"
        }
    ));
    text.push_str(&format!("transpose: {}\n", if file.has_transpose() { "stored" } else { "not stored" }));
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    file.verify().map_err(|e| {
        let section = e.section().map(|s| format!(" (section `{s}`)")).unwrap_or_default();
        Failure::new(format!("verify failed{section}: {e}"))
    })?;
    let _ = writeln!(out, "checksums: ok ({} sections verified)", m.sections.len());
    let _ = out.flush();
    Ok(())
}
