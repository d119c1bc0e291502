//! How a call runs, as a plain value passed with the call: threads, the
//! page plan of a graph read from disk, read-ahead, the back end, the RAM
//! budget and where spilled outputs go. A schedule changes when and where
//! work happens, never the kernel and never the numbers.
//!
//! The library reads no environment variable. A program that wants the
//! `TIGA_*` variables asks for them with [`Schedule::from_env`] (`tigac`
//! does), which parses them with the same rules, and the same errors, as
//! `tigac`'s flags.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Rows per page when a schedule names neither rows nor bytes.
pub const DEFAULT_PAGE_ROWS: usize = 1_000_000;
/// Pages read ahead when a schedule does not say.
pub const DEFAULT_PREFETCH: usize = 2;

/// The environment variables [`Schedule::from_env`] reads.
pub const PAGE_ROWS_ENV: &str = "TIGA_PAGED_PAGE_ROWS";
pub const PREFETCH_ENV: &str = "TIGA_PAGED_PREFETCH_DEPTH";
pub const RAM_BUDGET_ENV: &str = "TIGA_GRAPH_RAM_BUDGET";
pub const SPILL_DIR_ENV: &str = "TIGA_SPILL_DIR";

/// Which back end runs a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The macro's ahead-of-time variant when it compiled one for the
    /// call's dtype and widths, else the Cranelift JIT. On a generated
    /// stencil, the macro's stencil variant (kernels with scalar values
    /// per row, where it measured as fast as the JIT's or faster; see
    /// `tiga::STENCIL_AUTO_AOT`), else the JIT's.
    #[default]
    Auto,
    /// The ahead-of-time variant, or an error saying there is none.
    Aot,
    /// The Cranelift JIT, even where an ahead-of-time variant exists.
    Jit,
    /// The f64 reference interpreter (slow; for checking).
    Reference,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Aot => "aot",
            Backend::Jit => "jit",
            Backend::Reference => "reference",
        }
    }
}

/// Where a call's kernels run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU back ends ([`Backend`] picks which).
    #[default]
    Cpu,
    /// CUDA GPU number N (a build with the `cuda` feature, a driver and
    /// that GPU; otherwise the call is an error saying which is missing).
    Cuda(u32),
    /// The PTX simulator: the GPU path (lowering to PTX, uploads, launches,
    /// downloads, partial sums, paging) run on the CPU, one simulated
    /// thread at a time. Slow; it exists to check that path on machines
    /// without a GPU.
    Simulated,
}

impl Device {
    /// `cpu`, `cuda:N` or `sim` (what `tigac run --device` takes).
    pub fn name(self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Cuda(n) => format!("cuda:{n}"),
            Device::Simulated => "sim".into(),
        }
    }

    /// Parse [`Device::name`]'s forms (`cuda` is `cuda:0`).
    pub fn parse(s: &str) -> Result<Device, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "sim" => Ok(Device::Simulated),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<u32>) {
                Some(Ok(n)) => Ok(Device::Cuda(n)),
                _ => Err(format!("`{s}`: expected cpu, cuda, cuda:N (a GPU's index) or sim (the PTX simulator)")),
            },
        }
    }
}

/// How a call renumbers the nodes of an in-memory graph for cache locality
/// (`tigac run --renumber`). Invisible to the caller: fields go into the
/// new numbering on the way in and outputs and gradients come back in the
/// caller's, edge fields keep the caller's edge order, and every row keeps
/// its edges in their order, so the numbers are bit-identical to the
/// un-renumbered call's (see `crate::renumber` and `docs/renumbering.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Renumber {
    /// The caller's numbering.
    #[default]
    None,
    /// By degree (in plus out), highest first, ties in the caller's order:
    /// the sources most rows read sit together in cache.
    Degree,
    /// Reverse Cuthill–McKee over the graph with its edges taken both ways:
    /// neighbours get nearby ids (for mesh-like graphs out of order).
    Rcm,
    /// By clusters from label propagation (Raghavan, Albert and Kumara,
    /// 2007), clusters in the order of their first node, a cluster's nodes
    /// in the caller's order.
    Cluster,
}

