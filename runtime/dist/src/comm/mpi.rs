//! The MPI engine: ranks are processes (on one host or many) launched by
//! `mpirun`, talking through the system's MPI library via the `mpi` tiga_runtime's
//! raw bindings.
//!
//! # Lifetime of MPI
//!
//! [`Mpi::init`] initializes MPI once per process. The library's state (the
//! `mpi` tiga_runtime's `Universe`, whose drop calls `MPI_Finalize`) lives in a
//! session shared through an `Arc` by every communicator this engine makes
//! (world, splits) and by every exchange still in flight. The last of them
//! to go finalizes MPI, after every communicator handle has been freed; a
//! static would never be dropped, so `MPI_Finalize` would never run and
//! `mpirun` would report the process as having ended improperly. MPI cannot
//! be initialized again after it was finalized: drop every communicator at
//! the end of the program, and not before (`std::process::exit` skips the
//! drops, and so `MPI_Finalize`). A session dropped while its thread panics
//! calls `MPI_Abort` instead: `MPI_Finalize` waits for every other rank,
//! which would be waiting in a collective for this one.
//!
//! # Threads
//!
//! MPI is initialized at `MPI_THREAD_SERIALIZED`: any thread may call it,
//! one at a time. Every MPI call this engine makes holds the session's lock,
//! so communicators can be shared between threads (`Send + Sync`), and a
//! wait blocks other threads' collectives until it returns.
//!
//! # The all-to-all
//!
//! [`Communicator::start_all_to_all_v`] starts a nonblocking `MPI_Ialltoall`
//! of the message lengths (8 bytes per peer) and posts an `MPI_Isend` only
//! to the peers this rank has bytes for, so that an exchange where most pairs
//! of ranks have nothing to say costs little more than the pairs that do. The
//! wait posts receives only for the peers that announced bytes, each of the
//! announced size: a peer whose message differs from the plan
//! (`recv_lens`) is [`CommError::WrongSize`], found by comparing lengths,
//! never by a truncated receive; such a message is still received (into a
//! scratch buffer) and dropped, so no stray message is left for a later
//! exchange, and the communicator stays usable. Every collective is
//! *started* inside `start_all_to_all_v`, in call order, so exchanges can be
//! waited for in any order and other collectives can run while one is in
//! flight. Point-to-point messages are tagged with the exchange's number
//! (modulo 32768, the smallest tag bound MPI allows).
//!
//! Counts are C `int`s: a message is sent as pieces of at most
//! [`DEFAULT_MAX_MESSAGE_BYTES`] (see [`Mpi::set_max_message_bytes`]), and
//! the all-gather goes in rounds whose total stays under that bound.
//!
//! # Nodes
//!
//! [`Communicator::split_local`] groups the ranks that share memory
//! (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`). With
//! `TIGA_RANKS_PER_NODE=k` in the environment (read by [`Mpi::init`]),
//! each such group is cut further into simulated nodes of consecutive
//! world ranks, world rank `w` on node `w / k`: two-level schemes then take
//! their cross-node path on one host, as tests and `.ci/feature-suite` need.
//! [`Communicator::allocate_shared`] maps one `MPI_Win_allocate_shared`
//! window, held in a passive-target epoch (`MPI_Win_lock_all`) for its
//! whole life, so that a fence is `MPI_Win_sync`, a barrier,
//! `MPI_Win_sync` (the "unified" memory model of shared windows).
//!
//! # Failures
//!
//! Errors of MPI calls come back as [`CommError::Mpi`] (the communicators
//! use `MPI_ERRORS_RETURN`). MPI has no timeouts: a rank that dies is
//! handled by the launcher (Open MPI's `mpirun` kills the remaining ranks of
//! the job and exits non-zero), so a peer's death ends the job rather than
//! returning [`CommError::PeerFailed`]; `.ci/feature-suite` measures how fast.

use std::ffi::c_int;
use std::fmt;
use std::os::raw::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use ::mpi::environment::{Threading, Universe};
use ::mpi::ffi;

use super::communicator::{CommError, Communicator, Pending, PendingExchange, SharedBacking, SharedMemory};

