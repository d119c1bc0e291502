//! Embeddings: a two-dimensional partitioned tensor trained with sparse
//! optimizers, as WholeGraph's embeddings are.
//!
//! A training step on rank r is: [`Embedding::gather`] the rows of its
//! batch (any rows, from any rank), compute, [`Embedding::accumulate`] the
//! gradients of those rows, and [`Embedding::step`] (collective). The step
//! sends each gradient row to the rank that owns the row
//! (`partitioned::topology`'s two-level route), where the gradients of one
//! row are summed in (writing rank, position) order — the batch order
//! when each rank holds a contiguous block of the batch — whatever order
//! the messages arrived in; the optimizer ([`Optimizer`]) then updates
//! each touched row once, and only those. So the table after a step does
//! not depend on timing, on the memory type, on the cache, or on how many
//! ranks share the batch in blocks: every such run gives the same bits.
//!
//! Optimizer states are partitioned tensors beside the table (same rows
//! per rank), saved and loaded with it: `{prefix}.npy` and
//! `{prefix}.{state}.npy` as whole files, or `{prefix}_part_{r}_of_{R}.npy`
//! and `{prefix}.{state}_part_{r}_of_{R}.npy` per rank.
//!
//! The table may carry a node cache (`partitioned::CachePolicy`); a
//! read-write cache is written back at each step (each updated row goes to
//! the nodes whose caches hold it), so gathers read the same bits with and
//! without it.

mod optimizer;

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

pub use optimizer::{Optimizer, StateSpec};

use crate::comm::Communicator;
use crate::partitioned::{Options, PartitionedError, PartitionedTensor};
use tiga_runtime::element::{bytes_of, bytes_of_mut, Float};

/// An embedding table of `T` (f32 or f64) rows and its optimizer's states
/// (module doc).
#[derive(Debug)]
pub struct Embedding<T: Float> {
    table: PartitionedTensor,
    optimizer: Optimizer,
    states: Vec<(StateSpec, PartitionedTensor)>,
    /// Gradients accumulated since the last step: root rows and their
    /// gradient rows, in accumulation order.
    rows: Vec<usize>,
    grads: Vec<T>,
    _t: PhantomData<T>,
}

/// What a step did on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepStats {
    /// Gradient rows this rank sent into the step.
    pub sent: usize,
    /// Distinct rows it owns that the step updated.
    pub updated: usize,
}

impl<T: Float> Embedding<T> {
    /// A zeroed `rows` × `dim` table over the ranks of `comm`, with
    /// `optimizer`'s states beside it (collective).
    pub fn new(
        comm: &dyn Communicator,
        rows: usize,
        dim: usize,
        options: &Options,
        optimizer: Optimizer,
    ) -> Result<Embedding<T>, PartitionedError> {
        let table = PartitionedTensor::new(comm, T::TYPE, &[rows, dim], options)?;
        let mut states = Vec::new();
        for spec in optimizer.states() {
            let t = table.new_beside(spec.dtype.unwrap_or(T::TYPE), &[rows, spec.width.unwrap_or(dim)])?;
            let init = optimizer.initial(spec.name);
            if init != 0.0 {
                fill_local(&t, init)?;
            }
            states.push((*spec, t));
        }
        Ok(Embedding { table, optimizer, states, rows: Vec::new(), grads: Vec::new(), _t: PhantomData })
    }

    pub fn table(&self) -> &PartitionedTensor {
        &self.table
    }

    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// The optimizer state named `name` (`state_sum`, `m`, `v`,
    /// `beta_powers`).
    pub fn state(&self, name: &str) -> Option<&PartitionedTensor> {
        self.states.iter().find(|(s, _)| s.name == name).map(|(_, t)| t)
    }

    pub fn dim(&self) -> usize {
        self.table.shape()[1]
    }

    /// Rows `indices` of the table, in order (collective: see
    /// `PartitionedTensor::gather`).
    pub fn gather(&self, indices: &[i64]) -> Result<Vec<T>, PartitionedError> {
        self.table.gather(indices)
    }

    /// Add the gradients `grads` (one row per index) of rows `indices` to
    /// the next step. Not collective; an index out of range is an error
    /// and adds nothing.
    pub fn accumulate(&mut self, indices: &[i64], grads: &[T]) -> Result<(), PartitionedError> {
        let d = self.dim();
        if grads.len() != indices.len() * d {
            return Err(PartitionedError::WrongLength { what: "gradient rows", expected: indices.len() * d, got: grads.len() });
        }
        let rows = self.table.root_rows(indices)?;
        self.rows.extend(rows);
        self.grads.extend_from_slice(grads);
        Ok(())
    }

    /// Apply the accumulated gradients with learning rate `lr`, and clear
    /// them, whether the step succeeded or not (collective; module doc).
    pub fn step(&mut self, lr: f64) -> Result<StepStats, PartitionedError> {
        let result = self.apply(lr);
        // Cleared, not dropped: fresh pages for the next step's gradients
        // cost more than the step's arithmetic.
        self.rows.clear();
        self.grads.clear();
        result
    }

