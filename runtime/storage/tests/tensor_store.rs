//! Named tensors on disk (`storage::tensor_store`): spill, reattach (from another
//! store value and from another process), load and map, and refusal of
//! damaged files and bad names.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tiga_runtime::{DType, Tensor, TensorView};
use tiga_storage::{tensor_crc32, TensorStore, TensorStoreError};

/// Set in a child process: the directory to spill into (through
/// `TIGA_SPILL_DIR`), or `process` to use the per-process store.
const CHILD_ENV: &str = "TIGA_TEST_TENSOR_STORE_CHILD";

fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.data() {
        tiga_runtime::Data::F32(d) => d.iter().map(|x| u64::from(x.to_bits())).collect(),
        tiga_runtime::Data::F64(d) => d.iter().map(|x| x.to_bits()).collect(),
        tiga_runtime::Data::F16(d) => d.iter().map(|x| u64::from(x.to_bits())).collect(),
        tiga_runtime::Data::BF16(d) => d.iter().map(|x| u64::from(x.to_bits())).collect(),
    }
}

fn samples() -> Vec<(&'static str, Tensor)> {
    let f32s: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
    let mut specials = vec![0.0f64, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE / 4.0, 1e300];
    specials.push(f64::from_bits(0x7ff8_0000_dead_beef)); // a NaN with a payload
    let f64s: Vec<f64> = (0..3 * 77).map(|i| i as f64 / 7.0 - 11.0).collect();
    vec![
        ("f32-1d", Tensor::from_f32([1000], f32s.clone()).expect("f32 1-D")),
        ("f32-2d", Tensor::from_f32([250, 4], f32s).expect("f32 2-D")),
        ("f64-1d", Tensor::from_f64([specials.len()], specials).expect("f64 1-D")),
        ("f64-2d", Tensor::from_f64([77, 3], f64s).expect("f64 2-D")),
        ("empty", Tensor::from_f32([0, 5], vec![]).expect("empty")),
        ("scalar", Tensor::from_f64(Vec::<usize>::new(), vec![2.5]).expect("scalar")),
    ]
}

#[test]
fn round_trip_load_and_map() {
    let dir = tmpdir();
    let store = TensorStore::at(dir.path()).expect("store");
    for (name, t) in samples() {
        let h = store.spill(name, &t.view()).expect("spill");
        assert_eq!((h.name(), h.shape(), h.dtype(), h.len()), (name, t.shape(), t.dtype(), t.len()));
        assert_eq!(h.crc32(), tensor_crc32(t.data()), "{name}: the handle's checksum is the data's");
        assert_eq!(h.path(), dir.path().join(format!("{name}.tensor")));
        let back = h.load().expect("load");
        assert_eq!(back.shape(), t.shape());
        assert_eq!(bits(&back), bits(&t), "{name}: load is bit-identical");
        let mapped = h.view_mapped().expect("map");
        mapped.verify().expect("mapped checksum");
        let v = mapped.view();
        assert_eq!(v.shape(), t.shape());
        assert_eq!(bits(&v.to_tensor()), bits(&t), "{name}: the map is bit-identical");
    }
    let mut want: Vec<&str> = samples().iter().map(|(n, _)| *n).collect();
    want.sort();
    assert_eq!(store.names().expect("names"), want);
    // No temporary file is left behind.
    let stray: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(stray.is_empty(), "stray temporary files: {stray:?}");
}

