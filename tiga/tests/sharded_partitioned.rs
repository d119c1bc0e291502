//! A sharded call whose source field lives in a partitioned tensor
//! (WholeMemory style, every memory type, hierarchy over two nodes): each
//! rank takes its rows with `Sharded::rows_from`, and the call gives the
//! bits of the same call with the dense field; the source gradient written
//! back with `Sharded::rows_into` equals the dense gradient.

use std::sync::Arc;

#[path = "common/gnn.rs"]
#[allow(dead_code)]
mod gnn;
use tiga::runtime::comm::{Communicator, InProcess};
use tiga::runtime::partitioned::{MemoryType, Options, PartitionedTensor};
use tiga::runtime::storage::FieldRole;
use tiga::runtime::ElementType;
use tiga::{Graph, Inputs, ShardOptions, Sharded, Tensor};

fn graph(n: usize, e: usize) -> Graph {
    let mut s: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |m: usize| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % m as u64) as u32
    };
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..e {
        src.push(next(n));
        dst.push(next(n - 2));
    }
    Graph::from_edges(n, n, &src, &dst).expect("graph")
}

#[test]
fn a_partitioned_source_field_gives_the_dense_bits() {
    let (n, f) = (60, 4);
    let g = graph(n, 400);
    let k = gnn::GcnNorm::kernel();
    let h: Vec<f32> = (0..n * f).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let cs: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 / 10.0).collect();
    let cd: Vec<f32> = (0..n).map(|i| 1.0 - (i % 5) as f32 / 10.0).collect();
    let w: Vec<f32> = (0..g.num_edges()).map(|e| ((e % 11) as f32 - 5.0) / 5.0).collect();
    let h_t = Tensor::from_f32(vec![n, f], h.clone()).expect("h");
    for memory in MemoryType::ALL {
        let hosts: Vec<usize> = if memory == MemoryType::Hierarchy { vec![0, 0, 1, 1] } else { vec![0; 3] };
        let results = InProcess::run_on_hosts(&hosts, |c| {
            let comm: Arc<dyn Communicator> = Arc::new(c);
            let sh = Sharded::from_graph(&g, comm.clone(), &ShardOptions::default()).expect("shard");
            // The dense run: whole fields.
            let dense = Inputs::new().src("h", &h_t).src("cs", &cs).dst("cd", &cd).edge("w", &w);
            let want = k.run(&sh, &dense).expect("dense run");
            let want_grad = k.grad(&sh, &dense, "out").expect("dense grad");
            // `h` in a partitioned tensor, filled by rank 0.
            let t = PartitionedTensor::new(comm.as_ref(), ElementType::F32, &[n, f], &Options::memory(memory)).expect("tensor");
            let (ids, vals): (Vec<i64>, Vec<f32>) =
                if comm.rank() == 0 { ((0..n as i64).collect(), h.clone()) } else { (Vec::new(), Vec::new()) };
            t.scatter(&ids, &vals).expect("fill");
            let mine = sh.rows_from(FieldRole::Src, &t).expect("rows from the tensor");
            let ins = Inputs::new().src("h", &mine).src("cs", &cs).dst("cd", &cd).edge("w", &w);
            let got = k.run(&sh, &ins).expect("partitioned run");
            let got_grad = k.grad(&sh, &ins, "out").expect("partitioned grad");
            let same_out = got.f32("out").expect("out") == want.f32("out").expect("out");
            let dh = got_grad.src("h").expect("dh");
            let same_grad = dh.as_f32() == want_grad.src("h").expect("dh").as_f32();
            // The gradient written into a partitioned tensor of its own.
            let grads =
                PartitionedTensor::new(comm.as_ref(), ElementType::F32, &[n, f], &Options::memory(memory)).expect("grads");
            sh.rows_into(FieldRole::Src, dh, &grads).expect("rows into");
            comm.barrier().expect("barrier");
            let all: Vec<f32> = grads.gather(&(0..n as i64).collect::<Vec<_>>()).expect("gather");
            (same_out, same_grad, all)
        });
        // The dense gradient over every row, from one process.
        let one =
            k.grad(&g, &Inputs::new().src("h", &h_t).src("cs", &cs).dst("cd", &cd).edge("w", &w), "out").expect("one process");
        let whole = one.src("h").expect("dh").as_f32().expect("f32").to_vec();
        for (r, res) in results.into_iter().enumerate() {
            let (same_out, same_grad, all) = res.expect("rank");
            assert!(same_out, "{memory:?} rank {r}: outputs differ from the dense field's");
            assert!(same_grad, "{memory:?} rank {r}: gradients differ from the dense field's");
            let close = all.iter().zip(&whole).all(|(a, b)| (a - b).abs() <= 1e-5 * (1.0 + b.abs()));
            assert!(close, "{memory:?} rank {r}: the scattered gradient differs from one process's");
        }
    }
}
