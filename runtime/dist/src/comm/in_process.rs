//! Ranks as threads of one process, talking over channels: the
//! communicator of the default test suite and of single-binary examples.
//!
//! Every rank has one inbox. A collective is numbered (each communicator
//! counts the collectives it has called; every rank calls them in the same
//! order), so a fast peer's message for the next collective waits in the
//! inbox's mailbox until its turn instead of being taken for this one.
//! Sends never block (the channels are unbounded); receives wait at most
//! the communicator's timeout. A rank whose communicator is dropped tells
//! its peers, so a rank waiting on it fails at once with
//! [`CommError::PeerFailed`] rather than at the timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::communicator::{
    packed_segments, read_u64s, CommError, Communicator, HeapBlock, Pending, PendingExchange, SharedBacking, SharedMemory,
};

/// A message between ranks: its group (a split makes a new one), its
/// collective's number within that group, and its sender's world rank.
enum Msg {
    Data {
        group: u64,
        seq: u64,
        from: usize,
        bytes: Vec<u8>,
    },
    /// The sender's communicator was dropped (its rank ended).
    Gone {
        from: usize,
        reason: String,
    },
}

/// One rank's inbox, shared by every group this rank belongs to.
struct Inbox {
    rx: Receiver<Msg>,
    /// Messages that arrived before their collective was waited for.
    early: HashMap<(u64, u64, usize), Vec<u8>>,
    /// World ranks that are gone, with why.
    gone: HashMap<usize, String>,
}

struct World {
    senders: Vec<Sender<Msg>>,
    /// Each world rank's host, for [`Communicator::split_local`].
    hosts: Vec<usize>,
    timeout: Duration,
    /// Shared allocations being handed out, by (group, collective number):
    /// the first rank to arrive allocates, each takes the block, the last
    /// removes the entry.
    shared: Mutex<HashMap<(u64, u64), Handout>>,
}

/// A shared block being handed out, and how many ranks took it.
type Handout = (Arc<HeapBlock>, usize);

/// An in-process group's shared block: ordering comes from the fence's
/// barrier (channel messages), so `sync` has nothing to do.
struct HeapShared(#[allow(dead_code)] Arc<HeapBlock>);

impl SharedBacking for HeapShared {
    fn sync(&self) -> Result<(), CommError> {
        Ok(())
    }
}

/// A 64-bit mix (splitmix64's finalizer), so that group ids made from
/// (parent, split number, colour) do not collide by arithmetic accident.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A rank of an in-process world (see the module doc). Build the world with
/// [`InProcess::world`] and move each rank into its own thread.
pub struct InProcess {
    world: Arc<World>,
    inbox: Arc<Mutex<Inbox>>,
    /// World ranks of this group's members, by group rank.
    members: Arc<Vec<usize>>,
    group: u64,
    rank: usize,
    world_rank: usize,
    seq: AtomicU64,
    /// Groups made by splits, counted so that every member names its new
    /// group alike.
    splits: AtomicU64,
    /// Whether this value is the rank's world communicator (its drop tells
    /// the peers the rank is gone).
    owner: bool,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InProcess(rank {} of {})", self.rank, self.members.len())
    }
}

impl InProcess {
    /// `size` ranks on one host, each waiting at most 60 s for a message.
    pub fn world(size: usize) -> Vec<InProcess> {
        Self::world_on_hosts(&vec![0; size], Duration::from_secs(60))
    }

    /// One rank per entry of `hosts` (its host number, for
    /// [`Communicator::split_local`]), each waiting at most `timeout` for a
    /// message.
    pub fn world_on_hosts(hosts: &[usize], timeout: Duration) -> Vec<InProcess> {
        let (senders, receivers): (Vec<_>, Vec<_>) = hosts.iter().map(|_| channel()).unzip();
        let world = Arc::new(World { senders, hosts: hosts.to_vec(), timeout, shared: Mutex::new(HashMap::new()) });
        let members = Arc::new((0..hosts.len()).collect::<Vec<_>>());
        receivers
            .into_iter()
            .enumerate()
            .map(|(r, rx)| InProcess {
                world: world.clone(),
                inbox: Arc::new(Mutex::new(Inbox { rx, early: HashMap::new(), gone: HashMap::new() })),
                members: members.clone(),
                group: 0,
                rank: r,
                world_rank: r,
                seq: AtomicU64::new(0),
                splits: AtomicU64::new(0),
                owner: true,
            })
            .collect()
    }

    /// Run `f` on every rank of a `size`-rank world, each in its own
    /// thread, and return the ranks' results in rank order. A rank that
    /// panics drops its communicator, so its peers fail rather than wait;
    /// its panic is returned as a [`CommError::PeerFailed`] of its own.
    pub fn run<T: Send>(size: usize, f: impl Fn(InProcess) -> T + Sync) -> Vec<Result<T, CommError>> {
        Self::run_on_hosts(&vec![0; size], f)
    }

