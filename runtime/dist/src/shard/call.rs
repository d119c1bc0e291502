//! A call's values on one rank of a sharded graph: what the shard layer
//! contributes around the executor, which runs the local rows as it runs
//! any rows.
//!
//! On the way in ([`Sharded::localize`]), each field is taken in either
//! numbering, field by field: the whole array in the user's numbering (each
//! rank takes the rows it needs) or this rank's rows only, in the order of
//! [`Sharded::owned_src`], [`Sharded::owned_dst`] or
//! [`Sharded::owned_edges`]. Source fields are laid over the slots (owned
//! rows now, ghosts' by the exchange, [`LocalCall::exchange`]).
//!
//! On the way out, outputs and gradients come back in owned order
//! ([`Sharded::owned_outputs`], [`Sharded::owned_gradients`]): a ghost's
//! source gradient goes home and is added by its owner in rank order, and
//! parameter outputs and gradients are all-reduced in rank order, so every
//! rank holds the same bits.

use std::ops::Range;

use tiga_runtime::fields::{Input, Inputs};
use tiga_runtime::{Data, DataMut, FieldRole, Role, Tensor, TensorView};

use super::{take_rows, take_rows_into, take_rows_padded, ShardError, Sharded};

type Result<T> = std::result::Result<T, ShardError>;

/// A call's fields on this rank: source fields over the slots (owned rows
/// filled, ghosts to come), destination fields over the local rows, edge
/// fields over the local edges, parameters as given.
pub struct LocalCall<'a> {
    /// (name, tensor) of each source field, in the order given.
    pub src: Vec<(String, Tensor)>,
    /// Destination fields of a deep halo, over the slots (their ghost rows
    /// come with the exchange, then are taken as rows).
    dst_slots: Vec<(String, Tensor)>,
    rest: Vec<(Role, String, Input<'a>)>,
}

fn leading(v: &TensorView<'_>, role: Role, name: &str) -> Result<usize> {
    v.shape().first().copied().ok_or_else(|| ShardError::ScalarField { role: role.name(), name: name.into() })
}

