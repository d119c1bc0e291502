"""A Python client of tiga's graph store, generated from proto/graph_store.proto
with grpcio-tools, against two running `tigac serve` processes.

Usage: grpc_python_check.py GENERATED_DIR TIGAC WORK_DIR

It writes a graph as an edge list, builds its .gfg with `tigac convert`,
samples one hop with `tigac sample` (the reference), starts rank 0 and 1 of
2 servers with a token and `--sessions 1`, and checks Info, FetchNodeIds
and SampleNeighbors against the edge list and the reference files; then
that calls without the token and malformed requests are refused with the
right status, and that both servers exit 0 once their session closed.
Needs only grpcio: .npy files are parsed here by hand.
"""

import ast
import os
import struct
import subprocess
import sys

gen, tigac, work = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, gen)

import grpc  # noqa: E402
import graph_store_pb2 as pb  # noqa: E402
import graph_store_pb2_grpc as pbg  # noqa: E402

N = 120
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise SystemExit(f"grpc-python: FAILED: {what}")
    checks += 1


def read_npy_i64(path):
    """A 1-D little-endian int64 .npy, parsed by hand."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:6] == b"\x93NUMPY", f"{path} is a .npy")
    major = data[6]
    if major == 1:
        hlen = struct.unpack("<H", data[8:10])[0]
        start = 10
    else:
        hlen = struct.unpack("<I", data[8:12])[0]
        start = 12
    header = ast.literal_eval(data[start : start + hlen].decode("latin1"))
    check(header["descr"] == "<i8" and not header["fortran_order"], f"{path}: int64, C order")
    (n,) = header["shape"]
    body = data[start + hlen :]
    return list(struct.unpack(f"<{n}q", body[: 8 * n]))


def write_npy_i64(path, values):
    header = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{len(values)}q", *values))


# The graph: a deterministic pseudo-random edge list with a hub and empty rows.
state = 12345
edges = []
for _ in range(900):
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    d = (state >> 33) % 110
    if (state >> 20) % 4 == 0:
        d = 0
    state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    edges.append(((state >> 33) % N, d))
edges.append((N - 1, N - 1))
os.makedirs(work, exist_ok=True)
txt = os.path.join(work, "g.txt")
with open(txt, "w") as f:
    f.writelines(f"{s} {d}\n" for s, d in edges)
gfg = os.path.join(work, "g.gfg")
subprocess.run([tigac, "convert", txt, gfg], check=True, stdout=subprocess.DEVNULL)

# The reference: one hop of fanout 3, seed 7, from every node, by tigac sample.
centres = list(range(N))
seeds_npy = os.path.join(work, "seeds.npy")
write_npy_i64(seeds_npy, centres)
ref = os.path.join(work, "ref")
subprocess.run(
    [tigac, "sample", "--graph", gfg, "--seeds", seeds_npy, "--fanout", "3", "--seed", "7", "--out", ref],
    check=True,
    stdout=subprocess.DEVNULL,
)
ref_nodes = read_npy_i64(os.path.join(ref, "nodes.npy"))
ref_src = read_npy_i64(os.path.join(ref, "hop0.src.npy"))
ref_dst = read_npy_i64(os.path.join(ref, "hop0.dst.npy"))
ref_ids = read_npy_i64(os.path.join(ref, "hop0.edge_ids.npy"))
expected = {c: [] for c in centres}
for s, d, e in zip(ref_src, ref_dst, ref_ids):
    expected[ref_nodes[d]].append((ref_nodes[s], e))

token_file = os.path.join(work, "token")
with open(token_file, "w") as f:
    f.write("py-token\n")
auth = (("authorization", "Bearer py-token"),)

servers = []
for r in range(2):
    p = subprocess.Popen(
        [tigac, "serve", "--graph", gfg, "--partition", f"{r}/2", "--listen", "127.0.0.1:0",
         "--token-file", token_file, "--sessions", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    check(line.startswith("listening on "), f"server {r} says where it listens: {line!r}")
    servers.append((p, line.split()[2]))

try:
    covered = 0
    for r, (proc, addr) in enumerate(servers):
        stub = pbg.GraphStoreStub(grpc.insecure_channel(addr))
        # Without the token: refused.
        try:
            stub.Info(pb.InfoRequest(), timeout=10)
            check(False, "Info without the token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"no token: {e.code()}")
        info = stub.Info(pb.InfoRequest(), metadata=auth, timeout=10)
        check(info.num_nodes == N and info.num_edges == len(edges), f"Info sizes {info.num_nodes} {info.num_edges}")
        check(info.rank == r and info.world == 2, "Info rank and world")
        check(info.owned_begin == covered and info.owned_end > info.owned_begin, "owned ranges are contiguous")
        covered = info.owned_end
        check(list(info.feature_names) == [], "no features")
        session = stub.OpenSession(pb.OpenSessionRequest(protocol_version=1, client="python"), metadata=auth, timeout=10).session_id
        # Another protocol version: refused.
        try:
            stub.OpenSession(pb.OpenSessionRequest(protocol_version=2), metadata=auth, timeout=10)
            check(False, "protocol version 2 is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.FAILED_PRECONDITION, f"version 2: {e.code()}")

        owned = list(range(info.owned_begin, info.owned_end))
        ids = []
        for reply in stub.FetchNodeIds(pb.FetchNodeIdsRequest(rank=0, world_size=1, session_id=session), metadata=auth, timeout=10):
            ids.extend(reply.ids)
        check(ids == owned, f"server {r}: FetchNodeIds(0 of 1) is its owned range")
        # Two compute ranks and two servers: server r's ids go to compute rank r, none to the other.
        for rank in range(2):
            got = []
            for reply in stub.FetchNodeIds(pb.FetchNodeIdsRequest(rank=rank, world_size=2, session_id=session), metadata=auth, timeout=10):
                got.extend(reply.ids)
            check(got == (owned if rank == r else []), f"server {r}: FetchNodeIds({rank} of 2)")

        offsets, neighbors, edge_ids = [], [], []
        req = pb.SampleNeighborsRequest(centers=owned, fanout=3, seed=7, with_edge_ids=True, session_id=session)
        for reply in stub.SampleNeighbors(req, metadata=auth, timeout=10):
            offsets.extend(reply.offsets)
            neighbors.extend(reply.neighbors)
            edge_ids.extend(reply.edge_ids)
        check(len(offsets) == len(owned) + 1 and offsets[0] == 0 and offsets[-1] == len(neighbors), "offsets")
        for k, c in enumerate(owned):
            got = list(zip(neighbors[offsets[k]:offsets[k + 1]], edge_ids[offsets[k]:offsets[k + 1]]))
            degree = sum(1 for s, d in edges if d == c)
            check(len(got) == min(3, degree), f"centre {c}: fanout holds")
            check(len({e for _, e in got}) == len(got), f"centre {c}: no edge twice")
            for n, e in got:
                check(edges[e] == (n, c), f"centre {c}: edge {e} is {n} -> {c} in the graph file")
            check(got == expected[c], f"centre {c}: the sample tigac sample draws")

        # Malformed: a centre out of range, one another server owns.
        for bad, code in (([N + 5], grpc.StatusCode.OUT_OF_RANGE), ([owned[0] - 1 if r else N - 1], grpc.StatusCode.INVALID_ARGUMENT)):
            try:
                list(stub.SampleNeighbors(pb.SampleNeighborsRequest(centers=bad, fanout=3, session_id=session), metadata=auth, timeout=10))
                check(False, f"centre {bad} is refused")
            except grpc.RpcError as e:
                check(e.code() == code and "centre" in e.details(), f"centre {bad}: {e.code()} {e.details()}")
        stub.CloseSession(pb.CloseSessionRequest(session_id=session), metadata=auth, timeout=10)
    check(covered == N, "the two servers own every node")
    for r, (proc, _) in enumerate(servers):
        check(proc.wait(timeout=20) == 0, f"server {r} exits 0 after its session")
finally:
    for proc, _ in servers:
        if proc.poll() is None:
            proc.kill()

print(f"grpc-python: {checks} passed, 0 failed")
