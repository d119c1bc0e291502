//! Tensors in the memory hierarchy: an execution scope with per-tier
//! budgets (`host` RAM, `disk`) and an eviction policy, holding named
//! tensors that may move between tiers while keeping their identity.
//!
//! A [`TensorHandle`] names one tensor for its whole life: spilling it to
//! disk (by hand with [`Scope::spill`], or by the scope when the host tier
//! is over budget and the policy is [`Eviction::Lru`]) does not change the
//! handle, and [`Scope::get`] brings it back (checksum verified) wherever it
//! is used: as a kernel input, as the input of a VJP, or as a gradient's
//! key. With [`Eviction::Error`], going over a budget is an error naming the
//! tier, the budget and the request. [`Scope::memory_report`] says what lives
//! where.
//!
//! [`Scope::snapshot`] saves the values of every tensor of the scope under
//! one name; [`Scope::restore_snapshot`] brings them back, in this or
//! another process, lazily (disk tier, read on first use).
//!
//! Spilled tensors go to a [`TensorStore`]: a directory the caller names
//! ([`Scope::with_store`]; the tensors outlive the process and can be
//! reattached by name), else a per-process directory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tiga_runtime::Tensor;

use crate::snapshot::Snapshot;
use crate::tensor_store::{SpilledTensor, TensorStore, TensorStoreError};

/// Why a scope refused a request.
#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    /// A tier over its budget, a name unknown or taken.
    #[error("{0}")]
    Refused(String),
    /// The tensor store under the disk tier failed.
    #[error(transparent)]
    Store(#[from] TensorStoreError),
}

type Result<T, E = ScopeError> = std::result::Result<T, E>;

/// What to do when a tier is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Refuse the request that would go over the budget.
    Error,
    /// Spill the least recently used host tensors to disk.
    Lru,
}

/// Where a tensor lives now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Host,
    Disk,
}

/// A tensor of a [`Scope`], by name. Cheap to clone; stays valid while the
/// tensor moves between tiers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorHandle {
    name: String,
}

impl TensorHandle {
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[derive(Debug)]
enum Place {
    Host(Arc<Tensor>),
    Disk(SpilledTensor),
}

impl Place {
    fn tier(&self) -> Tier {
        match self {
            Place::Host(_) => Tier::Host,
            Place::Disk(_) => Tier::Disk,
        }
    }
}

#[derive(Debug)]
struct Entry {
    place: Place,
    bytes: u64,
    last_use: u64,
    /// Whether a `Disk` place is the scope's own file (spilled by it), or
    /// a snapshot's member (restored: the scope reads it, never removes it).
    owns_file: bool,
}

#[derive(Debug, Default)]
struct State {
    entries: BTreeMap<String, Entry>,
    clock: u64,
    spills: u64,
    reloads: u64,
}

/// One line of a [`MemoryReport`].
#[derive(Clone, Debug, PartialEq)]
pub struct ReportEntry {
    pub name: String,
    pub tier: Tier,
    pub bytes: u64,
}

/// What lives where, and the budgets.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryReport {
    pub host_budget: u64,
    pub disk_budget: u64,
    pub host_used: u64,
    pub disk_used: u64,
    pub spills: u64,
    pub reloads: u64,
    pub entries: Vec<ReportEntry>,
}

impl std::fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "host: {} of {} bytes; disk: {} of {} bytes; {} spill(s), {} reload(s)",
            self.host_used, self.host_budget, self.disk_used, self.disk_budget, self.spills, self.reloads
        )?;
        for e in &self.entries {
            writeln!(f, "  {:<24} {:?} {} bytes", e.name, e.tier, e.bytes)?;
        }
        Ok(())
    }
}

/// An execution scope with per-tier budgets and an eviction policy.
#[derive(Debug)]
pub struct Scope {
    host_budget: u64,
    disk_budget: u64,
    policy: Eviction,
    store: TensorStore,
    state: Mutex<State>,
}

/// The bytes a tensor's elements take: what it counts against a tier.
pub fn tensor_bytes(t: &Tensor) -> u64 {
    (t.len() * t.dtype().size()) as u64
}

impl Scope {
    /// A scope spilling to a per-process directory, removed at exit. For a
    /// directory that outlives the process, [`Scope::with_store`] with
    /// [`TensorStore::at`] (or [`TensorStore::from_env`], which reads
    /// `TIGA_SPILL_DIR`).
    pub fn new(host_budget: u64, disk_budget: u64, policy: Eviction) -> Result<Scope> {
        let store = TensorStore::process().map_err(ScopeError::from)?;
        Ok(Scope::with_store(host_budget, disk_budget, policy, store))
    }

