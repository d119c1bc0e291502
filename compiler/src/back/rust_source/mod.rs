//! The Rust-source back end: a loop-kernel variant as Rust text.
//!
//! The `#[message_passing]` macro emits this text into the user's crate for
//! a set of common widths (see [`AOT_WIDTHS`]), so rustc/LLVM compiles the
//! lowered loops ahead of time with the user's target features: feature
//! loops have constant trip counts and unit stride, which LLVM unrolls and
//! vectorizes to the machine's full vector width (256-bit AVX2 here, where
//! Cranelift's x64 vectors are 128-bit). The runtime prefers such a variant
//! when one matches the call and falls back to the Cranelift JIT otherwise.
//!
//! For kernels that can run on a generated stencil (no edge fields), a
//! second kind of variant reads the grid from the argument block instead
//! of a CSR (module `stencil`, [`emit_stencil_variant`]).
//!
//! The emitted function has the same ABI as the JIT's ([`tiga_abi`])
//! and the same scalar semantics (`interp::apply_unary`/`apply_binary`:
//! relu and leaky_relu by comparison, min/max as Rust's, `powi` as
//! `f32::powi`, `exp`/`ln`/`tanh` from std).

mod stencil;

use std::fmt::Write as _;

use crate::ir::{BinOp, CmpOp, DType, FieldType, Role, Type, UnOp};
use crate::loops::{fields_read, verify, Addr, Inst, LoopKernel, LoopVar, LoopVerifyError, Stmt, Storage, Var, VarKind};

pub use stencil::{emit_stencil_variant, stencil_refusal};

