//! The layers a call goes through before its rows: a realization's own
//! ([`Realization::layer`]: a shard's halo exchange), a renumbering's (the
//! caller's fields moved into the new numbering on the way in, outputs and
//! gradients back on the way out), and the realization's stored fields
//! joining the given ones. The facade asks [`Layered::of`] once per call
//! and runs the rows itself only where no layer applies; it does not know
//! which layers exist.
//!
//! A renumbering never moves edge fields (the renumbered rows read them
//! through the caller's edge ids). Every row keeps its edges in their
//! order, and the transpose a backward reads is the renumbered old
//! transpose, so every row's reduction meets its messages in the same
//! order: outputs and gradients are bit-identical to the un-renumbered
//! call's. Two sums run across rows rather than within one, and they would
//! add in a different order in the new numbering; both run in the caller's
//! order instead ([`Layered::UserOrder`], [`winner_sums`]), which costs
//! them the renumbering's gain but keeps the bits:
//!
//! - a kernel (or adjoint stage) with parameter outputs, whose sums the
//!   executor adds in blocks of rows in row order;
//! - the winner scatter of a max/min backward, which adds each source's
//!   terms in row order.
//!
//! A forward with parameter outputs is not renumbered at all in memory.
//! A `.gfg` written in a node order is laid out renumbered: every call over
//! it, on every side, goes through its order, and a call with parameter
//! sums reads its rows in the caller's order, copied through the order a
//! page at a time.

use tiga_abi::Role;

use crate::exec::{ExecError, Side, WinnerScatter};
use crate::fields::{Inputs, Seed, Tape, Wrt};
use crate::graph::Graph;
use crate::realization::{BoxError, Call, FieldRole, Grads, Layer, Named, Realization, RenumberedGraph, StoredField};
use crate::renumber::{order_of, Order, RenumberError, Renumbered, Way};
use crate::schedule::{Renumber, Schedule};
use crate::tensor::{Tensor, TensorView};

/// A realization's own fields for the call's fields not in `inputs` (a
/// file's are mapped lazily, when viewed).
pub fn stored_fields<'f>(
    fields: impl IntoIterator<Item = (Role, &'f str)>,
    r: &dyn Realization,
    inputs: &Inputs<'_>,
) -> Vec<(Role, String, Box<dyn StoredField>)> {
    fields
        .into_iter()
        .filter(|(role, name)| !inputs.has(*role, name))
        .filter_map(|(role, name)| r.stored_field(FieldRole::of(role)?, name).map(|h| (role, name.to_string(), h)))
        .collect()
}

/// `inputs` plus the views of these stored fields.
pub fn with_stored_fields<'a>(
    inputs: &Inputs<'a>,
    handles: &'a [(Role, String, Box<dyn StoredField>)],
) -> Result<Inputs<'a>, ExecError> {
    let mut all = inputs.clone();
    for (r, n, h) in handles {
        all = all.with_role(*r, n, h.view()?);
    }
    Ok(all)
}

/// What a call asks of the layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A call over one side of the rows; `param_outputs`: whether it
    /// writes sums across rows.
    Run { side: Side, param_outputs: bool },
    /// A recomputing backward.
    Vjp,
    /// A backward from a tape (in the caller's numbering, as its forward
    /// gave it).
    TapedVjp,
}

/// The layer a call over a realization goes through (see the module doc).
pub enum Layered<'r> {
    /// The realization's own.
    Own(&'r dyn Layer),
    /// A renumbered view of the realization: fields moved in, the call
    /// over the view, results moved back.
    Renumbered(RenumberedGraph<'r>),
    /// A call with sums across rows over a renumbered view: run over the
    /// view's base, in the caller's order.
    UserOrder(&'r RenumberedGraph<'r>),
}

/// The renumbered view a call over `r` goes through: always where `r` is
/// laid out in a node order (a file written renumbered), else the
/// schedule's renumbering where the call `wants` one (`None` over a view
/// already, or where neither applies; built on first use).
fn view_for<'r>(r: &'r dyn Realization, schedule: &Schedule, wants: bool) -> Result<Option<RenumberedGraph<'r>>, RenumberError> {
    let asked = wants && schedule.renumber != Renumber::None;
    if r.renumbering().is_some() || !(asked || r.renumbered_layout()) {
        return Ok(None);
    }
    r.renumbered(schedule.renumber)
}

