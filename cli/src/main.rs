//! `tigac`: tiga's command line.
//!
//! Three commands cover the life of a kernel outside a Rust build:
//! `compile` checks and lowers a kernel file into an artifact (and can dump
//! each stage as text), `explain` says what the compiler did (the forward
//! kernel and its adjoint stages, and how a graph would be realized), and
//! `run` executes a kernel on a graph file with `.npy` fields, and with
//! `--grads` its vector-Jacobian product; a `.gfg` graph runs paged, from
//! disk. Two more manage graphs on disk: `convert` builds a `.gfg` from an
//! edge list larger than memory, `info` prints and verifies one.
//!
//! This file only parses flags (clap; usage errors exit 2) and reports
//! failures: every command returns a [`report::Failure`] on bad input,
//! printed to stderr with exit status 1, so no user mistake reaches a panic.

mod compile;
mod convert;
mod explain;
mod gpu_report;
mod info;
mod inputs;
mod output_paths;
mod partition_report;
mod progress;
mod report;
mod run;
mod run_sharded;
mod sample;
mod serve;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tiga::compiler::ir::Role;
use tiga::Device;

use crate::inputs::{parse_binding, parse_out, Binding, OutSpec, PageArgs};

#[derive(Parser, Debug)]
#[command(name = "tigac", version, about = "tiga's ahead-of-time compiler for message-passing graph kernels")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check and lower a kernel file into an artifact that `run` and `explain` load without the source.
    Compile(CompileArgs),
    /// Print what the compiler did to a kernel: reducer class, fusion, every pass and the loop nest.
    Explain(ExplainArgs),
    /// Run a kernel on a graph file with .npy fields and write its outputs (and, with --grads, its gradients) as .npy.
    Run(RunArgs),
    /// Build a .gfg graph file from a SNAP edge list or a .mtx, within a memory budget (external sort).
    Convert(ConvertArgs),
    /// Print a .gfg file's manifest and fields, and verify every section's checksum.
    Info(InfoArgs),
    /// Sample neighbourhoods of seed nodes, hop by hop (fanout per hop), and write nodes and per-hop edges as .npy.
    Sample(SampleArgs),
    /// Serve a partition of a .gfg graph (and its features and splits) as one storage server of a graph store, over gRPC.
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// The .gfg graph (only this server's rows are read).
    #[arg(long, value_name = "G.gfg")]
    graph: PathBuf,
    /// This server's rank R of W servers: it owns the R-th of W contiguous blocks of destination rows.
    #[arg(long, value_name = "R/W", value_parser = serve::parse_partition)]
    partition: (usize, usize),
    /// A node or edge feature from a .npy of [N] or [N, F] rows (kind by row count; prefix node: or edge: to say).
    #[arg(long = "features", value_name = "[node:|edge:]NAME=FILE.npy", value_parser = serve::parse_feature)]
    features: Vec<tiga_graph_store::FeatureFile>,
    /// A split made here with a seed: node:TRAIN,VAL,TEST[:SEED] (node ids) or link:TRAIN,VAL,TEST[:SEED]
    /// (node-anchor link prediction: anchors with their in-neighbours as positive labels).
    #[arg(long = "split", value_name = "KIND:TRAIN,VAL,TEST[:SEED]", value_parser = serve::parse_split)]
    split: Vec<tiga_graph_store::SplitSpec>,
    /// The address to listen on (port 0: any free port, printed on the `listening on` line).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:50051")]
    listen: std::net::SocketAddr,
    /// A file holding a token: every call must then carry `authorization: Bearer TOKEN` metadata.
    #[arg(long, value_name = "F")]
    token_file: Option<PathBuf>,
    /// Exit (status 0) after N compute sessions have opened and closed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    sessions: Option<u64>,
    /// Every method's server-side deadline, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    deadline: f64,
}

