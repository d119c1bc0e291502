#!/usr/bin/env bash
# Builds, on a machine with cargo, what bench/gpu/check.sh runs on a GPU
# machine that has no Rust toolchain and no registry (the lent H200s):
# tigac, tiga-bench and the GPU conformance test binary, all with
# --features cuda (cudarc loads libcuda.so at run time, so this builds
# without CUDA), stripped of debug info, into bench/gpu/prebuilt/ (ignored
# by git; carry it to the GPU machine). Binaries built against glibc 2.36
# run on newer ones (the H200 image is Ubuntu 24.04, glibc 2.39).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=bench/gpu/prebuilt
rm -rf "$dest"
mkdir -p "$dest"
cargo build --release -p tigac -p tiga-bench --features cuda
test_bin=$(cargo test --release -p tiga --features cuda --test gpu_cuda --no-run --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "gpu_cuda" and m.get("executable"):
        print(m["executable"])')
target="${CARGO_TARGET_DIR:-target}"
for b in "$target/release/tigac" "$target/release/tiga-bench" "$test_bin"; do
    objcopy --strip-debug "$b" "$dest/$(basename "$b" | sed 's/-[0-9a-f]\{16\}$//')"
done
git rev-parse --short HEAD >"$dest/COMMIT"
ls -la "$dest"
du -sh "$dest"
