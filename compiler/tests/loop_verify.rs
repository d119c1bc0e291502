//! The loop IR's verifier: every scheduled kernel of gnn.rs and of the
//! reducers' file, and every adjoint stage, passes it; loop kernels with a
//! handle out of range or a statement in the wrong place are refused with a
//! message that says which list and what.

use tiga_compiler::adjoint::kernel::generate_adjoint;
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::ir::{FieldId, Role};
use tiga_compiler::loops::{schedule, verify, Addr, Inst, LoopKernel, LoopVar, Stmt, Var};
use tiga_compiler::passes::run_pipeline;

mod common;
use common::GNN;

const REDUCERS: &str = include_str!("../../examples/kernels/reducers.rs");

fn scheduled(src: &str) -> Vec<LoopKernel> {
    let mut out = Vec::new();
    for k in parse_kernel_file(src).expect("parses") {
        out.push(schedule(&run_pipeline(k.clone()).expect("passes").lowered).expect("schedules"));
        for st in generate_adjoint(&k).expect("adjoint").stages {
            out.push(schedule(&run_pipeline(st.kernel).expect("stage passes").lowered).expect("stage schedules"));
        }
    }
    out
}

#[test]
fn every_scheduled_kernel_verifies() {
    let all: Vec<LoopKernel> = scheduled(GNN).into_iter().chain(scheduled(REDUCERS)).collect();
    assert!(all.len() > 20, "{} loop kernels", all.len());
    for lk in &all {
        verify(lk).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn broken_loop_kernels_are_refused() {
    let base = scheduled(GNN).into_iter().find(|k| k.name == "VecSum").expect("VecSum");
    let refused = |edit: &dyn Fn(&mut LoopKernel), words: &[&str]| {
        let mut k = base.clone();
        edit(&mut k);
        let e = verify(&k).expect_err("a broken loop kernel");
        for w in words {
            assert!(e.to_string().contains(w), "`{w}` not in: {e}");
        }
    };
    let nvars = base.vars.len() as u32;
    refused(&|k| k.finish.push(Stmt::Set(Var(nvars), Inst::Const(1.0))), &["finish", "not a variable"]);
    refused(
        &|k| k.body.push(Stmt::Set(Var(0), Inst::Load(Addr::Field { field: FieldId(9), lanes: vec![] }))),
        &["body", "field 9"],
    );
    // A vector field read outside any feature loop, and a lane outside its loop.
    refused(
        &|k| k.body.push(Stmt::Set(Var(0), Inst::Load(Addr::Field { field: FieldId(0), lanes: vec![] }))),
        &["1 axes", "0 lanes"],
    );
    refused(
        &|k| k.body.push(Stmt::Set(Var(0), Inst::Load(Addr::Field { field: FieldId(0), lanes: vec![LoopVar(0)] }))),
        &["outside its loop"],
    );
    // A source field in the finish, where no edge is current.
    assert_eq!(base.fields[0].role, Role::Src);
    refused(
        &|k| {
            let w = match k.fields[0].ty {
                tiga_compiler::ir::Type::Vector(w) => w,
                t => panic!("{t:?}"),
            };
            k.finish.push(Stmt::Loop {
                lane: LoopVar(0),
                width: w,
                body: vec![Stmt::Set(Var(0), Inst::Load(Addr::Field { field: FieldId(0), lanes: vec![LoopVar(0)] }))],
            })
        },
        &["finish", "src field `h` read outside the edge passes"],
    );
    refused(&|k| k.init.push(Stmt::Set(Var(0), Inst::Rank)), &["init", "rank"]);
}
