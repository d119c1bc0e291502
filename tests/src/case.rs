//! What a conformance check runs: a graph (with the generated stencil it
//! is the CSR of, where it is one) and a call (random fields of one dtype
//! and width, and random cotangents for the backward).

use tiga::compiler::bind::{field_shape, Extents};
use tiga::compiler::ir::{Role, Type};
use tiga::{DType, Graph, Inputs, Kernel, Stencil2d, Tensor, TensorView};

/// The suite's random numbers: xorshift64 from a fixed seed, so graphs and
/// values are the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [-1, 1) on a 1/500,000 grid.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() % 1_000_000) as f64 / 500_000.0 - 1.0
    }
}

/// A graph to check on, in the user's numbering.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub graph: Graph,
    /// The generated stencil whose CSR `graph` is (same numbering: row-major
    /// cells), where it is one.
    pub stencil: Option<Stencil2d>,
}

impl Case {
    /// A graph from its edge list (user edge order: edge fields follow it).
    pub fn from_edges(name: &str, num_src: usize, num_dst: usize, src: &[u32], dst: &[u32]) -> Case {
        let graph = Graph::from_edges(num_src, num_dst, src, dst).unwrap_or_else(|e| panic!("{name}: {e}"));
        Case { name: name.to_string(), graph, stencil: None }
    }

    /// `m` random edges plus a repeat of the first (a multi-edge) and a self
    /// loop on node 0; the last destination row gets no edge (an empty row),
    /// and a sparse draw leaves nodes isolated. Edges come in random
    /// destination order, so CSR positions differ from edge ids.
    pub fn random(name: &str, rng: &mut Rng, num_src: usize, num_dst: usize, m: usize) -> Case {
        let below = (num_dst - 1).max(1);
        let (mut src, mut dst): (Vec<u32>, Vec<u32>) =
            (0..m).map(|_| (rng.below(num_src) as u32, rng.below(below) as u32)).unzip();
        if let (Some(&s), Some(&d)) = (src.first(), dst.first()) {
            src.push(s);
            dst.push(d);
        }
        src.push(0);
        dst.push(0);
        Case::from_edges(name, num_src, num_dst, &src, &dst)
    }

    /// The four-neighbour stencil on a `rows` x `cols` grid (up, down, left,
    /// right; `Graph::stencil_2d_4` when not periodic), as a CSR and as the
    /// generated realization of the same grid.
    pub fn stencil_4(name: &str, rows: usize, cols: usize, periodic: bool) -> Case {
        let offsets = [(-1i64, 0i64), (1, 0), (0, -1), (0, 1)];
        let neigh: Vec<Vec<i64>> = offsets.iter().map(|&(r, c)| vec![r, c]).collect();
        let graph = Graph::stencil(&[rows, cols], &neigh, periodic).unwrap_or_else(|e| panic!("{name}: {e}"));
        let stencil = Stencil2d { rows: rows as u64, cols: cols as u64, offsets: offsets.to_vec(), periodic };
        Case { name: name.to_string(), graph, stencil: Some(stencil) }
    }

    /// Whether this is a periodic generated stencil's graph.
    pub fn periodic(&self) -> bool {
        self.stencil.as_ref().is_some_and(|s| s.periodic)
    }
}

/// One call of a kernel on a case: every field (random values in [-1, 1)),
/// in `dtype`, vectors `width` wide, and a random cotangent per output.
#[derive(Debug)]
pub struct Call {
    pub dtype: DType,
    pub width: usize,
    pub fields: Vec<(Role, String, Tensor)>,
    pub cotangents: Vec<(String, Tensor)>,
}

/// `data` as a tensor of `shape` in `dtype` (f32 rounds).
pub fn tensor(dtype: DType, shape: &[usize], data: &[f64]) -> Tensor {
    let t = match dtype {
        DType::F32 => Tensor::from_f32(shape.to_vec(), data.iter().map(|&x| x as f32).collect()),
        DType::F64 => Tensor::from_f64(shape.to_vec(), data.to_vec()),
    };
    t.unwrap_or_else(|e| panic!("a {shape:?} tensor: {e}"))
}

/// Whether any of `k`'s fields has a feature width (so that calls at
/// several widths differ).
pub fn has_width(k: &Kernel) -> bool {
    k.fields().iter().any(|f| matches!(f.ty, Type::Vector(_) | Type::Matrix(..)))
}

impl Call {
    pub fn random(k: &Kernel, case: &Case, width: usize, dtype: DType, rng: &mut Rng) -> Call {
        let g = &case.graph;
        let e = Extents { num_src: g.num_src(), num_dst: g.num_dst(), num_edges: g.num_edges() };
        let fields: Vec<(Role, String, Tensor)> = k
            .fields()
            .iter()
            .map(|fd| {
                let shape = field_shape(fd.role, fd.ty, &e, |_| width);
                let data: Vec<f64> = (0..shape.iter().product()).map(|_| rng.uniform()).collect();
                (fd.role, fd.name.clone(), tensor(dtype, &shape, &data))
            })
            .collect();
        let mut call = Call { dtype, width, fields, cotangents: Vec::new() };
        let shapes = k.output_shapes(g, &call.inputs()).unwrap_or_else(|e| panic!("{} on {}: {e}", k.name(), case.name));
        call.cotangents = shapes
            .into_iter()
            .map(|(name, shape)| {
                let data: Vec<f64> = (0..shape.iter().product()).map(|_| rng.uniform()).collect();
                let t = tensor(dtype, &shape, &data);
                (name, t)
            })
            .collect();
        call
    }

    /// Every field, bound by role and name.
    pub fn inputs(&self) -> Inputs<'_> {
        self.fields.iter().fold(Inputs::new(), |i, (r, n, t)| i.with_role(*r, n, t))
    }

    /// Only the parameters (the node and edge fields come from a file).
    pub fn params(&self) -> Inputs<'_> {
        self.fields.iter().filter(|(r, _, _)| *r == Role::Param).fold(Inputs::new(), |i, (r, n, t)| i.with_role(*r, n, t))
    }

    pub fn cotangent_views(&self) -> Vec<(&str, TensorView<'_>)> {
        self.cotangents.iter().map(|(n, t)| (n.as_str(), t.view())).collect()
    }

    /// The same call in f64, holding the same values (f32 widens exactly):
    /// what the reference interpreter runs.
    pub fn in_f64(&self) -> Call {
        let widen = |t: &Tensor| tensor(DType::F64, t.shape(), &t.to_f64_vec());
        Call {
            dtype: DType::F64,
            width: self.width,
            fields: self.fields.iter().map(|(r, n, t)| (*r, n.clone(), widen(t))).collect(),
            cotangents: self.cotangents.iter().map(|(n, t)| (n.clone(), widen(t))).collect(),
        }
    }
}
