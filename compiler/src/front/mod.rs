//! The front end shared by `#[message_passing]` and `tigac`: syn's AST of a
//! kernel module, checked and captured into kernel IR.
//!
//! Everything outside the kernel language (docs/kernel-language.md) is
//! refused here with the span of the offending construct, so the macro can
//! point `compile_error!` at it and `tigac` can print `file:line:col`.

mod dtypes;
mod expr;
mod nesting;
mod types;

use std::collections::HashMap;

pub use nesting::{check_nesting, MAX_CHAIN, MAX_NESTING};

use proc_macro2::TokenStream;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;

use crate::ir::{self, FieldDecl, FieldId, Kernel, Properties, Reducer, ReducerKind, Region, Role, WidthDecl};
use types::{DeclType, Widths};

/// A user error: a message and where it points.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct FrontError {
    pub message: String,
    pub line: u32,
    pub col: u32,
    /// The span itself, for `compile_error!` (only meaningful inside a proc-macro).
    pub span: proc_macro2::Span,
}

impl FrontError {
    pub fn new(span: proc_macro2::Span, message: impl Into<String>) -> FrontError {
        let lc = span.start();
        FrontError { message: message.into(), line: lc.line as u32, col: lc.column as u32, span }
    }
    pub fn at(node: &impl Spanned, message: impl Into<String>) -> FrontError {
        FrontError::new(node.span(), message)
    }
}

pub type FrontResult<T> = Result<T, FrontError>;

pub(crate) fn span_of(node: &impl Spanned) -> ir::Span {
    let lc = node.span().start();
    ir::Span { line: lc.line as u32, col: lc.column as u32 }
}

/// Is this attribute `#[message_passing(..)]` (or a path ending in it)?
pub fn is_message_passing_attr(attr: &syn::Attribute) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == "message_passing")
}

/// The stack of the thread [`parse_kernel_file`] runs on.
///
/// The token scan ([`check_nesting`]) bounds how deep `syn` and our walks
/// recurse, and so how much stack they need: at most [`MAX_CHAIN`] levels
/// of `syn` printing a chain back to tokens for an error's span (about
/// 450 bytes a level), or [`MAX_NESTING`] levels of parsing. That bound is
/// about 7 MiB; a caller's thread may have 2 MiB (a test, a worker), so the
/// front end runs on a thread of its own whose stack is fixed here, with
/// room to spare. Only touched pages cost memory.
pub const FRONT_STACK_BYTES: usize = 64 << 20;

/// Capture every `#[message_passing]` module of a kernel file.
///
/// Runs on a thread with a [`FRONT_STACK_BYTES`] stack (see there). The
/// error's `span` is then `Span::call_site()`: proc-macro2 spans belong to
/// the thread that lexed the text; `line` and `col` are exact.
pub fn parse_kernel_file(source: &str) -> FrontResult<Vec<Kernel>> {
    let run = || parse_kernel_file_here(source).map_err(|e| (e.message, e.line, e.col));
    let result = std::thread::scope(|s| {
        let worker = std::thread::Builder::new().name("tiga-front".into()).stack_size(FRONT_STACK_BYTES).spawn_scoped(s, run);
        match worker {
            Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => Err((format!("cannot start the front end's thread: {e}"), 1, 0)),
        }
    });
    result.map_err(|(message, line, col)| FrontError { message, line, col, span: proc_macro2::Span::call_site() })
}

fn parse_kernel_file_here(source: &str) -> FrontResult<Vec<Kernel>> {
    let file = parse_file(source)?;
    let mut kernels = Vec::new();
    for item in &file.items {
        if let syn::Item::Mod(m) = item {
            if let Some(attr) = m.attrs.iter().find(|a| is_message_passing_attr(a)) {
                let args = match &attr.meta {
                    syn::Meta::List(l) => l.tokens.clone(),
                    syn::Meta::Path(_) => TokenStream::new(),
                    syn::Meta::NameValue(nv) => {
                        return Err(FrontError::at(nv, "write `#[message_passing(reduce = ...)]`"));
                    }
                };
                let k = capture_module(args, m)?;
                if kernels.iter().any(|other: &Kernel| other.name == k.name) {
                    return Err(FrontError::at(&m.ident, format!("a second kernel named `{}` in this file", k.name)));
                }
                dtypes::check_one_dtype_per_operation(&k)?;
                kernels.push(k);
            }
        }
    }
    Ok(kernels)
}

