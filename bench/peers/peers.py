#!/usr/bin/env python3
"""Time the tools a user would pick instead of tiga, on the same graph.

tiga-bench writes the graph it built to a directory and runs this script on
it (bench/src/peers.rs), so the peers and tiga are timed on the very same
input in the same run.

Input: a directory holding the graph as CSR over destination rows
  rowptr.npy  int64 [num_dst + 1]
  col.npy     int32 or int64 [num_edges]   (source node of each edge)
  x.npy       float32 [num_src] or [num_src, F]   (source features)
and optionally
  a_src.npy, a_dst.npy  float32 [num_src], [num_dst]  (attention logits, for gat)
  num_src.txt           (defaults to num_dst)

Cases (each forward, and backward = gradient of out.sum() w.r.t. x):
  sum      out[i] = sum_{j->i} x[j]
  scaled   out[i] = 0.25 * sum_{j->i} x[j]         (Jacobi smoothing)
  mean     out[i] = mean_{j->i} x[j]               (0 for empty rows)
  max      out[i] = max_{j->i} x[j]                (0 for empty rows)
  gat      s_e = leaky_relu(a_src[j] + a_dst[i], 0.2);
           out[i] = sum_e softmax_i(s)_e * x[j]

Peers: scipy (CSR product; forward, and backward = the transpose's product
timed alone), torch.sparse.mm with a CSR tensor, and PyG-style
gather/scatter (index_select then index_add_ / scatter_reduce, autograd for
the backward, timed as one forward+backward step). scipy offers sum, scaled
and mean; torch_sparse the same; pyg_scatter all five (gat only when the
attention logits are given). Each peer is pinned to --threads.

Prints one JSON object per line:
  {"case", "peer", "pass", "median_ms", "min_ms", "runs", "threads"}
with pass "forward", "backward" (scipy) or "forward+backward" (torch), and
  {"peer", "skipped"}
for a peer whose package does not import. With --check DIR it also writes
each peer's forward output to DIR/<case>.<peer>.npy, so a caller can compare
numbers as well as times.
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

CASES = ("sum", "scaled", "mean", "max", "gat")
# The cases that are one sparse matrix product (all that scipy and
# torch.sparse offer).
LINEAR = ("sum", "scaled", "mean")
PEERS = ("scipy", "torch_sparse", "pyg_scatter")
# Read by the BLAS and OpenMP pools when numpy, scipy and torch load: set
# before any of them is imported.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# numpy, imported by main() once the thread variables are set.
np = None


def name_list(choices):
    """An argparse type: a comma-separated list of names out of `choices`."""

    def parse(text):
        names = [n for n in text.split(",") if n]
        bad = [n for n in names if n not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)} (choose from {','.join(choices)})")
        return names

    return parse


def positive(text):
    n = int(text)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"wants a positive integer, got {text}")
    return n


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph_dir", help="directory with rowptr.npy, col.npy, x.npy (and a_src.npy, a_dst.npy, num_src.txt)")
    p.add_argument("--cases", type=name_list(CASES), default=list(CASES), help="comma-separated (default: all)")
    p.add_argument("--peers", type=name_list(PEERS), default=list(PEERS), help="comma-separated (default: all)")
    p.add_argument("--threads", type=positive, default=2, help="threads for every peer (default 2)")
    p.add_argument("--repeat", type=positive, default=5, help="timed calls per measurement (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls before them (default 1)")
    p.add_argument("--check", default=None, metavar="DIR", help="directory for forward outputs")
    return p.parse_args(argv)


class Bench:
    """The options, the timer and the output lines."""

    def __init__(self, opts):
        self.opts = opts

    def timed(self, fn):
        """(median, min) in ms of `repeat` calls of `fn` after `warmup` untimed ones."""
        for _ in range(self.opts.warmup):
            fn()
        times = []
        for _ in range(self.opts.repeat):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), min(times)

    def measure(self, case, peer, pass_, fn):
        med, mn = self.timed(fn)
        line = {
            "case": case,
            "peer": peer,
            "pass": pass_,
            "median_ms": round(med, 3),
            "min_ms": round(mn, 3),
            "runs": self.opts.repeat,
            "threads": self.opts.threads,
        }
        print(json.dumps(line), flush=True)

    def save_check(self, case, peer, out):
        if self.opts.check:
            os.makedirs(self.opts.check, exist_ok=True)
            np.save(os.path.join(self.opts.check, f"{case}.{peer}.npy"), np.asarray(out, dtype=np.float32))


class GraphData:
    """The graph directory's arrays."""

    def __init__(self, d):
        self.rowptr = np.load(os.path.join(d, "rowptr.npy")).astype(np.int64)
        self.col = np.load(os.path.join(d, "col.npy")).astype(np.int64)
        self.x = np.load(os.path.join(d, "x.npy")).astype(np.float32)
        self.num_dst = len(self.rowptr) - 1
        p = os.path.join(d, "num_src.txt")
        if os.path.exists(p):
            with open(p) as f:
                self.num_src = int(f.read())
        else:
            self.num_src = self.num_dst
        self.extra = {}
        for name in ("a_src", "a_dst"):
            p = os.path.join(d, name + ".npy")
            if os.path.exists(p):
                self.extra[name] = np.load(p).astype(np.float32)

    def has_attention(self):
        return "a_src" in self.extra and "a_dst" in self.extra


