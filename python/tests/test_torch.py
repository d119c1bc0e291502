"""tiga's kernels inside PyTorch: torch in, torch out; autograd through the
derived VJP checked by ``torch.autograd.gradcheck`` (central finite
differences in float64) for every kernel of examples/kernels/gnn.rs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tiga  # noqa: E402
import tiga.torch  # noqa: E402
from conftest import random_graph  # noqa: E402

GNN = ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"]


def torch_args(k, n, e, gen, dtype=torch.float64, width=3, requires_grad=True):
    args = {"src": {}, "dst": {}, "edge": {}, "params": {}}
    sizes = {"src": n, "dst": n, "edge": e}
    for role, name, kind in k.fields:
        if role == "params":
            shape = (width,)
        else:
            shape = (sizes[role], width) if kind == "vector" else (sizes[role],)
        t = (torch.randn(shape, dtype=dtype, generator=gen) * 0.5).requires_grad_(requires_grad)
        args[role][name] = t
    return args


def test_torch_in_torch_out():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    g = tiga.Graph.from_edge_index(ei)
    h = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    out = tiga.gnn.VecSum(g, src={"h": h})["out"]
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.tensor([[4.0, 5.0], [0.0, 1.0], [2.0, 3.0]]))
    assert isinstance(g.in_degree(), torch.Tensor)


@pytest.mark.parametrize("name", GNN)
def test_gradcheck_every_gnn_kernel(name):
    gen = torch.Generator().manual_seed(3)
    rng = np.random.default_rng(11)
    ei = random_graph(rng, 9, 30, self_loops=True)
    g = tiga.Graph.from_edge_index(ei, 9)
    k = tiga.gnn[name]
    args = torch_args(k, 9, ei.shape[1], gen)
    spec = [(r, n) for r in args for n in args[r]]
    flat = [args[r][n] for r, n in spec]

    def f(*xs):
        d = {r: {} for r in args}
        for (r, n), x in zip(spec, xs):
            d[r][n] = x
        return tuple(tiga.torch.apply(k, g, **d).values())

    assert torch.autograd.gradcheck(f, flat, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_only_needed_gradients_are_returned_and_others_stay_none():
    gen = torch.Generator().manual_seed(5)
    rng = np.random.default_rng(5)
    ei = random_graph(rng, 20, 80)
    g = tiga.Graph.from_edge_index(ei, 20)
    k = tiga.gnn.GcnNorm
    args = torch_args(k, 20, ei.shape[1], gen, requires_grad=False)
    args["src"]["h"].requires_grad_(True)
    out = tiga.torch.apply(k, g, **args)["out"]
    out.square().sum().backward()
    assert args["src"]["h"].grad is not None
    assert all(args[r][n].grad is None for r in args for n in args[r] if (r, n) != ("src", "h"))
    # The same gradient through the NumPy API.
    vjp = k.vjp(g, {"out": 2 * out.detach()}, **{r: {n: t.detach() for n, t in d.items()} for r, d in args.items()})
    torch.testing.assert_close(args["src"]["h"].grad, vjp["src"]["h"])


def test_double_backward_is_refused():
    ei = torch.tensor([[0, 1], [1, 0]])
    g = tiga.Graph.from_edge_index(ei)
    h = torch.randn(2, 2, dtype=torch.float64, requires_grad=True)
    out = tiga.torch.apply(tiga.gnn.MaxPool, g, src={"h": h})["out"]
    (gh,) = torch.autograd.grad(out.sum(), h, create_graph=False)
    assert gh.shape == h.shape
    out = tiga.torch.apply(tiga.gnn.MaxPool, g, src={"h": h})["out"]
    with pytest.raises(tiga.UnsupportedError, match="double backward"):
        torch.autograd.grad(out.sum(), h, create_graph=True)


def test_non_cpu_and_non_contiguous_tensors():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    g = tiga.Graph.from_edge_index(ei)
    meta = torch.empty((3, 2), device="meta")
    with pytest.raises(tiga.InputError, match="meta"):
        tiga.gnn.VecSum(g, src={"h": meta})
    with pytest.raises(tiga.InputError, match="meta"):
        tiga.torch.apply(tiga.gnn.VecSum, g, src={"h": meta})
    h = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    assert not h.is_contiguous()
    torch.testing.assert_close(tiga.gnn.VecSum(g, src={"h": h})["out"], tiga.gnn.VecSum(g, src={"h": h.contiguous()})["out"])
    with pytest.raises(tiga.InputError, match="bfloat16"):
        tiga.gnn.VecSum(g, src={"h": torch.zeros((3, 2), dtype=torch.bfloat16)})


def test_residual_schedule_gives_the_same_gradients():
    gen = torch.Generator().manual_seed(9)
    rng = np.random.default_rng(9)
    ei = random_graph(rng, 30, 120)
    g = tiga.Graph.from_edge_index(ei, 30)
    k = tiga.gnn.GatAttention
    a = torch_args(k, 30, ei.shape[1], gen, dtype=torch.float32)
    b = {r: {n: t.detach().clone().requires_grad_(True) for n, t in d.items()} for r, d in a.items()}
    tiga.torch.apply(k, g, **a)["out"].sum().backward()
    tiga.torch.apply(k, g, **b, schedule=tiga.Schedule(residuals=True))["out"].sum().backward()
    for r in a:
        for n in a[r]:
            assert torch.equal(a[r][n].grad, b[r][n].grad)


def test_gcn_norm_equals_pyg():
    pyg_utils = pytest.importorskip("torch_geometric.utils")
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm

    rng = np.random.default_rng(2)
    ei = torch.from_numpy(random_graph(rng, 25, 90))
    w = torch.rand(ei.shape[1])
    for weights, improved in [(None, False), (w, False), (w, True)]:
        a = tiga.gcn_norm(ei, weights, num_nodes=25, improved=improved)
        b = pyg_gcn_norm(ei, weights, num_nodes=25, improved=improved)
        assert torch.equal(a[0], b[0])
        torch.testing.assert_close(a[1], b[1], rtol=1e-6, atol=1e-7)
    assert torch.equal(tiga.degree(ei[1], 25), pyg_utils.degree(ei[1], 25))
    a = tiga.add_remaining_self_loops(ei, w, 2.0, 25)
    b = pyg_utils.add_remaining_self_loops(ei, w, 2.0, 25)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    a = tiga.add_self_loops(ei, w, 3.0, 25)
    b = pyg_utils.add_self_loops(ei, w, 3.0, 25)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
