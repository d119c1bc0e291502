//! tiga kernels as differentiable candle operations.
//!
//! A [`MessagePassing`] is one kernel over one graph with some of its fields
//! bound as constants (a GCN's normalisation weights, say); [`MessagePassing::apply`]
//! takes the remaining one to three fields as candle tensors and returns one
//! output as a candle tensor. Candle's autograd then calls the kernel's
//! derived VJP for the tensors that need a gradient, so a model composes
//! `candle_nn` layers, tiga message passing, a `candle_nn` loss and optimizer
//! with no derivative written by hand.
//!
//! Why this shape: candle's custom operations take at most three tensor
//! arguments (`CustomOp1/2/3`), so the fields a model trains through are
//! the arguments and every other field is bound in the operation, where it
//! costs no copy per call and has no gradient. A kernel with more than three
//! differentiable fields is split, or its fields packed into one wider
//! vector field.
//!
//! Tensors are read in place when contiguous on the CPU (any other layout is
//! gathered into a contiguous copy once per call); f32 and f64 run, other
//! dtypes are refused with a message. The operations run on candle's CPU
//! device only: a CUDA or Metal tensor is refused (candle's error names the
//! operation), not copied behind the caller's back.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Storage};
use tiga_compiler::ir::Role;
use tiga_runtime::{Buffer, Data, Graph, Schedule, Tensor, TensorView};

use crate::fields::{Inputs, Wrt};
use crate::kernel::Kernel;

/// One kernel over one graph, with its constant fields bound, as a family of
/// candle operations (see the module doc).
#[derive(Debug, Clone)]
pub struct MessagePassing {
    inner: Arc<Bound>,
}

#[derive(Debug, Clone)]
struct Bound {
    kernel: Kernel,
    graph: Arc<Graph>,
    constants: Vec<(Role, String, Tensor)>,
    output: String,
    schedule: Schedule,
}

impl MessagePassing {
    /// `kernel` over `graph`, giving its output `out` under the default
    /// schedule, with no field bound yet.
    pub fn new(kernel: &Kernel, graph: Arc<Graph>) -> MessagePassing {
        MessagePassing {
            inner: Arc::new(Bound {
                kernel: kernel.clone(),
                graph,
                constants: Vec::new(),
                output: "out".to_string(),
                schedule: Schedule::default(),
            }),
        }
    }

    /// The builder's edits are in place until an operation shares the
    /// binding; after that they copy it.
    fn edit(mut self, f: impl FnOnce(&mut Bound)) -> MessagePassing {
        f(Arc::make_mut(&mut self.inner));
        self
    }

    /// Binds field `name` of `role` to a constant (no gradient flows to it).
    pub fn bind(self, role: Role, name: &str, value: Tensor) -> MessagePassing {
        self.edit(|b| b.constants.push((role, name.to_string(), value)))
    }

    /// Which of the kernel's outputs the operation returns.
    pub fn output(self, name: &str) -> MessagePassing {
        self.edit(|b| b.output = name.to_string())
    }

    /// The schedule both the forward and the backward run under.
    pub fn schedule(self, schedule: Schedule) -> MessagePassing {
        self.edit(|b| b.schedule = schedule)
    }

    /// Runs the kernel with `args` (one to three `(role, field name,
    /// tensor)`) beside the bound constants, as a candle operation whose
    /// backward is the kernel's derived VJP.
    pub fn apply(&self, args: &[(Role, &str, &candle_core::Tensor)]) -> candle_core::Result<candle_core::Tensor> {
        let op = Op { bound: self.inner.clone(), args: args.iter().map(|(r, n, _)| (*r, n.to_string())).collect() };
        match args {
            [(_, _, a)] => a.apply_op1(op),
            [(_, _, a), (_, _, b)] => a.apply_op2(b, op),
            [(_, _, a), (_, _, b), (_, _, c)] => a.apply_op3(b, c, op),
            _ => candle_core::bail!(
                "kernel `{}`: a candle operation takes 1 to 3 tensor fields, {} given; bind the others with MessagePassing::bind",
                self.inner.kernel.name(),
                args.len()
            ),
        }
    }
}

