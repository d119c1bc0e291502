//! Calls over a renumbered graph ([`Schedule::renumber`]): the caller's
//! fields go into the new numbering on the way in, outputs and gradients
//! come back in the caller's numbering on the way out, and edge fields are
//! never moved (the renumbered rows read them through the caller's edge
//! ids). Every row keeps its edges in their order, and the transpose a
//! backward reads is the renumbered old transpose, so every row's
//! reduction meets its messages in the same order: outputs and gradients
//! are bit-identical to the un-renumbered call's.
//!
//! Two sums run across rows rather than within one, and they would add in
//! a different order in the new numbering; both run in the caller's order
//! instead, which costs them the renumbering's gain but keeps the bits:
//!
//! - a kernel (or adjoint stage) with parameter outputs, whose sums the
//!   executor adds in blocks of rows in row order ([`Kernel::run_side`]
//!   sends such a call here, [`Kernel::run_in_user_order`]);
//! - the winner scatter of a max/min backward, which adds each source's
//!   terms in row order (`vjp::winner_sums`).
//!
//! A forward with parameter outputs is not renumbered at all in memory.
//! A `.gfg` written in a node order is laid out renumbered: every call over
//! it, on every side, goes through its order, and a call with parameter
//! sums reads its rows in the caller's order, copied through the order a
//! page at a time (`tiga_storage::user_order`).

use tiga_compiler::ir::Role;
use tiga_runtime::exec::Side;
use tiga_runtime::renumber::order_of;
use tiga_runtime::{Order, Realization, Renumber, Renumbered, RenumberedGraph, Schedule, Tensor, TensorView, Way};

use crate::error::{Error, Result};
use crate::fields::{Gradients, Inputs, Outputs};
use crate::kernel::Kernel;

/// The renumbered view a call over `r` goes through: always where `r` is
/// laid out in a node order (a file written renumbered), else the
/// schedule's renumbering where the call `wants` one (`None` over a view
/// already, or where neither applies; built on first use).
pub(crate) fn view_for<'r>(r: &'r dyn Realization, schedule: &Schedule, wants: bool) -> Result<Option<RenumberedGraph<'r>>> {
    let asked = wants && schedule.renumber != Renumber::None;
    if r.renumbering().is_some() || !(asked || r.renumbered_layout()) {
        return Ok(None);
    }
    Ok(r.renumbered(schedule.renumber)?)
}

impl Kernel {
    /// The destination-row outputs of a call over rows whose destinations
    /// are in `dst`'s numbering, moved the `way` asked.
    fn move_outputs(
        &self,
        r: &Renumbered,
        mut outs: Outputs,
        dst: Option<&Order>,
        way: Way,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        for (o, (_, t)) in self.captured().outputs.iter().zip(outs.items.iter_mut()) {
            if let Some(m) = r.moved_result(order_of(o.role, None, dst), way, t, || tiga_storage::offload::spill_dir(schedule))? {
                r.keep(std::mem::replace(t, m));
            }
        }
        Ok(outs)
    }

    /// Whether this kernel writes parameter outputs (sums across rows).
    pub(crate) fn has_param_outputs(&self) -> bool {
        self.captured().outputs.iter().any(|o| o.role == Role::Param)
    }

    /// A call over `side` of `view` with fields in the caller's numbering:
    /// fields in, the call, row outputs out.
    pub(crate) fn run_renumbered(
        &self,
        view: &RenumberedGraph<'_>,
        side: Side,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        self.run_moved(view, side, view, Way::ToNew, inputs, &schedule.clone().renumber(Renumber::None))
    }

    /// A call over `side` of `view` whose inputs are in the renumbered
    /// numbering, run over the caller's graph (so that its parameter sums
    /// add rows in the caller's order), its row outputs moved back into
    /// the renumbered numbering.
    pub(crate) fn run_in_user_order(
        &self,
        view: &RenumberedGraph<'_>,
        side: Side,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        self.run_moved(view, side, view.base(), Way::ToOld, inputs, schedule)
    }

    /// A node-wise call over `rows` (a graph of one row per destination,
    /// built for the call, in no numbering of its own) whose inputs are in
    /// `view`'s numbering: run in the caller's order, so that its
    /// parameter sums add the rows in that order, its row outputs moved
    /// back.
    pub(crate) fn run_over_nodes_in_user_order(
        &self,
        view: &RenumberedGraph<'_>,
        rows: &tiga_runtime::Graph,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        self.run_moved(view, Side::Forward, rows, Way::ToOld, inputs, schedule)
    }

