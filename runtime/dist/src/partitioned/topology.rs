//! Where a partitioned tensor's bytes live and how requests reach them.
//!
//! Every memory type is the same two-level picture with other groups:
//! ranks are gathered into *storage groups* whose members map each other's
//! rows (one shared allocation per group), and groups talk by messages
//! over a *route* communicator that holds, for each group, the member with
//! this rank's position in its own group.
//!
//! | memory type | storage group | route communicator |
//! |---|---|---|
//! | continuous, chunked | the whole world (one node) | this rank alone |
//! | distributed | this rank alone | the world |
//! | hierarchy | the node ([`NodeGroups::local`]) | across nodes ([`NodeGroups::cross`]) |
//!
//! A row of another group is read by sending its id to that group's member
//! on the route communicator, which reads it from its group's shared
//! memory and answers. A row's writes always end at its owner (routed to
//! its group, then within the group to the owner), so that a row is only
//! ever written by one rank, and the owner can apply several writes in a
//! fixed order whatever the timing.

use std::sync::Arc;

use super::error::PartitionedError;
use super::memory::{Capability, Location, MemoryType};
use crate::comm::{read_u64s, write_u64s, CommError, Communicator, NodeGroups};

type Shared = Arc<dyn Communicator>;

/// The communicators of one memory type over one world (see the module
/// doc), shared by a tensor, its sub-tensors and the tensors made beside
/// it (an embedding's optimizer states).
#[derive(Debug)]
pub struct Topology {
    pub(crate) memory: MemoryType,
    /// A private duplicate of the caller's world, so that the tensor's
    /// collectives never interleave with the caller's own.
    pub(crate) world: Arc<dyn Communicator>,
    pub(crate) nodes: NodeGroups,
    pub(crate) store: Arc<dyn Communicator>,
    pub(crate) route: Arc<dyn Communicator>,
    /// Each world rank's storage group (its rank on `route`).
    group_of: Vec<usize>,
    /// Each world rank's rank in its storage group.
    store_rank_of: Vec<usize>,
}

impl Topology {
    /// Split `world` for `memory` at `location` (collective), after the
    /// capability check; an unsupported combination is an error on every
    /// rank.
    pub fn new(world: &dyn Communicator, memory: MemoryType, location: Location) -> Result<Arc<Topology>, PartitionedError> {
        let own = world.split(0, world.rank())?;
        let nodes = NodeGroups::new(own.as_ref())?;
        Capability::check(memory, location, &nodes)?;
        let (r, n) = (own.rank(), own.size());
        let (store, route, group_of, store_rank_of): (Shared, Shared, Vec<usize>, Vec<usize>) = match memory {
            MemoryType::Continuous | MemoryType::Chunked => (own.clone(), own.split(r, 0)?, vec![0; n], (0..n).collect()),
            MemoryType::Distributed => (own.split(r, 0)?, own.clone(), (0..n).collect(), vec![0; n]),
            MemoryType::Hierarchy => {
                let mut group_of = Vec::with_capacity(n);
                let mut store_rank_of = Vec::with_capacity(n);
                for w in 0..n {
                    let (node, local) = nodes.placement(w).ok_or_else(|| CommError::Mismatch(format!("rank {w} has no node")))?;
                    group_of.push(node);
                    store_rank_of.push(local);
                }
                (nodes.local.clone(), nodes.cross.clone(), group_of, store_rank_of)
            }
        };
        Ok(Arc::new(Topology { memory, world: own, nodes, store, route, group_of, store_rank_of }))
    }

    pub fn rank(&self) -> usize {
        self.world.rank()
    }

    pub fn size(&self) -> usize {
        self.world.size()
    }

    /// World rank `w`'s storage group, which is its rank on `route`.
    pub(crate) fn group_of(&self, w: usize) -> usize {
        self.group_of[w]
    }

    /// World rank `w`'s rank within its storage group.
    pub(crate) fn store_rank_of(&self, w: usize) -> usize {
        self.store_rank_of[w]
    }

    /// This rank's storage group.
    pub(crate) fn my_group(&self) -> usize {
        self.group_of[self.rank()]
    }

    /// Whether any row lies outside this rank's storage group (only then
    /// do reads need messages).
    pub(crate) fn has_remote(&self) -> bool {
        self.route.size() > 1
    }
}

