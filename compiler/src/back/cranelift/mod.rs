//! The Cranelift back end: a JIT compiling one loop kernel variant into one
//! native function for the host CPU.
//!
//! # Variants and the cache
//!
//! A [`VariantKey`] fixes what the loop IR leaves open: the dtype (f32 or
//! f64; every field, output and arithmetic operation uses it), the value of
//! each width symbol (feature loops get constant trip counts, so Cranelift
//! sees `icmp_imm` bounds) and whether edge fields are reached through an
//! `edge_ids` indirection. [`Jit`] caches compiled [`Variant`]s by key. The
//! code targets the ISA of the running process (`cranelift_native`, see
//! [`host_isa_name`]), so a cache and its keys are only meaningful within
//! one process.
//!
//! # ABI
//!
//! The compiled function is a [`tiga_abi::EntryFn`] over a
//! [`tiga_abi::RawArgs`] (the crate doc gives the loop skeleton and the
//! layout of every array); the argument block's fields are loaded at the
//! offsets that crate computes from the struct. Per-row scratch buffers
//! live in the function's stack frame (at most [`MAX_SCRATCH_BYTES`] in
//! total).
//!
//! # Translation
//!
//! How the variant runs (SIMD width, each feature loop's form, feature
//! blocks, accumulators in registers, edges per iteration, tiles, touches
//! ahead) is decided first, as a [`plan::CodegenPlan`] ([`plan::plan_codegen`]),
//! which the variant keeps for `explain`. One `Translator` (module
//! `translate`) then follows it and owns the `FunctionBuilder`: loop IR
//! variables become Cranelift `Variable`s (the dtype's float type, or `i8`
//! for booleans), every loop (rows, edges, features) is a header block with
//! the counter as block parameter (`brif i < end, body, exit`), and every
//! address is 64-bit integer arithmetic on the base pointers loaded once in
//! the entry block. `exp`, `ln` and `tanh` call Rust functions registered as
//! JIT symbols (module `math`); everything else is inline. Min and max
//! follow Rust's `f64::min`/`max` (a NaN operand yields the other one),
//! `powi` multiplies as compiler-rt's `__powidf2` does, and booleans are
//! `i8` 0/1.

mod math;
pub mod plan;
mod prefetch;
mod translate;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use cranelift_codegen::ir::{types, AbiParam, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::CodegenError;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module, ModuleError, ModuleReloc};

use crate::ir::DType;
use crate::loops::{LoopKernel, LoopVerifyError, Storage};

use tiga_abi::EntryFn;
pub use tiga_abi::RawArgs;

/// Everything that selects one compiled function for a loop kernel.
///
/// Keys are only meaningful within one process: the code is compiled for
/// the host ISA ([`host_isa_name`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VariantKey {
    /// The kernel's name and a content hash, provided by the caller: two
    /// different loop kernels must never share this string.
    pub kernel: String,
    pub dtype: DType,
    /// The value of each width symbol, indexed by `WidthId`.
    pub widths: Vec<usize>,
    /// Whether edge fields are read through `RawArgs::edge_ids`.
    pub edge_ids: bool,
    /// `Some`: the generated-stencil realization (neighbours computed from
    /// the node index, no CSR read); `None`: CSR rows.
    pub stencil: Option<tiga_abi::Stencil2d>,
    /// Which fields and outputs are stored at half width (empty: all in
    /// `dtype`).
    pub storage: Storage,
}

