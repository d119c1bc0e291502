//! One builder per stage of the adjoint plan, in the order the plan runs
//! them.
//!
//! - `stats`: the row statistics and the node function's adjoint (forward
//!   graph);
//! - `suffix`: a replayed fold's suffixes (row-reversed graph, user monoids
//!   only);
//! - `sides`: the edge side (destination, edge and parameter gradients,
//!   forward graph) and the source side (source gradients, transposed
//!   graph).
//!
//! Each builder reads the forward kernel as [`Forward`] presents it and
//! asks the reducer's rule (`adjoint/reducer_rules.rs`) for everything that
//! depends on the reducer; the plan rewrites (`adjoint/rewrites.rs`) run on
//! what they build.

mod sides;
mod stats;
mod suffix;

pub(super) use sides::{edge_side, edge_term_name, source_side, source_side_with_edge_terms};
pub(super) use stats::stats;
pub(super) use suffix::suffix;

use super::builder::inline_mapped;
use super::reducer_rules::{reducer_rule, Needs, ReducerRule};
use crate::ir::{FieldDecl, Kernel, Region, Role, Type, ValueId};

/// The stats stage's index in the plan, as later stages' bindings name it.
pub(super) const STATS_STAGE: usize = 0;

/// The forward kernel as every stage builder reads it.
pub(super) struct Forward<'k> {
    pub(super) k: &'k Kernel,
    /// The adjoint rule of its reducer.
    pub(super) rule: &'static dyn ReducerRule,
    /// What that rule asks of the plan, for this kernel.
    pub(super) needs: Needs,
    /// The state the stats stage folds per row.
    pub(super) state_types: Vec<Type>,
    /// Its fields of each role, with their indices.
    pub(super) params: Vec<(usize, &'k FieldDecl)>,
    pub(super) dsts: Vec<(usize, &'k FieldDecl)>,
    pub(super) srcs: Vec<(usize, &'k FieldDecl)>,
    pub(super) edges: Vec<(usize, &'k FieldDecl)>,
}

impl<'k> Forward<'k> {
    pub(super) fn new(k: &'k Kernel) -> Self {
        let rule = reducer_rule(k.reducer.kind);
        let of_role =
            |role: Role| -> Vec<(usize, &'k FieldDecl)> { k.fields.iter().enumerate().filter(|(_, f)| f.role == role).collect() };
        Forward {
            k,
            rule,
            needs: rule.needs(k),
            state_types: rule.state_types(k),
            params: of_role(Role::Param),
            dsts: of_role(Role::Dst),
            srcs: of_role(Role::Src),
            edges: of_role(Role::Edge),
        }
    }

    /// The forward messages, recomputed into `edge` of a stage whose fields
    /// start with the forward's.
    pub(super) fn messages(&self, edge: &mut Region, fields: &[FieldDecl]) -> Vec<ValueId> {
        let identity: Vec<usize> = (0..self.k.fields.len()).collect();
        let msgs = inline_mapped(edge, &self.k.edge, &identity, fields, |_| None);
        msgs[..self.k.message_types().len()].to_vec()
    }
}
