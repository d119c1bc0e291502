//! `tigac info`: what a `.gfg` file holds, and whether it can be trusted.
//!
//! Prints the manifest (version, counts, index widths, block size, every
//! section with its type, shape, offset, length and CRC-32), the fields by
//! role, then checks every section's checksum (and, in format version 2,
//! every block's), then every invariant of the contents
//! (`GfgFile::check`), one line each: `ok`, `n/a`, or the first violation
//! with its position. Checksums can be right and the contents still break
//! the format (a buggy writer, an edit that recomputed them), so both are
//! checked. Any failure is exit 1, naming the file and section, after the
//! lines were printed.

use std::io::Write as _;
use std::path::Path;

use tiga_storage::{Checked, FieldRole, GfgFile};

use crate::report::Failure;

pub fn info(path: &Path) -> Result<(), Failure> {
    // Opened for inspection: offsets that do not start at 0 or end at
    // num_edges are reported below with the other invariants, not refused.
    let file = GfgFile::open_for_inspection(path).map_err(|e| Failure::new(e.to_string()))?;
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
    let mut first_failure: Option<Failure> = None;
    // A stored order is checked to be a permutation as it is read.
    let order = match file.node_order() {
        Ok(None) => "none: node ids are the input's".to_string(),
        Ok(Some(o)) => format!(
            "{} (node_order maps the input's ids to the file's; {}; runs take and give fields in the input's numbering)",
            o.method.name(),
            if o.src_order().is_some() { "sources and destinations" } else { "destinations only, sources keep their ids" }
        ),
        Err(e) => {
            first_failure = Some(Failure::new(e.to_string()));
            format!("INVALID: {e}")
        }
    };
    text.push_str(&format!("node order: {order}\n"));
    let mut checksum_lines = String::new();
    for s in &m.sections {
        if let Err(e) = file.verify_section(&s.name) {
            checksum_lines.push_str(&format!("  {:<24} FAILED: {e}\n", s.name));
            first_failure.get_or_insert_with(|| Failure::new(format!("verify failed (section `{}`): {e}", s.name)));
        }
    }
    let blocks: usize = m.sections.iter().map(|s| s.blocks.len()).sum();
    let blocks = if m.block_size().is_some() { format!(", {blocks} blocks") } else { String::new() };
    if checksum_lines.is_empty() {
        text.push_str(&format!("checksums: ok ({} sections verified{blocks})\n", m.sections.len()));
    } else {
        text.push_str("checksums:\n");
        text.push_str(&checksum_lines);
    }
    let report = file.check();
    text.push_str("invariants:\n");
    text.push_str(&report.to_string());
    for (inv, c) in &report.results {
        let problem = match c {
            Checked::Violated(v) => format!("invariant violated (section `{}`): {}: {v}", v.section, path.display()),
            Checked::NotChecked(why) if first_failure.is_none() => {
                format!("invariant not checked (section `{}`): `{inv}`: {why}", inv.section())
            }
            _ => continue,
        };
        first_failure.get_or_insert_with(|| Failure::new(problem));
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    match first_failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
