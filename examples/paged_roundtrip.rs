//! The paged giant-graph round trip: a graph saved to disk, run from there
//! in pages, and its result spilled under a name and reattached.
//!
//! 1. Build a 1000×1000 four-neighbour stencil (1M nodes, 4M edges) and a
//!    field `x` (a hot square on a cold plate), and save both as a `.gfg`
//!    file in a temporary directory.
//! 2. Reopen it with `GfgFile::open` (reads the header and manifest only)
//!    and run 5 Jacobi steps (`Smoothing` from `examples/kernels/gnn.rs`)
//!    with `run` over the `GfgFile` in 100k-row pages, prefetching 2 pages: the first
//!    step reads `x` from the file's own field, each later step feeds the
//!    previous output back as `x`.
//! 3. Run the same 5 steps in memory (`Kernel::run` on the `Graph`) and
//!    require bit-identical results after every step.
//! 4. Spill the result under a name in a `TensorStore` (`TIGA_SPILL_DIR`
//!    when set, so it outlives this process; else a directory in the
//!    temporary one), reattach it by name from a fresh store value on the
//!    same directory (which checks the file's checksums), and compare the
//!    checksum and the values, loaded and memory-mapped.
//!
//! Prints what it checked; exits non-zero on any mismatch.
//!
//! ```sh
//! cargo run --release --example paged_roundtrip
//! ```

use std::time::Instant;

use tiga::runtime::storage::{FieldRole, GfgFile, TensorStore};
use tiga::runtime::{save_gfg, tensor_crc32};
use tiga::{Data, Graph, Inputs, Schedule, Tensor};

mod gnn {
    use tiga::message_passing;
    include!("kernels/gnn.rs");
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn f32s(t: &Tensor) -> Res<&[f32]> {
    t.as_f32().ok_or_else(|| "expected an f32 tensor".into())
}

/// Index and values of the first element whose bits differ.
fn first_difference(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    if a.len() != b.len() {
        return Some((a.len().min(b.len()), f32::NAN, f32::NAN));
    }
    a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()).map(|i| (i, a[i], b[i]))
}

fn main() -> Res<()> {
    let (n, steps, page_rows, prefetch) = (1000usize, 5usize, 100_000usize, 2usize);
    let dir = tempfile::tempdir()?;
    let gfg_path = dir.path().join("stencil.gfg");

    // 1. Build and save.
    let t = Instant::now();
    let graph = Graph::stencil_2d_4(n, n)?;
    let x0: Vec<f32> = (0..n * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            if (400..600).contains(&r) && (400..600).contains(&c) {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    save_gfg(&gfg_path, &graph, false, &[(FieldRole::Src, "x", (&x0).into())])?;
    let bytes = std::fs::metadata(&gfg_path)?.len();
    println!(
        "saved: {n}x{n} stencil, {} nodes, {} edges, with field src.x, as {} ({:.1} MiB) in {:.0} ms",
        graph.num_dst(),
        graph.num_edges(),
        gfg_path.display(),
        bytes as f64 / (1 << 20) as f64,
        ms(t)
    );

    // 2. Reopen and run paged.
    let file = GfgFile::open(&gfg_path)?;
    let fields: Vec<String> = file.fields().iter().map(|f| format!("{}.{} {:?}", f.role, f.name, f.shape)).collect();
    println!(
        "opened: format {}.{}, {} nodes, {} edges, fields [{}] (manifest only)",
        file.version().0,
        file.version().1,
        file.num_dst(),
        file.num_edges(),
        fields.join(", ")
    );
    let kernel = gnn::Smoothing::kernel();
    let opts = Schedule::new().page_rows(page_rows).prefetch(prefetch);
    let pages = opts.plan(file.offsets()?, 4).len();

    let mut paged: Vec<Tensor> = Vec::with_capacity(steps);
    let t = Instant::now();
    for step in 0..steps {
        let outs = match paged.last() {
            // Step 1: `x` is the file's own field, read lazily.
            None => kernel.run_with(&file, &Inputs::new(), &opts)?,
            Some(prev) => kernel.run_with(&file, &Inputs::new().src("x", prev), &opts)?,
        };
        paged.push(outs.out().ok_or_else(|| format!("step {step}: no output"))?.clone());
    }
    let paged_ms = ms(t);

    // 3. The same steps in memory.
    let mut memory: Vec<Tensor> = Vec::with_capacity(steps);
    let t = Instant::now();
    for step in 0..steps {
        let x = memory.last().map(|p| p.view()).unwrap_or_else(|| (&x0).into());
        let outs = kernel.run(&graph, &Inputs::new().src("x", x))?;
        memory.push(outs.out().ok_or_else(|| format!("step {step}: no output"))?.clone());
    }
    let memory_ms = ms(t);
    for (step, (p, m)) in paged.iter().zip(&memory).enumerate() {
        if let Some((i, a, b)) = first_difference(f32s(p)?, f32s(m)?) {
            return Err(format!("step {}: paged and in-memory differ at node {i}: {a:e} vs {b:e}", step + 1).into());
        }
    }
    let result = paged.last().ok_or("no steps")?;
    let heat: f64 = f32s(result)?.iter().map(|&v| f64::from(v)).sum();
    println!(
        "checked: {steps} Jacobi steps paged ({pages} pages of {page_rows} rows, prefetch {prefetch}; {paged_ms:.0} ms) \
         and in memory ({memory_ms:.0} ms) are bit-identical after every step (total heat {heat:.3})"
    );

    // 4. Spill under a name, reattach from a fresh store value.
    // The library reads no environment variable; a program that wants the
    // `TIGA_*` ones asks for them.
    let spill_dir = Schedule::from_env()?.spill_dir.unwrap_or_else(|| dir.path().join("spill"));
    let name = "jacobi.step5";
    let expected_crc = tensor_crc32(result.data());
    let spilled = TensorStore::at(&spill_dir)?.spill(name, &result.view())?;
    println!(
        "spilled: `{name}` {} {:?} to {} (crc32 {:08x})",
        spilled.dtype(),
        spilled.shape(),
        spilled.path().display(),
        spilled.crc32()
    );
    let store = TensorStore::at(&spill_dir)?;
    let back = store.reattach(name)?;
    if back.crc32() != expected_crc || spilled.crc32() != expected_crc {
        return Err(format!(
            "checksum mismatch: result {expected_crc:08x}, spilled {:08x}, reattached {:08x}",
            spilled.crc32(),
            back.crc32()
        )
        .into());
    }
    if back.shape() != result.shape() || back.dtype() != result.dtype() {
        return Err(
            format!("reattached {} {:?}, spilled {} {:?}", back.dtype(), back.shape(), result.dtype(), result.shape()).into()
        );
    }
    let loaded = back.load()?;
    if let Some((i, a, b)) = first_difference(f32s(&loaded)?, f32s(result)?) {
        return Err(format!("the reattached tensor differs at {i}: {a:e} vs {b:e}").into());
    }
    let mapped = back.view_mapped()?;
    let Data::F32(mapped_values) = mapped.view().data() else {
        return Err("the mapped tensor is not f32".into());
    };
    if let Some((i, a, b)) = first_difference(mapped_values, f32s(result)?) {
        return Err(format!("the mapped tensor differs at {i}: {a:e} vs {b:e}").into());
    }
    println!(
        "checked: reattached `{name}` by name from a fresh store on {}: crc32 {:08x} verified against the file and \
         the in-memory result; loaded and memory-mapped values bit-identical ({} values); the store holds {:?}",
        spill_dir.display(),
        back.crc32(),
        loaded.len(),
        store.names()?
    );
    Ok(())
}
