//! Transcendental functions Cranelift has no instruction for.
//!
//! Each is a Rust `extern "C"` function (so the JIT computes exactly what
//! `f32::exp`, `f64::ln`, ... compute), registered as a JIT symbol and
//! declared as an import only in functions that use it.

use cranelift_codegen::ir::{self, AbiParam, FuncRef};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{Linkage, Module, ModuleError};

use crate::ir::{DType, UnOp};
use crate::loops::{Inst, LoopKernel, Stmt};

extern "C" fn tiga_expf(x: f32) -> f32 {
    x.exp()
}
extern "C" fn tiga_exp(x: f64) -> f64 {
    x.exp()
}
extern "C" fn tiga_logf(x: f32) -> f32 {
    x.ln()
}
extern "C" fn tiga_log(x: f64) -> f64 {
    x.ln()
}
extern "C" fn tiga_tanhf(x: f32) -> f32 {
    x.tanh()
}
extern "C" fn tiga_tanh(x: f64) -> f64 {
    x.tanh()
}

type F32Fn = extern "C" fn(f32) -> f32;
type F64Fn = extern "C" fn(f64) -> f64;

/// Make every math symbol resolvable by the module built from `jb`.
pub(super) fn register(jb: &mut JITBuilder) {
    jb.symbol("tiga_expf", tiga_expf as F32Fn as *const u8);
    jb.symbol("tiga_exp", tiga_exp as F64Fn as *const u8);
    jb.symbol("tiga_logf", tiga_logf as F32Fn as *const u8);
    jb.symbol("tiga_log", tiga_log as F64Fn as *const u8);
    jb.symbol("tiga_tanhf", tiga_tanhf as F32Fn as *const u8);
    jb.symbol("tiga_tanh", tiga_tanh as F64Fn as *const u8);
}

/// The imported math functions of one compiled function (`None`: unused).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MathRefs {
    pub exp: Option<FuncRef>,
    pub ln: Option<FuncRef>,
    pub tanh: Option<FuncRef>,
}

/// Declare, in `module` and `func`, the math functions `k` calls.
pub(super) fn declare(
    module: &mut JITModule,
    func: &mut ir::Function,
    k: &LoopKernel,
    dtype: DType,
) -> Result<MathRefs, ModuleError> {
    let (mut exp, mut ln, mut tanh) = (false, false, false);
    for list in [&k.init, &k.pre_body, &k.body, &k.finish] {
        visit_unary(list, &mut |u| match u {
            UnOp::Exp | UnOp::Sigmoid => exp = true,
            UnOp::Ln => ln = true,
            UnOp::Tanh => tanh = true,
            UnOp::Neg | UnOp::Abs | UnOp::Sqrt | UnOp::Relu | UnOp::Not => {}
        });
    }
    let ty = match dtype {
        DType::F32 => ir::types::F32,
        DType::F64 => ir::types::F64,
    };
    let mut sig = module.make_signature();
    sig.params.push(AbiParam::new(ty));
    sig.returns.push(AbiParam::new(ty));
    let mut import = |used: bool, f32_name: &str, f64_name: &str| -> Result<Option<FuncRef>, ModuleError> {
        if !used {
            return Ok(None);
        }
        let name = if dtype == DType::F32 { f32_name } else { f64_name };
        let id = module.declare_function(name, Linkage::Import, &sig)?;
        Ok(Some(module.declare_func_in_func(id, func)))
    };
    Ok(MathRefs {
        exp: import(exp, "tiga_expf", "tiga_exp")?,
        ln: import(ln, "tiga_logf", "tiga_log")?,
        tanh: import(tanh, "tiga_tanhf", "tiga_tanh")?,
    })
}

fn visit_unary(stmts: &[Stmt], f: &mut impl FnMut(UnOp)) {
    for s in stmts {
        match s {
            Stmt::Set(_, Inst::Unary(u, _)) => f(*u),
            Stmt::Loop { body, .. } => visit_unary(body, f),
            Stmt::Set(..) | Stmt::Store(..) => {}
        }
    }
}
