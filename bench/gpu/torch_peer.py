#!/usr/bin/env python3
"""PyTorch on the GPU, the peer of `tiga-bench gpu --peers`: the same CSR
(offsets.bin u64, cols.bin u32, h.bin f32 [nodes, width], little-endian, in
DIR) summed per destination two ways, timed with CUDA events:

- torch.sparse.mm with a CSR adjacency (ones), out = A @ h;
- PyG-style gather/scatter: h[src] gathered per edge, index_add_ by dst.

Prints one JSON line per peer: {"peer", "status", "fwd_ms", "max_abs_diff"}
(the two against each other). Exits 0 with a status line when torch does
not import or sees no GPU."""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--edges", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure is a status
        print(json.dumps({"peer": "torch", "status": f"skipped: torch does not import: {e}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"peer": "torch", "status": "skipped: torch sees no CUDA device"}))
        return 0
    dev = torch.device("cuda")
    offsets = np.fromfile(f"{a.dir}/offsets.bin", dtype="<u8").astype(np.int64)
    cols = np.fromfile(f"{a.dir}/cols.bin", dtype="<u4").astype(np.int64)
    h = np.fromfile(f"{a.dir}/h.bin", dtype="<f4").reshape(a.nodes, a.width)
    crow = torch.from_numpy(offsets).to(dev)
    col = torch.from_numpy(cols).to(dev)
    ht = torch.from_numpy(h).to(dev)
    vals = torch.ones(a.edges, dtype=torch.float32, device=dev)
    adj = torch.sparse_csr_tensor(crow, col, vals, size=(a.nodes, a.nodes))
    dst = torch.repeat_interleave(torch.arange(a.nodes, device=dev), crow[1:] - crow[:-1])

    def spmm():
        return adj @ ht

    def gather_scatter():
        out = torch.zeros(a.nodes, a.width, device=dev)
        return out.index_add_(0, dst, ht[col])

    def timed(f):
        f()
        torch.cuda.synchronize()
        ms = []
        for _ in range(a.repeat):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            r = f()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        return float(np.median(ms)), r

    t1, r1 = timed(spmm)
    t2, r2 = timed(gather_scatter)
    diff = float((r1 - r2).abs().max().item()) if a.nodes else 0.0
    for name, t in (("torch.sparse.mm (CSR)", t1), ("torch gather/index_add (PyG-style)", t2)):
        print(json.dumps({"peer": name, "status": "ok", "case": "powerlaw-sum", "width": a.width, "fwd_ms": t, "max_abs_diff": diff}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
