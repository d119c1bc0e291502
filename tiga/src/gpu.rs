//! The GPU arm of a call: the same bound fields as the CPU's, the kernel
//! lowered to PTX (`compiler::back::ptx::lower_kernel`, once per device,
//! dtype and widths), and the rows handed to the device runtime, which
//! streams them through the device in pages (`tiga_device::run_rows`).
//! One path serves every realization.
//!
//! A kernel the PTX back end does not lower is an error naming the kernel
//! and what is missing ([`Error::GpuLowering`]); a call never falls back to
//! the CPU on its own.

use std::sync::Arc;

use tiga_compiler::back::ptx::lower_kernel;
use tiga_compiler::bind::{output_shapes, Extents};
use tiga_compiler::ir::Role;
use tiga_device::{CallArrays, EntryLaunch, GpuContext, GpuError, LoadedKernel, ModuleKey, Place};
use tiga_runtime::{DType, Rows, Schedule};

use crate::call::bind_extents;
use crate::error::{Error, Result};
use crate::fields::{Inputs, Outputs};
use crate::kernel::Kernel;

/// Where a field or output of `role` lives on the device.
fn place(role: Role) -> Place {
    match role {
        Role::Src => Place::Src,
        Role::Dst => Place::Dst,
        Role::Edge => Place::Edge,
        Role::Param => Place::Param,
    }
}

impl Kernel {
    /// This kernel's module on `ctx`'s device for `dtype` and `widths`:
    /// lowered and loaded on first use, then cached on the device. Returns
    /// it and whether it was cached.
    pub(crate) fn device_kernel(&self, ctx: &GpuContext, dtype: DType, widths: &[usize]) -> Result<(Arc<LoadedKernel>, bool)> {
        let sm = ctx.device().sm();
        let key = ModuleKey { kernel: format!("{}#{}", self.name(), self.hash), dtype, widths: widths.to_vec(), sm };
        ctx.module(key, || {
            let pk = lower_kernel(self.loop_kernel(), dtype, widths, sm)
                .map_err(|source| Error::GpuLowering { kernel: self.name().to_string(), source })?;
            let launch = EntryLaunch { entry: pk.entry, block: pk.block, threads_per_row: pk.threads_per_row };
            Ok((pk.module, launch))
        })
    }

    /// Lower and load this kernel for `device`, `dtype` and `widths`
    /// ahead of a call (what `tigac run --timing` reports as its compile
    /// time on a GPU). Returns whether the module was cached already.
    pub fn prepare_device(&self, device: tiga_runtime::Device, dtype: DType, widths: &[usize]) -> Result<bool> {
        let ctx = tiga_device::open(device)?
            .ok_or_else(|| Error::Unsupported("prepare_device wants a GPU device (cuda:N or sim), not the CPU".into()))?;
        Ok(self.device_kernel(&ctx, dtype, widths)?.1)
    }

    /// Run over `rows` on `ctx`'s device (see the module doc).
    pub(crate) fn run_device(
        &self,
        ctx: &GpuContext,
        rows: &Rows<'_>,
        extents: Extents,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        if let Rows::Generated(st) = rows {
            // The device walks a CSR: the stencil's, built once (the same
            // numbers as Graph::stencil's).
            crate::call::stencil_extents(self.captured(), st)?;
            let g = rows.to_graph(extents.num_src, schedule)?;
            return self.run_device(ctx, &Rows::Memory(g), extents, inputs, schedule);
        }
        let k = self.captured();
        let b = bind_extents(k, extents, inputs)?;
        // The PTX back end has no half-width loads or stores.
        b.full_width_only(self.loop_kernel(), "GPU")?;
        let (kernel, _) = self.device_kernel(ctx, b.dtype, &b.widths)?;
        let shapes = output_shapes(k, &b.extents, &b.widths);
        let out_of_core = matches!(rows, Rows::Pages(p) if p.out_of_core());
        let mut outs = self.row_output_buffers(&shapes, b.dtype, extents.num_dst, out_of_core, schedule)?;
        let _held = ctx.begin_call();
        if let (Some(p), Rows::Pages(_)) = (&schedule.progress, rows) {
            p.announce(extents.num_dst as u64);
        }
        let arrays = CallArrays {
            name: self.name(),
            fields: &b.views,
            field_places: k.fields.iter().map(|f| place(f.role)).collect(),
            output_places: k.outputs.iter().map(|o| place(o.role)).collect(),
            shapes: &shapes,
            dtype: b.dtype,
        };
        tiga_device::run_rows(ctx.device(), &kernel, &arrays, rows, schedule, &mut outs).map_err(|e| match e {
            GpuError::Rows(e) => Error::Exec(e),
            GpuError::Internal(m) => Error::Internal(m),
            e => Error::Gpu(e),
        })?;
        Ok(self.outputs(outs))
    }
}
