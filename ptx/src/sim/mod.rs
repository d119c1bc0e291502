//! A CPU simulator for the PTX this crate models, so that the modules tiga's
//! back end builds can be checked against a reference on machines without a
//! GPU, and the host side of a GPU runtime (upload, launch, download,
//! paging) can be tested against [`Memory`] and [`launch`].
//!
//! [`launch`] validates the module's `.entry` ([`crate::validate_function`]),
//! resolves its labels and symbols once, and runs it over a 1-D grid: the
//! blocks one after the other, the threads of a block one at a time in
//! thread order, each until it reaches a `shfl.sync`, a `bar.sync` or its
//! end. Everything is deterministic.
//!
//! # What is modelled
//!
//! - Every [`Op`](crate::Op) with its guard. Registers are per thread and
//!   hold 64 bits (an `f32` as its bits); reading one that was never written
//!   is an error, since its value would be undefined on hardware.
//! - Integer arithmetic wraps; `mul.wide` gives 64 bits; `div`/`rem` by zero
//!   is an error (hardware gives an unspecified value); shifts clamp as PTX
//!   does (a shift by the width or more gives 0, or the sign for `shr.s*`).
//! - Float arithmetic rounds to nearest even (`add sub mul div.rn`,
//!   `rcp.rn`, `sqrt.rn`); `fma.rn` and float `mad.rn` are fused. `min`/`max`
//!   return the other operand when exactly one is NaN, NaN when both are,
//!   and order `-0.0` below `+0.0`. `neg`/`abs` flip/clear the sign bit.
//!   `setp`'s ordered comparisons are false on NaN, the `u` forms true.
//! - `cvt`: integer to integer truncates or extends by the source's
//!   signedness; `.rn .rz .rm .rp` round exactly to float; `.rni .rzi .rmi
//!   .rpi` to integers, saturating to the destination's range, NaN to 0.
//! - State spaces. Global memory is [`Memory`]: buffers at fake 64-bit
//!   addresses (from 2^32 up, so a global address cut to 32 bits is caught),
//!   never adjacent, never reused; an access outside a live buffer is an
//!   error. Kernel parameters, `.shared` arrays (one copy per block) and
//!   `.local` arrays (one copy per thread) live in windows of 32-bit
//!   addresses below 2^26 (`mov` of a symbol gives its address there), so an
//!   address of the wrong space is caught too. Generic addresses are global
//!   ones: `cvta.to.<space>` is the identity. Every access must be naturally
//!   aligned for its whole width (a `.v4.f32` on 16 bytes). `ld.param` reads
//!   one whole parameter with a type of its size (and its kind, unless either
//!   is a `.b` type); kernels cannot store to parameters.
//! - Warps of 32 consecutive threads (lane = `%tid.x % 32`). A `shfl.sync`
//!   happens once every thread of its mask has arrived at it; all must be at
//!   the same statement with the same mask, none may have exited, each must
//!   be in its own mask, and a thread must not read a lane outside the mask
//!   (its value would be undefined). Lanes the mask names beyond a partial
//!   last warp are ignored. Modes and the clamp operand follow the ISA's
//!   formula (`maxLane`, `minLane` and the segment mask in `c[12:8]`).
//!   `bar.sync` releases once every thread of the block that has not exited
//!   has arrived (all at the same barrier number).
//! - `red`/`atom` (global and shared) act one thread at a time, which is one
//!   valid interleaving; `atom/red.add.f32` flushes subnormals to zero as
//!   the ISA says.
//! - Hangs: a launch stops with [`SimError::StepLimit`] after
//!   [`DEFAULT_STEP_LIMIT`] instructions ([`launch_with_limit`] sets
//!   another), and a block whose threads all wait on one another stops with
//!   a deadlock error.
//!
//! # What is not
//!
//! - Approximation error: `div.approx`, `rcp.approx`, `sqrt.approx`,
//!   `ex2.approx` and `lg2.approx` are computed correctly rounded.
//! - NaN payloads (hardware returns a canonical NaN from arithmetic; here
//!   it is whatever the host produces), subnormal flushing outside `atom`.
//! - Concurrency: no races are detected, and threads never interleave
//!   between a `ld` and a `st`; memory is always coherent (`.nc` loads are
//!   plain loads).
//! - Uninitialized `.shared` and `.local` memory reads as zero rather than
//!   being caught; `.func` helpers cannot be launched (there is no `call`).
//! - Timing, occupancy, and launch limits other than 1..=1024 threads per
//!   block, 48 KiB of static shared memory and 512 KiB of local memory per
//!   thread.

mod arith;
mod exec;
mod memory;

use std::fmt;

use thiserror::Error;

use crate::module::Module;
use crate::operand::{Reg, Space, Type};
use crate::valid::ValidationError;

pub use memory::Memory;

/// The instruction budget of [`launch`]: 2^32 instructions over all threads.
pub const DEFAULT_STEP_LIMIT: u64 = 1 << 32;

/// A kernel argument, matched against the entry's `.param` types in order
/// (U64 for .u64/.b64/.s64 params, U32 for .u32/.b32/.s32, F32, F64).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// A 1-D launch: `grid` blocks of `block` threads (1..=1024, any count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: u32,
    pub block: u32,
}