    /// [`InProcess::run`] on a world whose rank `r` runs on host
    /// `hosts[r]` (simulated nodes: `&[0, 0, 1, 1]` is two nodes of two
    /// ranks), each rank waiting at most 60 s for a message.
    pub fn run_on_hosts<T: Send>(hosts: &[usize], f: impl Fn(InProcess) -> T + Sync) -> Vec<Result<T, CommError>> {
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> =
                InProcess::world_on_hosts(hosts, Duration::from_secs(60)).into_iter().map(|c| s.spawn(move || f(c))).collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(r, h)| {
                    h.join().map_err(|p| {
                        let reason = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "panicked".into());
                        CommError::PeerFailed { peer: r, during: "its thread".into(), reason }
                    })
                })
                .collect()
        })
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst)
    }

    fn send(&self, to: usize, seq: u64, bytes: Vec<u8>) -> Result<(), CommError> {
        let w = self.members[to];
        self.world.senders[w]
            .send(Msg::Data { group: self.group, seq, from: self.world_rank, bytes })
            .map_err(|_| CommError::PeerFailed { peer: to, during: "a send".into(), reason: "its inbox is closed".into() })
    }

    /// Receive collective `seq`'s message from each group rank in `from`.
    fn receive(inbox: &Mutex<Inbox>, ctx: &Ctx, seq: u64, from: &[usize], during: &str) -> Result<Vec<Vec<u8>>, CommError> {
        let mut inbox = inbox.lock().map_err(|_| CommError::Usage("a rank's inbox lock is poisoned".into()))?;
        let mut got: Vec<Option<Vec<u8>>> = from.iter().map(|_| None).collect();
        let deadline = Instant::now() + ctx.timeout;
        loop {
            for (slot, &p) in got.iter_mut().zip(from) {
                if slot.is_none() {
                    *slot = inbox.early.remove(&(ctx.group, seq, ctx.members[p]));
                }
            }
            let Some(missing) = got.iter().position(Option::is_none) else { break };
            let peer_world = ctx.members[from[missing]];
            if let Some(reason) = inbox.gone.get(&peer_world) {
                return Err(CommError::PeerFailed { peer: from[missing], during: during.to_string(), reason: reason.clone() });
            }
            let now = Instant::now();
            let msg = match inbox.rx.recv_timeout(deadline.saturating_duration_since(now)) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(CommError::Timeout {
                        peer: from[missing],
                        during: during.to_string(),
                        seconds: ctx.timeout.as_secs_f64(),
                    })
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(CommError::PeerFailed {
                        peer: from[missing],
                        during: during.to_string(),
                        reason: "every peer is gone".into(),
                    })
                }
            };
            match msg {
                Msg::Data { group, seq, from, bytes } => {
                    inbox.early.insert((group, seq, from), bytes);
                }
                Msg::Gone { from, reason } => {
                    inbox.gone.insert(from, reason);
                }
            }
        }
        Ok(got.into_iter().map(|g| g.unwrap_or_default()).collect())
    }

    fn ctx(&self) -> Ctx {
        Ctx { group: self.group, members: self.members.clone(), timeout: self.world.timeout }
    }
}

/// What a receive needs of its communicator, owned (a pending exchange
/// outlives the borrow that started it).
struct Ctx {
    group: u64,
    members: Arc<Vec<usize>>,
    timeout: Duration,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if !self.owner {
            return;
        }
        let reason = if std::thread::panicking() { "its thread panicked".to_string() } else { "it left the world".to_string() };
        for (w, tx) in self.world.senders.iter().enumerate() {
            if w != self.world_rank {
                let _ = tx.send(Msg::Gone { from: self.world_rank, reason: reason.clone() });
            }
        }
    }
}

struct InProcessPending {
    inbox: Arc<Mutex<Inbox>>,
    ctx: Ctx,
    seq: u64,
    rank: usize,
    own: Vec<u8>,
    recv_lens: Vec<usize>,
}

impl Pending for InProcessPending {
    fn wait(self: Box<Self>) -> Result<Vec<Vec<u8>>, CommError> {
        let during = "an all-to-all";
        let peers: Vec<usize> = (0..self.recv_lens.len()).filter(|&p| p != self.rank).collect();
        let got = InProcess::receive(&self.inbox, &self.ctx, self.seq, &peers, during)?;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); self.recv_lens.len()];
        for (p, bytes) in peers.into_iter().zip(got) {
            out[p] = bytes;
        }
        out[self.rank] = self.own;
        for (p, (bytes, &want)) in out.iter().zip(&self.recv_lens).enumerate() {
            if bytes.len() != want {
                return Err(CommError::WrongSize { peer: p, during: during.into(), expected: want, got: bytes.len() });
            }
        }
        Ok(out)
    }
}