    fn apply(&self, lr: f64) -> Result<StepStats, PartitionedError> {
        let d = self.dim();
        let sent = self.rows.len();
        let mine = self.table.route_writes(&self.rows, bytes_of(&self.grads))?;
        let mut updated: Vec<usize> = Vec::new();
        let mut g = vec![0.0f64; d];
        let mut w = vec![0.0f64; d];
        let mut one = vec![T::default(); d];
        let mut states: Vec<Vec<f64>> = self.states.iter().map(|(_, t)| vec![0.0; t.row_len()]).collect();
        let mut at = 0;
        while at < mine.keys.len() {
            let row = mine.keys[at].row as usize;
            // The row's gradients, summed in (rank, position) order.
            let mut first = true;
            while at < mine.keys.len() && mine.keys[at].row as usize == row {
                // The payload is `d` elements (route_writes cut records of
                // that size); copy it out to read it aligned.
                bytes_of_mut(&mut one).copy_from_slice(mine.payload(at));
                for (gj, x) in g.iter_mut().zip(&one) {
                    *gj = if first { x.to_f64() } else { *gj + x.to_f64() };
                }
                first = false;
                at += 1;
            }
            self.update_row(row, lr, &mut w, &mut g, &mut states)?;
            updated.push(row);
        }
        self.table.after_write(&updated)?;
        for (_, t) in &self.states {
            t.after_write(&[])?;
        }
        Ok(StepStats { sent, updated: updated.len() })
    }

    /// Read row `row` (owned here) and its states, update, write back.
    fn update_row(
        &self,
        row: usize,
        lr: f64,
        w: &mut [f64],
        g: &mut [f64],
        states: &mut [Vec<f64>],
    ) -> Result<(), PartitionedError> {
        let not_here =
            || PartitionedError::Mismatch(format!("row {row} reached rank {}, which does not own it", self.table.rank()));
        copy_f64_row(&self.table, row, w, true).ok_or_else(not_here)?;
        for ((_, t), s) in self.states.iter().zip(states.iter_mut()) {
            copy_f64_row(t, row, s, true).ok_or_else(not_here)?;
        }
        self.optimizer.update_row(lr, w, g, states);
        copy_f64_row(&self.table, row, w, false).ok_or_else(not_here)?;
        for ((_, t), s) in self.states.iter().zip(states.iter_mut()) {
            copy_f64_row(t, row, s, false).ok_or_else(not_here)?;
        }
        Ok(())
    }

    /// Run `f` on the table with `{prefix}{ext}` and on each state with
    /// `{prefix}.{state}{ext}`.
    fn each_file(
        &self,
        prefix: &Path,
        ext: &str,
        f: impl Fn(&PartitionedTensor, &Path) -> Result<(), PartitionedError>,
    ) -> Result<(), PartitionedError> {
        f(&self.table, &with_suffix(prefix, ext))?;
        for (s, t) in &self.states {
            f(t, &with_suffix(prefix, &format!(".{}{ext}", s.name)))?;
        }
        Ok(())
    }

    /// Write the table to `{prefix}.npy` and each state to
    /// `{prefix}.{state}.npy` (collective; crash-safe files).
    pub fn store_npy(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.each_file(prefix.as_ref(), ".npy", |t, p| t.store_npy(p))
    }

    /// Read what [`Embedding::store_npy`] wrote (collective).
    pub fn load_npy(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.each_file(prefix.as_ref(), ".npy", |t, p| t.load_npy(p))
    }

    /// Write the table and the states per rank (collective).
    pub fn store_per_rank(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.each_file(prefix.as_ref(), "", |t, p| t.store_per_rank(p))
    }

    /// Read what [`Embedding::store_per_rank`] wrote (collective).
    pub fn load_per_rank(&self, prefix: impl AsRef<Path>) -> Result<(), PartitionedError> {
        self.each_file(prefix.as_ref(), "", |t, p| t.load_per_rank(p))
    }
}

/// `prefix` with `suffix` appended to its last component.
fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut p = prefix.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Set every element of this rank's rows of `t` (a float state) to `x`
/// (collective).
fn fill_local(t: &PartitionedTensor, x: f64) -> Result<(), PartitionedError> {
    match t.dtype() {
        tiga_runtime::ElementType::F32 => {
            t.with_local_mut::<f32, _>(|mut v| (0..v.rows()).for_each(|i| v.row_mut(i).fill(x as f32)))
        }
        _ => t.with_local_mut::<f64, _>(|mut v| (0..v.rows()).for_each(|i| v.row_mut(i).fill(x))),
    }
}

/// Copy between this rank's own row `row` of the float tensor `t` and
/// `vals` as f64: into `vals` when `read`, else out of it (rounded to the
/// tensor's type). Inside a collective step only.
fn copy_f64_row(t: &PartitionedTensor, row: usize, vals: &mut [f64], read: bool) -> Option<()> {
    fn copy<E: Float>(p: *mut u8, vals: &mut [f64], read: bool) {
        // SAFETY: an own row of `vals.len()` elements of E (stored_row
        // found it in this rank's segment; aligned: segments of whole rows
        // from an aligned base), written only by this rank inside the
        // collective step, which every reader passes a fence after.
        let row = unsafe { std::slice::from_raw_parts_mut(p as *mut E, vals.len()) };
        for (e, v) in row.iter_mut().zip(vals) {
            if read {
                *v = e.to_f64();
            } else {
                *e = E::from_f64(*v);
            }
        }
    }
    let p = t.stored_row(row)?;
    match t.dtype() {
        tiga_runtime::ElementType::F32 => copy::<f32>(p, vals, read),
        _ => copy::<f64>(p, vals, read),
    }
    Some(())
}
