#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and its driver (an
# H100/H200 lent for a few minutes): run from anywhere, it works in the
# repository root and takes under 8 minutes.
#
#  1. builds tigac and tiga-bench with --features cuda;
#  2. GPU conformance: every kernel of examples/kernels/gnn.rs forward and
#     backward on cuda:0 against the f64 reference (or the PTX back end's
#     refusal, named), on random graphs with empty rows, self loops,
#     multi-edges, a bipartite shape and one node; the scalar kernels bit
#     for bit against the CPU JIT; a paged .gfg against in-memory
#     (tiga/tests/gpu_cuda.rs). A skip ("no CUDA GPU") fails the check;
#  3. tigac run --device cuda:0 against --device cpu, with --grads and
#     --timing (the timing line gains "device" and "kernel_ms");
#  4. tiga-bench gpu: power-law sum F=64, mean, max, GAT (and the scalar
#     neighbour sum) at 1M nodes / 16M edges, timed with CUDA events,
#     against a device-to-device copy in the same run, and PyTorch on the
#     same GPU when it imports.
#
# Writes gpu-check.log, the benchmark's JSON and table into $OUT when set,
# else bench/results/.
#
# On a GPU machine without cargo (the lent H200s have no Rust toolchain and
# no registry), run bench/gpu/prebuild.sh here first and carry
# bench/gpu/prebuilt/: its binaries replace steps 1's build and 2's cargo
# test (device tool: carry ["bench/gpu/prebuilt"], command
# "bash bench/gpu/check.sh").
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-bench/results}"
mkdir -p "$out"
log="$out/gpu-check.log"
: >"$log"
stamp="$(date +%Y-%m-%d)-$(git rev-parse --short HEAD 2>/dev/null || echo worktree)"
say() { echo "== $*" | tee -a "$log"; }

say "machine"
(nvidia-smi -L || echo "nvidia-smi: not found") 2>&1 | tee -a "$log"
cargo --version 2>&1 | tee -a "$log"

prebuilt=bench/gpu/prebuilt
target="${CARGO_TARGET_DIR:-target}"
if [ -x "$prebuilt/tigac" ] && { [ -n "${TIGA_USE_PREBUILT:-}" ] || ! command -v cargo >/dev/null; }; then
    say "prebuilt binaries (commit $(cat "$prebuilt/COMMIT" 2>/dev/null || echo unknown))"
    bin="$prebuilt"
    conformance=("$prebuilt/gpu_cuda" --nocapture --test-threads 1)
else
    say "build (--features cuda)"
    timeout 300 cargo build --release -p tigac -p tiga-bench --features cuda 2>&1 | tail -n 3 | tee -a "$log"
    bin="$target/release"
    conformance=(cargo test --release -p tiga --features cuda --test gpu_cuda -- --nocapture --test-threads 1)
fi

say "GPU conformance (tiga/tests/gpu_cuda.rs)"
timeout 180 "${conformance[@]}" 2>&1 | tee -a "$log" || { echo "gpu check: conformance failed" | tee -a "$log" >&2; exit 1; }
if grep -q "skipped: no CUDA GPU" "$log"; then
    echo "gpu check: the conformance tests skipped: no CUDA GPU was opened" | tee -a "$log" >&2
    exit 1
fi

say "tigac run --device cuda:0 against --device cpu"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import struct, sys, random
d = sys.argv[1]
random.seed(5)
n = 5000
with open(f"{d}/g.txt", "w") as f:
    for _ in range(40000):
        f.write(f"{random.randrange(n)} {random.randrange(n - 1)}\n")
    f.write("0 0\n0 0\n")
# x.npy: float32 [n]
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
hdr += " " * (118 - len(hdr)) + "\n"
with open(f"{d}/x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack(f"<{n}f", *[random.uniform(-1, 1) for _ in range(n)]))
PY
for dev in cpu cuda:0; do
    "$bin/tigac" run examples/kernels/gnn.rs --kernel Smoothing --graph "$work/g.txt" --num-nodes 5000 \
        --src "x=$work/x.npy" --out "$work/out-$dev.npy" --grads "$work/grads-$dev" --device "$dev" --timing --repeat 3 \
        2>&1 | tee -a "$log"
done
cmp "$work/out-cpu.npy" "$work/out-cuda:0.npy" && echo "forward: cuda:0 gives the CPU's bytes" | tee -a "$log"
cmp "$work/grads-cpu/src.x.npy" "$work/grads-cuda:0/src.x.npy" && echo "gradient: cuda:0 gives the CPU's bytes" | tee -a "$log"

say "tiga-bench gpu (CUDA events; copy bandwidth; PyTorch when it imports)"
timeout 240 "$bin/tiga-bench" gpu --device cuda:0 --peers \
    --json "$out/$stamp-gpu.json" --table "$out/$stamp-gpu.txt" 2>&1 | tee -a "$log"
say "done: $log, $out/$stamp-gpu.json, $out/$stamp-gpu.txt"
