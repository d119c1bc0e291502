//! `$TIGA_PTXAS` wins over every other place (its own test binary, as it
//! sets an environment variable).

#[test]
fn tiga_ptxas_names_the_assembler() {
    let file = std::env::temp_dir().join(format!("tiga-ptx-fake-ptxas-{}", std::process::id()));
    std::fs::write(&file, "").expect("write");
    std::env::set_var("TIGA_PTXAS", &file);
    assert_eq!(tiga_ptx::find_ptxas(), Some(file.clone()));
    std::fs::remove_file(&file).expect("remove");
    // A name that no longer exists is passed over for the other places.
    assert_ne!(tiga_ptx::find_ptxas(), Some(file));
}
