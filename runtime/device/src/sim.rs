//! [`SimDevice`]: the PTX simulator as a device, for checking the GPU path
//! on machines without a GPU. One memory, one queue: both streams run in
//! program order, every copy is done when it returns, and an event is the
//! wall clock when it was recorded.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tiga_ptx::sim::{self, Memory};

use crate::cache::LoadedModule;
use crate::context::{DeviceBuffer, Event, EventImpl, GpuDevice, GpuError, HostBuffer, LaunchArg, LaunchShape, Result, Stream};

/// The simulator's device (see the module doc). Instructions and threads
/// run so far are counted ([`SimDevice::stats`]).
pub struct SimDevice {
    mem: Arc<Mutex<Memory>>,
    stats: Mutex<(u64, u64)>,
}

impl Default for SimDevice {
    fn default() -> Self {
        SimDevice::new()
    }
}

impl std::fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimDevice")
    }
}

/// A simulated allocation; dropping it frees it.
struct SimAlloc {
    mem: Arc<Mutex<Memory>>,
    addr: u64,
}

impl Drop for SimAlloc {
    fn drop(&mut self) {
        // A free of an address this allocation owns cannot fail; there is
        // nobody to tell if it did.
        let _ = lock(&self.mem).free(self.addr);
    }
}

struct SimEvent(Instant);

impl EventImpl for SimEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn lock(mem: &Mutex<Memory>) -> MutexGuard<'_, Memory> {
    mem.lock().unwrap_or_else(|p| p.into_inner())
}

fn sim_err(what: &'static str) -> impl FnOnce(sim::SimError) -> GpuError {
    move |source| GpuError::Sim { what, source }
}

impl SimDevice {
    pub fn new() -> SimDevice {
        SimDevice { mem: Arc::new(Mutex::new(Memory::new())), stats: Mutex::new((0, 0)) }
    }