/// Send `sends[p]` to rank `p` of `comm`, records of `record` bytes each,
/// with a `header` every rank must agree on (the column range of a view):
/// one exchange of counts and headers, then the records. Returns what
/// each rank sent this one. Collective over `comm`; a peer whose header
/// differs is an error after the exchange completes (never a hang).
pub(crate) fn exchange_records(
    comm: &dyn Communicator,
    sends: Vec<Vec<u8>>,
    record: usize,
    header: [u64; 2],
) -> Result<Vec<Vec<u8>>, PartitionedError> {
    let n = comm.size();
    let announce: Vec<Vec<u8>> =
        sends.iter().map(|s| write_u64s(&[s.len().checked_div(record).unwrap_or(0) as u64, header[0], header[1]])).collect();
    let heads = comm.all_to_all_v(announce, vec![24; n])?;
    let mut lens = Vec::with_capacity(n);
    let mut mismatch = None;
    for (p, h) in heads.iter().enumerate() {
        let (count, a, b) = match read_u64s(h).as_deref() {
            Some(&[c, a, b]) => (c, a, b),
            _ => {
                return Err(CommError::WrongSize {
                    peer: p,
                    during: "a partitioned-tensor exchange".into(),
                    expected: 24,
                    got: h.len(),
                }
                .into())
            }
        };
        if [a, b] != header && mismatch.is_none() {
            mismatch = Some(PartitionedError::Mismatch(format!(
                "rank {p} of the exchange works on columns {a}..{b} of the rows, this one on {}..{}: the ranks called the operation on different views",
                header[0], header[1]
            )));
        }
        let count = usize::try_from(count).map_err(|_| CommError::Usage(format!("rank {p} announced {count} records")))?;
        lens.push(count.checked_mul(record).ok_or_else(|| CommError::Usage(format!("rank {p} announced {count} records")))?);
    }
    let got = comm.all_to_all_v(sends, lens)?;
    match mismatch {
        Some(e) => Err(e),
        None => Ok(got),
    }
}

/// A write on its way to its owner: the root row, and the key that orders
/// writes to one row (the writing world rank, then its position in that
/// rank's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct WriteKey {
    pub row: u64,
    pub rank: u64,
    pub position: u64,
}

const KEY_BYTES: usize = 24;

/// Writes in flight: keys, and each key's payload of `width` bytes, at
/// slot `at[i]` of one flat buffer — borrowed from the caller until a hop
/// moves them — so that routing a step's tens of thousands of rows
/// allocates no buffer per write, and sorting moves no payload.
#[derive(Debug, Default)]
pub(crate) struct Writes<'a> {
    pub(crate) keys: Vec<WriteKey>,
    at: Vec<usize>,
    bytes: std::borrow::Cow<'a, [u8]>,
    width: usize,
}

impl<'a> Writes<'a> {
    /// This rank's writes of `rows` (root rows), the i-th from
    /// `payload[i * width..]`.
    pub(crate) fn mine(rank: usize, rows: &[usize], payload: &'a [u8], width: usize) -> Writes<'a> {
        let keys =
            rows.iter().enumerate().map(|(p, &r)| WriteKey { row: r as u64, rank: rank as u64, position: p as u64 }).collect();
        Writes { keys, at: (0..rows.len()).collect(), bytes: std::borrow::Cow::Borrowed(payload), width }
    }

    pub(crate) fn payload(&self, i: usize) -> &[u8] {
        let at = self.at[i] * self.width;
        &self.bytes[at..at + self.width]
    }

    /// The same writes in key order (the payloads stay where they are).
    fn sorted(self) -> Writes<'a> {
        let mut pairs: Vec<(WriteKey, usize)> = self.keys.into_iter().zip(self.at).collect();
        // Keys are unique (a rank and a position), so no order is unstable.
        pairs.sort_unstable_by_key(|p| p.0);
        let (keys, at) = pairs.into_iter().unzip();
        Writes { keys, at, bytes: self.bytes, width: self.width }
    }
}

/// Route writes to their owners (`owner(row)`); returns the writes this
/// rank owns, sorted by key (row, then writing rank, then position), so
/// that duplicates meet in one order on every run. Two hops: to the
/// owner's storage group over `route`, then to the owner over `store`
/// (either is skipped when its communicator has one rank). Collective
/// over the world.
pub(crate) fn route_to_owners<'a>(
    topo: &Topology,
    writes: Writes<'a>,
    header: [u64; 2],
    owner: impl Fn(usize) -> usize,
) -> Result<Writes<'a>, PartitionedError> {
    let width = writes.width;
    let record = KEY_BYTES + width;
    // One hop: each write to rank `dest(row)` of `comm`.
    let hop = |comm: &dyn Communicator, w: Writes<'a>, dest: &dyn Fn(usize) -> usize| {
        if comm.size() == 1 {
            return Ok(w);
        }
        let mut sends: Vec<Vec<u8>> = vec![Vec::new(); comm.size()];
        for (i, k) in w.keys.iter().enumerate() {
            let s = &mut sends[dest(k.row as usize)];
            s.extend_from_slice(&write_u64s(&[k.row, k.rank, k.position]));
            s.extend_from_slice(w.payload(i));
        }
        let (mut keys, mut bytes) = (Vec::new(), Vec::new());
        for got in exchange_records(comm, sends, record, header)? {
            for rec in got.chunks_exact(record) {
                if let Some(&[row, rank, position]) = read_u64s(&rec[..KEY_BYTES]).as_deref() {
                    keys.push(WriteKey { row, rank, position });
                    bytes.extend_from_slice(&rec[KEY_BYTES..]);
                }
            }
        }
        let at = (0..keys.len()).collect();
        Ok::<_, PartitionedError>(Writes { keys, at, bytes: std::borrow::Cow::Owned(bytes), width })
    };
    let stage = hop(topo.route.as_ref(), writes, &|row| topo.group_of(owner(row)))?;
    Ok(hop(topo.store.as_ref(), stage, &|row| topo.store_rank_of(owner(row)))?.sorted())
}
