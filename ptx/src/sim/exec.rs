//! The interpreter: an entry resolved once per launch (labels to
//! instruction indices, symbols to addresses, registers to slots), then run
//! block by block, thread by thread, with warps meeting at `shfl.sync` and
//! blocks at `bar.sync`.

use std::collections::HashMap;

use super::arith;
use super::{Arg, Fault, LaunchConfig, Memory, SimError, Site, Stats};
use crate::instruction::{AtomOp, BinOp, Cmp, Label, Op, Round, ShflMode, UnOp};
use crate::module::{Function, Kind, Module, Stmt};
use crate::operand::{Address, Base, Operand, Reg, RegClass, Space, Special, Type};
use crate::valid::validate_function;

/// Where parameters, `.shared` and `.local` arrays live: 32-bit windows of
/// 16 MiB each, apart from one another and from global memory (from 2^32).
const PARAM_BASE: u64 = 0x0100_0000;
const SHARED_BASE: u64 = 0x0200_0000;
const LOCAL_BASE: u64 = 0x0300_0000;
const MAX_SHARED: u64 = 48 * 1024;
const MAX_LOCAL: u64 = 512 * 1024;
const MAX_BLOCK: u32 = 1024;
const WARP: usize = 32;

/// A register resolved to its slot in a thread's register file.
#[derive(Clone, Copy, Debug)]
struct R {
    slot: u32,
    reg: Reg,
}

#[derive(Clone, Copy, Debug)]
enum Src {
    Reg(R),
    Imm(u64),
    Special(Special),
}

#[derive(Clone, Copy, Debug)]
struct Addr {
    base: Src,
    offset: i64,
}

/// An [`Op`] with its operands resolved.
#[derive(Clone, Debug)]
enum Code {
    Ld { space: Space, ty: Type, dst: Vec<R>, addr: Addr },
    St { space: Space, ty: Type, src: Vec<Src>, addr: Addr },
    Mov { dst: R, src: Src },
    Cvt { round: Option<Round>, dst_ty: Type, src_ty: Type, dst: R, src: Src },
    Binary { op: BinOp, ty: Type, dst: R, a: Src, b: Src },
    Unary { op: UnOp, ty: Type, dst: R, a: Src },
    Mad { ty: Type, dst: R, a: Src, b: Src, c: Src },
    MulWide { ty: Type, dst: R, a: Src, b: Src },
    Setp { cmp: Cmp, ty: Type, dst: R, a: Src, b: Src },
    Selp { dst: R, a: Src, b: Src, pred: R },
    Shfl { mode: ShflMode, dst: R, src: Src, lane: Src, clamp: Src, mask: Src },
    Bar(u32),
    Atom { op: AtomOp, space: Space, ty: Type, dst: Option<R>, addr: Addr, src: Src },
    Bra(usize),
    Ret,
}

#[derive(Clone, Debug)]
struct Ins {
    /// The statement's index in the function body.
    stmt: usize,
    guard: Option<(R, bool)>,
    code: Code,
}

#[derive(Clone, Debug)]
struct ParamSlot {
    name: String,
    ty: Type,
    addr: u64,
    value: u64,
}

/// An entry resolved for one launch.
struct Kernel<'m> {
    func: &'m Function,
    code: Vec<Ins>,
    nregs: usize,
    params: Vec<ParamSlot>,
    shared_bytes: usize,
    local_bytes: usize,
}

/// Statement `stmt` of `func`, printed, and the thread at it.
fn site(func: &Function, stmt: usize, thread: Option<(u32, u32)>) -> Site {
    let instruction = match func.body.get(stmt) {
        Some(Stmt::Instr(i)) => i.to_string(),
        Some(Stmt::Label(l)) => format!("{l}:"),
        None => String::new(),
    };
    Site { function: func.name.clone(), index: stmt, instruction, thread }
}

