#!/usr/bin/env python3
"""PyTorch on the GPU, the peer of `tiga-bench gpu --peers`: the same CSR
(offsets.bin u64, cols.bin u32, h.bin f32 [nodes, width], little-endian, in
DIR) summed per destination two ways, timed with CUDA events:

- torch.sparse.mm with a CSR adjacency (ones), out = A @ h;
- PyG-style gather/scatter: h[src] gathered per edge, index_add_ by dst;
- GAT as PyG's GATConv aggregates (scores leaky_relu(a_src[j] + a_dst[i]),
  softmax per destination by scatter max, exp and scatter sum, then the
  weighted gather/index_add), forward and backward through autograd.

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

    gen = torch.Generator(device=dev).manual_seed(7)
    a_src = torch.rand(a.nodes, device=dev, generator=gen) - 0.5
    a_dst = torch.rand(a.nodes, device=dev, generator=gen) - 0.5
    cot = torch.rand(a.nodes, a.width, device=dev, generator=gen) - 0.5

    def gat_forward(h, s_src, s_dst):
        score = torch.nn.functional.leaky_relu(s_src[col] + s_dst[dst], 0.2)
        row_max = torch.full((a.nodes,), float("-inf"), device=dev).scatter_reduce(0, dst, score, "amax", include_self=True)
        e = torch.exp(score - row_max[dst])
        den = torch.zeros(a.nodes, device=dev).index_add(0, dst, e)
        alpha = e / den[dst]
        return torch.zeros(a.nodes, a.width, device=dev).index_add(0, dst, alpha[:, None] * h[col])

    def gat_fwd():
        with torch.no_grad():
            return gat_forward(ht, a_src, a_dst)

    def gat_fwd_bwd():
        h = ht.detach().requires_grad_(True)
        s_src = a_src.detach().requires_grad_(True)
        s_dst = a_dst.detach().requires_grad_(True)
        out = gat_forward(h, s_src, s_dst)
        out.backward(cot)
        return out

    t3, _ = timed(gat_fwd)
    t4, _ = timed(gat_fwd_bwd)
    print(json.dumps({"peer": "torch GAT (PyG-style, autograd)", "status": "ok", "case": "powerlaw-gat", "width": a.width,
                      "fwd_ms": t3, "fwd_bwd_ms": t4}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
