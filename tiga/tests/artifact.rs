//! Artifacts are read as untrusted files: a checksum catches an edit, and
//! every handle of every region is checked before anything indexes with it,
//! so a damaged artifact is an error naming what is wrong, never a panic.

use tiga::Kernel;

const GNN: &str = include_str!("../../examples/kernels/gnn.rs");

fn saved(names: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let kernels: Vec<Kernel> = names.iter().map(|n| Kernel::from_source(GNN, n).expect("kernel")).collect();
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("k.tiga");
    tiga::artifact::save(&path, &kernels.iter().collect::<Vec<_>>()).expect("save");
    let text = std::fs::read_to_string(&path).expect("read");
    (dir, path, text)
}

/// The artifact with `edit` applied to its parsed JSON and written back
/// without a checksum (as a file from before checksums, which loads), so
/// that only the verifier stands in the way.
fn edited(text: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(text).expect("json");
    v.as_object_mut().expect("object").remove("checksum");
    edit(&mut v);
    serde_json::to_string(&v).expect("json")
}

/// The error of loading `text`, which must be refused.
fn refused(path: &std::path::Path, text: &str) -> String {
    match tiga::artifact::parse(path, text) {
        Ok(_) => panic!("accepted: {}", &text[..text.len().min(200)]),
        Err(e) => e.to_string(),
    }
}

#[test]
fn an_edited_constant_fails_the_checksum() {
    let (_d, path, text) = saved(&["Smoothing", "GcnNorm"]);
    assert!(text.contains("\"checksum\":\"crc32:"), "{}", &text[..120]);
    assert_eq!(tiga::artifact::parse(&path, &text).expect("loads").len(), 2);
    // Smoothing's 0.25 becomes 0.75: still valid IR, a different kernel.
    assert!(text.contains("0.25"));
    let bad = text.replacen("0.25", "0.75", 1);
    let e = refused(&path, &bad);
    assert!(e.contains("checksum mismatch") && e.contains("k.tiga"), "{e}");
    // A flipped digit of the checksum itself is caught the same way.
    let e = refused(&path, &text.replacen("\"crc32:", "\"crc32:f", 1));
    assert!(e.contains("checksum mismatch"), "{e}");
    // Without the checksum (files from before checksums) the edit loads:
    // the checksum is what catches it.
    let unchecked = edited(&bad, |_| {});
    assert!(tiga::artifact::parse(&path, &unchecked).is_ok());
}

#[test]
fn every_out_of_range_handle_is_refused_not_indexed() {
    let (_d, path, text) = saved(&["Smoothing", "GatAttention", "MaxPool", "Top2Sum"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    // Every region of every kernel (captured and lowered) that has values.
    let mut regions = Vec::new();
    for k in 0..4 {
        for ir in ["captured", "lowered"] {
            for r in [
                "edge",
                "node",
                "reducer/identity",
                "reducer/combine",
                "segment/init",
                "segment/step",
                "segment/finish",
                "segment/pre_step",
            ] {
                let region = format!("/kernels/{k}/{ir}/{r}");
                let values = v.pointer(&format!("{region}/nodes")).and_then(|n| n.as_array()).map_or(0, |n| n.len());
                let outputs = v.pointer(&format!("{region}/outputs")).and_then(|o| o.as_array()).map_or(0, |o| o.len());
                if outputs > 0 {
                    regions.push((region, values));
                }
            }
        }
    }
    assert!(regions.len() >= 20, "{regions:?}");
    for (region, values) in &regions {
        // An output past the end of the region's values.
        let bad = edited(&text, |v| {
            if let Some(o) = v.pointer_mut(&format!("{region}/outputs/0")) {
                *o = serde_json::json!(values + 5);
            }
        });
        let e = refused(&path, &bad);
        assert!(e.contains(&format!("%{}", values + 5)) && e.contains("fails verification"), "{region}: {e}");
    }
    // An operand naming a later value: the last value of each region with
    // an operand made to name itself.
    let mut bad_operands = 0;
    for (region, values) in &regions {
        let last = v.pointer(&format!("{region}/nodes/{}", values - 1)).expect("node");
        // Operations with operands are objects (`{"Binary": ["Add", 3, 4]}`);
        // a constant's number is its value, not a handle.
        let Some(op) = last.get("op").and_then(|o| o.as_object()) else { continue };
        if op.contains_key("Const") {
            continue;
        }
        let bad = edited(&text, |v| {
            let Some(op) = v.pointer_mut(&format!("{region}/nodes/{}/op", values - 1)).and_then(|o| o.as_object_mut()) else {
                return;
            };
            for x in op.values_mut() {
                match x {
                    serde_json::Value::Array(a) => {
                        if let Some(first) = a.iter_mut().find(|e| e.is_number()) {
                            *first = serde_json::json!(values + 7);
                        }
                    }
                    n @ serde_json::Value::Number(_) => *n = serde_json::json!(values + 7),
                    _ => {}
                }
            }
        });
        if bad == edited(&text, |_| {}) {
            continue;
        }
        let e = refused(&path, &bad);
        assert!(e.contains("fails verification"), "{region}: {e}");
        bad_operands += 1;
    }
    assert!(bad_operands >= 5, "{bad_operands}");
}

/// Every number in `v`, as a JSON pointer.
fn numbers(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Number(_) => out.push(at),
        serde_json::Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| numbers(x, format!("{at}/{i}"), out)),
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| numbers(x, format!("{at}/{k}"), out)),
        _ => {}
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Numbers of a valid artifact replaced (handles, ids, widths,
        /// constants), its checksum dropped: loading is an error or a
        /// kernel that runs, never a panic.
        #[test]
        fn artifacts_with_numbers_changed(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), prop::sample::select(vec![0i64, 1, 2, 3, 7, 64, 65535, -1, 4_294_967_295])), 1..4),
        ) {
            let (_d, path, text) = saved(&["Smoothing", "MaxPool"]);
            let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
            v.as_object_mut().expect("object").remove("checksum");
            let mut at = Vec::new();
            numbers(&v["kernels"], "/kernels".into(), &mut at);
            for (i, n) in &edits {
                if let Some(x) = v.pointer_mut(&at[i.index(at.len())]) {
                    *x = serde_json::json!(n);
                }
            }
            let text = serde_json::to_string(&v).expect("json");
            let loaded = std::panic::catch_unwind(|| tiga::artifact::parse(&path, &text).map(|ks| ks.len()));
            prop_assert!(loaded.is_ok(), "loading panicked: {}", text);
        }
    }
}
