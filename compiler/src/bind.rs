//! Binding a call's shapes to a kernel: solving the width symbols from the
//! fields passed and checking every length. Shared by the interpreter, the
//! runtime facade and `tigac`, so they all reject the same calls with the same
//! words.

use crate::ir::{DType, FieldType, Kernel, Role, Type, WidthId};

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
    #[error("{role} field `{name}` has width {actual}, but {width} is {bound}: fields of one width must agree")]
    Width { role: &'static str, name: String, width: String, actual: usize, bound: usize, bound_by: String },
    #[error(
        "{role} field `{name}` is {dtype}, but `{first}` is {first_dtype}: a call runs in one dtype, pass every field as f32 \
         (or f16/bf16, which compute in f32) or every field as f64"
    )]
    MixedDtypes { role: &'static str, name: String, dtype: FieldType, first: String, first_dtype: FieldType },
    #[error("{role} field `{name}` is given twice")]
    Duplicate { role: &'static str, name: String },
}

/// A field a call passes: role, name, element type and shape.
#[derive(Clone, Copy, Debug)]
pub struct Given<'s> {
    pub role: Role,
    pub name: &'s str,
    /// How its elements are stored (f32, f64, or a half type computed in
    /// f32).
    pub ty: FieldType,
    pub shape: &'s [usize],
}

/// A call's fields bound to a kernel ([`bind_fields`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// For each declared field, in declaration order, its index in the
    /// fields given.
    pub order: Vec<usize>,
    /// The dtype the call computes in.
    pub dtype: DType,
    /// How each declared field is stored, in declaration order.
    pub types: Vec<FieldType>,
    /// The value of each width symbol.
    pub widths: Vec<usize>,
}

/// Every check of a call's fields against kernel `k` on a graph of these
/// extents, in one place for every caller (the facade, `tigac`): no field
/// the kernel does not declare, none given twice, none missing, one dtype
/// for all, every shape and width consistent.
pub fn bind_fields(k: &Kernel, e: &Extents, given: &[Given<'_>]) -> Result<Bound, BindError> {
    for (i, g) in given.iter().enumerate() {
        if k.field_by_name(g.role, g.name).is_none() {
            let known: Vec<String> = k.fields.iter().filter(|f| f.role == g.role).map(|f| f.name.clone()).collect();
            let hint = if known.is_empty() {
                format!(" (it has no {} fields)", g.role.name())
            } else {
                format!(" (its {} fields: {})", g.role.name(), known.join(", "))
            };
            return Err(BindError::UnknownField { kernel: k.name.clone(), role: g.role.name(), name: g.name.to_string(), hint });
        }
        if given[..i].iter().any(|h| h.role == g.role && h.name == g.name) {
            return Err(BindError::Duplicate { role: g.role.name(), name: g.name.to_string() });
        }
    }
    let mut order = Vec::with_capacity(k.fields.len());
    for (i, f) in k.fields.iter().enumerate() {
        match given.iter().position(|g| g.role == f.role && g.name == f.name) {
            Some(j) => order.push(j),
            None => {
                return Err(BindError::MissingField {
                    kernel: k.name.clone(),
                    role: f.role.name(),
                    name: f.name.clone(),
                    expected: expected_shape(k, i, e),
                })
            }
        }
    }
    let first = order.first().map(|&j| given[j].ty).unwrap_or(FieldType::F32);
    let dtype = first.dtype();
    for (f, &j) in k.fields.iter().zip(&order) {
        if given[j].ty.dtype() != dtype {
            return Err(BindError::MixedDtypes {
                role: f.role.name(),
                name: f.name.clone(),
                dtype: given[j].ty,
                first: k.fields[0].name.clone(),
                first_dtype: first,
            });
        }
    }
    let types = order.iter().map(|&j| given[j].ty).collect();
    let shapes: Vec<&[usize]> = order.iter().map(|&j| given[j].shape).collect();
    let widths = bind_shapes(k, e, &shapes)?;
    Ok(Bound { order, dtype, types, widths })
}

fn rows_for(role: Role, e: &Extents) -> Option<(usize, &'static str)> {
    match role {
        Role::Src => Some((e.num_src, "num_src")),
        Role::Dst => Some((e.num_dst, "num_dst")),
        Role::Edge => Some((e.num_edges, "num_edges")),
        Role::Param => None,
    }
}

/// The shape a field must have, as text (for error messages), in the
/// user's words: a width is "any" where this field sets it, else named by
/// the field that does ("the width of src `h`"), never by the internal
/// symbol (`F1`), which the user never wrote.
pub fn expected_shape(k: &Kernel, field: usize, e: &Extents) -> String {
    let fd = &k.fields[field];
    let w = |w: WidthId| width_words(k, w, Some(field));
    match (rows_for(fd.role, e), fd.ty) {
        (Some((n, _)), Type::Scalar) => format!("[{n}]"),
        (Some((n, _)), Type::Vector(x)) => format!("[{n}, {}]", w(x)),
        (None, Type::Scalar) => "[] or [1]".to_string(),
        (None, Type::Vector(x)) => format!("[{}]", w(x)),
        (None, Type::Matrix(r, c)) => format!("[{}, {}]", w(r), w(c)),
        _ => "?".to_string(),
    }
}

/// A width symbol in the user's words: `any width` when `field` is the one
/// that sets it, else which dimension of which field sets it.
fn width_words(k: &Kernel, w: WidthId, field: Option<usize>) -> String {
    let Some(d) = k.widths.get(w.0 as usize) else { return "any width".into() };
    let (by, dim) = (d.bound_by.0 .0 as usize, d.bound_by.1);
    match k.fields.get(by) {
        Some(_) if Some(by) == field => "any width".into(),
        Some(bf) => {
            let which = match (bf.ty, dim) {
                (Type::Matrix(..), 0) => "the rows of",
                (Type::Matrix(..), _) => "the columns of",
                _ => "the width of",
            };
            format!("{which} {} `{}`", bf.role.name(), bf.name)
        }
        None => "any width".into(),
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
                        width: width_words(k, w, None),
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
