//! Device global memory: separately allocated buffers at fake addresses.

use std::collections::BTreeMap;

use super::{Fault, SimError};
use crate::operand::Space;

/// The first buffer's address: above 2^32, so a global address truncated to
/// 32 bits never lands in a buffer.
const GLOBAL_BASE: u64 = 1 << 32;
const ALIGN: u64 = 256;

/// Device global memory: separately allocated buffers at fake, 256-byte
/// aligned, non-overlapping 64-bit addresses (never 0); any access outside
/// a live buffer is an error. At least 256 bytes lie between two buffers, so
/// a small overrun is caught rather than landing in a neighbour, and freed
/// addresses are never handed out again, so a use after free is caught too.
#[derive(Debug)]
pub struct Memory {
    buffers: BTreeMap<u64, Vec<u8>>,
    next: u64,
    live: usize,
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl Memory {
    pub fn new() -> Self {
        Memory { buffers: BTreeMap::new(), next: GLOBAL_BASE, live: 0 }
    }

    /// A zero-filled buffer of `bytes` bytes; returns its device address.
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        let addr = self.next;
        let span = (bytes as u64).div_ceil(ALIGN).saturating_mul(ALIGN).saturating_add(ALIGN);
        self.next = addr.saturating_add(span);
        self.buffers.insert(addr, vec![0; bytes]);
        self.live += bytes;
        addr
    }

    /// Frees the buffer that starts at `addr`.
    pub fn free(&mut self, addr: u64) -> Result<(), SimError> {
        match self.buffers.remove(&addr) {
            Some(buf) => {
                self.live -= buf.len();
                Ok(())
            }
            None => Err(SimError::Memory(Fault::NotABuffer(addr))),
        }
    }

    /// Copies `bytes` to `addr`, which may lie inside a buffer; the whole
    /// range must lie in one live buffer.
    pub fn write(&mut self, addr: u64, bytes: &[u8]) -> Result<(), SimError> {
        self.slice_mut(addr, bytes.len()).map_err(SimError::Memory)?.copy_from_slice(bytes);
        Ok(())
    }

    /// Fills `out` from `addr`; the whole range must lie in one live buffer.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), SimError> {
        out.copy_from_slice(self.slice(addr, out.len()).map_err(SimError::Memory)?);
        Ok(())
    }

    /// The bytes of all live buffers.
    pub fn bytes_allocated(&self) -> usize {
        self.live
    }

    fn locate(&self, addr: u64, len: usize) -> Option<(u64, usize)> {
        let (&start, buf) = self.buffers.range(..=addr).next_back()?;
        let at = usize::try_from(addr - start).ok()?;
        (at.checked_add(len)? <= buf.len()).then_some((start, at))
    }

    pub(super) fn slice(&self, addr: u64, len: usize) -> Result<&[u8], Fault> {
        let out = || Fault::OutOfBounds { space: Space::Global, addr, bytes: len };
        let (start, at) = self.locate(addr, len).ok_or_else(out)?;
        self.buffers.get(&start).and_then(|b| b.get(at..at + len)).ok_or_else(out)
    }

    pub(super) fn slice_mut(&mut self, addr: u64, len: usize) -> Result<&mut [u8], Fault> {
        let out = || Fault::OutOfBounds { space: Space::Global, addr, bytes: len };
        let (start, at) = self.locate(addr, len).ok_or_else(out)?;
        self.buffers.get_mut(&start).and_then(|b| b.get_mut(at..at + len)).ok_or_else(out)
    }
}