    pub fn with_store(host_budget: u64, disk_budget: u64, policy: Eviction, store: TensorStore) -> Scope {
        Scope { host_budget, disk_budget, policy, store, state: Mutex::new(State::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn used(st: &State, tier: Tier) -> u64 {
        st.entries.values().filter(|e| e.place.tier() == tier).map(|e| e.bytes).sum()
    }

    /// Make room for `need` more host bytes (spilling LRU tensors other than
    /// `keep`), or refuse. The victims are chosen in one pass, least
    /// recently used first (not a scan of every tensor per spill).
    fn make_room(&self, st: &mut State, need: u64, keep: &str) -> Result<()> {
        let mut used = Self::used(st, Tier::Host);
        if used + need <= self.host_budget {
            return Ok(());
        }
        if self.policy == Eviction::Error {
            return Err(ScopeError::Refused(format!(
                "host tier over budget: {used} bytes used + {need} requested > {} (eviction policy `error`)",
                self.host_budget
            )));
        }
        if need > self.host_budget {
            return Err(ScopeError::Refused(format!(
                "host tier over budget: {need} bytes requested, more than the whole {}-byte budget (nothing was spilled)",
                self.host_budget
            )));
        }
        let mut victims: Vec<(u64, String, u64)> = st
            .entries
            .iter()
            .filter(|(n, e)| n.as_str() != keep && matches!(e.place, Place::Host(_)))
            .map(|(n, e)| (e.last_use, n.clone(), e.bytes))
            .collect();
        victims.sort_unstable();
        for (_, v, bytes) in victims {
            if used + need <= self.host_budget {
                return Ok(());
            }
            self.spill_locked(st, &v)?;
            used -= bytes;
        }
        if used + need <= self.host_budget {
            return Ok(());
        }
        Err(ScopeError::Refused(format!(
            "host tier over budget: {need} bytes requested, {} budget, and nothing left to evict",
            self.host_budget
        )))
    }

    fn spill_locked(&self, st: &mut State, name: &str) -> Result<()> {
        let disk_used = Self::used(st, Tier::Disk);
        let Some(e) = st.entries.get(name) else {
            return Err(ScopeError::Refused(format!("no tensor `{name}` in this scope")));
        };
        let Place::Host(t) = &e.place else { return Ok(()) };
        if disk_used + e.bytes > self.disk_budget {
            return Err(ScopeError::Refused(format!(
                "disk tier over budget: spilling `{name}` ({} bytes) onto {disk_used} used > {}",
                e.bytes, self.disk_budget
            )));
        }
        let spilled = self.store.spill(name, &t.view()).map_err(ScopeError::from)?;
        if let Some(e) = st.entries.get_mut(name) {
            e.place = Place::Disk(spilled);
            e.owns_file = true;
        }
        st.spills += 1;
        Ok(())
    }

    /// Add a tensor to the host tier under a name.
    pub fn add(&self, name: &str, t: Tensor) -> Result<TensorHandle> {
        let mut st = self.lock();
        if st.entries.contains_key(name) {
            return Err(ScopeError::Refused(format!("a tensor named `{name}` is already in this scope")));
        }
        let bytes = tensor_bytes(&t);
        self.make_room(&mut st, bytes, name)?;
        st.clock += 1;
        let clock = st.clock;
        st.entries.insert(name.to_string(), Entry { place: Place::Host(Arc::new(t)), bytes, last_use: clock, owns_file: false });
        Ok(TensorHandle { name: name.to_string() })
    }

    /// The tensor, brought back to the host tier if it was spilled.
    pub fn get(&self, h: &TensorHandle) -> Result<Arc<Tensor>> {
        let mut st = self.lock();
        st.clock += 1;
        let clock = st.clock;
        let (bytes, spilled) = match st.entries.get_mut(&h.name) {
            None => return Err(ScopeError::Refused(format!("no tensor `{}` in this scope", h.name))),
            Some(e) => {
                e.last_use = clock;
                match &e.place {
                    Place::Host(t) => return Ok(t.clone()),
                    Place::Disk(s) => (e.bytes, s.clone()),
                }
            }
        };
        self.make_room(&mut st, bytes, &h.name)?;
        let t = Arc::new(spilled.load().map_err(ScopeError::from)?);
        let mut owned = false;
        if let Some(e) = st.entries.get_mut(&h.name) {
            e.place = Place::Host(t.clone());
            owned = e.owns_file;
        }
        st.reloads += 1;
        // A file this scope spilled goes once the tensor is back on the
        // host: the disk tier no longer counts it (a restored snapshot's
        // member is the snapshot's, and stays). Were the removal to fail,
        // the reload still stands; the entry keeps owning the file, and
        // `remove` tries again (and reports a failure).
        if owned && self.store.remove(&h.name).is_ok() {
            if let Some(e) = st.entries.get_mut(&h.name) {
                e.owns_file = false;
            }
        }
        Ok(t)
    }

    /// Move a tensor to disk now (it stays usable through its handle).
    pub fn spill(&self, h: &TensorHandle) -> Result<()> {
        let mut st = self.lock();
        self.spill_locked(&mut st, &h.name)
    }

    /// Where a tensor lives.
    pub fn tier(&self, h: &TensorHandle) -> Option<Tier> {
        self.lock().entries.get(&h.name).map(|e| e.place.tier())
    }

    /// Drop a tensor from the scope (and its spilled file).
    pub fn remove(&self, h: &TensorHandle) -> Result<()> {
        let mut st = self.lock();
        if let Some(Entry { owns_file: true, .. }) = st.entries.remove(&h.name) {
            self.store.remove(&h.name).map_err(ScopeError::from)?;
        }
        Ok(())
    }

    /// Save the value of every tensor of the scope, wherever it lives, as
    /// snapshot `name` of the scope's store (see
    /// [`TensorStore::save_snapshot`]: a save over an older snapshot of that
    /// name replaces it only once complete). Spilled tensors are checked,
    /// then written from their file mapping, not read into memory; nothing
    /// moves between tiers.
    pub fn snapshot(&self, name: &str) -> Result<Snapshot> {
        let st = self.lock();
        enum Value {
            Host(Arc<Tensor>),
            Disk(crate::tensor_store::MappedTensor),
        }
        let mut values: Vec<(&str, Value)> = Vec::with_capacity(st.entries.len());
        // Host tensors are shared; spilled ones are checked against their
        // checksum, then mapped (not read into memory all at once).
        for (n, e) in &st.entries {
            let v = match &e.place {
                Place::Host(t) => Value::Host(t.clone()),
                Place::Disk(s) => {
                    let err = |er: TensorStoreError| ScopeError::Refused(format!("snapshot `{name}`: {er}"));
                    let m = s.view_mapped().map_err(err)?;
                    m.verify().map_err(err)?;
                    Value::Disk(m)
                }
            };
            values.push((n.as_str(), v));
        }
        let views: Vec<(&str, tiga_runtime::TensorView<'_>)> = values
            .iter()
            .map(|(n, v)| match v {
                Value::Host(t) => (*n, t.view()),
                Value::Disk(m) => (*n, m.view()),
            })
            .collect();
        self.store.save_snapshot(name, &views).map_err(|e| ScopeError::Refused(format!("snapshot `{name}`: {e}")))
    }

    /// Bring snapshot `name` of the scope's store into the scope, lazily:
    /// each member becomes a tensor of the same name in the disk tier,
    /// read (and its checksum checked) when first used. Refused, before
    /// anything is added, when a name is already in the scope or the disk
    /// tier cannot hold the members.
    pub fn restore_snapshot(&self, name: &str) -> Result<Vec<TensorHandle>> {
        let snap = self.store.open_snapshot(name).map_err(ScopeError::from)?;
        let mut st = self.lock();
        if let Some(dup) = snap.names().find(|n| st.entries.contains_key(*n)) {
            return Err(ScopeError::Refused(format!(
                "restoring snapshot `{name}`: a tensor named `{dup}` is already in this scope"
            )));
        }
        let bytes: u64 = snap.members().iter().map(|(_, t)| t.byte_len()).sum();
        let disk_used = Self::used(&st, Tier::Disk);
        if disk_used + bytes > self.disk_budget {
            return Err(ScopeError::Refused(format!(
                "disk tier over budget: restoring snapshot `{name}` ({bytes} bytes) onto {disk_used} used > {}",
                self.disk_budget
            )));
        }
        let mut handles = Vec::with_capacity(snap.len());
        for (n, t) in snap.members() {
            st.clock += 1;
            let clock = st.clock;
            let bytes = t.byte_len();
            st.entries.insert(n.clone(), Entry { place: Place::Disk(t.clone()), bytes, last_use: clock, owns_file: false });
            handles.push(TensorHandle { name: n.clone() });
        }
        Ok(handles)
    }

    pub fn memory_report(&self) -> MemoryReport {
        let st = self.lock();
        MemoryReport {
            host_budget: self.host_budget,
            disk_budget: self.disk_budget,
            host_used: Self::used(&st, Tier::Host),
            disk_used: Self::used(&st, Tier::Disk),
            spills: st.spills,
            reloads: st.reloads,
            entries: st
                .entries
                .iter()
                .map(|(n, e)| ReportEntry { name: n.clone(), tier: e.place.tier(), bytes: e.bytes })
                .collect(),
        }
    }
}