/// The largest piece a message is sent in, and the bound on one round of an
/// all-gather: 1 GiB, under `i32::MAX`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The environment variable that groups ranks into simulated nodes (see
/// the module doc).
pub const RANKS_PER_NODE_VAR: &str = "TIGA_RANKS_PER_NODE";

/// Point-to-point tags cycle through `0..TAG_SPAN` (MPI guarantees tags up
/// to 32767).
const TAG_SPAN: u64 = 32768;

/// The process's MPI state, shared by every communicator and exchange.
struct Session {
    /// Serializes every MPI call (the library runs at `MPI_THREAD_SERIALIZED`).
    calls: Mutex<()>,
    /// "MPI (<first line of the library's version string>)".
    engine: String,
    /// Finalizes MPI when dropped; declared last so that it goes last.
    _universe: Universe,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, ()> {
        // The lock guards no data of its own, only the order of MPI calls, so
        // a thread that panicked while holding it broke no invariant.
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // SAFETY: MPI is initialized (the universe is alive) and not
            // finalized; MPI_Abort ends every rank of the job and does not
            // return, so the universe's finalize never runs.
            unsafe {
                ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, 1);
            }
        }
    }
}

/// The live session, if any: [`Mpi::init`] hands it to a second caller
/// instead of initializing twice.
static SESSION: Mutex<Weak<Session>> = Mutex::new(Weak::new());

/// An owned MPI communicator handle, freed when the last user goes.
struct Comm {
    raw: ffi::MPI_Comm,
    /// Keeps MPI initialized until after the free (fields drop after `drop`).
    session: Arc<Session>,
}

// SAFETY: an MPI_Comm is a handle the library lets any thread use at
// MPI_THREAD_SERIALIZED as long as calls do not overlap; every use of `raw`
// holds `session.calls`.
unsafe impl Send for Comm {}
// SAFETY: as for Send: shared use goes through the session's lock.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        let _calls = self.session.lock();
        // SAFETY: `raw` is a communicator this engine created (dup or split)
        // and nobody else holds it (every holder shares this `Comm`); MPI is
        // initialized while `session` lives. A failure leaks the handle.
        unsafe {
            ffi::MPI_Comm_free(&mut self.raw);
        }
    }
}

/// A rank of an MPI communicator (see the module doc).
pub struct Mpi {
    comm: Arc<Comm>,
    rank: usize,
    size: usize,
    /// This process's rank in `MPI_COMM_WORLD` (for simulated nodes).
    world_rank: usize,
    /// Simulated nodes of this many consecutive world ranks, if asked for.
    ranks_per_node: Option<usize>,
    /// Exchanges started on this communicator, for their tags.
    exchanges: AtomicU64,
    max_message: usize,
}

impl fmt::Debug for Mpi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mpi(rank {} of {})", self.rank, self.size)
    }
}

/// `Err(CommError::Mpi)` naming `call` and the library's message unless
/// `code` is `MPI_SUCCESS`. Call with the session's lock held.
fn check(code: c_int, call: &str) -> Result<(), CommError> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut buf = vec![0u8; 512];
    let mut len: c_int = 0;
    // SAFETY: MPI_MAX_ERROR_STRING is 256 in Open MPI and MPICH; the buffer
    // is larger, and MPI writes at most that many bytes and their length.
    let ok = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr() as *mut c_char, &mut len) };
    buf.truncate(usize::try_from(len).unwrap_or(0).min(512));
    let text = if ok == ffi::MPI_SUCCESS as c_int { String::from_utf8_lossy(&buf).into_owned() } else { String::new() };
    Err(CommError::Mpi(format!("{call} failed with error {code}: {}", text.trim_end_matches('\0'))))
}

fn count(n: usize, what: &str) -> Result<c_int, CommError> {
    c_int::try_from(n).map_err(|_| CommError::Usage(format!("{what}: {n} does not fit an MPI count")))
}

/// The byte ranges a message of `len` bytes is sent in: pieces of
/// `max` bytes and a shorter last one (none for an empty message).
fn pieces(len: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(max)).map(move |i| (i * max, ((i + 1) * max).min(len)))
}

