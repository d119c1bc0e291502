//! Where a partitioned tensor's rows live ([`MemoryType`], [`Location`])
//! and which combinations work over a communicator's nodes
//! ([`Capability`]).

use super::error::PartitionedError;
use crate::comm::{Communicator, NodeGroups};

/// Where a partitioned tensor's rows live (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryType {
    Continuous,
    Chunked,
    Distributed,
    Hierarchy,
}

impl MemoryType {
    pub const ALL: [MemoryType; 4] =
        [MemoryType::Continuous, MemoryType::Chunked, MemoryType::Distributed, MemoryType::Hierarchy];

    pub fn name(self) -> &'static str {
        match self {
            MemoryType::Continuous => "continuous",
            MemoryType::Chunked => "chunked",
            MemoryType::Distributed => "distributed",
            MemoryType::Hierarchy => "hierarchy",
        }
    }

    /// The memory type named `s` (as [`MemoryType::name`] spells it).
    pub fn parse(s: &str) -> Option<MemoryType> {
        MemoryType::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Which memory holds the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Host,
    /// A GPU's memory (refused until the CUDA runtime can hold rows).
    Device,
}

impl Location {
    pub fn name(self) -> &'static str {
        match self {
            Location::Host => "host",
            Location::Device => "device",
        }
    }
}

/// Which (memory type, location, communicator) combinations work here.
#[derive(Debug, Clone, Copy)]
pub struct Capability;

impl Capability {
    /// `Ok` when `memory` in `location` works over the nodes `nodes`;
    /// otherwise the reason (module doc). Not collective.
    pub fn check(memory: MemoryType, location: Location, nodes: &NodeGroups) -> Result<(), PartitionedError> {
        let refuse =
            |reason: String| Err(PartitionedError::Unsupported { memory: memory.name(), location: location.name(), reason });
        if location == Location::Device {
            return refuse("device memory arrives with the CUDA runtime; use host memory".into());
        }
        match memory {
            MemoryType::Continuous | MemoryType::Chunked if nodes.nodes() > 1 => refuse(format!(
                "it maps one allocation across the ranks of one node, and this communicator spans {} nodes; use hierarchy or distributed",
                nodes.nodes()
            )),
            MemoryType::Hierarchy if !nodes.uniform() => {
                let sizes: Vec<usize> = (0..nodes.nodes()).map(|n| nodes.members(n).len()).collect();
                refuse(format!(
                    "it pairs each rank with the ranks of the same place on the other nodes, so every node needs as many ranks; these nodes have {sizes:?}"
                ))
            }
            _ => Ok(()),
        }
    }

    /// [`Capability::check`] over the nodes of `comm` (collective: it
    /// splits `comm` by node).
    pub fn check_on(memory: MemoryType, location: Location, comm: &dyn Communicator) -> Result<(), PartitionedError> {
        Self::check(memory, location, &NodeGroups::new(comm)?)
    }
}