/// What a launch did: instructions reached (a guarded-off one counts, a
/// label does not) and threads run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub instructions: u64,
    pub threads: u64,
}

/// Where a fault happened: the function, the statement's index in its body,
/// the instruction as printed and, once the kernel runs, the block and
/// thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    pub function: String,
    pub index: usize,
    pub instruction: String,
    /// `(block, thread)`; `None` before any thread runs.
    pub thread: Option<(u32, u32)>,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, statement {} `{}`", self.function, self.index, self.instruction)?;
        if let Some((block, thread)) = self.thread {
            write!(f, " (block {block}, thread {thread})")?;
        }
        Ok(())
    }
}

/// A launch or a memory call the simulator refuses.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("no function `{0}` in the module")]
    UnknownEntry(String),
    #[error("`{0}` is a `.func`, not an `.entry`")]
    NotAnEntry(String),
    #[error("{function}: {expected} parameters, {given} arguments")]
    ArgumentCount { function: String, expected: usize, given: usize },
    #[error("{function}: argument {index} ({arg:?}) does not fit parameter `{param}` of type `{ty}`")]
    ArgumentType { function: String, index: usize, param: String, ty: Type, arg: Arg },
    #[error("{function}: a launch of {grid} blocks of {block} threads: {reason}")]
    LaunchConfig { function: String, grid: u32, block: u32, reason: &'static str },
    #[error("{function}: {reason}")]
    Layout { function: String, reason: String },
    #[error("the entry does not validate: {0}")]
    Invalid(#[from] ValidationError),
    #[error("{site}: {fault}")]
    Fault { site: Site, fault: Fault },
    #[error("{site}: the step limit of {limit} instructions is reached (an endless loop?)")]
    StepLimit { site: Site, limit: u64 },
    /// A host-side [`Memory`] call out of bounds or on no buffer.
    #[error("{0}")]
    Memory(Fault),
}

/// What went wrong at a [`Site`] (or in a [`Memory`] call).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Fault {
    #[error("register `{0}` is read before it is written")]
    Uninitialized(Reg),
    #[error("register `{reg}` is used but only {declared} are declared")]
    Undeclared { reg: Reg, declared: u32 },
    #[error("`{space}` access of {bytes} bytes at {addr:#x} is outside every live buffer of that space")]
    OutOfBounds { space: Space, addr: u64, bytes: usize },
    #[error("`{space}` access of {bytes} bytes at {addr:#x} is not {bytes}-byte aligned")]
    Misaligned { space: Space, addr: u64, bytes: usize },
    #[error("integer division by zero")]
    DivisionByZero,
    #[error("`ld.param` at {addr:#x}: {reason}")]
    ParamLoad { addr: u64, reason: String },
    #[error("a kernel cannot store to its parameters")]
    ParamStore,
    #[error("`{what}` in the `{space}` state space")]
    Space { what: &'static str, space: Space },
    #[error("not modelled: {0}")]
    NotModelled(String),
    #[error("unknown symbol `{0}`")]
    UnknownSymbol(String),
    #[error("branch to a label that is not placed")]
    UnknownLabel,
    #[error("`shfl.sync`: lane {lane} is not in its own mask {mask:#010x}")]
    ShflNotInMask { lane: u32, mask: u32 },
    #[error("`shfl.sync`: lane {lane} of the mask {mask:#010x} has exited")]
    ShflExited { lane: u32, mask: u32 },
    #[error("`shfl.sync`: lane {lane} of the mask {mask:#010x} waits at another `shfl.sync` (statement {index})")]
    ShflDiverged { lane: u32, mask: u32, index: usize },
    #[error("`shfl.sync`: lane {lane} names the mask {other:#010x}, this lane {mask:#010x}")]
    ShflMaskMismatch { lane: u32, mask: u32, other: u32 },
    #[error("`shfl.sync`: source lane {source_lane} does not take part (mask {mask:#010x}); its value is undefined")]
    ShflInactiveSource { source_lane: u32, mask: u32 },
    #[error("`bar.sync {id}` while thread {thread} waits at `bar.sync {other}`")]
    BarrierMismatch { id: u32, thread: u32, other: u32 },
    #[error("deadlock: {0}")]
    Deadlock(String),
    #[error("{0:#x} is not the start of a live buffer")]
    NotABuffer(u64),
}

/// Runs `entry` of `module` over the grid, with at most
/// [`DEFAULT_STEP_LIMIT`] instructions. Deterministic.
pub fn launch(module: &Module, entry: &str, cfg: LaunchConfig, args: &[Arg], mem: &mut Memory) -> Result<Stats, SimError> {
    launch_with_limit(module, entry, cfg, args, mem, DEFAULT_STEP_LIMIT)
}

/// [`launch`] with an instruction budget of `limit` over all threads;
/// reaching it is [`SimError::StepLimit`].
pub fn launch_with_limit(
    module: &Module,
    entry: &str,
    cfg: LaunchConfig,
    args: &[Arg],
    mem: &mut Memory,
    limit: u64,
) -> Result<Stats, SimError> {
    exec::launch(module, entry, cfg, args, mem, limit)
}
