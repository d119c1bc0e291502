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
    let module: syn::ItemMod = match syn::parse2(item2.clone()) {
        Ok(m) => m,
        Err(e) => {
            let msg = format!("#[message_passing] goes on a module: {e}");
            let err = quote_spanned! { e.span() => compile_error!(#msg); };
            return quote! { #err #item2 }.into();
        }
    };
    let compiled = tiga_compiler::front::capture_module(attr2, &module)
        .map_err(|e| (e.span, e.message))
        .and_then(|k| {
            tiga_compiler::passes::run_pipeline(k).map_err(|e| (module.ident.span(), e.to_string()))
        });
    let (vis, ident, attrs) = (&module.vis, &module.ident, &module.attrs);
    let items = match &module.content {
        Some((_, items)) => items.clone(),
        None => Vec::new(),
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
            quote! {
                #(#attrs)*
                #allow
                #vis mod #ident {
                    #(#items)*

                    /// The checked, lowered IR of this kernel, embedded at build time.
                    #[doc(hidden)]
                    pub const __TIGA_COMPILED: &str = #json;

                    /// This kernel, ready to run (compiled by the JIT on first call
                    /// per dtype and widths).
                    pub fn kernel() -> &'static ::tiga::Kernel {
                        static K: ::std::sync::OnceLock<::tiga::Kernel> = ::std::sync::OnceLock::new();
                        K.get_or_init(|| match ::tiga::Kernel::from_embedded(__TIGA_COMPILED) {
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
                #vis mod #ident { #(#items)* }
            }
            .into()
        }
    }
}