#[test]
fn reattach_from_a_second_store_value() {
    let dir = tmpdir();
    let a = TensorStore::at(dir.path()).expect("store a");
    let mut handles = Vec::new();
    for (name, t) in samples() {
        handles.push((a.spill(name, &t.view()).expect("spill"), t));
    }
    let b = TensorStore::at(dir.path()).expect("store b");
    for (h, t) in &handles {
        let r = b.reattach(h.name()).expect("reattach");
        assert_eq!(&r, h, "the reattached handle describes the same tensor");
        assert_eq!(bits(&r.load().expect("load")), bits(t));
        let lazy = b.reattach_lazy(h.name()).expect("lazy reattach");
        assert_eq!(&lazy, h);
    }
    // Replacing a tensor: the new handle reads the new data, the old handle
    // notices the file changed, and a map of the old file keeps its data.
    let old = &handles[0].0;
    let old_map = old.view_mapped().expect("map the old file");
    let new = Tensor::from_f64([2], vec![1.0, 2.0]).expect("tensor");
    let h2 = b.spill(old.name(), &new.view()).expect("replace");
    assert_eq!(bits(&b.reattach(old.name()).expect("reattach").load().expect("load")), bits(&new));
    assert!(matches!(old.load(), Err(TensorStoreError::Changed { .. })), "{:?}", old.load());
    assert_eq!(bits(&old_map.view().to_tensor()), bits(&handles[0].1));
    assert_eq!(h2.dtype(), DType::F64);
    // Remove.
    b.remove(old.name()).expect("remove");
    assert!(!a.contains(old.name()));
    assert!(matches!(a.reattach(old.name()), Err(TensorStoreError::Missing { .. })));
    assert!(matches!(a.remove(old.name()), Err(TensorStoreError::Missing { .. })));
    assert_eq!(old_map.view().len(), handles[0].1.len(), "an unlinked file's map stays valid");
}

#[test]
fn missing_name_is_a_clear_error() {
    let dir = tmpdir();
    let store = TensorStore::at(dir.path()).expect("store");
    store.spill("present", &TensorView::from(&[1.0f32, 2.0][..])).expect("spill");
    let e = store.reattach("absent").expect_err("missing");
    let msg = e.to_string();
    assert!(matches!(e, TensorStoreError::Missing { .. }), "{e:?}");
    assert!(msg.contains("no tensor named `absent`") && msg.contains("present"), "{msg}");
}

#[test]
fn bad_names_are_refused() {
    let dir = tmpdir();
    let store = TensorStore::at(dir.path()).expect("store");
    let v = TensorView::from(&[1.0f32][..]);
    let long = "x".repeat(201);
    for bad in ["", "a/b", "/abs", "..", "../up", "a..b", "a\\b", ".", "nul\0x", "tab\tx", long.as_str()] {
        let e = store.spill(bad, &v).expect_err("a bad name is refused");
        assert!(matches!(e, TensorStoreError::BadName { .. }), "{bad:?}: {e:?}");
        assert!(matches!(store.reattach(bad), Err(TensorStoreError::BadName { .. })), "{bad:?}");
        assert!(matches!(store.remove(bad), Err(TensorStoreError::BadName { .. })), "{bad:?}");
    }
    for good in ["x".repeat(200).as_str(), "layer.3.weight", ".hidden", "ünïcode name", "a-b_c"] {
        store.spill(good, &v).unwrap_or_else(|e| panic!("{good:?}: {e}"));
        store.reattach(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
    }
    assert_eq!(store.names().expect("names").len(), 5);
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 5, "everything stayed inside the directory");
}

fn spill_one(dir: &Path) -> (TensorStore, Tensor, PathBuf) {
    let store = TensorStore::at(dir).expect("store");
    let t = Tensor::from_f64([64, 3], (0..192).map(|i| f64::from(i) * 1.25 - 3.0).collect()).expect("tensor");
    let h = store.spill("t", &t.view()).expect("spill");
    (store, t, h.path().to_path_buf())
}

