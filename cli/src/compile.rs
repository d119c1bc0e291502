//! `tigac compile`: a kernel file to an artifact, plus optional text dumps.
//!
//! The artifact holds each kernel's checked, lowered IR (see
//! `tiga::artifact`), so `tigac run` and `tigac explain` work where the
//! source is not shipped, and a front-end or pass error surfaces at compile
//! time rather than at the first run. Machine code is not stored: variants
//! depend on the widths and dtype of a call and on the host ISA, so they are
//! JIT-compiled when run. `--emit clif,asm` therefore shows one
//! representative variant (f32, every width 16), labelled as such.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use tiga::compiler::back::cranelift::{compile as compile_variant, VariantKey};
use tiga::compiler::ir::{DType, Role};
use tiga::Kernel;

use crate::inputs::load_kernels;
use crate::report::Failure;

/// The width every vector symbol gets in `--emit clif,asm`.
pub const EMIT_WIDTH: usize = 16;

/// A text stage `--emit` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// The IR after each pass.
    Ir,
    /// The scheduled loop nest.
    Loop,
    /// Cranelift IR of one variant (f32, widths 16).
    Clif,
    /// Machine code listing of the same variant.
    Asm,
    /// PTX of every kernel and adjoint stage (with `--target ptx`).
    Ptx,
}

impl Stage {
    fn suffix(self) -> &'static str {
        match self {
            Stage::Ir => "ir",
            Stage::Loop => "loop",
            Stage::Clif => "clif",
            Stage::Asm => "asm",
            Stage::Ptx => "ptx",
        }
    }
}

/// `<stem>.tiga` in the current directory.
fn default_out(file: &Path) -> PathBuf {
    let stem = file.file_stem().map(|s| s.to_os_string()).unwrap_or_else(|| "kernels".into());
    let mut name = stem;
    name.push(".tiga");
    PathBuf::from(name)
}

pub fn compile(file: &Path, kernel: Option<&str>, emit: &[Stage], out: Option<&Path>, ptx: Option<u32>) -> Result<(), Failure> {
    let kernels = load_kernels(file, kernel)?;
    // Every PTX module first: nothing is written when one does not lower.
    let ptx_files = match ptx {
        Some(sm) => ptx_modules(&kernels, sm)?,
        None => Vec::new(),
    };
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| default_out(file));
    let target = crate::output_paths::output_path("-o", &out, &[file])?;
    let refs: Vec<&Kernel> = kernels.iter().collect();
    tiga::artifact::save(&target, &refs).map_err(|e| Failure::new(e.to_string()))?;
    let names: Vec<&str> = kernels.iter().map(|k| k.name()).collect();
    let mut written = vec![format!("wrote {} ({})", out.display(), names.join(", "))];

    let mut stages: Vec<Stage> = Vec::new();
    for s in emit {
        if !stages.contains(s) {
            stages.push(*s);
        }
    }
    let stem = out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    for (name, text) in &ptx_files {
        let path = out.with_file_name(format!("{stem}.{name}.ptx"));
        let path = crate::output_paths::output_path("--emit", &path, &[file])?;
        write_atomic(&path, text.as_bytes())?;
        written.push(format!("wrote {}", path.display()));
    }
    for k in &kernels {
        for &stage in stages.iter().filter(|s| **s != Stage::Ptx) {
            let text = stage_text(k, stage)?;
            let path = out.with_file_name(format!("{stem}.{}.{}.txt", k.name(), stage.suffix()));
            let path = crate::output_paths::output_path("--emit", &path, &[file])?;
            write_atomic(&path, text.as_bytes())?;
            written.push(format!("wrote {}", path.display()));
        }
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", written.join("\n"));
    Ok(())
}

/// The adjoint plan of every kernel.
pub fn adjoint_plans(kernels: &[Kernel]) -> Result<Vec<std::sync::Arc<tiga::AdjointPlan>>, Failure> {
    kernels
        .iter()
        .map(|k| k.adjoint_plan().map_err(|e| Failure::new(format!("kernel `{}`: its adjoint: {e}", k.name()))))
        .collect()
}

/// Each kernel, then each of its adjoint stages (named
/// `<Kernel>.vjp.<stage>`): what the PTX back end lowers one module for.
pub fn ptx_units<'a>(kernels: &'a [Kernel], plans: &'a [std::sync::Arc<tiga::AdjointPlan>]) -> Vec<(String, &'a Kernel)> {
    let mut units = Vec::new();
    for (k, plan) in kernels.iter().zip(plans) {
        units.push((k.name().to_string(), k));
        for stage in &plan.stages {
            units.push((stage.name().to_string(), stage));
        }
    }
    units
}

