//! What a device keeps per lowered kernel: the loaded module and how to
//! launch it, keyed by everything the lowering depends on.

use crate::DType;

use super::LoadedModule;

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
    pub(super) fn new(module: LoadedModule, launch: EntryLaunch) -> LoadedKernel {
        LoadedKernel { module, launch }
    }
}