impl Renumber {
    /// `none`, `degree`, `rcm` or `cluster` (what `--renumber` takes).
    pub fn name(self) -> &'static str {
        match self {
            Renumber::None => "none",
            Renumber::Degree => "degree",
            Renumber::Rcm => "rcm",
            Renumber::Cluster => "cluster",
        }
    }

    /// Parse [`Renumber::name`]'s forms.
    pub fn parse(s: &str) -> Result<Renumber, String> {
        match s {
            "none" => Ok(Renumber::None),
            "degree" => Ok(Renumber::Degree),
            "rcm" => Ok(Renumber::Rcm),
            "cluster" => Ok(Renumber::Cluster),
            _ => Err(format!("`{s}`: expected none, degree, rcm or cluster")),
        }
    }

    /// Every method, `None` first.
    pub const ALL: [Renumber; 4] = [Renumber::None, Renumber::Degree, Renumber::Rcm, Renumber::Cluster];

    /// The method's number in a `.gfg`'s `node_order_method` section
    /// (`none` is 0, and never stored). Written out, not derived from a
    /// list's order: the numbers are part of the file format.
    pub fn code(self) -> u32 {
        match self {
            Renumber::None => 0,
            Renumber::Degree => 1,
            Renumber::Rcm => 2,
            Renumber::Cluster => 3,
        }
    }

    /// [`Renumber::code`]'s inverse; `None` for a number no method has.
    pub fn from_code(code: u32) -> Option<Renumber> {
        match code {
            0 => Some(Renumber::None),
            1 => Some(Renumber::Degree),
            2 => Some(Renumber::Rcm),
            3 => Some(Renumber::Cluster),
            _ => None,
        }
    }
}

/// Device time that a call's launches took, as events measured it, added
/// up across the calls that share this value (`tigac run --timing` reports
/// it as `kernel_ms`). Shared state, like [`Progress`], so that a
/// [`Schedule`] stays a plain value.
#[derive(Clone, Debug, Default)]
pub struct DeviceTimer(Arc<std::sync::Mutex<DeviceTimes>>);

/// What a [`DeviceTimer`] has added up.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DeviceTimes {
    /// Milliseconds between the events around each launch, summed.
    pub kernel_ms: f64,
    pub launches: u64,
    /// Bytes copied between host and device.
    pub copied_bytes: u64,
}

impl DeviceTimer {
    pub fn new() -> DeviceTimer {
        DeviceTimer::default()
    }
    pub fn times(&self) -> DeviceTimes {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub fn add(&self, kernel_ms: f64, launches: u64, copied_bytes: u64) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.kernel_ms += kernel_ms;
        t.launches += launches;
        t.copied_bytes += copied_bytes;
    }
    /// Start again from zero.
    pub fn reset(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = DeviceTimes::default();
    }
}

