//! Back ends: the loop IR ([`crate::loops::LoopKernel`]) to machine code.
//!
//! A back end compiles one *variant* of a loop kernel at a time: the kernel
//! together with everything fixed per call site (precision, solved widths,
//! whether edge ids are an indirection or the identity). Back ends take a
//! loop kernel the scheduler produced and never panic on it; anything they
//! cannot compile comes back as their own error type.
//!
//! - [`cranelift`] (feature `cranelift`): a JIT for the host CPU, one
//!   `extern "C"` function per variant, cached per process.
//! - [`rust_source`]: Rust source text of a variant, with every width a
//!   constant, for the macro path: the user's rustc/LLVM compiles it with the
//!   user's target features (wider vectors than Cranelift's, unrolling).
//! - [`ptx`]: a PTX module (`tiga_ptx`) for NVIDIA GPUs, one thread per
//!   destination row; so far scalar kernels only.
//!
//! Both compile to the same interface ([`tiga_abi`], re-exported here as
//! [`abi`]), so the runtime calls either.

pub use tiga_abi as abi;
#[cfg(feature = "cranelift")]
pub mod cranelift;
pub mod ptx;
pub mod rust_source;
