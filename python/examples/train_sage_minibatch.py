"""GraphSAGE trained on sampled mini-batches, the PyG way: a NeighborLoader
over the training nodes (fanouts 10 and 5), a 2-layer tiga.nn.SAGEConv
model, cross-entropy on each batch's seeds, torch.optim.Adam. The batches
come from tiga's sampler in this process or, with --tigac, through a graph
store: the example writes the graph and its features as a .gfg, starts two
`tigac serve` processes and trains through tiga.loader.RemoteNeighborLoader
(the same batches, so the same model). Test accuracy over the full graph.

  train_sage_minibatch.py [--tigac PATH/TO/tigac] [--nodes 10000] [--epochs 3]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import tiga.nn
from tiga.datasets import sbm
from tiga.loader import NeighborLoader, RemoteNeighborLoader


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden, classes):
        super().__init__()
        self.conv1 = tiga.nn.SAGEConv(in_channels, hidden)
        self.conv2 = tiga.nn.SAGEConv(hidden, classes)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def train(data, make_loader, epochs):
    torch.manual_seed(0)
    model = SAGE(data.x.shape[1], 64, data.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = make_loader()
    steps, start = 0, time.perf_counter()
    for _ in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            # batch.graph is the sampled block, built by the loader;
            # batch.edge_index works too (as with PyG's SAGEConv).
            out = model(batch.x, batch.graph)[: batch.batch_size]
            F.cross_entropy(out, batch.y[: batch.batch_size].long().view(-1)).backward()
            opt.step()
            steps += 1
    step_ms = (time.perf_counter() - start) * 1e3 / steps
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    return acc, step_ms


def serve(tigac, data, work):
    """The graph as a .gfg with features x and y, served by two processes."""
    txt = work / "edges.txt"
    np.savetxt(txt, data.edge_index.numpy().T, fmt="%d")
    gfg = work / "sbm.gfg"
    subprocess.run([tigac, "convert", str(txt), str(gfg), "--num-nodes", str(data.num_nodes)], check=True, stdout=subprocess.DEVNULL)
    np.save(work / "x.npy", data.x.numpy())
    np.save(work / "y.npy", data.y.numpy().astype(np.float32).reshape(-1, 1))
    procs, addrs = [], []
    for r in range(2):
        cmd = [tigac, "serve", "--graph", str(gfg), "--partition", f"{r}/2", "--listen", "127.0.0.1:0", "--sessions", "1",
               "--features", f"node:x={work / 'x.npy'}", "--features", f"node:y={work / 'y.npy'}"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if not line.startswith("listening on "):
            sys.exit(f"tigac serve did not start: {line!r}")
        procs.append(p)
        addrs.append(line.split()[2])
    return procs, addrs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tigac", help="also train through a graph store served by this tigac")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    data = sbm(num_nodes=a.nodes, num_features=32).torch()
    train_nodes = data.train_mask.nonzero().view(-1)
    local = lambda: NeighborLoader(data.edge_index, num_neighbors=[10, 5], batch_size=128, input_nodes=train_nodes, shuffle=True, seed=0, x=data.x, y=data.y)
    acc, ms = train(data, local, a.epochs)
    print(f"sampled GraphSAGE, in process: test accuracy {acc:.3f}, step {ms:.2f} ms")
    if acc < 0.9:
        sys.exit(f"test accuracy {acc:.3f} is below 0.9")
    if a.tigac:
        with tempfile.TemporaryDirectory() as d:
            procs, addrs = serve(a.tigac, data, Path(d))
            try:
                remote = RemoteNeighborLoader(addrs, num_neighbors=[10, 5], batch_size=128, input_nodes=train_nodes, shuffle=True, seed=0, x="x", y="y")
                acc_r, ms_r = train(data, lambda: remote, a.epochs)
                remote.close()
                remote.dataset.close()
                for p in procs:
                    p.wait(timeout=20)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
        print(f"sampled GraphSAGE, through tigac serve: test accuracy {acc_r:.3f}, step {ms_r:.2f} ms")
        if acc_r != acc:
            sys.exit(f"the graph store's batches trained another model ({acc_r:.3f} against {acc:.3f})")


if __name__ == "__main__":
    main()