impl PartialEq for DeviceTimer {
    fn eq(&self, other: &DeviceTimer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// How a call runs. `Schedule::default()` is what a call without one gets:
/// every thread of the current rayon pool, pages of a million rows, two
/// pages read ahead, the fastest back end, no RAM budget.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    /// Worker threads (`None`: the current rayon pool).
    pub threads: Option<usize>,
    /// Destination rows per page of a graph read in pages (default
    /// [`DEFAULT_PAGE_ROWS`]).
    pub page_rows: Option<usize>,
    /// Or: the most bytes of column indices and edge ids per page.
    pub page_bytes: Option<usize>,
    /// Pages read ahead (default [`DEFAULT_PREFETCH`]); 0 reads each page
    /// when it is needed.
    pub prefetch: Option<usize>,
    pub backend: Backend,
    /// Outputs with a row per row that are together larger than this go to
    /// file-backed tensors (`None`: the innermost `with_ram_budget`, else
    /// no budget).
    pub ram_budget: Option<u64>,
    /// Where those spilled outputs go (default: the system's temporary
    /// directory).
    pub spill_dir: Option<PathBuf>,
    /// Where paged calls count the rows they have finished, for a program
    /// that shows progress (`None`: not counted).
    pub progress: Option<Progress>,
    /// Where the kernels run (default: the CPU).
    pub device: Device,
    /// The most bytes of device memory a GPU call uses: its resident fields
    /// plus two page slots, pages cut to fit (`None`: most of the device's
    /// free memory; the simulator's 1 GiB).
    pub device_budget: Option<u64>,
    /// Where GPU calls add up their launches' event times (`None`: not
    /// timed).
    pub device_timer: Option<DeviceTimer>,
    /// How an in-memory graph's nodes are renumbered for locality (default:
    /// not at all).
    pub renumber: Renumber,
    /// A forward that will be differentiated keeps what its backward
    /// needs (`Kernel::forward` writes the residuals into its tape, and the
    /// backward from that tape reads them instead of refolding every row);
    /// default off: the forward writes its outputs alone and the backward
    /// recomputes. The residuals are row outputs of the forward, counted
    /// with its outputs against the RAM budget.
    pub residuals: bool,
}

/// A count of the destination rows a call's page streams have finished,
/// out of the rows they have announced, shared between the call and
/// whoever watches it (`tigac run` draws it as a bar). A call over a file
/// announces each stream's rows when the stream starts and counts a page's
/// rows when its work is done, so a backward (several streams, one per
/// adjoint stage) raises the total as its stages begin. In-memory calls do
/// not count: they do not run long enough to watch.
///
/// It is shared state rather than a callback so that a [`Schedule`] stays a
/// plain value (`Clone`, comparable: two schedules are equal when they
/// share one count) and the workers never call into the watcher's code.
#[derive(Clone, Debug, Default)]
pub struct Progress(Arc<ProgressCounts>);

#[derive(Debug, Default)]
struct ProgressCounts {
    done: AtomicU64,
    total: AtomicU64,
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }
    /// Rows finished and rows announced so far.
    pub fn rows(&self) -> (u64, u64) {
        (self.0.done.load(Ordering::Relaxed), self.0.total.load(Ordering::Relaxed))
    }
    /// A stream of `rows` rows begins.
    pub fn announce(&self, rows: u64) {
        self.0.total.fetch_add(rows, Ordering::Relaxed);
    }
    /// `rows` more rows are finished.
    pub fn advance(&self, rows: u64) {
        self.0.done.fetch_add(rows, Ordering::Relaxed);
    }
}

impl PartialEq for Progress {
    fn eq(&self, other: &Progress) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One line: every setting, defaults spelled out (what `tigac explain`
/// prints as the schedule a call runs with).
impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.threads {
            Some(n) => write!(f, "threads {n}")?,
            None => write!(f, "threads {} (the rayon pool)", rayon::current_num_threads())?,
        }
        match self.page_bytes {
            Some(b) => write!(f, ", pages of at most {b} bytes of adjacency")?,
            None => write!(f, ", pages of {} rows", self.rows_per_page())?,
        }
        write!(f, ", prefetch {}, back end {}", self.prefetch_depth(), self.backend.name())?;
        match self.ram_budget {
            Some(b) => write!(f, ", RAM budget {b} bytes")?,
            None => write!(f, ", no RAM budget")?,
        }
        match &self.spill_dir {
            Some(d) => write!(f, ", spill directory {}", d.display())?,
            None => write!(f, ", spill directory: the system's temporary directory")?,
        }
        if self.renumber != Renumber::None {
            write!(f, ", renumbered by {}", self.renumber.name())?;
        }
        if self.residuals {
            write!(f, ", forward keeps residuals")?;
        }
        if self.device != Device::Cpu {
            write!(f, ", device {}", self.device.name())?;
            if let Some(b) = self.device_budget {
                write!(f, " (budget {b} bytes)")?;
            }
        }
        Ok(())
    }
}

/// A schedule setting that does not parse: which, the value, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {rule}")]
pub struct ScheduleError {
    pub name: String,
    pub value: String,
    pub rule: String,
}