/// Widths the macro compiles ahead of time: each of these for a kernel with
/// one width symbol, and with several (a matrix parameter `[O, F]` beside
/// vectors of `F`), each of these for all of them at once, the square
/// layer `F → F` (other widths and mixed ones use the JIT).
pub const AOT_WIDTHS: [usize; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

#[derive(Debug, thiserror::Error)]
pub enum RustSourceError {
    /// The loop kernel breaks a rule of the loop IR's verifier (a
    /// hand-built or corrupted kernel; the scheduler's output never does).
    #[error("malformed {source}")]
    Malformed {
        #[from]
        source: LoopVerifyError,
    },
    /// A verified kernel the emitter still could not write: a bug in tiga,
    /// reported rather than panicking.
    #[error("internal error: the Rust-source back end could not emit verified loop kernel `{kernel}`: {message}")]
    Internal { kernel: String, message: String },
    /// A generated-stencil variant of a kernel that cannot run on one.
    #[error("kernel `{kernel}` has no generated-stencil variant: {why}")]
    NotStencil { kernel: String, why: &'static str },
    /// A storage the variant cannot have (half types in an f64 variant, or
    /// one that does not name every field and output).
    #[error("kernel `{kernel}`: {message}")]
    Storage { kernel: String, message: String },
}

struct Emitter<'a> {
    k: &'a LoopKernel,
    widths: &'a [usize],
    t: &'static str,
    dtype: DType,
    /// How fields and outputs are stored (half-width ones are `u16` bits,
    /// widened on load and rounded on store by the ABI crate's
    /// `half_bits`, as the Cranelift back end does).
    storage: &'a Storage,
    /// The path of the ABI crate in the emitted code (`RawArgs`,
    /// `half_bits`).
    abi: &'a str,
    /// Variables that are never NaN ([`crate::loops::never_nan`]).
    not_nan: Vec<bool>,
    /// Whether statements are emitted for a block of rows at once (a
    /// generated stencil's interior, [`row_block`]): each variable is an
    /// array with one element per row, indexed by the row's lane `l`.
    block: bool,
    /// Accumulators of the feature loop being emitted that are summed as
    /// [`PARTIAL_SUMS`] partial sums (`acc = acc + x` becomes `place =
    /// place + x`): each with the place of its lane's partial sum.
    partial: Vec<(u32, String)>,
    out: String,
}

/// Partial sums of a feature loop's accumulators (`acc = acc + x`): lane
/// `k` adds into sum `k % 8`, and the sums, added pairwise, are added to
/// `acc` after the loop. Summed in one chain, a dot product is as slow as
/// the chain of adds (rustc keeps the scalar order: reassociating would
/// change the bits); eight independent chains are what LLVM vectorizes,
/// one AVX2 vector of f32. The dense layer's forward (`W·h`, F = 64, 100k
/// rows, `tiga-bench dense`): 65 ms as one chain, 47 ms in 8 partial sums
/// (16 or 32: the same), the JIT's four partial sums 40 ms.
const PARTIAL_SUMS: usize = 8;

/// `sums[at] + … + sums[at + n - 1]` added pairwise (`n` a power of two):
/// a tree of depth log2 n rather than a chain of n adds.
fn pairwise(sums: &str, at: usize, n: usize) -> String {
    if n == 1 {
        format!("{sums}[{at}]")
    } else {
        format!("({} + {})", pairwise(sums, at, n / 2), pairwise(sums, at + n / 2, n / 2))
    }
}

/// Where the AVX2 copy of the body puts its `cfg` and `target_feature`
/// attributes (the baseline copy drops the line).
const TARGET_ATTRS: &str = "// TARGET ATTRIBUTES";

fn lit(c: f64, t: &str) -> String {
    if c.is_nan() {
        format!("({t}::NAN)")
    } else if c == f64::INFINITY {
        format!("({t}::INFINITY)")
    } else if c == f64::NEG_INFINITY {
        format!("({t}::NEG_INFINITY)")
    } else {
        format!("({c:?}f64 as {t})")
    }
}

impl Emitter<'_> {
    fn err(&self, m: impl Into<String>) -> RustSourceError {
        RustSourceError::Internal { kernel: self.k.name.clone(), message: m.into() }
    }

    /// How variable `x` is named where it is read or set.
    fn var(&self, x: &Var) -> String {
        if self.block {
            format!("w{}[l]", x.0)
        } else {
            format!("v{}", x.0)
        }
    }

    fn width(&self, w: crate::ir::WidthId) -> Result<usize, RustSourceError> {
        self.widths.get(w.0 as usize).copied().ok_or_else(|| self.err(format!("width {} not given", w.0)))
    }

    fn per_row(&self, ty: Type) -> Result<usize, RustSourceError> {
        Ok(match ty {
            Type::Vector(w) => self.width(w)?,
            Type::Matrix(r, c) => self.width(r)? * self.width(c)?,
            _ => 1,
        })
    }

    fn lane_index(&self, ty: Type, lanes: &[LoopVar]) -> Result<String, RustSourceError> {
        Ok(match (ty, lanes) {
            (_, []) => "0".into(),
            (Type::Vector(_), [k]) => format!("k{}", k.0),
            (Type::Matrix(_, c), [r, k]) => format!("k{} * {} + k{}", r.0, self.width(c)?, k.0),
            _ => return Err(self.err("lane count does not fit the type")),
        })
    }

    fn addr(&self, a: &Addr) -> Result<String, RustSourceError> {
        match a {
            Addr::Field { field, lanes } => {
                let fd = self.k.fields.get(field.0 as usize).ok_or_else(|| self.err("unknown field"))?;
                let per = self.per_row(fd.ty)?;
                let row = match fd.role {
                    Role::Src => format!("j * {per} + "),
                    Role::Dst => format!("i * {per} + "),
                    Role::Edge => format!("e * {per} + "),
                    Role::Param => String::new(),
                };
                Ok(format!("*f{}.add({row}{})", field.0, self.lane_index(fd.ty, lanes)?))
            }
            Addr::Scratch { buf, lane } => Ok(format!("s{buf}[k{}]", lane.0)),
            Addr::OutputMatrix { out, row, col } => {
                let od = self.k.outputs.get(*out as usize).ok_or_else(|| self.err("unknown output"))?;
                let Type::Matrix(_, c) = od.ty else { return Err(self.err("matrix address of a non-matrix output")) };
                Ok(format!("*o{out}.add(k{} * {} + k{})", row.0, self.width(c)?, col.0))
            }
            Addr::Output { out, lane } => {
                let od = self.k.outputs.get(*out as usize).ok_or_else(|| self.err("unknown output"))?;
                let per = self.per_row(od.ty)?;
                let row = match od.role {
                    Role::Edge => format!("e * {per} + "),
                    Role::Param => String::new(),
                    _ => format!("i * {per} + "),
                };
                let l = lane.map(|l| format!("k{}", l.0)).unwrap_or_else(|| "0".into());
                Ok(format!("*o{out}.add({row}{l})"))
            }
        }
    }

    /// How the memory `a` addresses is stored in this variant.
    fn stored_type(&self, a: &Addr) -> FieldType {
        self.storage.stored(a, self.dtype)
    }

    /// The element type of field `f`'s or output `o`'s pointer: the
    /// variant's number type, or `u16` for half-width bits.
    fn elem(&self, stored: FieldType) -> &'static str {
        if stored.is_half() {
            "u16"
        } else {
            self.t
        }
    }

    /// The value at `a`, widened (exactly) when stored at half width.
    fn load(&self, a: &Addr) -> Result<String, RustSourceError> {
        let place = self.addr(a)?;
        Ok(match self.stored_type(a) {
            FieldType::F16 => format!("{}::half_bits::f16_bits_to_f32({place})", self.abi),
            FieldType::BF16 => format!("{}::half_bits::bf16_bits_to_f32({place})", self.abi),
            _ => place,
        })
    }

    fn inst(&self, i: &Inst) -> Result<String, RustSourceError> {
        let t = self.t;
        let v = |x: &Var| self.var(x);
        Ok(match i {
            Inst::Const(c) => {
                // A boolean constant comes from folding a comparison.
                lit(*c, t)
            }
            Inst::Load(a) => self.load(a)?,
            Inst::Copy(x) => v(x),
            Inst::Degree => format!("(deg as {t})"),
            Inst::Rank => format!("(rank as {t})"),
            Inst::Unary(u, x) => {
                let x = v(x);
                match u {
                    UnOp::Neg => format!("-{x}"),
                    UnOp::Abs => format!("{x}.abs()"),
                    UnOp::Exp => format!("{x}.exp()"),
                    UnOp::Ln => format!("{x}.ln()"),
                    UnOp::Sqrt => format!("{x}.sqrt()"),
                    UnOp::Tanh => format!("{x}.tanh()"),
                    UnOp::Sigmoid => format!("(1.0 as {t}) / ((1.0 as {t}) + (-{x}).exp())"),
                    UnOp::Relu => format!("if {x} > (0.0 as {t}) {{ {x} }} else {{ 0.0 as {t} }}"),
                    UnOp::Not => format!("!{x}"),
                }
            }
            Inst::Binary(op @ (BinOp::Min | BinOp::Max), xv, yv)
                if self.not_nan.get(xv.0 as usize) == Some(&true) || self.not_nan.get(yv.0 as usize) == Some(&true) =>
            {
                // As the Cranelift back end: with a never-NaN operand, one
                // compare and select that keeps it when the compare fails
                // (NaN compares false), which is what `f32::max` gives
                // there; LLVM makes it one `maxps`/`minps` instead of the
                // NaN fix-ups of `max`.
                let c = if *op == BinOp::Max { ">" } else { "<" };
                let (x, y) = (v(xv), v(yv));
                if self.not_nan.get(xv.0 as usize) == Some(&true) {
                    format!("if {y} {c} {x} {{ {y} }} else {{ {x} }}")
                } else {
                    format!("if {x} {c} {y} {{ {x} }} else {{ {y} }}")
                }
            }
            Inst::Binary(b, x, y) => {
                let (x, y) = (v(x), v(y));
                match b {
                    BinOp::Add => format!("{x} + {y}"),
                    BinOp::Sub => format!("{x} - {y}"),
                    BinOp::Mul => format!("{x} * {y}"),
                    BinOp::Div => format!("{x} / {y}"),
                    BinOp::Min => format!("{x}.min({y})"),
                    BinOp::Max => format!("{x}.max({y})"),
                    BinOp::LeakyRelu => format!("if {x} > (0.0 as {t}) {{ {x} }} else {{ {y} * {x} }}"),
                    BinOp::And => format!("{x} & {y}"),
                    BinOp::Or => format!("{x} | {y}"),
                }
            }
            Inst::Powi(x, n) => format!("{}.powi({n})", v(x)),
            Inst::Cmp(c, x, y) => {
                let op = match c {
                    CmpOp::Lt => "<",
                    CmpOp::Le => "<=",
                    CmpOp::Gt => ">",
                    CmpOp::Ge => ">=",
                    CmpOp::Eq => "==",
                    CmpOp::Ne => "!=",
                };
                format!("{} {op} {}", v(x), v(y))
            }
            Inst::Select(c, x, y) => format!("if {} {{ {} }} else {{ {} }}", v(c), v(x), v(y)),
        })
    }

    /// Where accumulator `acc` adds in the feature loop being emitted, if
    /// it is summed as partial sums there.
    fn partial_sum(&self, acc: &Var) -> Option<String> {
        self.partial.iter().find(|(p, _)| *p == acc.0).map(|(_, place)| place.clone())
    }

    fn stmts(&mut self, s: &[Stmt], depth: usize) -> Result<(), RustSourceError> {
        let pad = "    ".repeat(depth);
        for st in s {
            match st {
                Stmt::Set(acc, Inst::Binary(BinOp::Add, a, x)) if a == acc && self.partial_sum(acc).is_some() => {
                    let place = self.partial_sum(acc).unwrap_or_default();
                    let _ = writeln!(self.out, "{pad}{place} = {place} + {};", self.var(x));
                }
                Stmt::Set(x, i) => {
                    let kind = self.k.vars.get(x.0 as usize).copied().ok_or_else(|| self.err("unknown variable"))?;
                    let rhs = match (kind, i) {
                        (VarKind::Bool, Inst::Const(c)) => format!("{}", *c != 0.0),
                        _ => self.inst(i)?,
                    };
                    let _ = writeln!(self.out, "{pad}{} = {rhs};", self.var(x));
                }
                Stmt::Store(a, x) => {
                    let place = self.addr(a)?;
                    let value = match self.stored_type(a) {
                        FieldType::F16 => format!("{}::half_bits::f32_to_f16_bits({})", self.abi, self.var(x)),
                        FieldType::BF16 => format!("{}::half_bits::f32_to_bf16_bits({})", self.abi, self.var(x)),
                        _ => self.var(x),
                    };
                    let _ = writeln!(self.out, "{pad}{place} = {value};");
                }
                Stmt::Loop { lane, width, body } => {
                    let w = self.width(*width)?;
                    let mut accs: Vec<u32> = if self.block || !self.partial.is_empty() {
                        Vec::new()
                    } else {
                        crate::loops::sum_accumulators(body).into_iter().collect()
                    };
                    accs.sort_unstable();
                    if accs.is_empty() || w < PARTIAL_SUMS || w % PARTIAL_SUMS != 0 {
                        let _ = writeln!(self.out, "{pad}for k{} in 0..{w}usize {{", lane.0);
                        self.stmts(body, depth + 1)?;
                        let _ = writeln!(self.out, "{pad}}}");
                        continue;
                    }
                    let (l, t, n) = (lane.0, self.t, PARTIAL_SUMS);
                    let _ = writeln!(self.out, "{pad}{{");
                    for a in &accs {
                        let _ = writeln!(self.out, "{pad}    let mut p{a}: [{t}; {n}] = [0.0; {n}];");
                    }
                    let _ = writeln!(self.out, "{pad}    for c{l} in 0..{}usize {{", w / n);
                    let _ = writeln!(self.out, "{pad}        for m{l} in 0..{n}usize {{");
                    let _ = writeln!(self.out, "{pad}            let k{l} = c{l} * {n} + m{l};");
                    self.partial = accs.iter().map(|a| (*a, format!("p{a}[m{l}]"))).collect();
                    let emitted = self.stmts(body, depth + 3);
                    self.partial.clear();
                    emitted?;
                    let _ = writeln!(self.out, "{pad}        }}");
                    let _ = writeln!(self.out, "{pad}    }}");
                    for a in &accs {
                        let v = self.var(&Var(*a));
                        let _ = writeln!(self.out, "{pad}    {v} = {v} + {};", pairwise(&format!("p{a}"), 0, n));
                    }
                    let _ = writeln!(self.out, "{pad}}}");
                }
            }
        }
        Ok(())
    }
}