/// The cap on the per-row scratch of one variant (stack memory).
pub const MAX_SCRATCH_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BackError {
    #[error("variant of `{kernel}` gives {got} widths, the kernel declares {expected}")]
    Widths { kernel: String, expected: usize, got: usize },
    #[error(
        "kernel `{kernel}` needs {bytes} bytes of per-row scratch; the Cranelift back end keeps \
         scratch on the stack and caps it at 1 MiB ({MAX_SCRATCH_BYTES} bytes)"
    )]
    ScratchTooLarge { kernel: String, bytes: u64 },
    /// The loop kernel breaks a rule of the loop IR's verifier (a
    /// hand-built or corrupted kernel; the scheduler's output never does).
    #[error("malformed {source}")]
    Malformed {
        #[from]
        source: LoopVerifyError,
    },
    /// A kernel that passed the verifier that the translator still could not
    /// lower: a bug in tiga, reported rather than panicking.
    #[error("internal error: the Cranelift back end could not lower verified loop kernel `{kernel}`: {message}")]
    Internal { kernel: String, message: String },
    /// Half-width storage this variant cannot have: in an f64 variant, or
    /// not one type per field and output.
    #[error("variant of `{kernel}`: {message}")]
    Storage { kernel: String, message: String },
    #[error("the host ISA is not supported by Cranelift: {0}")]
    Isa(String),
    #[error("cranelift codegen error in `{kernel}`: {message}")]
    Codegen { kernel: String, message: String },
    #[error("cranelift module error in `{kernel}`: {message}")]
    Module { kernel: String, message: String },
}

/// Owns a `JITModule` and frees its code memory when dropped.
struct ModuleGuard(Option<JITModule>);

impl Drop for ModuleGuard {
    fn drop(&mut self) {
        if let Some(m) = self.0.take() {
            // SAFETY: the only pointer into this module's code is the entry
            // function held beside this guard (in `Variant`, or nowhere when
            // compilation failed), and it is dropped together with it.
            unsafe { m.free_memory() };
        }
    }
}

/// One compiled variant. The code is freed when the variant is dropped.
pub struct Variant {
    pub key: VariantKey,
    /// Wall time of translation, compilation and linking.
    pub compile_ms: f64,
    /// The function as built, before Cranelift's optimizations.
    pub clif: String,
    /// Cranelift's VCode listing of the final machine code (the
    /// disassembly-like text; no capstone).
    pub asm: Option<String>,
    /// What code generation chose: SIMD width, accumulators in registers,
    /// feature blocks (shown by `explain`).
    pub notes: Vec<String>,
    /// Every code-generation choice, made before translation (`explain`
    /// prints it).
    pub plan: plan::CodegenPlan,
    func: EntryFn,
    // Field order matters only for clarity: `func` points into `_module`.
    _module: ModuleGuard,
}

// SAFETY: after `finalize_definitions` the module's code and data are never
// written again; the variant only hands out calls to that immutable code, and
// the module is touched again only by `Drop`, which needs `&mut self`.
unsafe impl Send for Variant {}
// SAFETY: as above; `&Variant` allows nothing but calling the immutable code.
unsafe impl Sync for Variant {}

impl std::fmt::Debug for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variant").field("key", &self.key).field("compile_ms", &self.compile_ms).finish_non_exhaustive()
    }
}

impl Variant {
    /// Run the kernel for destination rows `rows`.
    ///
    /// # Safety
    ///
    /// `args` must describe arrays laid out as in the module doc, in this
    /// variant's dtype and widths: `offsets` has at least `rows.end + 1`
    /// entries and is non-decreasing on them; every `cols[p]` (and
    /// `edge_ids[p]` when the variant uses them) for `p` in those rows'
    /// ranges indexes inside its source (edge) fields; the output rows in
    /// `rows` are writable and not accessed concurrently by anyone else.
    pub unsafe fn run(&self, args: &RawArgs, rows: Range<u64>) {
        // SAFETY: forwarded to the caller (see above).
        unsafe { (self.func)(args, rows.start, rows.end) }
    }

    /// The entry point; valid only while `self` is alive.
    pub fn entry(&self) -> EntryFn {
        self.func
    }
}

/// Cache statistics of a [`Jit`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Every compiled variant with its compile time in milliseconds.
    pub variants: Vec<(VariantKey, f64)>,
}

#[derive(Default)]
struct CacheInner {
    map: HashMap<VariantKey, Arc<Variant>>,
    hits: u64,
    misses: u64,
}

