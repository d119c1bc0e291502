//! Reverse-mode differentiation of the kernel IR.
//!
//! [`operation_rules`] holds the vector–Jacobian product of every
//! [`Op`](crate::ir::Op): [`vjp_region`] copies a region into another and
//! appends its reverse sweep, yielding the cotangents of the region's leaves
//! (fields, inputs, states, messages, scans). The kernel-level adjoint
//! (reversing the edge → reduce → node pipeline, reducer adjoints, parameter
//! gradients) is built from these region rules by `generate-adjoint`
//! ([`kernel`]), from these parts:
//!
//! - [`plan`]: the plan it returns (stages, bindings, gradients);
//! - `reducer_rules`: what each reducer's adjoint needs, one exhaustive
//!   match over reducer kinds;
//! - `stages/`: one builder per stage (stats, suffix, edge side, source
//!   side), on the helpers of `builder`;
//! - `rewrites`: the plan rewrites, in order (`inline_stats` and `scatter`
//!   hold the larger two);
//! - [`residuals`]: the forward that keeps what its backward needs, and
//!   the plan that reads it instead of refolding the rows.

pub mod operation_rules;

pub use operation_rules::{vjp_region, AdjointError, RegionVjp};
mod builder;
mod edge_terms;
mod inline_stats;
pub mod kernel;
pub mod plan;
mod reducer_rules;
pub mod residuals;
mod rewrites;
mod scatter;
mod stages;
