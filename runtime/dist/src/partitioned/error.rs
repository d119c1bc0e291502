//! Why a partitioned-tensor operation failed, and how a failure on one
//! rank reaches every rank of a collective one ([`agree`]).

use thiserror::Error;

use crate::comm::{CommError, Communicator};
use tiga_runtime::element::ElementType;
use tiga_storage::npy::NpyError;

/// Why a partitioned-tensor operation failed.
#[derive(Debug, Error)]
pub enum PartitionedError {
    /// A (memory type, location, communicator) combination that cannot
    /// work here.
    #[error("{memory} memory in {location} memory is not available here: {reason}")]
    Unsupported { memory: &'static str, location: &'static str, reason: String },
    #[error("index {index} (position {position}) is out of range: the tensor has {rows} rows")]
    IndexOutOfRange { index: i64, position: usize, rows: usize },
    #[error("the tensor holds {tensor}, but {asked} was asked for")]
    WrongType { tensor: ElementType, asked: ElementType },
    #[error("{what}: {got} elements given, {expected} expected")]
    WrongLength { what: &'static str, expected: usize, got: usize },
    #[error("shape {shape:?}: {reason}")]
    BadShape { shape: Vec<usize>, reason: String },
    #[error("bad partition: {reason}")]
    BadPartition { reason: String },
    #[error("bad options: {0}")]
    BadOptions(String),
    /// A view operation that the tensor's memory type or view cannot do.
    #[error("{0}")]
    NotAvailable(String),
    /// The ranks called a collective on different things.
    #[error("{0}")]
    Mismatch(String),
    /// Another rank's part of an agreed operation (a file) failed.
    #[error("rank {rank} failed: {message}")]
    PeerFailed { rank: usize, message: String },
    /// The cache holds rows written behind it (`with_local_mut`).
    #[error(
        "the node cache may hold rows written behind it by with_local_mut: call writeback_all_cache or drop_all_cache first"
    )]
    StaleCache,
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error(transparent)]
    Npy(#[from] NpyError),
    #[error(transparent)]
    Comm(#[from] CommError),
}

/// Every rank learns whether every rank's `local` succeeded (collective):
/// the first failing rank's message becomes [`PartitionedError::PeerFailed`]
/// on the others, and a failing rank keeps its own error.
pub(crate) fn agree<T>(comm: &dyn Communicator, local: Result<T, PartitionedError>) -> Result<T, PartitionedError> {
    let mine = match &local {
        Ok(_) => Vec::new(),
        Err(e) => {
            let mut m = e.to_string().into_bytes();
            // An empty message would read as success.
            m.insert(0, b'!');
            m
        }
    };
    let all = comm.all_gather_bytes(&mine)?;
    let value = local?;
    match all.iter().enumerate().find(|(_, m)| !m.is_empty()) {
        Some((rank, m)) => Err(PartitionedError::PeerFailed { rank, message: String::from_utf8_lossy(&m[1..]).into_owned() }),
        None => Ok(value),
    }
}
