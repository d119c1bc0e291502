//! Lowering of the user's function bodies (syn expressions) into IR regions,
//! with type checking and width unification on the way.

use std::collections::HashMap;

use syn::spanned::Spanned;

use super::nesting::{too_deep, MAX_NESTING};
use super::types::{parse_decl_type, type_text, DeclType, Widths};
use super::{span_of, FrontError, FrontResult};
use crate::ir::{self, BinOp, CmpOp, FieldDecl, FieldId, Op, Region, Role, Type, UnOp, ValueId};

#[derive(Clone, Copy)]
pub enum FnKind<'a> {
    Edge,
    Node { out_struct: Option<&'a syn::ItemStruct> },
    Identity,
    Combine,
    Finalize,
}

impl FnKind<'_> {
    fn name(&self) -> &'static str {
        match self {
            FnKind::Edge => "edge",
            FnKind::Node { .. } => "node",
            FnKind::Identity => "identity",
            FnKind::Combine => "combine",
            FnKind::Finalize => "finalize",
        }
    }
    fn allowed_roles(&self) -> &'static [Role] {
        match self {
            FnKind::Edge => &[Role::Src, Role::Dst, Role::Edge, Role::Param],
            FnKind::Node { .. } => &[Role::Dst, Role::Param],
            _ => &[],
        }
    }
}

/// What a name is bound to while lowering.
#[derive(Clone, Debug)]
enum Val {
    One(ValueId),
    Tuple(Vec<ValueId>),
    /// A parameter such as `src: &Src`: only its fields can be read.
    Fields(Role),
}

pub struct Lowerer<'a> {
    fields: &'a [FieldDecl],
    widths: Widths,
}

struct Body<'k, 'a> {
    lw: &'k mut Lowerer<'a>,
    region: Region,
    scopes: Vec<HashMap<String, Val>>,
    field_cache: HashMap<FieldId, ValueId>,
    /// How many [`Body::lower_expr`] calls are open.
    depth: usize,
}

fn role_struct(role: Role) -> &'static str {
    match role {
        Role::Src => "Src",
        Role::Dst => "Dst",
        Role::Edge => "Edge",
        Role::Param => "Params",
    }
}

fn struct_role(ty: &syn::Type) -> Option<Role> {
    match ty {
        syn::Type::Reference(r) => struct_role(&r.elem),
        syn::Type::Path(p) if p.qself.is_none() => {
            let seg = p.path.segments.last()?;
            if !seg.arguments.is_none() {
                return None;
            }
            match seg.ident.to_string().as_str() {
                "Src" => Some(Role::Src),
                "Dst" => Some(Role::Dst),
                "Edge" => Some(Role::Edge),
                "Params" => Some(Role::Param),
                _ => None,
            }
        }
        _ => None,
    }
}

