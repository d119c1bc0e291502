//! A checked, lowered kernel ([`Kernel`]): what `#[message_passing]` embeds
//! and a `tigac compile` artifact holds, with its ahead-of-time variants
//! ([`AotVariant`]) and the process-wide JIT cache ([`jit`]). The ways of
//! running it (`call`, `bind`, `rows`, `vjp`, `sharded`, `renumber`,
//! `residuals`) are `impl Kernel` blocks in their own modules.

use std::sync::OnceLock;

use tiga_compiler::back::cranelift::{Jit, VariantKey};
use tiga_compiler::ir;
use tiga_compiler::loops::{LoopKernel, Storage};
use tiga_compiler::passes::Compiled;

use tiga_compiler::adjoint::kernel::{Adjoint, ResidualPlan};
use tiga_runtime::abi::EntryFn;
use tiga_runtime::{Backend, DType, FieldType};

use crate::error::{Error, Result};

/// A variant the macro compiled ahead of time: the kernel's loops as Rust,
/// for one dtype and one set of widths.
#[derive(Debug, Clone, Copy)]
pub struct AotVariant {
    pub dtype: DType,
    pub widths: &'static [usize],
    /// How the variant stores fields and outputs, fields first
    /// ([`tiga_compiler::loops::Storage::types`]): empty when every one is
    /// in `dtype`, else one type each (the kernel's declared half types in
    /// an f32 variant).
    pub storage: &'static [FieldType],
    /// The CSR realization's variant (graphs in memory, pages of a file).
    pub entry: tiga_runtime::abi::EntryFn,
    /// The generated-stencil variant, which reads the grid from
    /// `RawArgs::stencil` at run time; `None` for kernels that cannot run
    /// on a generated stencil (edge fields, edge or parameter outputs) and
    /// for kernels with feature loops, which the JIT's stencil variant runs
    /// faster (`rust_source::stencil_refusal` has the measurements).
    pub stencil: Option<tiga_runtime::abi::EntryFn>,
}

/// Whether [`Backend::Auto`] runs a generated stencil with the macro's
/// ahead-of-time stencil variant (when the kernel has one: scalar values
/// per row, no edge fields) rather than the JIT, which bakes the grid into
/// its variant. It does: measured side by side on one thread, four
/// neighbours unless named, the AOT variant took 0.94-0.96x the JIT's time
/// on `Smoothing` (2000x2000 and 500x500), 0.70-0.78x with nine
/// neighbours, 0.59-0.79x on `Top2Sum`; on the benchmark's
/// `stencil-generated` case (two threads) 0.86-0.95x forward and
/// 0.81-1.00x backward at 2000x2000, 0.98-1.03x and 0.92-1.03x at 500x500.
/// And it compiles nothing at run time (the JIT compiles a variant per
/// grid).
pub const STENCIL_AUTO_AOT: bool = true;

/// The process-wide variant cache: one JIT-compiled variant per (kernel,
/// dtype, widths, edge-order realization) on this host's ISA.
pub fn jit() -> &'static Jit {
    static JIT: OnceLock<Jit> = OnceLock::new();
    JIT.get_or_init(Jit::new)
}

/// A checked, lowered kernel ready to run: what `#[message_passing]` embeds
/// and what a `tigac compile` artifact holds.
#[derive(Debug, Clone)]
pub struct Kernel {
    compiled: Compiled,
    loops: LoopKernel,
    /// A content hash of the lowered IR, so two kernels with one name never
    /// share a cached variant.
    pub(crate) hash: String,
    /// Variants compiled ahead of time by the macro (empty for kernel files).
    pub(crate) aot: &'static [AotVariant],
    /// The same for each adjoint stage, in stage order, then (where the
    /// forward keeps residuals) for the saved-residual forward and the
    /// stages of its backwards that the recomputing plan does not have
    /// (see [`Kernel::residuals`]).
    pub(crate) adjoint_aot: &'static [&'static [AotVariant]],
    /// The adjoint stages, built on first use (an error is kept as text).
    pub(crate) adjoint: std::sync::OnceLock<std::result::Result<std::sync::Arc<AdjointPlan>, String>>,
    /// The saved-residual forward and backward, built on first use.
    pub(crate) residuals: std::sync::OnceLock<std::result::Result<Residuals, String>>,
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

