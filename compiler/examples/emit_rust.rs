//! Print the Rust source the macro would emit for one variant (development aid).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let src = std::fs::read_to_string(args.get(1).ok_or("usage: emit_rust FILE KERNEL WIDTH")?)?;
    let name = args.get(2).ok_or("usage")?;
    let w: usize = args.get(3).ok_or("usage")?.parse()?;
    for k in tiga_compiler::front::parse_kernel_file(&src)? {
        if &k.name == name {
            let c = tiga_compiler::passes::run_pipeline(k)?;
            let lk = tiga_compiler::loops::schedule(&c.lowered)?;
            let widths = vec![w; lk.widths.len()];
            println!(
                "{}",
                tiga_compiler::back::rust_source::emit_variant(
                    &lk,
                    tiga_compiler::ir::DType::F32,
                    &widths,
                    false,
                    "variant",
                    "RawArgs"
                )?
            );
        }
    }
    Ok(())
}
