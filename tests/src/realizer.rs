//! The realizations the suite checks, one entry each in [`Realizer::all`],
//! and for each: how a call runs over it, its results put back in the
//! user's numbering, and what it is expected to refuse. A new realization
//! (a GPU) is one more variant here and one more entry in the list.

use std::sync::Arc;

use tiga::compiler::ir::{ReducerKind, Role};
use tiga::runtime::storage::{save_gfg, FieldRole, GfgFile, GfgWriter};
use tiga::{DType, InProcess, Kernel, PartitionChoice, Renumber, Schedule, ShardOptions, Sharded, Tensor, TensorView};

use crate::case::{tensor, Call, Case};

/// A kernel's outputs, by name, in declaration order.
pub type Outs = Vec<(String, Tensor)>;
/// A kernel's gradients, by role and name, in the order the call returns.
pub type Grads = Vec<(Role, String, Tensor)>;

/// What a realization gave for one call, in the user's numbering (rows of
/// every rank put back where they belong); an error as its message.
#[derive(Debug)]
pub struct Results {
    pub forward: Result<Outs, String>,
    pub backward: Result<Grads, String>,
}

/// How a sharded realization cuts the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Contiguous,
    Balanced,
}

/// One way of making a graph's rows, edges and fields available to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Realizer {
    /// A [`tiga::Graph`] in memory, as [`Schedule::default`] runs it.
    InMemory,
    /// A generated [`tiga::Stencil2d`] (only for cases that are stencils).
    Generated,
    /// A `.gfg` file (with its transpose) holding the graph and the node and
    /// edge fields, read `page_rows` rows at a time.
    Paged { page_rows: usize },
    /// Halo-sharded over `ranks` in-process ranks (threads).
    Sharded { ranks: usize, cut: Cut },
    /// The graph in memory with its nodes renumbered for locality
    /// (`Schedule::renumber`): forward and backward bit-identical to the
    /// plain in-memory run ([`Realizer::backward_bits`]).
    Renumbered(Renumber),
    /// A `.gfg` written in a node order (`GfgWriter::renumbered`, with its
    /// renumbered transpose and node fields), read 3 rows at a time, the
    /// call's fields and results in the caller's numbering: bit-identical
    /// to the plain in-memory run, forward and backward.
    PagedRenumbered(Renumber),
}

/// What a realization is expected to refuse for a call: a substring of the
/// error it must give, forward and backward (`None`: it must run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refusals {
    pub forward: Option<&'static str>,
    pub backward: Option<&'static str>,
}

impl std::fmt::Display for Realizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Realizer::InMemory => write!(f, "in-memory"),
            Realizer::Generated => write!(f, "generated"),
            Realizer::Paged { page_rows } => write!(f, "paged({page_rows} rows)"),
            Realizer::Sharded { ranks, cut } => write!(f, "sharded({ranks} ranks, {cut:?})"),
            Realizer::Renumbered(m) => write!(f, "renumbered({})", m.name()),
            Realizer::PagedRenumbered(m) => write!(f, "paged, stored renumbered({})", m.name()),
        }
    }
}

impl Realizer {
    /// Every realization the suite checks.
    pub fn all() -> Vec<Realizer> {
        vec![
            Realizer::InMemory,
            Realizer::Generated,
            Realizer::Paged { page_rows: 3 },
            Realizer::Sharded { ranks: 2, cut: Cut::Contiguous },
            Realizer::Sharded { ranks: 2, cut: Cut::Balanced },
            Realizer::Sharded { ranks: 3, cut: Cut::Contiguous },
            Realizer::Sharded { ranks: 3, cut: Cut::Balanced },
            Realizer::Renumbered(Renumber::Degree),
            Realizer::Renumbered(Renumber::Rcm),
            Realizer::Renumbered(Renumber::Cluster),
            Realizer::PagedRenumbered(Renumber::Degree),
            Realizer::PagedRenumbered(Renumber::Rcm),
            Realizer::PagedRenumbered(Renumber::Cluster),
        ]
    }

