//! What a device keeps per lowered kernel: the loaded module and how to
//! launch it, keyed by everything the lowering depends on.

use std::any::Any;

use tiga_runtime::DType;

/// Everything a lowered module depends on: the kernel's content (its name
/// and a hash of its lowered IR, so two kernels with one name never share a
/// module), the dtype, the width symbols' values and the `sm_XX` target.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    pub kernel: String,
    pub dtype: DType,
    pub widths: Vec<usize>,
    pub sm: u32,
}

/// How a lowered kernel is launched: its entry, threads per block, and how
/// many threads share a destination row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryLaunch {
    pub entry: String,
    pub block: u32,
    pub threads_per_row: u32,
}

/// A module loaded on one device, with its launch shape.
#[derive(Debug)]
pub struct LoadedKernel {
    pub module: LoadedModule,
    pub launch: EntryLaunch,
}

impl LoadedKernel {
    pub(crate) fn new(module: LoadedModule, launch: EntryLaunch) -> LoadedKernel {
        LoadedKernel { module, launch }
    }
}

/// A module loaded on a device, with its entries.
pub struct LoadedModule {
    pub(crate) inner: Box<dyn Any + Send + Sync>,
    pub(crate) entries: Vec<String>,
}

impl std::fmt::Debug for LoadedModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LoadedModule({:?})", self.entries)
    }
}

impl LoadedModule {
    pub fn entries(&self) -> &[String] {
        &self.entries
    }
}