#[test]
fn truncated_files_are_refused() {
    let dir = tmpdir();
    let (store, _t, path) = spill_one(dir.path());
    let full = std::fs::read(&path).expect("read");
    // Every strict prefix, the empty file included: a clear error, never a panic.
    for len in (0..full.len()).step_by(7).chain([0, 1, 8, 63, 64, full.len() - 1]) {
        std::fs::write(&path, &full[..len]).expect("truncate");
        let e = store.reattach("t").expect_err("a truncated file is refused");
        assert!(matches!(e, TensorStoreError::Truncated { .. }), "prefix of {len} bytes: {e:?}");
        assert!(e.to_string().contains("truncated"), "{e}");
    }
    // Trailing bytes are refused too.
    let mut longer = full.clone();
    longer.extend_from_slice(&[0; 8]);
    std::fs::write(&path, &longer).expect("extend");
    assert!(matches!(store.reattach("t"), Err(TensorStoreError::Corrupt { .. })));
    // A handle whose file was truncated after the fact refuses to load or map.
    std::fs::write(&path, &full).expect("restore");
    let h = store.reattach("t").expect("intact again");
    std::fs::write(&path, &full[..full.len() - 8]).expect("truncate");
    assert!(matches!(h.load(), Err(TensorStoreError::Truncated { .. })));
    assert!(matches!(h.view_mapped(), Err(TensorStoreError::Truncated { .. })));
}

#[test]
fn flipped_bytes_are_refused() {
    let dir = tmpdir();
    let (store, t, path) = spill_one(dir.path());
    let full = std::fs::read(&path).expect("read");
    let data_offset = full.len() - t.len() * 8;
    for at in 0..full.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = full.clone();
            b[at] ^= bit;
            std::fs::write(&path, &b).expect("write");
            let r = store.reattach("t");
            // Padding between the name and the data is not covered by a
            // checksum: flipping it changes nothing that is read.
            let descriptor_end = 64 + 2 * 8 + "t".len();
            let in_padding = at >= descriptor_end && at < data_offset;
            if in_padding {
                continue;
            }
            let e = r.expect_err("a flipped byte is refused");
            assert!(
                matches!(
                    e,
                    TensorStoreError::Checksum { .. }
                        | TensorStoreError::BadMagic { .. }
                        | TensorStoreError::UnsupportedVersion { .. }
                ),
                "byte {at} ^ {bit:#x}: {e:?}"
            );
            // The lazy reattach catches a data flip at load, not at open.
            if at >= data_offset {
                let h = store.reattach_lazy("t").expect("the header is intact");
                assert!(matches!(h.load(), Err(TensorStoreError::Checksum { what: "the data", .. })));
                let m = h.view_mapped().expect("map");
                assert!(matches!(m.verify(), Err(TensorStoreError::Checksum { .. })));
            }
        }
    }
    std::fs::write(&path, &full).expect("restore");
    assert_eq!(bits(&store.reattach("t").expect("intact").load().expect("load")), bits(&t));
}

#[test]
fn a_file_under_another_name_is_refused() {
    let dir = tmpdir();
    let (store, _t, path) = spill_one(dir.path());
    std::fs::copy(&path, dir.path().join("u.tensor")).expect("copy");
    let e = store.reattach("u").expect_err("holds `t`");
    assert!(e.to_string().contains("holds tensor `t`, not `u`"), "{e}");
    std::fs::write(dir.path().join("v.tensor"), b"not a tensor at all, just some text").expect("write");
    assert!(matches!(store.reattach("v"), Err(TensorStoreError::BadMagic { .. })));
}

/// The child's values: a function of the index both sides compute.
fn child_values() -> Vec<f32> {
    (0..4096).map(|i| (i as f32).sqrt() - 7.5).collect()
}

/// Runs only in a child process (`CHILD_ENV` set): spills a tensor and
/// exits. With `process`, uses the per-process store and prints its path.
#[test]
fn child_spiller() {
    let Some(mode) = std::env::var_os(CHILD_ENV) else { return };
    let v = child_values();
    let t = TensorView::from_slice_f32([64, 64], &v).expect("view");
    if mode == "process" {
        let store = TensorStore::process().expect("process store");
        assert_eq!(TensorStore::process().expect("again").dir(), store.dir(), "one directory per process");
        store.spill("from-child", &t).expect("spill");
        println!("\nPROCESS_DIR={}", store.dir().display());
    } else {
        // `from_env` reads TIGA_SPILL_DIR, which the parent set.
        let store = TensorStore::from_env().expect("store from the environment");
        assert_eq!(store.dir(), Path::new(&mode));
        store.spill("from-child", &t).expect("spill");
    }
}