impl Mpi {
    /// Initialize MPI (once per process; a later call while communicators
    /// live shares that initialization) and return a communicator over
    /// every rank of the job, a duplicate of `MPI_COMM_WORLD` so that its
    /// messages never mix with other users of MPI in the process. Without a
    /// launcher, the process is a world of one rank. Collective: every rank
    /// calls it, as often as the others.
    ///
    /// `TIGA_RANKS_PER_NODE=k` (a positive integer) makes
    /// [`Communicator::split_local`] group world ranks into simulated
    /// nodes of `k` (see the module doc); another value is an error.
    pub fn init() -> Result<Mpi, CommError> {
        let ranks_per_node = match std::env::var(RANKS_PER_NODE_VAR) {
            Err(std::env::VarError::NotPresent) => None,
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(k) if k > 0 => Some(k),
                _ => {
                    return Err(CommError::Usage(format!(
                        "{RANKS_PER_NODE_VAR}={v:?}: wants a positive number of ranks per node"
                    )))
                }
            },
            Err(e) => return Err(CommError::Usage(format!("{RANKS_PER_NODE_VAR}: {e}"))),
        };
        let mut slot = SESSION.lock().unwrap_or_else(PoisonError::into_inner);
        let session = match slot.upgrade() {
            Some(s) => s,
            None => {
                if ::mpi::environment::is_finalized() {
                    return Err(CommError::Mpi(
                        "MPI was finalized (every communicator was dropped) and cannot be initialized again".into(),
                    ));
                }
                let (universe, level) = ::mpi::initialize_with_threading(Threading::Serialized)
                    .ok_or_else(|| CommError::Mpi("MPI was initialized outside tiga; tiga initializes it itself".into()))?;
                if level < Threading::Serialized {
                    // Dropping the universe finalizes MPI: this process cannot use it.
                    return Err(CommError::Mpi(format!(
                        "the MPI library offers thread level {level:?}, and tiga needs Serialized (MPI calls from any thread, one at a time)"
                    )));
                }
                let version = ::mpi::environment::library_version().unwrap_or_else(|_| "unknown version".into());
                let first = version.lines().next().unwrap_or("").trim_matches(|c: char| c == '\0' || c.is_whitespace());
                let s = Arc::new(Session { calls: Mutex::new(()), engine: format!("MPI ({first})"), _universe: universe });
                *slot = Arc::downgrade(&s);
                s
            }
        };
        drop(slot);
        let raw = {
            let _calls = session.lock();
            let mut raw = comm_null();
            // SAFETY: MPI is initialized; `raw` receives the new handle.
            check(unsafe { ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut raw) }, "MPI_Comm_dup")?;
            raw
        };
        let mut world = Mpi::adopt(raw, session, 0, ranks_per_node)?;
        world.world_rank = world.rank;
        Ok(world)
    }

    /// Wrap a communicator this engine created: set it to return errors,
    /// and read its rank and size. `world_rank` and `ranks_per_node` are
    /// the parent's.
    fn adopt(
        raw: ffi::MPI_Comm,
        session: Arc<Session>,
        world_rank: usize,
        ranks_per_node: Option<usize>,
    ) -> Result<Mpi, CommError> {
        let comm = Arc::new(Comm { raw, session });
        let _calls = comm.session.lock();
        let (mut rank, mut size) = (0, 0);
        // SAFETY: `raw` is a valid communicator owned by `comm`; the outputs
        // are local integers.
        unsafe {
            check(ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN), "MPI_Comm_set_errhandler")?;
            check(ffi::MPI_Comm_rank(raw, &mut rank), "MPI_Comm_rank")?;
            check(ffi::MPI_Comm_size(raw, &mut size), "MPI_Comm_size")?;
        }
        drop(_calls);
        let rank = usize::try_from(rank).map_err(|_| CommError::Mpi(format!("MPI gave the rank {rank}")))?;
        let size = usize::try_from(size).map_err(|_| CommError::Mpi(format!("MPI gave the size {size}")))?;
        Ok(Mpi {
            comm,
            rank,
            size,
            world_rank,
            ranks_per_node,
            exchanges: AtomicU64::new(0),
            max_message: DEFAULT_MAX_MESSAGE_BYTES,
        })
    }

    /// Send messages in pieces of at most `bytes` bytes (default
    /// [`DEFAULT_MAX_MESSAGE_BYTES`]; at most `i32::MAX`), and keep each
    /// all-gather round under it. Every rank must set the same value (a
    /// receiver cuts an announced length the way its sender did). Lowered
    /// in tests to exercise the chunking without gigabyte messages.
    pub fn set_max_message_bytes(&mut self, bytes: usize) -> Result<(), CommError> {
        if bytes == 0 || bytes > i32::MAX as usize {
            return Err(CommError::Usage(format!("the largest message must be 1 to {} bytes, not {bytes}", i32::MAX)));
        }
        self.max_message = bytes;
        Ok(())
    }

    fn raw(&self) -> ffi::MPI_Comm {
        self.comm.raw
    }

    /// A communicator split from this one, with this one's settings.
    fn child(&self, raw: ffi::MPI_Comm) -> Result<Mpi, CommError> {
        let mut c = Mpi::adopt(raw, self.comm.session.clone(), self.world_rank, self.ranks_per_node)?;
        c.max_message = self.max_message;
        Ok(c)
    }

    /// Start an exchange's collectives: the nonblocking all-to-all of the
    /// lengths, and a send of each nonempty message (in pieces).
    fn post(&self, live: &mut InFlight, tag: c_int) -> Result<(), CommError> {
        let comm = self.raw();
        let _calls = self.comm.session.lock();
        // SAFETY: both length buffers hold `size` u64s on the heap, owned by
        // `live` until the request completes (or leaked).
        let code = unsafe {
            ffi::MPI_Ialltoall(
                live.lens_out.as_ptr() as *const c_void,
                1,
                ffi::RSMPI_UINT64_T,
                live.lens_in.as_mut_ptr() as *mut c_void,
                1,
                ffi::RSMPI_UINT64_T,
                comm,
                &mut live.lens_req,
            )
        };
        check(code, "MPI_Ialltoall")?;
        for (p, bytes) in live.sends.iter().enumerate() {
            for (a, b) in pieces(bytes.len(), self.max_message) {
                let c = count(b - a, "a piece")?;
                let mut req = request_null();
                // SAFETY: `bytes[a..b]` is heap memory owned by `live` until
                // the request completes (or leaked); `p` is a rank of `comm`
                // (this rank's own entry was taken out, so it is empty).
                let code = unsafe {
                    ffi::MPI_Isend(bytes.as_ptr().add(a) as *const c_void, c, ffi::RSMPI_UINT8_T, p as c_int, tag, comm, &mut req)
                };
                check(code, "MPI_Isend")?;
                live.send_reqs.push(req);
            }
        }
        Ok(())
    }
}