    /// Whether this realization's gradients must also hold the in-memory
    /// backward's bits (a renumbering keeps every sum's order; the others
    /// are held to the reference's tolerance).
    pub fn backward_bits(&self) -> bool {
        matches!(self, Realizer::Renumbered(_) | Realizer::PagedRenumbered(_))
    }

    /// Whether this realization can hold `case` at all (a generated stencil
    /// holds only stencils).
    pub fn holds(&self, case: &Case) -> bool {
        match self {
            Realizer::Generated => case.stencil.is_some(),
            Realizer::InMemory
            | Realizer::Paged { .. }
            | Realizer::Sharded { .. }
            | Realizer::Renumbered(_)
            | Realizer::PagedRenumbered(_) => true,
        }
    }

    /// What this realization refuses of `k` on `case`. A generated stencil
    /// has no edges to hold fields or outputs, no transpose in CSR order
    /// when it wraps, and no winning edges or per-edge stage outputs, so a
    /// max's, a min's, a product's or a monoid's backward needs the CSR; a
    /// sum's, a mean's and a softmax's run there. (No gnn.rs kernel takes a
    /// product or a min: those two arms are what the others suggest.)
    pub fn refusals(&self, k: &Kernel, case: &Case) -> Refusals {
        match self {
            Realizer::Generated => {
                let c = k.captured();
                if c.fields.iter().any(|f| f.role == Role::Edge) {
                    return Refusals { forward: Some("reads edge fields"), backward: Some("reads edge fields") };
                }
                let needs_csr = match c.reducer.kind {
                    ReducerKind::Sum | ReducerKind::Mean | ReducerKind::Softmax => case.periodic(),
                    ReducerKind::Max | ReducerKind::Min | ReducerKind::Prod | ReducerKind::Monoid => true,
                };
                Refusals { forward: None, backward: needs_csr.then_some("CSR realization") }
            }
            // RCM and clusters need one node set; `degree` renumbers the
            // rows of any graph.
            Realizer::Renumbered(Renumber::Rcm | Renumber::Cluster)
            | Realizer::PagedRenumbered(Renumber::Rcm | Renumber::Cluster)
                if case.graph.num_src() != case.graph.num_dst() =>
            {
                Refusals { forward: Some("needs a square graph"), backward: Some("needs a square graph") }
            }
            Realizer::InMemory
            | Realizer::Paged { .. }
            | Realizer::Sharded { .. }
            | Realizer::Renumbered(_)
            | Realizer::PagedRenumbered(_) => Refusals::default(),
        }
    }

    /// Run `call` of `k` forward and backward over this realization of
    /// `case` as `schedule` says (its back end; a paged realization sets its
    /// own page size); `None` where it does not hold the case
    /// ([`Realizer::holds`]). Failures to set the realization up (a file
    /// that cannot be written) panic: they are not the realization's answer.
    pub fn results(&self, k: &Kernel, case: &Case, call: &Call, schedule: &Schedule) -> Option<Results> {
        if !self.holds(case) {
            return None;
        }
        let (ins, cots) = (call.inputs(), call.cotangent_views());
        let res = match self {
            Realizer::InMemory => Results {
                forward: k.run_with(&case.graph, &ins, schedule).map(|o| o.items).map_err(|e| e.to_string()),
                backward: k.vjp_with(&case.graph, &ins, &cots, schedule).map(|g| g.items).map_err(|e| e.to_string()),
            },
            Realizer::Generated => {
                let st = case.stencil.as_ref()?;
                Results {
                    forward: k.run_with(st, &ins, schedule).map(|o| o.items).map_err(|e| e.to_string()),
                    backward: k.vjp_with(st, &ins, &cots, schedule).map(|g| g.items).map_err(|e| e.to_string()),
                }
            }
            Realizer::Paged { page_rows } => paged(k, case, call, None, &schedule.clone().page_rows(*page_rows).prefetch(1)),
            Realizer::PagedRenumbered(m) => paged(k, case, call, Some(*m), &schedule.clone().page_rows(3).prefetch(1)),
            Realizer::Sharded { ranks, cut } => sharded(k, case, call, *ranks, *cut, schedule),
            Realizer::Renumbered(m) => {
                let schedule = schedule.clone().renumber(*m);
                Results {
                    forward: k.run_with(&case.graph, &ins, &schedule).map(|o| o.items).map_err(|e| e.to_string()),
                    backward: k.vjp_with(&case.graph, &ins, &cots, &schedule).map(|g| g.items).map_err(|e| e.to_string()),
                }
            }
        };
        Some(res)
    }
}

