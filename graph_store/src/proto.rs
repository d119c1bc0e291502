//! The generated messages, client and server of `proto/graph_store.proto`,
//! and the protocol version they speak.
#![allow(clippy::all, clippy::unwrap_used, missing_docs)]

tonic::include_proto!("tiga.graphstore.v1");

/// The protocol version of `proto/graph_store.proto`; `OpenSession`
/// refuses a client of another.
pub const PROTOCOL_VERSION: u32 = 1;