/// `syn::parse_file`, with the nesting limits ([`check_nesting`]) checked
/// on the tokens before `syn` recurses over them. The byte-order mark and a
/// `#!` first line are skipped as `syn::parse_file` skips them (the line
/// break stays, so lines keep their numbers; `#!` then `[` on the first
/// line is an inner attribute, not a `#!` line).
fn parse_file(mut source: &str) -> FrontResult<syn::File> {
    source = source.strip_prefix('\u{feff}').unwrap_or(source);
    if let Some(rest) = source.strip_prefix("#!") {
        if !rest.trim_start().starts_with('[') {
            source = source.find('\n').map_or("", |i| &source[i..]);
        }
    }
    let tokens: TokenStream = source.parse().map_err(|e: proc_macro2::LexError| FrontError::new(e.span(), e.to_string()))?;
    check_nesting(&tokens)?;
    syn::parse2(tokens).map_err(|e| FrontError::new(e.span(), e.to_string()))
}

struct Reduce {
    kind: ReducerKind,
    declared: Properties,
    span: ir::Span,
    /// The reducer expression, for errors about it.
    at: proc_macro2::Span,
}

fn parse_reduce(args: TokenStream, module: &syn::ItemMod) -> FrontResult<Reduce> {
    let parser = Punctuated::<syn::MetaNameValue, syn::Token![,]>::parse_terminated;
    let metas = syn::parse::Parser::parse2(parser, args.clone()).map_err(|e| FrontError::new(e.span(), e.to_string()))?;
    let mut reduce = None;
    for m in &metas {
        if !m.path.is_ident("reduce") {
            return Err(FrontError::at(&m.path, "unknown argument: `#[message_passing]` takes `reduce = ...`"));
        }
        let (name, flags, node): (String, Vec<syn::Expr>, &syn::Expr) = match &m.value {
            syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                (p.path.get_ident().map(|i| i.to_string()).unwrap_or_default(), vec![], &m.value)
            }
            syn::Expr::Call(c) => match &*c.func {
                syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                    (p.path.get_ident().map(|i| i.to_string()).unwrap_or_default(), c.args.iter().cloned().collect(), &m.value)
                }
                other => return Err(FrontError::at(other, "expected a reducer name")),
            },
            other => return Err(FrontError::at(other, "expected a reducer: sum, mean, max, min, prod, softmax or monoid(..)")),
        };
        let kind = match name.as_str() {
            "sum" => ReducerKind::Sum,
            "mean" => ReducerKind::Mean,
            "max" => ReducerKind::Max,
            "min" => ReducerKind::Min,
            "prod" => ReducerKind::Prod,
            "softmax" => ReducerKind::Softmax,
            "monoid" => ReducerKind::Monoid,
            other => {
                return Err(FrontError::at(
                    node,
                    format!("unknown reducer `{other}`: expected sum, mean, max, min, prod, softmax or monoid(associative, ..)"),
                ))
            }
        };
        let mut declared = Properties::default();
        if !flags.is_empty() && kind != ReducerKind::Monoid {
            return Err(FrontError::at(node, format!("reducer `{name}` takes no properties; only `monoid(..)` declares them")));
        }
        for f in &flags {
            let flag = match f {
                syn::Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            match flag.as_deref() {
                Some("associative") => declared.associative = true,
                Some("commutative") => declared.commutative = true,
                Some("idempotent") => declared.idempotent = true,
                _ => {
                    return Err(FrontError::at(f, "unknown property: expected associative, commutative or idempotent"));
                }
            }
        }
        reduce = Some(Reduce { kind, declared, span: span_of(node), at: node.span() });
    }
    reduce.ok_or_else(|| {
        FrontError::at(
            &module.ident,
            "missing reducer: write `#[message_passing(reduce = sum)]` (or mean, max, min, prod, softmax, monoid(..))",
        )
    })
}

/// The parts of a kernel module, sorted by what they are.
#[derive(Default)]
struct Items<'a> {
    structs: HashMap<String, &'a syn::ItemStruct>,
    fns: HashMap<String, &'a syn::ItemFn>,
}

const STRUCT_NAMES: [&str; 5] = ["Src", "Dst", "Edge", "Params", "Out"];
const FN_NAMES: [&str; 5] = ["edge", "node", "identity", "combine", "finalize"];

