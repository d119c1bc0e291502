//! Execution: how a compiled kernel's rows are run. The facade binds a
//! call's fields and picks a variant ([`tiga_abi::EntryFn`]); everything
//! after that lives here:
//!
//! - [`chunks`]: rows split into ranges of about equal cost (edges + 1 per
//!   row) for the rayon workers;
//! - [`rows`]: the row executor ([`RowRunner`]): pieces of work (balanced
//!   chunks, rows of one parameter block, one huge row cut into edge
//!   segments), parameter partial sums reduced in a fixed order, so that
//!   results do not depend on the machine or on how rows are paged;
//! - [`pages`]: the page stream: a [`PageSource`] hands out pages of rows
//!   (a file's pages viewed in place, or any slices of a graph), read ahead
//!   `prefetch` pages, and released in order once their rows are done;
//! - [`winner_scatter`]: the winner scatter of a max/min backward, rows in
//!   order, threads over lanes (no atomics);
//!
//! Page sources live with what they page: a `.gfg` file's are in
//! `tiga_storage`, any other is one implementation of [`PageSource`].

pub mod chunks;
pub mod pages;
pub mod rows;
pub mod winner_scatter;

pub use crate::schedule::{plan_bytes, plan_rows};
pub use chunks::{balanced_row_chunks, for_each_row_chunk, row_chunks};
pub use pages::{check_plan, run_pages, PageData, PageSource, PageView};
pub use rows::{
    data_ptr, execute_generated, execute_row_runs, execute_rows, ExecError, ParamPartials, RowRunner, Work, SPLIT_EDGES,
};
pub use winner_scatter::{f32_ranks_exact, ScatterError, WinnerScatter};

/// Which CSR of a graph a run walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Rows are destinations (a file's `offsets`/`cols`/`edge_ids`).
    Forward,
    /// Rows are sources (the transposed graph; a file's stored transpose).
    Transposed,
    /// Forward rows with each row's edges in reverse order (a right fold).
    RowReversed,
}

/// Runs `f` on a rayon pool of `threads` workers (`None`: the current
/// pool). Pools are built once per thread count and kept for the process:
/// building one costs a thread spawn per worker, far more than a small
/// call.
pub fn in_pool<R: Send>(threads: Option<usize>, f: impl FnOnce() -> R + Send) -> Result<R, ExecError> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    let Some(n) = threads.filter(|&n| n != rayon::current_num_threads()) else { return Ok(f()) };
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let pool = {
        let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
        match pools.get(&n) {
            Some(p) => p.clone(),
            None => {
                let p = Arc::new(
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(n.max(1))
                        .build()
                        .map_err(|e| ExecError::Pool { threads: n, message: e.to_string() })?,
                );
                pools.insert(n, p.clone());
                p
            }
        }
    };
    Ok(pool.install(f))
}