/// One application: the bound kernel and the roles and names of its tensor
/// arguments, in order.
struct Op {
    bound: Arc<Bound>,
    args: Vec<(Role, String)>,
}

fn wrap(e: crate::error::Error) -> candle_core::Error {
    candle_core::Error::wrap(e)
}

/// The elements of `v` a layout addresses: in place when contiguous, else
/// gathered once into `copy`.
fn addressed<'a, T: Copy>(v: &'a [T], l: &Layout, copy: &'a mut Vec<T>) -> &'a [T] {
    match l.contiguous_offsets() {
        Some((start, end)) => &v[start..end],
        None => {
            *copy = strided_offsets(l).map(|i| v[i]).collect();
            copy
        }
    }
}

/// The storage offsets of a layout's elements in row-major order.
fn strided_offsets(l: &Layout) -> impl Iterator<Item = usize> + '_ {
    let (dims, stride) = (l.dims(), l.stride());
    let count: usize = dims.iter().product();
    (0..count).map(move |mut k| {
        let mut at = l.start_offset();
        for (&d, &st) in dims.iter().zip(stride).rev() {
            at += (k % d) * st;
            k /= d;
        }
        at
    })
}

/// Room for the gathered copy of a non-contiguous argument.
#[derive(Default)]
struct Gathered {
    f32: Vec<f32>,
    f64: Vec<f64>,
}

/// A candle storage on the CPU as a tiga view (see [`addressed`]).
fn view_of<'a>(s: &'a Storage, l: &Layout, copy: &'a mut Gathered) -> candle_core::Result<TensorView<'a>> {
    let Storage::Cpu(s) = s else {
        candle_core::bail!("tiga's candle operations run on the CPU device, not {:?}", s.device().location())
    };
    cpu_view_of(s, l, copy)
}

/// [`view_of`] for the storage candle hands a forward.
fn cpu_view_of<'a>(s: &'a CpuStorage, l: &Layout, copy: &'a mut Gathered) -> candle_core::Result<TensorView<'a>> {
    let data = match s {
        CpuStorage::F32(v) => Data::F32(addressed(v, l, &mut copy.f32)),
        CpuStorage::F64(v) => Data::F64(addressed(v, l, &mut copy.f64)),
        other => candle_core::bail!("tiga kernels take f32 or f64 tensors, not {:?}", other.dtype()),
    };
    TensorView::new(l.shape().dims().to_vec(), data).map_err(|e| wrap(e.into()))
}

/// A tiga output as candle CPU storage and shape (moved, not copied).
fn storage_of(t: Tensor) -> candle_core::Result<(CpuStorage, Shape)> {
    let (shape, buffer) = t.into_parts();
    let storage = match buffer {
        Buffer::F32(v) => CpuStorage::F32(v),
        Buffer::F64(v) => CpuStorage::F64(v),
        Buffer::F16(_) | Buffer::BF16(_) => {
            candle_core::bail!("tiga returned a half-precision output where f32 or f64 was asked")
        }
    };
    Ok((storage, Shape::from(shape)))
}

/// A tiga gradient as a candle tensor on the CPU.
fn candle_tensor(t: Tensor) -> candle_core::Result<candle_core::Tensor> {
    let (storage, shape) = storage_of(t)?;
    let dev = candle_core::Device::Cpu;
    match storage {
        CpuStorage::F32(v) => candle_core::Tensor::from_vec(v, shape, &dev),
        CpuStorage::F64(v) => candle_core::Tensor::from_vec(v, shape, &dev),
        _ => candle_core::bail!("tiga returned a gradient in a dtype it does not compute in"),
    }
}