fn collect_items(module: &syn::ItemMod) -> FrontResult<Items<'_>> {
    let Some((_, items)) = &module.content else {
        return Err(FrontError::at(module, "a kernel module must have a body: `mod Name { ... }`"));
    };
    let mut out = Items::default();
    for item in items {
        match item {
            syn::Item::Use(_) => {}
            syn::Item::Struct(s) => {
                let name = s.ident.to_string();
                if !STRUCT_NAMES.contains(&name.as_str()) {
                    return Err(FrontError::at(
                        &s.ident,
                        format!("unknown struct `{name}` in a kernel: expected Src, Dst, Edge, Params or Out"),
                    ));
                }
                out.structs.insert(name, s);
            }
            syn::Item::Fn(f) => {
                let name = f.sig.ident.to_string();
                if !FN_NAMES.contains(&name.as_str()) {
                    return Err(FrontError::at(
                        &f.sig.ident,
                        format!("unknown function `{name}` in a kernel: expected edge, node, identity, combine or finalize"),
                    ));
                }
                out.fns.insert(name, f);
            }
            other => return Err(FrontError::at(other, "unsupported item in a kernel module: only structs, functions and `use`")),
        }
    }
    Ok(out)
}

fn collect_fields(items: &Items<'_>, widths: &mut Widths) -> FrontResult<(Vec<FieldDecl>, Vec<DeclType>)> {
    let mut fields = Vec::new();
    let mut decls = Vec::new();
    for (sname, role) in [("Src", Role::Src), ("Dst", Role::Dst), ("Edge", Role::Edge), ("Params", Role::Param)] {
        let Some(s) = items.structs.get(sname) else { continue };
        let syn::Fields::Named(named) = &s.fields else {
            return Err(FrontError::at(&s.fields, format!("`{sname}` must have named fields")));
        };
        for f in &named.named {
            let Some(ident) = &f.ident else { continue };
            // rustc refuses this on the macro path (E0124); a kernel file
            // would otherwise bind the first and ignore the second.
            if fields.iter().any(|d: &FieldDecl| d.role == role && *ident == d.name) {
                return Err(FrontError::at(ident, format!("field `{ident}` is already declared in `{sname}`")));
            }
            let decl = types::parse_decl_type(&f.ty)?;
            let ty = match decl {
                DeclType::Scalar(_) => ir::Type::Scalar,
                DeclType::Vector(_) => ir::Type::Vector(widths.fresh()),
                DeclType::Matrix(_) if role == Role::Param => ir::Type::Matrix(widths.fresh(), widths.fresh()),
                DeclType::Matrix(_) => {
                    return Err(FrontError::at(&f.ty, "matrices are only allowed as parameters (struct Params)"));
                }
                DeclType::Tuple(_) => {
                    return Err(FrontError::at(&f.ty, "a field is f32, f64, Vector<f32|f64> or (params) Matrix<f32|f64>"));
                }
            };
            fields.push(FieldDecl {
                name: ident.to_string(),
                role,
                ty,
                declared: decl.dtype().unwrap_or(ir::FieldType::F32),
                span: span_of(ident),
            });
            decls.push(decl);
        }
    }
    Ok((fields, decls))
}