impl Kernel<'_> {
    /// `ld.param` of `count` elements of `ty` at `addr`: one whole parameter.
    fn load_param(&self, addr: u64, ty: Type, count: usize) -> Result<u64, Fault> {
        let fail = |reason: String| Err(Fault::ParamLoad { addr, reason });
        let Some(p) = self.params.iter().find(|p| addr >= p.addr && addr < p.addr + bytes_of(p.ty)) else {
            return fail("no parameter there".into());
        };
        if addr != p.addr {
            return fail(format!("{} bytes into `{}`; the simulator reads whole parameters only", addr - p.addr, p.name));
        }
        if count != 1 {
            return fail(format!("a vector load of `{}`; the simulator reads whole parameters only", p.name));
        }
        let kinds_match = ty.is_bits() || p.ty.is_bits() || ty.is_float() == p.ty.is_float();
        if ty.bits() != p.ty.bits() || !kinds_match {
            return fail(format!("`{}` is declared `{}`, loaded as `{ty}`", p.name, p.ty));
        }
        Ok(p.value)
    }
}

fn bytes_of(ty: Type) -> u64 {
    u64::from(ty.bits().div_ceil(8))
}

fn align_up(x: u64, align: u32) -> u64 {
    let a = u64::from(align.max(1));
    x.div_ceil(a) * a
}

/// Lays out `arrays` of `space` from `base`; returns their total size.
fn lay_out(func: &Function, space: Space, base: u64, symbols: &mut HashMap<String, u64>) -> u64 {
    let mut end = 0u64;
    for a in func.arrays.iter().filter(|a| a.space == space) {
        let at = align_up(end, a.align);
        symbols.insert(a.name.clone(), base + at);
        end = at + u64::from(a.bytes);
    }
    end
}

fn compile<'m>(func: &'m Function, args: &[Arg]) -> Result<Kernel<'m>, SimError> {
    let function = func.name.clone();
    if func.params.len() != args.len() {
        return Err(SimError::ArgumentCount { function, expected: func.params.len(), given: args.len() });
    }
    let mut symbols: HashMap<String, u64> = HashMap::new();
    let mut params = Vec::with_capacity(args.len());
    let mut at = PARAM_BASE;
    for (index, (p, arg)) in func.params.iter().zip(args).enumerate() {
        let value = match (p.ty, *arg) {
            (Type::U64 | Type::B64 | Type::S64, Arg::U64(v)) => v,
            (Type::U32 | Type::B32 | Type::S32, Arg::U32(v)) => u64::from(v),
            (Type::F32, Arg::F32(v)) => u64::from(v.to_bits()),
            (Type::F64, Arg::F64(v)) => v.to_bits(),
            _ => {
                return Err(SimError::ArgumentType { function, index, param: p.name.clone(), ty: p.ty, arg: *arg });
            }
        };
        let size = bytes_of(p.ty);
        at = align_up(at, size as u32);
        symbols.insert(p.name.clone(), at);
        params.push(ParamSlot { name: p.name.clone(), ty: p.ty, addr: at, value });
        at += size;
    }
    let shared = lay_out(func, Space::Shared, SHARED_BASE, &mut symbols);
    let local = lay_out(func, Space::Local, LOCAL_BASE, &mut symbols);
    if shared > MAX_SHARED {
        return Err(SimError::Layout { function, reason: format!("{shared} bytes of .shared arrays (at most {MAX_SHARED})") });
    }
    if local > MAX_LOCAL {
        return Err(SimError::Layout { function, reason: format!("{local} bytes of .local arrays (at most {MAX_LOCAL})") });
    }

    let mut reg_base = [0u32; 5];
    let mut nregs = 0u32;
    for class in RegClass::ALL {
        reg_base[class as usize] = nregs;
        nregs = nregs.saturating_add(func.reg_count(class));
    }

    let mut labels: HashMap<Label, usize> = HashMap::new();
    let mut count = 0usize;
    for stmt in &func.body {
        match stmt {
            Stmt::Label(l) => {
                labels.insert(*l, count);
            }
            Stmt::Instr(_) => count += 1,
        }
    }

    let resolver = Resolver { func, reg_base, symbols: &symbols, labels: &labels };
    let mut code = Vec::with_capacity(count);
    for (stmt, s) in func.body.iter().enumerate() {
        let Stmt::Instr(instr) = s else { continue };
        let resolved = (|| {
            let guard = match &instr.guard {
                Some(g) => Some((resolver.reg(g.pred)?, g.negated)),
                None => None,
            };
            Ok(Ins { stmt, guard, code: resolver.op(&instr.op)? })
        })();
        code.push(resolved.map_err(|fault| SimError::Fault { site: site(func, stmt, None), fault })?);
    }
    Ok(Kernel { func, code, nregs: nregs as usize, params, shared_bytes: shared as usize, local_bytes: local as usize })
}

