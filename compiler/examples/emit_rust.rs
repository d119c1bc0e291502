//! Print the Rust source the macro would emit for one variant (development
//! aid): `emit_rust FILE KERNEL WIDTH [stencil|declared]`: `stencil` for the
//! generated-stencil variant, `declared` for the f32 variant with fields and
//! outputs stored in their declared (half) types.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: emit_rust FILE KERNEL WIDTH [stencil|declared]";
    let src = std::fs::read_to_string(args.get(1).ok_or(usage)?)?;
    let name = args.get(2).ok_or(usage)?;
    let w: usize = args.get(3).ok_or(usage)?.parse()?;
    let stencil = args.get(4).is_some_and(|a| a == "stencil");
    let declared = args.get(4).is_some_and(|a| a == "declared");
    for k in tiga_compiler::front::parse_kernel_file(&src)? {
        if &k.name == name {
            let c = tiga_compiler::passes::run_pipeline(k)?;
            let lk = tiga_compiler::loops::schedule(&c.lowered)?;
            let widths = vec![w; lk.widths.len()];
            let dtype = tiga_compiler::ir::DType::F32;
            let text = if stencil {
                tiga_compiler::back::rust_source::emit_stencil_variant(&lk, dtype, &widths, "variant", "tiga_abi")?
            } else {
                let storage = if declared {
                    tiga_compiler::loops::Storage::declared(&lk)
                } else {
                    tiga_compiler::loops::Storage::default()
                };
                tiga_compiler::back::rust_source::emit_variant_stored(
                    &lk, dtype, &widths, false, &storage, "variant", "tiga_abi",
                )?
            };
            println!("{text}");
        }
    }
    Ok(())
}