/// Run the front end on one module: `args` are the attribute's tokens.
pub fn capture_module(args: TokenStream, module: &syn::ItemMod) -> FrontResult<Kernel> {
    let reduce = parse_reduce(args, module)?;
    let items = collect_items(module)?;
    let mut widths = Widths::default();
    let (fields, _) = collect_fields(&items, &mut widths)?;
    let mut cx = expr::Lowerer::new(&fields, widths);

    let Some(edge_fn) = items.fns.get("edge") else {
        return Err(FrontError::at(&module.ident, "a kernel needs `fn edge(..)` returning the message"));
    };
    let edge = cx.lower_fn(edge_fn, expr::FnKind::Edge, &[])?;

    // The reducer.
    let monoid_fns = ["identity", "combine", "finalize"];
    if reduce.kind != ReducerKind::Monoid {
        for n in monoid_fns {
            if let Some(f) = items.fns.get(n) {
                return Err(FrontError::at(
                    &f.sig.ident,
                    format!("`fn {n}` belongs to a user monoid: declare `reduce = monoid(associative, ..)`"),
                ));
            }
        }
    }
    let msg_types = edge.output_types();
    let mut reducer = Reducer {
        kind: reduce.kind,
        span: reduce.span,
        declared: reduce.declared,
        proved: None,
        class: None,
        identity: None,
        combine: None,
        finalize: None,
    };
    match reduce.kind {
        ReducerKind::Softmax => {
            if msg_types.len() != 2 || msg_types[0] != ir::Type::Scalar || !msg_types[1].is_numeric() {
                return Err(FrontError::new(
                    ret_span(edge_fn),
                    "`reduce = softmax` needs `edge` to return (score, value): a scalar score and a scalar or vector value",
                ));
            }
        }
        ReducerKind::Monoid => {
            if !reduce.declared.associative {
                return Err(FrontError::new(
                    reduce.at,
                    "the monoid is not declared associative: tiga splits and folds rows in any grouping, so `combine` must be associative; declare `reduce = monoid(associative, ..)` if it is",
                ));
            }
            let (Some(id_fn), Some(comb_fn)) = (items.fns.get("identity"), items.fns.get("combine")) else {
                return Err(FrontError::at(
                    &module.ident,
                    "a monoid needs `fn identity() -> S` and `fn combine(a: S, b: S) -> S`",
                ));
            };
            let identity = cx.lower_fn(id_fn, expr::FnKind::Identity, &[])?;
            let state = identity.output_types();
            if !cx.types_compatible(&state, &msg_types) {
                return Err(FrontError::new(
                    ret_span(edge_fn),
                    format!(
                        "the edge's message ({}) must have the monoid state's type ({})",
                        cx.types_text(&msg_types),
                        cx.types_text(&state)
                    ),
                ));
            }
            let combine = cx.lower_fn(comb_fn, expr::FnKind::Combine, &state)?;
            if !cx.types_compatible(&combine.output_types(), &state) {
                return Err(FrontError::new(
                    ret_span(comb_fn),
                    "`combine` must return the state's type (the type `identity` returns)",
                ));
            }
            let finalize = match items.fns.get("finalize") {
                Some(f) => Some(cx.lower_fn(f, expr::FnKind::Finalize, &state)?),
                None => None,
            };
            reducer.identity = Some(identity);
            reducer.combine = Some(combine);
            reducer.finalize = finalize;
        }
        _ => {
            for t in &msg_types {
                if !t.is_numeric() || matches!(t, ir::Type::Matrix(..)) {
                    return Err(FrontError::new(
                        ret_span(edge_fn),
                        "a message is scalars and vectors (a tuple of them for several)",
                    ));
                }
            }
        }
    }

    // Aggregate types as `node` sees them.
    let agg: Vec<ir::Type> = match reduce.kind {
        ReducerKind::Softmax => vec![msg_types[1]],
        ReducerKind::Monoid => match &reducer.finalize {
            Some(f) => f.output_types(),
            None => reducer.identity.as_ref().map(|r| r.output_types()).unwrap_or_default(),
        },
        _ => msg_types.clone(),
    };
    let out_struct = items.structs.get("Out");
    let node = match items.fns.get("node") {
        Some(f) => Some(cx.lower_fn(f, expr::FnKind::Node { out_struct: out_struct.copied() }, &agg)?),
        None => {
            if let Some(s) = out_struct {
                return Err(FrontError::at(&s.ident, "`struct Out` needs a `fn node(..) -> Out` that fills it"));
            }
            None
        }
    };
    let out_types = node.as_ref().map(|n| n.output_types()).unwrap_or_else(|| agg.clone());
    let out_names: Vec<String> = match (out_struct, &node) {
        (Some(s), Some(_)) => match &s.fields {
            syn::Fields::Named(n) => n.named.iter().filter_map(|f| f.ident.as_ref().map(|i| i.to_string())).collect(),
            _ => return Err(FrontError::at(&s.fields, "`Out` must have named fields")),
        },
        _ if out_types.len() == 1 => vec!["out".to_string()],
        _ => (0..out_types.len()).map(|i| format!("out{i}")).collect(),
    };
    for t in &out_types {
        if !t.is_numeric() || matches!(t, ir::Type::Matrix(..)) {
            let at = items.fns.get("node").map(|f| ret_span(f)).unwrap_or(ret_span(edge_fn));
            return Err(FrontError::new(at, "kernel outputs are scalars or vectors"));
        }
    }

    // Solve widths and rewrite every type to canonical width ids.
    let (mut fields, widths) = cx.finish();
    let canon = widths.canonical_map();
    let fix = |t: ir::Type| types::canon_type(t, &canon);
    for f in &mut fields {
        f.ty = fix(f.ty);
    }
    let mut width_decls: Vec<Option<WidthDecl>> = vec![None; canon.count as usize];
    for (i, f) in fields.iter().enumerate() {
        let dims: Vec<(ir::WidthId, usize)> = match (f.ty, f.role) {
            (ir::Type::Vector(w), ir::Role::Param) => vec![(w, 0)],
            (ir::Type::Vector(w), _) => vec![(w, 1)],
            (ir::Type::Matrix(r, c), _) => vec![(r, 0), (c, 1)],
            _ => vec![],
        };
        for (w, d) in dims {
            let slot = &mut width_decls[w.0 as usize];
            if slot.is_none() {
                let name = if w.0 == 0 { "F".to_string() } else { format!("F{}", w.0) };
                *slot = Some(WidthDecl { name, bound_by: (FieldId(i as u32), d) });
            }
        }
    }
    let widths: Vec<WidthDecl> = width_decls.into_iter().flatten().collect();
    let mut edge = edge;
    let mut node = node;
    let fix_region = |r: &mut Region| types::canon_region(r, &canon);
    fix_region(&mut edge);
    if let Some(n) = &mut node {
        fix_region(n);
    }
    for r in [&mut reducer.identity, &mut reducer.combine, &mut reducer.finalize].into_iter().flatten() {
        fix_region(r);
    }
    let declared = declared_outputs(&items, reduce.kind, out_types.len());
    let outputs = out_names
        .into_iter()
        .zip(out_types)
        .zip(declared)
        .map(|((name, ty), declared)| ir::OutputDecl { name, ty: fix(ty), role: ir::Role::Dst, declared })
        .collect();
    let kernel = Kernel {
        name: module.ident.to_string(),
        span: span_of(&module.ident),
        fields,
        widths,
        outputs,
        edge,
        reducer,
        node,
        segment: None,
    };
    ir::verify(&kernel)
        .map_err(|e| FrontError::at(&module.ident, format!("internal error: captured IR does not verify: {e}")))?;
    Ok(kernel)
}