/// Edges ahead whose source rows the edge loop prefetches. 32 against the
/// earlier 8, power-law graph, F = 64 forward ms: sum 81-83 -> 62, max
/// 112-133 -> 84-90, GatAttention 306 -> 204-209; F = 128 sum 148 -> 103-113.
/// (The JIT measured 16/32/64 edges: 70/57/83 ms on the sum.)
const PREFETCH_EDGES: usize = 32;

/// Rows narrower than this are not prefetched. Measured on the power-law
/// graph (fwd ms, prefetch / none, two runs each): F = 16 f32 (one line)
/// 52, 50 / 29, 29; F = 64 sum 112, 87 / 77, 89; max 161, 266 / 222, 252;
/// GatAttention 251, 293 / 282, 341; F = 128 sum 133, 153 / 167, 304.
const PREFETCH_MIN_ROW_BYTES: usize = 256;

/// The same for a row stored at half width, as the JIT's touches
/// (`TOUCH_AHEAD_MIN_HALF_ROW_BYTES`): a bf16 row at F = 64 is 128 bytes,
/// and without the prefetch the power-law sum forward with bf16 features
/// took 400 ms where f32's, prefetched, took 294 ms (1M nodes, 16M edges).
const PREFETCH_MIN_HALF_ROW_BYTES: usize = 128;

