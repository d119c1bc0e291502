//! The facade's error: everything that can go wrong between a kernel's
//! text and its outputs, with the runtime's and the compiler's errors as
//! typed sources.

use tiga_compiler::ir;
use tiga_runtime::DType;

/// Everything that can go wrong between a kernel's text and its outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Front(FrontDiagnostic),
    #[error(transparent)]
    Pass(#[from] tiga_compiler::passes::PassError),
    #[error(transparent)]
    LoopSchedule(#[from] tiga_compiler::loops::ScheduleError),
    #[error(transparent)]
    Back(#[from] tiga_compiler::back::cranelift::BackError),
    #[error(transparent)]
    Bind(#[from] tiga_compiler::bind::BindError),
    #[error(transparent)]
    Verify(#[from] ir::VerifyError),
    #[error(transparent)]
    Interp(#[from] tiga_compiler::interp::InterpError),
    /// What a call asks of this kernel or realization is not supported;
    /// the message says what would do.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// A cotangent that does not fit the kernel's outputs.
    #[error(transparent)]
    Cotangent(#[from] CotangentError),
    /// A tensor scope refused (a tier over its budget, a name unknown or
    /// taken).
    #[error("{0}")]
    Scope(String),
    #[error("offloading a graph over the RAM budget: {source}")]
    Offload {
        #[source]
        source: tiga_storage::GfgError,
    },
    /// The adjoint of this kernel could not be built (generate-adjoint, or
    /// one of its stages' passes, refused it).
    #[error("{0}")]
    Adjoint(String),
    /// A sharded call's exchange or plan failed (a peer gone, a message
    /// malformed, ranks that disagree).
    #[error("sharded: {0}")]
    Shard(tiga_dist::shard::ShardError),
    /// A broken promise inside tiga (a bug, never the input's fault).
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Tensor(#[from] tiga_runtime::TensorError),
    #[error(transparent)]
    Gfg(#[from] tiga_storage::GfgError),
    #[error(transparent)]
    TensorStore(#[from] tiga_storage::TensorStoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact {path}: {message}")]
    Artifact { path: String, message: String },
    #[error(transparent)]
    Graph(#[from] tiga_runtime::GraphError),
    /// A renumbering the schedule asked for that this graph cannot take.
    #[error(transparent)]
    Renumber(#[from] tiga_runtime::RenumberError),
    /// A GPU (or the simulator) refused: no driver, no such device, a
    /// copy or launch that failed, a budget too small.
    #[error(transparent)]
    Gpu(#[from] tiga_device::GpuError),
    /// The PTX back end does not lower this kernel (yet): the call is
    /// refused rather than run on the CPU behind the caller's back.
    #[error("kernel `{kernel}` cannot run on the GPU: {source}")]
    GpuLowering {
        kernel: String,
        #[source]
        source: tiga_compiler::back::ptx::PtxError,
    },
    /// The rows could not run: memory for outputs, a page of a file, a
    /// worker.
    #[error(transparent)]
    Exec(#[from] tiga_runtime::exec::ExecError),
    /// A schedule setting (from the environment) that does not parse.
    #[error(transparent)]
    Schedule(#[from] tiga_runtime::ScheduleError),
    #[error("no kernel named `{name}`{hint}")]
    UnknownKernel { name: String, hint: String },
    #[error("no gradient for {role} field `{name}`")]
    NoGradient { role: &'static str, name: String },
    #[error("cannot add tensors of different dtypes or shapes: {left} and {right}")]
    TensorMismatch { left: String, right: String },
    #[error("no output `{name}` (the outputs: {outputs})")]
    NoOutput { name: String, outputs: String },
    #[error("output `{name}` is {dtype}, not {wanted}")]
    OutputDtype { name: String, wanted: DType, dtype: DType },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a backward's cotangents fail to fit the kernel's outputs: each
/// output needs one, shaped like it and in the call's dtype, and no other
/// is taken.
#[derive(Debug, thiserror::Error)]
pub enum CotangentError {
    #[error("cotangent for `{name}`, but kernel `{kernel}` has outputs: {outputs}")]
    NoSuchOutput { name: String, kernel: String, outputs: String },
    #[error("missing the cotangent of output `{name}`{}", shape.as_ref().map(|s| format!(" (shape {s:?})")).unwrap_or_default())]
    Missing { name: String, shape: Option<Vec<usize>> },
    #[error("the cotangent of output `{name}` has shape {got:?}, expected {expected:?}")]
    Shape { name: String, got: Vec<usize>, expected: Vec<usize> },
    #[error("the cotangent of output `{name}` is {got}, but the inputs are {dtype}")]
    Dtype { name: String, got: DType, dtype: DType },
    /// On a sharded graph: neither the whole array nor this rank's rows.
    #[error(transparent)]
    Rows(tiga_dist::shard::ShardError),
}

/// A front-end error in a kernel's source: where and what. (The compiler's
/// own error also carries a proc-macro span, which cannot cross threads.)
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct FrontDiagnostic {
    pub message: String,
    /// 1-based line.
    pub line: u32,
    /// 0-based column.
    pub col: u32,
}

impl From<tiga_compiler::front::FrontError> for Error {
    fn from(e: tiga_compiler::front::FrontError) -> Error {
        Error::Front(FrontDiagnostic { message: e.message, line: e.line, col: e.col })
    }
}

impl From<tiga_storage::scope::ScopeError> for Error {
    fn from(e: tiga_storage::scope::ScopeError) -> Self {
        match e {
            tiga_storage::scope::ScopeError::Refused(m) => Error::Scope(m),
            tiga_storage::scope::ScopeError::Store(e) => Error::TensorStore(e),
        }
    }
}

impl From<tiga_storage::offload::OffloadError> for Error {
    fn from(e: tiga_storage::offload::OffloadError) -> Self {
        use tiga_storage::offload::OffloadError as E;
        match e {
            E::Graph(e) => Error::Graph(e),
            E::Io { what, source } => Error::Io { what, source },
            E::Write { source } => Error::Offload { source },
            E::Open(e) => Error::Gfg(e),
        }
    }
}

/// What a call asks that this kernel or realization does not do, each
/// with what would do instead.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "kernel `{kernel}` has half-precision fields or outputs in this call ({storage}); {what} calls take f32 and f64 \
         only (half-precision fields run over a graph or stencil in memory)"
    )]
    HalfStorage { kernel: String, storage: String, what: &'static str },
    #[error(
        "the schedule asks for the ahead-of-time back end, but kernel `{kernel}` has no ahead-of-time variant for {dtype} \
         at widths {widths:?}{stencil}{half}",
        stencil = if *.on_stencil { " on a generated stencil" } else { "" },
        half = match .half_storage { Some(s) => format!(" with half-width storage ({s})"), None => String::new() }
    )]
    NoAotVariant { kernel: String, dtype: DType, widths: Vec<usize>, on_stencil: bool, half_storage: Option<String> },
    #[error("kernel `{kernel}` reads edge fields; a generated stencil has none (build the CSR with Graph::stencil)")]
    StencilEdgeFields { kernel: String },
    #[error(
        "kernel `{kernel}` writes edge outputs, which a generated stencil has no edge ids for: run it on the CSR \
         realization (Graph::stencil)"
    )]
    StencilEdgeOutputs { kernel: String },
    #[error("a generated stencil needs rows > 0 and cols > 0")]
    EmptyStencil,
    #[error("a {rows}x{cols} stencil is too large for this machine")]
    StencilTooLarge { rows: u64, cols: u64 },
    #[error("parameter outputs are not supported on generated stencils yet")]
    StencilParamOutputs,
    #[error(
        "this kernel's backward reads each row's degree, edge ranks or winning edges, which a generated stencil does not \
         build: run it on the CSR realization (Graph::stencil)"
    )]
    StencilBackward,
    #[error("prepare_device wants a GPU device (cuda:N or sim), not the CPU")]
    NotADevice,
    #[error("this tape was written by another kernel's forward, not `{kernel}`'s: differentiate the kernel that ran it")]
    OtherKernelsTape { kernel: String },
    /// A winner scatter whose ranks do not fit the dtype exactly.
    #[error(transparent)]
    Scatter(tiga_runtime::exec::ScatterError),
    /// What a shard cannot hold or do (a scalar field, a field of the
    /// wrong rows, an edge field with a deep halo, half precision, a deep
    /// shard's tape, an iteration that does not fit).
    #[error(transparent)]
    Shard(tiga_dist::shard::ShardError),
}

impl From<tiga_runtime::exec::ScatterError> for Error {
    fn from(e: tiga_runtime::exec::ScatterError) -> Self {
        use tiga_runtime::exec::ScatterError as E;
        match e {
            E::InexactRanks => Error::Unsupported(Unsupported::Scatter(e)),
            E::Alloc(e) => Error::from(e),
            E::Internal(m) => Error::Internal(m),
        }
    }
}

impl From<tiga_dist::shard::ShardError> for Error {
    fn from(e: tiga_dist::shard::ShardError) -> Self {
        use tiga_dist::shard::ShardError as E;
        match e {
            E::ScalarField { .. }
            | E::FieldRows { .. }
            | E::DeepEdgeField { .. }
            | E::HalfCall { .. }
            | E::DeepTape { .. }
            | E::IterateNotSquare
            | E::IterateNoField { .. }
            | E::IterateMismatch { .. } => Error::Unsupported(Unsupported::Shard(e)),
            E::CotangentRows { .. } => Error::Cotangent(CotangentError::Rows(e)),
            E::Half(_) | E::Lost(_) => Error::Internal(e.to_string()),
            e => Error::Shard(e),
        }
    }
}

/// An error back from a runtime layer: the facade's own (a call the layer
/// ran again), or the layer's, each typed as if it had come directly.
impl From<tiga_runtime::BoxError> for Error {
    fn from(e: tiga_runtime::BoxError) -> Self {
        macro_rules! typed {
            ($e:ident, $($t:ty),*) => {
                $(let $e = match $e.downcast::<$t>() {
                    Ok(e) => return Error::from(*e),
                    Err(e) => e,
                };)*
            };
        }
        let e = match e.downcast::<Error>() {
            Ok(e) => return *e,
            Err(e) => e,
        };
        typed!(
            e,
            tiga_dist::shard::ShardError,
            tiga_runtime::RenumberError,
            tiga_runtime::exec::ExecError,
            tiga_runtime::exec::ScatterError,
            tiga_runtime::TensorError,
            tiga_runtime::GraphError
        );
        Error::Internal(e.to_string())
    }
}
