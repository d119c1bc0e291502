//! `tigac explain --target ptx`: how each kernel and adjoint stage would
//! run on an NVIDIA GPU, from the PTX back end's own launch shape (threads
//! per row, features per load, block size) and, where `ptxas` is found,
//! what the assembler reports (registers per thread, spills): the numbers
//! that decide occupancy, so a user sees them before renting a GPU.

use std::path::Path;

use tiga::compiler::back::ptx::{lower_kernel, PtxKernel};
use tiga::{DType, Kernel};

use crate::compile::{adjoint_plans, ptx_units};
use crate::report::Failure;

/// The GPU schedule of `kernels` and their adjoint stages for `sm_<sm>`,
/// every width symbol `width`, in `dtype`.
pub fn report(kernels: &[Kernel], sm: u32, width: usize, dtype: DType) -> Result<String, Failure> {
    let plans = adjoint_plans(kernels)?;
    let ptxas = tiga_ptx::find_ptxas();
    let mut out = format!(
        "gpu schedule (sm_{sm}, {}, every width {width}; one module per kernel and adjoint stage, no atomics: each \
         row's edges are reduced by the threads of that row, in CSR order):\n",
        dtype.name()
    );
    match &ptxas {
        Some(p) => out.push_str(&format!(
            "  registers and spills from {} ({})\n",
            p.display(),
            tiga_ptx::ptxas_version(p).unwrap_or_else(|e| format!("version unknown: {e}"))
        )),
        None => out.push_str("  registers and spills: no ptxas found ($TIGA_PTXAS, PATH, or `pip install nvidia-cuda-nvcc`)\n"),
    }
    for (name, k) in ptx_units(kernels, &plans) {
        let lk = k.loop_kernel();
        let widths = vec![width; lk.widths.len()];
        let p = lower_kernel(lk, dtype, &widths, sm).map_err(|e| Failure::new(format!("`{name}`: {e}")))?;
        out.push_str(&format!("  {name}: {}", shape(&p, dtype)));
        if let Some(ptxas) = &ptxas {
            out.push_str(&format!("; {}", resources(ptxas, &p, sm)?));
        }
        out.push('\n');
    }
    Ok(out)
}

fn shape(p: &PtxKernel, dtype: DType) -> String {
    let size = if dtype == DType::F64 { 8 } else { 4 };
    let rows_per_block = p.block / p.threads_per_row;
    if p.threads_per_row == 1 {
        format!("entry {}, one thread per row, blocks of {} ({rows_per_block} rows per block)", p.entry, p.block)
    } else {
        format!(
            "entry {}, {} threads per row splitting its features, {} feature(s) per {}-byte load, blocks of {} \
             ({rows_per_block} rows per block)",
            p.entry,
            p.threads_per_row,
            p.vector,
            p.vector as usize * size,
            p.block
        )
    }
}

/// `ptxas -v`'s registers and spills for the module of `p`.
fn resources(ptxas: &Path, p: &PtxKernel, sm: u32) -> Result<String, Failure> {
    let dir = std::env::temp_dir().join(format!("tigac-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    let file = dir.join(format!("{}.ptx", p.entry));
    let result = std::fs::write(&file, p.module.print())
        .map_err(|e| format!("cannot write {}: {e}", file.display()))
        .and_then(|()| tiga_ptx::resources(ptxas, &file, sm));
    let _ = std::fs::remove_dir_all(&dir);
    let rs = result.map_err(|e| Failure::new(format!("ptxas refused the PTX of `{}`: {e}", p.entry)))?;
    let r = rs.iter().find(|r| r.function == p.entry).or(rs.first());
    Ok(match r {
        Some(r) => format!(
            "{} registers, {} B stack, {} B spill stores, {} B spill loads",
            r.registers, r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes
        ),
        None => "ptxas reported no function".to_string(),
    })
}
