//! `tiga-bench compile-time`: how compile time grows with kernel size.
//!
//! A kernel file whose `edge` returns one chain of N terms
//! (`src.x * 1 + src.x * 2 + ...`, N up to the front end's limit of
//! [`tiga::compiler::front::MAX_CHAIN`]) is compiled the way `tigac compile`
//! does: the front end (`parse_kernel_file`), then the passes and the loop
//! scheduler (`Kernel::from_ir`). Each size is compiled `--repeat` times
//! and the median kept, split into front end and the rest, with the time
//! per term: flat per-term times mean linear growth. The table goes to
//! stdout, the JSON to `--json` (written atomically).
//!
//! ```sh
//! cargo run --release -p tiga-bench -- compile-time [--terms 1000,2000,5000,10000] [--repeat 5]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use serde_json::json;
use tiga::compiler::front::parse_kernel_file;
use tiga::Kernel;

/// `tiga-bench compile-time`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Kernel sizes in terms, comma-separated
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1000,2000,5000,10000", value_parser = crate::timing::positive)]
    terms: Vec<usize>,
    /// Compiles per size; the median is reported
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = crate::timing::positive)]
    repeat: usize,
    /// Where the JSON goes, written atomically
    #[arg(long, value_name = "PATH", default_value = "target/bench/compile-time.json")]
    json: PathBuf,
}

/// A kernel file of one kernel whose message is a chain of `terms` terms.
pub fn chain_kernel(terms: usize) -> String {
    let chain: Vec<String> = (1..=terms).map(|i| format!("src.x * {i}.0")).collect();
    format!(
        "#[message_passing(reduce = sum)]\npub mod Chain {{\n    pub struct Src {{\n        pub x: f32,\n    }}\n    pub fn edge(src: &Src) -> f32 {{\n        {}\n    }}\n}}\n",
        chain.join(" + ")
    )
}

/// Front end and remaining pipeline, in milliseconds, for one compile.
fn compile_once(source: &str) -> Result<(f64, f64), String> {
    let t0 = Instant::now();
    let captured = parse_kernel_file(source).map_err(|e| e.to_string())?;
    let t1 = Instant::now();
    for k in captured {
        Kernel::from_ir(k).map_err(|e| e.to_string())?;
    }
    let t2 = Instant::now();
    Ok(((t1 - t0).as_secs_f64() * 1e3, (t2 - t1).as_secs_f64() * 1e3))
}

pub fn main(args: &Args) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tiga-bench compile-time: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    println!("{:>8}  {:>10}  {:>10}  {:>10}  {:>12}", "terms", "front ms", "passes ms", "total ms", "us per term");
    let mut rows = Vec::new();
    for &n in &args.terms {
        let source = chain_kernel(n);
        let mut front = Vec::new();
        let mut rest = Vec::new();
        for _ in 0..args.repeat {
            let (f, r) = compile_once(&source).map_err(|e| format!("{n} terms: {e}"))?;
            front.push(f);
            rest.push(r);
        }
        let (f, r) = (crate::timing::median(front), crate::timing::median(rest));
        let per_term_us = (f + r) * 1e3 / n as f64;
        println!("{n:>8}  {f:>10.1}  {r:>10.1}  {:>10.1}  {per_term_us:>12.2}", f + r);
        rows.push(json!({ "terms": n, "front_ms": f, "passes_ms": r, "total_ms": f + r, "us_per_term": per_term_us }));
    }
    let doc = json!({ "benchmark": "compile-time", "kernel": "one chain of N terms (src.x * i + ...)", "repeat": args.repeat, "rows": rows });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    crate::report::write_atomic(&args.json, &text)?;
    println!("wrote {}", args.json.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_kernel_compiles() {
        let (front, rest) = compile_once(&chain_kernel(50)).expect("compiles");
        assert!(front >= 0.0 && rest >= 0.0);
    }
}