/// `MPI_COMM_NULL`, read from the bindings' extern static.
fn comm_null() -> ffi::MPI_Comm {
    // SAFETY: a constant handle exported by the mpi-sys shim, never written.
    unsafe { ffi::RSMPI_COMM_NULL }
}

/// `MPI_WIN_NULL`, read from the bindings' extern static.
fn win_null() -> ffi::MPI_Win {
    // SAFETY: a constant handle exported by the mpi-sys shim, never written.
    unsafe { ffi::RSMPI_WIN_NULL }
}

/// A shared-memory window: the backing of [`Mpi`]'s [`SharedMemory`].
struct Window {
    win: ffi::MPI_Win,
    /// Keeps MPI initialized until the window is freed.
    session: Arc<Session>,
    /// Whether the lock_all epoch is open (unlocked before the free).
    locked: bool,
}

// SAFETY: a window handle may be used from any thread at
// MPI_THREAD_SERIALIZED when calls do not overlap; every use holds the
// session's lock.
unsafe impl Send for Window {}
// SAFETY: as for Send.
unsafe impl Sync for Window {}

impl SharedBacking for Window {
    fn sync(&self) -> Result<(), CommError> {
        let _calls = self.session.lock();
        // SAFETY: a valid window in a lock_all epoch.
        check(unsafe { ffi::MPI_Win_sync(self.win) }, "MPI_Win_sync")
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // MPI_Win_free waits for the group, which may be waiting for
            // this rank elsewhere; the session's drop aborts the job.
            return;
        }
        let _calls = self.session.lock();
        // SAFETY: a valid window this engine allocated and nobody else
        // frees; collective over its group, which frees it in the same
        // order (see the shared module's doc). A failure leaks it.
        unsafe {
            if self.locked {
                ffi::MPI_Win_unlock_all(self.win);
            }
            ffi::MPI_Win_free(&mut self.win);
        }
    }
}