impl Kernel {
    /// Build from a pipeline result (verifies it again: artifacts are input).
    pub fn from_compiled(compiled: Compiled) -> Result<Kernel> {
        ir::verify(&compiled.captured)?;
        ir::verify(&compiled.lowered)?;
        let loops = tiga_compiler::loops::schedule(&compiled.lowered)?;
        let hash = format!("{:016x}", fnv1a(&compiled.lowered.to_string()));
        Ok(Kernel {
            compiled,
            loops,
            hash,
            aot: &[],
            adjoint_aot: &[],
            adjoint: std::sync::OnceLock::new(),
            residuals: std::sync::OnceLock::new(),
        })
    }

    /// Capture, check and lower one kernel from a captured IR.
    pub fn from_ir(captured: ir::Kernel) -> Result<Kernel> {
        Kernel::from_compiled(tiga_compiler::passes::run_pipeline(captured)?)
    }

    /// Every kernel of a kernel file's text.
    pub fn all_from_source(source: &str) -> Result<Vec<Kernel>> {
        tiga_compiler::front::parse_kernel_file(source)?.into_iter().map(Kernel::from_ir).collect()
    }

    /// One kernel, by name, from a kernel file's text.
    pub fn from_source(source: &str, name: &str) -> Result<Kernel> {
        let all = tiga_compiler::front::parse_kernel_file(source)?;
        let names: Vec<String> = all.iter().map(|k| k.name.clone()).collect();
        match all.into_iter().find(|k| k.name == name) {
            Some(k) => Kernel::from_ir(k),
            None => Err(Error::UnknownKernel { name: name.to_string(), hint: format!(" (this file has: {})", names.join(", ")) }),
        }
    }

    /// What the macro embeds: the pipeline result as JSON.
    pub fn from_embedded(json: &str) -> Result<Kernel> {
        let compiled: Compiled =
            serde_json::from_str(json).map_err(|e| Error::Artifact { path: "<embedded>".into(), message: e.to_string() })?;
        Kernel::from_compiled(compiled)
    }

