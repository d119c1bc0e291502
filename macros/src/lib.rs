//! `#[message_passing]`: runs tiga's front end and passes at the user's
//! build, so a bad kernel is a compile error at its span, and embeds the
//! checked, lowered IR in the module as `kernel()`.
//!
//! The module itself is emitted unchanged (plus `kernel()`), so the user's
//! functions stay ordinary Rust that rustc type-checks against `tiga::lang`
//! and tests may call as a naive oracle. On error the module is still
//! emitted beside the `compile_error!`, so IDEs keep working.

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};

#[proc_macro_attribute]
pub fn message_passing(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr2 = proc_macro2::TokenStream::from(attr);
    let item2 = proc_macro2::TokenStream::from(item.clone());
    // `syn` recurses once per level of nesting: refuse hostile nesting on
    // the tokens before it parses them (the limits are the front end's).
    for tokens in [&attr2, &item2] {
        if let Err(e) = tiga_compiler::front::check_nesting(tokens) {
            let msg = e.message;
            let err = quote_spanned! { e.span => compile_error!(#msg); };
            return quote! { #err #item2 }.into();
        }
    }
    let module: syn::ItemMod = match syn::parse2(item2.clone()) {
        Ok(m) => m,
        Err(e) => {
            let msg = format!("#[message_passing] goes on a module: {e}");
            let err = quote_spanned! { e.span() => compile_error!(#msg); };
            return quote! { #err #item2 }.into();
        }
    };
    let compiled = tiga_compiler::front::capture_module(attr2.clone(), &module)
        .map_err(|e| (e.span, e.message))
        .and_then(|k| tiga_compiler::passes::run_pipeline(k).map_err(|e| pass_error(&[&attr2, &item2], module.ident.span(), e)));
    let (vis, ident) = (&module.vis, &module.ident);
    // Inner attributes (`#![..]`) stay in the body below.
    let attrs: Vec<&syn::Attribute> = module.attrs.iter().filter(|a| matches!(a.style, syn::AttrStyle::Outer)).collect();
    // The module's body as the user's tokens, not printed back from `syn`'s
    // tree: printing recurses once per term of a chain (thousands deep).
    let items = match item2.clone().into_iter().last() {
        Some(proc_macro2::TokenTree::Group(g)) if g.delimiter() == proc_macro2::Delimiter::Brace => g.stream(),
        _ => proc_macro2::TokenStream::new(),
    };
    let allow = quote! { #[allow(non_snake_case, dead_code, unused_imports, clippy::all)] };
    match compiled {
        Ok(c) => {
            let json = match serde_json::to_string(&c) {
                Ok(j) => j,
                Err(e) => {
                    let msg = format!("tiga: cannot embed the kernel: {e}");
                    return quote! { compile_error!(#msg); }.into();
                }
            };
            let name = ident.to_string();
            let aot = aot_variants(&c);
            quote! {
                #(#attrs)*
                #allow
                #vis mod #ident {
                    #items

                    /// The checked, lowered IR of this kernel, embedded at build time.
                    #[doc(hidden)]
                    pub const __TIGA_COMPILED: &str = #json;

                    #aot

                    /// This kernel, ready to run: variants compiled ahead of time by
                    /// rustc/LLVM for common widths, the JIT for the rest.
                    pub fn kernel() -> &'static ::tiga::Kernel {
                        static K: ::std::sync::OnceLock<::tiga::Kernel> = ::std::sync::OnceLock::new();
                        K.get_or_init(|| match ::tiga::Kernel::from_embedded_aot(__TIGA_COMPILED, __TIGA_AOT, __TIGA_ADJOINT_AOT) {
                            Ok(k) => k,
                            // The IR was produced and verified by this macro; a
                            // failure here means tiga itself is broken.
                            Err(e) => panic!("tiga: embedded kernel `{}` failed to load: {}", #name, e),
                        })
                    }
                }
            }
            .into()
        }
        Err((span, msg)) => {
            let err = quote_spanned! { span => compile_error!(#msg); };
            quote! {
                #err
                #(#attrs)*
                #allow
                #vis mod #ident { #items }
            }
            .into()
        }
    }
}

/// Where a pass error goes: at the token of its span when the module has
/// one there (the message then needs no `line:col` of its own), else at the
/// module's name with the position in the text.
fn pass_error(
    tokens: &[&proc_macro2::TokenStream],
    fallback: proc_macro2::Span,
    e: tiga_compiler::passes::PassError,
) -> (proc_macro2::Span, String) {
    use tiga_compiler::passes::PassError;
    if let PassError::Refused { message, span: Some(at), .. } = &e {
        if let Some(sp) = tokens.iter().find_map(|t| token_at((*t).clone(), at.line as usize, at.col as usize)) {
            return (sp, message.clone());
        }
    }
    (fallback, e.to_string())
}

/// The span of the token that starts at this line and column.
fn token_at(tokens: proc_macro2::TokenStream, line: usize, col: usize) -> Option<proc_macro2::Span> {
    for t in tokens {
        let sp = t.span();
        if sp.start().line == line && sp.start().column == col {
            return Some(sp);
        }
        if let proc_macro2::TokenTree::Group(g) = t {
            if let Some(found) = token_at(g.stream(), line, col) {
                return Some(found);
            }
        }
    }
    None
}

/// The ahead-of-time variants of a kernel and of its adjoint stages: the
/// lowered loops as Rust for each dtype and each common width (kernels with
/// at most one width symbol; the JIT covers the rest). Emitted as functions
/// plus tables the runtime searches before compiling with the JIT.
fn aot_variants(c: &tiga_compiler::passes::Compiled) -> proc_macro2::TokenStream {
    let (fns, entries) = variant_table(&c.lowered, "__tiga_aot");
    // The adjoint stages (deterministic: the runtime rebuilds the same ones).
    let mut stage_fns = String::new();
    let mut stage_tables = Vec::new();
    // Then, where the forward keeps residuals, the saved-residual forward
    // and the stages of its backward that the recomputing plan does not
    // have (its node-wise stage), then those of its in-memory variant
    // (the node-wise stage again, a source side writing edge terms and
    // their row sums), each in plan order: the order the runtime's
    // `Kernel::residuals` reads them in.
    if let Ok(adj) = tiga_compiler::adjoint::kernel::generate_adjoint(&c.captured) {
        let mut kernels: Vec<tiga_compiler::ir::Kernel> = adj.stages.iter().map(|st| st.kernel.clone()).collect();
        if let Ok(tiga_compiler::adjoint::kernel::ResidualChoice::Keep(plan)) =
            tiga_compiler::adjoint::kernel::residual_plan(&c.captured, &adj)
        {
            kernels.push(plan.forward.clone());
            let folded = plan.in_memory.iter().flat_map(|f| f.adjoint.stages.iter().zip(&f.origin));
            let new = plan.adjoint.stages.iter().zip(&plan.origin).chain(folded).filter(|(_, o)| o.is_none());
            kernels.extend(new.map(|(st, _)| st.kernel.clone()));
        }
        for (i, kernel) in kernels.into_iter().enumerate() {
            let lowered = match tiga_compiler::passes::run_pipeline(kernel) {
                Ok(l) => l.lowered,
                Err(_) => {
                    stage_tables.push(quote! { &[] });
                    continue;
                }
            };
            let (f, e) = variant_table(&lowered, &format!("__tiga_aot_s{i}"));
            stage_fns.push_str(&f);
            stage_tables.push(quote! { &[#(#e),*] });
        }
    }
    let all = format!("{fns}{stage_fns}");
    let Ok(fn_tokens) = all.parse::<proc_macro2::TokenStream>() else {
        return quote! {
            #[doc(hidden)]
            pub static __TIGA_AOT: &[::tiga::AotVariant] = &[];
            #[doc(hidden)]
            pub static __TIGA_ADJOINT_AOT: &[&[::tiga::AotVariant]] = &[];
        };
    };
    quote! {
        #fn_tokens
        #[doc(hidden)]
        pub static __TIGA_AOT: &[::tiga::AotVariant] = &[#(#entries),*];
        #[doc(hidden)]
        pub static __TIGA_ADJOINT_AOT: &[&[::tiga::AotVariant]] = &[#(#stage_tables),*];
    }
}

/// Rust source of every ahead-of-time variant of one lowered kernel, and
/// the table entries naming them: per dtype and width (every width symbol
/// at the same one of [`AOT_WIDTHS`]), the CSR variant
/// and, for a kernel with scalar values per row and no edge fields (see
/// `stencil_refusal` for why only those), the generated-stencil variant
/// beside it.
fn variant_table(lowered: &tiga_compiler::ir::Kernel, prefix: &str) -> (String, Vec<proc_macro2::TokenStream>) {
    use tiga_compiler::back::rust_source::{emit_stencil_variant, emit_variant_stored, stencil_refusal, AOT_WIDTHS};
    use tiga_compiler::ir::DType;
    use tiga_compiler::loops::Storage;
    let Ok(lk) = tiga_compiler::loops::schedule(lowered) else { return (String::new(), vec![]) };
    let width_sets: Vec<Vec<usize>> = match lk.widths.len() {
        0 => vec![vec![]],
        n => AOT_WIDTHS.iter().map(|w| vec![*w; n]).collect(),
    };
    // Every field and output in the dtype, in f32 and f64; and where the
    // kernel declares half types, an f32 variant with them stored as
    // declared (what a call given tensors of the declared types runs).
    let declared = Storage::declared(&lk);
    let mut kinds = vec![(DType::F32, "F32", Storage::default()), (DType::F64, "F64", Storage::default())];
    if declared.has_half() {
        kinds.push((DType::F32, "F32", declared));
    }
    let abi = "::tiga::runtime::abi";
    let mut fns = String::new();
    let mut entries = Vec::new();
    for (d, dname, storage) in &kinds {
        let half = if storage.has_half() { "h_" } else { "" };
        for ws in &width_sets {
            let name = format!(
                "{prefix}_{half}{}_{}",
                dname.to_lowercase(),
                ws.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("_")
            );
            match emit_variant_stored(&lk, *d, ws, false, storage, &name, abi) {
                Ok(src) => fns.push_str(&src),
                Err(_) => return (String::new(), vec![]),
            }
            // Generated-stencil variants store every field in the dtype.
            let stencil = if stencil_refusal(&lk).is_none() && !storage.has_half() {
                let st_name = format!("{name}_st");
                match emit_stencil_variant(&lk, *d, ws, &st_name, abi) {
                    Ok(src) => fns.push_str(&src),
                    Err(_) => return (String::new(), vec![]),
                }
                let st = proc_macro2::Ident::new(&st_name, proc_macro2::Span::call_site());
                quote! { ::core::option::Option::Some(#st) }
            } else {
                quote! { ::core::option::Option::None }
            };
            let fname = proc_macro2::Ident::new(&name, proc_macro2::Span::call_site());
            let dt = proc_macro2::Ident::new(dname, proc_macro2::Span::call_site());
            let types = storage.types().map(|t| {
                let n = proc_macro2::Ident::new(&t.name().to_uppercase(), proc_macro2::Span::call_site());
                quote! { ::tiga::FieldType::#n }
            });
            entries.push(quote! {
                ::tiga::AotVariant {
                    dtype: ::tiga::DType::#dt,
                    widths: &[#(#ws),*],
                    storage: &[#(#types),*],
                    entry: #fname,
                    stencil: #stencil,
                }
            });
        }
    }
    (fns, entries)
}