/// `(field, elements per row, cache lines per row)` of each prefetched field.
type Prefetched = Vec<(usize, usize, usize)>;

/// Source fields the edge loop reads, when one of them has rows of at least
/// [`PREFETCH_MIN_ROW_BYTES`]: `(field, elements per row, cache lines per
/// row)`. Their rows
/// are gathered in edge order, one likely cache miss each, and the loop's
/// body is long enough (a max's compare and blend per lane) that the
/// out-of-order window holds only a few edges' misses; a prefetch
/// `PREFETCH_EDGES` edges ahead overlaps them. Narrow rows (a stencil's
/// scalar field, F = 16) are left to the hardware: there the prefetch's
/// own instructions cost more than it saves.
///
/// With a pre-pass over the edges (`pre_body`), the first list is the
/// pre-pass's: once the main loop prefetches, the pre-pass prefetches the
/// source fields it reads, and the main loop leaves out the narrow ones
/// the pre-pass has just brought in.
fn prefetched_rows(e: &Emitter<'_>, dtype: DType) -> Result<[Prefetched; 2], RustSourceError> {
    let k = e.k;
    let (pre, read) = (fields_read(&k.pre_body, k.fields.len()), fields_read(&k.body, k.fields.len()));
    let mut wide = Vec::new();
    let mut narrow = Vec::new();
    let mut early = Vec::new();
    for (f, fd) in k.fields.iter().enumerate() {
        if fd.role != Role::Src {
            continue;
        }
        let size = e.storage.field(f, dtype).size();
        if pre[f] {
            let per = e.per_row(fd.ty)?;
            early.push((f, per, (per * size).div_ceil(64)));
        }
        if !read[f] {
            continue;
        }
        let per = e.per_row(fd.ty)?;
        let bytes = per * size;
        let min = if e.storage.field(f, dtype).is_half() { PREFETCH_MIN_HALF_ROW_BYTES } else { PREFETCH_MIN_ROW_BYTES };
        if bytes >= min {
            wide.push((f, per, bytes.div_ceil(64)));
        } else {
            narrow.push((f, per, bytes.div_ceil(64)));
        }
    }
    // Once the loop prefetches, the narrow fields' rows come along: each
    // is a random line too (GatAttention's score reads `a_src[j]` before
    // the edge's exponential; forward 1.20 -> 1.02-1.07 times the hand
    // loop, backward 1.6 -> 1.18 s).
    if wide.is_empty() {
        early.clear();
    } else {
        wide.extend(narrow.into_iter().filter(|(f, ..)| !pre[*f]));
    }
    Ok([early, wide])
}

