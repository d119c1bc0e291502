//! A device context and what it hands out: buffers, modules, launches,
//! streams and events, on CUDA or the simulator, behind one interface.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cache::{EntryLaunch, LoadedKernel, LoadedModule, ModuleKey};

/// What can go wrong on a device, with the failing layer's own error as the
/// source.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// This build has no CUDA support.
    #[error(
        "this build has no CUDA runtime: it was built without the `cuda` feature (rebuild with `--features cuda`, e.g. \
         `cargo build --release -p tigac --features cuda`)"
    )]
    NotBuilt,
    /// No driver library on this machine.
    #[error(
        "no CUDA driver: libcuda.so was not found (is the NVIDIA driver installed, and is its library on the loader's path?)"
    )]
    NoDriver,
    /// A device ordinal this machine does not have.
    #[error("no CUDA device {ordinal}: this machine has {count} GPU(s)")]
    NoGpu { ordinal: u32, count: u32 },
    /// A driver call failed.
    #[cfg(feature = "cuda")]
    #[error("CUDA driver: {what}: {source}")]
    Driver {
        what: &'static str,
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// The driver bindings panicked (a symbol missing from an old driver,
    /// say); caught so that a call fails instead of the process.
    #[error("CUDA driver: {what} failed inside the driver bindings (is the driver too old for CUDA 12.8 bindings?)")]
    DriverPanicked { what: &'static str },
    /// The PTX simulator refused a copy or a launch.
    #[error("PTX simulator: {what}: {source}")]
    Sim {
        what: &'static str,
        #[source]
        source: tiga_ptx::sim::SimError,
    },
    /// A copy outside its buffer.
    #[error("{what}: bytes {offset}..{end} of a {bytes}-byte device buffer", end = offset.saturating_add(*len))]
    OutOfBounds { what: &'static str, offset: usize, len: usize, bytes: usize },
    /// A handle (buffer, module, event) made by another device.
    #[error("{0} belongs to another device")]
    WrongDevice(&'static str),
    /// A launch of an entry the module does not have.
    #[error("the module has no entry `{0}`")]
    NoEntry(String),
    /// What a call needs on the device does not fit its memory budget.
    #[error("{what} needs {needed} bytes of device memory, over the budget of {budget} bytes")]
    Budget { what: String, needed: u64, budget: u64 },
    /// A size the PTX ABI cannot express (`num_rows` is a `u32`).
    #[error("{0}")]
    TooLarge(String),
    /// The rows of a streamed call could not be read (a page of a file).
    #[error(transparent)]
    Rows(#[from] tiga_runtime::exec::ExecError),
    /// A broken invariant of a streamed call (a bug, not a user error).
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = GpuError> = std::result::Result<T, E>;

/// One kernel argument, as the PTX entry declares it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LaunchArg {
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// A 1-D launch: `grid` blocks of `block` threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    pub grid: u32,
    pub block: u32,
}

/// The two queues of a device. Work on one stream runs in order; work on
/// the two may overlap (a page's copy with the previous page's kernel) and
/// is ordered by events ([`GpuDevice::wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Compute,
    Copy,
}

/// A point in a stream's work, for ordering and timing. Dropping it
/// destroys it.
pub struct Event(pub(crate) Box<dyn EventImpl>);

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Event")
    }
}

/// What a device's event does.
pub(crate) trait EventImpl: Send + Sync {
    /// Block until the work before the event is done.
    fn synchronize(&self) -> Result<()>;
    fn as_any(&self) -> &dyn Any;
}

impl Event {
    /// Wait on the host until the work recorded before the event is done.
    pub fn synchronize(&self) -> Result<()> {
        self.0.synchronize()
    }
}

/// Device memory: an address and a size; the owner frees it on drop.
pub struct DeviceBuffer {
    pub(crate) addr: u64,
    pub(crate) bytes: usize,
    pub(crate) _owner: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.addr, self.bytes)
    }
}

impl DeviceBuffer {
    /// The device address of byte 0 (what a kernel's pointer argument is).
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// The address of byte `offset` (at most the buffer's size).
    pub fn addr_at(&self, offset: usize) -> Result<u64> {
        self.check("an address", offset, 0)?;
        Ok(self.addr + offset as u64)
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The buffer's `len` bytes from `offset` exist.
    pub(crate) fn check(&self, what: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(()),
            _ => Err(GpuError::OutOfBounds { what, offset, len, bytes: self.bytes }),
        }
    }
}

/// Host memory a device copies from asynchronously (page-locked on CUDA, so
/// a copy can overlap a kernel). While a copy from it may be in flight it
/// is fenced: [`HostBuffer::as_mut_slice`] waits for the copy first, so the
/// host never overwrites bytes still being read.
pub struct HostBuffer {
    pub(crate) mem: Box<dyn HostMemory>,
    pub(crate) fence: Option<Event>,
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuffer({} bytes)", self.mem.bytes().len())
    }
}

/// A device's host memory (pinned, or a plain vector).
pub(crate) trait HostMemory: Send + Sync {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
    /// (CUDA checks that a staging buffer is its own pinned memory.)
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn as_any(&self) -> &dyn Any;
}

