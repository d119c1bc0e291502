#!/usr/bin/env python3
"""The half-precision peers of `tiga-bench half`, on the same graph.

Input: the directory layout of peers.py (rowptr.npy int64 [num_dst + 1],
col.npy int32 [num_edges], x.npy float32 [num_src, F]; num_src.txt when it
differs from num_dst). The case is the power-law sum, out[i] = sum_{j->i} x[j],
forward only, with x in float32 and in each half type the peer runs:

  scipy        CSR @ dense, float32 and float16 (scipy's sparse kernels may
               refuse float16; the refusal is reported)
  torch_sparse torch.sparse.mm with a CSR tensor, float32 and bfloat16
               (where this PyTorch's CPU kernels accept it)
  pyg_scatter  x.index_select(0, col) then index_add_ over the destination
               ids, float32, bfloat16 and float16

Each peer is pinned to --threads. A peer whose package does not import, or
a dtype it refuses, is reported with the reason rather than timed.

Prints one JSON object:
  {"threads": T, "results": [{"peer", "dtype", "median_ms", "runs",
   "max_rel_diff_vs_f32"} or {"peer", "dtype", "skipped"}]}
"""
import argparse
import json
import os
import statistics
import sys
import time

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def timed(fn, repeat, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), out


def rel_diff(a, b):
    """max |a - b| / max(|b|, 1), in float64."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0))) if a.size else 0.0


def by_dtype(torch, peer, dtypes, make, repeat):
    """One peer timed in each dtype, each result against the first
    dtype's (f32's) output; a dtype the build cannot run is skipped with
    its reason."""
    rows, ref = [], None
    for dtype in dtypes:
        name = str(dtype).replace("torch.", "")
        try:
            call = make(dtype)
            with torch.no_grad():
                ms, out = timed(call, repeat)
            row = {"peer": peer, "dtype": name, "median_ms": ms, "runs": repeat}
            if ref is None:
                ref = out.float().numpy()
            else:
                row["max_rel_diff_vs_f32"] = rel_diff(out.float().numpy(), ref)
            rows.append(row)
        except Exception as e:
            rows.append({"peer": peer, "dtype": name, "skipped": f"{type(e).__name__}: {e}"})
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph_dir")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    opts = p.parse_args(argv)
    for v in THREAD_VARS:
        os.environ[v] = str(opts.threads)
    results = []
    try:
        import numpy as np
    except ImportError as e:
        print(json.dumps({"threads": opts.threads, "skipped": f"numpy does not import: {e}", "results": results}))
        return 0
    d = opts.graph_dir
    rowptr = np.load(os.path.join(d, "rowptr.npy"))
    col = np.load(os.path.join(d, "col.npy")).astype(np.int64)
    x = np.load(os.path.join(d, "x.npy"))
    num_dst = len(rowptr) - 1
    num_src = num_dst
    if os.path.exists(os.path.join(d, "num_src.txt")):
        with open(os.path.join(d, "num_src.txt")) as fh:
            num_src = int(fh.read().strip())
    dst = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(rowptr))

    try:
        import scipy.sparse as sp

        a = sp.csr_matrix((np.ones(len(col), dtype=np.float32), col, rowptr), shape=(num_dst, num_src))
        ref_ms, ref = timed(lambda: a @ x, opts.repeat)
        results.append({"peer": "scipy", "dtype": "float32", "median_ms": ref_ms, "runs": opts.repeat})
        try:
            a16 = a.astype(np.float16)
            x16 = x.astype(np.float16)
            ms, out = timed(lambda: a16 @ x16, opts.repeat)
            results.append({"peer": "scipy", "dtype": "float16", "median_ms": ms, "runs": opts.repeat,
                            "max_rel_diff_vs_f32": rel_diff(out, ref)})
        except Exception as e:  # scipy's sparsetools have no float16 kernels
            results.append({"peer": "scipy", "dtype": "float16", "skipped": f"{type(e).__name__}: {e}"})
    except ImportError as e:
        results.append({"peer": "scipy", "dtype": "float32", "skipped": f"scipy does not import: {e}"})

    try:
        import torch

        torch.set_num_threads(opts.threads)
        xt = torch.from_numpy(x)
        crow = torch.from_numpy(rowptr.astype(np.int64))
        colt = torch.from_numpy(col)
        dstt = torch.from_numpy(dst)

        def sparse_mm(dtype):
            a = torch.sparse_csr_tensor(crow, colt, torch.ones(len(col), dtype=dtype), size=(num_dst, num_src))
            xd = xt.to(dtype)
            return lambda: torch.sparse.mm(a, xd)

        def gather_scatter(dtype):
            xd = xt.to(dtype)

            def run():
                out = torch.zeros((num_dst, xd.shape[1]), dtype=xd.dtype)
                return out.index_add_(0, dstt, xd.index_select(0, colt))

            return run

        results += by_dtype(torch, "torch_sparse", (torch.float32, torch.bfloat16), sparse_mm, opts.repeat)
        results += by_dtype(
            torch, "pyg_scatter", (torch.float32, torch.bfloat16, torch.float16), gather_scatter, opts.repeat
        )
    except ImportError as e:
        for peer in ("torch_sparse", "pyg_scatter"):
            results.append({"peer": peer, "dtype": "*", "skipped": f"torch does not import: {e}"})

    print(json.dumps({"threads": opts.threads, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
