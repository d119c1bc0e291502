//! Value snapshots: a set of named tensors saved together under one name in
//! a [`TensorStore`], and opened again lazily (only headers are read; each
//! tensor's data is read, and its checksum checked, when it is loaded or
//! mapped).
//!
//! Layout in the store's directory: the manifest `NAME.snapshot` (text, see
//! below) and one spilled tensor per member, stored under the tensor name
//! `NAME@GEN@MEMBER`, where `GEN` is the snapshot's generation (1 for the
//! first save, one more for each save over it). A save writes the new
//! generation's tensors first, then replaces the manifest atomically (temp
//! file, fsync, rename), then removes the older generations' files. So an
//! interrupted save leaves the previous snapshot whole (its manifest still
//! names its own generation, whose files were not touched); the orphaned
//! files of the interrupted generation are removed by the next save.
//!
//! The manifest:
//!
//! ```text
//! tiga-snapshot 1
//! generation 3
//! tensor 1a2b3c4d weights
//! tensor 00ff00ff bias
//! ```
//!
//! One `tensor` line per member, in save order: the CRC-32 of its data (as
//! its spilled file's header records it, so a swapped or rewritten file is
//! refused on open) and its name (the rest of the line).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::tensor_store::{validate_tensor_name, SpilledTensor, TensorStore, TensorStoreError};
use tiga_runtime::tensor::TensorView;

type Result<T> = std::result::Result<T, TensorStoreError>;

const MAGIC_LINE: &str = "tiga-snapshot 1";
/// A manifest's file extension.
pub const SNAPSHOT_EXT: &str = "snapshot";

/// A snapshot opened from a store: its members as lazily read tensors.
#[derive(Debug, Clone)]
pub struct Snapshot {
    name: String,
    generation: u64,
    members: Vec<(String, SpilledTensor)>,
}

impl Snapshot {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many times a snapshot of this name has been saved.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Member names, in save order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(n, _)| n.as_str())
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The member `name`, still on disk (`load` reads it, `view_mapped`
    /// maps it).
    pub fn get(&self, name: &str) -> Result<&SpilledTensor> {
        self.members.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or_else(|| TensorStoreError::Missing {
            name: name.to_string(),
            dir: format!("snapshot `{}`", self.name),
            available: format!("it holds: {}", self.names().collect::<Vec<_>>().join(", ")),
        })
    }

    /// Members with their tensors, in save order.
    pub fn members(&self) -> &[(String, SpilledTensor)] {
        &self.members
    }
}

fn bad_name(name: &str, why: &'static str) -> TensorStoreError {
    TensorStoreError::BadName { name: name.to_string(), why }
}

/// The store name of member `member` of generation `generation`.
fn member_key(snapshot: &str, generation: u64, member: &str) -> String {
    format!("{snapshot}@{generation}@{member}")
}

/// A manifest's generation and its members (name, CRC-32).
type Listing = (u64, Vec<(String, u32)>);

impl TensorStore {
    fn manifest_path(&self, name: &str) -> Result<PathBuf> {
        validate_tensor_name(name)?;
        if name.contains('@') {
            return Err(bad_name(name, "a snapshot name cannot contain `@`"));
        }
        Ok(self.dir().join(format!("{name}.{SNAPSHOT_EXT}")))
    }