/// The source of one variant: an `unsafe extern "C" fn NAME(args, begin,
/// end)` with the ABI of [`tiga_abi`]. `abi` is how the emitted code names
/// that crate (e.g. `::tiga::runtime::abi`). With `edge_ids = false` the
/// function reads `edge_ids` only when it is non-null, so it serves graphs
/// with and without an edge permutation. Every field and output is stored
/// in `dtype` ([`emit_variant_stored`] for half-width ones).
pub fn emit_variant(
    k: &LoopKernel,
    dtype: DType,
    widths: &[usize],
    edge_ids: bool,
    fn_name: &str,
    abi: &str,
) -> Result<String, RustSourceError> {
    emit_variant_stored(k, dtype, widths, edge_ids, &Storage::default(), fn_name, abi)
}

/// [`emit_variant`] for fields and outputs stored as `storage` says: a
/// half-width one is read as `u16` bits and widened to f32 exactly, and
/// stored rounded to nearest even, by `half_bits` (the Cranelift back
/// end's sequences, so both give the same bits).
pub fn emit_variant_stored(
    k: &LoopKernel,
    dtype: DType,
    widths: &[usize],
    edge_ids: bool,
    storage: &Storage,
    fn_name: &str,
    abi: &str,
) -> Result<String, RustSourceError> {
    verify(k)?;
    storage.check(k, dtype).map_err(|message| RustSourceError::Storage { kernel: k.name.clone(), message })?;
    let mut e = Emitter::new(k, dtype, widths, storage, abi);
    let body_start = open_variant(
        &mut e,
        fn_name,
        &[("offsets: *const u64", "a.offsets"), ("cols: *const u32", "a.cols"), ("edge_ids: *const u64", "a.edge_ids")],
    );
    let t = e.t;
    // Software prefetch of the source rows `PREFETCH_EDGES` edges ahead (see
    // `prefetched_rows`): the edge loop's gathers are what it waits on.
    let prefetch = prefetched_rows(&e, dtype)?;
    if prefetch.iter().any(|p| !p.is_empty()) {
        let _ = writeln!(e.out, "    let edges_end = *offsets.add(row_end as usize) as usize;");
    }
    // The edge tiles' buffer (see `loops::split_calls`), once per call.
    let split = crate::loops::split_calls(k);
    if let Some(s) = &split {
        let _ = writeln!(e.out, "    let mut tile = [[0.0 as {t}; {}]; {}];", s.carried.len(), crate::loops::EDGE_TILE);
    }
    let _ = writeln!(e.out, "    for i in row_begin as usize..row_end as usize {{");
    let _ = writeln!(e.out, "        let first = *offsets.add(i) as usize;");
    let _ = writeln!(e.out, "        let end = *offsets.add(i + 1) as usize;");
    let _ = writeln!(e.out, "        let deg = end - first;");
    // Scratch (accumulators) live per row, so LLVM can keep them in
    // registers across the row's edges.
    for (b, w) in k.scratch.iter().enumerate() {
        let w = e.width(*w)?;
        let _ = writeln!(e.out, "        let mut s{b} = [0.0 as {t}; {w}];");
    }
    e.stmts(&k.init, 2)?;
    let header = |e: &mut Emitter<'_>, prefetch: &[(usize, usize, usize)], pad: &str| {
        let _ = writeln!(e.out, "{pad}    let j = *cols.add(p) as usize;");
        if edge_ids {
            let _ = writeln!(e.out, "{pad}    let e = *edge_ids.add(p) as usize;");
        } else {
            // One function serves both realizations: a null `edge_ids` is
            // the identity (the branch is loop-invariant).
            let _ = writeln!(e.out, "{pad}    let e = if edge_ids.is_null() {{ p }} else {{ *edge_ids.add(p) as usize }};");
        }
        let _ = writeln!(e.out, "{pad}    let rank = p - first;");
        if !prefetch.is_empty() {
            let _ = writeln!(e.out, "{pad}    #[cfg(target_arch = \"x86_64\")]");
            let _ = writeln!(e.out, "{pad}    if p + {PREFETCH_EDGES} < edges_end {{");
            let _ = writeln!(e.out, "{pad}        let ahead = *cols.add(p + {PREFETCH_EDGES}) as usize;");
            for (f, per, lines) in prefetch {
                for l in 0..*lines {
                    let _ = writeln!(
                        e.out,
                        "{pad}        ::core::arch::x86_64::_mm_prefetch::<{{ ::core::arch::x86_64::_MM_HINT_T0 }}>(f{f}.add(ahead * {per} + {}) as *const i8);",
                        l * 64 / e.storage.field(*f, dtype).size()
                    );
                }
            }
            let _ = writeln!(e.out, "{pad}    }}");
        }
    };
    if !k.pre_body.is_empty() {
        let _ = writeln!(e.out, "        for p in first..end {{");
        header(&mut e, &prefetch[0], "        ");
        e.stmts(&k.pre_body, 3)?;
        let _ = writeln!(e.out, "        }}");
    }
    match split {
        Some(split) => {
            // Edges in tiles: the scalar part (with its calls) for a
            // tile's edges, keeping what the feature loops read, then
            // the feature loops for the same edges with no call among
            // them (see `split_calls`).
            let tile = crate::loops::EDGE_TILE;
            let _ = writeln!(e.out, "        let mut p0 = first;");
            let _ = writeln!(e.out, "        while p0 < end {{");
            let _ = writeln!(e.out, "            let p1 = if end - p0 > {tile} {{ p0 + {tile} }} else {{ end }};");
            let _ = writeln!(e.out, "            for p in p0..p1 {{");
            header(&mut e, &[], "            ");
            e.stmts(&split.scalar, 4)?;
            let keep: Vec<String> = split.carried.iter().map(|v| format!("v{}", v.0)).collect();
            let _ = writeln!(e.out, "                tile[p - p0] = [{}];", keep.join(", "));
            let _ = writeln!(e.out, "            }}");
            let _ = writeln!(e.out, "            for p in p0..p1 {{");
            header(&mut e, &prefetch[1], "            ");
            for (c, v) in keep.iter().enumerate() {
                let _ = writeln!(e.out, "                {v} = tile[p - p0][{c}];");
            }
            e.stmts(&split.loops, 4)?;
            let _ = writeln!(e.out, "            }}");
            let _ = writeln!(e.out, "            p0 = p1;");
            let _ = writeln!(e.out, "        }}");
        }
        None => {
            let _ = writeln!(e.out, "        for p in first..end {{");
            header(&mut e, &prefetch[1], "        ");
            e.stmts(&k.body, 3)?;
            let _ = writeln!(e.out, "        }}");
        }
    }
    e.stmts(&k.finish, 2)?;
    let _ = writeln!(e.out, "    }}");
    Ok(close_variant(e, body_start, fn_name))
}