    /// What the macro embeds with its ahead-of-time variants.
    pub fn from_embedded_aot(
        json: &str,
        aot: &'static [AotVariant],
        adjoint_aot: &'static [&'static [AotVariant]],
    ) -> Result<Kernel> {
        let mut k = Kernel::from_embedded(json)?;
        k.aot = aot;
        k.adjoint_aot = adjoint_aot;
        Ok(k)
    }

    /// The ahead-of-time variant for this dtype and these widths, with
    /// every field and output in the dtype, if the macro compiled one.
    pub fn aot_variant(&self, dtype: DType, widths: &[usize]) -> Option<&'static AotVariant> {
        self.aot_variant_stored(dtype, widths, &Storage::default())
    }

    /// The ahead-of-time variant for this dtype, these widths and this
    /// storage of fields and outputs, if the macro compiled one (it does for
    /// the kernel's declared half types).
    pub fn aot_variant_stored(&self, dtype: DType, widths: &[usize], storage: &Storage) -> Option<&'static AotVariant> {
        self.aot.iter().find(|v| v.dtype == dtype && v.widths == widths && storage.is(v.storage))
    }

    /// The ahead-of-time variants compiled into this kernel.
    pub fn aot_variants(&self) -> &'static [AotVariant] {
        self.aot
    }

    /// Which back end runs a call with this dtype and these widths on a
    /// CSR (a graph in memory, pages of a file) under [`Backend::Auto`].
    pub fn backend_for(&self, dtype: DType, widths: &[usize]) -> &'static str {
        if self.aot_entry(dtype, widths, false, Backend::Auto).is_some() {
            "rust-aot (rustc/LLVM, macro path)"
        } else {
            "cranelift (JIT)"
        }
    }

    /// Which back end runs a call with this dtype and these widths on a
    /// generated stencil under `backend` ([`Kernel::aot_entry`]).
    pub fn stencil_backend_for(&self, dtype: DType, widths: &[usize], backend: Backend) -> &'static str {
        if self.aot_entry(dtype, widths, true, backend).is_some() {
            "rust-aot (rustc/LLVM, macro path; the grid read at run time)"
        } else {
            "cranelift (JIT; the grid baked into the variant)"
        }
    }

    /// The ahead-of-time entry a call runs under `backend`, or `None` for
    /// the JIT: on a CSR the macro's variant whenever one matches the
    /// dtype and widths (except under [`Backend::Jit`]); on a generated
    /// stencil (`stencil`) its stencil variant under [`Backend::Aot`], and
    /// under [`Backend::Auto`] only where [`STENCIL_AUTO_AOT`] says it is
    /// the faster.
    pub fn aot_entry(&self, dtype: DType, widths: &[usize], stencil: bool, backend: Backend) -> Option<EntryFn> {
        self.aot_entry_stored(dtype, widths, &Storage::default(), stencil, backend)
    }

    /// [`Kernel::aot_entry`] for a call whose fields and outputs are
    /// stored as `storage` says.
    pub fn aot_entry_stored(
        &self,
        dtype: DType,
        widths: &[usize],
        storage: &Storage,
        stencil: bool,
        backend: Backend,
    ) -> Option<EntryFn> {
        let v = self.aot_variant_stored(dtype, widths, storage)?;
        match (backend, stencil) {
            (Backend::Jit | Backend::Reference, _) => None,
            (Backend::Aot | Backend::Auto, false) => Some(v.entry),
            (Backend::Aot, true) => v.stencil,
            (Backend::Auto, true) => v.stencil.filter(|_| STENCIL_AUTO_AOT),
        }
    }

    pub fn name(&self) -> &str {
        &self.compiled.captured.name
    }
    /// The kernel as the user wrote it (what the reference interpreter runs).
    pub fn captured(&self) -> &ir::Kernel {
        &self.compiled.captured
    }
    /// The kernel after every pass.
    pub fn lowered(&self) -> &ir::Kernel {
        &self.compiled.lowered
    }
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }
    pub fn loop_kernel(&self) -> &LoopKernel {
        &self.loops
    }
    pub fn fields(&self) -> &[ir::FieldDecl] {
        &self.compiled.captured.fields
    }
    pub fn output_names(&self) -> Vec<&str> {
        self.compiled.captured.outputs.iter().map(|o| o.name.as_str()).collect()
    }

    pub(crate) fn variant_key(&self, dtype: ir::DType, widths: Vec<usize>, edge_ids: bool) -> VariantKey {
        VariantKey {
            kernel: format!("{}#{}", self.name(), self.hash),
            dtype,
            widths,
            edge_ids,
            stencil: None,
            storage: Default::default(),
        }
    }

    /// Compile (or fetch from the cache) the variant for these widths.
    /// Returns the variant and whether it was a cache hit.
    pub fn variant(
        &self,
        dtype: DType,
        widths: &[usize],
        edge_ids: bool,
    ) -> Result<(std::sync::Arc<tiga_compiler::back::cranelift::Variant>, bool)> {
        let key = self.variant_key(dtype, widths.to_vec(), edge_ids);
        Ok(jit().variant(&self.loops, &key)?)
    }
}

/// The adjoint of a kernel, compiled: its stages as runnable kernels.
#[derive(Debug)]
pub struct AdjointPlan {
    pub adjoint: Adjoint,
    pub stages: Vec<Kernel>,
}

/// The saved-residual forward and the stages of the backward that reads
/// its residuals, compiled.
#[derive(Debug)]
pub struct ResidualStages {
    pub plan: ResidualPlan,
    pub forward: Kernel,
    pub stages: Vec<Kernel>,
    /// The stages of the plan's in-memory variant
    /// ([`ResidualPlan::in_memory`]), where it has one.
    pub in_memory: Option<Vec<Kernel>>,
}

/// Whether a kernel's forward can keep residuals.
#[derive(Debug, Clone)]
pub enum Residuals {
    Kept(std::sync::Arc<ResidualStages>),
    /// Its backward always recomputes; why.
    Recomputed(String),
}
