//! Partitioned tensors to and from `.npy` files.
//!
//! - one file of the whole tensor: each rank reads its own rows of it
//!   ([`PartitionedTensor::load_npy`]); rank 0 writes it, the rows of the
//!   other ranks arriving as messages in bounded rounds
//!   ([`PartitionedTensor::store_npy`]);
//! - one file per rank, named `{prefix}_part_{r}_of_{R}.npy` as WholeGraph
//!   names them, each holding its rank's rows
//!   ([`PartitionedTensor::store_per_rank`], [`PartitionedTensor::load_per_rank`]);
//!   loading needs the same number of ranks and the same split.
//!
//! Files are written as every `.npy` of tiga is (temporary file, fsync,
//! rename, directory fsync: `tiga_storage::npy::NpyWriter`), so a crash leaves
//! the old file or the new one. Every operation is agreed: when any
//! rank's file fails, every rank returns an error (that rank's own error
//! on that rank, [`PartitionedError::PeerFailed`] naming it elsewhere),
//! and loading empties the caches.

use std::path::Path;

use super::error::{agree, PartitionedError};
use super::layout::part_path;
use super::PartitionedTensor;
use tiga_storage::npy::{NpyFile, NpyWriter};

/// Bytes of rows one round of [`PartitionedTensor::store_npy`] moves to
/// rank 0 (about; at least one row).
const ROUND_BYTES: usize = 64 << 20;

impl PartitionedTensor {
    fn require_root(&self, what: &str) -> Result<(), PartitionedError> {
        if self.is_root() {
            Ok(())
        } else {
            Err(PartitionedError::NotAvailable(format!("{what} works on a whole tensor, not a sub-tensor")))
        }
    }

    /// Run `f` on this rank's own bytes, writable (the caller is inside a
    /// collective write of its own rows).
    fn with_own_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let (p, len) = self.root.store.own();
        if len == 0 {
            return f(&mut []);
        }
        // SAFETY: this rank's segment, `len` bytes, written only by this
        // rank, during a collective load that every reader passes a fence
        // after; the borrow ends with `f`.
        f(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    fn own_bytes(&self) -> &[u8] {
        let (p, len) = self.root.store.own();
        if len == 0 {
            return &[];
        }
        // SAFETY: this rank's segment, `len` bytes, not written while a
        // collective store runs (every rank is in it).
        unsafe { std::slice::from_raw_parts(p, len) }
    }

    /// Check that a file's element type and shape are what this rank's
    /// part needs (`rows` rows, the root's trailing shape).
    fn check_file(&self, f: &NpyFile, path: &Path, rows: usize) -> Result<(), PartitionedError> {
        let mut want = self.root.shape.clone();
        want[0] = rows;
        if f.dtype() != self.root.dtype || f.shape() != want.as_slice() {
            return Err(PartitionedError::File {
                path: path.display().to_string(),
                message: format!(
                    "holds {} {:?}, but this tensor's part needs {} {want:?}",
                    f.dtype(),
                    f.shape(),
                    self.root.dtype
                ),
            });
        }
        Ok(())
    }

    /// Fill the tensor from one `.npy` of its whole shape and type: each
    /// rank reads its own rows (collective, agreed; caches emptied).
    pub fn load_npy(&self, path: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.require_root("load_npy")?;
        let path = path.as_ref();
        self.load_with(|t| {
            let mut f = NpyFile::open(path)?;
            t.check_file(&f, path, t.root.shape[0])?;
            let start = t.root.layout.rows_of(t.rank()).start;
            t.with_own_mut(|b| f.read_rows(start, b)).map_err(Into::into)
        })
    }

    /// Fill the tensor from per-rank files `{prefix}_part_{r}_of_{R}.npy`,
    /// each holding its rank's rows (collective, agreed).
    pub fn load_per_rank(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.require_root("load_per_rank")?;
        let path = part_path(prefix.as_ref(), self.rank(), self.ranks());
        self.load_with(|t| {
            let mut f = NpyFile::open(&path)?;
            t.check_file(&f, &path, t.local_rows().len())?;
            t.with_own_mut(|b| f.read_rows(0, b)).map_err(Into::into)
        })
    }

    /// A collective load: a fence so that no rank still reads, `read`, a
    /// fence so that every rank sees the rows, the verdicts agreed, the
    /// caches emptied.
    fn load_with(&self, read: impl FnOnce(&Self) -> Result<(), PartitionedError>) -> Result<(), PartitionedError> {
        let topo = &self.root.topo;
        self.root.store.fence(topo.store.as_ref())?;
        let local = read(self);
        self.root.store.fence(topo.store.as_ref())?;
        let out = agree(topo.world.as_ref(), local);
        self.drop_all_cache()?;
        out
    }

    /// Write this rank's rows to `{prefix}_part_{r}_of_{R}.npy`
    /// (collective, agreed).
    pub fn store_per_rank(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.require_root("store_per_rank")?;
        let path = part_path(prefix.as_ref(), self.rank(), self.ranks());
        let mut shape = self.root.shape.clone();
        shape[0] = self.local_rows().len();
        let local = NpyWriter::create(&path, self.root.dtype, &shape)
            .and_then(|mut w| w.write(self.own_bytes()).and_then(|_| w.finish()))
            .map_err(Into::into);
        agree(self.root.topo.world.as_ref(), local)
    }

    /// Write the whole tensor to one `.npy` at `path`, from rank 0
    /// (collective, agreed). Rows reach rank 0 in rounds of about 64 MiB,
    /// so no rank holds more than its rows and a round.
    pub fn store_npy(&self, path: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.require_root("store_npy")?;
        let path = path.as_ref();
        let root = &self.root;
        let world = root.topo.world.as_ref();
        let (me, n) = (self.rank(), self.ranks());
        let rb = root.row_bytes;
        let mut writer = if me == 0 { Some(NpyWriter::create(path, root.dtype, &root.shape)) } else { None };
        let per_round = (ROUND_BYTES / rb.max(1)).max(1);
        let total = root.layout.rows();
        let mine = root.layout.rows_of(me);
        let own = self.own_bytes();
        let mut start = 0;
        // Zero rows still take one round, so that every rank agrees on it.
        loop {
            let end = (start + per_round).min(total);
            let part = |r: usize| {
                let b = root.layout.rows_of(r);
                b.start.clamp(start, end)..b.end.clamp(start, end)
            };
            let my = part(me);
            let mut sends: Vec<Vec<u8>> = vec![Vec::new(); n];
            sends[0] = own[(my.start - mine.start) * rb..(my.end - mine.start) * rb].to_vec();
            let lens: Vec<usize> = (0..n).map(|r| if me == 0 { part(r).len() * rb } else { 0 }).collect();
            let got = world.all_to_all_v(sends, lens)?;
            if let Some(Ok(w)) = writer.as_mut() {
                for bytes in &got {
                    if let Err(e) = w.write(bytes) {
                        writer = Some(Err(e));
                        break;
                    }
                }
            }
            start = end;
            if start >= total {
                break;
            }
        }
        let local = match writer {
            Some(w) => w.and_then(NpyWriter::finish).map_err(Into::into),
            None => Ok(()),
        };
        agree(world, local)
    }
}