impl<'a> Lowerer<'a> {
    pub fn new(fields: &'a [FieldDecl], widths: Widths) -> Lowerer<'a> {
        Lowerer { fields, widths }
    }

    pub fn finish(self) -> (Vec<FieldDecl>, Widths) {
        (self.fields.to_vec(), self.widths)
    }

    /// Equal up to width unification (which it performs).
    pub fn types_compatible(&mut self, a: &[Type], b: &[Type]) -> bool {
        if a.len() != b.len() {
            return false;
        }
        for (x, y) in a.iter().zip(b) {
            match (x, y) {
                (Type::Vector(p), Type::Vector(q)) => {
                    self.widths.unify(*p, *q);
                }
                (Type::Scalar, Type::Scalar) | (Type::Bool, Type::Bool) => {}
                _ => return false,
            }
        }
        true
    }

    pub fn types_text(&self, t: &[Type]) -> String {
        let v: Vec<String> = t.iter().map(|t| type_text(*t)).collect();
        if v.len() == 1 {
            v[0].clone()
        } else {
            format!("({})", v.join(", "))
        }
    }

    /// Lower one of the kernel's functions. `inputs` are the types the
    /// region receives (aggregate for `node`, state for monoid functions).
    pub fn lower_fn(&mut self, f: &syn::ItemFn, kind: FnKind<'_>, inputs: &[Type]) -> FrontResult<Region> {
        let fname = kind.name();
        if !f.sig.generics.params.is_empty() {
            return Err(FrontError::at(&f.sig.generics, format!("`fn {fname}` cannot be generic")));
        }
        if let Some(a) = &f.sig.asyncness {
            return Err(FrontError::at(a, "kernel functions are not async"));
        }
        let region_inputs: Vec<Type> = match kind {
            FnKind::Combine => inputs.iter().chain(inputs.iter()).copied().collect(),
            FnKind::Edge | FnKind::Identity => vec![],
            _ => inputs.to_vec(),
        };
        let mut body = Body {
            lw: self,
            region: Region::new(region_inputs.clone()),
            scopes: vec![HashMap::new()],
            field_cache: HashMap::new(),
            depth: 0,
        };
        // Bind parameters.
        let mut value_params = 0usize;
        for arg in &f.sig.inputs {
            let syn::FnArg::Typed(pt) = arg else {
                return Err(FrontError::at(arg, "kernel functions take no `self`"));
            };
            let name = match &*pt.pat {
                syn::Pat::Ident(pi) => pi.ident.to_string(),
                syn::Pat::Wild(_) => "_".to_string(),
                other => return Err(FrontError::at(other, "parameters are plain names, e.g. `src: &Src`")),
            };
            if let Some(role) = struct_role(&pt.ty) {
                if !kind.allowed_roles().contains(&role) {
                    return Err(FrontError::at(&pt.ty, format!("`fn {fname}` cannot read `{}` fields", role_struct(role))));
                }
                if !body.lw.fields.iter().any(|fd| fd.role == role) {
                    return Err(FrontError::at(&pt.ty, format!("`{}` is not declared in this kernel", role_struct(role))));
                }
                body.bind(name, Val::Fields(role));
                continue;
            }
            let decl = parse_decl_type(&pt.ty)?;
            let (start, count) = match (kind, value_params) {
                (FnKind::Node { .. }, 0) | (FnKind::Finalize, 0) | (FnKind::Combine, 0) => (0, inputs.len()),
                (FnKind::Combine, 1) => (inputs.len(), inputs.len()),
                _ => {
                    return Err(FrontError::at(
                        pt,
                        match kind {
                            FnKind::Edge => "`fn edge` takes `&Src`, `&Dst`, `&Edge` and `&Params`".to_string(),
                            FnKind::Node { .. } => "`fn node` takes `&Dst`, `&Params` and one aggregate".to_string(),
                            FnKind::Identity => "`fn identity` takes no parameters".to_string(),
                            FnKind::Combine => "`fn combine` takes two states: `combine(a: S, b: S)`".to_string(),
                            FnKind::Finalize => "`fn finalize` takes one state".to_string(),
                        },
                    ))
                }
            };
            value_params += 1;
            let tys = &region_inputs[start..start + count];
            body.check_decl(&decl, tys, &pt.ty, &format!("parameter `{name}`"))?;
            let ids: Vec<ValueId> =
                (0..count).map(|k| body.region.push(Op::Input((start + k) as u32), tys[k], span_of(&pt.pat))).collect();
            let val = if matches!(decl, DeclType::Tuple(_)) { Val::Tuple(ids) } else { Val::One(ids[0]) };
            body.bind(name, val);
        }
        match kind {
            FnKind::Combine if value_params != 2 => {
                return Err(FrontError::at(&f.sig, "`fn combine` takes two states: `combine(a: S, b: S)`"));
            }
            FnKind::Finalize if value_params != 1 => {
                return Err(FrontError::at(&f.sig, "`fn finalize` takes one state: `finalize(s: S)`"));
            }
            _ => {}
        }
        let result = match kind {
            FnKind::Node { out_struct: Some(out) } => body.lower_out_block(&f.block, out)?,
            _ => body.lower_block(&f.block)?,
        };
        let outs = match result {
            Val::One(v) => vec![v],
            Val::Tuple(v) => v,
            Val::Fields(_) => return Err(FrontError::at(&f.block, "a kernel function returns values, not a field struct")),
        };
        if outs.is_empty() {
            return Err(FrontError::at(&f.block, format!("`fn {fname}` must return a value")));
        }
        for &o in &outs {
            let t = body.region.ty(o);
            if matches!(t, Type::Bool | Type::Matrix(..)) {
                return Err(FrontError::at(
                    &f.block,
                    format!("`fn {fname}` returns a {}; it must return scalars or vectors", type_text(t)),
                ));
            }
        }
        match (&f.sig.output, kind) {
            (_, FnKind::Node { out_struct: Some(_) }) => {}
            (syn::ReturnType::Default, _) => {
                return Err(FrontError::at(&f.sig, format!("`fn {fname}` must declare its return type")));
            }
            (syn::ReturnType::Type(_, ty), _) => {
                let decl = parse_decl_type(ty)?;
                let tys: Vec<Type> = outs.iter().map(|&o| body.region.ty(o)).collect();
                body.check_decl(&decl, &tys, ty, "the return type")?;
            }
        }
        body.region.outputs = outs;
        Ok(body.region)
    }
}

fn decl_text(d: &DeclType) -> String {
    match d {
        DeclType::Scalar(t) => t.name().to_string(),
        DeclType::Vector(t) => format!("Vector<{}>", t.name()),
        DeclType::Matrix(t) => format!("Matrix<{}>", t.name()),
        DeclType::Tuple(v) => format!("({})", v.iter().map(decl_text).collect::<Vec<_>>().join(", ")),
    }
}

impl Body<'_, '_> {
    fn bind(&mut self, name: String, v: Val) {
        if name == "_" {
            return;
        }
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name, v);
        }
    }

    fn lookup(&self, name: &str) -> Option<&Val> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// Check a declared type against the IR types it describes.
    fn check_decl(&mut self, decl: &DeclType, tys: &[Type], at: &impl Spanned, what: &str) -> FrontResult<()> {
        let flat: Vec<&DeclType> = match decl {
            DeclType::Tuple(v) => v.iter().collect(),
            d => vec![d],
        };
        let ok = flat.len() == tys.len()
            && flat
                .iter()
                .zip(tys)
                .all(|(d, t)| matches!((d, t), (DeclType::Scalar(_), Type::Scalar) | (DeclType::Vector(_), Type::Vector(_))));
        if !ok {
            return Err(FrontError::at(
                at,
                format!("type mismatch: {what} is declared `{}` but the value is {}", decl_text(decl), self.lw.types_text(tys)),
            ));
        }
        Ok(())
    }

    fn push(&mut self, op: Op, ty: Type, at: ir::Span) -> ValueId {
        self.region.push(op, ty, at)
    }

    fn one(&self, v: Val, at: &impl Spanned) -> FrontResult<ValueId> {
        match v {
            Val::One(x) => Ok(x),
            Val::Tuple(t) => Err(FrontError::at(at, format!("expected one value, found a tuple of {}", t.len()))),
            Val::Fields(role) => Err(FrontError::at(
                at,
                format!("this names the `{}` fields; read one of them, e.g. `{}.name`", role_struct(role), role.name()),
            )),
        }
    }

    fn lower_block(&mut self, b: &syn::Block) -> FrontResult<Val> {
        self.scopes.push(HashMap::new());
        let r = self.lower_stmts(b);
        self.scopes.pop();
        r
    }

    fn lower_stmts(&mut self, b: &syn::Block) -> FrontResult<Val> {
        let n = b.stmts.len();
        for (i, st) in b.stmts.iter().enumerate() {
            match st {
                syn::Stmt::Local(l) => self.lower_let(l)?,
                syn::Stmt::Expr(e, None) if i + 1 == n => return self.lower_expr(e),
                syn::Stmt::Expr(e, _) => {
                    // A construct outside the language reports its own error first.
                    self.lower_expr(e)?;
                    return Err(FrontError::at(e, "only `let` bindings and a final expression are allowed in a kernel function"));
                }
                syn::Stmt::Item(it) => return Err(FrontError::at(it, "items inside kernel functions are not supported")),
                syn::Stmt::Macro(m) => return Err(FrontError::at(m, "macros are not part of the kernel language")),
            }
        }
        Err(FrontError::at(b, "a kernel function must end with the value it returns"))
    }

    fn lower_let(&mut self, l: &syn::Local) -> FrontResult<()> {
        let Some(init) = &l.init else {
            return Err(FrontError::at(l, "`let` needs a value: `let x = ...;`"));
        };
        if let Some((e, _)) = &init.diverge {
            return Err(FrontError::at(e, "`let ... else` is not supported"));
        }
        let v = self.lower_expr(&init.expr)?;
        self.bind_pat(&l.pat, v)
    }

    fn bind_pat(&mut self, pat: &syn::Pat, v: Val) -> FrontResult<()> {
        match pat {
            syn::Pat::Ident(pi) if pi.subpat.is_none() => {
                self.bind(pi.ident.to_string(), v);
                Ok(())
            }
            syn::Pat::Wild(_) => Ok(()),
            syn::Pat::Type(pt) => {
                let decl = parse_decl_type(&pt.ty)?;
                let tys: Vec<Type> = match &v {
                    Val::One(x) => vec![self.region.ty(*x)],
                    Val::Tuple(t) => t.iter().map(|x| self.region.ty(*x)).collect(),
                    Val::Fields(_) => vec![],
                };
                self.check_decl(&decl, &tys, &pt.ty, "this binding")?;
                self.bind_pat(&pt.pat, v)
            }
            syn::Pat::Tuple(pt) => {
                let Val::Tuple(items) = v else {
                    return Err(FrontError::at(pt, "this pattern destructures a tuple, but the value is not one"));
                };
                if items.len() != pt.elems.len() {
                    return Err(FrontError::at(
                        pt,
                        format!("the tuple has {} values, the pattern {}", items.len(), pt.elems.len()),
                    ));
                }
                for (p, x) in pt.elems.iter().zip(items) {
                    self.bind_pat(p, Val::One(x))?;
                }
                Ok(())
            }
            other => Err(FrontError::at(other, "unsupported pattern: use a name or a tuple of names")),
        }
    }

    /// `node` with `struct Out`: the tail must be `Out { name: value, .. }`.
    fn lower_out_block(&mut self, b: &syn::Block, out: &syn::ItemStruct) -> FrontResult<Val> {
        self.scopes.push(HashMap::new());
        let n = b.stmts.len();
        let mut result = None;
        for (i, st) in b.stmts.iter().enumerate() {
            match st {
                syn::Stmt::Local(l) => self.lower_let(l)?,
                syn::Stmt::Expr(syn::Expr::Struct(s), None) if i + 1 == n => {
                    result = Some(self.lower_out_struct(s, out)?);
                }
                syn::Stmt::Expr(e, None) if i + 1 == n => {
                    return Err(FrontError::at(e, "with `struct Out`, `fn node` must end with `Out { .. }`"));
                }
                other => return Err(FrontError::at(other, "only `let` bindings and a final `Out { .. }` are allowed here")),
            }
        }
        self.scopes.pop();
        result.ok_or_else(|| FrontError::at(b, "`fn node` must end with `Out { .. }`"))
    }

    fn lower_out_struct(&mut self, s: &syn::ExprStruct, out: &syn::ItemStruct) -> FrontResult<Val> {
        if !s.path.is_ident("Out") {
            return Err(FrontError::at(&s.path, "expected `Out { .. }`"));
        }
        if let Some(r) = &s.rest {
            return Err(FrontError::at(r, "`..` is not supported in `Out { .. }`"));
        }
        let syn::Fields::Named(decl) = &out.fields else {
            return Err(FrontError::at(&out.fields, "`Out` must have named fields"));
        };
        let mut vals = Vec::new();
        for f in &decl.named {
            let Some(ident) = &f.ident else { continue };
            let fv = s
                .fields
                .iter()
                .find(|fv| matches!(&fv.member, syn::Member::Named(m) if m == ident))
                .ok_or_else(|| FrontError::at(s, format!("missing output `{ident}` in `Out {{ .. }}`")))?;
            let v = self.lower_expr(&fv.expr)?;
            let v = self.one(v, &fv.expr)?;
            let d = parse_decl_type(&f.ty)?;
            let t = self.region.ty(v);
            self.check_decl(&d, &[t], &fv.expr, &format!("output `{ident}`"))?;
            vals.push(v);
        }
        for fv in &s.fields {
            let known = decl.named.iter().any(|f| match (&f.ident, &fv.member) {
                (Some(i), syn::Member::Named(m)) => i == m,
                _ => false,
            });
            if !known {
                return Err(FrontError::at(&fv.member, "no such output in `struct Out`"));
            }
        }
        Ok(Val::Tuple(vals))
    }

    fn elementwise(&mut self, a: ValueId, b: ValueId, at: &impl Spanned, what: &str) -> FrontResult<Type> {
        let (ta, tb) = (self.region.ty(a), self.region.ty(b));
        match (ta, tb) {
            (Type::Scalar, Type::Scalar) => Ok(Type::Scalar),
            (Type::Scalar, Type::Vector(w)) | (Type::Vector(w), Type::Scalar) => Ok(Type::Vector(w)),
            (Type::Vector(x), Type::Vector(y)) => Ok(Type::Vector(self.lw.widths.unify(x, y))),
            _ => Err(FrontError::at(
                at,
                format!("type mismatch: `{what}` needs scalars or vectors, found {} and {}", type_text(ta), type_text(tb)),
            )),
        }
    }

    fn numeric(&self, a: ValueId, at: &impl Spanned, what: &str) -> FrontResult<Type> {
        let t = self.region.ty(a);
        match t {
            Type::Scalar | Type::Vector(_) => Ok(t),
            _ => Err(FrontError::at(at, format!("type mismatch: `{what}` needs a scalar or vector, found {}", type_text(t)))),
        }
    }

    fn scalar(&self, a: ValueId, at: &impl Spanned, what: &str) -> FrontResult<()> {
        match self.region.ty(a) {
            Type::Scalar => Ok(()),
            t => Err(FrontError::at(at, format!("type mismatch: `{what}` needs scalars, found {}", type_text(t)))),
        }
    }

    fn boolean(&self, a: ValueId, at: &impl Spanned, what: &str) -> FrontResult<()> {
        match self.region.ty(a) {
            Type::Bool => Ok(()),
            Type::Mask(_) => Err(FrontError::at(
                at,
                format!("type mismatch: {what} needs a bool (a comparison of scalars), found a mask: choose feature by feature with select(mask, a, b)"),
            )),
            t => Err(FrontError::at(at, format!("type mismatch: {what} needs a bool (a comparison), found {}", type_text(t)))),
        }
    }

    fn binary(&mut self, op: BinOp, a: ValueId, b: ValueId, at: &impl Spanned, sp: ir::Span, what: &str) -> FrontResult<ValueId> {
        let t = self.elementwise(a, b, at, what)?;
        Ok(self.push(Op::Binary(op, a, b), t, sp))
    }

    fn lower_one(&mut self, e: &syn::Expr) -> FrontResult<ValueId> {
        let v = self.lower_expr(e)?;
        self.one(v, e)
    }

    fn constant(&mut self, c: f64, at: ir::Span) -> ValueId {
        self.push(Op::Const(c), Type::Scalar, at)
    }

    /// Lower one expression, refusing nesting past [`MAX_NESTING`]. The
    /// token scan ([`super::nesting`]) already bounds parentheses, blocks
    /// and prefix operators; what reaches here deeper is a chain `syn`
    /// builds left-deep in a loop (`x.relu().relu()...`, `x as f32 as
    /// f32...`), which this recursion would otherwise follow term by term.
    /// Binary chains are walked iteratively ([`Body::lower_binary`]) and do
    /// not count.
    fn lower_expr(&mut self, e: &syn::Expr) -> FrontResult<Val> {
        let at = first_token(e);
        if self.depth >= MAX_NESTING {
            return Err(too_deep(at));
        }
        self.depth += 1;
        let v = self.lower_expr_at(e, span_at(at));
        self.depth -= 1;
        v
    }

    fn lower_expr_at(&mut self, e: &syn::Expr, at: ir::Span) -> FrontResult<Val> {
        match e {
            syn::Expr::Lit(l) => match &l.lit {
                syn::Lit::Float(f) => {
                    let c: f64 = f.base10_parse().map_err(|er| FrontError::at(f, er.to_string()))?;
                    Ok(Val::One(self.constant(c, at)))
                }
                syn::Lit::Int(i) => {
                    let c: f64 = i.base10_parse().map_err(|er| FrontError::at(i, er.to_string()))?;
                    Ok(Val::One(self.constant(c, at)))
                }
                other => Err(FrontError::at(other, "only numeric literals are part of the kernel language")),
            },
            syn::Expr::Paren(p) => self.lower_expr(&p.expr),
            syn::Expr::Group(g) => self.lower_expr(&g.expr),
            syn::Expr::Reference(r) => self.lower_expr(&r.expr),
            syn::Expr::Block(b) if b.label.is_none() => self.lower_block(&b.block),
            syn::Expr::Path(p) => self.lower_path(p, at),
            syn::Expr::Field(f) => self.lower_field(f, at),
            syn::Expr::Tuple(t) => {
                let mut v = Vec::new();
                for x in &t.elems {
                    v.push(self.lower_one(x)?);
                }
                Ok(Val::Tuple(v))
            }
            syn::Expr::Unary(u) => {
                let a = self.lower_one(&u.expr)?;
                match u.op {
                    syn::UnOp::Neg(_) => {
                        let t = self.numeric(a, e, "-")?;
                        Ok(Val::One(self.push(Op::Unary(UnOp::Neg, a), t, at)))
                    }
                    syn::UnOp::Not(_) => {
                        let t = self.region.ty(a);
                        if !t.is_boolean() {
                            self.boolean(a, e, "`!`")?;
                        }
                        Ok(Val::One(self.push(Op::Unary(UnOp::Not, a), t, at)))
                    }
                    syn::UnOp::Deref(_) => Ok(Val::One(a)),
                    _ => Err(FrontError::at(e, "unsupported unary operator")),
                }
            }
            syn::Expr::Binary(b) => self.lower_binary(b),
            syn::Expr::If(i) => self.lower_if(i, at),
            syn::Expr::Call(c) => {
                let name = match &*c.func {
                    syn::Expr::Path(p) if p.qself.is_none() => {
                        let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                        let prefix_ok = segs[..segs.len().saturating_sub(1)]
                            .iter()
                            .all(|s| matches!(s.as_str(), "f32" | "f64" | "tiga" | "lang"));
                        if !prefix_ok {
                            return Err(FrontError::at(&c.func, "unknown function: see the kernel language's function list"));
                        }
                        segs.last().cloned().unwrap_or_default()
                    }
                    other => return Err(FrontError::at(other, "only the kernel language's functions can be called")),
                };
                let args: Vec<&syn::Expr> = c.args.iter().collect();
                self.lower_call(&name, &args, e, at, &c.func)
            }
            syn::Expr::MethodCall(m) => {
                let name = m.method.to_string();
                if name == "clone" && m.args.is_empty() {
                    return self.lower_expr(&m.receiver);
                }
                let mut args: Vec<&syn::Expr> = vec![&m.receiver];
                args.extend(m.args.iter());
                self.lower_call(&name, &args, e, at, &m.method)
            }
            syn::Expr::Cast(c) => {
                let ok = matches!(&*c.ty, syn::Type::Path(p) if p.path.is_ident("f32") || p.path.is_ident("f64"));
                if !ok {
                    return Err(FrontError::at(&c.ty, "only `as f32` / `as f64` casts are accepted"));
                }
                self.lower_expr(&c.expr)
            }
            syn::Expr::ForLoop(_) | syn::Expr::While(_) | syn::Expr::Loop(_) => Err(FrontError::at(
                e,
                "loops are not part of the kernel language: use sum/dot/matvec over the feature axis, and the reducer over edges",
            )),
            syn::Expr::Index(_) => {
                Err(FrontError::at(e, "indexing is not part of the kernel language: fields are read whole (`src.h`)"))
            }
            syn::Expr::Closure(_) => Err(FrontError::at(e, "closures are not part of the kernel language")),
            syn::Expr::Return(_) => Err(FrontError::at(e, "`return` is not supported: end the function with its value")),
            syn::Expr::Macro(_) => Err(FrontError::at(e, "macros are not part of the kernel language")),
            syn::Expr::Assign(_) => Err(FrontError::at(e, "assignment is not supported: bind new names with `let`")),
            syn::Expr::Match(_) => Err(FrontError::at(e, "`match` is not supported: use `if`/`else`")),
            syn::Expr::Struct(_) => {
                Err(FrontError::at(e, "struct literals are only allowed as `Out { .. }` at the end of `fn node`"))
            }
            _ => Err(FrontError::at(e, "unsupported construct in a kernel function")),
        }
    }

    fn lower_path(&mut self, p: &syn::ExprPath, at: ir::Span) -> FrontResult<Val> {
        if let Some(id) = p.path.get_ident() {
            let name = id.to_string();
            return match self.lookup(&name) {
                Some(v) => Ok(v.clone()),
                None => Err(FrontError::at(id, format!("unknown name `{name}`"))),
            };
        }
        let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        let tail: &[&str] = match segs.as_slice() {
            ["std" | "core", rest @ ..] => rest,
            rest => rest,
        };
        let c = match tail {
            ["f32" | "f64", "INFINITY"] => Some(f64::INFINITY),
            ["f32" | "f64", "NEG_INFINITY"] => Some(f64::NEG_INFINITY),
            ["f32", "MAX"] => Some(f32::MAX as f64),
            ["f32", "MIN"] => Some(f32::MIN as f64),
            ["f64", "MAX"] => Some(f64::MAX),
            ["f64", "MIN"] => Some(f64::MIN),
            ["f32" | "f64", "consts", "PI"] => Some(std::f64::consts::PI),
            ["f32" | "f64", "consts", "E"] => Some(std::f64::consts::E),
            ["f32" | "f64", "consts", "LN_2"] => Some(std::f64::consts::LN_2),
            ["f32" | "f64", "consts", "SQRT_2"] => Some(std::f64::consts::SQRT_2),
            _ => None,
        };
        match c {
            Some(c) => Ok(Val::One(self.constant(c, at))),
            None => Err(FrontError::at(p, "unknown path: constants are f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, f32::consts::{PI, E, LN_2, SQRT_2}")),
        }
    }

    fn lower_field(&mut self, f: &syn::ExprField, at: ir::Span) -> FrontResult<Val> {
        // `src.h`: a field of a role struct.
        if let syn::Expr::Path(p) = &*f.base {
            if let Some(id) = p.path.get_ident() {
                if let Some(Val::Fields(role)) = self.lookup(&id.to_string()).cloned() {
                    let syn::Member::Named(m) = &f.member else {
                        return Err(FrontError::at(&f.member, "fields are read by name"));
                    };
                    let name = m.to_string();
                    let found = self.lw.fields.iter().position(|fd| fd.role == role && fd.name == name);
                    let Some(ix) = found else {
                        let known: Vec<&str> =
                            self.lw.fields.iter().filter(|fd| fd.role == role).map(|fd| fd.name.as_str()).collect();
                        return Err(FrontError::at(
                            m,
                            format!("unknown field `{name}` in `{}` (its fields: {})", role_struct(role), known.join(", ")),
                        ));
                    };
                    let fid = FieldId(ix as u32);
                    if let Some(&v) = self.field_cache.get(&fid) {
                        return Ok(Val::One(v));
                    }
                    let ty = self.lw.fields[ix].ty;
                    let v = self.push(Op::Field(fid), ty, at);
                    self.field_cache.insert(fid, v);
                    return Ok(Val::One(v));
                }
            }
        }
        let base = self.lower_expr(&f.base)?;
        match (base, &f.member) {
            (Val::Tuple(items), syn::Member::Unnamed(ix)) => items
                .get(ix.index as usize)
                .map(|v| Val::One(*v))
                .ok_or_else(|| FrontError::at(&f.member, format!("the tuple has {} values", items.len()))),
            _ => Err(FrontError::at(&f.member, "only tuples (`t.0`) and field structs (`src.x`) have fields")),
        }
    }

    /// `a + b + c + ...`: `syn` builds a chain as a left-deep tree, one
    /// level per term, so its left spine is walked with a loop (a recursion
    /// would need a stack frame per term) and its first token, where every
    /// link's span starts, is found once.
    fn lower_binary(&mut self, b: &syn::ExprBinary) -> FrontResult<Val> {
        let mut spine = vec![b];
        let mut first = &*b.left;
        while let syn::Expr::Binary(inner) = first {
            spine.push(inner);
            first = &inner.left;
        }
        let mut acc = self.lower_expr(first)?;
        let at = span_at(first_token(first));
        for link in spine.into_iter().rev() {
            let l = self.one(acc, &link.left)?;
            let r = self.lower_one(&link.right)?;
            acc = Val::One(self.binary_link(link, l, r, at)?);
        }
        Ok(acc)
    }

    /// One link `l op r` of a binary chain whose first token is at `at`.
    fn binary_link(&mut self, b: &syn::ExprBinary, l: ValueId, r: ValueId, at: ir::Span) -> FrontResult<ValueId> {
        use syn::BinOp as B;
        let (op, sym) = match b.op {
            B::Add(_) => (BinOp::Add, "+"),
            B::Sub(_) => (BinOp::Sub, "-"),
            B::Mul(_) => (BinOp::Mul, "*"),
            B::Div(_) => (BinOp::Div, "/"),
            B::And(_) | B::Or(_) => {
                if matches!(self.region.ty(l), Type::Mask(_)) || matches!(self.region.ty(r), Type::Mask(_)) {
                    return Err(FrontError::at(b, "`&&`/`||` take bools: combine masks feature by feature with `&` and `|`"));
                }
                self.boolean(l, &b.left, "`&&`/`||`")?;
                self.boolean(r, &b.right, "`&&`/`||`")?;
                let op = if matches!(b.op, B::And(_)) { BinOp::And } else { BinOp::Or };
                return Ok(self.push(Op::Binary(op, l, r), Type::Bool, at));
            }
            B::Lt(_) | B::Le(_) | B::Gt(_) | B::Ge(_) | B::Eq(_) | B::Ne(_) => {
                let c = match b.op {
                    B::Lt(_) => CmpOp::Lt,
                    B::Le(_) => CmpOp::Le,
                    B::Gt(_) => CmpOp::Gt,
                    B::Ge(_) => CmpOp::Ge,
                    B::Eq(_) => CmpOp::Eq,
                    _ => CmpOp::Ne,
                };
                self.scalar(l, &b.left, "comparison")?;
                self.scalar(r, &b.right, "comparison")?;
                return Ok(self.push(Op::Cmp(c, l, r), Type::Bool, at));
            }
            B::BitAnd(_) | B::BitOr(_) => {
                let (tl, tr) = (self.region.ty(l), self.region.ty(r));
                let t = match (tl, tr) {
                    (Type::Bool, Type::Bool) => Type::Bool,
                    (Type::Mask(x), Type::Mask(y)) => Type::Mask(self.lw.widths.unify(x, y)),
                    _ => {
                        return Err(FrontError::at(
                            b,
                            format!(
                                "type mismatch: `&`/`|` combine two masks or two bools, found {} and {}",
                                type_text(tl),
                                type_text(tr)
                            ),
                        ))
                    }
                };
                let op = if matches!(b.op, B::BitAnd(_)) { BinOp::And } else { BinOp::Or };
                return Ok(self.push(Op::Binary(op, l, r), t, at));
            }
            _ => {
                return Err(FrontError::at(&b.op, "unsupported operator: use + - * / and comparisons; bind new names with `let`"))
            }
        };
        self.binary(op, l, r, b, at, sym)
    }

    fn lower_if(&mut self, i: &syn::ExprIf, at: ir::Span) -> FrontResult<Val> {
        let c = self.lower_one(&i.cond)?;
        self.boolean(c, &i.cond, "`if`")?;
        let Some((_, els)) = &i.else_branch else {
            return Err(FrontError::at(i, "`if` is an expression here and needs an `else`"));
        };
        let a = self.lower_block(&i.then_branch)?;
        let b = self.lower_expr(els)?;
        let flat = |v: Val, at: &dyn Spanned| -> FrontResult<Vec<ValueId>> {
            match v {
                Val::One(x) => Ok(vec![x]),
                Val::Tuple(t) => Ok(t),
                Val::Fields(_) => Err(FrontError::new(at.span(), "an `if` arm must yield values")),
            }
        };
        let tuple = matches!(a, Val::Tuple(_));
        let xa = flat(a, &i.then_branch)?;
        let xb = flat(b, &**els)?;
        if xa.len() != xb.len() || tuple != (xb.len() != 1 || tuple) {
            return Err(FrontError::at(i, "the arms of `if` yield different numbers of values"));
        }
        let mut out = Vec::new();
        for (x, y) in xa.into_iter().zip(xb) {
            let t = self.elementwise(x, y, i, "if/else")?;
            out.push(self.push(Op::Select(c, x, y), t, at));
        }
        Ok(if tuple { Val::Tuple(out) } else { Val::One(out[0]) })
    }

    fn lower_call(
        &mut self,
        name: &str,
        args: &[&syn::Expr],
        call: &syn::Expr,
        at: ir::Span,
        name_at: &impl Spanned,
    ) -> FrontResult<Val> {
        let arity = |n: usize| -> FrontResult<()> {
            if args.len() != n {
                Err(FrontError::at(name_at, format!("`{name}` takes {n} argument(s), found {}", args.len())))
            } else {
                Ok(())
            }
        };
        let unary = match name {
            "abs" => Some(UnOp::Abs),
            "exp" => Some(UnOp::Exp),
            "ln" => Some(UnOp::Ln),
            "sqrt" => Some(UnOp::Sqrt),
            "tanh" => Some(UnOp::Tanh),
            "sigmoid" => Some(UnOp::Sigmoid),
            "relu" => Some(UnOp::Relu),
            _ => None,
        };
        if let Some(u) = unary {
            arity(1)?;
            let a = self.lower_one(args[0])?;
            let t = self.numeric(a, args[0], name)?;
            return Ok(Val::One(self.push(Op::Unary(u, a), t, at)));
        }
        let v = match name {
            "min" | "max" | "leaky_relu" => {
                arity(2)?;
                let a = self.lower_one(args[0])?;
                let b = self.lower_one(args[1])?;
                let op = match name {
                    "min" => BinOp::Min,
                    "max" => BinOp::Max,
                    _ => BinOp::LeakyRelu,
                };
                self.binary(op, a, b, call, at, name)?
            }
            "gt" | "ge" | "lt" | "le" => {
                arity(2)?;
                let a = self.lower_one(args[0])?;
                let b = self.lower_one(args[1])?;
                let Type::Vector(w) = self.elementwise(a, b, call, name)? else {
                    return Err(FrontError::at(
                        call,
                        format!("`{name}` compares vectors feature by feature (a mask for `select`); compare scalars with `<`, `<=`, `>`, `>=`"),
                    ));
                };
                let c = match name {
                    "gt" => CmpOp::Gt,
                    "ge" => CmpOp::Ge,
                    "lt" => CmpOp::Lt,
                    _ => CmpOp::Le,
                };
                self.push(Op::Cmp(c, a, b), Type::Mask(w), at)
            }
            "select" => {
                arity(3)?;
                let c = self.lower_one(args[0])?;
                let Type::Mask(w) = self.region.ty(c) else {
                    return Err(FrontError::at(
                        args[0],
                        format!(
                            "type mismatch: `select` takes a mask (gt, ge, lt, le of vectors) first, found {}; choose between scalars with `if`",
                            type_text(self.region.ty(c))
                        ),
                    ));
                };
                let a = self.lower_one(args[1])?;
                let b = self.lower_one(args[2])?;
                let w = match self.elementwise(a, b, call, name)? {
                    Type::Vector(v) => self.lw.widths.unify(v, w),
                    _ => w,
                };
                self.push(Op::Select(c, a, b), Type::Vector(w), at)
            }
            "elu" => {
                // x if x > 0, else alpha·(e^(x > 0 ? 0 : x) − 1): the
                // exponent is clamped so the branch not taken never
                // overflows (an infinite e^x times a zero cotangent would be
                // NaN in the adjoint); for x ≤ 0 it is x itself, so the value
                // is exactly alpha·(e^x − 1) and the slope at 0 is alpha, as
                // PyTorch's (a `min(x, 0)` clamp would split it at the tie).
                arity(2)?;
                let x = self.lower_one(args[0])?;
                let t = self.numeric(x, args[0], name)?;
                let alpha = self.lower_one(args[1])?;
                self.scalar(alpha, args[1], "`elu`'s alpha")?;
                let zero = self.constant(0.0, at);
                let one = self.constant(1.0, at);
                let cond_ty = match t {
                    Type::Vector(w) => Type::Mask(w),
                    _ => Type::Bool,
                };
                let c = self.push(Op::Cmp(CmpOp::Gt, x, zero), cond_ty, at);
                let m = self.push(Op::Select(c, zero, x), t, at);
                let e = self.push(Op::Unary(UnOp::Exp, m), t, at);
                let e1 = self.push(Op::Binary(BinOp::Sub, e, one), t, at);
                let neg = self.push(Op::Binary(BinOp::Mul, alpha, e1), t, at);
                self.push(Op::Select(c, x, neg), t, at)
            }
            "powi" => {
                arity(2)?;
                let a = self.lower_one(args[0])?;
                let t = self.numeric(a, args[0], name)?;
                let n = int_literal(args[1]).ok_or_else(|| FrontError::at(args[1], "`powi` takes an integer literal exponent"))?;
                self.push(Op::Powi(a, n), t, at)
            }
            "sum" => {
                arity(1)?;
                let a = self.lower_one(args[0])?;
                if !matches!(self.region.ty(a), Type::Vector(_)) {
                    return Err(FrontError::at(args[0], format!("type mismatch: `sum` sums a vector over its features, found {}", type_text(self.region.ty(a)))));
                }
                self.push(Op::Sum(a), Type::Scalar, at)
            }
            "dot" => {
                arity(2)?;
                let a = self.lower_one(args[0])?;
                let b = self.lower_one(args[1])?;
                match (self.region.ty(a), self.region.ty(b)) {
                    (Type::Vector(x), Type::Vector(y)) => {
                        self.lw.widths.unify(x, y);
                    }
                    (ta, tb) => {
                        return Err(FrontError::at(call, format!("type mismatch: `dot` takes two vectors, found {} and {}", type_text(ta), type_text(tb))));
                    }
                }
                self.push(Op::Dot(a, b), Type::Scalar, at)
            }
            "matvec" => {
                arity(2)?;
                let m = self.lower_one(args[0])?;
                let v = self.lower_one(args[1])?;
                match (self.region.ty(m), self.region.ty(v)) {
                    (Type::Matrix(r, c), Type::Vector(w)) => {
                        self.lw.widths.unify(c, w);
                        self.push(Op::MatVec(m, v), Type::Vector(r), at)
                    }
                    (tm, tv) => {
                        return Err(FrontError::at(call, format!("type mismatch: `matvec` takes a matrix parameter and a vector, found {} and {}", type_text(tm), type_text(tv))));
                    }
                }
            }
            _ => {
                return Err(FrontError::at(
                    name_at,
                    format!("unknown function `{name}`: the kernel language has min, max, abs, exp, ln, sqrt, tanh, sigmoid, relu, leaky_relu, elu, powi, sum, dot, matvec, gt, ge, lt, le, select"),
                ))
            }
        };
        Ok(Val::One(v))
    }
}