#[derive(Args, Debug)]
struct SampleArgs {
    /// Graph: an edge list, a .mtx or a .gfg (read a row at a time), as for `run`.
    #[arg(long, value_name = "GRAPH")]
    graph: PathBuf,
    #[command(flatten)]
    text: GraphTextArgs,
    /// The centre nodes of hop 0: a 1-D int64 (or int32) .npy of node ids.
    #[arg(long, value_name = "SEEDS.npy")]
    seeds: PathBuf,
    /// Edges sampled per centre at each hop, comma-separated; -1 takes every edge (PyG's num_neighbors).
    #[arg(long, value_name = "K0,K1,...", value_parser = sample::parse_fanout, allow_hyphen_values = true)]
    fanout: std::vec::Vec<i64>,
    /// Sample each centre's edges weighted by this edge field (one non-negative weight per edge, graph edge order).
    #[arg(long, value_name = "EDGEFIELD.npy")]
    weight: Option<PathBuf>,
    /// The random seed: a centre's sample depends only on (seed, centre, hop).
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,
    /// The folder to write nodes.npy and hop{k}.{src,dst,edge_ids}.npy into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Args, Debug)]
struct ConvertArgs {
    /// The input: a SNAP-style edge list (`src dst` per line, `#` comments), or Matrix Market if it ends in .mtx.
    input: PathBuf,
    /// The .gfg file to write (replaced atomically; temporary files go beside it).
    out: PathBuf,
    #[command(flatten)]
    text: GraphTextArgs,
    /// Also store the transposed CSR (what a backward pass over the file reads).
    #[arg(long)]
    transpose: bool,
    /// The memory budget in bytes (suffixes K, M, G: powers of 1024). Half holds the edges being sorted.
    #[arg(long, value_name = "BYTES", default_value = "1G", value_parser = tiga::runtime::schedule::parse_bytes)]
    memory: u64,
    /// The largest .gfg to write (suffixes K, M, G, T). Default: 64 times the input's size, at least 1G. A graph's
    /// row offsets grow with its node count, not its edges: one edge `0 4294967295` makes a 32 GiB file.
    #[arg(long, value_name = "BYTES", value_parser = tiga::runtime::schedule::parse_bytes)]
    max_output: Option<u64>,
    /// Write the graph in a node order for cache locality: `none` (the default), `degree`, `rcm` or `cluster` (as
    /// `run --renumber`). The file stores the order (format version 3); a run over it takes and gives fields in the
    /// input's numbering, with the same bits. The graph is renumbered in memory (about 64 bytes per edge, within
    /// --memory).
    #[arg(long, value_name = "METHOD", default_value = "none", value_parser = tiga::Renumber::parse)]
    renumber: tiga::Renumber,
}

#[derive(Args, Debug)]
struct InfoArgs {
    /// The .gfg file.
    file: PathBuf,
}

/// How a .gfg graph is paged (`run`, `explain`).
#[derive(Args, Debug, Clone)]
struct PagingArgs {
    /// Destination rows per page of a .gfg graph (default: TIGA_PAGED_PAGE_ROWS, else 1000000).
    #[arg(long, value_name = "N", conflicts_with = "page_bytes", value_parser = clap::value_parser!(u64).range(1..))]
    page_rows: Option<u64>,
    /// Or: the most bytes of adjacency (column indices and edge ids) per page of a .gfg graph.
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u64).range(1..))]
    page_bytes: Option<u64>,
    /// Pages read ahead while one computes (0: none; default: TIGA_PAGED_PREFETCH_DEPTH, else 2).
    #[arg(long, value_name = "D")]
    prefetch: Option<usize>,
}

impl PagingArgs {
    fn page_args(&self) -> PageArgs {
        let size = |v: Option<u64>| v.map(|x| usize::try_from(x).unwrap_or(usize::MAX));
        PageArgs { page_rows: size(self.page_rows), page_bytes: size(self.page_bytes), prefetch: self.prefetch }
    }
}

#[derive(Args, Debug)]
struct CompileArgs {
    /// Kernel file (Rust source with `#[message_passing]` modules).
    file: PathBuf,
    /// Put only this kernel in the artifact (default: every kernel of the file).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Also write these stages as text next to the artifact: <OUT stem>.<Kernel>.<stage>.txt.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STAGES")]
    emit: Vec<compile::Stage>,
    /// The artifact to write (default: <file stem>.tiga in the current directory).
    #[arg(short = 'o', long = "out", value_name = "OUT")]
    out: Option<PathBuf>,
    /// What `--emit ptx` targets: `ptx` writes <OUT stem>.<Kernel>.ptx and <OUT stem>.<Kernel>.vjp.<stage>.ptx
    /// (f32) for every kernel and adjoint stage, or nothing and an error naming what the PTX back end does not
    /// lower yet.
    #[arg(long, value_name = "TARGET", default_value = "cpu", value_parser = ["cpu", "ptx"])]
    target: String,
    /// The GPU architecture of `--target ptx` (sm_80: A100; sm_90: H100/H200).
    #[arg(long, value_name = "SM", default_value_t = 80, value_parser = clap::value_parser!(u32).range(50..=120))]
    sm: u32,
}

