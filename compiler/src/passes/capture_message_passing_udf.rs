//! `capture-message-passing-udf`: the front end has turned the user's
//! functions into regions; this pass states what was captured (fields, widths,
//! regions and their sizes) so `explain` can show it, and checks that the
//! capture is complete (an edge region with a message).

use super::{PassError, Remarks};
use crate::ir::print::TypeIn;
use crate::ir::{Kernel, Role};

pub fn capture_message_passing_udf(k: &mut Kernel, r: &mut Remarks<'_>) -> Result<(), PassError> {
    if k.edge.outputs.is_empty() {
        return Err(PassError::refused("the edge function yields no message", Some(k.span)));
    }
    for role in [Role::Src, Role::Dst, Role::Edge, Role::Param] {
        let names: Vec<String> =
            k.fields.iter().filter(|f| f.role == role).map(|f| format!("{}: {}", f.name, TypeIn(k, f.ty))).collect();
        if !names.is_empty() {
            r.analysis(Some(k.span), format!("{} fields: {}", role.name(), names.join(", ")));
        }
    }
    let msg: Vec<String> = k.message_types().iter().map(|t| TypeIn(k, *t).to_string()).collect();
    r.applied(Some(k.span), format!("captured `edge` as a region of {} ops yielding ({})", k.edge.nodes.len(), msg.join(", ")));
    match &k.node {
        Some(n) => r.applied(Some(k.span), format!("captured `node` as a region of {} ops", n.nodes.len())),
        None => r.analysis(Some(k.span), "no `node` function: the output is the aggregate"),
    }
    if let Some(c) = &k.reducer.combine {
        r.applied(Some(k.reducer.span), format!("captured the monoid's `combine` as a region of {} ops", c.nodes.len()));
    }
    if !k.widths.is_empty() {
        let w: Vec<String> = k
            .widths
            .iter()
            .map(|w| {
                let f = k.field(w.bound_by.0);
                format!("{} from {}.{}", w.name, f.role.name(), f.name)
            })
            .collect();
        r.analysis(Some(k.span), format!("width symbols solved at call time: {}", w.join(", ")));
    }
    Ok(())
}
