//! A `.gfg` file as a realization: its rows come in pages viewed in place
//! ([`GfgPages`]), its stored fields are read through [`FieldHandle`]s,
//! and a file written in a node order is a renumbered view of itself
//! (read back in the caller's order by [`UserOrderFile`]). Errors of the
//! file reach the executor boxed, with their message unchanged.

use std::sync::Arc;

use tiga_runtime::exec::{ExecError, Side};
use tiga_runtime::{FieldRole, Realization, Renumber, RenumberError, RenumberedGraph, Rows, StoredField, TensorView};

use crate::{error::GfgError, pages::GfgPages, reader::FieldHandle, reader::GfgFile, user_order::UserOrderFile};

impl From<GfgError> for ExecError {
    fn from(e: GfgError) -> ExecError {
        ExecError::Storage(Box::new(e))
    }
}

impl From<GfgError> for RenumberError {
    fn from(e: GfgError) -> RenumberError {
        RenumberError::Storage(Box::new(e))
    }
}

impl StoredField for FieldHandle {
    fn view(&self) -> Result<TensorView<'_>, ExecError> {
        Ok(FieldHandle::view(self)?)
    }
    fn release(&self) {
        FieldHandle::release(self)
    }
}

impl Realization for GfgFile {
    fn num_src(&self) -> usize {
        GfgFile::num_src(self)
    }
    fn num_dst(&self) -> usize {
        GfgFile::num_dst(self)
    }
    fn num_edges(&self) -> usize {
        GfgFile::num_edges(self)
    }
    fn rows(&self, side: Side, edge_ids: bool) -> Result<Rows<'_>, ExecError> {
        if side == Side::Transposed && !self.has_transpose() {
            // A file in a node order is rebuilt in that order, or it loses it.
            let again = match self.node_order() {
                Ok(Some(o)) => format!(" --renumber {}", o.method.name()),
                _ => String::new(),
            };
            return Err(ExecError::Unavailable(format!(
                "{} has no transposed CSR, which a paged backward reads: rebuild it with `tigac convert --transpose{again}` (or save with a transpose)",
                self.path().display()
            )));
        }
        Ok(Rows::Pages(Box::new(GfgPages::new(self, side, edge_ids)?)))
    }
    fn has_side(&self, side: Side) -> bool {
        side != Side::Transposed || self.has_transpose()
    }
    fn stored_field(&self, role: FieldRole, name: &str) -> Option<Box<dyn StoredField>> {
        self.field(role, name).ok().map(|h| Box::new(h) as Box<dyn StoredField>)
    }
    fn renumbered(&self, method: Renumber) -> Result<Option<RenumberedGraph<'_>>, RenumberError> {
        let Some(order) = self.node_order()? else { return Ok(None) };
        if method != Renumber::None && method != order.method {
            return Err(RenumberError::StoredOrder {
                path: self.path().display().to_string(),
                stored: order.method.name(),
                asked: method.name(),
            });
        }
        let user_order = Arc::new(UserOrderFile { file: self, renumbered: order.clone() });
        Ok(Some(RenumberedGraph::of_layout(self, user_order, order)))
    }
    fn renumbered_layout(&self) -> bool {
        self.has_node_order()
    }
    fn describe(&self) -> String {
        format!(
            "paged_csr ({}; {} sources, {} destinations, {} edges)",
            self.path().display(),
            self.num_src(),
            self.num_dst(),
            self.num_edges()
        )
    }
}