/// The PTX (f32, every width [`EMIT_WIDTH`], `sm_<sm>`) of each kernel
/// and each of its adjoint stages, named `<Kernel>` and
/// `<Kernel>.vjp.<stage>`, each checked by the PTX validator; an error
/// naming every one the back end does not lower.
fn ptx_modules(kernels: &[Kernel], sm: u32) -> Result<Vec<(String, String)>, Failure> {
    use tiga::compiler::back::ptx::lower_kernel;
    let plans = adjoint_plans(kernels)?;
    let units = ptx_units(kernels, &plans);
    let mut files = Vec::new();
    let mut refused = Vec::new();
    for (name, k) in units {
        let lk = k.loop_kernel();
        let widths = vec![EMIT_WIDTH; lk.widths.len()];
        match lower_kernel(lk, DType::F32, &widths, sm) {
            Ok(p) => {
                tiga_ptx::validate(&p.module)
                    .map_err(|e| Failure::new(format!("internal error: the PTX of `{name}` does not validate: {e}")))?;
                let widths: Vec<String> = lk.widths.iter().map(|w| format!("{} = {EMIT_WIDTH}", w.name)).collect();
                let text = format!(
                    "// tiga: `{name}`, f32, widths {}; {} thread(s) per destination row, {} feature(s) per load, \
                     blocks of {}\n// (real runs lower one module per call's dtype and widths)\n{}",
                    if widths.is_empty() { "none (scalar kernel)".to_string() } else { widths.join(", ") },
                    p.threads_per_row,
                    p.vector,
                    p.block,
                    p.module.print()
                );
                files.push((name, text));
            }
            Err(e) => refused.push(format!("`{name}`: {e}")),
        }
    }
    if !refused.is_empty() {
        return Err(Failure::new(format!(
            "--target ptx: nothing written; the PTX back end does not lower:\n  {}\n(pick others with --kernel)",
            refused.join("\n  ")
        )));
    }
    Ok(files)
}

fn stage_text(k: &Kernel, stage: Stage) -> Result<String, Failure> {
    match stage {
        Stage::Ir => {
            let mut s = format!(";; kernel {}: IR after each pass, in pipeline order\n", k.name());
            for p in &k.compiled().passes {
                s.push_str(&format!("\n;; after {}\n", p.name));
                s.push_str(&p.ir_after);
                if !p.ir_after.ends_with('\n') {
                    s.push('\n');
                }
            }
            Ok(s)
        }
        Stage::Loop => Ok(format!(";; kernel {}: scheduled loop nest\n{}\n", k.name(), k.loop_kernel())),
        Stage::Ptx => Err(Failure::new("PTX is written by --target ptx")),
        Stage::Clif | Stage::Asm => {
            let lk = k.loop_kernel();
            let edge_ids = lk.reads_role(Role::Edge);
            let key = VariantKey {
                kernel: format!("{}#emit", k.name()),
                dtype: DType::F32,
                widths: vec![EMIT_WIDTH; lk.widths.len()],
                edge_ids,
                stencil: None,
                storage: Default::default(),
            };
            let v = compile_variant(lk, &key)
                .map_err(|e| Failure::new(format!("kernel `{}`: cannot compile the f32 variant: {e}", k.name())))?;
            let widths: Vec<String> = lk.widths.iter().map(|w| format!("{} = {EMIT_WIDTH}", w.name)).collect();
            let isa = tiga::compiler::back::cranelift::host_isa_name().unwrap_or_else(|e| e.to_string());
            let header = format!(
                ";; kernel {}: {} of the variant dtype f32, widths {}, edge order {}; host ISA {isa}\n\
                 ;; (real runs compile one variant per call's dtype and widths)\n",
                k.name(),
                if stage == Stage::Clif { "Cranelift IR (before optimization)" } else { "machine code (VCode listing)" },
                if widths.is_empty() { "none (scalar kernel)".to_string() } else { widths.join(", ") },
                if edge_ids { "permuted (edge fields read through edge_ids)" } else { "identity" },
            );
            let body = match stage {
                Stage::Clif => v.clif.clone(),
                _ => v.asm.clone().unwrap_or_else(|| ";; no machine code listing: Cranelift did not produce one\n".into()),
            };
            Ok(header + &body)
        }
    }
}

/// Write a file so that readers see the old content or the new, never a
/// torn one: a temp file in the same folder, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let fail = |e: &dyn std::fmt::Display| Failure::new(format!("cannot write {}: {e}", path.display()));
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(&e))?;
    tmp.write_all(bytes).map_err(|e| fail(&e))?;
    // Temp files are created owner-only; give the result the usual mode.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    tmp.as_file().sync_all().map_err(|e| fail(&e))?;
    tmp.persist(path).map_err(|e| fail(&e.error))?;
    Ok(())
}
