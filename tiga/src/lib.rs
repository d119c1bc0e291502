//! tiga: message-passing graph kernels, compiled.
//!
//! Write a kernel once with [`message_passing`] (or in a kernel file for
//! `tigac`); tiga captures it into an IR at build time, lowers it through
//! named passes, JIT-compiles one variant per (kernel, dtype, widths, ISA)
//! with Cranelift and runs it over a [`Graph`] in parallel.
//!
//! ```ignore
//! use tiga::{message_passing, Graph, Inputs};
//!
//! #[message_passing(reduce = sum)]
//! pub mod Smoothing {
//!     use tiga::lang::*;
//!     pub struct Src { pub x: f32 }
//!     pub fn edge(src: &Src) -> f32 { src.x }
//!     pub fn node(agg: f32) -> f32 { 0.25 * agg }
//! }
//!
//! let g = Graph::stencil_2d_4(1000, 1000)?;
//! let x = vec![1.0f32; g.num_src()];
//! let out = Smoothing::kernel().run(&g, &Inputs::new().src("x", &x))?;
//! ```
//!
//! This crate is the seam between the compiler (which knows nothing of
//! graphs in memory) and the runtime (which knows nothing of Cranelift): it
//! binds a call's fields to a kernel's declared fields, picks the variant,
//! and hands the JIT-compiled code the runtime's arrays; on a GPU (the
//! schedule's [`Device`]), it lowers the kernel to PTX and hands the
//! runtime's device layer the module and the arrays (`gpu.rs`).

pub mod artifact;
mod call;
#[cfg(feature = "candle")]
pub mod candle;
mod explain;
mod fields;
mod gpu;
pub mod lang;
pub mod memory;
pub mod offload;
mod paged;
mod renumber;
mod residuals;
mod sharded;
mod vjp;
mod winner_scatter;

use std::sync::OnceLock;

pub use tiga_macros::message_passing;
pub use tiga_runtime::{
    add_self_loops, from_edge_index, from_edge_index_sized, gcn_norm, in_degree, out_degree, petgraph, Batch, BatchError,
    GcnNormError, GcnNormOptions,
};
pub use tiga_runtime::{
    balanced_row_chunks, for_each_row_chunk, read_edge_list, read_edge_list_with, read_matrix_market, read_npy, write_npy,
    Buffer, DType, Data, EdgeListOptions, FieldType, Graph, GraphError, NpyError, Tensor, TensorView,
};
/// The half-precision element types of tensors (the `half` crate's): a
/// field given as `Tensor::from_bf16(..)` is stored at half width.
pub mod half {
    pub use tiga_runtime::{bf16, f16};
}

pub use fields::{Gradients, Input, Inputs, Outputs, Wrt};
pub use tiga_runtime::abi::{EntryFn, RawArgs, RawStencil, Stencil2d};

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
pub use offload::{with_ram_budget, with_schedule, AnyGraph};
pub use residuals::{ResidualStages, Residuals, ScopedTape, Tape};
pub use tiga_compiler as compiler;
pub use tiga_compiler::ir::Role;
pub use tiga_runtime as runtime;
pub use tiga_runtime::comm::{CommError, Communicator, InProcess};
pub use tiga_runtime::exec::Side;
pub use tiga_runtime::partition::{owned_range, Partition};
pub use tiga_runtime::realization::{self, GraphRows, PagedRows, Realization, Rows};
pub use tiga_runtime::shard::{PartitionChoice, ShardOptions, Sharded};
pub use tiga_runtime::{
    Backend, Device, DeviceTimer, DeviceTimes, Order, Progress, Renumber, Renumbered, RenumberedGraph, Schedule,
};
pub use vjp::AdjointPlan;

use tiga_compiler::back::cranelift::{Jit, VariantKey};
use tiga_compiler::ir;
use tiga_compiler::loops::{LoopKernel, Storage};
use tiga_compiler::passes::Compiled;