struct Resolver<'a> {
    func: &'a Function,
    reg_base: [u32; 5],
    symbols: &'a HashMap<String, u64>,
    labels: &'a HashMap<Label, usize>,
}

impl Resolver<'_> {
    fn reg(&self, reg: Reg) -> Result<R, Fault> {
        let declared = self.func.reg_count(reg.class);
        if reg.index >= declared {
            return Err(Fault::Undeclared { reg, declared });
        }
        Ok(R { slot: self.reg_base[reg.class as usize] + reg.index, reg })
    }

    fn symbol(&self, name: &str) -> Result<u64, Fault> {
        self.symbols.get(name).copied().ok_or_else(|| Fault::UnknownSymbol(name.to_string()))
    }

    fn src(&self, op: &Operand) -> Result<Src, Fault> {
        Ok(match op {
            Operand::Reg(r) => Src::Reg(self.reg(*r)?),
            Operand::Int(v) => Src::Imm(*v as u64),
            Operand::F32(v) => Src::Imm(u64::from(v.to_bits())),
            Operand::F64(v) => Src::Imm(v.to_bits()),
            Operand::Special(s) => Src::Special(*s),
            Operand::Symbol(s) => Src::Imm(self.symbol(s)?),
        })
    }

    fn addr(&self, a: &Address) -> Result<Addr, Fault> {
        let base = match &a.base {
            Base::Reg(r) => Src::Reg(self.reg(*r)?),
            Base::Symbol(s) => Src::Imm(self.symbol(s)?),
        };
        Ok(Addr { base, offset: a.offset })
    }

    fn op(&self, op: &Op) -> Result<Code, Fault> {
        Ok(match op {
            Op::Ld { space, ty, dst, addr, .. } => Code::Ld {
                space: *space,
                ty: *ty,
                dst: dst.iter().map(|r| self.reg(*r)).collect::<Result<_, _>>()?,
                addr: self.addr(addr)?,
            },
            Op::St { space, ty, addr, src } => Code::St {
                space: *space,
                ty: *ty,
                src: src.iter().map(|o| self.src(o)).collect::<Result<_, _>>()?,
                addr: self.addr(addr)?,
            },
            Op::Mov { dst, src, .. } => Code::Mov { dst: self.reg(*dst)?, src: self.src(src)? },
            // Generic addresses are global ones here.
            Op::CvtaTo { dst, src, .. } => Code::Mov { dst: self.reg(*dst)?, src: self.src(src)? },
            Op::Cvt { round, dst_ty, src_ty, dst, src } => {
                Code::Cvt { round: *round, dst_ty: *dst_ty, src_ty: *src_ty, dst: self.reg(*dst)?, src: self.src(src)? }
            }
            Op::Binary { op, ty, dst, a, b } => {
                Code::Binary { op: *op, ty: *ty, dst: self.reg(*dst)?, a: self.src(a)?, b: self.src(b)? }
            }
            Op::Unary { op, ty, dst, a } => Code::Unary { op: *op, ty: *ty, dst: self.reg(*dst)?, a: self.src(a)? },
            Op::Mad { ty, dst, a, b, c } | Op::Fma { ty, dst, a, b, c } => {
                Code::Mad { ty: *ty, dst: self.reg(*dst)?, a: self.src(a)?, b: self.src(b)?, c: self.src(c)? }
            }
            Op::MulWide { ty, dst, a, b } => Code::MulWide { ty: *ty, dst: self.reg(*dst)?, a: self.src(a)?, b: self.src(b)? },
            Op::Setp { cmp, ty, dst, a, b } => {
                Code::Setp { cmp: *cmp, ty: *ty, dst: self.reg(*dst)?, a: self.src(a)?, b: self.src(b)? }
            }
            Op::Selp { dst, a, b, pred, .. } => {
                Code::Selp { dst: self.reg(*dst)?, a: self.src(a)?, b: self.src(b)?, pred: self.reg(*pred)? }
            }
            Op::Shfl { mode, dst, src, lane, clamp, mask } => Code::Shfl {
                mode: *mode,
                dst: self.reg(*dst)?,
                src: self.src(src)?,
                lane: self.src(lane)?,
                clamp: self.src(clamp)?,
                mask: self.src(mask)?,
            },
            Op::BarSync(id) => Code::Bar(*id),
            Op::Red { op, space, ty, addr, src } => {
                Code::Atom { op: *op, space: *space, ty: *ty, dst: None, addr: self.addr(addr)?, src: self.src(src)? }
            }
            Op::Atom { op, space, ty, dst, addr, src } => Code::Atom {
                op: *op,
                space: *space,
                ty: *ty,
                dst: Some(self.reg(*dst)?),
                addr: self.addr(addr)?,
                src: self.src(src)?,
            },
            Op::Bra { target, .. } => Code::Bra(*self.labels.get(target).ok_or(Fault::UnknownLabel)?),
            Op::Ret => Code::Ret,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ready,
    /// Waiting at the `shfl.sync` at its pc.
    Shfl,
    /// Waiting at the `bar.sync` at its pc.
    Bar,
    Exited,
}

enum Flow {
    Next,
    Jump(usize),
    Wait(State),
    Exit,
}

/// One block's threads, and the buffers reused from block to block.
struct Block<'k, 'm> {
    k: &'k Kernel<'m>,
    ctaid: u32,
    nctaid: u32,
    ntid: u32,
    regs: Vec<u64>,
    written: Vec<bool>,
    pcs: Vec<usize>,
    states: Vec<State>,
    shared: Vec<u8>,
    local: Vec<u8>,
    steps: u64,
    limit: u64,
}

fn class_mask(class: RegClass) -> u64 {
    match class {
        RegClass::P => 1,
        RegClass::R | RegClass::F => 0xffff_ffff,
        RegClass::Rd | RegClass::Fd => u64::MAX,
    }
}

fn le_value(bytes: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    let n = bytes.len().min(8);
    x[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(x)
}

pub(super) fn launch(
    module: &Module,
    entry: &str,
    cfg: LaunchConfig,
    args: &[Arg],
    mem: &mut Memory,
    limit: u64,
) -> Result<Stats, SimError> {
    let func = module.functions.iter().find(|f| f.name == entry).ok_or_else(|| SimError::UnknownEntry(entry.to_string()))?;
    if !matches!(func.kind, Kind::Entry) {
        return Err(SimError::NotAnEntry(entry.to_string()));
    }
    let bad = |reason| SimError::LaunchConfig { function: func.name.clone(), grid: cfg.grid, block: cfg.block, reason };
    if cfg.grid == 0 {
        return Err(bad("an empty grid"));
    }
    if cfg.block == 0 || cfg.block > MAX_BLOCK {
        return Err(bad("a block has 1 to 1024 threads"));
    }
    validate_function(func)?;
    let kernel = compile(func, args)?;
    let n = cfg.block as usize;
    let mut block = Block {
        k: &kernel,
        ctaid: 0,
        nctaid: cfg.grid,
        ntid: cfg.block,
        regs: vec![0; n * kernel.nregs],
        written: vec![false; n * kernel.nregs],
        pcs: vec![0; n],
        states: vec![State::Ready; n],
        shared: vec![0; kernel.shared_bytes],
        local: vec![0; n * kernel.local_bytes],
        steps: 0,
        limit,
    };
    for ctaid in 0..cfg.grid {
        block.reset(ctaid);
        block.run(mem)?;
    }
    Ok(Stats { instructions: block.steps, threads: u64::from(cfg.grid) * u64::from(cfg.block) })
}

impl Block<'_, '_> {
    fn reset(&mut self, ctaid: u32) {
        self.ctaid = ctaid;
        self.written.fill(false);
        self.pcs.fill(0);
        self.states.fill(State::Ready);
        self.shared.fill(0);
        self.local.fill(0);
    }

    fn site(&self, t: usize, pc: usize) -> Site {
        let stmt = self.k.code.get(pc).map_or(self.k.func.body.len(), |i| i.stmt);
        site(self.k.func, stmt, Some((self.ctaid, t as u32)))
    }

    fn fault(&self, t: usize, pc: usize, fault: Fault) -> SimError {
        SimError::Fault { site: self.site(t, pc), fault }
    }

    fn run(&mut self, mem: &mut Memory) -> Result<(), SimError> {
        let n = self.states.len();
        loop {
            for t in 0..n {
                if self.states[t] == State::Ready {
                    self.run_thread(t, mem)?;
                }
            }
            if self.states.iter().all(|s| *s == State::Exited) {
                return Ok(());
            }
            if !self.shuffle()? && !self.barrier()? {
                return Err(self.deadlock());
            }
        }
    }

    /// Runs thread `t` until it waits or exits.
    fn run_thread(&mut self, t: usize, mem: &mut Memory) -> Result<(), SimError> {
        let k = self.k;
        loop {
            let pc = self.pcs[t];
            let Some(ins) = k.code.get(pc) else {
                self.states[t] = State::Exited;
                return Ok(());
            };
            if self.steps >= self.limit {
                return Err(SimError::StepLimit { site: self.site(t, pc), limit: self.limit });
            }
            self.steps += 1;
            if let Some((pred, negated)) = ins.guard {
                let p = self.read(t, Src::Reg(pred)).map_err(|f| self.fault(t, pc, f))?;
                if (p != 0) == negated {
                    self.pcs[t] = pc + 1;
                    continue;
                }
            }
            match self.exec(t, &ins.code, mem) {
                Ok(Flow::Next) => self.pcs[t] = pc + 1,
                Ok(Flow::Jump(to)) => self.pcs[t] = to,
                Ok(Flow::Wait(state)) => {
                    self.states[t] = state;
                    return Ok(());
                }
                Ok(Flow::Exit) => {
                    self.states[t] = State::Exited;
                    return Ok(());
                }
                Err(f) => return Err(self.fault(t, pc, f)),
            }
        }
    }

    fn read(&self, t: usize, src: Src) -> Result<u64, Fault> {
        match src {
            Src::Reg(r) => {
                let i = t * self.k.nregs + r.slot as usize;
                if self.written[i] {
                    Ok(self.regs[i])
                } else {
                    Err(Fault::Uninitialized(r.reg))
                }
            }
            Src::Imm(v) => Ok(v),
            Src::Special(s) => Ok(u64::from(match s {
                Special::TidX => t as u32,
                Special::NtidX => self.ntid,
                Special::CtaidX => self.ctaid,
                Special::NctaidX => self.nctaid,
                Special::LaneId => (t % WARP) as u32,
            })),
        }
    }

    fn write(&mut self, t: usize, r: R, v: u64) {
        let i = t * self.k.nregs + r.slot as usize;
        self.regs[i] = v & class_mask(r.reg.class);
        self.written[i] = true;
    }

    fn address(&self, t: usize, a: Addr) -> Result<u64, Fault> {
        Ok(self.read(t, a.base)?.wrapping_add(a.offset as u64))
    }

    /// The `len` bytes at `addr` in `space`, for thread `t`, checked for
    /// bounds and natural alignment (`align`).
    fn bytes<'a>(
        &'a mut self,
        space: Space,
        t: usize,
        addr: u64,
        len: usize,
        align: usize,
        mem: &'a mut Memory,
    ) -> Result<&'a mut [u8], Fault> {
        if !addr.is_multiple_of(align as u64) {
            return Err(Fault::Misaligned { space, addr, bytes: align });
        }
        let window = |base: u64, size: usize, store: &'a mut [u8]| {
            let at = addr.checked_sub(base).and_then(|a| usize::try_from(a).ok());
            match at {
                Some(at) if at.checked_add(len).is_some_and(|end| end <= size) => store.get_mut(at..at + len),
                _ => None,
            }
            .ok_or(Fault::OutOfBounds { space, addr, bytes: len })
        };
        match space {
            Space::Global => mem.slice_mut(addr, len),
            Space::Shared => window(SHARED_BASE, self.k.shared_bytes, &mut self.shared),
            Space::Local => {
                let size = self.k.local_bytes;
                let mine = self.local.get_mut(t * size..(t + 1) * size).unwrap_or_default();
                window(LOCAL_BASE, size, mine)
            }
            Space::Param => Err(Fault::Space { what: "a load or store through an address", space }),
        }
    }

    fn exec(&mut self, t: usize, code: &Code, mem: &mut Memory) -> Result<Flow, Fault> {
        match code {
            Code::Ld { space, ty, dst, addr } => {
                let a = self.address(t, *addr)?;
                if *space == Space::Param {
                    let v = self.k.load_param(a, *ty, dst.len())?;
                    if let Some(d) = dst.first() {
                        self.write(t, *d, v);
                    }
                    return Ok(Flow::Next);
                }
                let size = element_bytes(*ty)?;
                let total = size * dst.len();
                let mut buf = [0u8; 32];
                let out =
                    buf.get_mut(..total).ok_or_else(|| Fault::NotModelled(format!("a vector of {} elements", dst.len())))?;
                out.copy_from_slice(self.bytes(*space, t, a, total, total, mem)?);
                for (i, d) in dst.iter().enumerate() {
                    self.write(t, *d, le_value(&buf[i * size..(i + 1) * size]));
                }
            }
            Code::St { space, ty, src, addr } => {
                if *space == Space::Param {
                    return Err(Fault::ParamStore);
                }
                let a = self.address(t, *addr)?;
                let size = element_bytes(*ty)?;
                let total = size * src.len();
                let mut buf = [0u8; 32];
                if total > buf.len() {
                    return Err(Fault::NotModelled(format!("a vector of {} elements", src.len())));
                }
                for (i, s) in src.iter().enumerate() {
                    let v = self.read(t, *s)?.to_le_bytes();
                    buf[i * size..(i + 1) * size].copy_from_slice(&v[..size]);
                }
                self.bytes(*space, t, a, total, total, mem)?.copy_from_slice(&buf[..total]);
            }
            Code::Mov { dst, src } => {
                let v = self.read(t, *src)?;
                self.write(t, *dst, v);
            }
            Code::Cvt { round, dst_ty, src_ty, dst, src } => {
                let v = arith::cvt(*round, *dst_ty, *src_ty, self.read(t, *src)?)?;
                self.write(t, *dst, v);
            }
            Code::Binary { op, ty, dst, a, b } => {
                let v = arith::binary(*op, *ty, self.read(t, *a)?, self.read(t, *b)?)?;
                self.write(t, *dst, v);
            }
            Code::Unary { op, ty, dst, a } => {
                let v = arith::unary(*op, *ty, self.read(t, *a)?)?;
                self.write(t, *dst, v);
            }
            Code::Mad { ty, dst, a, b, c } => {
                let v = arith::mad(*ty, self.read(t, *a)?, self.read(t, *b)?, self.read(t, *c)?)?;
                self.write(t, *dst, v);
            }
            Code::MulWide { ty, dst, a, b } => {
                let v = arith::mul_wide(*ty, self.read(t, *a)?, self.read(t, *b)?)?;
                self.write(t, *dst, v);
            }
            Code::Setp { cmp, ty, dst, a, b } => {
                let v = arith::setp(*cmp, *ty, self.read(t, *a)?, self.read(t, *b)?)?;
                self.write(t, *dst, u64::from(v));
            }
            Code::Selp { dst, a, b, pred } => {
                let v = if self.read(t, Src::Reg(*pred))? != 0 { self.read(t, *a)? } else { self.read(t, *b)? };
                self.write(t, *dst, v);
            }
            Code::Shfl { .. } => return Ok(Flow::Wait(State::Shfl)),
            Code::Bar(_) => return Ok(Flow::Wait(State::Bar)),
            Code::Atom { op, space, ty, dst, addr, src } => {
                if !matches!(space, Space::Global | Space::Shared) {
                    return Err(Fault::Space { what: "an atomic", space: *space });
                }
                let a = self.address(t, *addr)?;
                let v = self.read(t, *src)?;
                let size = element_bytes(*ty)?;
                let bytes = self.bytes(*space, t, a, size, size, mem)?;
                let old = le_value(bytes);
                let new = arith::atom(*op, *ty, old, v)?;
                bytes.copy_from_slice(&new.to_le_bytes()[..size]);
                if let Some(d) = dst {
                    self.write(t, *d, old);
                }
            }
            Code::Bra(to) => return Ok(Flow::Jump(*to)),
            Code::Ret => return Ok(Flow::Exit),
        }
        Ok(Flow::Next)
    }

    /// Performs every `shfl.sync` whose mask has fully arrived; whether any
    /// did.
    fn shuffle(&mut self) -> Result<bool, SimError> {
        let n = self.states.len();
        let mut progress = false;
        for lo in (0..n).step_by(WARP) {
            let width = (n - lo).min(WARP);
            let present: u32 = if width == WARP { u32::MAX } else { (1u32 << width) - 1 };
            let mut done = 0u32;
            for lane in 0..width {
                let t = lo + lane;
                if self.states[t] != State::Shfl || done & (1 << lane) != 0 {
                    continue;
                }
                let pc = self.pcs[t];
                let members = self.shuffle_group(lo, lane, present).map_err(|f| self.fault(t, pc, f))?;
                if let Some(members) = members {
                    self.perform_shuffle(lo, members, pc).map_err(|(m, f)| self.fault(lo + m as usize, pc, f))?;
                    done |= members;
                    progress = true;
                }
            }
        }
        Ok(progress)
    }

    fn shfl_operands(&self, t: usize) -> Option<(ShflMode, R, Src, Src, Src, Src)> {
        match self.k.code.get(self.pcs[t]).map(|i| &i.code) {
            Some(Code::Shfl { mode, dst, src, lane, clamp, mask }) => Some((*mode, *dst, *src, *lane, *clamp, *mask)),
            _ => None,
        }
    }

    /// The lanes of the `shfl.sync` lane `lane` (of the warp from thread
    /// `lo`) waits at, once they have all arrived.
    fn shuffle_group(&self, lo: usize, lane: usize, present: u32) -> Result<Option<u32>, Fault> {
        let t = lo + lane;
        let Some((.., mask_src)) = self.shfl_operands(t) else {
            return Err(Fault::NotModelled("a thread waits at a shfl.sync that is not there".into()));
        };
        let mask = self.read(t, mask_src)? as u32;
        if mask & (1 << lane) == 0 {
            return Err(Fault::ShflNotInMask { lane: lane as u32, mask });
        }
        let members = mask & present;
        let mut ready = true;
        for m in lanes(members) {
            let tm = lo + m as usize;
            match self.states[tm] {
                State::Exited => return Err(Fault::ShflExited { lane: m, mask }),
                State::Shfl if self.pcs[tm] != self.pcs[t] => {
                    let index = self.k.code.get(self.pcs[tm]).map_or(0, |i| i.stmt);
                    return Err(Fault::ShflDiverged { lane: m, mask, index });
                }
                State::Shfl => {
                    let other = self.shfl_operands(tm).map_or(Ok(0), |o| self.read(tm, o.5))? as u32;
                    if other != mask {
                        return Err(Fault::ShflMaskMismatch { lane: m, mask, other });
                    }
                }
                State::Bar | State::Ready => ready = false,
            }
        }
        Ok(ready.then_some(members))
    }

    /// Every lane of `members` reads its source lane's value; the error
    /// names the lane that failed.
    fn perform_shuffle(&mut self, lo: usize, members: u32, pc: usize) -> Result<(), (u32, Fault)> {
        let mut values = [0u32; WARP];
        for m in lanes(members) {
            let tm = lo + m as usize;
            let (_, _, src, ..) = self.shfl_operands(tm).ok_or((m, Fault::NotModelled("a lost shfl.sync".into())))?;
            values[m as usize] = self.read(tm, src).map_err(|f| (m, f))? as u32;
        }
        let mut results = [0u32; WARP];
        for m in lanes(members) {
            let tm = lo + m as usize;
            let (mode, _, _, lane, clamp, _) =
                self.shfl_operands(tm).ok_or((m, Fault::NotModelled("a lost shfl.sync".into())))?;
            let b = self.read(tm, lane).map_err(|f| (m, f))? as u32;
            let c = self.read(tm, clamp).map_err(|f| (m, f))? as u32;
            let j = arith::shfl_source(mode, m, b, c);
            if members & (1 << j) == 0 {
                return Err((m, Fault::ShflInactiveSource { source_lane: j, mask: members }));
            }
            results[m as usize] = values[j as usize];
        }
        for m in lanes(members) {
            let tm = lo + m as usize;
            if let Some((_, dst, ..)) = self.shfl_operands(tm) {
                self.write(tm, dst, u64::from(results[m as usize]));
            }
            self.pcs[tm] = pc + 1;
            self.states[tm] = State::Ready;
        }
        Ok(())
    }

    /// Releases the barrier if every thread that has not exited waits at
    /// one; whether it did.
    fn barrier(&mut self) -> Result<bool, SimError> {
        let mut first: Option<(usize, u32)> = None;
        for t in 0..self.states.len() {
            match self.states[t] {
                State::Exited => {}
                State::Bar => {
                    let id = match self.k.code.get(self.pcs[t]).map(|i| &i.code) {
                        Some(Code::Bar(id)) => *id,
                        _ => return Err(self.fault(t, self.pcs[t], Fault::NotModelled("a lost bar.sync".into()))),
                    };
                    match first {
                        None => first = Some((t, id)),
                        Some((t0, id0)) if id0 != id => {
                            let fault = Fault::BarrierMismatch { id, thread: t0 as u32, other: id0 };
                            return Err(self.fault(t, self.pcs[t], fault));
                        }
                        Some(_) => {}
                    }
                }
                State::Shfl | State::Ready => return Ok(false),
            }
        }
        if first.is_none() {
            return Ok(false);
        }
        for t in 0..self.states.len() {
            if self.states[t] == State::Bar {
                self.pcs[t] += 1;
                self.states[t] = State::Ready;
            }
        }
        Ok(true)
    }

    /// Names a thread that waits forever and what for.
    fn deadlock(&self) -> SimError {
        let n = self.states.len();
        for t in 0..n {
            if self.states[t] != State::Shfl {
                continue;
            }
            let (lo, lane) = (t - t % WARP, t % WARP);
            let mask = self.shfl_operands(t).and_then(|o| self.read(t, o.5).ok()).unwrap_or(0) as u32;
            for m in lanes(mask) {
                let tm = lo + m as usize;
                if tm < n && self.states[tm] == State::Bar {
                    let stmt = self.k.code.get(self.pcs[tm]).map_or(0, |i| i.stmt);
                    let what =
                        format!("lane {lane} waits at `shfl.sync` for lane {m}, which waits at `bar.sync` (statement {stmt})");
                    return self.fault(t, self.pcs[t], Fault::Deadlock(what));
                }
            }
        }
        let t = self.states.iter().position(|s| *s != State::Exited).unwrap_or(0);
        self.fault(t, self.pcs.get(t).copied().unwrap_or(0), Fault::Deadlock("no thread can go on".into()))
    }
}

fn element_bytes(ty: Type) -> Result<usize, Fault> {
    match ty.bits() {
        32 => Ok(4),
        64 => Ok(8),
        _ => Err(Fault::NotModelled(format!("loads and stores of {ty}"))),
    }
}

/// The set bits of `mask`, lowest first.
fn lanes(mask: u32) -> impl Iterator<Item = u32> {
    (0..32u32).filter(move |m| mask & (1 << m) != 0)
}
