//! Generates the `lf.a2a.v1` gRPC client and server (tonic, prost) and the proto3 JSON
//! mapping of their messages (pbjson) from `proto/lf/a2a/v1/a2a.proto`, and the `google.rpc`
//! error model (`proto/google/rpc`) that error statuses carry in their details.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/lf/a2a/v1/a2a.proto",
        "proto/google/rpc/status.proto",
        "proto/google/rpc/error_details.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptors = out.join("a2a_descriptors.bin");

    let mut config = prost_build::Config::new();
    // A protoc from crates.io, with the well-known types' .proto files beside it.
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    config
        .file_descriptor_set_path(&descriptors)
        .compile_well_known_types()
        // Struct and Value with their proto3 JSON mapping; Timestamp is cardgate's own, whose
        // JSON is the mapping's `Z` form (see `remote::grpc_transport::timestamp`).
        .extern_path(
            ".google.protobuf.Timestamp",
            "crate::remote::grpc_transport::Timestamp",
        )
        .extern_path(".google.protobuf", "::pbjson_types");
    let well_known = protoc_bin_vendored::include_path()?;
    let well_known = well_known
        .to_str()
        .ok_or("the protoc include path is not UTF-8")?;
    tonic_prost_build::configure().compile_with_config(config, &protos, &["proto", well_known])?;

    let set = std::fs::read(&descriptors)?;
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        // An agent may send fields this subset does not declare; they are skipped, not fatal.
        .ignore_unknown_fields()
        .build(&[".lf.a2a.v1", ".google.rpc"])?;
    Ok(())
}