/// The element types the kernel declares for its `n` outputs: those of the
/// function that makes them (`node`, else a monoid's `finalize`, else
/// `edge`, whose softmax message is `(score, value)`), or of `struct Out`'s
/// fields. The types were checked when the functions were lowered; where
/// they cannot be read here, an output is declared f32 (in the call's
/// dtype).
fn declared_outputs(items: &Items<'_>, kind: ReducerKind, n: usize) -> Vec<ir::FieldType> {
    let ret = |name: &str| match items.fns.get(name).map(|f| &f.sig.output) {
        Some(syn::ReturnType::Type(_, ty)) => Some(ty.as_ref().clone()),
        _ => None,
    };
    let leaves = |ty: &syn::Type| types::parse_decl_type(ty).map(|d| d.leaves()).ok();
    let found: Option<Vec<ir::FieldType>> = if items.fns.contains_key("node") {
        match (items.structs.get("Out"), ret("node")) {
            (Some(s), _) => s.fields.iter().map(|f| types::parse_decl_type(&f.ty).ok().and_then(|d| d.dtype())).collect(),
            (None, Some(ty)) => leaves(&ty),
            (None, None) => None,
        }
    } else if kind == ReducerKind::Monoid {
        ret("finalize").or_else(|| ret("identity")).and_then(|ty| leaves(&ty))
    } else {
        match (kind, ret("edge").and_then(|ty| leaves(&ty))) {
            (ReducerKind::Softmax, Some(l)) => l.get(1).map(|d| vec![*d]),
            (_, l) => l,
        }
    };
    match found {
        Some(d) if d.len() == n => d,
        _ => vec![ir::FieldType::F32; n],
    }
}

/// Where a function's return type is written (not the `->`), so carets land
/// under the type.
fn ret_span(f: &syn::ItemFn) -> proc_macro2::Span {
    match &f.sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => f.sig.ident.span(),
    }
}
