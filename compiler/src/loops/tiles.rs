//! Edge tiles: an edge body whose scalar part calls a math function, cut
//! from its feature loops so that a back end can run the scalar part for a
//! tile of edges, then the loops for the same edges (both back ends do).

use super::{for_each_stmt, Addr, Inst, LoopKernel, Stmt, Var, VarKind};

/// Edges per tile of a split edge loop (`split_calls`).
pub const EDGE_TILE: usize = 64;

/// An edge body cut in two: its scalar statements and its feature loops.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitBody {
    pub scalar: Vec<Stmt>,
    pub loops: Vec<Stmt>,
    /// Numeric variables the scalar part sets and the loops read: kept
    /// per edge of a tile.
    pub carried: Vec<Var>,
}

/// The edge body as a scalar part to run for a tile of edges before its
/// feature loops run for the same edges, when the scalar part calls a math
/// function (an attention weight's `exp`) and the loops call none. A call
/// clobbers every vector register, so with the call among them a back end
/// saves and restores the loops' accumulators around it on every edge;
/// with the calls in a loop of their own the accumulators stay in
/// registers. Legal when the top level is only `Set`s and loops, the
/// scalar part reads no variable a loop sets and no output or scratch
/// memory, and no `Set` after a loop assigns what that loop reads (so
/// moving the `Set`s first changes no value a loop sees).
pub fn split_calls(k: &LoopKernel) -> Option<SplitBody> {
    let calls = |i: &Inst| i.calls_math() || matches!(i, Inst::Powi(..));
    let mut scalar = Vec::new();
    let mut loops = Vec::new();
    let mut loop_reads: Vec<Var> = Vec::new();
    let mut loop_sets: Vec<Var> = Vec::new();
    let mut scalar_calls = false;
    for st in &k.body {
        match st {
            Stmt::Set(x, i) => {
                // Memory the loops may write (an output an adjoint stage
                // adds into, an accumulator) would be read ahead of the
                // earlier edges' loops.
                if loop_reads.contains(x)
                    || matches!(i, Inst::Load(Addr::Output { .. } | Addr::OutputMatrix { .. } | Addr::Scratch { .. }))
                {
                    return None;
                }
                scalar_calls |= calls(i);
                scalar.push(st.clone());
            }
            Stmt::Loop { .. } => {
                let mut ok = true;
                for_each_stmt(std::slice::from_ref(st), &mut |s| match s {
                    Stmt::Set(x, i) => {
                        ok &= !calls(i);
                        loop_sets.push(*x);
                        loop_reads.extend(i.operands());
                    }
                    Stmt::Store(_, x) => loop_reads.push(*x),
                    Stmt::Loop { .. } => {}
                });
                if !ok {
                    return None;
                }
                loops.push(st.clone());
            }
            Stmt::Store(..) => return None,
        }
    }
    if !scalar_calls || loops.is_empty() {
        return None;
    }
    let mut scalar_sets = Vec::new();
    for st in &scalar {
        if let Stmt::Set(x, i) = st {
            if i.operands().iter().any(|v| loop_sets.contains(v)) || loop_sets.contains(x) {
                return None;
            }
            scalar_sets.push(*x);
        }
    }
    let mut carried: Vec<Var> = Vec::new();
    for v in loop_reads {
        if scalar_sets.contains(&v) && !loop_sets.contains(&v) && !carried.contains(&v) {
            if k.vars.get(v.0 as usize) != Some(&VarKind::Num) {
                return None;
            }
            carried.push(v);
        }
    }
    Some(SplitBody { scalar, loops, carried })
}