/// How a text graph (an edge list) is read.
#[derive(Args, Debug)]
struct GraphTextArgs {
    /// Node count of an edge-list graph (default: largest id + 1); ids must be below it.
    #[arg(long, value_name = "N")]
    num_nodes: Option<usize>,
    /// Read the first two columns of edge-list lines that have more (weights, timestamps; they must be
    /// numbers) instead of refusing them.
    #[arg(long)]
    ignore_extra_columns: bool,
}

impl GraphTextArgs {
    fn options(&self) -> tiga::EdgeListOptions {
        tiga::EdgeListOptions { num_nodes: self.num_nodes, ignore_extra_columns: self.ignore_extra_columns }
    }
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// Kernel file or `tigac compile` artifact (recognised by content).
    file: PathBuf,
    /// Explain only this kernel (default: every kernel).
    #[arg(long, value_name = "NAME")]
    kernel: Option<String>,
    /// Also say how this graph would be realized: a .gfg is paged (the page plan), any other graph is in memory.
    #[arg(long, value_name = "GRAPH")]
    graph: Option<PathBuf>,
    #[command(flatten)]
    text: GraphTextArgs,
    #[command(flatten)]
    paging: PagingArgs,
    /// Also compile the JIT variant for this feature width (every width symbol) and show what code
    /// generation chose: SIMD width, accumulators in registers, feature blocks.
    #[arg(long, value_name = "F", value_parser = clap::value_parser!(u32).range(1..=65536))]
    width: Option<u32>,
    /// The element type of that variant.
    #[arg(long, value_name = "TYPE", default_value = "f32", value_parser = ["f32", "f64"])]
    dtype: String,
    /// Also print how --graph would be sharded over R ranks (no MPI needed): per rank its rows, edges,
    /// ghosts and bytes per halo exchange (vector fields --width wide, default 1), and the edge cut.
    #[arg(long, value_name = "R", requires = "graph", value_parser = clap::value_parser!(u32).range(1..=65536))]
    ranks: Option<u32>,
    #[command(flatten)]
    sharding: ShardArgs,
    /// Also show the GPU schedule: `ptx` prints, per kernel and adjoint stage, threads per row, features per
    /// load, block size, and the registers and spills `ptxas -v` reports (where ptxas is found), for
    /// --width F (default 16) and --dtype.
    #[arg(long, value_name = "TARGET", default_value = "cpu", value_parser = ["cpu", "ptx"])]
    target: String,
    /// The GPU architecture of `--target ptx` (sm_80: A100; sm_90: H100/H200).
    #[arg(long, value_name = "SM", default_value_t = 80, value_parser = clap::value_parser!(u32).range(50..=120))]
    sm: u32,
}

#[derive(Args, Debug)]
struct ShardArgs {
    /// How rows are cut across ranks: contiguous blocks, blocks balanced by edges, or METIS (a tigac built
    /// with --features metis).
    /// Default: contiguous.
    #[arg(long, value_name = "HOW", value_parser = ["contiguous", "balanced", "metis"])]
    partition: Option<String>,
    /// Ghosts kept this many hops deep. Default: 1.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=255))]
    halo_depth: Option<u32>,
}

impl ShardArgs {
    fn partition(&self) -> String {
        self.partition.clone().unwrap_or_else(|| "contiguous".into())
    }

    fn halo_depth(&self) -> usize {
        self.halo_depth.map_or(1, |k| k as usize)
    }

