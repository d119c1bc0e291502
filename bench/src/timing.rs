//! What every benchmark shares: contenders timed side by side in rounds
//! ([`time_rounds`]), their medians, and the flags and exits of a
//! subcommand.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::hand;

/// Timed calls per peer measurement (after peers.py's warm-up), at most.
pub(crate) const PEER_REPEATS: usize = 3;

/// Warm-up calls untimed; see [`time`].
pub(crate) const WARM_UPS: usize = 3;

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// What a timed call produced: kept until the contender's next call and
/// dropped outside the clock (freeing a large output is not part of a call).
pub(crate) enum Produced {
    Outputs(tiga::Outputs),
    Grads(tiga::Gradients),
    Hand(hand::Out),
}

pub(crate) type Contender<'c> = Box<dyn FnMut() -> Result<Produced, String> + 'c>;

/// Times contenders for the same computation side by side: `WARM_UPS`
/// untimed rounds, then `repeat` timed rounds of one call each, in turn.
/// Returns each contender's median and last result. This machine's speed
/// drifts over minutes (the same in-memory stencil took 23 ms and 45 ms a
/// quarter of an hour apart), so contenders timed one after another in
/// blocks compared different weather; in rounds they share it, and their
/// ratios hold still when the absolute times do not.
pub(crate) fn time_rounds(repeat: usize, fs: &mut [Contender<'_>]) -> Result<Vec<(f64, Produced)>, String> {
    let mut last: Vec<Option<Produced>> = fs.iter().map(|_| None).collect();
    for _ in 0..WARM_UPS {
        for (f, l) in fs.iter_mut().zip(&mut last) {
            *l = Some(f()?);
        }
    }
    let mut times = vec![Vec::with_capacity(repeat); fs.len()];
    for _ in 0..repeat {
        for ((f, l), t) in fs.iter_mut().zip(&mut last).zip(&mut times) {
            let start = Instant::now();
            let r = f()?;
            t.push(start.elapsed().as_secs_f64() * 1e3);
            *l = Some(r);
        }
    }
    times.into_iter().zip(last).map(|(t, l)| Ok((median(t), l.ok_or("no call was timed")?))).collect()
}

/// A positive integer flag's value.
pub(crate) fn positive(s: &str) -> Result<usize, String> {
    s.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| format!("wants a positive integer, got `{s}`"))
}

/// The peers script of this checkout: `bench/peers/peers.py`, found from
/// the crate's directory (the benchmark carries its peers with it).
pub(crate) fn default_peers_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers").join("peers.py")
}

/// A subcommand's exit: success when every target was met, failure
/// (with the error on stderr, named by the subcommand) otherwise.
pub(crate) fn exit_code(subcommand: &str, result: Result<bool, String>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("tiga-bench {subcommand}: {e}");
            ExitCode::FAILURE
        }
    }
}
