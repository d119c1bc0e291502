//! tiga's compiler: the front end, the kernel IR, the passes, the loop IR and
//! the Cranelift back end.
//!
//! Pipeline: [`front`] captures a `#[message_passing]` module into
//! [`ir::Kernel`]; [`passes::run_pipeline`] runs the named passes (each
//! recording [`passes::Remark`]s); [`loops::schedule`] turns the fused segment
//! into the loop IR; [`back::cranelift`] compiles the loop IR per variant.
//! [`interp`] is the f64 reference every back end is checked against.
//!
//! This crate knows nothing of files, pages or ranks: it takes source text
//! and yields IR or machine code.

pub mod adjoint;
pub mod back;
pub mod bind;
pub mod explain;
pub mod front;
pub mod interp;
pub mod ir;
pub mod loops;
pub mod passes;
