//! Reverse-mode differentiation of the kernel IR.
//!
//! [`vjp`] holds the vector–Jacobian product of every [`Op`](crate::ir::Op):
//! [`vjp_region`] copies a region into another and appends its reverse sweep,
//! yielding the cotangents of the region's leaves (fields, inputs, states,
//! messages, scans). The kernel-level adjoint construction (reversing the
//! edge → reduce → node pipeline, reducer adjoints, parameter gradients) lives
//! beside it in `adjoint/kernel.rs` and is built from these region rules.

pub mod operation_rules;

pub use operation_rules::{vjp_region, AdjointError, RegionVjp};
mod inline_stats;
pub mod kernel;
mod scatter;