fn int_literal(e: &syn::Expr) -> Option<i32> {
    match e {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => i.base10_parse().ok(),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => int_literal(&u.expr).map(|v| -v),
        syn::Expr::Paren(p) => int_literal(&p.expr),
        _ => None,
    }
}

fn span_at(sp: proc_macro2::Span) -> ir::Span {
    let lc = sp.start();
    ir::Span { line: lc.line as u32, col: lc.column as u32 }
}

/// The span of an expression's first token, where its IR span starts.
/// `Spanned::span` would print the whole expression back to tokens to join
/// their spans: a cost in the size of the expression on every call, which
/// made capturing a chain quadratic. The walk follows left operands, so it
/// costs the length of the expression's left spine.
fn first_token(mut e: &syn::Expr) -> proc_macro2::Span {
    use syn::Expr as E;
    loop {
        let (attrs, next): (&[syn::Attribute], Option<&syn::Expr>) = match e {
            E::Binary(x) => (&x.attrs, Some(&x.left)),
            E::Cast(x) => (&x.attrs, Some(&x.expr)),
            E::MethodCall(x) => (&x.attrs, Some(&x.receiver)),
            E::Field(x) => (&x.attrs, Some(&x.base)),
            E::Call(x) => (&x.attrs, Some(&x.func)),
            E::Index(x) => (&x.attrs, Some(&x.expr)),
            E::Try(x) => (&x.attrs, Some(&x.expr)),
            E::Await(x) => (&x.attrs, Some(&x.base)),
            E::Assign(x) => (&x.attrs, Some(&x.left)),
            E::Lit(x) => (&x.attrs, None),
            E::Path(x) => (&x.attrs, None),
            E::Paren(x) => (&x.attrs, None),
            E::Unary(x) => (&x.attrs, None),
            E::Reference(x) => (&x.attrs, None),
            E::Block(x) => (&x.attrs, None),
            E::If(x) => (&x.attrs, None),
            E::Tuple(x) => (&x.attrs, None),
            E::Struct(x) => (&x.attrs, None),
            // Outside the kernel language: refused once, whatever it costs.
            _ => return e.span(),
        };
        if let Some(a) = attrs.first() {
            return a.pound_token.span;
        }
        match (e, next) {
            (_, Some(n)) => e = n,
            (E::Lit(x), _) => return x.lit.span(),
            (E::Path(x), _) => return path_start(x.qself.as_ref(), &x.path),
            (E::Struct(x), _) => return path_start(x.qself.as_ref(), &x.path),
            (E::Paren(x), _) => return x.paren_token.span.open(),
            (E::Tuple(x), _) => return x.paren_token.span.open(),
            (E::Unary(x), _) => return x.op.span(),
            (E::Reference(x), _) => return x.and_token.span,
            (E::Block(x), _) => return x.label.as_ref().map(|l| l.name.apostrophe).unwrap_or(x.block.brace_token.span.open()),
            (E::If(x), _) => return x.if_token.span,
            _ => return e.span(),
        }
    }
}

fn path_start(qself: Option<&syn::QSelf>, path: &syn::Path) -> proc_macro2::Span {
    if let Some(q) = qself {
        return q.lt_token.span;
    }
    if let Some(c) = &path.leading_colon {
        return c.spans[0];
    }
    path.segments.first().map(|s| s.ident.span()).unwrap_or_else(|| path.span())
}