impl Op {
    fn name(&self) -> &'static str {
        "tiga-message-passing"
    }

    /// The inputs of a call: the constants, then the arguments.
    fn inputs<'a>(&'a self, views: &[TensorView<'a>]) -> Inputs<'a> {
        let b = &self.bound;
        let mut inputs = Inputs::new();
        for (role, name, t) in &b.constants {
            inputs = inputs.with_role(*role, name, t);
        }
        for ((role, name), v) in self.args.iter().zip(views) {
            inputs = inputs.with_role(*role, name, v.clone());
        }
        inputs
    }

    fn forward(&self, args: &[(&CpuStorage, &Layout)]) -> candle_core::Result<(CpuStorage, Shape)> {
        let mut copies: Vec<Gathered> = args.iter().map(|_| Gathered::default()).collect();
        let views = args
            .iter()
            .zip(copies.iter_mut())
            .map(|((s, l), copy)| cpu_view_of(s, l, copy))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let b = &self.bound;
        let mut outputs = b.kernel.run_with(b.graph.as_ref(), &self.inputs(&views), &b.schedule).map_err(wrap)?;
        storage_of(outputs.take(&b.output).map_err(wrap)?)
    }

    /// The gradients of the arguments that take part in autograd (an
    /// argument no variable reaches gets none, and the stages that feed
    /// only it do not run).
    fn backward(
        &self,
        args: &[&candle_core::Tensor],
        grad_res: &candle_core::Tensor,
    ) -> candle_core::Result<Vec<Option<candle_core::Tensor>>> {
        let wanted: Vec<bool> = args.iter().map(|a| a.track_op()).collect();
        if !wanted.iter().any(|w| *w) {
            return Ok(vec![None; args.len()]);
        }
        let guards: Vec<_> = args.iter().map(|a| a.storage_and_layout()).collect();
        let cot_guard = grad_res.storage_and_layout();
        let mut copies: Vec<Gathered> = args.iter().map(|_| Gathered::default()).collect();
        let mut cot_copy = Gathered::default();
        let views = guards
            .iter()
            .zip(copies.iter_mut())
            .map(|((s, l), copy)| view_of(s, l, copy))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let cot = view_of(&cot_guard.0, cot_guard.1, &mut cot_copy)?;
        let b = &self.bound;
        let wrt = Wrt::only(self.args.iter().zip(&wanted).filter(|(_, w)| **w).map(|((r, n), _)| (*r, n.as_str())));
        let mut grads = b
            .kernel
            .vjp_wrt(b.graph.as_ref(), &self.inputs(&views), &[(b.output.as_str(), cot)], &wrt, &b.schedule)
            .map_err(wrap)?;
        self.args
            .iter()
            .zip(&wanted)
            .map(|((role, name), w)| match (w, grads.take(*role, name)) {
                (false, _) => Ok(None),
                (true, Some(g)) => candle_tensor(g).map(Some),
                (true, None) => {
                    candle_core::bail!("kernel `{}` gave no gradient for {} field `{name}`", b.kernel.name(), role.name())
                }
            })
            .collect()
    }
}

impl CustomOp1 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(&[(s, l)])
    }
    fn bwd(
        &self,
        a: &candle_core::Tensor,
        _res: &candle_core::Tensor,
        g: &candle_core::Tensor,
    ) -> candle_core::Result<Option<candle_core::Tensor>> {
        Ok(self.backward(&[a], g)?.pop().flatten())
    }
}

impl CustomOp2 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }
    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(&[(s1, l1), (s2, l2)])
    }
    fn bwd(
        &self,
        a: &candle_core::Tensor,
        b: &candle_core::Tensor,
        _res: &candle_core::Tensor,
        g: &candle_core::Tensor,
    ) -> candle_core::Result<(Option<candle_core::Tensor>, Option<candle_core::Tensor>)> {
        let mut v = self.backward(&[a, b], g)?.into_iter();
        Ok((v.next().flatten(), v.next().flatten()))
    }
}

impl CustomOp3 for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.forward(&[(s1, l1), (s2, l2), (s3, l3)])
    }
    #[allow(clippy::type_complexity)]
    fn bwd(
        &self,
        a: &candle_core::Tensor,
        b: &candle_core::Tensor,
        c: &candle_core::Tensor,
        _res: &candle_core::Tensor,
        g: &candle_core::Tensor,
    ) -> candle_core::Result<(Option<candle_core::Tensor>, Option<candle_core::Tensor>, Option<candle_core::Tensor>)> {
        let mut v = self.backward(&[a, b, c], g)?.into_iter();
        Ok((v.next().flatten(), v.next().flatten(), v.next().flatten()))
    }
}