impl Communicator for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.members.len()
    }

    fn start_all_to_all_v(&self, sends: Vec<Vec<u8>>, recv_lens: Vec<usize>) -> Result<PendingExchange, CommError> {
        let n = self.size();
        if sends.len() != n || recv_lens.len() != n {
            return Err(CommError::Usage(format!(
                "an all-to-all over {n} ranks takes {n} sends and {n} receive lengths, not {} and {}",
                sends.len(),
                recv_lens.len()
            )));
        }
        let seq = self.next_seq();
        let mut own = Vec::new();
        for (p, bytes) in sends.into_iter().enumerate() {
            if p == self.rank {
                own = bytes;
            } else {
                self.send(p, seq, bytes)?;
            }
        }
        Ok(PendingExchange::new(Box::new(InProcessPending {
            inbox: self.inbox.clone(),
            ctx: self.ctx(),
            seq,
            rank: self.rank,
            own,
            recv_lens,
        })))
    }

    fn all_gather_bytes(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let seq = self.next_seq();
        let peers: Vec<usize> = (0..self.size()).filter(|&p| p != self.rank).collect();
        for &p in &peers {
            self.send(p, seq, data.to_vec())?;
        }
        let got = Self::receive(&self.inbox, &self.ctx(), seq, &peers, "an all-gather")?;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); self.size()];
        for (p, bytes) in peers.into_iter().zip(got) {
            out[p] = bytes;
        }
        out[self.rank] = data.to_vec();
        Ok(out)
    }

    fn barrier(&self) -> Result<(), CommError> {
        self.all_gather_bytes(&[]).map(|_| ())
    }

    fn split_local(&self) -> Result<Arc<dyn Communicator>, CommError> {
        self.split(self.world.hosts[self.world_rank], self.rank)
    }

    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>, CommError> {
        let mut mine = Vec::with_capacity(16);
        mine.extend_from_slice(&(color as u64).to_le_bytes());
        mine.extend_from_slice(&(key as u64).to_le_bytes());
        let all = self.all_gather_bytes(&mine)?;
        let mut same: Vec<(u64, usize)> = Vec::new();
        for (p, b) in all.iter().enumerate() {
            let (c, k) = match read_u64s(b).as_deref() {
                Some(&[c, k]) => (c, k),
                _ => return Err(CommError::WrongSize { peer: p, during: "a split".into(), expected: 16, got: b.len() }),
            };
            if c == color as u64 {
                same.push((k, p));
            }
        }
        same.sort_unstable();
        let members: Vec<usize> = same.iter().map(|&(_, p)| self.members[p]).collect();
        let rank = members
            .iter()
            .position(|&w| w == self.world_rank)
            .ok_or_else(|| CommError::Usage("a rank not in its own group".into()))?;
        // Every member derives the same id from the parent's, the split's
        // number and the colour.
        let k = self.splits.fetch_add(1, Ordering::SeqCst) + 1;
        let group = mix(mix(mix(self.group) ^ k) ^ color as u64);
        Ok(Arc::new(InProcess {
            world: self.world.clone(),
            inbox: self.inbox.clone(),
            members: Arc::new(members),
            group,
            rank,
            world_rank: self.world_rank,
            seq: AtomicU64::new(0),
            splits: AtomicU64::new(0),
            owner: false,
        }))
    }

    fn allocate_shared(&self, bytes: usize) -> Result<SharedMemory, CommError> {
        let hosts: Vec<usize> = self.members.iter().map(|&w| self.world.hosts[w]).collect();
        if hosts.iter().any(|&h| h != hosts[0]) {
            return Err(CommError::Usage(format!(
                "shared memory needs every rank of the group on one host; these ranks run on hosts {hosts:?}"
            )));
        }
        // Every member names the allocation by the number of the all-gather
        // that follows, the same on all of them.
        let key = (self.group, self.seq.load(Ordering::SeqCst));
        let all = self.all_gather_bytes(&(bytes as u64).to_le_bytes())?;
        let mut sizes = Vec::with_capacity(all.len());
        for (p, b) in all.iter().enumerate() {
            let size = match read_u64s(b).as_deref() {
                Some(&[n]) => usize::try_from(n).ok(),
                _ => None,
            };
            sizes.push(size.ok_or(CommError::WrongSize {
                peer: p,
                during: "a shared allocation".into(),
                expected: 8,
                got: b.len(),
            })?);
        }
        let total = sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b));
        let total = total.ok_or_else(|| CommError::Usage("the shared allocation's total size overflows".into()))?;
        let block = {
            let mut table =
                self.world.shared.lock().map_err(|_| CommError::Usage("the shared-allocation table lock is poisoned".into()))?;
            let (block, taken) = match table.remove(&key) {
                Some(e) => e,
                None => (Arc::new(HeapBlock::zeroed(total)?), 0),
            };
            if taken + 1 < self.size() {
                table.insert(key, (block.clone(), taken + 1));
            }
            block
        };
        // Laid end to end, as MPI lays a shared window's segments by default.
        let segments = packed_segments(block.addr(), &sizes);
        // SAFETY: every segment lies inside `block`, which the backing keeps
        // alive, allocated for reads and writes.
        Ok(unsafe { SharedMemory::new(segments, self.rank, Box::new(HeapShared(block))) })
    }

    fn engine(&self) -> String {
        "in-process".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_to_all_delivers_each_peers_bytes() {
        let res = InProcess::run(3, |c| {
            let r = c.rank();
            let sends: Vec<Vec<u8>> = (0..3).map(|p| vec![r as u8; p + 1]).collect();
            // Rank r sends p+1 bytes of value r to rank p, so rank p
            // receives p+1 bytes from every peer.
            c.all_to_all_v(sends, vec![r + 1; 3])
        });
        for (r, got) in res.into_iter().enumerate() {
            let got = got.expect("thread").expect("exchange");
            for (p, bytes) in got.iter().enumerate() {
                assert_eq!(bytes, &vec![p as u8; r + 1]);
            }
        }
    }

    #[test]
    fn all_reduce_sums_in_rank_order_everywhere() {
        let res = InProcess::run(4, |c| {
            let mut x = [1e16f64 * if c.rank() == 0 { 1.0 } else { 0.0 }, c.rank() as f64];
            if c.rank() == 1 {
                x[0] = 1.0;
            }
            if c.rank() == 2 {
                x[0] = -1e16;
            }
            c.all_reduce_f64(&mut x).map(|_| x)
        });
        let all: Vec<[f64; 2]> = res.into_iter().map(|r| r.expect("thread").expect("reduce")).collect();
        // ((1e16 + 1) - 1e16) + 0 = 0 in rank order (1e16 + 1 rounds to 1e16).
        for x in &all {
            assert_eq!(x[0].to_bits(), ((1e16f64 + 1.0) - 1e16 + 0.0).to_bits());
            assert_eq!(x[1], 6.0);
        }
    }

    #[test]
    fn wrong_size_is_an_error() {
        let res = InProcess::run(2, |c| c.all_to_all_v(vec![vec![0; 4], vec![0; 4]], vec![4, 3]));
        let errs: Vec<_> = res.into_iter().map(|r| r.expect("thread")).collect();
        assert!(matches!(errs[0], Err(CommError::WrongSize { peer: 1, expected: 3, got: 4, .. })), "{errs:?}");
    }

    #[test]
    fn a_departed_peer_fails_the_waiter_without_the_timeout() {
        let hosts = [0, 0];
        let mut world = InProcess::world_on_hosts(&hosts, Duration::from_secs(600));
        let c1 = world.pop().expect("rank 1");
        let c0 = world.pop().expect("rank 0");
        drop(c1);
        let t = Instant::now();
        let err = c0.barrier().expect_err("peer gone");
        assert!(matches!(err, CommError::PeerFailed { peer: 1, .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn a_silent_peer_times_out() {
        let mut world = InProcess::world_on_hosts(&[0, 0], Duration::from_millis(50));
        let c1 = world.pop().expect("rank 1");
        let c0 = world.pop().expect("rank 0");
        let err = c0.barrier().expect_err("peer silent");
        assert!(matches!(err, CommError::Timeout { peer: 1, .. }), "{err}");
        drop(c1);
    }

    #[test]
    fn split_local_groups_ranks_by_host() {
        let world = InProcess::world_on_hosts(&[0, 1, 0, 1], Duration::from_secs(30));
        let res: Vec<(usize, usize, f64)> = std::thread::scope(|s| {
            let hs: Vec<_> = world
                .into_iter()
                .map(|c| {
                    s.spawn(move || {
                        let local = c.split_local().expect("split");
                        let mut x = [c.rank() as f64];
                        local.all_reduce_f64(&mut x).expect("reduce");
                        (local.rank(), local.size(), x[0])
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert_eq!(res, vec![(0, 2, 2.0), (0, 2, 4.0), (1, 2, 2.0), (1, 2, 4.0)]);
    }

    #[test]
    fn check_same_names_the_ranks_that_differ() {
        let res = InProcess::run(3, |c| super::super::communicator::check_same(&c, "graph", if c.rank() == 2 { 7 } else { 5 }));
        for r in res {
            let e = r.expect("thread").expect_err("differs");
            assert!(e.to_string().contains("rank 2: 0000000000000007"), "{e}");
        }
    }
}