impl<'a> Emitter<'a> {
    fn new(k: &'a LoopKernel, dtype: DType, widths: &'a [usize], storage: &'a Storage, abi: &'a str) -> Emitter<'a> {
        let t = match dtype {
            DType::F32 => "f32",
            DType::F64 => "f64",
        };
        Emitter {
            k,
            widths,
            t,
            dtype,
            storage,
            abi,
            not_nan: crate::loops::never_nan(k),
            block: false,
            partial: Vec::new(),
            out: String::new(),
        }
    }
}

/// The entry point and the start of its rows function, up to the first
/// statement of the rows function's body: the variables are declared.
/// `adjacency` is what the rows function takes before the fields and
/// outputs, as (parameter, expression on the argument block `a`).
/// Returns where the part copied per target (see [`close_variant`])
/// starts.
fn open_variant(e: &mut Emitter<'_>, fn_name: &str, adjacency: &[(&str, &str)]) -> usize {
    let k = e.k;
    let abi_path = format!("{}::RawArgs", e.abi);
    // The entry point dispatches once per call to a body compiled for
    // AVX2+FMA when the running CPU has them (LLVM then uses 256-bit
    // vectors), else to the same body for the baseline target. Both bodies
    // are the same Rust, and Rust never contracts a*b+c into an FMA, so
    // they give the same bits.
    let _ = writeln!(e.out, "#[allow(unused_mut, unused_variables, unused_assignments, clippy::all)]");
    let _ = writeln!(e.out, "unsafe extern \"C\" fn {fn_name}(args: *const {abi_path}, row_begin: u64, row_end: u64) {{");
    let _ = writeln!(e.out, "    #[cfg(target_arch = \"x86_64\")]");
    let _ = writeln!(e.out, "    {{");
    let _ =
        writeln!(e.out, "        if ::std::is_x86_feature_detected!(\"avx2\") && ::std::is_x86_feature_detected!(\"fma\") {{");
    let _ = writeln!(e.out, "            return unsafe {{ {fn_name}_avx2(args, row_begin, row_end) }};");
    let _ = writeln!(e.out, "        }}");
    let _ = writeln!(e.out, "    }}");
    let _ = writeln!(e.out, "    unsafe {{ {fn_name}_base(args, row_begin, row_end) }}");
    let _ = writeln!(e.out, "}}");
    let body_start = e.out.len();
    // The rows run in a function of their own that takes every array as a
    // parameter: with the pointers loaded from the argument block in the
    // same function, LLVM kept a max kernel's accumulators on the stack
    // (with masked stores) instead of in registers, 1.65x the hand-written
    // loop's time.
    let _ = writeln!(e.out, "{TARGET_ATTRS}");
    let _ = writeln!(e.out, "#[allow(unused_mut, unused_variables, unused_assignments, clippy::all)]");
    let _ = writeln!(e.out, "unsafe fn {fn_name}_BODY(args: *const {abi_path}, row_begin: u64, row_end: u64) {{ unsafe {{");
    let _ = writeln!(e.out, "    let a = &*args;");
    let mut call: Vec<String> = adjacency.iter().map(|(_, c)| c.to_string()).collect();
    let mut params: Vec<String> = adjacency.iter().map(|(p, _)| p.to_string()).collect();
    for f in 0..k.fields.len() {
        let t = e.elem(e.storage.field(f, e.dtype));
        call.push(format!("*a.fields.add({f}) as *const {t}"));
        params.push(format!("f{f}: *const {t}"));
    }
    for o in 0..k.outputs.len() {
        let t = e.elem(e.storage.output(o, e.dtype));
        call.push(format!("*a.outputs.add({o}) as *mut {t}"));
        params.push(format!("o{o}: *mut {t}"));
    }
    let t = e.t;
    let _ = writeln!(e.out, "    {fn_name}_BODY_rows({}, row_begin, row_end)", call.join(", "));
    let _ = writeln!(e.out, "}} }}");
    let _ = writeln!(e.out, "{TARGET_ATTRS}");
    let _ = writeln!(e.out, "#[inline(never)]");
    let _ = writeln!(e.out, "#[allow(unused_mut, unused_variables, unused_assignments, clippy::all)]");
    let _ = writeln!(e.out, "unsafe fn {fn_name}_BODY_rows({}, row_begin: u64, row_end: u64) {{ unsafe {{", params.join(", "));
    for (i, kind) in k.vars.iter().enumerate() {
        match kind {
            VarKind::Num => {
                let _ = writeln!(e.out, "    let mut v{i}: {t} = 0.0;");
            }
            VarKind::Bool => {
                let _ = writeln!(e.out, "    let mut v{i}: bool = false;");
            }
        }
    }
    body_start
}

/// Close the rows function and copy everything from `body_start` on twice:
/// once compiled for AVX2+FMA, once for the baseline target.
fn close_variant(mut e: Emitter<'_>, body_start: usize, fn_name: &str) -> String {
    let _ = writeln!(e.out, "}} }}");
    let body = e.out.split_off(body_start);
    let avx2 = "#[cfg(target_arch = \"x86_64\")]\n#[target_feature(enable = \"avx2,fma\")]";
    e.out.push_str(&body.replace(&format!("{fn_name}_BODY"), &format!("{fn_name}_avx2")).replace(TARGET_ATTRS, avx2));
    e.out.push_str(
        &body.replace(&format!("{fn_name}_BODY"), &format!("{fn_name}_base")).replace(&format!("{TARGET_ATTRS}\n"), ""),
    );
    e.out
}