impl HostMemory for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl HostBuffer {
    pub fn len(&self) -> usize {
        self.mem.bytes().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, once no copy reads them any more.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        if let Some(e) = self.fence.take() {
            e.synchronize()?;
        }
        Ok(self.mem.bytes_mut())
    }
}

/// Time spent by one launch, or the sum of several, as events saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceTime {
    pub ms: f64,
    pub launches: u64,
}

/// A GPU (or the simulator of one): the operations a call's host path
/// needs. Object-safe, so a call picks its device at run time from the
/// schedule.
pub trait GpuDevice: Send + Sync {
    /// `cuda:N` or `sim`.
    fn name(&self) -> String;
    /// The `sm_XX` the PTX is lowered for (the device's compute
    /// capability; the simulator runs any).
    fn sm(&self) -> u32;
    /// Bytes of device memory a call may use when its schedule does not
    /// say: most of what is free now (the simulator: 1 GiB).
    fn default_budget(&self) -> u64;
    /// Zero-filled device memory, ready for use on either stream when this
    /// returns. A size of 0 gives a valid, empty buffer.
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer>;
    /// Host memory for staged copies ([`GpuDevice::upload_staged`]).
    fn alloc_host(&self, bytes: usize) -> Result<HostBuffer>;
    /// Copy `src` into `dst` from byte `offset`, after the stream's earlier
    /// work. `src` may be reused when this returns.
    fn upload(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<()>;
    /// Copy bytes `..len` of `src` into `dst` from `offset`, asynchronously
    /// on CUDA; `src` is fenced until the copy is done.
    fn upload_staged(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, src: &mut HostBuffer, len: usize) -> Result<()>;
    /// Copy `dst.len()` bytes of `src` from `offset` into `dst`, after the
    /// stream's earlier work; `dst` holds them when this returns.
    fn download(&self, stream: Stream, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<()>;
    /// Copy `len` bytes between device buffers on the stream.
    fn copy(
        &self,
        stream: Stream,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()>;
    /// Zero `len` bytes of `dst` from `offset`, on the stream.
    fn zero(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, len: usize) -> Result<()>;
    /// Load a module (CUDA: its printed text, assembled by the driver).
    fn load(&self, module: &tiga_ptx::Module) -> Result<LoadedModule>;
    /// Launch `entry` of `module` on the stream.
    ///
    /// # Safety
    /// Every pointer argument must be the address of device memory of this
    /// device that stays allocated until the launch is done and holds what
    /// the entry reads and writes at every index it can reach for these
    /// arguments (the simulator checks every access; a GPU does not).
    unsafe fn launch(
        &self,
        stream: Stream,
        module: &LoadedModule,
        entry: &str,
        shape: LaunchShape,
        args: &[LaunchArg],
    ) -> Result<()>;
    /// An event after the stream's work so far.
    fn record(&self, stream: Stream) -> Result<Event>;
    /// Make `stream`'s later work wait for `event`.
    fn wait(&self, stream: Stream, event: &Event) -> Result<()>;
    /// Milliseconds between two recorded events (waits for `end`).
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f64>;
    /// Wait until both streams are idle.
    fn synchronize(&self) -> Result<()>;
}

/// A device and the modules loaded on it: what a call finds through
/// [`open`](crate::open). Modules are loaded once per [`ModuleKey`] and kept for the
/// process (a kernel's module is a few kilobytes).
pub struct GpuContext {
    pub(crate) device: Box<dyn GpuDevice>,
    pub(crate) modules: Mutex<HashMap<ModuleKey, Arc<LoadedKernel>>>,
    /// Launches serialize on a device: a call owns both streams from its
    /// first upload to its last download.
    pub(crate) calls: Mutex<()>,
}

impl std::fmt::Debug for GpuContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuContext({})", self.device.name())
    }
}

impl GpuContext {
    pub fn new(device: Box<dyn GpuDevice>) -> GpuContext {
        GpuContext { device, modules: Mutex::new(HashMap::new()), calls: Mutex::new(()) }
    }

    pub fn device(&self) -> &dyn GpuDevice {
        self.device.as_ref()
    }

    /// The module for `key`, lowered by `lower` and loaded on first use.
    /// Returns it and whether it was cached. A lowering error is returned
    /// and not kept (lowering again costs microseconds).
    pub fn module<E: From<GpuError>>(
        &self,
        key: ModuleKey,
        lower: impl FnOnce() -> std::result::Result<(tiga_ptx::Module, EntryLaunch), E>,
    ) -> std::result::Result<(Arc<LoadedKernel>, bool), E> {
        if let Some(m) = self.modules.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok((m.clone(), true));
        }
        let (module, launch) = lower()?;
        let loaded = Arc::new(LoadedKernel::new(self.device.load(&module)?, launch));
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        Ok((modules.entry(key).or_insert(loaded).clone(), false))
    }

    /// How many modules are loaded (for `explain` and tests).
    pub fn modules_loaded(&self) -> usize {
        self.modules.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Hold the device for one call (see `calls`).
    pub fn begin_call(&self) -> std::sync::MutexGuard<'_, ()> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}