    /// Saves `tensors` as snapshot `name`, replacing a snapshot of that name
    /// only once the new one is complete (see the module's notes), and
    /// returns it opened.
    pub fn save_snapshot(&self, name: &str, tensors: &[(&str, TensorView<'_>)]) -> Result<Snapshot> {
        let manifest = self.manifest_path(name)?;
        for (i, (m, _)) in tensors.iter().enumerate() {
            validate_tensor_name(m)?;
            if tensors[..i].iter().any(|(o, _)| o == m) {
                return Err(bad_name(m, "it is given twice in one snapshot"));
            }
            // Checked here, before anything is written.
            validate_tensor_name(&member_key(name, u64::MAX, m))?;
        }
        let generation = match self.read_manifest(&manifest) {
            Ok(Some((g, _))) => g + 1,
            Ok(None) => 1,
            // A damaged manifest is replaced: its generation is unknown, so
            // the new one starts past every generation on disk.
            Err(_) => self.generations_on_disk(name)?.into_iter().max().unwrap_or(0) + 1,
        };
        let mut members = Vec::with_capacity(tensors.len());
        for (m, t) in tensors {
            let spilled = self.spill(&member_key(name, generation, m), t)?;
            members.push((m.to_string(), spilled));
        }
        let mut text = format!("{MAGIC_LINE}\ngeneration {generation}\n");
        for (m, t) in &members {
            text.push_str(&format!("tensor {:08x} {m}\n", t.crc32()));
        }
        let io = |source| TensorStoreError::Io { path: manifest.display().to_string(), source };
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}.{SNAPSHOT_EXT}."))
            .suffix(".tmp")
            .tempfile_in(self.dir())
            .map_err(io)?;
        tmp.write_all(text.as_bytes()).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(&manifest).map_err(|e| io(e.error))?;
        if let Ok(d) = std::fs::File::open(self.dir()) {
            let _ = d.sync_all();
        }
        // The new snapshot is committed; older generations' files (and an
        // interrupted save's) go.
        self.remove_members(name, Some(generation))?;
        Ok(Snapshot { name: name.to_string(), generation, members })
    }

    /// Opens snapshot `name`: reads its manifest and each member's header
    /// (not the data), and checks that each member file is the one saved.
    pub fn open_snapshot(&self, name: &str) -> Result<Snapshot> {
        let manifest = self.manifest_path(name)?;
        let (generation, listed) = self.read_manifest(&manifest)?.ok_or_else(|| self.missing_snapshot(name))?;
        let mut members = Vec::with_capacity(listed.len());
        for (m, crc) in listed {
            let t = self.reattach_lazy(&member_key(name, generation, &m)).map_err(|e| match e {
                TensorStoreError::Missing { .. } => TensorStoreError::Corrupt {
                    path: manifest.display().to_string(),
                    message: format!("member `{m}` of generation {generation} is missing from the store"),
                },
                other => other,
            })?;
            if t.crc32() != crc {
                return Err(TensorStoreError::Changed {
                    path: t.path().display().to_string(),
                    message: format!(
                        "snapshot `{name}` recorded crc32 {crc:08x} for member `{m}`, the file holds {:08x}",
                        t.crc32()
                    ),
                });
            }
            members.push((m, t));
        }
        Ok(Snapshot { name: name.to_string(), generation, members })
    }

    /// Snapshot names in this store, sorted.
    pub fn snapshots(&self) -> Result<Vec<String>> {
        self.files_named(SNAPSHOT_EXT, |n| self.manifest_path(n).is_ok())
    }

    /// Removes snapshot `name`: its manifest first (so it is gone at once),
    /// then its members' files.
    pub fn remove_snapshot(&self, name: &str) -> Result<()> {
        let manifest = self.manifest_path(name)?;
        match std::fs::remove_file(&manifest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(self.missing_snapshot(name)),
            Err(source) => return Err(TensorStoreError::Io { path: manifest.display().to_string(), source }),
        }
        self.remove_members(name, None)
    }

    fn missing_snapshot(&self, name: &str) -> TensorStoreError {
        let available = match self.snapshots() {
            Ok(s) if s.is_empty() => "the store holds no snapshot".to_string(),
            Ok(s) => format!("it holds snapshots: {}", s.join(", ")),
            Err(e) => format!("cannot list it: {e}"),
        };
        TensorStoreError::Missing { name: name.to_string(), dir: self.dir().display().to_string(), available }
    }

    /// The manifest's generation and members; `None` when there is none.
    fn read_manifest(&self, path: &Path) -> Result<Option<Listing>> {
        let text = match std::fs::read(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(TensorStoreError::Io { path: path.display().to_string(), source }),
        };
        let corrupt = |message: String| TensorStoreError::Corrupt { path: path.display().to_string(), message };
        let text = String::from_utf8(text).map_err(|_| corrupt("the manifest is not UTF-8 text".into()))?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC_LINE) {
            return Err(corrupt(format!("the manifest does not start with `{MAGIC_LINE}`")));
        }
        let generation = lines
            .next()
            .and_then(|l| l.strip_prefix("generation "))
            .and_then(|g| g.trim().parse::<u64>().ok())
            .ok_or_else(|| corrupt("line 2 is not `generation N`".into()))?;
        let mut members: Vec<(String, u32)> = Vec::new();
        for (i, line) in lines.enumerate() {
            let lineno = i + 3;
            let rest = line.strip_prefix("tensor ").ok_or_else(|| corrupt(format!("line {lineno} is not `tensor CRC NAME`")))?;
            let (crc, m) = rest.split_once(' ').ok_or_else(|| corrupt(format!("line {lineno} has no tensor name")))?;
            let crc = u32::from_str_radix(crc, 16).map_err(|_| corrupt(format!("line {lineno}: `{crc}` is not a hex crc32")))?;
            validate_tensor_name(m).map_err(|e| corrupt(format!("line {lineno}: {e}")))?;
            if members.iter().any(|(o, _)| o == m) {
                return Err(corrupt(format!("line {lineno}: member `{m}` is listed twice")));
            }
            members.push((m.to_string(), crc));
        }
        Ok(Some((generation, members)))
    }

    /// Member files of snapshot `name` in the store, with their generation.
    fn members_on_disk(&self, name: &str) -> Result<Vec<(u64, String)>> {
        let prefix = format!("{name}@");
        Ok(self
            .names()?
            .into_iter()
            .filter_map(|n| {
                let g = n.strip_prefix(&prefix)?.split_once('@')?.0.parse().ok()?;
                Some((g, n))
            })
            .collect())
    }

    /// Generations that have member files in the store.
    fn generations_on_disk(&self, name: &str) -> Result<Vec<u64>> {
        let mut gens: Vec<u64> = self.members_on_disk(name)?.into_iter().map(|(g, _)| g).collect();
        gens.sort_unstable();
        gens.dedup();
        Ok(gens)
    }

    /// Removes every member file of snapshot `name` but those of generation
    /// `keep`, listing the store once. A file that cannot be removed stays,
    /// harmless: no manifest names it.
    fn remove_members(&self, name: &str, keep: Option<u64>) -> Result<()> {
        for (g, n) in self.members_on_disk(name)? {
            if Some(g) != keep {
                let _ = std::fs::remove_file(self.path_of(&n)?);
            }
        }
        Ok(())
    }
}