/// The graph (with its transpose) and every node and edge field saved to a
/// `.gfg`, in the node order `method` gives when there is one; the call
/// passes only the parameters, the rest comes from the file.
fn paged(k: &Kernel, case: &Case, call: &Call, method: Option<Renumber>, schedule: &Schedule) -> Results {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let path = dir.path().join("case.gfg");
    let on_disk: Vec<(FieldRole, &str, TensorView<'_>)> = call
        .fields
        .iter()
        .filter_map(|(r, n, t)| {
            let role = match r {
                Role::Src => FieldRole::Src,
                Role::Dst => FieldRole::Dst,
                Role::Edge => FieldRole::Edge,
                Role::Param => return None,
            };
            Some((role, n.as_str(), t.view()))
        })
        .collect();
    let renumbered = match method.map(|m| case.graph.renumbered(m)) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(r))) => Some(r),
        // The renumbering's refusal is this realization's answer.
        Some(Err(e)) => return Results { forward: Err(e.to_string()), backward: Err(e.to_string()) },
    };
    let saved = match &renumbered {
        None => save_gfg(&path, &case.graph, true, &on_disk),
        Some(r) => GfgWriter::renumbered(&case.graph, r).and_then(|w| {
            on_disk.iter().fold(w.with_transpose(true), |w, (role, name, v)| w.field(*role, *name, v.clone())).save(&path)
        }),
    };
    saved.unwrap_or_else(|e| panic!("saving {}: {e}", case.name));
    let file = GfgFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", case.name));
    let params = call.params();
    Results {
        forward: k.run_with(&file, &params, schedule).map(|o| o.items).map_err(|e| e.to_string()),
        backward: k.vjp_with(&file, &params, &call.cotangent_views(), schedule).map(|g| g.items).map_err(|e| e.to_string()),
    }
}

/// One rank's part of a tensor: the user ids of its rows (`None`: a value
/// every rank holds whole) and the rows.
type Part<'a> = (Option<Vec<usize>>, &'a Tensor);

/// What one rank returns: its owned destinations, sources and edges (user
/// ids), its forward outputs and its gradients.
type RankResults = (Vec<u32>, Vec<u32>, Vec<u64>, Result<Outs, String>, Result<Grads, String>);

