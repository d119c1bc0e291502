//! `tigac serve`: one storage server of a graph store
//! (`tiga_graph_store::server`): rank R of W, owning a contiguous block of
//! destination rows of a `.gfg` and their feature rows, answering the
//! gRPC service of `proto/graph_store.proto` on 127.0.0.1 unless told
//! otherwise. It prints `listening on ADDR ...` once ready (give port 0 to
//! let the system choose, and read it there), logs sessions to stderr, and
//! with `--sessions N` exits with status 0 after N sessions have opened
//! and closed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tiga_graph_store::{FeatureFile, ServeOptions, SplitSpec};

use crate::report::Failure;

/// What `tigac serve` was asked.
pub struct ServeRequest {
    pub graph: PathBuf,
    pub partition: (usize, usize),
    pub features: Vec<FeatureFile>,
    pub splits: Vec<SplitSpec>,
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
    pub sessions: Option<u64>,
    pub deadline_s: f64,
}

/// `--partition R/W`.
pub fn parse_partition(s: &str) -> Result<(usize, usize), String> {
    let (r, w) = s.split_once('/').ok_or_else(|| format!("`{s}`: expected R/W (rank R of W servers, e.g. 0/2)"))?;
    let r: usize = r.trim().parse().map_err(|_| format!("`{s}`: the rank `{r}` is not a whole number"))?;
    let w: usize = w.trim().parse().map_err(|_| format!("`{s}`: the server count `{w}` is not a whole number"))?;
    if w == 0 || r >= w {
        return Err(format!("`{s}`: the rank must be below the server count (0/2 and 1/2 are the two ranks of 2)"));
    }
    Ok((r, w))
}

pub fn parse_split(s: &str) -> Result<SplitSpec, String> {
    SplitSpec::parse(s).map_err(|e| e.to_string())
}

pub fn parse_feature(s: &str) -> Result<FeatureFile, String> {
    FeatureFile::parse(s)
}

pub fn serve(req: ServeRequest) -> Result<(), Failure> {
    let token = match &req.token_file {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| Failure::new(format!("--token-file {}: {e}", p.display())))?;
            let t = text.trim();
            if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Failure::new(format!(
                    "--token-file {}: the token must be one word of printable characters",
                    p.display()
                )));
            }
            Some(t.to_string())
        }
    };
    if !(req.deadline_s.is_finite() && req.deadline_s > 0.0 && req.deadline_s <= 86_400.0) {
        return Err(Failure::new(format!("--deadline {}: give seconds in (0, 86400]", req.deadline_s)));
    }
    let mut opts = ServeOptions::new(&req.graph, req.partition.0, req.partition.1);
    opts.features = req.features;
    opts.splits = req.splits;
    opts.listen = req.listen;
    opts.token = token;
    opts.sessions = req.sessions;
    opts.deadline = Duration::from_secs_f64(req.deadline_s);
    tiga_graph_store::serve_blocking(&opts).map_err(|e| Failure::new(e.to_string()))
}
