//! Helpers shared by the `tigac` end-to-end tests: run the built binary in
//! a directory, check its exit and messages, write `.npy` inputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tiga::TensorView;
use tiga_storage::write_npy;

#[path = "../../../compiler/tests/common/rng.rs"]
mod rng;
#[allow(unused_imports)]
pub use rng::Rng;

pub const GNN: &str = include_str!("../../../examples/kernels/gnn.rs");

pub fn gnn_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels/gnn.rs")
}

pub fn tigac<S: AsRef<std::ffi::OsStr>>(dir: &Path, args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).current_dir(dir).args(args).output().expect("spawn tigac")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn ok(o: &Output) {
    assert!(o.status.success(), "tigac failed ({:?})\nstdout:\n{}\nstderr:\n{}", o.status, stdout(o), stderr(o));
}

/// A user error: exit 1, every key word in stderr, no panic.
#[track_caller]
pub fn fails_with(o: &Output, words: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "expected exit 1\nstdout:\n{}\nstderr:\n{err}", stdout(o));
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    for w in words {
        assert!(err.contains(w), "stderr lacks `{w}`:\n{err}");
    }
}

pub fn npy_f32(path: &Path, shape: &[usize], data: &[f32]) {
    write_npy(path, &TensorView::from_slice_f32(shape.to_vec(), data).expect("shape")).expect("write npy");
}
pub fn npy_f64(path: &Path, shape: &[usize], data: &[f64]) {
    write_npy(path, &TensorView::from_slice_f64(shape.to_vec(), data).expect("shape")).expect("write npy");
}