impl Schedule {
    pub fn new() -> Schedule {
        Schedule::default()
    }
    pub fn threads(mut self, n: usize) -> Schedule {
        self.threads = Some(n);
        self
    }
    pub fn page_rows(mut self, n: usize) -> Schedule {
        self.page_rows = Some(n);
        self
    }
    pub fn page_bytes(mut self, n: usize) -> Schedule {
        self.page_bytes = Some(n);
        self
    }
    pub fn prefetch(mut self, depth: usize) -> Schedule {
        self.prefetch = Some(depth);
        self
    }
    pub fn backend(mut self, b: Backend) -> Schedule {
        self.backend = b;
        self
    }
    pub fn ram_budget(mut self, bytes: u64) -> Schedule {
        self.ram_budget = Some(bytes);
        self
    }
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> Schedule {
        self.spill_dir = Some(dir.into());
        self
    }
    pub fn progress(mut self, progress: Progress) -> Schedule {
        self.progress = Some(progress);
        self
    }
    pub fn device(mut self, device: Device) -> Schedule {
        self.device = device;
        self
    }
    pub fn device_budget(mut self, bytes: u64) -> Schedule {
        self.device_budget = Some(bytes);
        self
    }
    pub fn device_timer(mut self, timer: DeviceTimer) -> Schedule {
        self.device_timer = Some(timer);
        self
    }
    pub fn renumber(mut self, method: Renumber) -> Schedule {
        self.renumber = method;
        self
    }
    pub fn residuals(mut self, keep: bool) -> Schedule {
        self.residuals = keep;
        self
    }

    /// Pages read ahead.
    pub fn prefetch_depth(&self) -> usize {
        self.prefetch.unwrap_or(DEFAULT_PREFETCH)
    }

    /// Rows per page, when the plan goes by rows.
    pub fn rows_per_page(&self) -> usize {
        self.page_rows.unwrap_or(DEFAULT_PAGE_ROWS).max(1)
    }

    /// The page plan over a graph with these row offsets, `edge_bytes`
    /// bytes of adjacency per edge: by bytes when the schedule says so,
    /// else by rows.
    pub fn plan(&self, offsets: &[u64], edge_bytes: usize) -> Vec<Range<usize>> {
        match self.page_bytes {
            Some(b) => plan_bytes(offsets, edge_bytes, b),
            None => plan_rows(offsets.len().saturating_sub(1), self.rows_per_page()),
        }
    }

    /// The schedule the `TIGA_*` environment variables describe, over the
    /// default: `TIGA_PAGED_PAGE_ROWS` (rows per page, a positive integer),
    /// `TIGA_PAGED_PREFETCH_DEPTH` (pages read ahead, 0 or more),
    /// `TIGA_GRAPH_RAM_BUDGET` (bytes, with an optional K, M, G or T suffix
    /// in powers of 1024; at least 1) and `TIGA_SPILL_DIR` (a directory).
    /// A variable that is unset or empty is not set; one that does not parse
    /// is an error naming it, never ignored.
    pub fn from_env() -> Result<Schedule, ScheduleError> {
        Schedule::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// [`Schedule::from_env`] over any source of variables (for tests, and
    /// for tools that keep settings elsewhere).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Schedule, ScheduleError> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut s = Schedule::default();
        if let Some(v) = get(PAGE_ROWS_ENV) {
            s.page_rows = Some(parse_count(PAGE_ROWS_ENV, &v, 1)?);
        }
        if let Some(v) = get(PREFETCH_ENV) {
            s.prefetch = Some(parse_count(PREFETCH_ENV, &v, 0)?);
        }
        if let Some(v) = get(RAM_BUDGET_ENV) {
            s.ram_budget = Some(parse_bytes(&v).map_err(|rule| ScheduleError { name: RAM_BUDGET_ENV.into(), value: v, rule })?);
        }
        if let Some(v) = get(SPILL_DIR_ENV) {
            s.spill_dir = Some(PathBuf::from(v));
        }
        Ok(s)
    }
}

