//! Shared by the compiler's tests that run every gnn.rs kernel on random
//! graphs: a seeded generator, a CSR builder and random fields shaped as a
//! kernel declares them.

#![allow(dead_code)]

use std::ops::Range;
use tiga_compiler::interp::Array;

use tiga_compiler::back::abi::RawArgs;
use tiga_compiler::bind::{field_shape, Extents};
use tiga_compiler::ir::{DType, Kernel, Role};

pub const GNN: &str = include_str!("../../../examples/kernels/gnn.rs");

mod rng;
pub use rng::Rng;

/// The CSR of `edges` (src, dst) by destination, stable in edge order:
/// offsets, columns and each position's edge id.
pub fn csr(num_dst: usize, edges: &[(u32, u32)]) -> (Vec<u64>, Vec<u32>, Vec<u64>) {
    let mut order: Vec<usize> = (0..edges.len()).collect();
    order.sort_by_key(|&e| edges[e].1);
    let mut off = vec![0u64; num_dst + 1];
    for &(_, d) in edges {
        off[d as usize + 1] += 1;
    }
    for i in 0..num_dst {
        off[i + 1] += off[i];
    }
    let cols = order.iter().map(|&e| edges[e].0).collect();
    let ids = order.iter().map(|&e| e as u64).collect();
    (off, cols, ids)
}

/// Random values for every field of `k`, every width `f`.
pub fn random_fields(k: &Kernel, num_src: usize, num_dst: usize, num_edges: usize, f: usize, rng: &mut Rng) -> Vec<Array> {
    let e = Extents { num_src, num_dst, num_edges };
    k.fields
        .iter()
        .map(|fd| {
            let shape = field_shape(fd.role, fd.ty, &e, |_| f);
            let len = shape.iter().product();
            Array::new(shape, (0..len).map(|_| rng.f()).collect())
        })
        .collect()
}

/// A field or output buffer in the call's dtype.
pub enum Buf {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Buf {
    pub fn new(dtype: DType, data: &[f64]) -> Buf {
        match dtype {
            DType::F32 => Buf::F32(data.iter().map(|&x| x as f32).collect()),
            DType::F64 => Buf::F64(data.to_vec()),
        }
    }
    pub fn ptr(&mut self) -> *mut u8 {
        match self {
            Buf::F32(v) => v.as_mut_ptr() as *mut u8,
            Buf::F64(v) => v.as_mut_ptr() as *mut u8,
        }
    }
    pub fn values(&self) -> Vec<f64> {
        match self {
            Buf::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Buf::F64(v) => v.clone(),
        }
    }
}

/// Runs a compiled variant (`run`) over the CSR `(offsets, cols, ids)` in
/// `chunks` of rows. `fields` are in declaration order with their roles,
/// edge fields in the user's edge order (permuted to CSR order here when
/// the variant reads no edge ids); outputs are `out_lens` long and start as
/// NaN, so an element the kernel never writes shows. Returns the outputs.
#[allow(clippy::too_many_arguments)]
pub fn run_over_csr(
    dtype: DType,
    edge_ids: bool,
    (off, cols, ids): (&[u64], &[u32], &[u64]),
    fields: &[(Role, &[f64])],
    out_lens: &[usize],
    chunks: &[Range<u64>],
    run: impl Fn(&RawArgs, Range<u64>),
) -> Vec<Vec<f64>> {
    let mut bufs: Vec<Buf> = fields
        .iter()
        .map(|&(role, data)| {
            if role == Role::Edge && !edge_ids && !ids.is_empty() {
                let per = data.len() / ids.len();
                let permuted: Vec<f64> =
                    ids.iter().flat_map(|&e| data[e as usize * per..(e as usize + 1) * per].to_vec()).collect();
                Buf::new(dtype, &permuted)
            } else {
                Buf::new(dtype, data)
            }
        })
        .collect();
    let mut outs: Vec<Buf> = out_lens.iter().map(|&n| Buf::new(dtype, &vec![f64::NAN; n])).collect();
    let field_ptrs: Vec<*const u8> = bufs.iter_mut().map(|b| b.ptr() as *const u8).collect();
    let out_ptrs: Vec<*mut u8> = outs.iter_mut().map(Buf::ptr).collect();
    let args = RawArgs {
        offsets: off.as_ptr(),
        cols: cols.as_ptr(),
        edge_ids: if edge_ids { ids.as_ptr() } else { std::ptr::null() },
        fields: field_ptrs.as_ptr(),
        outputs: out_ptrs.as_ptr(),
        stencil: std::ptr::null(),
    };
    for rows in chunks {
        run(&args, rows.clone());
    }
    outs.iter().map(Buf::values).collect()
}

/// Compare `actual` with golden file `tests/golden/<name>` (any diff
/// fails), or write it there under `TIGA_BLESS=1`.
pub fn check_golden(name: &str, actual: &str) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("TIGA_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("missing golden file {} ({e}); run with TIGA_BLESS=1", path.display()));
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "{} differs from the golden file at line {}:\n  expected: {:?}\n  actual:   {:?}\n(re-bless with TIGA_BLESS=1 if intended)",
            name,
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}