/// `MPI_REQUEST_NULL`, read from the bindings' extern static.
fn request_null() -> ffi::MPI_Request {
    // SAFETY: a constant handle exported by the mpi-sys shim, never written.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// The requests and buffers of an exchange in flight: MPI reads or writes
/// every buffer here until the requests complete, so this is either
/// completed or leaked, never freed early.
struct InFlight {
    lens_out: Vec<u64>,
    lens_in: Vec<u64>,
    lens_req: ffi::MPI_Request,
    sends: Vec<Vec<u8>>,
    send_reqs: Vec<ffi::MPI_Request>,
}

struct MpiPending {
    comm: Arc<Comm>,
    rank: usize,
    tag: c_int,
    max_message: usize,
    recv_lens: Vec<usize>,
    own: Vec<u8>,
    /// `None` once completed.
    live: Option<InFlight>,
}

// SAFETY: the request handles and buffers are used only under the session's
// lock (MPI_THREAD_SERIALIZED lets any thread complete a request), and the
// buffers are heap memory that does not move with the struct.
unsafe impl Send for MpiPending {}

impl MpiPending {
    /// Complete the exchange: the length exchange, every posted send, and a
    /// receive for every announced message. On an MPI error the buffers
    /// that requests may still use are leaked, never freed under them.
    fn finish(&mut self) -> Result<Vec<Vec<u8>>, CommError> {
        let Some(mut live) = self.live.take() else {
            return Err(CommError::Usage("an exchange was completed twice".into()));
        };
        let mut recvs: Vec<(usize, Vec<u8>)> = Vec::new();
        if let Err(e) = self.complete(&mut live, &mut recvs) {
            std::mem::forget(live);
            std::mem::forget(recvs);
            return Err(e);
        }
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); self.recv_lens.len()];
        for (p, bytes) in recvs {
            out[p] = bytes;
        }
        out[self.rank] = std::mem::take(&mut self.own);
        for (p, &want) in self.recv_lens.iter().enumerate() {
            let got = if p == self.rank { out[p].len() as u64 } else { live.lens_in[p] };
            if got != want as u64 {
                let got = usize::try_from(got).unwrap_or(usize::MAX);
                return Err(CommError::WrongSize { peer: p, during: "an all-to-all (MPI)".into(), expected: want, got });
            }
        }
        Ok(out)
    }

    /// The MPI calls of [`MpiPending::finish`]. `recvs` gets a buffer for
    /// each peer whose announced length matches the plan; the caller leaks
    /// it on error (a receive may still be writing into it).
    fn complete(&self, live: &mut InFlight, recvs: &mut Vec<(usize, Vec<u8>)>) -> Result<(), CommError> {
        let comm = self.comm.raw;
        let _calls = self.comm.session.lock();
        // SAFETY: `lens_req` is the request of the Ialltoall posted at
        // start, whose buffers `live` owns; waiting sets it to null.
        check(unsafe { ffi::MPI_Wait(&mut live.lens_req, ffi::RSMPI_STATUS_IGNORE) }, "MPI_Wait (lengths)")?;
        let mut announced: Vec<usize> = Vec::with_capacity(self.recv_lens.len());
        for (p, &l) in live.lens_in.iter().enumerate() {
            announced.push(usize::try_from(l).map_err(|_| CommError::Mpi(format!("rank {p} announced {l} bytes")))?);
        }
        let from_peers = |p: &usize| *p != self.rank && announced[*p] > 0;
        // Allocate every buffer before posting, so none moves afterwards.
        for p in (0..announced.len()).filter(from_peers) {
            if announced[p] == self.recv_lens[p] {
                recvs.push((p, vec![0u8; announced[p]]));
            }
        }
        let mut recv_reqs: Vec<ffi::MPI_Request> = Vec::new();
        for (p, buf) in recvs.iter_mut() {
            for (a, b) in pieces(buf.len(), self.max_message) {
                let c = count(b - a, "a piece")?;
                let mut req = request_null();
                // SAFETY: `buf[a..b]` lies in a heap buffer that outlives the
                // request (the caller completes or leaks it); `p` is a rank
                // of `comm`.
                let code = unsafe {
                    ffi::MPI_Irecv(
                        buf.as_mut_ptr().add(a) as *mut c_void,
                        c,
                        ffi::RSMPI_UINT8_T,
                        *p as c_int,
                        self.tag,
                        comm,
                        &mut req,
                    )
                };
                check(code, "MPI_Irecv")?;
                recv_reqs.push(req);
            }
        }
        // Drain messages that differ from the plan into a scratch buffer,
        // so that none is left behind for a later exchange.
        let mut scratch: Vec<u8> = Vec::new();
        for p in (0..announced.len()).filter(from_peers) {
            if announced[p] == self.recv_lens[p] {
                continue;
            }
            for (a, b) in pieces(announced[p], self.max_message) {
                scratch.resize(b - a, 0);
                let c = count(b - a, "a piece")?;
                // SAFETY: `scratch` holds `b - a` bytes; the receive blocks
                // until it is done, so the buffer may change afterwards.
                let code = unsafe {
                    ffi::MPI_Recv(
                        scratch.as_mut_ptr() as *mut c_void,
                        c,
                        ffi::RSMPI_UINT8_T,
                        p as c_int,
                        self.tag,
                        comm,
                        ffi::RSMPI_STATUS_IGNORE,
                    )
                };
                check(code, "MPI_Recv")?;
            }
        }
        let n = count(recv_reqs.len(), "receive requests")?;
        // SAFETY: every request was posted above and its buffer is alive.
        check(unsafe { ffi::MPI_Waitall(n, recv_reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE) }, "MPI_Waitall (receives)")?;
        let n = count(live.send_reqs.len(), "send requests")?;
        // SAFETY: the sends were posted at start from `live.sends`, alive.
        check(unsafe { ffi::MPI_Waitall(n, live.send_reqs.as_mut_ptr(), ffi::RSMPI_STATUSES_IGNORE) }, "MPI_Waitall (sends)")
    }
}

