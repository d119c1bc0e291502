//! tiga's graph store: the graph lives at storage servers, compute
//! processes hold a client handle (GiGL's graph-store mode).
//!
//! Storage servers ([`server`], `tigac serve`) each own a contiguous block
//! of destination rows of a `.gfg`, the edges into them and those rows of
//! every feature, and answer the `GraphStore` gRPC service of
//! `proto/graph_store.proto` (compiled at build time by protox, so no
//! system `protoc`). Compute processes open a [`RemoteDataset`] on every
//! server, fetch their share of seed nodes ([`RemoteDataset::fetch_node_ids`])
//! or link-prediction input ([`RemoteDataset::fetch_ablp_input`]), and
//! iterate a [`NeighborLoader`] or an [`AblpLoader`], whose mini-batches
//! ([`MiniBatch`]) are the block format of `tigac sample` plus gathered
//! features, and a [`tiga_runtime::Realization`] that kernels run on.
//!
//! The model code does not change between colocated and graph-store runs:
//! a mini-batch sampled through the store is, for the same seed, the one
//! [`tiga_dist::sampling::sample_multi_hop`] makes from the whole file,
//! because a centre's sample depends only on (seed, centre, hop) and the
//! server keeps global ids.
//!
//! **Shutdown order.** Loaders register their sampling state at the
//! servers (`OpenLoader`) and release it when closed or dropped
//! (`CloseLoader`); the session closes when the dataset is closed, or when
//! its last handle (a loader holds one) is dropped, so the order is kept
//! whatever order the handles are dropped in. [`RemoteDataset::close`] with
//! loaders still open closes the sessions at once (the servers release the
//! loaders' state) and those loaders then fail with
//! [`StoreError::Closed`]: nothing waits on anything.

pub mod client;
pub mod features;
pub mod loader;
pub mod proto;
pub mod server;
pub mod split;

pub use proto::PROTOCOL_VERSION;

pub use client::{AblpInput, ConnectOptions, FeatureMeta, RemoteDataset, StoreError};
pub use loader::{AblpBatch, AblpLoader, AblpOptions, LoaderOptions, NeighborLoader};
pub use server::{serve_blocking, FeatureFile, ServeError, ServeOptions, ServerHandle};
pub use split::{Part, SplitKind, SplitSpec};
pub use tiga_dist::sampling::MiniBatch;