/// A per-process cache of compiled variants.
#[derive(Default)]
pub struct Jit {
    inner: Mutex<CacheInner>,
}

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jit").field("stats", &self.stats()).finish()
    }
}

impl Jit {
    pub fn new() -> Jit {
        Jit::default()
    }

    /// The compiled variant for `key`, compiling `k` on a miss; the flag
    /// says whether it was a cache hit. `key` must identify `k` (its
    /// `kernel` string carries the content hash): the cache does not look
    /// at `k` on a hit.
    pub fn variant(&self, k: &LoopKernel, key: &VariantKey) -> Result<(Arc<Variant>, bool), BackError> {
        {
            let mut g = self.lock();
            if let Some(v) = g.map.get(key).cloned() {
                g.hits += 1;
                return Ok((v, true));
            }
        }
        // Compile outside the lock, so hits on other keys are not blocked.
        let v = Arc::new(compile(k, key)?);
        let mut g = self.lock();
        g.misses += 1;
        // Another thread may have compiled the same key meanwhile: keep
        // the first, so every caller shares one variant.
        let v = g.map.entry(key.clone()).or_insert(v).clone();
        Ok((v, false))
    }

    /// The variant for `key` if it is compiled (not counted as a hit).
    pub fn get(&self, key: &VariantKey) -> Option<Arc<Variant>> {
        self.lock().map.get(key).cloned()
    }