impl Sharded {
    /// `inputs` plus this rank's rows of the kernel's `fields` the call
    /// does not pass and the sharded graph's file stores.
    pub fn with_stored<'a>(&self, fields: impl Iterator<Item = (Role, String)>, inputs: &Inputs<'a>) -> Result<Inputs<'a>> {
        let mut all = inputs.clone();
        for (role, name) in fields {
            if inputs.has(role, &name) {
                continue;
            }
            let Some(stored) = FieldRole::of(role) else { continue };
            if let Some(t) = self.stored_owned(stored, &name) {
                all = all.with_role(role, &name, Input::Owned(t?));
            }
        }
        Ok(all)
    }

    /// `inputs` for this rank's local rows (see the module doc).
    pub fn localize<'a>(&self, inputs: &'a Inputs<'_>) -> Result<LocalCall<'a>> {
        let l = self.local();
        let deep = l.owned_rows < l.rows.len();
        let ghosts = l.slots.len() - l.owned_slots;
        let mut local = LocalCall { src: Vec::new(), dst_slots: Vec::new(), rest: Vec::new() };
        let rows_error = |role: Role, name: &str, got: usize, global: usize, owned: usize| ShardError::FieldRows {
            role: role.name(),
            name: name.into(),
            got,
            global,
            owned,
            rank: l.rank,
        };
        for (role, name, input) in &inputs.fields {
            let v = input.view();
            match role {
                Role::Src => {
                    let n = leading(&v, *role, name)?;
                    // Over the slots: owned rows now, ghosts' by the
                    // exchange (every ghost slot is some peer's to fill).
                    let mut shape = v.shape().to_vec();
                    shape[0] = l.slots.len();
                    let mut t = self.slot_buffer(v.dtype(), &shape)?;
                    if n == l.num_src {
                        take_rows_into(&mut t, v.data(), v.shape(), l.slots[..l.owned_slots].iter().map(|&u| u as usize))?
                    } else if n == l.owned_slots {
                        take_rows_into(&mut t, v.data(), v.shape(), 0..n)?
                    } else {
                        return Err(rows_error(*role, name, n, l.num_src, l.owned_slots));
                    };
                    local.src.push((name.clone(), t));
                }
                Role::Dst => {
                    let n = leading(&v, *role, name)?;
                    let t = if n == l.num_dst {
                        take_rows(v.data(), v.shape(), l.rows.iter().map(|&u| u as usize))?
                    } else if n == l.owned_rows && !deep {
                        // Owned local rows are in owned order.
                        v.to_tensor()
                    } else if n == l.owned_rows {
                        // A deep halo's ghost rows: exchanged as slots (a
                        // square graph's owned slots are its owned rows, in
                        // the same increasing order).
                        local.dst_slots.push((name.clone(), take_rows_padded(v.data(), v.shape(), 0..n, ghosts)?));
                        continue;
                    } else {
                        return Err(rows_error(*role, name, n, l.num_dst, l.owned_rows));
                    };
                    local.rest.push((*role, name.clone(), Input::Owned(t)));
                }
                Role::Edge => {
                    let n = leading(&v, *role, name)?;
                    let t = if n == l.num_edges {
                        take_rows(v.data(), v.shape(), l.edge_ids.iter().map(|&e| e as usize))?
                    } else if n == l.owned_edges && !deep {
                        match self.edge_positions() {
                            Some(pos) => take_rows(v.data(), v.shape(), pos.iter().map(|&p| p as usize))?,
                            None => v.to_tensor(),
                        }
                    } else if n == l.owned_edges {
                        return Err(ShardError::DeepEdgeField { name: name.clone(), rows: l.num_edges });
                    } else {
                        return Err(rows_error(*role, name, n, l.num_edges, l.owned_edges));
                    };
                    local.rest.push((*role, name.clone(), Input::Owned(t)));
                }
                Role::Param => local.rest.push((*role, name.clone(), Input::View(v))),
            }
        }
        Ok(local)
    }

    /// A local call's outputs (named, of these `roles`, in order) → this
    /// rank's owned rows and edges, in owned order; parameter outputs
    /// all-reduced.
    pub fn owned_outputs(&self, outs: Vec<(String, Tensor)>, roles: impl Iterator<Item = Role>) -> Result<Vec<(String, Tensor)>> {
        let l = self.local();
        let mut items = Vec::with_capacity(outs.len());
        for ((name, t), role) in outs.into_iter().zip(roles) {
            let t = match role {
                Role::Dst => owned_rows(t, l.owned_rows, None)?,
                Role::Edge => owned_rows(t, l.owned_edges, self.edge_positions())?,
                Role::Src | Role::Param => self.all_reduce(t)?,
            };
            items.push((name, t));
        }
        Ok(items)
    }

    /// A local backward's gradients → this rank's: source gradients over
    /// the slots sent home (ghosts' rows to their owners, who add the
    /// peers' parts in rank order after their own) and cut to the owned
    /// slots; destination and edge gradients in owned order; parameter
    /// gradients all-reduced.
    pub fn owned_gradients(&self, grads: Vec<(Role, String, Tensor)>) -> Result<Vec<(Role, String, Tensor)>> {
        let l = self.local();
        let mut items = grads;
        let src_idx: Vec<usize> = items.iter().enumerate().filter(|(_, (r, _, _))| *r == Role::Src).map(|(i, _)| i).collect();
        // Moved out (not copied) for the return, then cut to the owned slots.
        let mut src_grads: Vec<Tensor> =
            src_idx.iter().map(|&i| std::mem::replace(&mut items[i].2, Tensor::scalar_f32(0.0))).collect();
        self.return_ghosts(&mut src_grads)?;
        for (&i, g) in src_idx.iter().zip(src_grads) {
            items[i].2 = take_rows(g.data(), g.shape(), 0..l.owned_slots)?;
        }
        let mut out = Vec::with_capacity(items.len());
        for (role, name, t) in items {
            let t = match role {
                Role::Src => t,
                Role::Dst => owned_rows(t, l.owned_rows, None)?,
                Role::Edge => owned_rows(t, l.owned_edges, self.edge_positions())?,
                Role::Param => self.all_reduce(t)?,
            };
            out.push((role, name, t));
        }
        Ok(out)
    }

    /// The cotangent of output `name` (of `role`) over the local rows: the
    /// owned rows' and edges' from `v` (the whole array, or this rank's
    /// own in owned order), a deep halo's ghost rows zero (their outputs
    /// are their owners'); a parameter output's as given.
    pub fn local_cotangent(&self, role: Role, name: &str, v: &TensorView<'_>) -> Result<Tensor> {
        let l = self.local();
        match role {
            Role::Dst => local_rows(v, l.num_dst, &l.rows, l.owned_rows, None, name),
            Role::Edge => local_rows(v, l.num_edges, &l.edge_ids, l.owned_edges, self.edge_positions(), name),
            Role::Src | Role::Param => Ok(v.to_tensor()),
        }
    }

    /// How many leading values of the all-ones cotangent of a sum over
    /// every rank's rows this rank's output of `role` and `shape` takes:
    /// its owned rows or edges; a parameter output (summed over the ranks)
    /// counts once, on rank 0.
    pub fn ones_in_sum(&self, role: Role, shape: &[usize]) -> usize {
        let l = self.local();
        let w: usize = shape.iter().skip(1).product();
        match role {
            Role::Dst => l.owned_rows * w,
            Role::Edge => l.owned_edges * w,
            _ if self.rank() == 0 => shape.iter().product(),
            _ => 0,
        }
    }

    /// A parameter output or gradient summed over the ranks in rank order.
    fn all_reduce(&self, mut t: Tensor) -> Result<Tensor> {
        let comm = self.comm();
        match t.data_mut() {
            DataMut::F32(d) => comm.all_reduce_f32(d)?,
            DataMut::F64(d) => comm.all_reduce_f64(d)?,
            // Sharded calls refuse half-precision outputs up front.
            DataMut::F16(_) | DataMut::BF16(_) => return Err(ShardError::Half("a parameter output")),
        }
        Ok(t)
    }
}

