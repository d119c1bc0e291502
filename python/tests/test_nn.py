"""tiga.nn's layers against PyG's own (same weights through
``load_state_dict``): outputs and the gradient of every parameter and of
``x`` within 1e-5, relative to the largest magnitude, in float32."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pyg_nn = pytest.importorskip("torch_geometric.nn")

import tiga  # noqa: E402
import tiga.nn  # noqa: E402
from conftest import random_graph  # noqa: E402


def close(a, b, what):
    a, b = a.detach(), b.detach()
    scale = max(float(b.abs().max()), 1e-6)
    err = float((a - b).abs().max()) / scale
    assert err <= 1e-5, f"{what}: relative error {err:.2e}"


def compare(ours, theirs, x, edge_index, *extra, ours_edges=None):
    missing, unexpected = ours.load_state_dict(theirs.state_dict())
    assert not missing and not unexpected
    assert set(ours.state_dict()) == set(theirs.state_dict())
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    a = ours(xa, edge_index if ours_edges is None else ours_edges, *extra)
    b = theirs(xb, edge_index, *extra)
    close(a, b, "output")
    cot = torch.randn_like(b)
    (a * cot).sum().backward()
    (b * cot).sum().backward()
    close(xa.grad, xb.grad, "x.grad")
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        close(p.grad, theirs_params[name].grad, f"{name}.grad")


@pytest.fixture
def data():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ei = torch.from_numpy(random_graph(rng, 60, 300))
    x = torch.randn(60, 16)
    return x, ei


@pytest.mark.parametrize("kw", [{}, {"improved": True}, {"add_self_loops": False}, {"bias": False}, {"cached": True}])
def test_gcn_conv_equals_pyg(data, kw):
    x, ei = data
    compare(tiga.nn.GCNConv(16, 8, **kw), pyg_nn.GCNConv(16, 8, **kw), x, ei)


def test_gcn_conv_with_edge_weights_equals_pyg(data):
    x, ei = data
    w = torch.rand(ei.shape[1])
    compare(tiga.nn.GCNConv(16, 8), pyg_nn.GCNConv(16, 8), x, ei, w)


@pytest.mark.parametrize("kw", [{}, {"aggr": "sum"}, {"root_weight": False}, {"normalize": True}, {"bias": False}])
def test_sage_conv_equals_pyg(data, kw):
    x, ei = data
    compare(tiga.nn.SAGEConv(16, 8, **kw), pyg_nn.SAGEConv(16, 8, **kw), x, ei)


@pytest.mark.parametrize("kw", [{}, {"aggr": "sum"}, {"root_weight": False}])
def test_bipartite_sage_conv_equals_pyg(kw):
    # A sampled block's layer: 60 source rows, messages into 20 destinations.
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    ei = torch.from_numpy(np.stack([rng.integers(0, 60, 250), rng.integers(0, 20, 250)]).astype(np.int64))
    ours, theirs = tiga.nn.SAGEConv(16, 8, **kw), pyg_nn.SAGEConv(16, 8, **kw)
    ours.load_state_dict(theirs.state_dict())
    xs, xd = torch.randn(60, 16), torch.randn(20, 16)
    grads = []
    for layer in (ours, theirs):
        a, b = xs.clone().requires_grad_(True), xd.clone().requires_grad_(True)
        out = layer((a, b), ei)
        assert out.shape == (20, 8)
        (out * torch.linspace(-1, 1, 160).reshape(20, 8)).sum().backward()
        grads.append((out, a.grad, b.grad, {n: p.grad for n, p in layer.named_parameters()}))
    (oa, sa, da, pa), (ob, sb, db, pb) = grads
    close(oa, ob, "output")
    close(sa, sb, "x_src.grad")
    if kw.get("root_weight", True):
        close(da, db, "x_dst.grad")
    for name in pa:
        close(pa[name], pb[name], f"{name}.grad")
    with pytest.raises(tiga.InputError, match="does not match"):
        ours((xs, xd), ei, size=(60, 21))
    with pytest.raises(tiga.GraphError, match="destination"):
        ours((xs, xd[:5]), ei)


@pytest.mark.parametrize("kw", [{}, {"eps": 0.3}, {"train_eps": True, "eps": 0.1}])
def test_gin_conv_equals_pyg(data, kw):
    x, ei = data
    torch.manual_seed(1)
    mlp_a = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8))
    mlp_b = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 8))
    compare(tiga.nn.GINConv(mlp_a, **kw), pyg_nn.GINConv(mlp_b, **kw), x, ei)


@pytest.mark.parametrize("kw", [{}, {"heads": 4}, {"heads": 3, "concat": False}, {"negative_slope": 0.1, "heads": 2}, {"add_self_loops": False}])
def test_gat_conv_equals_pyg(data, kw):
    x, ei = data
    compare(tiga.nn.GATConv(16, 8, **kw), pyg_nn.GATConv(16, 8, **kw), x, ei)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: (m.SAGEConv(16, 8), {}),
        lambda m: (m.GINConv(torch.nn.Linear(16, 8)), {}),
        lambda m: (m.GCNConv(16, 8), {}),
        lambda m: (m.GATConv(16, 4, heads=2), {}),
    ],
)
def test_layers_on_a_sampled_blocks_graph_equal_pyg_on_its_edge_index(data, make):
    from tiga.loader import NeighborLoader

    x, ei = data
    batch = next(iter(NeighborLoader(ei, [4, 3], batch_size=10, shuffle=True, seed=1, x=x)))
    torch.manual_seed(1)
    ours, _ = make(tiga.nn)
    torch.manual_seed(1)
    theirs, _ = make(pyg_nn)
    compare(ours, theirs, batch.x, batch.edge_index, ours_edges=batch.graph)


def test_unsupported_arguments_are_refused_by_name():
    with pytest.raises(tiga.UnsupportedError, match="dropout"):
        tiga.nn.GATConv(4, 4, dropout=0.5)
    with pytest.raises(tiga.UnsupportedError, match="`flow`"):
        tiga.nn.GCNConv(4, 4, flow="target_to_source")
    with pytest.raises(tiga.UnsupportedError, match="aggr"):
        tiga.nn.SAGEConv(4, 4, aggr="max")
    with pytest.raises(tiga.InputError, match="channels"):
        tiga.nn.GCNConv(4, 4)(torch.zeros(3, 5), torch.tensor([[0, 1], [1, 2]]))


def test_layers_train_with_torch_optim(data):
    x, ei = data
    y = (x[:, 0] > 0).long()
    torch.manual_seed(3)
    conv1, conv2 = tiga.nn.GCNConv(16, 16), tiga.nn.GCNConv(16, 2)
    opt = torch.optim.Adam(list(conv1.parameters()) + list(conv2.parameters()), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        out = conv2(torch.relu(conv1(x, ei)), ei)
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