    /// Instructions and threads executed by every launch so far.
    pub fn stats(&self) -> (u64, u64) {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes allocated now (a test checks that a call frees what it took).
    pub fn bytes_allocated(&self) -> usize {
        lock(&self.mem).bytes_allocated()
    }
}

impl GpuDevice for SimDevice {
    fn name(&self) -> String {
        "sim".into()
    }
    fn sm(&self) -> u32 {
        80
    }
    fn default_budget(&self) -> u64 {
        1 << 30
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        // One byte at least, so that every buffer has an address of its own.
        let addr = lock(&self.mem).alloc(bytes.max(1));
        Ok(DeviceBuffer { addr, bytes, _owner: Box::new(SimAlloc { mem: self.mem.clone(), addr }) })
    }
    fn alloc_host(&self, bytes: usize) -> Result<HostBuffer> {
        Ok(HostBuffer { mem: Box::new(vec![0u8; bytes]), fence: None })
    }
    fn upload(&self, _stream: Stream, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<()> {
        dst.check("an upload", offset, src.len())?;
        lock(&self.mem).write(dst.addr + offset as u64, src).map_err(sim_err("an upload"))
    }
    fn upload_staged(&self, stream: Stream, dst: &DeviceBuffer, offset: usize, src: &mut HostBuffer, len: usize) -> Result<()> {
        let bytes = src.as_mut_slice()?;
        let part = bytes.get(..len).ok_or(GpuError::OutOfBounds {
            what: "a staged upload's source",
            offset: 0,
            len,
            bytes: bytes.len(),
        })?;
        self.upload(stream, dst, offset, part)
    }
    fn download(&self, _stream: Stream, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        src.check("a download", offset, dst.len())?;
        lock(&self.mem).read(src.addr + offset as u64, dst).map_err(sim_err("a download"))
    }
    fn copy(
        &self,
        _stream: Stream,
        dst: &DeviceBuffer,
        dst_offset: usize,
        src: &DeviceBuffer,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        src.check("a device copy's source", src_offset, len)?;
        dst.check("a device copy's destination", dst_offset, len)?;
        let mut tmp = vec![0u8; len];
        let mut mem = lock(&self.mem);
        mem.read(src.addr + src_offset as u64, &mut tmp).map_err(sim_err("a device copy"))?;
        mem.write(dst.addr + dst_offset as u64, &tmp).map_err(sim_err("a device copy"))
    }
    fn zero(&self, _stream: Stream, dst: &DeviceBuffer, offset: usize, len: usize) -> Result<()> {
        dst.check("a fill", offset, len)?;
        lock(&self.mem).write(dst.addr + offset as u64, &vec![0u8; len]).map_err(sim_err("a fill"))
    }
    fn load(&self, module: &tiga_ptx::Module) -> Result<LoadedModule> {
        let entries = module.functions.iter().filter(|f| f.kind == tiga_ptx::Kind::Entry).map(|f| f.name.clone()).collect();
        Ok(LoadedModule { inner: Box::new(Arc::new(module.clone())), entries })
    }
    unsafe fn launch(
        &self,
        _stream: Stream,
        module: &LoadedModule,
        entry: &str,
        shape: LaunchShape,
        args: &[LaunchArg],
    ) -> Result<()> {
        let m = module.inner.downcast_ref::<Arc<tiga_ptx::Module>>().ok_or(GpuError::WrongDevice("a module"))?;
        if !module.entries.iter().any(|e| e == entry) {
            return Err(GpuError::NoEntry(entry.to_string()));
        }
        let args: Vec<sim::Arg> = args
            .iter()
            .map(|a| match *a {
                LaunchArg::U32(x) => sim::Arg::U32(x),
                LaunchArg::U64(x) => sim::Arg::U64(x),
                LaunchArg::F32(x) => sim::Arg::F32(x),
                LaunchArg::F64(x) => sim::Arg::F64(x),
            })
            .collect();
        let cfg = sim::LaunchConfig { grid: shape.grid, block: shape.block };
        let stats = sim::launch(m, entry, cfg, &args, &mut lock(&self.mem)).map_err(sim_err("a launch"))?;
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += stats.instructions;
        s.1 += stats.threads;
        Ok(())
    }
    fn record(&self, _stream: Stream) -> Result<Event> {
        Ok(Event(Box::new(SimEvent(Instant::now()))))
    }
    fn wait(&self, _stream: Stream, _event: &Event) -> Result<()> {
        Ok(())
    }
    fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f64> {
        let at = |e: &Event| e.0.as_any().downcast_ref::<SimEvent>().map(|s| s.0).ok_or(GpuError::WrongDevice("an event"));
        Ok(at(end)?.saturating_duration_since(at(start)?).as_secs_f64() * 1e3)
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiga_ptx::{Address, BinOp, FunctionBuilder, Module, Op, Space, Special, Type};

    #[test]
    fn copies_round_trip_and_stay_in_bounds() {
        let d = SimDevice::new();
        {
            let b = d.alloc(16).expect("alloc");
            let mut zeros = [1u8; 16];
            d.download(Stream::Compute, &b, 0, &mut zeros).expect("download");
            assert_eq!(zeros, [0u8; 16], "fresh memory is zeroed");
            d.upload(Stream::Copy, &b, 4, &[1, 2, 3, 4]).expect("upload");
            let mut host = d.alloc_host(3).expect("host");
            host.as_mut_slice().expect("bytes").copy_from_slice(&[7, 8, 9]);
            d.upload_staged(Stream::Copy, &b, 12, &mut host, 3).expect("staged");
            let mut out = [0u8; 16];
            d.download(Stream::Compute, &b, 0, &mut out).expect("download");
            assert_eq!(out, [0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 7, 8, 9, 0]);
            let err = d.upload(Stream::Copy, &b, 14, &[0; 4]).expect_err("past the end");
            assert!(matches!(err, GpuError::OutOfBounds { offset: 14, len: 4, bytes: 16, .. }), "{err}");
            let c = d.alloc(8).expect("alloc");
            d.copy(Stream::Compute, &c, 0, &b, 4, 8).expect("device copy");
            d.zero(Stream::Compute, &c, 2, 2).expect("zero");
            let mut out = [0u8; 8];
            d.download(Stream::Compute, &c, 0, &mut out).expect("download");
            assert_eq!(out, [1, 2, 0, 0, 0, 0, 0, 0]);
            assert!(d.bytes_allocated() >= 24);
        }
        assert_eq!(d.bytes_allocated(), 0, "buffers free their memory when dropped");
    }

    /// out[tid] = tid as f32 over one block of 8 threads.
    #[test]
    fn launches_a_module() {
        let mut b = FunctionBuilder::entry("iota");
        let out = b.param("out", Type::U64);
        let base = b.reg(Type::U64);
        b.push(Op::Ld { space: Space::Param, nc: false, ty: Type::U64, dst: vec![base], addr: Address::symbol(out, 0) });
        let tid = b.mov(Type::U32, Special::TidX);
        let off = b.reg(Type::U64);
        b.push(Op::MulWide { ty: Type::U32, dst: off, a: tid.into(), b: 4.into() });
        let p = b.binary(BinOp::Add, Type::U64, base, off);
        let x = b.cvt(Type::F32, Type::U32, tid);
        b.push(Op::St { space: Space::Global, ty: Type::F32, addr: Address::reg(p, 0), src: vec![x.into()] });
        b.push(Op::Ret);
        let mut m = Module::new(80);
        m.functions.push(b.finish());
        let d = SimDevice::new();
        let loaded = d.load(&m).expect("load");
        assert_eq!(loaded.entries(), ["iota"]);
        let buf = d.alloc(32).expect("alloc");
        let t0 = d.record(Stream::Compute).expect("event");
        // SAFETY: `out` is a live 32-byte buffer; 8 threads write 4 bytes each.
        unsafe { d.launch(Stream::Compute, &loaded, "iota", LaunchShape { grid: 1, block: 8 }, &[LaunchArg::U64(buf.addr())]) }
            .expect("launch");
        let end = d.record(Stream::Compute).expect("event");
        assert!(d.elapsed_ms(&t0, &end).expect("elapsed") >= 0.0);
        let mut bytes = [0u8; 32];
        d.download(Stream::Compute, &buf, 0, &mut bytes).expect("download");
        let got: Vec<f32> = bytes.chunks(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect();
        assert_eq!(got, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(d.stats().1, 8, "threads run");
        // SAFETY: as above; the entry does not exist, so nothing runs.
        let err =
            unsafe { d.launch(Stream::Compute, &loaded, "nope", LaunchShape { grid: 1, block: 1 }, &[]) }.expect_err("no entry");
        assert!(matches!(err, GpuError::NoEntry(_)), "{err}");
    }
}