/// Everything that can go wrong between a kernel's text and its outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Front(FrontDiagnostic),
    #[error(transparent)]
    Pass(#[from] tiga_compiler::passes::PassError),
    #[error(transparent)]
    LoopSchedule(#[from] tiga_compiler::loops::ScheduleError),
    #[error(transparent)]
    Back(#[from] tiga_compiler::back::cranelift::BackError),
    #[error(transparent)]
    Bind(#[from] tiga_compiler::bind::BindError),
    #[error(transparent)]
    Verify(#[from] ir::VerifyError),
    #[error(transparent)]
    Interp(#[from] tiga_compiler::interp::InterpError),
    /// What a call asks of this kernel or realization is not supported;
    /// the message says what would do.
    #[error("{0}")]
    Unsupported(String),
    /// A cotangent that does not fit the kernel's outputs.
    #[error("{0}")]
    Cotangent(String),
    /// A tensor scope refused (a tier over its budget, a name unknown or
    /// taken).
    #[error("{0}")]
    Scope(String),
    #[error("offloading a graph over the RAM budget: {source}")]
    Offload {
        #[source]
        source: tiga_runtime::GfgError,
    },
    /// The adjoint of this kernel could not be built (generate-adjoint, or
    /// one of its stages' passes, refused it).
    #[error("{0}")]
    Adjoint(String),
    /// A sharded call's exchange or plan failed (a peer gone, a message
    /// malformed, ranks that disagree).
    #[error("sharded: {0}")]
    Shard(tiga_runtime::shard::ShardError),
    /// A broken promise inside tiga (a bug, never the input's fault).
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Tensor(#[from] tiga_runtime::TensorError),
    #[error(transparent)]
    Gfg(#[from] tiga_runtime::GfgError),
    #[error(transparent)]
    TensorStore(#[from] tiga_runtime::TensorStoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact {path}: {message}")]
    Artifact { path: String, message: String },
    #[error(transparent)]
    Graph(#[from] tiga_runtime::GraphError),
    /// A renumbering the schedule asked for that this graph cannot take.
    #[error(transparent)]
    Renumber(#[from] tiga_runtime::RenumberError),
    /// A GPU (or the simulator) refused: no driver, no such device, a
    /// copy or launch that failed, a budget too small.
    #[error(transparent)]
    Gpu(#[from] tiga_runtime::gpu::GpuError),
    /// The PTX back end does not lower this kernel (yet): the call is
    /// refused rather than run on the CPU behind the caller's back.
    #[error("kernel `{kernel}` cannot run on the GPU: {source}")]
    GpuLowering {
        kernel: String,
        #[source]
        source: tiga_compiler::back::ptx::PtxError,
    },
    /// The rows could not run: memory for outputs, a page of a file, a
    /// worker.
    #[error(transparent)]
    Exec(#[from] tiga_runtime::exec::ExecError),
    /// A schedule setting (from the environment) that does not parse.
    #[error(transparent)]
    Schedule(#[from] tiga_runtime::ScheduleError),
    #[error("no kernel named `{name}`{hint}")]
    UnknownKernel { name: String, hint: String },
    #[error("no gradient for {role} field `{name}`")]
    NoGradient { role: &'static str, name: String },
    #[error("cannot add tensors of different dtypes or shapes: {left} and {right}")]
    TensorMismatch { left: String, right: String },
    #[error("no output `{name}` (the outputs: {outputs})")]
    NoOutput { name: String, outputs: String },
    #[error("output `{name}` is {dtype}, not {wanted}")]
    OutputDtype { name: String, wanted: DType, dtype: DType },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A front-end error in a kernel's source: where and what. (The compiler's
/// own error also carries a proc-macro span, which cannot cross threads.)
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct FrontDiagnostic {
    pub message: String,
    /// 1-based line.
    pub line: u32,
    /// 0-based column.
    pub col: u32,
}

impl From<tiga_compiler::front::FrontError> for Error {
    fn from(e: tiga_compiler::front::FrontError) -> Error {
        Error::Front(FrontDiagnostic { message: e.message, line: e.line, col: e.col })
    }
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
    aot: &'static [AotVariant],
    /// The same for each adjoint stage, in stage order, then (where the
    /// forward keeps residuals) for the saved-residual forward and the
    /// stages of its backwards that the recomputing plan does not have
    /// (see [`Kernel::residuals`]).
    adjoint_aot: &'static [&'static [AotVariant]],
    /// The adjoint stages, built on first use (an error is kept as text).
    adjoint: std::sync::OnceLock<std::result::Result<std::sync::Arc<vjp::AdjointPlan>, String>>,
    /// The saved-residual forward and backward, built on first use.
    residuals: std::sync::OnceLock<std::result::Result<residuals::Residuals, String>>,
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

    /// A human-readable account of what the compiler did.
    pub fn explain(&self) -> String {
        explain::explain(self)
    }
}