/// Every rank a thread; fields passed whole (the user's numbering), each
/// rank's rows put back in that numbering.
fn sharded(k: &Kernel, case: &Case, call: &Call, ranks: usize, cut: Cut, schedule: &Schedule) -> Results {
    let partition = match cut {
        Cut::Contiguous => PartitionChoice::Contiguous,
        Cut::Balanced => PartitionChoice::Balanced,
    };
    let opts = ShardOptions { partition, depth: 1 };
    let (ins, cots) = (call.inputs(), call.cotangent_views());
    let per_rank: Vec<RankResults> = InProcess::run(ranks, |c| {
        let sh = Sharded::from_graph(&case.graph, Arc::new(c), &opts).unwrap_or_else(|e| panic!("sharding {}: {e}", case.name));
        let forward = k.run_with(&sh, &ins, schedule).map(|o| o.items).map_err(|e| e.to_string());
        let backward = k.vjp_with(&sh, &ins, &cots, schedule).map(|g| g.items).map_err(|e| e.to_string());
        (sh.owned_dst().to_vec(), sh.owned_src().to_vec(), sh.owned_edges().to_vec(), forward, backward)
    })
    .into_iter()
    .enumerate()
    .map(|(r, res)| res.unwrap_or_else(|e| panic!("rank {r} of {ranks} on {}: {e}", case.name)))
    .collect();
    let g = &case.graph;
    // Each rank's owned ids for a role, and how many rows the role has.
    let owned = |rank: &RankResults, role: Role| -> Option<Vec<usize>> {
        match role {
            Role::Dst => Some(rank.0.iter().map(|&u| u as usize).collect()),
            Role::Src => Some(rank.1.iter().map(|&u| u as usize).collect()),
            Role::Edge => Some(rank.2.iter().map(|&e| e as usize).collect()),
            Role::Param => None,
        }
    };
    let rows = |role: Role| match role {
        Role::Dst => g.num_dst(),
        Role::Src => g.num_src(),
        Role::Edge => g.num_edges(),
        Role::Param => 0,
    };
    let what = |role: Role, name: &str| format!("{} on {}, {ranks} ranks {cut:?}: {} {name}", k.name(), case.name, role.name());
    let mut forward: Result<Outs, String> = Ok(Vec::new());
    for (o, decl) in k.captured().outputs.iter().enumerate() {
        let parts: Result<Vec<Part<'_>>, String> = per_rank
            .iter()
            .map(|r| match &r.3 {
                Ok(outs) => Ok((owned(r, decl.role), &outs[o].1)),
                Err(e) => Err(e.clone()),
            })
            .collect();
        forward = forward.and_then(|mut acc| {
            acc.push((decl.name.clone(), assemble(&parts?, rows(decl.role), call.dtype, &what(decl.role, &decl.name))));
            Ok(acc)
        });
    }
    let backward = match per_rank.iter().map(|r| r.4.as_ref()).collect::<Result<Vec<&Grads>, &String>>() {
        Err(e) => Err(e.clone()),
        Ok(grads) => Ok(grads[0]
            .iter()
            .enumerate()
            .map(|(i, (role, name, _))| {
                let parts: Vec<Part<'_>> = per_rank
                    .iter()
                    .zip(&grads)
                    .map(|(r, gr)| {
                        assert_eq!(
                            (&gr[i].0, &gr[i].1),
                            (role, name),
                            "{}: gradients in one order on every rank",
                            what(*role, name)
                        );
                        (owned(r, *role), &gr[i].2)
                    })
                    .collect();
                (*role, name.clone(), assemble(&parts, rows(*role), call.dtype, &what(*role, name)))
            })
            .collect()),
    };
    Results { forward, backward }
}

/// One tensor in the user's numbering from every rank's part: owned rows
/// (`Some(ids)`: each of the `n` rows owned by exactly one rank), or a
/// value every rank holds whole (`None`: a parameter's, the same bits on
/// every rank).
fn assemble(parts: &[Part<'_>], n: usize, dtype: DType, what: &str) -> Tensor {
    for (_, t) in parts {
        assert_eq!(t.dtype(), dtype, "{what}: dtype");
    }
    if parts.iter().all(|(ids, _)| ids.is_none()) {
        let bits = |t: &Tensor| t.to_f64_vec().iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        for (_, t) in &parts[1..] {
            assert_eq!(t.shape(), parts[0].1.shape(), "{what}: shape per rank");
            assert_eq!(bits(t), bits(parts[0].1), "{what}: the same bits on every rank");
        }
        return parts[0].1.clone();
    }
    let tail: Vec<usize> = parts[0].1.shape()[1..].to_vec();
    let w: usize = tail.iter().product();
    let mut data = vec![0.0f64; n * w];
    let mut seen = vec![0u32; n];
    for (ids, t) in parts {
        let ids = ids.as_ref().unwrap_or_else(|| panic!("{what}: a row tensor on one rank, not on another"));
        assert_eq!(t.shape()[1..], tail[..], "{what}: row shape per rank");
        assert_eq!(t.shape()[0], ids.len(), "{what}: one row per owned id");
        let v = t.to_f64_vec();
        for (p, &id) in ids.iter().enumerate() {
            data[id * w..(id + 1) * w].copy_from_slice(&v[p * w..(p + 1) * w]);
            seen[id] += 1;
        }
    }
    if let Some(i) = seen.iter().position(|&c| c != 1) {
        panic!("{what}: row {i} owned by {} ranks", seen[i]);
    }
    let shape: Vec<usize> = std::iter::once(n).chain(tail).collect();
    tensor(dtype, &shape, &data)
}
