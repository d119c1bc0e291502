//! A 2-layer GCN trained in candle, its message passing a tiga kernel.
//!
//! `cargo run --release --example train_gcn --features candle`
//!
//! The dense layers (`candle_nn::linear_no_bias` and a bias), the ReLU, the
//! loss (`candle_nn::loss::cross_entropy`) and the optimizer
//! (`candle_nn::AdamW`) are candle's; the normalised neighbourhood sum of
//! PyG's `GCNConv` is tiga's `GcnNorm` kernel, applied as a candle operation
//! ([`tiga::candle::MessagePassing`]) whose backward is the kernel's derived
//! VJP. No derivative is written here.
//!
//! The data is the planted-partition graph of `tiga.datasets.sbm`
//! (generated, the same parameters: 2000 nodes in 4 equal-odds classes,
//! about 10 neighbours each, 80% of them in the node's own class, features
//! its class's mean plus noise of deviation 5, 10% of the nodes labelled).
//! It ends with `test accuracy A, epoch T ms` and fails (a non-zero exit)
//! when the accuracy is under 0.9.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{DType, Device, Module, Tensor as CTensor, D};
use candle_nn::{linear_no_bias, AdamW, Init, Linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use tiga::candle::MessagePassing;
use tiga::{Graph, Role, Tensor};

mod gnn {
    use tiga::message_passing;
    include!("kernels/gnn.rs");
}
use gnn::GcnNorm;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const NODES: usize = 2000;
const CLASSES: usize = 4;
const FEATURES: usize = 32;
const HIDDEN: usize = 16;
const EPOCHS: usize = 200;

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn uniform(s: &mut u64) -> f64 {
    (splitmix(s) >> 11) as f64 / (1u64 << 53) as f64
}

fn below(s: &mut u64, n: usize) -> usize {
    (splitmix(s) % n as u64) as usize
}

/// A standard normal draw (Box–Muller).
fn normal(s: &mut u64) -> f64 {
    let (u, v) = (1.0 - uniform(s), uniform(s));
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

struct Sbm {
    graph: Graph,
    x: Vec<f32>,
    y: Vec<u32>,
    train: Vec<u32>,
    test: Vec<u32>,
}

/// The planted partition (see the module doc); every edge in both
/// directions, no self loops.
fn sbm(seed: u64) -> Res<Sbm> {
    let mut s = seed;
    let y: Vec<u32> = (0..NODES).map(|_| below(&mut s, CLASSES) as u32).collect();
    let by_class: Vec<Vec<u32>> =
        (0..CLASSES as u32).map(|c| (0..NODES as u32).filter(|&i| y[i as usize] == c).collect()).collect();
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..NODES * 10 / 2 {
        let a = below(&mut s, NODES) as u32;
        let b = if uniform(&mut s) < 0.8 {
            let own = &by_class[y[a as usize] as usize];
            own[below(&mut s, own.len())]
        } else {
            below(&mut s, NODES) as u32
        };
        if a != b {
            src.extend([a, b]);
            dst.extend([b, a]);
        }
    }
    let means: Vec<f64> = (0..CLASSES * FEATURES).map(|_| normal(&mut s)).collect();
    let x = (0..NODES * FEATURES)
        .map(|k| (means[y[k / FEATURES] as usize * FEATURES + k % FEATURES] + 5.0 * normal(&mut s)) as f32)
        .collect();
    let mut order: Vec<u32> = (0..NODES as u32).collect();
    for i in (1..NODES).rev() {
        order.swap(i, below(&mut s, i + 1));
    }
    let (train, test) = order.split_at(NODES / 10);
    Ok(Sbm { graph: Graph::from_edges(NODES, NODES, &src, &dst)?, x, y, train: train.to_vec(), test: test.to_vec() })
}

/// PyG's `GCNConv`: a linear map without bias, the normalised sum over
/// in-edges (self loops added), then the bias.
struct GcnConv {
    lin: Linear,
    bias: CTensor,
}

impl GcnConv {
    fn new(vb: VarBuilder, fan_in: usize, fan_out: usize) -> candle_core::Result<GcnConv> {
        Ok(GcnConv {
            lin: linear_no_bias(fan_in, fan_out, vb.pp("lin"))?,
            bias: vb.get_with_hints(fan_out, "bias", Init::Const(0.0))?,
        })
    }

    fn forward(&self, x: &CTensor, propagate: &MessagePassing) -> candle_core::Result<CTensor> {
        let h = self.lin.forward(x)?;
        propagate.apply(&[(Role::Src, "h", &h)])?.broadcast_add(&self.bias)
    }
}

fn accuracy(logits: &CTensor, y: &CTensor, nodes: &CTensor) -> candle_core::Result<f32> {
    let pred = logits.index_select(nodes, 0)?.argmax(D::Minus1)?;
    let right = pred.eq(&y.index_select(nodes, 0)?)?.to_dtype(DType::F32)?.mean_all()?;
    right.to_scalar::<f32>()
}

fn main() -> Res<()> {
    let data = sbm(0)?;
    // PyG's gcn_norm: self loops added, each edge j→i weighted
    // deg(j)^-1/2 · deg(i)^-1/2.
    let (looped, w) = tiga::gcn_norm(&data.graph, None, tiga::DType::F32, tiga::GcnNormOptions::default())?;
    let ones = Tensor::from_f32(vec![NODES], vec![1.0; NODES])?;
    let propagate = MessagePassing::new(GcnNorm::kernel(), Arc::new(looped))
        .bind(Role::Src, "cs", ones.clone())
        .bind(Role::Dst, "cd", ones)
        .bind(Role::Edge, "w", w);

    let dev = Device::Cpu;
    let x = CTensor::from_vec(data.x, (NODES, FEATURES), &dev)?;
    let y = CTensor::from_vec(data.y, NODES, &dev)?;
    let train = CTensor::from_vec(data.train, NODES / 10, &dev)?;
    let test = CTensor::from_slice(&data.test, data.test.len(), &dev)?;
    let y_train = y.index_select(&train, 0)?;

    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
    let conv1 = GcnConv::new(vb.pp("conv1"), FEATURES, HIDDEN)?;
    let conv2 = GcnConv::new(vb.pp("conv2"), HIDDEN, CLASSES)?;
    let mut opt = AdamW::new(vars.all_vars(), ParamsAdamW { lr: 0.01, weight_decay: 5e-4, ..Default::default() })?;
    let model = |x: &CTensor| conv2.forward(&conv1.forward(x, &propagate)?.relu()?, &propagate);

    let start = Instant::now();
    for _ in 0..EPOCHS {
        let logits = model(&x)?;
        let loss = candle_nn::loss::cross_entropy(&logits.index_select(&train, 0)?, &y_train)?;
        opt.backward_step(&loss)?;
    }
    let epoch_ms = start.elapsed().as_secs_f64() * 1e3 / EPOCHS as f64;
    let acc = accuracy(&model(&x)?, &y, &test)?;
    println!("test accuracy {acc:.3}, epoch {epoch_ms:.2} ms");
    if acc < 0.9 {
        return Err(format!("test accuracy {acc:.3} is under 0.9").into());
    }
    Ok(())
}