    pub fn stats(&self) -> CacheStats {
        let g = self.lock();
        let mut variants: Vec<(VariantKey, f64)> = g.map.iter().map(|(k, v)| (k.clone(), v.compile_ms)).collect();
        variants.sort_by(|a, b| a.0.kernel.cmp(&b.0.kernel).then(a.1.total_cmp(&b.1)));
        CacheStats { hits: g.hits, misses: g.misses, variants }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A panic while holding the lock cannot leave the map inconsistent
        // (each update is one insert), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The host ISA, built once per process.
fn host_isa() -> Result<OwnedTargetIsa, BackError> {
    static ISA: OnceLock<Result<OwnedTargetIsa, String>> = OnceLock::new();
    ISA.get_or_init(|| {
        let mut flags = settings::builder();
        for (name, value) in [("opt_level", "speed"), ("use_colocated_libcalls", "false"), ("is_pic", "false")] {
            flags.set(name, value).map_err(|e| format!("setting {name}={value}: {e}"))?;
        }
        let builder = cranelift_native::builder().map_err(|e| e.to_string())?;
        builder.finish(settings::Flags::new(flags)).map_err(|e| e.to_string())
    })
    .clone()
    .map_err(BackError::Isa)
}

/// The name of the ISA variants are compiled for, e.g. `x86_64 (x64)`.
pub fn host_isa_name() -> Result<String, BackError> {
    let isa = host_isa()?;
    Ok(format!("{} ({})", isa.triple(), isa.name()))
}

/// Compile one variant of `k` (no caching; see [`Jit`]).
pub fn compile(k: &LoopKernel, key: &VariantKey) -> Result<Variant, BackError> {
    let start = Instant::now();
    let kernel = || k.name.clone();
    if key.widths.len() != k.widths.len() {
        return Err(BackError::Widths { kernel: kernel(), expected: k.widths.len(), got: key.widths.len() });
    }
    key.storage.check(k, key.dtype).map_err(|message| BackError::Storage { kernel: kernel(), message })?;
    crate::loops::verify(k)?;
    let scratch = translate::scratch_sizes(k, key).map_err(|message| BackError::Internal { kernel: kernel(), message })?;
    let bytes = scratch.iter().try_fold(0u64, |a, &b| a.checked_add(b)).unwrap_or(u64::MAX);
    if bytes > MAX_SCRATCH_BYTES {
        return Err(BackError::ScratchTooLarge { kernel: kernel(), bytes });
    }
    let isa = host_isa()?;
    if isa.pointer_type() != types::I64 {
        return Err(BackError::Isa(format!("{}: only 64-bit targets are supported", isa.triple())));
    }
    let module_err = |e: ModuleError| BackError::Module { kernel: kernel(), message: e.to_string() };

    let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
    math::register(&mut jb);
    let mut guard = ModuleGuard(Some(JITModule::new(jb)));
    let Some(module) = guard.0.as_mut() else {
        return Err(BackError::Module { kernel: kernel(), message: "module vanished".into() });
    };

    let mut sig = module.make_signature();
    sig.params.extend([AbiParam::new(types::I64); 3]);
    let fid = module.declare_function("tiga_kernel", Linkage::Local, &sig).map_err(module_err)?;
    let mut ctx = module.make_context();
    ctx.set_disasm(true);
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, fid.as_u32());

    let math = math::declare(module, &mut ctx.func, k, key.dtype).map_err(module_err)?;
    let plan = plan::plan_codegen(k, key, &plan::Target::CRANELIFT)
        .map_err(|e| BackError::Internal { kernel: kernel(), message: e.message })?;
    let mut fbc = FunctionBuilderContext::new();
    let builder = FunctionBuilder::new(&mut ctx.func, &mut fbc);
    let notes = translate::Translator::new(builder, k, key, &plan, &scratch, math)
        .run(module.target_config())
        .map_err(|message| BackError::Internal { kernel: kernel(), message })?;
    let clif = ctx.func.display().to_string();

    let codegen_err = |e: CodegenError, func: &cranelift_codegen::ir::Function| {
        let message = match e {
            CodegenError::Verifier(errors) => cranelift_codegen::print_errors::pretty_verifier_error(func, None, errors),
            e => e.to_string(),
        };
        BackError::Codegen { kernel: kernel(), message }
    };
    let mut notes = notes;
    let (code, alignment, relocs, asm) = {
        let isa = module.isa();
        // The rewrite reads x86-64 encodings; elsewhere the touches stay loads.
        let x86_64 = isa.name() == "x64";
        if let Err(e) = ctx.compile(isa, &mut Default::default()) {
            return Err(codegen_err(e.inner, e.func));
        }
        let Some(compiled) = ctx.compiled_code() else {
            return Err(BackError::Codegen { kernel: kernel(), message: "no compiled code after compiling".into() });
        };
        let mut code = compiled.code_buffer().to_vec();
        let (mut rewritten, mut kept) = (0usize, 0usize);
        for s in compiled.buffer.get_srclocs_sorted() {
            if x86_64 && s.loc.bits() == prefetch::TOUCH_SRCLOC {
                match prefetch::rewrite_touches(&mut code, s.start as usize, s.end as usize) {
                    0 => kept += 1,
                    n => rewritten += n,
                }
            }
        }
        if rewritten + kept > 0 {
            notes.push(format!(
                "touches: {rewritten} emitted as prefetcht0 (the marked byte loads, rewritten after code generation); {kept} run(s) of another shape left as loads"
            ));
        }
        let relocs: Vec<ModuleReloc> =
            compiled.buffer.relocs().iter().map(|r| ModuleReloc::from_mach_reloc(r, &ctx.func, fid)).collect();
        (code, u64::from(compiled.buffer.alignment), relocs, compiled.vcode.clone())
    };
    module.define_function_bytes(fid, alignment, &code, &relocs).map_err(module_err)?;
    module.clear_context(&mut ctx);
    module.finalize_definitions().map_err(module_err)?;
    let code = module.get_finalized_function(fid);
    // SAFETY: `code` is the finalized entry of a function declared with the
    // signature (i64, i64, i64) in the host's default (C) calling
    // convention, which `EntryFn` spells in Rust; pointers are 64-bit.
    let func = unsafe { std::mem::transmute::<*const u8, EntryFn>(code) };
    let compile_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(Variant { key: key.clone(), compile_ms, clif, asm, notes, plan, func, _module: guard })
}
