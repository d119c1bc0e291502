//! Mixed precision in a kernel file: an operation whose operands are read
//! from f32 and from f64 fields. rustc rejects such a kernel on the macro
//! path (`f32 + f64` does not type-check), so a kernel file given to
//! `tigac` is refused too, at the operation, and both paths accept the
//! same kernels. Constants, degrees, ranks and a region's inputs take the
//! precision of what they meet, as Rust's float literals do.
//!
//! A half field (`f16`, `bf16`) is loaded as f32 and computed with in f32,
//! so it counts as f32 here: `src.h_bf16 * dst.w_f32` is one f32
//! operation, and mixing a half field with an f64 one is refused like f32
//! with f64. On the macro path `tiga::lang`'s `f16` and `bf16` are f32 for
//! rustc (the values a kernel function sees), so rustc agrees.

use super::{FrontError, FrontResult};
use crate::ir::{DType, Kernel, Op, Region};

/// Refuse the first operation of `k` that mixes f32 and f64 values.
pub(crate) fn check_one_dtype_per_operation(k: &Kernel) -> FrontResult<()> {
    let r = &k.reducer;
    let regions = [Some(&k.edge), k.node.as_ref(), r.identity.as_ref(), r.combine.as_ref(), r.finalize.as_ref()];
    for region in regions.into_iter().flatten() {
        check_region(k, region)?;
    }
    Ok(())
}

fn check_region(k: &Kernel, region: &Region) -> FrontResult<()> {
    let mut dtypes: Vec<Option<DType>> = Vec::with_capacity(region.nodes.len());
    for n in &region.nodes {
        let d = match &n.op {
            Op::Field(f) => k.fields.get(f.0 as usize).map(|fd| fd.declared.dtype()),
            op => {
                let mut seen: Option<DType> = None;
                for o in op.operands() {
                    let Some(&Some(d)) = dtypes.get(o.0 as usize) else { continue };
                    match seen {
                        Some(s) if s != d => {
                            return Err(FrontError {
                                message: format!(
                                    "this operation mixes {s} and {d} values (fields declared with different float types); \
                                     rustc rejects this on the #[message_passing] path: declare the fields with one type"
                                ),
                                line: n.span.line,
                                col: n.span.col,
                                span: proc_macro2::Span::call_site(),
                            })
                        }
                        _ => seen = Some(d),
                    }
                }
                // A comparison's result is a boolean, of no precision.
                if matches!(op, Op::Cmp(..)) {
                    None
                } else {
                    seen
                }
            }
        };
        dtypes.push(d);
    }
    Ok(())
}