    /// The first sharding flag given, as written (`--partition metis`):
    /// where no sharding happens, it is refused rather than ignored.
    fn given(&self) -> Option<String> {
        match (&self.partition, self.halo_depth) {
            (Some(p), _) => Some(format!("--partition {p}")),
            (None, Some(k)) => Some(format!("--halo-depth {k}")),
            (None, None) => None,
        }
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Kernel file or `tigac compile` artifact (recognised by content).
    file: PathBuf,
    /// The kernel to run.
    #[arg(long, value_name = "NAME")]
    kernel: String,
    /// Graph: a SNAP-style edge list (`src dst` per line), Matrix Market if it ends in .mtx, or a .gfg
    /// (`tigac convert`), which runs paged from disk; its stored fields are used for fields not given.
    #[arg(long, value_name = "GRAPH")]
    graph: PathBuf,
    #[command(flatten)]
    text: GraphTextArgs,
    /// A source-node field: NAME=FILE.npy, shape [N] or [N, F].
    #[arg(long = "src", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    src: Vec<Binding>,
    /// A destination-node field: NAME=FILE.npy, shape [N] or [N, F].
    #[arg(long = "dst", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    dst: Vec<Binding>,
    /// An edge field in the graph file's edge order: NAME=FILE.npy, shape [E] or [E, F].
    #[arg(long = "edge", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    edge: Vec<Binding>,
    /// A parameter: NAME=FILE.npy, shape [] or [1], [F], or [R, C].
    #[arg(long = "param", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    param: Vec<Binding>,
    /// Output file: FILE.npy for a kernel with one output, NAME=FILE.npy for each of several.
    #[arg(long = "out", value_name = "[NAME=]FILE.npy", value_parser = parse_out, required = true)]
    out: Vec<OutSpec>,
    /// Run the kernel this many times.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Print one JSON line on stdout: {"compile_ms", "run_ms_median", "runs"}, plus "vjp_ms_median" with --grads
    /// and "renumber_ms" with --renumber.
    #[arg(long)]
    timing: bool,
    /// Also compute gradients (the vector-Jacobian product) and write one .npy per input field into DIR
    /// (created if missing): src.NAME.npy, dst.NAME.npy, edge.NAME.npy (in the graph file's edge order),
    /// param.NAME.npy, each shaped like its input and in the inputs' dtype. Without --cotangent, a kernel
    /// with one output uses a cotangent of ones (the gradient of the sum of its output); a kernel with
    /// several outputs needs --cotangent NAME=FILE.npy for each.
    #[arg(long, value_name = "DIR")]
    grads: Option<PathBuf>,
    /// The cotangent (upstream gradient) of the output for --grads: FILE.npy for a kernel with one output,
    /// NAME=FILE.npy for each of several; shaped like the output, in the inputs' dtype.
    #[arg(long = "cotangent", value_name = "[NAME=]FILE.npy", value_parser = parse_out)]
    cotangent: Vec<OutSpec>,
    #[command(flatten)]
    paging: PagingArgs,
    /// Under `mpirun -n R` (R > 1; a tigac built with --features mpi) the run is sharded: each rank owns a
    /// block of rows, and rank 0 writes the files a single process would.
    #[command(flatten)]
    sharding: ShardArgs,
    /// Where the kernel runs: `cpu` (the default); `cuda` / `cuda:N` (an NVIDIA GPU; a tigac built with
    /// --features cuda); or `sim`, the PTX simulator: the GPU path (PTX, uploads, launches, paging) run on the
    /// CPU, slowly, for checking it on a machine without a GPU.
    #[arg(long, value_name = "DEVICE", default_value = "cpu", value_parser = Device::parse)]
    device: Device,
    /// Renumber the graph's nodes for cache locality (in memory; inputs, outputs and gradients stay in the
    /// file's numbering, and the numbers are bit-identical): `none` (the default), `degree` (highest degree
    /// first), `rcm` (reverse Cuthill-McKee) or `cluster` (label-propagation clusters). --timing adds
    /// "renumber_ms", the time to compute the order and build the renumbered graph (once; later calls reuse it).
    #[arg(long, value_name = "METHOD", default_value = "none", value_parser = tiga::Renumber::parse)]
    renumber: tiga::Renumber,
}

fn dispatch(command: Command) -> Result<(), report::Failure> {
    match command {
        Command::Compile(a) => {
            let ptx = match (a.target.as_str(), a.emit.contains(&compile::Stage::Ptx)) {
                ("ptx", _) => Some(a.sm),
                (_, true) => return Err(report::Failure::new("--emit ptx needs --target ptx")),
                _ => None,
            };
            compile::compile(&a.file, a.kernel.as_deref(), &a.emit, a.out.as_deref(), ptx)
        }
        Command::Explain(a) => {
            let dtype = if a.dtype == "f64" { tiga::DType::F64 } else { tiga::DType::F32 };
            let variant = a.width.map(|w| (w as usize, dtype));
            if let (None, Some(flag)) = (a.ranks, a.sharding.given()) {
                return Err(report::Failure::new(format!(
                    "{flag}: says how --ranks R would shard the graph; give --ranks (and --graph) or drop it"
                )));
            }
            let sharding = a.ranks.map(|r| explain::Sharding {
                ranks: r as usize,
                partition: a.sharding.partition(),
                depth: a.sharding.halo_depth(),
                width: a.width.map(|w| w as usize),
                dtype,
            });
            explain::explain(&explain::ExplainRequest {
                file: &a.file,
                kernel: a.kernel.as_deref(),
                graph: a.graph.as_deref(),
                edges: a.text.options(),
                paging: a.paging.page_args(),
                variant,
                sharding,
                gpu: (a.target == "ptx").then_some(a.sm),
            })
        }
        Command::Convert(a) => convert::convert(&convert::ConvertRequest {
            input: a.input,
            out: a.out,
            edges: a.text.options(),
            transpose: a.transpose,
            memory: a.memory,
            max_output: a.max_output,
            renumber: a.renumber,
        }),
        Command::Info(a) => info::info(&a.file),
        Command::Sample(a) => sample::sample(&sample::SampleRequest {
            graph: a.graph,
            edges: a.text.options(),
            seeds: a.seeds,
            fanout: a.fanout,
            weight: a.weight,
            seed: a.seed,
            out: a.out,
        }),
        Command::Serve(a) => serve::serve(serve::ServeRequest {
            graph: a.graph,
            partition: a.partition,
            features: a.features,
            splits: a.split,
            listen: a.listen,
            token_file: a.token_file,
            sessions: a.sessions,
            deadline_s: a.deadline,
        }),
        Command::Run(a) => {
            // A GPU that this build or this machine cannot open is refused
            // before anything is read.
            if let Device::Cuda(n) = a.device {
                if !tiga::runtime::gpu::CUDA_BUILT {
                    return Err(report::Failure::new(format!(
                        "--device cuda:{n}: this tigac was built without the `cuda` feature; rebuild with \
                         `cargo build --release -p tigac --features cuda` (or run on the CPU: --device cpu, the default)"
                    )));
                }
            }
            if a.device != Device::Cpu {
                tiga::runtime::gpu::open(a.device)
                    .map_err(|e| report::Failure::new(format!("--device {}: {e}", a.device.name())))?;
            }
            let fields = [(Role::Src, a.src), (Role::Dst, a.dst), (Role::Edge, a.edge), (Role::Param, a.param)]
                .into_iter()
                .flat_map(|(role, bs)| bs.into_iter().map(move |b| (role, b)))
                .collect();
            let req = run::RunRequest {
                file: a.file,
                kernel: a.kernel,
                graph: a.graph,
                edges: a.text.options(),
                fields,
                outs: a.out,
                repeat: a.repeat as usize,
                timing: a.timing,
                grads: a.grads,
                cotangents: a.cotangent,
                paging: a.paging.page_args(),
                partition: a.sharding.partition(),
                halo_depth: a.sharding.halo_depth(),
                device: a.device,
                renumber: a.renumber,
            };
            // Under mpirun with more than one rank, the run is sharded.
            match run_sharded::world()? {
                Some(_) if req.device != Device::Cpu => Err(report::Failure::new(format!(
                    "--device {}: sharded runs (under mpirun) run on the CPU; drop --device or run one process",
                    req.device.name()
                ))),
                Some(_) if req.renumber != tiga::Renumber::None => Err(report::Failure::new(format!(
                    "--renumber {}: sharded runs (under mpirun) keep the partition's own numbering; drop --renumber \
                     or run one process",
                    req.renumber.name()
                ))),
                Some(comm) => run_sharded::run(&req, comm),
                None => match a.sharding.given() {
                    Some(flag) => Err(report::Failure::new(format!(
                        "{flag}: applies to a sharded run only, and this is one process ({}); drop the flag, or run \
                         under `mpirun -n R` with R > 1",
                        run_sharded::why_one_process()
                    ))),
                    None => run::run(&req),
                },
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{f}");
            ExitCode::from(1)
        }
    }
}
