//! The PTX back end's `exp`, `ln`, `tanh` and `sigmoid` (built from
//! round-to-nearest operations, `back::ptx::math`), run by the PTX
//! simulator over dense sweeps of each function's domain, against the
//! correctly rounded result: the f64 function rounded to f32 for f32, and
//! for f64 the host's libm (itself within 1 ulp). The bounds asserted are
//! the ones the module documents.

use tiga_compiler::back::ptx::lower_kernel;
use tiga_compiler::front::parse_kernel_file;
use tiga_compiler::ir::DType;
use tiga_compiler::loops::schedule;
use tiga_compiler::passes::run_pipeline;
use tiga_ptx::sim::{launch, Arg, LaunchConfig, Memory};

fn kernel(f: &str) -> String {
    format!(
        "#[message_passing(reduce = sum)]\npub mod K {{\n use tiga::lang::*;\n pub struct Src {{ pub x: f32, }}\n \
         pub fn edge(src: &Src) -> f32 {{ {f}(src.x) }}\n}}\n"
    )
}

/// `f(x)` for every `x` by the lowered kernel over the identity graph
/// (one edge i → i per row, so the sum is the one value).
fn run(f: &str, dtype: DType, xs: &[f64]) -> Vec<f64> {
    let ks = parse_kernel_file(&kernel(f)).expect("parses");
    let c = run_pipeline(ks[0].clone()).expect("passes");
    let lk = schedule(&c.lowered).expect("schedule");
    let p = lower_kernel(&lk, dtype, &[], 80).expect("lowers");
    let n = xs.len();
    let mut mem = Memory::new();
    let off: Vec<u8> = (0..=n as u64).flat_map(|x| x.to_le_bytes()).collect();
    let cols: Vec<u8> = (0..n as u32).flat_map(|x| x.to_le_bytes()).collect();
    let (size, data): (usize, Vec<u8>) = match dtype {
        DType::F32 => (4, xs.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect()),
        DType::F64 => (8, xs.iter().flat_map(|&x| x.to_le_bytes()).collect()),
    };
    let mut put = |bytes: &[u8]| {
        let at = mem.alloc(bytes.len());
        mem.write(at, bytes).expect("write");
        at
    };
    let (o, c, x) = (put(&off), put(&cols), put(&data));
    let out = mem.alloc(n * size);
    let args = [Arg::U64(o), Arg::U64(c), Arg::U64(x), Arg::U64(out), Arg::U32(n as u32)];
    launch(&p.module, &p.entry, LaunchConfig { grid: 64, block: p.block }, &args, &mut mem).expect("simulates");
    let mut bytes = vec![0u8; n * size];
    mem.read(out, &mut bytes).expect("read");
    match dtype {
        DType::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64).collect(),
        DType::F64 => bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8"))).collect(),
    }
}

/// Distance in units in the last place of `expected` (in `dtype`).
fn ulps(dtype: DType, got: f64, expected: f64) -> f64 {
    let expected = if dtype == DType::F32 { expected as f32 as f64 } else { expected };
    if got == expected || (got.is_nan() && expected.is_nan()) {
        return 0.0;
    }
    if got.is_nan() || expected.is_nan() || got.is_infinite() || expected.is_infinite() {
        return f64::INFINITY;
    }
    match dtype {
        DType::F32 => {
            let e = expected as f32;
            let ulp = (f32::from_bits(e.abs().to_bits() + 1) - e.abs()).max(f32::from_bits(1)) as f64;
            (got - e as f64).abs() / ulp
        }
        DType::F64 => {
            let ulp = (f64::from_bits(expected.abs().to_bits() + 1) - expected.abs()).max(f64::from_bits(1));
            (got - expected).abs() / ulp
        }
    }
}

fn sweep(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    (0..n).map(|i| lo + (hi - lo) * i as f64 / (n - 1) as f64).collect()
}

/// The correctly rounded function; sigmoid is the CPU back ends' formula
/// `1 / (1 + exp(-x))` evaluated in the dtype (so that, in f32, where
/// exp(-x) overflows the result is 0 on every back end).
fn reference(f: &str, dtype: DType, x: f64) -> f64 {
    match (f, dtype) {
        ("exp", _) => x.exp(),
        ("ln", _) => x.ln(),
        ("tanh", _) => x.tanh(),
        (_, DType::F32) => (1.0f32 / (1.0f32 + (-x).exp() as f32)) as f64,
        _ => 1.0 / (1.0 + (-x).exp()),
    }
}

fn check(f: &str, bound: f64, xs: Vec<f64>) {
    for dtype in [DType::F32, DType::F64] {
        let xs: Vec<f64> = if dtype == DType::F32 { xs.iter().map(|&x| x as f32 as f64).collect() } else { xs.clone() };
        let got = run(f, dtype, &xs);
        let mut worst = (0.0, 0.0);
        for (&x, &g) in xs.iter().zip(&got) {
            let u = ulps(dtype, g, reference(f, dtype, x));
            if u > worst.0 {
                worst = (u, x);
            }
        }
        eprintln!("{f} {dtype}: max {:.3} ulp (at x = {:e}) over {} inputs", worst.0, worst.1, xs.len());
        assert!(worst.0 <= bound, "{f} {dtype}: {} ulp at x = {:e} (bound {bound})", worst.0, worst.1);
    }
}

fn specials() -> Vec<f64> {
    vec![0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-40, -1e-40, 1e-310, 5e-324]
}

#[test]
fn exp_within_2_ulp() {
    let mut xs = sweep(-110.0, 90.0, 40_001);
    xs.extend(sweep(-1.0, 1.0, 20_001));
    xs.extend(sweep(-750.0, 712.0, 20_001));
    xs.extend(specials());
    check("exp", 2.0, xs);
}

#[test]
fn ln_within_2_ulp() {
    let mut xs = sweep(0.0, 4.0, 40_001);
    xs.extend((0..4000).map(|i| 10f64.powf(-320.0 + 0.16 * i as f64)));
    xs.extend(sweep(-1.0, 0.0, 11));
    xs.extend(specials());
    check("ln", 2.0, xs);
}

#[test]
fn tanh_within_4_ulp() {
    let mut xs = sweep(-25.0, 25.0, 40_001);
    xs.extend(sweep(-1.2, 1.2, 20_001));
    xs.extend((0..400).map(|i| 10f64.powf(-300.0 + 0.75 * i as f64)));
    xs.extend(specials());
    check("tanh", 4.0, xs);
}

#[test]
fn sigmoid_within_4_ulp() {
    let mut xs = sweep(-100.0, 100.0, 40_001);
    xs.extend(sweep(-2.0, 2.0, 20_001));
    xs.extend(specials());
    check("sigmoid", 4.0, xs);
}
