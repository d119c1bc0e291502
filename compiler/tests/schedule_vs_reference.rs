//! Every kernel of gnn.rs, through the passes and the scheduler, evaluated by
//! the loop-IR evaluator, against the reference interpreter on random graphs
//! with empty rows, self loops, multi-edges and a bipartite shape.

use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::interp::{interpret, Array};
use tiga_compiler::loops::{eval::eval_loop_kernel, for_each_stmt, schedule};
use tiga_compiler::passes::run_pipeline;

mod common;
use common::{csr, random_fields, Rng, GNN};

#[test]
fn scheduled_kernels_match_reference() {
    let ks = parse_kernel_file(GNN).expect("parses");
    let mut rng = Rng(0x1234_5678_9abc);
    for (num_src, num_dst, ne) in [(7usize, 7usize, 20usize), (5, 9, 12), (1, 1, 3), (6, 6, 0)] {
        let mut edges: Vec<(u32, u32)> =
            (0..ne).map(|_| ((rng.next() % num_src as u64) as u32, (rng.next() % (num_dst as u64 - 1).max(1)) as u32)).collect();
        if ne > 3 {
            edges.push(edges[0]); // a multi-edge
            edges.push((0, 0)); // a self loop
        }
        let (off, cols, ids) = csr(num_dst, &edges);
        let f = 3usize;
        for k in &ks {
            let fields = random_fields(k, num_src, num_dst, edges.len(), f, &mut rng);
            let want = interpret(k, num_src, num_dst, &edges, &fields).expect("reference runs");
            let compiled = run_pipeline(k.clone()).expect("passes");
            let lk = schedule(&compiled.lowered).expect("schedules");
            let mut got: Vec<Array> = want.iter().map(|a| Array::new(a.shape.clone(), vec![f64::NAN; a.data.len()])).collect();
            eval_loop_kernel(&lk, &[f; 4][..k.widths.len()], &off, &cols, Some(&ids), &fields, &mut got);
            for (w, g) in want.iter().zip(&got) {
                for (x, y) in w.data.iter().zip(&g.data) {
                    assert!((x - y).abs() <= 1e-12 * (1.0 + x.abs()), "{}: {x} vs {y}\n{lk}", k.name);
                }
            }
        }
    }
}

/// The never-NaN analysis: in a max of plain values the accumulator (and
/// so every `max`) is never NaN, while the gathered field value may be; in
/// GatAttention the running maximum (folded by its pre-pass) is never NaN, while the score (an add
/// of two loads) may be. (MaxPool's max of relus has no `max` left after
/// `fold-relu-into-max`.)
#[test]
fn never_nan_finds_accumulators() {
    use tiga_compiler::loops::{never_nan, Addr, Inst, Stmt};
    const PLAIN_MAX: &str = r#"
#[message_passing(reduce = max)]
pub mod PlainMax {
    use tiga::lang::*;
    pub struct Src { pub h: Vector<f32> }
    pub fn edge(src: &Src) -> Vector<f32> { src.h.clone() }
}
"#;
    let mut ks = parse_kernel_file(GNN).expect("parses");
    ks.extend(parse_kernel_file(PLAIN_MAX).expect("parses"));
    for name in ["PlainMax", "GatAttention"] {
        let k = ks.iter().find(|k| k.name == name).expect("kernel");
        let lk = schedule(&run_pipeline(k.clone()).expect("passes").lowered).expect("schedules");
        let nn = never_nan(&lk);
        let mut maxes = 0;
        let mut field_loads = 0;
        for part in [&lk.init, &lk.pre_body, &lk.body, &lk.finish] {
            for_each_stmt(part, &mut |st| match st {
                Stmt::Set(v, Inst::Binary(tiga_compiler::ir::BinOp::Max, a, b)) => {
                    maxes += 1;
                    assert!(nn[a.0 as usize] || nn[b.0 as usize], "{name}: max v{}, v{}", a.0, b.0);
                    assert!(nn[v.0 as usize], "{name}: the max itself");
                }
                Stmt::Set(v, Inst::Load(Addr::Field { .. })) => {
                    field_loads += 1;
                    assert!(!nn[v.0 as usize], "{name}: a field value may be NaN");
                }
                _ => {}
            });
        }
        assert!(maxes > 0 && field_loads > 0, "{name}: {maxes} max, {field_loads} field loads");
    }
}
