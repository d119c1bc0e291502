//! Declared types and width symbols.
//!
//! Every vector field gets its own width symbol; elementwise operations unify
//! symbols (union-find), `matvec` links a matrix's column symbol to its
//! operand's. After capture the surviving classes are renumbered 0.. so that
//! the IR names each width once.

use syn::spanned::Spanned;

use super::{FrontError, FrontResult};
use crate::ir::{self, FieldType, Region, Type, WidthId};

/// A type as written in the user's source. An element type is `f32`,
/// `f64`, or a half type (`f16`, `bf16`): a field stored at half width
/// whose values the kernel computes with in f32.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclType {
    Scalar(FieldType),
    Vector(FieldType),
    Matrix(FieldType),
    Tuple(Vec<DeclType>),
}

impl DeclType {
    pub fn dtype(&self) -> Option<FieldType> {
        match self {
            DeclType::Scalar(d) | DeclType::Vector(d) | DeclType::Matrix(d) => Some(*d),
            DeclType::Tuple(_) => None,
        }
    }

    /// The element types of the values it holds, a tuple's in order.
    pub fn leaves(&self) -> Vec<FieldType> {
        match self {
            DeclType::Tuple(t) => t.iter().flat_map(|d| d.leaves()).collect(),
            d => d.dtype().into_iter().collect(),
        }
    }
}

fn dtype_of(ty: &syn::Type) -> Option<FieldType> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() => match p.path.get_ident()?.to_string().as_str() {
            "f32" => Some(FieldType::F32),
            "f64" => Some(FieldType::F64),
            "f16" => Some(FieldType::F16),
            "bf16" => Some(FieldType::BF16),
            _ => None,
        },
        _ => None,
    }
}

pub fn parse_decl_type(ty: &syn::Type) -> FrontResult<DeclType> {
    let bad = || {
        FrontError::at(
            ty,
            "unsupported type: expected f32, f64, f16, bf16, Vector<..> or Matrix<..> of one of them, or a tuple of them",
        )
    };
    match ty {
        syn::Type::Reference(r) => parse_decl_type(&r.elem),
        syn::Type::Paren(p) => parse_decl_type(&p.elem),
        syn::Type::Tuple(t) => Ok(DeclType::Tuple(t.elems.iter().map(parse_decl_type).collect::<FrontResult<_>>()?)),
        syn::Type::Path(p) if p.qself.is_none() => {
            if let Some(d) = dtype_of(ty) {
                return Ok(DeclType::Scalar(d));
            }
            let seg = p.path.segments.last().ok_or_else(bad)?;
            let name = seg.ident.to_string();
            let syn::PathArguments::AngleBracketed(args) = &seg.arguments else {
                return Err(bad());
            };
            let inner = match args.args.first() {
                Some(syn::GenericArgument::Type(t)) if args.args.len() == 1 => dtype_of(t),
                _ => None,
            };
            let Some(d) = inner else {
                return Err(FrontError::at(&seg.arguments, format!("`{name}` takes one element type: f32, f64, f16 or bf16")));
            };
            match name.as_str() {
                "Vector" => Ok(DeclType::Vector(d)),
                "Matrix" => Ok(DeclType::Matrix(d)),
                _ => Err(bad()),
            }
        }
        _ => Err(FrontError::new(ty.span(), "unsupported type in a kernel")),
    }
}

/// Union-find over width symbols.
#[derive(Clone, Debug, Default)]
pub struct Widths {
    parent: Vec<u32>,
}

impl Widths {
    pub fn fresh(&mut self) -> WidthId {
        let id = self.parent.len() as u32;
        self.parent.push(id);
        WidthId(id)
    }
    pub fn find(&self, w: WidthId) -> WidthId {
        let mut x = w.0;
        while let Some(&p) = self.parent.get(x as usize) {
            if p == x {
                break;
            }
            x = p;
        }
        WidthId(x)
    }
    pub fn unify(&mut self, a: WidthId, b: WidthId) -> WidthId {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            // The older symbol wins so names follow declaration order.
            let (keep, drop) = if ra.0 < rb.0 { (ra, rb) } else { (rb, ra) };
            self.parent[drop.0 as usize] = keep.0;
            keep
        } else {
            ra
        }
    }
    pub fn canonical_map(&self) -> CanonMap {
        let mut map = vec![0u32; self.parent.len()];
        let mut next = 0u32;
        let mut root_id = std::collections::HashMap::new();
        for (i, slot) in map.iter_mut().enumerate() {
            let r = self.find(WidthId(i as u32));
            let id = *root_id.entry(r).or_insert_with(|| {
                let n = next;
                next += 1;
                n
            });
            *slot = id;
        }
        CanonMap { map, count: next }
    }
}

pub struct CanonMap {
    map: Vec<u32>,
    pub count: u32,
}

pub fn canon_type(t: Type, c: &CanonMap) -> Type {
    let f = |w: WidthId| WidthId(c.map.get(w.0 as usize).copied().unwrap_or(w.0));
    match t {
        Type::Vector(w) => Type::Vector(f(w)),
        Type::Mask(w) => Type::Mask(f(w)),
        Type::Matrix(a, b) => Type::Matrix(f(a), f(b)),
        other => other,
    }
}

pub fn canon_region(r: &mut Region, c: &CanonMap) {
    for t in &mut r.inputs {
        *t = canon_type(*t, c);
    }
    for n in &mut r.nodes {
        n.ty = canon_type(n.ty, c);
    }
}

pub fn type_text(t: ir::Type) -> String {
    match t {
        Type::Bool => "bool".into(),
        Type::Scalar => "scalar".into(),
        Type::Vector(_) => "vector".into(),
        Type::Matrix(..) => "matrix".into(),
        Type::Mask(_) => "mask".into(),
    }
}
