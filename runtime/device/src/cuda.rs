//! [`CudaDevice`]: an NVIDIA GPU through `cudarc`'s driver API, which loads
//! `libcuda.so` at run time, so this builds on machines without CUDA.
//!
//! `cudarc` panics where the driver library or one of its symbols is
//! missing. So [`CudaDevice::open`] checks for the library before any
//! driver call, and every call into the bindings runs under
//! `catch_unwind`: a machine without a driver gets [`GpuError::NoDriver`],
//! an old driver a [`GpuError::DriverPanicked`], never an abort.
//!
//! Memory goes through the driver's raw calls with device addresses (the
//! trait's currency); `cudarc`'s per-slice event tracking is off, because
//! kernels receive addresses it cannot see: the caller orders the two
//! streams with events ([`GpuDevice::wait`]).

use std::any::Any;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::result as raw;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaStream, DriverError, PushKernelArg};

use crate::cache::LoadedModule;
use crate::context::{
    DeviceBuffer, Event, EventImpl, GpuDevice, GpuError, HostBuffer, HostMemory, LaunchArg, LaunchShape, Result, Stream,
};

/// One GPU: a context, a compute stream and a copy stream.
pub struct CudaDevice {
    ordinal: u32,
    sm: u32,
    ctx: Arc<CudaContext>,
    compute: Arc<CudaStream>,
    copy: Arc<CudaStream>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice(cuda:{}, sm_{})", self.ordinal, self.sm)
    }
}

/// Run a call into the bindings, turning a driver error or a panic into a
/// [`GpuError`] naming what was being done.
fn guarded<T>(what: &'static str, f: impl FnOnce() -> std::result::Result<T, DriverError>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(GpuError::Driver { what, source }),
        Err(_) => Err(GpuError::DriverPanicked { what }),
    }
}

/// Device memory from `cuMemAlloc`; freed on drop.
struct CudaAlloc {
    ctx: Arc<CudaContext>,
    ptr: sys::CUdeviceptr,
}

impl Drop for CudaAlloc {
    fn drop(&mut self) {
        // Nobody to tell on failure; a failed free leaks device memory
        // until the context goes.
        let ctx = &self.ctx;
        let ptr = self.ptr;
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if ctx.bind_to_thread().is_ok() {
                // SAFETY: `ptr` came from `malloc_sync` in this context and
                // is freed once, here; callers synchronize the streams that
                // used it before dropping the buffer.
                let _ = unsafe { raw::free_sync(ptr) };
            }
        }));
    }
}

/// Page-locked host memory from `cuMemHostAlloc`; freed on drop.
struct PinnedHost {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is owned by this value alone and only reached
// through `&self`/`&mut self`; page-locked memory is ordinary host memory
// to every thread.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for PinnedHost {}

impl HostMemory for PinnedHost {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialized bytes (zeroed at
        // allocation) for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        let (ctx, ptr) = (&self.ctx, self.ptr);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            if ctx.bind_to_thread().is_ok() {
                // SAFETY: `ptr` came from `malloc_host` and is freed once;
                // a copy from it is fenced by the owning `HostBuffer`,
                // whose fence event is dropped (after completing) first
                // only if the caller synchronized: callers synchronize the
                // copy stream before dropping staging buffers.
                let _ = unsafe { raw::free_host(ptr as *mut std::ffi::c_void) };
            }
        }));
    }
}

struct CudaEventImpl(CudaEvent);

impl EventImpl for CudaEventImpl {
    fn synchronize(&self) -> Result<()> {
        guarded("waiting for an event", || self.0.synchronize())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A loaded module's entries.
struct CudaModuleEntries(HashMap<String, CudaFunction>);

impl CudaDevice {
    /// Open GPU `ordinal`: an error, never a panic, when there is no driver
    /// or no such GPU.
    pub fn open(ordinal: u32) -> Result<CudaDevice> {
        // SAFETY: only tries to load the library by name.
        let present = catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err(GpuError::NoDriver);
        }
        let count = match catch_unwind(CudaContext::device_count) {
            Ok(Ok(n)) => u32::try_from(n).unwrap_or(0),
            Ok(Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE))) => 0,
            Ok(Err(source)) => return Err(GpuError::Driver { what: "counting GPUs", source }),
            Err(_) => return Err(GpuError::DriverPanicked { what: "counting GPUs" }),
        };
        if ordinal >= count {
            return Err(GpuError::NoGpu { ordinal, count });
        }
        let ctx = guarded("creating a context", || CudaContext::new(ordinal as usize))?;
        // SAFETY: no slice of this context exists yet; the streams are
        // ordered by the caller's events (see the module doc).
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = guarded("reading the compute capability", || ctx.compute_capability())?;
        let compute = guarded("creating the compute stream", || ctx.new_stream())?;
        let copy = guarded("creating the copy stream", || ctx.new_stream())?;
        let sm = u32::try_from(major * 10 + minor).unwrap_or(80);
        Ok(CudaDevice { ordinal, sm, ctx, compute, copy })
    }

    fn stream(&self, s: Stream) -> &Arc<CudaStream> {
        match s {
            Stream::Compute => &self.compute,
            Stream::Copy => &self.copy,
        }
    }

    fn bind(&self, what: &'static str) -> Result<()> {
        guarded(what, || self.ctx.bind_to_thread())
    }
}