impl<'a> LocalCall<'a> {
    /// The source fields, then a deep halo's destination fields, moved out
    /// (for the exchange; [`LocalCall::take_back`] returns them).
    fn take_slot_fields(&mut self) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.src.len() + self.dst_slots.len());
        for (_, t) in self.src.iter_mut().chain(self.dst_slots.iter_mut()) {
            let empty = Tensor::zeros(t.dtype(), vec![0]).map_err(|e| ShardError::Usage(e.to_string()))?;
            out.push(std::mem::replace(t, empty));
        }
        Ok(out)
    }

    /// Whether a deep halo's destination fields travel with the exchange.
    pub fn exchanges_dst(&self) -> bool {
        !self.dst_slots.is_empty()
    }

    /// Put the exchanged slot fields back, and a deep halo's destination
    /// fields as rows.
    fn take_back(&mut self, slot_fields: Vec<Tensor>, sh: &Sharded) -> Result<()> {
        let mut it = slot_fields.into_iter();
        for (_, t) in self.src.iter_mut() {
            *t = it.next().ok_or(ShardError::Lost("a halo field"))?;
        }
        let row_slot = sh.local().row_slot.clone().unwrap_or_default();
        for (name, _) in std::mem::take(&mut self.dst_slots) {
            let t = it.next().ok_or(ShardError::Lost("a halo field"))?;
            let rows = take_rows(t.data(), t.shape(), row_slot.iter().map(|&s| s as usize))?;
            self.rest.push((Role::Dst, name, Input::Owned(rows)));
        }
        Ok(())
    }

    /// Run the local rows with the exchange in flight: `run(inputs, runs,
    /// num_src)` runs first the interior runs (rows that read no ghost)
    /// with each source field cut to its `num_src` owned slots while the
    /// ghosts travel, then, once they are in, the boundary runs over every
    /// slot. The slot buffers go back to the shard's pool after. A deep
    /// halo's destination fields cannot overlap (their ghost rows come
    /// with the exchange): such a call runs [`LocalCall::exchange`] first.
    pub fn overlapped<E: From<ShardError>>(
        &mut self,
        sh: &Sharded,
        mut run: impl FnMut(&Inputs<'_>, &[Range<usize>], usize) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        if self.exchanges_dst() {
            return Err(ShardError::Usage("a deep halo's destination fields cannot overlap the exchange".into()).into());
        }
        let l = sh.local();
        let mut slot_fields = self.take_slot_fields()?;
        let halo = sh.start_halo(&slot_fields.iter().collect::<Vec<_>>())?;
        run(&self.inputs_with_src(&slot_fields, Some(l.owned_slots))?, &l.interior, l.owned_slots)?;
        halo.finish(sh, &mut slot_fields)?;
        run(&self.inputs_with_src(&slot_fields, None)?, &l.boundary, l.slots.len())?;
        for t in slot_fields {
            sh.recycle(t);
        }
        Ok(())
    }

    /// The whole exchange, waited for: ghosts' rows in, fields back in place.
    pub fn exchange(&mut self, sh: &Sharded) -> Result<()> {
        let mut slot_fields = self.take_slot_fields()?;
        sh.start_halo(&slot_fields.iter().collect::<Vec<_>>())?.finish(sh, &mut slot_fields)?;
        self.take_back(slot_fields, sh)
    }

    /// The local call's inputs, source fields from `self.src`.
    pub fn inputs(&self) -> Inputs<'_> {
        let mut ins = Inputs::new();
        for (name, t) in &self.src {
            ins = ins.with_role(Role::Src, name, t.view());
        }
        for (role, name, v) in &self.rest {
            ins = ins.with_role(*role, name, v.view());
        }
        ins
    }

    /// The local call's inputs with source fields from `slots` (in the
    /// order of `self.src`), each cut to its first `owned` rows if given.
    fn inputs_with_src<'s>(&'s self, slots: &'s [Tensor], owned: Option<usize>) -> Result<Inputs<'s>> {
        let mut ins = Inputs::new();
        for ((name, _), t) in self.src.iter().zip(slots) {
            let v = match owned {
                Some(n) => prefix_view(t, n)?,
                None => t.view(),
            };
            ins = ins.with_role(Role::Src, name, v);
        }
        for (role, name, v) in &self.rest {
            ins = ins.with_role(*role, name, v.view());
        }
        Ok(ins)
    }

    /// The slot buffers back to the shard's pool.
    pub fn recycle(self, sh: &Sharded) {
        for (_, t) in self.src {
            sh.recycle(t);
        }
    }
}