impl Pending for MpiPending {
    fn wait(mut self: Box<Self>) -> Result<Vec<Vec<u8>>, CommError> {
        self.finish()
    }
}

impl Drop for MpiPending {
    fn drop(&mut self) {
        if self.live.is_none() {
            return;
        }
        if std::thread::panicking() {
            // The session's drop will abort the job; waiting for peers here
            // could hang first. The buffers stay allocated for MPI.
            std::mem::forget(self.live.take());
            return;
        }
        // An exchange dropped unwaited: peers still expect this rank's
        // receives, and MPI still uses the buffers. Complete it, discard
        // what came.
        let _ = self.finish();
    }
}

impl Communicator for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }

    fn start_all_to_all_v(&self, mut sends: Vec<Vec<u8>>, recv_lens: Vec<usize>) -> Result<PendingExchange, CommError> {
        let n = self.size;
        if sends.len() != n || recv_lens.len() != n {
            return Err(CommError::Usage(format!(
                "an all-to-all over {n} ranks takes {n} sends and {n} receive lengths, not {} and {}",
                sends.len(),
                recv_lens.len()
            )));
        }
        let seq = self.exchanges.fetch_add(1, Ordering::SeqCst);
        let tag = (seq % TAG_SPAN) as c_int;
        let own = std::mem::take(&mut sends[self.rank]);
        let lens_out: Vec<u64> = sends.iter().map(|s| s.len() as u64).collect();
        let mut live = InFlight { lens_out, lens_in: vec![0; n], lens_req: request_null(), sends, send_reqs: Vec::new() };
        if let Err(e) = self.post(&mut live, tag) {
            // A request may be using the buffers.
            std::mem::forget(live);
            return Err(e);
        }
        let max_message = self.max_message;
        Ok(PendingExchange::new(Box::new(MpiPending {
            comm: self.comm.clone(),
            rank: self.rank,
            tag,
            max_message,
            recv_lens,
            own,
            live: Some(live),
        })))
    }

    fn all_gather_bytes(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let n = self.size;
        let comm = self.raw();
        let _calls = self.comm.session.lock();
        let mine = data.len() as u64;
        let mut lens = vec![0u64; n];
        // SAFETY: one u64 out, `n` u64s in, both local buffers; blocking.
        check(
            unsafe {
                ffi::MPI_Allgather(
                    &mine as *const u64 as *const c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    lens.as_mut_ptr() as *mut c_void,
                    1,
                    ffi::RSMPI_UINT64_T,
                    comm,
                )
            },
            "MPI_Allgather (lengths)",
        )?;
        let lens: Vec<usize> = lens
            .into_iter()
            .enumerate()
            .map(|(p, l)| usize::try_from(l).map_err(|_| CommError::Mpi(format!("rank {p} announced {l} bytes"))))
            .collect::<Result<_, _>>()?;
        let mut out: Vec<Vec<u8>> = lens.iter().map(|&l| Vec::with_capacity(l)).collect();
        // Each round moves at most `round` bytes per rank, so a round's total
        // and every displacement stay under max_message ≤ i32::MAX.
        let round = (self.max_message / n).max(1);
        let rounds = lens.iter().copied().max().unwrap_or(0).div_ceil(round);
        let part = |l: usize, k: usize| (l.min(k * round), l.min((k + 1) * round));
        let mut buf: Vec<u8> = Vec::new();
        for k in 0..rounds {
            let mut counts = Vec::with_capacity(n);
            let mut displs = Vec::with_capacity(n);
            let mut total = 0usize;
            for &l in &lens {
                let (a, b) = part(l, k);
                displs.push(count(total, "an all-gather displacement")?);
                counts.push(count(b - a, "an all-gather count")?);
                total += b - a;
            }
            buf.clear();
            buf.resize(total, 0);
            let (a, b) = part(data.len(), k);
            // SAFETY: `data[a..b]` is readable; `buf` holds the sum of
            // `counts`, laid out by `displs`; blocking.
            let code = unsafe {
                ffi::MPI_Allgatherv(
                    data.as_ptr().add(a) as *const c_void,
                    count(b - a, "an all-gather count")?,
                    ffi::RSMPI_UINT8_T,
                    buf.as_mut_ptr() as *mut c_void,
                    counts.as_ptr(),
                    displs.as_ptr(),
                    ffi::RSMPI_UINT8_T,
                    comm,
                )
            };
            check(code, "MPI_Allgatherv")?;
            for (p, o) in out.iter_mut().enumerate() {
                let at = displs[p] as usize;
                o.extend_from_slice(&buf[at..at + counts[p] as usize]);
            }
        }
        Ok(out)
    }

    fn barrier(&self) -> Result<(), CommError> {
        let _calls = self.comm.session.lock();
        // SAFETY: a valid communicator; blocking.
        check(unsafe { ffi::MPI_Barrier(self.raw()) }, "MPI_Barrier")
    }

    fn split_local(&self) -> Result<Arc<dyn Communicator>, CommError> {
        let raw = {
            let _calls = self.comm.session.lock();
            let mut raw = comm_null();
            let key = count(self.rank, "a rank")?;
            // SAFETY: a valid communicator; `raw` receives the new handle.
            let code =
                unsafe { ffi::MPI_Comm_split_type(self.raw(), ffi::RSMPI_COMM_TYPE_SHARED, key, ffi::RSMPI_INFO_NULL, &mut raw) };
            check(code, "MPI_Comm_split_type")?;
            raw
        };
        let host = self.child(raw)?;
        match self.ranks_per_node {
            // Simulated nodes: cut the host's group by world rank.
            Some(k) => host.split(self.world_rank / k, host.rank),
            None => Ok(Arc::new(host)),
        }
    }

    fn split(&self, color: usize, key: usize) -> Result<Arc<dyn Communicator>, CommError> {
        let raw = {
            let _calls = self.comm.session.lock();
            let mut raw = comm_null();
            let color = count(color, "a split colour")?;
            let key = count(key, "a split key")?;
            // SAFETY: a valid communicator; `raw` receives the new handle.
            check(unsafe { ffi::MPI_Comm_split(self.raw(), color, key, &mut raw) }, "MPI_Comm_split")?;
            raw
        };
        Ok(Arc::new(self.child(raw)?))
    }

    fn allocate_shared(&self, bytes: usize) -> Result<SharedMemory, CommError> {
        let size = ffi::MPI_Aint::try_from(bytes)
            .map_err(|_| CommError::Usage(format!("a shared segment of {bytes} bytes does not fit an MPI size")))?;
        let _calls = self.comm.session.lock();
        let mut win = win_null();
        let mut base: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid communicator; `base` and `win` receive the
        // segment's address and the window's handle (displacement unit 1,
        // no info: segments contiguous in rank order).
        let code = unsafe {
            ffi::MPI_Win_allocate_shared(
                size,
                1,
                ffi::RSMPI_INFO_NULL,
                self.raw(),
                &mut base as *mut *mut c_void as *mut c_void,
                &mut win,
            )
        };
        check(code, "MPI_Win_allocate_shared")?;
        let window = Window { win, session: self.comm.session.clone(), locked: false };
        let mut segments = Vec::with_capacity(self.size);
        for r in 0..self.size {
            let (mut len, mut unit, mut at): (ffi::MPI_Aint, c_int, *mut c_void) = (0, 0, std::ptr::null_mut());
            // SAFETY: a valid window; the outputs are locals.
            let code = unsafe {
                ffi::MPI_Win_shared_query(
                    window.win,
                    count(r, "a rank")?,
                    &mut len,
                    &mut unit,
                    &mut at as *mut *mut c_void as *mut c_void,
                )
            };
            check(code, "MPI_Win_shared_query")?;
            let len = usize::try_from(len).map_err(|_| CommError::Mpi(format!("rank {r}'s shared segment has size {len}")))?;
            segments.push((if len == 0 { 0 } else { at as usize }, len));
        }
        let mut window = window;
        // SAFETY: a valid window, not yet locked; NOCHECK: no rank locks it
        // exclusively, ever.
        check(unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, window.win) }, "MPI_Win_lock_all")?;
        window.locked = true;
        // Zero this rank's segment (MPI leaves it undefined), then let every
        // rank see every zero before anyone writes.
        let (own, len) = segments[self.rank];
        if len > 0 {
            // SAFETY: this rank's segment, `len` writable bytes of the window.
            unsafe { std::ptr::write_bytes(own as *mut u8, 0, len) };
        }
        // SAFETY: a valid window in a lock_all epoch; the communicator is
        // valid; blocking.
        unsafe {
            check(ffi::MPI_Win_sync(window.win), "MPI_Win_sync")?;
            check(ffi::MPI_Barrier(self.raw()), "MPI_Barrier")?;
            check(ffi::MPI_Win_sync(window.win), "MPI_Win_sync")?;
        }
        // SAFETY: every segment is memory of the window, mapped in this
        // process for reads and writes while the window (the backing) lives.
        Ok(unsafe { SharedMemory::new(segments, self.rank, Box::new(window)) })
    }

    fn engine(&self) -> String {
        self.comm.session.engine.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_a_message_in_order() {
        assert_eq!(pieces(0, 4).count(), 0);
        assert_eq!(pieces(3, 4).collect::<Vec<_>>(), vec![(0, 3)]);
        assert_eq!(pieces(8, 4).collect::<Vec<_>>(), vec![(0, 4), (4, 8)]);
        assert_eq!(pieces(9, 4).collect::<Vec<_>>(), vec![(0, 4), (4, 8), (8, 9)]);
    }
}