/// An integer of at least `min` (`usize`).
fn parse_count(name: &str, v: &str, min: usize) -> Result<usize, ScheduleError> {
    let rule = if min == 0 { "wants an integer, 0 or more" } else { "wants a positive integer" }.to_string();
    v.trim().parse::<usize>().ok().filter(|&n| n >= min).ok_or_else(|| ScheduleError {
        name: name.to_string(),
        value: v.to_string(),
        rule,
    })
}

/// Bytes, with an optional binary suffix (`K`/`KiB`, `M`/`MiB`, `G`/`GiB`,
/// `T`/`TiB`, powers of 1024; case-insensitive), at least 1: the rule of
/// `TIGA_GRAPH_RAM_BUDGET` and of `tigac convert --memory`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("`{s}` is not a byte count; expected e.g. 4096, 512M, 1G"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("unknown unit `{other}` in `{s}`; use K, M, G or T (powers of 1024)")),
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes == 0 {
        return Err("a byte budget must be at least 1 byte".into());
    }
    Ok(bytes)
}

/// A page plan by rows alone: `rows_per_page` rows a page (at least one).
pub fn plan_rows(num_rows: usize, rows_per_page: usize) -> Vec<Range<usize>> {
    let rows = rows_per_page.max(1);
    (0..num_rows).step_by(rows).map(|s| s..(s + rows).min(num_rows)).collect()
}

/// A page plan by adjacency bytes: each page as many rows as keep its
/// edges' bytes (`edge_bytes` per edge) within `budget`, and at least one
/// row.
pub fn plan_bytes(offsets: &[u64], edge_bytes: usize, budget: usize) -> Vec<Range<usize>> {
    let n = offsets.len().saturating_sub(1);
    let budget = budget.max(1);
    let mut pages = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && ((offsets[end + 1] - offsets[start]) as usize).saturating_mul(edge_bytes) <= budget {
            end += 1;
        }
        pages.push(start..end);
        start = end;
    }
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn environment_values_follow_the_flag_rules() {
        let s = Schedule::from_vars(vars(&[
            (PAGE_ROWS_ENV, "100"),
            (PREFETCH_ENV, "0"),
            (RAM_BUDGET_ENV, "3M"),
            (SPILL_DIR_ENV, "spill"),
        ]))
        .expect("valid");
        assert_eq!(s, Schedule::new().page_rows(100).prefetch(0).ram_budget(3 << 20).spill_dir("spill"));
        // Zero rows per page is refused, as `--page-rows 0` is; junk is an
        // error, never ignored.
        for (name, v) in
            [(PAGE_ROWS_ENV, "0"), (PAGE_ROWS_ENV, "ten"), (PREFETCH_ENV, "-1"), (RAM_BUDGET_ENV, "0"), (RAM_BUDGET_ENV, "5Q")]
        {
            let e = Schedule::from_vars(vars(&[(name, v)])).expect_err(v);
            assert_eq!((e.name.as_str(), e.value.as_str()), (name, v));
        }
        // Unset and empty are the default.
        assert_eq!(Schedule::from_vars(vars(&[(PAGE_ROWS_ENV, " ")])).expect("empty"), Schedule::default());
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("1"), Ok(1));
        assert_eq!(parse_bytes("2K"), Ok(2048));
        assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_bytes("1t"), Ok(1 << 40));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert!(parse_bytes("99999999999T").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn plans_cover_rows_once() {
        let offsets = [0u64, 3, 3, 10, 11];
        assert_eq!(Schedule::new().page_rows(3).plan(&offsets, 4), vec![0..3, 3..4]);
        // 12 bytes a page at 4 bytes an edge: rows while at most 3 edges.
        assert_eq!(Schedule::new().page_bytes(12).plan(&offsets, 4), vec![0..2, 2..3, 3..4]);
        assert_eq!(Schedule::new().plan(&offsets, 4), vec![0..4]);
    }
}
