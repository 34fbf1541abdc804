//! Generates the gRPC code from `proto/creek.proto` with a vendored `protoc`
//! (a fresh machine has none installed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let proto = "../../proto/creek.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_build::configure()
        .bytes(["."])
        .compile_protos(&[proto], &["../../proto"])?;
    Ok(())
}