/// The first `rows` rows of `t`, borrowed.
fn prefix_view(t: &Tensor, rows: usize) -> Result<TensorView<'_>> {
    let mut shape = t.shape().to_vec();
    let w: usize = shape.iter().skip(1).product();
    shape[0] = rows;
    let v = match t.data() {
        Data::F32(d) => TensorView::from_slice_f32(shape, &d[..rows * w]),
        Data::F64(d) => TensorView::from_slice_f64(shape, &d[..rows * w]),
        Data::F16(d) => TensorView::new(shape, Data::F16(&d[..rows * w])),
        Data::BF16(d) => TensorView::new(shape, Data::BF16(&d[..rows * w])),
    };
    v.map_err(|e| ShardError::Usage(e.to_string()))
}

/// Rows `0..n` of `t` (local order) placed at `pos[i]` (owned order); with
/// no `pos` (local order is owned order), `t` itself when it has `n` rows.
fn owned_rows(t: Tensor, n: usize, pos: Option<&[u32]>) -> Result<Tensor> {
    let Some(pos) = pos else {
        return match t.shape().first() {
            Some(&rows) if rows == n => Ok(t),
            _ => take_rows(t.data(), t.shape(), 0..n),
        };
    };
    let mut inv = vec![0usize; n];
    for (i, &p) in pos.iter().enumerate().take(n) {
        inv[p as usize] = i;
    }
    take_rows(t.data(), t.shape(), inv.into_iter())
}

/// `src`'s rows written into `dst` at `slots[i]` for row i (an iterated
/// call's output becoming its node's slot).
pub fn copy_rows_to(src: &Tensor, dst: &mut Tensor, slots: &[u32]) -> Result<()> {
    let w: usize = src.shape().iter().skip(1).product();
    fn copy<T: Copy>(s: &[T], d: &mut [T], w: usize, slots: &[u32]) {
        for (i, &sl) in slots.iter().enumerate() {
            d[sl as usize * w..(sl as usize + 1) * w].copy_from_slice(&s[i * w..(i + 1) * w]);
        }
    }
    match (src.data(), dst.data_mut()) {
        (Data::F32(s), DataMut::F32(d)) => copy(s, d, w, slots),
        (Data::F64(s), DataMut::F64(d)) => copy(s, d, w, slots),
        _ => return Err(ShardError::Usage("rows of one dtype into a tensor of another".into())),
    }
    Ok(())
}

/// A cotangent over the local rows (or edges) `ids`: from the whole array
/// (`global` rows) or from this rank's owned ones (at `pos`, or in order);
/// the rest of the local rows (a deep halo's ghost rows) zero, in one copy.
fn local_rows<I: Copy + Into<u64>>(
    v: &TensorView<'_>,
    global: usize,
    ids: &[I],
    owned: usize,
    pos: Option<&[u32]>,
    name: &str,
) -> Result<Tensor> {
    let n = v.shape().first().copied().unwrap_or(0);
    let rows: Vec<usize> = if n == global {
        ids[..owned].iter().map(|&u| u.into() as usize).collect()
    } else if n == owned {
        match pos {
            Some(pos) => pos.iter().map(|&p| p as usize).collect(),
            None => (0..owned).collect(),
        }
    } else {
        return Err(ShardError::CotangentRows { name: name.into(), got: n, global, owned });
    };
    take_rows_padded(v.data(), v.shape(), rows.into_iter(), ids.len() - owned)
}
