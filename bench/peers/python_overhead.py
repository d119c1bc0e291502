"""The Python side of `tiga-bench python`: the same kernel calls as the Rust
side, through the `tiga` package, with NumPy arrays and with torch tensors.

  python_overhead.py --dir D --kernels gnn.rs [--repeat N]

D holds edge_index.npy (int64, the E sources then the E destinations,
flat), the fields h, cs, cd, w and the
cotangent cot (.npy), and want-CALL.npy, Rust's result of each call. The
graph is built once, outside the timing. Each call is timed after 3
warm-ups, the calls in rounds as on the Rust side, median kept; each
result must equal Rust's bit for bit (the same compiled code on the same
inputs), else the script exits 1. The last line of stdout is the JSON
{"numpy": {call: ms}, "torch": {call: ms}} ("torch_absent" when torch is
not installed).
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import tiga

WARM_UPS = 3


def calls(k, g, arrays, wrap):
    h, cs, cd, w, cot = (wrap(arrays[n]) for n in ("h", "cs", "cd", "w", "cot"))
    vec_sum, gcn = k["VecSum"], k["GcnNorm"]
    return {
        "VecSum": lambda: vec_sum(g, src={"h": h})["out"],
        "GcnNorm": lambda: gcn(g, src={"h": h, "cs": cs}, dst={"cd": cd}, edge={"w": w})["out"],
        "VecSum-vjp": lambda: vec_sum.vjp(g, {"out": cot}, src={"h": h}, wrt=[("src", "h")])["src"]["h"],
    }


def timed(fs, repeat):
    last = {}
    for _ in range(WARM_UPS):
        for name, f in fs.items():
            last[name] = f()
    times = {name: [] for name in fs}
    for _ in range(repeat):
        for name, f in fs.items():
            t0 = time.perf_counter()
            last[name] = f()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {n: statistics.median(t) for n, t in times.items()}, last


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--kernels", required=True)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    arrays = {n: np.load(os.path.join(a.dir, f"{n}.npy")) for n in ("edge_index", "h", "cs", "cd", "w", "cot")}
    k = tiga.load(a.kernels)
    ei = arrays["edge_index"].reshape(2, -1)
    g = tiga.Graph.from_edge_index(ei, num_nodes=arrays["h"].shape[0])
    report = {}
    libs = [("numpy", lambda x: x)]
    try:
        import torch

        libs.append(("torch", torch.from_numpy))
    except ImportError as e:
        report["torch_absent"] = f"not installed ({e})"
    for lib, wrap in libs:
        ms, last = timed(calls(k, g, arrays, wrap), a.repeat)
        for name, got in last.items():
            want = np.load(os.path.join(a.dir, f"want-{name}.npy"))
            if not np.array_equal(np.asarray(got), want):
                print(f"{lib} {name}: differs from Rust's result", file=sys.stderr)
                sys.exit(1)
        report[lib] = ms
    print(json.dumps(report))


if __name__ == "__main__":
    main()
