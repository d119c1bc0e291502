//! Compiles `proto/graph_store.proto` into the server and client stubs with
//! protox (a protobuf compiler in Rust), so a build needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/graph_store.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["../proto"])?;
    tonic_prost_build::configure().build_server(true).build_client(true).compile_fds(files)?;
    Ok(())
}