    /// A call over `side` of `over` (`view` or its base) with the node
    /// fields moved `way` by `view`'s orders, and its row outputs moved
    /// back.
    fn run_moved(
        &self,
        view: &RenumberedGraph<'_>,
        side: Side,
        over: &dyn tiga_runtime::Realization,
        way: Way,
        inputs: &Inputs<'_>,
        schedule: &Schedule,
    ) -> Result<Outputs> {
        let r = &view.renumbered;
        let (src, dst) = r.side_orders(side);
        let m = r.move_inputs(inputs, src, dst, way)?;
        let outs = self.run_side(over, side, &inputs.with_moved(&m), schedule)?;
        let outs = self.move_outputs(r, outs, dst, way.back(), schedule);
        r.keep_all(m);
        outs
    }

    /// The VJP over `view`: fields and cotangents in, the stages,
    /// gradients out.
    pub(crate) fn vjp_renumbered(
        &self,
        view: &RenumberedGraph<'_>,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
        wrt: &crate::fields::Wrt,
    ) -> Result<Gradients> {
        self.vjp_renumbered_by(view, inputs, cotangents, schedule, |ins, cots, s| self.run_vjp_on(view, ins, cots, s, wrt))
    }

    /// [`Kernel::vjp_renumbered`] with the stages run by `stages` (over
    /// `view`, given the moved fields and cotangents).
    pub(crate) fn vjp_renumbered_by(
        &self,
        view: &RenumberedGraph<'_>,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        schedule: &Schedule,
        stages: impl FnOnce(&Inputs<'_>, &[(&str, TensorView<'_>)], &Schedule) -> Result<Gradients>,
    ) -> Result<Gradients> {
        let r = &view.renumbered;
        let (src, dst) = (r.src_order(), Some(&r.dst));
        let m = r.move_inputs(inputs, src, dst, Way::ToNew)?;
        let k = self.captured();
        let cots: Vec<Option<Tensor>> = cotangents
            .iter()
            .map(|(name, v)| {
                let role = k.outputs.iter().find(|o| o.name == *name).map_or(Role::Param, |o| o.role);
                r.moved(order_of(role, src, dst), Way::ToNew, v)
            })
            .collect::<std::result::Result<_, _>>()?;
        let cot_views: Vec<(&str, TensorView<'_>)> =
            cotangents.iter().zip(&cots).map(|((n, v), c)| (*n, c.as_ref().map_or_else(|| v.clone(), |t| t.view()))).collect();
        let inner = schedule.clone().renumber(Renumber::None);
        let grads = stages(&inputs.with_moved(&m), &cot_views, &inner);
        drop(cot_views);
        r.keep_all(m);
        r.keep_all(cots);
        let mut grads = grads?;
        for (role, _, t) in grads.items.iter_mut() {
            if let Some(back) =
                r.moved_result(order_of(*role, src, dst), Way::ToOld, t, || tiga_storage::offload::spill_dir(schedule))?
            {
                r.keep(std::mem::replace(t, back));
            }
        }
        Ok(grads)
    }
}

/// The winner scatter's sums over `view` in the caller's row order: the
/// winners and cotangents (per destination row) moved back, the scatter
/// over the caller's rows, the sums and the has-edges flags (per source)
/// moved into the renumbered numbering.
pub(crate) fn winner_sums_in_user_order(
    view: &RenumberedGraph<'_>,
    winner: &TensorView<'_>,
    value: &TensorView<'_>,
    sums: impl FnOnce(TensorView<'_>, TensorView<'_>) -> Result<(Tensor, Vec<bool>)>,
) -> Result<(Tensor, Vec<bool>)> {
    let r = &view.renumbered;
    let w = r.dst.to_old(winner).map_err(Error::from)?;
    let v = r.dst.to_old(value).map_err(Error::from)?;
    let (s, has) = sums(w.view(), v.view())?;
    match r.src_order() {
        None => Ok((s, has)),
        Some(o) => {
            let mut moved_has = vec![false; has.len()];
            for (old, &h) in has.iter().enumerate() {
                if let Some(&new) = o.perm().get(old) {
                    moved_has[new as usize] = h;
                }
            }
            Ok((o.to_new(&s.view()).map_err(Error::from)?, moved_has))
        }
    }
}
