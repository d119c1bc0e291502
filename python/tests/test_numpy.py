"""The package on NumPy alone: kernels against closed forms computed here
in NumPy and against tiga's f64 reference interpreter, gradients against
central finite differences, and bad input refused by name."""

import threading

import numpy as np
import pytest

import tiga
from conftest import random_graph


def scatter_sum(ei, values, n):
    out = np.zeros((n,) + values.shape[1:], dtype=np.float64)
    np.add.at(out, ei[1], values[ei[0]].astype(np.float64))
    return out


@pytest.fixture
def graph(rng):
    ei = random_graph(rng, 40, 200)
    return ei, tiga.Graph.from_edge_index(ei, 40)


def test_shipped_kernels_are_the_gnn_file():
    names = tiga.gnn.names()
    for k in ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"]:
        assert k in names
    assert tiga.gnn["VecSum"] is tiga.gnn.VecSum


def test_vec_sum_equals_numpy_scatter(graph, rng):
    ei, g = graph
    h = rng.standard_normal((40, 8)).astype(np.float32)
    out = tiga.gnn.VecSum(g, src={"h": h})
    assert set(out) == {"out"}
    assert out["out"].dtype == np.float32 and out["out"].shape == (40, 8)
    np.testing.assert_allclose(out["out"], scatter_sum(ei, h, 40), rtol=1e-5, atol=1e-5)


def test_large_outputs_borrow_their_mapping_and_outlive_later_calls(rng):
    # 20000 x 128 f32 is 10 MB: tiga keeps it in a mapping of its own, which
    # the array borrows (its base) instead of a copy.
    n, f = 20000, 128
    ei = random_graph(rng, n, 60000)
    g = tiga.Graph.from_edge_index(ei, n)
    h1 = rng.standard_normal((n, f)).astype(np.float32)
    h2 = rng.standard_normal((n, f)).astype(np.float32)
    a = tiga.gnn.VecSum(g, src={"h": h1})["out"]
    assert type(a.base).__name__ == "TensorMemory", type(a.base)
    assert a.flags.c_contiguous and a.flags.writeable and a.shape == (n, f)
    b = tiga.gnn.VecSum(g, src={"h": h2})["out"]
    np.testing.assert_allclose(a, scatter_sum(ei, h1, n), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, scatter_sum(ei, h2, n), rtol=1e-5, atol=1e-5)
    # Freed, a's mapping is the next output's: b and the new one stay right.
    want_a = a.copy()
    del a
    c = tiga.gnn.VecSum(g, src={"h": h1})["out"]
    np.testing.assert_array_equal(c, want_a)
    np.testing.assert_allclose(b, scatter_sum(ei, h2, n), rtol=1e-5, atol=1e-5)
    c[0, 0] = 7.0
    assert c[0, 0] == 7.0


def test_f64_inputs_compute_in_f64(graph, rng):
    ei, g = graph
    h = rng.standard_normal((40, 3))
    out = tiga.gnn.VecSum(g, src={"h": h})["out"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, scatter_sum(ei, h, 40), rtol=1e-12, atol=1e-12)


