//! Generates the CSI gRPC bindings from the vendored `proto/csi.proto`, in
//! pure Rust (protox), so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    let descriptors = protox::compile(["csi.proto"], ["proto"])?;
    // Messages carrying secrets get no derived Debug, so they cannot be logged
    // by accident; pav-csi logs chosen fields of them instead.
    let with_secrets: Vec<String> = descriptors
        .file
        .iter()
        .filter(|file| file.package() == "csi.v1")
        .flat_map(|file| &file.message_type)
        .filter(|message| message.field.iter().any(|f| f.name() == "secrets"))
        .map(|message| format!("csi.v1.{}", message.name()))
        .collect();
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .skip_debug(with_secrets)
        // RPCs pav-csi does not serve answer UNIMPLEMENTED without hand-written stubs.
        .generate_default_stubs(true)
        .compile_fds(descriptors)?;
    Ok(())
}
