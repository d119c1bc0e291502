//! The GPU layer: device memory, modules, launches, streams and event
//! timing behind one object-safe trait ([`GpuDevice`]), with two
//! implementations:
//!
//! - [`SimDevice`]: the PTX simulator (`tiga_ptx::sim`), always built. It
//!   runs every thread of a launch on the CPU, slowly, so the whole host
//!   path of a GPU call (upload, launch, download, parameter partial sums,
//!   paging) is exercised on machines without a GPU. Copies are synchronous
//!   and events read the wall clock.
//! - `CudaDevice` (cargo feature `cuda`): an NVIDIA GPU through `cudarc`'s
//!   driver API, loaded at run time. A machine without a driver gets
//!   [`GpuError::NoDriver`] from [`open`], never a panic.
//!
//! The trait speaks in device addresses (`u64`): a kernel argument that is
//! a buffer is its address ([`DeviceBuffer::addr`]), as in the PTX entry's
//! `.param .u64`, so a launch is the same list of numbers on both devices.
//! Owners free their memory on drop. Two streams ([`Stream`]) let a paged
//! call copy page k+1 while page k computes; events order them.
//!
//! The runtime knows nothing of the kernel IR or of the PTX lowering: the
//! facade lowers a kernel to a [`tiga_ptx::Module`] and hands it here;
//! [`GpuContext`] keeps one loaded module per [`ModuleKey`] per device,
//! and [`run_rows`] streams a call's rows through it in pages.

mod cache;
mod call;
mod context;
#[cfg(feature = "cuda")]
mod cuda;
mod sim;

pub use cache::{EntryLaunch, LoadedKernel, LoadedModule, ModuleKey};
pub use call::{run_rows, CallArrays};
#[cfg(feature = "cuda")]
pub use cuda::CudaDevice;
pub use sim::SimDevice;

pub use context::*;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tiga_runtime::schedule::Device;

/// The context of `device`, opened on first use and kept for the process
/// (a CUDA context costs a few hundred milliseconds to create). `None` for
/// [`Device::Cpu`].
pub fn open(device: Device) -> Result<Option<Arc<GpuContext>>> {
    static OPEN: OnceLock<Mutex<HashMap<Device, Arc<GpuContext>>>> = OnceLock::new();
    if device == Device::Cpu {
        return Ok(None);
    }
    let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = open.get(&device) {
        return Ok(Some(c.clone()));
    }
    let dev: Box<dyn GpuDevice> = match device {
        Device::Cpu => return Ok(None),
        Device::Simulated => Box::new(SimDevice::new()),
        Device::Cuda(ordinal) => open_cuda(ordinal)?,
    };
    let c = Arc::new(GpuContext::new(dev));
    open.insert(device, c.clone());
    Ok(Some(c))
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: u32) -> Result<Box<dyn GpuDevice>> {
    Ok(Box::new(CudaDevice::open(ordinal)?))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: u32) -> Result<Box<dyn GpuDevice>> {
    Err(GpuError::NotBuilt)
}

/// Whether this build can open CUDA devices (the `cuda` feature).
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");