def test_gcn_norm_kernel_equals_closed_form(graph, rng):
    ei, g = graph
    h = rng.standard_normal((40, 5)).astype(np.float32)
    cs = rng.random(40).astype(np.float32)
    cd = rng.random(40).astype(np.float32)
    w = rng.random(ei.shape[1]).astype(np.float32)
    out = tiga.gnn.GcnNorm(g, src={"h": h, "cs": cs}, dst={"cd": cd}, edge={"w": w})["out"]
    want = np.zeros((40, 5))
    np.add.at(want, ei[1], (w[:, None] * cs[ei[0], None] * h[ei[0]]).astype(np.float64))
    want *= cd[:, None]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_mean_and_max_equal_closed_forms(graph, rng):
    ei, g = graph
    h = rng.standard_normal((40, 4)).astype(np.float32)
    mean = tiga.gnn.SageMean(g, src={"h": h})["out"]
    mx = tiga.gnn.MaxPool(g, src={"h": h})["out"]
    for i in range(40):
        srcs = ei[0][ei[1] == i]
        if len(srcs) == 0:
            assert np.all(mean[i] == 0) and np.all(mx[i] == 0)
        else:
            np.testing.assert_allclose(mean[i], h[srcs].mean(axis=0), rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(mx[i], np.maximum(h[srcs], 0).max(axis=0))


def kernel_args(k, n, e, rng, dtype=np.float64, width=4):
    """Random fields for every declared field of kernel ``k``."""
    args = {"src": {}, "dst": {}, "edge": {}, "params": {}}
    sizes = {"src": n, "dst": n, "edge": e}
    for role, name, kind in k.fields:
        if role == "params":
            args[role][name] = (rng.standard_normal(width) * 0.5).astype(dtype)
        else:
            shape = (sizes[role], width) if kind == "vector" else (sizes[role],)
            args[role][name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
    return args


@pytest.mark.parametrize("name", ["NeighborSum", "Smoothing", "VecSum", "GcnNorm", "SageMean", "MaxPool", "GinSum", "GatAttention", "Top2Sum", "EdgeGate"])
def test_every_shipped_kernel_equals_the_reference_interpreter(graph, rng, name):
    ei, g = graph
    k = tiga.gnn[name]
    args = kernel_args(k, 40, ei.shape[1], rng, dtype=np.float32)
    out = k(g, **args)
    ref = k(g, **args, schedule=tiga.Schedule(backend="reference"))
    assert list(out) == k.outputs
    for o in out:
        np.testing.assert_allclose(out[o], ref[o], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["Smoothing", "GcnNorm", "SageMean", "GinSum", "GatAttention", "EdgeGate"])
def test_vjp_equals_finite_differences(rng, name):
    ei = random_graph(rng, 12, 40)
    g = tiga.Graph.from_edge_index(ei, 12)
    k = tiga.gnn[name]
    args = kernel_args(k, 12, ei.shape[1], rng)
    out = k(g, **args)
    cots = {o: rng.standard_normal(v.shape) for o, v in out.items()}
    grads = k.vjp(g, cots, **args)

    def loss():
        o = k(g, **args)
        return sum(float((o[n] * cots[n]).sum()) for n in o)

    eps = 1e-6
    for role, fields in args.items():
        for fname, x in fields.items():
            flat = x.reshape(-1)
            for idx in rng.choice(flat.size, size=min(5, flat.size), replace=False):
                old = flat[idx]
                flat[idx] = old + eps
                up = loss()
                flat[idx] = old - eps
                down = loss()
                flat[idx] = old
                fd = (up - down) / (2 * eps)
                got = grads[role][fname].reshape(-1)[idx]
                assert abs(got - fd) <= 1e-5 * max(1.0, abs(fd)), (role, fname, idx, got, fd)


def test_vjp_wrt_returns_only_what_was_asked(graph, rng):
    ei, g = graph
    k = tiga.gnn.EdgeGate
    args = kernel_args(k, 40, ei.shape[1], rng)
    out = k(g, **args)
    cots = {"out": np.ones_like(out["out"])}
    full = k.vjp(g, cots, **args)
    only = k.vjp(g, cots, **args, wrt=[("params", "p")])
    assert set(only["params"]) == {"p"} and not only["src"] and not only["edge"]
    np.testing.assert_array_equal(only["params"]["p"], full["params"]["p"])
    with pytest.raises(tiga.InputError, match="src field `nope`"):
        k.vjp(g, cots, **args, wrt=[("src", "nope")])


def test_residual_tape_gives_the_recomputing_gradients(graph, rng):
    ei, g = graph
    k = tiga.gnn.GatAttention
    args = kernel_args(k, 40, ei.shape[1], rng, dtype=np.float32)
    s = tiga.Schedule(residuals=True)
    out, tape = k.forward(g, **args, schedule=s)
    assert not tape.is_empty and tape.bytes > 0
    np.testing.assert_array_equal(out["out"], k(g, **args)["out"])
    cots = {"out": rng.standard_normal(out["out"].shape).astype(np.float32)}
    taped = k.vjp(g, cots, **args, schedule=s, tape=tape)
    plain = k.vjp(g, cots, **args)
    for role in plain:
        for n in plain[role]:
            np.testing.assert_array_equal(taped[role][n], plain[role][n])


def test_schedules_give_the_same_bits(graph, rng):
    ei, g = graph
    h = rng.standard_normal((40, 16)).astype(np.float32)
    base = tiga.gnn.VecSum(g, src={"h": h})["out"]
    for s in [tiga.Schedule(threads=1), tiga.Schedule(backend="jit"), tiga.Schedule(renumber="degree"), {"threads": 2, "renumber": "rcm"}]:
        np.testing.assert_array_equal(tiga.gnn.VecSum(g, src={"h": h}, schedule=s)["out"], base)


def test_scalar_params_as_numbers(rng):
    k = tiga.load_source(
        """
#[message_passing(reduce = sum)]
pub mod Damped {
    use tiga::lang::*;
    pub struct Src { pub x: f32 }
    pub struct Params { pub d: f32 }
    pub fn edge(src: &Src, params: &Params) -> f32 { params.d * src.x }
}
"""
    ).Damped
    ei = np.array([[0, 1, 2], [1, 2, 0]])
    g = tiga.Graph.from_edge_index(ei)
    x = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    out = k(g, src={"x": x}, params={"d": 0.5})["out"]
    np.testing.assert_array_equal(out, np.array([2.0, 0.5, 1.0], dtype=np.float32))


def test_non_contiguous_inputs_are_copied_once_and_give_the_same_numbers(graph, rng):
    ei, g = graph
    h = rng.standard_normal((8, 40)).astype(np.float32).T  # Fortran order
    assert not h.flags.c_contiguous
    out = tiga.gnn.VecSum(g, src={"h": h})["out"]
    np.testing.assert_allclose(out, scatter_sum(ei, h, 40), rtol=1e-5, atol=1e-5)


def test_graph_constructors_and_degrees(rng):
    ei = np.array([[0, 0, 1, 3], [1, 2, 2, 2]])
    g = tiga.Graph.from_edge_index(ei)
    assert (g.num_nodes, g.num_edges, g.is_paged) == (4, 4, False)
    np.testing.assert_array_equal(g.in_degree(), [0, 1, 3, 0])
    np.testing.assert_array_equal(g.out_degree(), [2, 1, 0, 1])
    np.testing.assert_array_equal(g.edge_index(), ei)
    assert tiga.Graph.from_edge_index(ei, num_nodes=10).num_nodes == 10
    assert tiga.Graph.from_edge_index(ei.astype(np.int32)).num_edges == 4
    # CSR by destination row: rows 0..3 with sources.
    c = tiga.Graph.from_csr(np.array([0, 0, 1, 4, 4]), np.array([0, 0, 1, 3]))
    x = np.array([1.0, 10.0, 100.0, 1000.0], dtype=np.float32)
    np.testing.assert_array_equal(tiga.gnn.NeighborSum(c, src={"x": x})["out"], tiga.gnn.NeighborSum(g, src={"x": x})["out"])
    assert tiga.Graph.from_edge_index(np.zeros((2, 0), dtype=np.int64)).num_nodes == 0


def test_multi_head_attention_is_one_call_on_the_graph_with_heads(graph, rng):
    ei, g = graph
    n, heads, f = 40, 3, 5
    h = rng.standard_normal((n, heads, f)).astype(np.float32)
    a_src = (3 * rng.standard_normal((n, heads))).astype(np.float32)
    a_dst = (3 * rng.standard_normal((n, heads))).astype(np.float32)
    gh = g.with_heads(heads)
    assert (gh.num_nodes, gh.num_edges) == (n * heads, g.num_edges * heads)
    out = tiga.gnn.GatAttention(gh, src={"h": h.reshape(n * heads, f), "a_src": a_src.reshape(-1)}, dst={"a_dst": a_dst.reshape(-1)})["out"]
    assert out.shape == (n * heads, f)
    # Closed form per head: a softmax over row i's in-edges of head k's scores.
    want = np.zeros((n, heads, f))
    for k in range(heads):
        s = a_src[ei[0], k].astype(np.float64) + a_dst[ei[1], k]
        s = np.where(s > 0, s, 0.2 * s)
        for i in range(n):
            e = np.nonzero(ei[1] == i)[0]
            if len(e):
                w = np.exp(s[e] - s[e].max())
                want[i, k] = (w / w.sum()) @ h[ei[0, e], k]
    np.testing.assert_allclose(out.reshape(n, heads, f), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(tiga.InputError, match="heads is a positive int"):
        g.with_heads(0)


def test_graph_ops_match_pyg_conventions():
    ei = np.array([[0, 1, 1, 2], [1, 0, 1, 1]])
    np.testing.assert_array_equal(tiga.degree(ei[1], 3), np.array([1, 3, 0], dtype=np.float32))
    loops, attr = tiga.add_self_loops(ei, np.array([1.0, 2.0, 3.0, 4.0]), fill_value=9.0)
    np.testing.assert_array_equal(loops, [[0, 1, 1, 2, 0, 1, 2], [1, 0, 1, 1, 0, 1, 2]])
    np.testing.assert_array_equal(attr, [1, 2, 3, 4, 9, 9, 9])
    rem, rattr = tiga.add_remaining_self_loops(ei, np.array([1.0, 2.0, 3.0, 4.0]), fill_value=9.0)
    np.testing.assert_array_equal(rem, [[0, 1, 2, 0, 1, 2], [1, 0, 1, 0, 1, 2]])
    np.testing.assert_array_equal(rattr, [1, 2, 4, 9, 3, 9])
    # gcn_norm: in-degrees after remaining loops are [2, 3, 1].
    nei, w = tiga.gcn_norm(ei, num_nodes=3)
    assert w.dtype == np.float32
    deg = np.array([2.0, 3.0, 1.0])
    want = 1 / np.sqrt(deg[nei[0]] * deg[nei[1]])
    np.testing.assert_allclose(w, want, rtol=1e-6)
    _, w64 = tiga.gcn_norm(ei, np.array([1.0, 2.0, 3.0, 4.0]), num_nodes=3, improved=True)
    assert w64.dtype == np.float64


@pytest.mark.parametrize(
    "args, match",
    [
        (dict(src={"h": np.zeros((40, 4), dtype=np.int32)}), "int32"),
        (dict(src={"h": np.zeros((39, 4), dtype=np.float32)}), "39"),
        (dict(src={}), "`h`"),
        (dict(src={"h": np.zeros((40, 4), dtype=np.float32), "extra": np.zeros(40, dtype=np.float32)}), "extra"),
        (dict(src={"h": [1.0, 2.0]}), "list"),
        (dict(src=[1, 2]), "dict"),
    ],
)
def test_bad_arguments_are_input_errors(graph, args, match):
    _, g = graph
    with pytest.raises(tiga.InputError, match=match):
        tiga.gnn.VecSum(g, **args)


def test_bad_edge_index_is_a_graph_error():
    with pytest.raises(tiga.GraphError, match="5"):
        tiga.Graph.from_edge_index(np.array([[0, 5], [1, 0]]), num_nodes=3)
    with pytest.raises(tiga.GraphError, match="-1"):
        tiga.Graph.from_edge_index(np.array([[0, -1], [1, 0]]), num_nodes=3)
    with pytest.raises(tiga.InputError, match="shape"):
        tiga.Graph.from_edge_index(np.array([0, 1, 2]))
    with pytest.raises(tiga.InputError, match="float"):
        tiga.Graph.from_edge_index(np.array([[0.0, 1.0], [1.0, 0.0]]))
    with pytest.raises(tiga.GraphError):
        tiga.Graph.from_csr(np.array([0, 3, 2]), np.array([0, 1, 0]))


def test_bad_kernels_and_files_are_named(tmp_path):
    bad = tmp_path / "bad.rs"
    bad.write_text("#[message_passing(reduce = sum)]\npub mod K {\n    pub fn edge(src: &Src) -> f32 { src.nope }\n}\n")
    with pytest.raises(tiga.KernelError, match="bad.rs:"):
        tiga.load(bad)
    with pytest.raises(tiga.FileError):
        tiga.load(tmp_path / "missing.rs")
    junk = tmp_path / "junk.gfg"
    junk.write_bytes(b"not a gfg file at all")
    with pytest.raises(tiga.FileError):
        tiga.Graph.from_gfg(junk)
    with pytest.raises(tiga.TigaError, match="it has: "):
        tiga.gnn["Nope"]
    with pytest.raises(KeyError):
        tiga.gnn["Nope"]
    with pytest.raises(tiga.InputError, match="backend"):
        tiga.Schedule(backend="fast")


def test_load_a_kernel_file_from_disk(tmp_path, rng):
    p = tmp_path / "k.rs"
    p.write_text(tiga._tiga.gnn_source())
    m = tiga.load(p)
    assert m.names() == tiga.gnn.names()
    ei = random_graph(rng, 10, 30)
    g = tiga.Graph.from_edge_index(ei, 10)
    x = rng.standard_normal(10).astype(np.float32)
    np.testing.assert_array_equal(m.Smoothing(g, src={"x": x})["out"], tiga.gnn.Smoothing(g, src={"x": x})["out"])


def test_calls_from_threads_run_concurrently_and_agree(rng):
    ei = random_graph(rng, 2000, 40000)
    g = tiga.Graph.from_edge_index(ei, 2000)
    h = rng.standard_normal((2000, 32)).astype(np.float32)
    want = tiga.gnn.VecSum(g, src={"h": h})["out"]
    results = [None] * 4

    def work(i):
        results[i] = tiga.gnn.VecSum(g, src={"h": h}, schedule=tiga.Schedule(threads=1))["out"]

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in results:
        np.testing.assert_array_equal(r, want)
