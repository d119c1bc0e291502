//! Software prefetch for the JIT, which CLIF cannot say.
//!
//! The edge loops touch source rows ahead of use (`touch_ahead`,
//! `touch_later_blocks`): a byte load whose value nothing reads, so that the
//! miss starts early. A demand load, though, holds its slot in the reorder
//! buffer until the line arrives, and with a few dozen of them in flight the
//! core stops retiring the edges it could already sum; `prefetcht0` starts
//! the same miss and retires at once. CLIF has no prefetch instruction, so
//! the translator marks each touch load with [`TOUCH_SRCLOC`], and after
//! code generation every marked range that is a run of
//! `movzx r32/r64, byte [mem]` loads is rewritten in place as
//! `prefetcht0 byte [mem]`: the same prefix, addressing bytes and length,
//! opcode `0F B6 /r` becoming `0F 18 /1`. The loaded register was dead (the
//! value is unused), and a prefetch never faults. A marked range in any
//! other shape is left as the load it is, and counted.

use cranelift_codegen::ir::SourceLoc;

/// The source location the translator gives touch loads (no other
/// instruction carries one).
pub(crate) const TOUCH_SRCLOC: u32 = 0x7043_4854;

pub(crate) fn touch_srcloc() -> SourceLoc {
    SourceLoc::new(TOUCH_SRCLOC)
}

/// Length of the ModRM-addressed memory operand starting at `at` (ModRM,
/// optional SIB, displacement), or `None` for a register operand or a
/// truncated one.
fn memory_operand_len(code: &[u8], at: usize) -> Option<usize> {
    let modrm = *code.get(at)?;
    let (md, rm) = (modrm >> 6, modrm & 7);
    if md == 0b11 {
        return None;
    }
    let mut len = 1;
    if rm == 0b100 {
        let sib = *code.get(at + 1)?;
        len += 1;
        if md == 0 && sib & 7 == 0b101 {
            len += 4;
        }
    } else if md == 0 && rm == 0b101 {
        len += 4;
    }
    len += match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    (at + len <= code.len()).then_some(len)
}

/// The instruction at `at` if it is `movzx reg, byte [mem]` (optionally
/// with a REX prefix): its REX position, opcode position and end.
fn movzx_byte_load(code: &[u8], at: usize) -> Option<(Option<usize>, usize, usize)> {
    let rex = matches!(code.get(at)?, 0x40..=0x4f).then_some(at);
    let op = at + usize::from(rex.is_some());
    if code.get(op..op + 2)? != [0x0f, 0xb6] {
        return None;
    }
    let mem = memory_operand_len(code, op + 2)?;
    Some((rex, op, op + 2 + mem))
}

/// Rewrite `code[start..end]`, a run of `movzx reg, byte [mem]` loads, to
/// `prefetcht0 [mem]` each. Returns how many; when the run holds anything
/// else, nothing is changed and it returns 0.
pub(crate) fn rewrite_touches(code: &mut [u8], start: usize, end: usize) -> usize {
    if start >= end || end > code.len() {
        return 0;
    }
    let mut loads = Vec::new();
    let mut at = start;
    while at < end {
        match movzx_byte_load(code, at) {
            Some((rex, op, next)) if next <= end => {
                loads.push((rex, op));
                at = next;
            }
            _ => return 0,
        }
    }
    for &(rex, op) in &loads {
        code[op + 1] = 0x18;
        // ModRM.reg = 1 selects prefetcht0; the destination register is gone.
        code[op + 2] = (code[op + 2] & 0b1100_0111) | (1 << 3);
        if let Some(r) = rex {
            // Keep REX.X and REX.B (they extend the address registers);
            // drop REX.W and REX.R, which described the destination.
            code[r] &= !0b1100;
        }
    }
    loads.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_movzx_loads_and_nothing_else() {
        // movzx eax, byte [rdi+0x40]        -> prefetcht0 [rdi+0x40]
        let mut a = vec![0x0f, 0xb6, 0x47, 0x40];
        assert_eq!(rewrite_touches(&mut a, 0, 4), 1);
        assert_eq!(a, [0x0f, 0x18, 0x4f, 0x40]);
        // movzx r9d, byte [r8+rcx*1+0x80]  (REX.RB, SIB, disp32) -> prefetcht0 [r8+rcx+0x80]
        let mut b = vec![0x45, 0x0f, 0xb6, 0x8c, 0x08, 0x80, 0x00, 0x00, 0x00];
        assert_eq!(rewrite_touches(&mut b, 0, 9), 1);
        assert_eq!(b, [0x41, 0x0f, 0x18, 0x8c, 0x08, 0x80, 0x00, 0x00, 0x00]);
        // movzx rax, byte [rsi] (REX.W) -> prefetcht0 [rsi] with a bare REX
        let mut c = vec![0x48, 0x0f, 0xb6, 0x06];
        assert_eq!(rewrite_touches(&mut c, 0, 4), 1);
        assert_eq!(c, [0x40, 0x0f, 0x18, 0x0e]);
        // A run of four, as Cranelift emits a row's touches (one range):
        // movzx r12, [rcx+rbx]; movzx r12, [rcx+rbx+0x40]; ...
        let mut run = vec![
            0x4c, 0x0f, 0xb6, 0x24, 0x19, 0x4c, 0x0f, 0xb6, 0x64, 0x19, 0x40, 0x4c, 0x0f, 0xb6, 0xa4, 0x19, 0x80, 0, 0, 0, 0x48,
            0x0f, 0xb6, 0x9c, 0x19, 0xc0, 0, 0, 0,
        ];
        assert_eq!(rewrite_touches(&mut run, 0, 29), 4);
        assert_eq!(
            run,
            [
                0x40, 0x0f, 0x18, 0x0c, 0x19, 0x40, 0x0f, 0x18, 0x4c, 0x19, 0x40, 0x40, 0x0f, 0x18, 0x8c, 0x19, 0x80, 0, 0, 0,
                0x40, 0x0f, 0x18, 0x8c, 0x19, 0xc0, 0, 0, 0
            ]
        );
        // movzx eax, byte [rip+0x10] -> prefetcht0 [rip+0x10]
        let mut d = vec![0x0f, 0xb6, 0x05, 0x10, 0, 0, 0];
        assert_eq!(rewrite_touches(&mut d, 0, 7), 1);
        assert_eq!(d, [0x0f, 0x18, 0x0d, 0x10, 0, 0, 0]);
        // movzx eax, byte [rcx*4+0x20] (SIB without a base: disp32)
        let mut e = vec![0x0f, 0xb6, 0x04, 0x8d, 0x20, 0, 0, 0];
        assert_eq!(rewrite_touches(&mut e, 0, 8), 1);
        assert_eq!(e, [0x0f, 0x18, 0x0c, 0x8d, 0x20, 0, 0, 0]);
        // Not rewritten: a register operand, another opcode, a load
        // followed by something else, a truncated operand.
        for (code, end) in [
            (vec![0x0f, 0xb6, 0xc1], 3),
            (vec![0x0f, 0xb7, 0x47, 0x40], 4),
            (vec![0x0f, 0xb6, 0x47, 0x40, 0x90], 5),
            (vec![0x0f, 0xb6, 0x84, 0x08], 4),
        ] {
            let mut patched = code.clone();
            assert_eq!(rewrite_touches(&mut patched, 0, end), 0, "{code:x?}");
            assert_eq!(patched, code);
        }
    }
}
