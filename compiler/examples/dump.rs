//! Print a kernel's IR after each pass and its loop IR (a development aid).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let src = std::fs::read_to_string(args.get(1).ok_or("usage: dump FILE KERNEL")?)?;
    let name = args.get(2).ok_or("usage: dump FILE KERNEL")?;
    for k in tiga_compiler::front::parse_kernel_file(&src)? {
        if &k.name == name {
            let c = tiga_compiler::passes::run_pipeline(k)?;
            println!("{}", c.lowered);
            println!("{}", tiga_compiler::loops::schedule(&c.lowered)?);
        }
    }
    Ok(())
}