impl GpuDevice for CudaDevice {
    fn name(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }
    fn sm(&self) -> u32 {
        self.sm
    }
    fn default_budget(&self) -> u64 {
        match guarded("reading free memory", || self.ctx.mem_get_info()) {
            Ok((free, _)) => free as u64 / 4 * 3,
            Err(_) => 1 << 30,
        }
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.bind("allocating device memory")?;
        let size = bytes.max(1);
        // SAFETY: a fresh allocation of `size` bytes in the bound context.
        let ptr = guarded("allocating device memory", || unsafe { raw::malloc_sync(size) })?;
        let buf = DeviceBuffer { addr: ptr, bytes, _owner: Box::new(CudaAlloc { ctx: self.ctx.clone(), ptr }) };
        let stream = self.compute.cu_stream();
        // SAFETY: `ptr` holds `size` bytes; the stream is this context's.
        guarded("zeroing device memory", || unsafe { raw::memset_d8_async(ptr, 0, size, stream) })?;
        guarded("zeroing device memory", || self.compute.synchronize())?;
        Ok(buf)
    }
    fn alloc_host(&self, bytes: usize) -> Result<HostBuffer> {
        self.bind("allocating pinned host memory")?;
        let len = bytes.max(1);
        // SAFETY: a fresh page-locked allocation of `len` bytes.
        let ptr = guarded("allocating pinned host memory", || unsafe { raw::malloc_host(len, 0) })? as *mut u8;
        // SAFETY: `ptr` holds `len` writable bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        // `len` is one byte more than asked for an empty buffer; its
        // slices are the size asked.
        let mem = PinnedHost { ctx: self.ctx.clone(), ptr, len: bytes };
        Ok(HostBuffer { mem: Box::new(mem), fence: None })
    }
    fn upload(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<()> {
        dst.check("an upload", offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.bind("an upload")?;
        let s = self.stream(stream);
        let cu = s.cu_stream();
        // SAFETY: the destination range was checked against the buffer;
        // the stream is synchronized before `src` is given back, so the
        // copy never outlives it, whatever memory it is.
        guarded("an upload", || unsafe { raw::memcpy_htod_async(dst.addr + offset as u64, src, cu) })?;
        guarded("an upload", || s.synchronize())
    }
    fn upload_staged(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, src: &mut HostBuffer, len: usize) -> Result<()> {
        dst.check("a staged upload", offset, len)?;
        let have = src.len();
        if len > have {
            return Err(GpuError::OutOfBounds { what: "a staged upload's source", offset: 0, len, bytes: have });
        }
        if len == 0 {
            return Ok(());
        }
        if src.mem.as_any().downcast_ref::<PinnedHost>().is_none() {
            return Err(GpuError::WrongDevice("a staging buffer"));
        }
        // An earlier copy from these bytes is done before they are read
        // again (it is, in program order on one stream; this keeps the
        // fence single).
        if let Some(e) = src.fence.take() {
            e.synchronize()?;
        }
        self.bind("a staged upload")?;
        let s = self.stream(stream);
        let cu = s.cu_stream();
        let bytes = &src.mem.bytes()[..len];
        // SAFETY: page-locked source bytes that the fence below keeps from
        // being written or freed until the copy is done (HostBuffer's
        // contract); the destination range was checked.
        guarded("a staged upload", || unsafe { raw::memcpy_htod_async(dst.addr + offset as u64, bytes, cu) })?;
        src.fence = Some(self.record(stream)?);
        Ok(())
    }
    fn download(&self, stream: Stream, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        src.check("a download", offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.bind("a download")?;
        let s = self.stream(stream);
        let cu = s.cu_stream();
        // SAFETY: the source range was checked; the stream is synchronized
        // before `dst` is given back.
        guarded("a download", || unsafe { raw::memcpy_dtoh_async(dst, src.addr + offset as u64, cu) })?;
        guarded("a download", || s.synchronize())
    }
    fn copy(
        &self,
        stream: Stream,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        src.check("a device copy's source", src_offset, len)?;
        dst.check("a device copy's destination", dst_offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind("a device copy")?;
        let cu = self.stream(stream).cu_stream();
        // SAFETY: both ranges were checked against their buffers.
        guarded("a device copy", || unsafe {
            raw::memcpy_dtod_async(dst.addr + dst_offset as u64, src.addr + src_offset as u64, len, cu)
        })
    }
    fn zero(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, len: usize) -> Result<()> {
        dst.check("a fill", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.bind("a fill")?;
        let cu = self.stream(stream).cu_stream();
        // SAFETY: the range was checked against the buffer.
        guarded("a fill", || unsafe { raw::memset_d8_async(dst.addr + offset as u64, 0, len, cu) })
    }
    fn load(&self, module: &tiga_ptx::Module) -> Result<LoadedModule> {
        let text = module.print();
        let m = guarded("loading a PTX module", || self.ctx.load_module(cudarc::nvrtc::Ptx::from_src(text)))?;
        let mut functions = HashMap::new();
        let mut entries = Vec::new();
        for f in module.functions.iter().filter(|f| matches!(f.kind, tiga_ptx::Kind::Entry)) {
            let func = guarded("finding a module's entry", || m.load_function(&f.name))?;
            functions.insert(f.name.clone(), func);
            entries.push(f.name.clone());
        }
        Ok(LoadedModule { inner: Box::new(CudaModuleEntries(functions)), entries })
    }
    unsafe fn launch(
        &self,
        stream: Stream,
        module: &LoadedModule,
        entry: &str,
        shape: LaunchShape,
        args: &[LaunchArg],
    ) -> Result<()> {
        let m = module.inner.downcast_ref::<CudaModuleEntries>().ok_or(GpuError::WrongDevice("a module"))?;
        let func = m.0.get(entry).ok_or_else(|| GpuError::NoEntry(entry.to_string()))?;
        let s = self.stream(stream);
        let cfg =
            cudarc::driver::LaunchConfig { grid_dim: (shape.grid, 1, 1), block_dim: (shape.block, 1, 1), shared_mem_bytes: 0 };
        guarded("a launch", || {
            let mut b = s.launch_builder(func);
            for a in args {
                match a {
                    LaunchArg::U32(x) => b.arg(x),
                    LaunchArg::U64(x) => b.arg(x),
                    LaunchArg::F32(x) => b.arg(x),
                    LaunchArg::F64(x) => b.arg(x),
                };
            }
            // SAFETY: the caller's contract (every pointer argument is
            // device memory of this context holding what the entry reads
            // and writes); scalar arguments match the entry's parameter
            // types, as the lowering declares them.
            unsafe { b.launch(cfg) }.map(|_| ())
        })
    }
    fn record(&self, stream: Stream) -> Result<Event> {
        let s = self.stream(stream);
        let e = guarded("recording an event", || s.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)))?;
        Ok(Event(Box::new(CudaEventImpl(e))))
    }
    fn wait(&self, stream: Stream, event: &Event) -> Result<()> {
        let e = event.0.as_any().downcast_ref::<CudaEventImpl>().ok_or(GpuError::WrongDevice("an event"))?;
        let s = self.stream(stream);
        guarded("waiting for an event", || s.wait(&e.0))
    }
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f64> {
        fn get(e: &Event) -> Result<&CudaEventImpl> {
            e.0.as_any().downcast_ref::<CudaEventImpl>().ok_or(GpuError::WrongDevice("an event"))
        }
        let (a, b) = (get(start)?, get(end)?);
        guarded("timing events", || a.0.elapsed_ms(&b.0)).map(f64::from)
    }
    fn synchronize(&self) -> Result<()> {
        guarded("synchronizing the compute stream", || self.compute.synchronize())?;
        guarded("synchronizing the copy stream", || self.copy.synchronize())
    }
}