impl<'r> Layered<'r> {
    /// The layer a call over `r` for `purpose` goes through, if any: the
    /// realization's own; else a renumbering (the realization's layout,
    /// or the schedule's for a forward without sums across rows and for a
    /// recomputing backward); else, for sums across rows over a view, the
    /// caller's order.
    pub fn of(r: &'r dyn Realization, purpose: Purpose, schedule: &Schedule) -> Result<Option<Layered<'r>>, RenumberError> {
        if let Some(own) = r.layer() {
            return Ok(Some(Layered::Own(own)));
        }
        let wants = match purpose {
            Purpose::Run { side, param_outputs } => side == Side::Forward && !param_outputs,
            Purpose::Vjp => true,
            // The tape is in the caller's numbering, and so is this
            // backward (the gradients are the same bits either way).
            Purpose::TapedVjp => false,
        };
        if let Some(view) = view_for(r, schedule, wants)? {
            return Ok(Some(Layered::Renumbered(view)));
        }
        match (purpose, r.renumbering()) {
            (Purpose::Run { param_outputs: true, .. }, Some(view)) => Ok(Some(Layered::UserOrder(view))),
            _ => Ok(None),
        }
    }

    /// `call` over `side` through this layer.
    pub fn run(&self, call: &dyn Call, side: Side, inputs: &Inputs<'_>, schedule: &Schedule) -> Result<Named, BoxError> {
        match self {
            Layered::Own(layer) => layer.run(call, side, inputs, schedule),
            Layered::Renumbered(view) => {
                run_moved(call, view, side, view, Way::ToNew, inputs, &schedule.clone().renumber(Renumber::None))
            }
            Layered::UserOrder(view) => {
                // Fields not given are the view's own (a forward's).
                let fields = if side == Side::Forward { call.field_roles() } else { Vec::new() };
                let handles = stored_fields(fields.iter().map(|(role, name)| (*role, name.as_str())), *view, inputs);
                let all = with_stored_fields(inputs, &handles)?;
                let out = run_moved(call, view, side, view.base(), Way::ToOld, &all, schedule);
                // A field read from the file does not stay resident after
                // the call.
                for (_, _, h) in &handles {
                    h.release();
                }
                out
            }
        }
    }

    /// `call`'s backward through this layer, from a cotangent per output.
    pub fn vjp(
        &self,
        call: &dyn Call,
        inputs: &Inputs<'_>,
        cotangents: &[(&str, TensorView<'_>)],
        wrt: &Wrt,
        tape: Option<&Tape>,
        schedule: &Schedule,
    ) -> Result<Grads, BoxError> {
        match self {
            Layered::Own(layer) => layer.vjp(call, inputs, Seed::Cotangents(cotangents), wrt, tape, schedule),
            Layered::Renumbered(view) => vjp_moved(call, view, inputs, cotangents, wrt, tape, schedule),
            // A backward over a view is in the view's numbering already.
            Layered::UserOrder(view) => call.vjp_call(*view, inputs, cotangents, wrt, tape, schedule),
        }
    }
}

/// A node-wise call over `rows` (a graph of one row per destination of
/// `r`, built for the call, in no numbering of its own) whose inputs are in
/// `r`'s numbering: where `r` is a renumbered view and the call has sums
/// across rows, run in the caller's order, its row outputs moved back.
pub fn run_over_nodes(
    call: &dyn Call,
    r: &dyn Realization,
    rows: &Graph,
    inputs: &Inputs<'_>,
    schedule: &Schedule,
) -> Result<Named, BoxError> {
    match r.renumbering() {
        Some(view) if call.output_roles().iter().any(|(role, _)| *role == Role::Param) => {
            run_moved(call, view, Side::Forward, rows, Way::ToOld, inputs, schedule)
        }
        _ => call.run_call(rows, Side::Forward, inputs, schedule),
    }
}

/// A call over `side` of `over` (`view`, its base, or rows built for the
/// call) with the node fields moved `way` by `view`'s orders, and its row
/// outputs moved back.
fn run_moved(
    call: &dyn Call,
    view: &RenumberedGraph<'_>,
    side: Side,
    over: &dyn Realization,
    way: Way,
    inputs: &Inputs<'_>,
    schedule: &Schedule,
) -> Result<Named, BoxError> {
    let r = &view.renumbered;
    let (src, dst) = r.side_orders(side);
    let m = r.move_inputs(inputs, src, dst, way)?;
    let outs = call.run_call(over, side, &inputs.with_moved(&m), schedule)?;
    let outs = move_outputs(call, r, outs, dst, way.back());
    r.keep_all(m);
    outs
}

/// The destination-row outputs of a call over rows whose destinations are
/// in `dst`'s numbering, moved the `way` asked.
fn move_outputs(call: &dyn Call, r: &Renumbered, mut outs: Named, dst: Option<&Order>, way: Way) -> Result<Named, BoxError> {
    for ((role, _), (_, t)) in call.output_roles().into_iter().zip(outs.iter_mut()) {
        if let Some(m) = r.moved_result(order_of(role, None, dst), way, t)? {
            r.keep(std::mem::replace(t, m));
        }
    }
    Ok(outs)
}

/// The backward over `view`: fields, cotangents and the tape's residuals
/// (per destination row, in the caller's numbering) in, the stages,
/// gradients out.
fn vjp_moved(
    call: &dyn Call,
    view: &RenumberedGraph<'_>,
    inputs: &Inputs<'_>,
    cotangents: &[(&str, TensorView<'_>)],
    wrt: &Wrt,
    tape: Option<&Tape>,
    schedule: &Schedule,
) -> Result<Grads, BoxError> {
    let r = &view.renumbered;
    let (src, dst) = (r.src_order(), Some(&r.dst));
    let m = r.move_inputs(inputs, src, dst, Way::ToNew)?;
    let outputs = call.output_roles();
    let cots: Vec<Option<Tensor>> = cotangents
        .iter()
        .map(|(name, v)| {
            let role = outputs.iter().find(|(_, n)| n == name).map_or(Role::Param, |(role, _)| *role);
            r.moved(order_of(role, src, dst), Way::ToNew, v)
        })
        .collect::<Result<_, _>>()?;
    let cot_views: Vec<(&str, TensorView<'_>)> =
        cotangents.iter().zip(&cots).map(|((n, v), c)| (*n, c.as_ref().map_or_else(|| v.clone(), |t| t.view()))).collect();
    let tape = tape
        .map(|t| t.mapped(|res| Ok::<_, RenumberError>(r.moved_result(dst, Way::ToNew, res)?.unwrap_or_else(|| res.clone()))))
        .transpose()?;
    let inner = schedule.clone().renumber(Renumber::None);
    let grads = call.vjp_call(view, &inputs.with_moved(&m), &cot_views, wrt, tape.as_ref(), &inner);
    drop(cot_views);
    r.keep_all(m);
    r.keep_all(cots);
    let mut grads = grads?;
    for (role, _, t) in grads.iter_mut() {
        if let Some(back) = r.moved_result(order_of(*role, src, dst), Way::ToOld, t)? {
            r.keep(std::mem::replace(t, back));
        }
    }
    Ok(grads)
}

/// The winner scatter's sums over the forward rows of `r` (`num_src`
/// sources, `num_dst` destinations; a page at a time when they come in
/// pages, each page released after), and which sources have out-edges.
/// Each source's terms add in row order: over a renumbered view, the
/// caller's (the winners and cotangents moved back, the scatter over the
/// caller's rows, the sums and flags moved into the view's numbering).
/// `None` for generated rows, which have no CSR.
pub fn winner_sums(
    r: &dyn Realization,
    schedule: &Schedule,
    num_src: usize,
    num_dst: usize,
    winner: TensorView<'_>,
    value: TensorView<'_>,
) -> Result<Option<(Tensor, Vec<bool>)>, BoxError> {
    if let Some(view) = r.renumbering() {
        let o = &view.renumbered;
        let (w, v) = (o.dst.to_old(&winner)?, o.dst.to_old(&value)?);
        let Some((s, has)) = winner_sums(view.base(), schedule, num_src, num_dst, w.view(), v.view())? else {
            return Ok(None);
        };
        return Ok(Some(match o.src_order() {
            None => (s, has),
            Some(order) => {
                let mut moved_has = vec![false; has.len()];
                for (old, &h) in has.iter().enumerate() {
                    if let Some(&new) = order.perm().get(old) {
                        moved_has[new as usize] = h;
                    }
                }
                (order.to_new(&s.view())?, moved_has)
            }
        }));
    }
    let mut sc = WinnerScatter::new(num_src, num_dst, winner, value)?;
    let rows = r.rows(Side::Forward, false)?;
    match rows.for_each_page(schedule, |v| sc.add_rows(v.first_row, v.offsets, v.cols).map_err(BoxError::from)) {
        None => Ok(None),
        Some(done) => {
            done?;
            Ok(Some(sc.finish()))
        }
    }
}