fn run_child(mode: &Path, spill_dir: Option<&Path>) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args(["child_spiller", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match spill_dir {
        Some(d) => cmd.env("TIGA_SPILL_DIR", d),
        None => cmd.env_remove("TIGA_SPILL_DIR"),
    };
    let out = cmd.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn another_process_spills_and_this_one_reattaches() {
    let dir = tmpdir();
    let spill = dir.path().join("spill");
    run_child(&spill, Some(&spill));
    let store = TensorStore::at(&spill).expect("store");
    assert_eq!(store.names().expect("names"), vec!["from-child".to_string()]);
    let h = store.reattach("from-child").expect("reattach");
    assert_eq!((h.shape(), h.dtype()), (&[64usize, 64][..], DType::F32));
    let v = child_values();
    assert_eq!(h.crc32(), tensor_crc32(tiga_runtime::Data::F32(&v)));
    assert_eq!(h.load().expect("load").as_f32(), Some(&v[..]));
    let m = h.view_mapped().expect("map");
    assert_eq!(m.view().data(), tiga_runtime::Data::F32(&v));
}

#[test]
fn the_process_store_is_removed_at_exit() {
    let stdout = run_child(Path::new("process"), None);
    let dir = stdout
        .lines()
        .find_map(|l| l.split_once("PROCESS_DIR=").map(|(_, d)| d.trim()))
        .unwrap_or_else(|| panic!("the child printed no directory: {stdout}"));
    assert!(dir.contains("tiga-spill-"), "the per-process directory is named after tiga: {dir}");
    assert!(!Path::new(dir).exists(), "{dir} outlived the process that made it");
}

/// Damaged snapshot manifests (mutations of a real one, and random bytes)
/// are errors that name the file, never a panic; a good one still opens.
#[test]
fn damaged_snapshot_manifests_are_errors() {
    let dir = tmpdir();
    let store = TensorStore::at(dir.path()).expect("store");
    let a = Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]).expect("a");
    let b = Tensor::from_f64(vec![2, 2], vec![0.5; 4]).expect("b");
    store.save_snapshot("ck", &[("a", a.view()), ("b", b.view())]).expect("save");
    let manifest = dir.path().join("ck.snapshot");
    let good = std::fs::read(&manifest).expect("read");
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut errors = 0;
    for round in 0..600 {
        let bytes: Vec<u8> = match round % 3 {
            // A flipped byte.
            0 => {
                let mut m = good.clone();
                let i = next() as usize % m.len();
                m[i] ^= 1 << (next() % 8);
                m
            }
            // Cut short.
            1 => good[..next() as usize % good.len()].to_vec(),
            // Random bytes, sometimes behind the right first line.
            _ => {
                let mut m: Vec<u8> = if next() % 2 == 0 { b"tiga-snapshot 1\n".to_vec() } else { Vec::new() };
                m.extend((0..next() % 200).map(|_| next() as u8));
                m
            }
        };
        std::fs::write(&manifest, &bytes).expect("write");
        match store.open_snapshot("ck") {
            Ok(s) => {
                // Only a manifest that still names real members opens.
                for (name, t) in s.members() {
                    assert!(name == "a" || name == "b", "opened a member named {name:?}");
                    t.load().expect("a member that opens loads");
                }
            }
            Err(e) => {
                errors += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    assert!(errors > 300, "only {errors} of 600 damaged manifests were refused");
    std::fs::write(&manifest, &good).expect("restore");
    assert_eq!(store.open_snapshot("ck").expect("good again").len(), 2);
}