def run_scipy(bench, cases, g):
    import scipy.sparse as sp

    a = sp.csr_matrix((np.ones(len(g.col), dtype=np.float32), g.col, g.rowptr), shape=(g.num_dst, g.num_src))
    deg = np.diff(g.rowptr).astype(np.float32)
    inv_deg = np.where(deg > 0, 1.0 / np.maximum(deg, 1), 0).astype(np.float32)
    ones = np.ones((g.num_dst,) + g.x.shape[1:], dtype=np.float32)
    for case in cases:
        if case not in LINEAR:
            continue
        if case == "sum":
            m = a
        elif case == "scaled":
            m = a * 0.25
        else:
            m = sp.diags(inv_deg) @ a
        m = m.tocsr().astype(np.float32)
        mt = m.T.tocsr()
        bench.measure(case, "scipy", "forward", lambda m=m: m @ g.x)
        bench.measure(case, "scipy", "backward", lambda mt=mt: mt @ ones)
        bench.save_check(case, "scipy", m @ g.x)


def torch_setup(bench, g):
    import torch

    torch.set_num_threads(bench.opts.threads)
    rp = torch.from_numpy(g.rowptr)
    cl = torch.from_numpy(g.col)
    # The destination of every edge, in CSR order.
    dst = torch.repeat_interleave(torch.arange(g.num_dst), rp[1:] - rp[:-1])
    return torch, rp, cl, dst


def run_torch_sparse(bench, cases, g):
    torch, rp, cl, dst = torch_setup(bench, g)
    xt = torch.from_numpy(g.x)
    x2 = xt if xt.dim() == 2 else xt.unsqueeze(1)
    deg = (rp[1:] - rp[:-1]).float()
    for case in cases:
        if case not in LINEAR:
            continue
        if case == "sum":
            vals = torch.ones(len(cl))
        elif case == "scaled":
            vals = torch.ones(len(cl)) * 0.25
        else:
            vals = (1.0 / deg.clamp(min=1))[dst]
        a = torch.sparse_csr_tensor(rp, cl, vals, size=(g.num_dst, g.num_src))

        def forward(a=a):
            return torch.sparse.mm(a, x2)

        xg = x2.clone().requires_grad_(True)

        def forward_backward(a=a, xg=xg):
            (grad,) = torch.autograd.grad(torch.sparse.mm(a, xg).sum(), xg)
            return grad

        bench.measure(case, "torch_sparse", "forward", forward)
        bench.measure(case, "torch_sparse", "forward+backward", forward_backward)
        out = forward()
        bench.save_check(case, "torch_sparse", (out.squeeze(1) if g.x.ndim == 1 else out).numpy())


def run_pyg_scatter(bench, cases, g):
    torch, rp, cl, dst = torch_setup(bench, g)
    xt = torch.from_numpy(g.x)
    deg = (rp[1:] - rp[:-1]).float()
    shape = (g.num_dst,) + tuple(xt.shape[1:])
    # Broadcasts a per-edge or per-row scalar over the feature dimension.
    bshape = (-1,) + (1,) * (xt.dim() - 1)

    def aggregate(case, xin):
        msg = xin.index_select(0, cl)
        if case in LINEAR:
            out = torch.zeros(shape, dtype=xin.dtype).index_add_(0, dst, msg)
            if case == "scaled":
                out = out * 0.25
            if case == "mean":
                out = out / deg.clamp(min=1).view(bshape)
            return out
        if case == "max":
            idx = dst.view(bshape).expand_as(msg)
            return torch.zeros(shape, dtype=xin.dtype).scatter_reduce(0, idx, msg, "amax", include_self=False)
        if case == "gat":
            a_src = torch.from_numpy(g.extra["a_src"])
            a_dst = torch.from_numpy(g.extra["a_dst"])
            s = torch.nn.functional.leaky_relu(a_src[cl] + a_dst[dst], 0.2)
            smax = torch.full((g.num_dst,), -float("inf")).scatter_reduce(0, dst, s, "amax", include_self=True)
            e = torch.exp(s - smax[dst])
            den = torch.zeros(g.num_dst).index_add_(0, dst, e)
            alpha = e / den[dst]
            return torch.zeros(shape, dtype=xin.dtype).index_add_(0, dst, msg * alpha.view(bshape))
        raise ValueError(case)

    for case in cases:
        if case == "gat" and not g.has_attention():
            continue
        xg = xt.clone().requires_grad_(True)

        def forward_backward(case=case, xg=xg):
            (grad,) = torch.autograd.grad(aggregate(case, xg).sum(), xg)
            return grad

        bench.measure(case, "pyg_scatter", "forward", lambda case=case: aggregate(case, xt))
        bench.measure(case, "pyg_scatter", "forward+backward", forward_backward)
        bench.save_check(case, "pyg_scatter", aggregate(case, xt).numpy())


RUNNERS = {"scipy": run_scipy, "torch_sparse": run_torch_sparse, "pyg_scatter": run_pyg_scatter}


def main(argv=None):
    global np
    opts = parse_args(argv)
    for var in THREAD_VARS:
        os.environ[var] = str(opts.threads)
    import numpy

    np = numpy
    # torch warns that sparse CSR support is in beta, once per process.
    warnings.filterwarnings("ignore", category=UserWarning)
    bench = Bench(opts)
    g = GraphData(opts.graph_dir)
    for peer in opts.peers:
        try:
            RUNNERS[peer](bench, opts.cases, g)
        except ImportError as err:
            print(json.dumps({"peer": peer, "skipped": f"not installed: {err}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
