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

#[cfg(feature = "cranelift")]
pub mod cranelift;
