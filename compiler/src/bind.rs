//! Binding a call's shapes to a kernel: solving the width symbols from the
//! fields passed and checking every length. Shared by the interpreter, the
//! runtime facade and `tigac`, so they all reject the same calls with the same
//! words.

use crate::ir::{Kernel, Role, Type, WidthId};

/// The sizes a call sees: node and edge counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extents {
    pub num_src: usize,
    pub num_dst: usize,
    pub num_edges: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BindError {
    #[error("kernel `{kernel}` has no {role} field `{name}`{hint}")]
    UnknownField { kernel: String, role: &'static str, name: String, hint: String },
    #[error("kernel `{kernel}` needs {role} field `{name}` ({expected}), but it was not given")]
    MissingField { kernel: String, role: &'static str, name: String, expected: String },
    #[error("{role} field `{name}` has shape {actual:?}, expected {expected}")]
    Shape { role: &'static str, name: String, expected: String, actual: Vec<usize> },
    #[error("{role} field `{name}` sets width {width} = {actual}, but {width} = {bound} from {bound_by}")]
    Width { role: &'static str, name: String, width: String, actual: usize, bound: usize, bound_by: String },
}

fn rows_for(role: Role, e: &Extents) -> Option<(usize, &'static str)> {
    match role {
        Role::Src => Some((e.num_src, "num_src")),
        Role::Dst => Some((e.num_dst, "num_dst")),
        Role::Edge => Some((e.num_edges, "num_edges")),
        Role::Param => None,
    }
}

/// The shape a field must have, as text (for error messages).
pub fn expected_shape(k: &Kernel, field: usize, e: &Extents) -> String {
    let fd = &k.fields[field];
    let w = |w| k.width_name(w).to_string();
    match (rows_for(fd.role, e), fd.ty) {
        (Some((n, _)), Type::Scalar) => format!("[{n}]"),
        (Some((n, _)), Type::Vector(x)) => format!("[{n}, {}]", w(x)),
        (None, Type::Scalar) => "[] or [1]".to_string(),
        (None, Type::Vector(x)) => format!("[{}]", w(x)),
        (None, Type::Matrix(r, c)) => format!("[{}, {}]", w(r), w(c)),
        _ => "?".to_string(),
    }
}

/// The shape a field of this role and type has on a graph of these extents,
/// each width symbol `w` being `width(w)` (a scalar parameter as `[1]`).
pub fn field_shape(role: Role, ty: Type, e: &Extents, width: impl Fn(WidthId) -> usize) -> Vec<usize> {
    let mut shape: Vec<usize> = rows_for(role, e).map(|(n, _)| n).into_iter().collect();
    match ty {
        Type::Vector(x) => shape.push(width(x)),
        Type::Matrix(r, c) => shape.extend([width(r), width(c)]),
        _ if shape.is_empty() => shape.push(1),
        _ => {}
    }
    shape
}

/// Solve the widths from `shapes` (one per field, in declaration order) and
/// check every field against them. Returns the width values.
pub fn bind_shapes(k: &Kernel, e: &Extents, shapes: &[&[usize]]) -> Result<Vec<usize>, BindError> {
    let mut widths: Vec<Option<(usize, String)>> = vec![None; k.widths.len()];
    for (i, fd) in k.fields.iter().enumerate() {
        let shape = shapes.get(i).copied().unwrap_or(&[]);
        let bad = || BindError::Shape {
            role: fd.role.name(),
            name: fd.name.clone(),
            expected: expected_shape(k, i, e),
            actual: shape.to_vec(),
        };
        // (dimension, width symbol) pairs to bind after the rank/row checks.
        let dims: Vec<(usize, crate::ir::WidthId)> = match (rows_for(fd.role, e), fd.ty) {
            (Some((n, _)), Type::Scalar) => {
                if !(shape == [n] || (shape.len() == 2 && shape[0] == n && shape[1] == 1)) {
                    return Err(bad());
                }
                vec![]
            }
            (Some((n, _)), Type::Vector(w)) => {
                if shape.len() != 2 || shape[0] != n {
                    return Err(bad());
                }
                vec![(1, w)]
            }
            (None, Type::Scalar) => {
                if !(shape.is_empty() || shape == [1]) {
                    return Err(bad());
                }
                vec![]
            }
            (None, Type::Vector(w)) => {
                if shape.len() != 1 {
                    return Err(bad());
                }
                vec![(0, w)]
            }
            (None, Type::Matrix(r, c)) => {
                if shape.len() != 2 {
                    return Err(bad());
                }
                vec![(0, r), (1, c)]
            }
            _ => return Err(bad()),
        };
        for (d, w) in dims {
            let actual = shape[d];
            let slot = &mut widths[w.0 as usize];
            match slot {
                None => *slot = Some((actual, format!("{} field `{}`", fd.role.name(), fd.name))),
                Some((bound, by)) if *bound != actual => {
                    return Err(BindError::Width {
                        role: fd.role.name(),
                        name: fd.name.clone(),
                        width: k.width_name(w).to_string(),
                        actual,
                        bound: *bound,
                        bound_by: by.clone(),
                    })
                }
                Some(_) => {}
            }
        }
    }
    Ok(widths.into_iter().map(|w| w.map(|(v, _)| v).unwrap_or(0)).collect())
}

/// The shape of each output for a call with these extents and widths.
pub fn output_shapes(k: &Kernel, e: &Extents, widths: &[usize]) -> Vec<Vec<usize>> {
    k.outputs
        .iter()
        .map(|o| {
            let w = |w: crate::ir::WidthId| widths.get(w.0 as usize).copied().unwrap_or(0);
            match (o.role, o.ty) {
                (Role::Param, Type::Vector(x)) => vec![w(x)],
                (Role::Param, Type::Matrix(r, c)) => vec![w(r), w(c)],
                (Role::Param, _) => vec![1],
                (Role::Edge, Type::Vector(x)) => vec![e.num_edges, w(x)],
                (Role::Edge, _) => vec![e.num_edges],
                (_, Type::Vector(x)) => vec![e.num_dst, w(x)],
                _ => vec![e.num_dst],
            }
        })
        .collect()
}
