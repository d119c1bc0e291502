//! The graph store end to end on loopback: 1, 2 and 3 storage servers,
//! 1 and 2 compute ranks. Every id is fetched by exactly one compute rank;
//! a mini-batch sampled through the store is the one sampled from the
//! whole graph in one process with the same seed (so every sampled edge
//! exists, fanouts hold, nothing repeats); features are the source rows;
//! splits are disjoint and cover what they should; a kernel on a fetched
//! mini-batch equals the kernel on the block built locally. Then the
//! faults: a killed server, a missing token, another protocol version,
//! malformed requests, shutdown in the wrong order.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use tiga::runtime::sampling::sample_multi_hop;
use tiga::runtime::{save_gfg, write_npy, FieldRole};
use tiga::storage::GfgWriter;
use tiga::Renumber;
use tiga::{message_passing, Graph, Inputs, Tensor};
use tiga_graph_store::proto::graph_store_client::GraphStoreClient;
use tiga_graph_store::proto::*;
use tiga_graph_store::{
    AblpLoader, AblpOptions, ConnectOptions, FeatureFile, LoaderOptions, NeighborLoader, Part, RemoteDataset, ServeOptions,
    ServerHandle, SplitKind, SplitSpec, StoreError,
};

#[message_passing(reduce = mean)]
pub mod SageMean {
    use tiga::lang::*;
    pub struct Src {
        pub h: Vector<f32>,
    }
    pub fn edge(src: &Src) -> Vector<f32> {
        src.h.clone()
    }
}

const N: usize = 600;
const FH: usize = 8;

struct Fixture {
    _dir: tempfile::TempDir,
    gfg: std::path::PathBuf,
    /// The same graph and fields written in degree order (`--renumber`).
    gfg_stored: std::path::PathBuf,
    x_npy: std::path::PathBuf,
    ew_npy: std::path::PathBuf,
    graph: Graph,
    src: Vec<u32>,
    dst: Vec<u32>,
    h: Vec<f32>,
    w: Vec<f64>,
    x: Vec<f64>,
    ew: Vec<f32>,
}

fn lcg(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *state >> 33
}

/// A random graph with skewed degrees, isolated nodes, self loops and
/// multi-edges, edges in random order (so the file stores edge ids).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = 42u64;
    let (mut src, mut dst) = (Vec::new(), Vec::new());
    for _ in 0..6000 {
        let d = (lcg(&mut s) % N as u64) as u32;
        // Skewed: low ids are popular destinations; nodes ≥ 580 get none.
        let d = if d.is_multiple_of(3) { d % 40 } else { d };
        if d >= 580 {
            continue;
        }
        let v = (lcg(&mut s) % N as u64) as u32;
        src.push(v);
        dst.push(d);
    }
    src.push(7);
    dst.push(7);
    src.push(3);
    dst.push(9);
    src.push(3);
    dst.push(9);
    let graph = Graph::from_edges(N, N, &src, &dst).expect("graph");
    let e = src.len();
    let h: Vec<f32> = (0..N * FH).map(|i| (i as f32 * 0.37).sin()).collect();
    let w: Vec<f64> = (0..e).map(|i| i as f64 * 0.5 + 1.0).collect();
    let x: Vec<f64> = (0..N * 4).map(|i| i as f64 - 3.0).collect();
    let ew: Vec<f32> = (0..e).map(|i| i as f32 * 2.0).collect();
    let gfg = dir.path().join("g.gfg");
    let ht = Tensor::from_f32(vec![N, FH], h.clone()).expect("h");
    let wt = Tensor::from_f64(vec![e], w.clone()).expect("w");
    save_gfg(&gfg, &graph, false, &[(FieldRole::Src, "h", ht.view()), (FieldRole::Edge, "w", wt.view())]).expect("save");
    let gfg_stored = dir.path().join("degree.gfg");
    let order = graph.renumbered(Renumber::Degree).expect("renumbers").expect("an order");
    GfgWriter::renumbered(&graph, &order)
        .expect("writer")
        .field(FieldRole::Src, "h", ht.view())
        .field(FieldRole::Edge, "w", wt.view())
        .save(&gfg_stored)
        .expect("save in degree order");
    let x_npy = dir.path().join("x.npy");
    write_npy(&x_npy, &Tensor::from_f64(vec![N, 4], x.clone()).expect("x").view()).expect("x.npy");
    let ew_npy = dir.path().join("ew.npy");
    write_npy(&ew_npy, &Tensor::from_f32(vec![e], ew.clone()).expect("ew").view()).expect("ew.npy");
    Fixture { _dir: dir, gfg, gfg_stored, x_npy, ew_npy, graph, src, dst, h, w, x, ew }
}

fn splits() -> Vec<SplitSpec> {
    vec![
        SplitSpec { kind: SplitKind::Node, train: 0.6, val: 0.2, test: 0.2, seed: 5 },
        SplitSpec { kind: SplitKind::Link, train: 0.7, val: 0.15, test: 0.15, seed: 9 },
    ]
}

fn start(f: &Fixture, world: usize, token: Option<&str>) -> Vec<ServerHandle> {
    start_on(&f.gfg, f, world, token)
}

fn start_on(gfg: &std::path::Path, f: &Fixture, world: usize, token: Option<&str>) -> Vec<ServerHandle> {
    (0..world)
        .map(|r| {
            let mut o = ServeOptions::new(gfg, r, world);
            o.features = vec![
                FeatureFile { kind: None, name: "x".into(), path: f.x_npy.clone() },
                FeatureFile {
                    kind: Some(tiga_graph_store::features::FeatureKind::Edge),
                    name: "ew".into(),
                    path: f.ew_npy.clone(),
                },
            ];
            o.splits = splits();
            o.token = token.map(str::to_string);
            ServerHandle::start(&o).expect("server starts")
        })
        .collect()
}

fn addrs(s: &[ServerHandle]) -> Vec<String> {
    s.iter().map(|h| h.addr().to_string()).collect()
}

fn connect(s: &[ServerHandle]) -> RemoteDataset {
    RemoteDataset::connect(&addrs(s), &ConnectOptions::default()).expect("connect")
}

fn rows<T: Copy>(all: &[T], width: usize, ids: impl Iterator<Item = usize>) -> Vec<T> {
    ids.flat_map(|i| all[i * width..(i + 1) * width].iter().copied()).collect()
}

#[test]
fn store_matches_the_file_for_1_2_3_servers_and_1_2_ranks() {
    let f = fixture();
    let fanouts = vec![4i64, 3];
    // The file stored in degree order serves the caller's ids: every
    // assertion below holds for it as for the plain file.
    for (servers, gfg) in (1..=3).map(|s| (s, &f.gfg)).chain([(1, &f.gfg_stored), (3, &f.gfg_stored)]) {
        let handles = start_on(gfg, &f, servers, None);
        let ds = connect(&handles);
        assert_eq!(ds.num_nodes(), N as i64);
        assert_eq!(ds.features().len(), 4, "{:?}", ds.features());
        for world in 1..=2u32 {
            // Every id to exactly one rank, all splits alike.
            for split in [None, Some("train"), Some("val"), Some("test")] {
                let mut seen: Vec<i64> = Vec::new();
                for rank in 0..world {
                    seen.extend(ds.fetch_node_ids(rank, world, split).expect("ids"));
                }
                let set: BTreeSet<i64> = seen.iter().copied().collect();
                assert_eq!(set.len(), seen.len(), "{servers} servers, {world} ranks, {split:?}: an id fetched twice");
                let expected: BTreeSet<i64> =
                    (0..N as i64).filter(|&i| split.is_none_or(|p| splits()[0].part_of(i as u64) == Part::parse(p))).collect();
                assert_eq!(set, expected, "{servers} servers, {world} ranks, split {split:?}");
            }
            // Link split: anchors disjoint across parts, covering every node with an in-edge; positives are
            // the in-neighbours.
            let mut anchors_all = HashSet::new();
            for part in ["train", "val", "test"] {
                for rank in 0..world {
                    let a = ds.fetch_ablp_input(part, rank, world, Some((2, 11))).expect("ablp");
                    assert_eq!(a.positive_offsets.len(), a.anchors.len() + 1);
                    for (k, &anchor) in a.anchors.iter().enumerate() {
                        assert!(anchors_all.insert(anchor), "anchor {anchor} in two splits or ranks");
                        assert_eq!(splits()[1].part_of(anchor as u64), Part::parse(part));
                        let row = f.graph.row(anchor as usize);
                        let expected: Vec<i64> = f.graph.cols()[row].iter().map(|&c| i64::from(c)).collect();
                        assert_eq!(a.positives[a.positive_offsets[k]..a.positive_offsets[k + 1]], expected[..]);
                        let neg = &a.negatives[a.negative_offsets[k]..a.negative_offsets[k + 1]];
                        assert_eq!(neg.len(), 2);
                        assert!(neg.iter().all(|&n| (0..N as i64).contains(&n)));
                    }
                }
            }
            let with_edges: HashSet<i64> = (0..N).filter(|&i| !f.graph.row(i).is_empty()).map(|i| i as i64).collect();
            assert_eq!(anchors_all, with_edges);

            // Mini-batches: the ones the whole file gives with the same seed; features are the source rows.
            for rank in 0..world {
                let seeds = ds.fetch_node_ids(rank, world, None).expect("ids");
                let opts = LoaderOptions {
                    batch_size: 64,
                    fanouts: fanouts.clone(),
                    shuffle: true,
                    seed: 3,
                    drop_last: false,
                    prefetch: 2,
                    sample_seed: 17,
                    node_features: vec!["h".into(), "x".into()],
                    edge_features: vec!["w".into(), "ew".into()],
                };
                let loader = NeighborLoader::new(&ds, seeds.clone(), opts).expect("loader");
                let mut count = 0;
                let mut seen = 0;
                for (b, batch) in loader.epoch(1).enumerate() {
                    let batch = batch.expect("batch");
                    assert_eq!(batch.sample_seed, 18);
                    let bs: Vec<u32> = batch.nodes[..batch.num_seeds].iter().map(|&s| s as u32).collect();
                    assert_eq!(batch.nodes[..batch.num_seeds], loader.batch_seeds(1)[b][..]);
                    let local = sample_multi_hop(&f.graph, &bs, &fanouts, 18, None, None).expect("local");
                    let nodes: Vec<u32> = batch.nodes.iter().map(|&n| n as u32).collect();
                    assert_eq!(nodes, local.nodes, "{servers} servers, batch {b}: nodes");
                    assert_eq!(batch.hops, local.hops, "{servers} servers, batch {b}: hops");
                    for h in &batch.hops {
                        for e in 0..h.src.len() {
                            let id = h.edge_ids[e] as usize;
                            assert_eq!(
                                (f.src[id], f.dst[id]),
                                (nodes[h.src[e] as usize], nodes[h.dst[e] as usize]),
                                "edge {id} exists"
                            );
                        }
                    }
                    let ids = || batch.nodes.iter().map(|&n| n as usize);
                    assert_eq!(batch.node_feature("h").expect("h").as_f32().expect("f32"), &rows(&f.h, FH, ids())[..]);
                    assert_eq!(batch.node_feature("x").expect("x").as_f64().expect("f64"), &rows(&f.x, 4, ids())[..]);
                    let eids = batch.block_edge_ids();
                    let e = || eids.iter().map(|&e| e as usize);
                    assert_eq!(batch.edge_feature("w").expect("w").as_f64().expect("f64"), &rows(&f.w, 1, e())[..]);
                    assert_eq!(batch.edge_feature("ew").expect("ew").as_f32().expect("f32"), &rows(&f.ew, 1, e())[..]);

                    // A kernel on the fetched batch equals the kernel on the block built locally.
                    let hb = batch.node_feature("h").expect("h");
                    let out = SageMean::kernel().run(&batch, &Inputs::new().src("h", hb)).expect("run on the batch");
                    let (src_l, dst_l): (Vec<u32>, Vec<u32>) =
                        local.hops.iter().flat_map(|h| h.src.iter().copied().zip(h.dst.iter().copied())).unzip();
                    let g = Graph::from_edges(local.nodes.len(), local.nodes.len(), &src_l, &dst_l).expect("block");
                    let hl =
                        Tensor::from_f32(vec![local.nodes.len(), FH], rows(&f.h, FH, local.nodes.iter().map(|&n| n as usize)))
                            .expect("h");
                    let out_l = SageMean::kernel().run(&g, &Inputs::new().src("h", &hl)).expect("run locally");
                    assert_eq!(out.out().expect("out").as_f32(), out_l.out().expect("out").as_f32());
                    count += 1;
                    seen += batch.num_seeds;
                }
                assert_eq!(count, loader.num_batches());
                assert_eq!(seen, seeds.len());
                let stats = loader.close().expect("close loader");
                assert_eq!(stats.iter().map(|s| s.centers_sampled).sum::<u64>() > 0, !seeds.is_empty());
            }
        }
        // Link prediction batches: labels are local indices of the right nodes.
        let mut ablp = AblpLoader::new(
            &ds,
            AblpOptions {
                loader: LoaderOptions { batch_size: 50, fanouts: vec![3], ..LoaderOptions::default() },
                split: "train".into(),
                rank: 0,
                world: 1,
                num_negatives: 2,
                negative_seed: 1,
            },
        )
        .expect("ablp loader");
        let input = ablp.input().clone();
        let mut k = 0;
        for b in ablp.epoch(0).expect("epoch") {
            let b = b.expect("ablp batch");
            for a in 0..b.num_anchors {
                assert_eq!(b.batch.nodes[a], input.anchors[k]);
                let pos: Vec<i64> =
                    b.positives[b.positive_offsets[a]..b.positive_offsets[a + 1]].iter().map(|&l| b.batch.nodes[l]).collect();
                assert_eq!(pos, input.positives[input.positive_offsets[k]..input.positive_offsets[k + 1]]);
                k += 1;
            }
        }
        assert_eq!(k, input.anchors.len());
        drop(ablp);
        assert_eq!(ds.close().expect("close"), vec![0; servers]);
        for h in handles {
            h.stop().expect("stop");
        }
    }
}

#[test]
fn a_killed_server_fails_the_loader_within_its_deadline_naming_it() {
    let f = fixture();
    let mut handles = start(&f, 2, None);
    let deadline = Duration::from_secs(3);
    let ds = RemoteDataset::connect(&addrs(&handles), &ConnectOptions { call_deadline: deadline, ..ConnectOptions::default() })
        .expect("connect");
    let seeds: Vec<i64> = (0..N as i64).collect();
    let opts = LoaderOptions { batch_size: 8, fanouts: vec![5, 5], prefetch: 1, ..LoaderOptions::default() };
    let loader = NeighborLoader::new(&ds, seeds, opts).expect("loader");
    let mut epoch = loader.epoch(0);
    epoch.next().expect("a batch").expect("the first batch");
    let victim = handles.pop().expect("server 1");
    let addr = victim.addr().to_string();
    victim.kill();
    let t = Instant::now();
    let err = loop {
        match epoch.next() {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the epoch ended without an error after server 1 died"),
        }
    };
    let after = t.elapsed();
    let msg = err.to_string();
    assert!(msg.contains(&addr) && msg.contains("storage server 1"), "{msg}");
    assert!(after < deadline + Duration::from_secs(2), "failed after {after:?}: {msg}");
    drop(epoch);
    // Loader and dataset go away without hanging on the dead server.
    let t = Instant::now();
    drop(loader);
    drop(ds);
    assert!(t.elapsed() < deadline * 3, "shutdown took {:?}", t.elapsed());
}

#[test]
fn token_version_and_malformed_requests_are_refused_by_name() {
    let f = fixture();
    let handles = start(&f, 2, Some("s3cret"));
    let a = addrs(&handles);
    // No token.
    let err = RemoteDataset::connect(&a, &ConnectOptions::default()).expect_err("no token");
    assert!(err.to_string().contains("Unauthenticated") && err.to_string().contains("token"), "{err}");
    // A wrong token.
    let err = RemoteDataset::connect(&a, &ConnectOptions { token: Some("guess".into()), ..ConnectOptions::default() })
        .expect_err("wrong token");
    assert!(err.to_string().contains("Unauthenticated"), "{err}");
    // Another protocol version.
    let opts = ConnectOptions { token: Some("s3cret".into()), protocol_version: 99, ..ConnectOptions::default() };
    let err = RemoteDataset::connect(&a, &opts).expect_err("version 99");
    assert!(err.to_string().contains("FailedPrecondition") && err.to_string().contains("protocol version 99"), "{err}");
    // The right token.
    let ds =
        RemoteDataset::connect(&a, &ConnectOptions { token: Some("s3cret".into()), ..ConnectOptions::default() }).expect("token");
    assert!(matches!(ds.fetch_node_features("nope", &[1]), Err(StoreError::UnknownFeature { .. })));

    // Malformed requests straight to server 0, which owns [0, 300).
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", a[0])).expect("uri").connect().await.expect("ch");
        let token: tonic::metadata::MetadataValue<_> = "Bearer s3cret".parse().expect("meta");
        let mut c = GraphStoreClient::with_interceptor(ch, move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", token.clone());
            Ok(r)
        });
        let session = c
            .open_session(OpenSessionRequest { protocol_version: tiga_graph_store::PROTOCOL_VERSION, client: "test".into() })
            .await
            .expect("open")
            .into_inner()
            .session_id;
        let sample = |centers: Vec<i64>, fanout: i64, session_id: u64| SampleNeighborsRequest {
            centers,
            fanout,
            seed: 0,
            with_edge_ids: true,
            hop: 0,
            session_id,
            loader_id: 0,
        };
        let cases: Vec<(SampleNeighborsRequest, tonic::Code, &str)> = vec![
            (sample(vec![5, 10_000], 3, session), tonic::Code::OutOfRange, "centre 10000 is not a node"),
            (sample(vec![-1], 3, session), tonic::Code::OutOfRange, "centre -1"),
            (sample(vec![450], 3, session), tonic::Code::InvalidArgument, "not owned by storage server 0"),
            (sample(vec![5], -7, session), tonic::Code::InvalidArgument, "fanout -7"),
            (sample(vec![5], 3, 12345), tonic::Code::FailedPrecondition, "session 12345 is not open"),
            (
                SampleNeighborsRequest { loader_id: 77, ..sample(vec![5], 3, session) },
                tonic::Code::FailedPrecondition,
                "loader 77",
            ),
        ];
        for (req, code, text) in cases {
            let st = c.sample_neighbors(req).await.expect_err("refused");
            assert_eq!(st.code(), code, "{}", st.message());
            assert!(st.message().contains(text), "{} (wanted {text})", st.message());
        }
        let st = c
            .fetch_features(FetchFeaturesRequest { name: "zz".into(), ids: vec![1], session_id: session, loader_id: 0 })
            .await
            .expect_err("unknown feature");
        assert_eq!(st.code(), tonic::Code::NotFound);
        assert!(st.message().contains("unknown feature `zz`") && st.message().contains("h"), "{}", st.message());
        let st = c
            .fetch_features(FetchFeaturesRequest { name: "h".into(), ids: vec![599], session_id: session, loader_id: 0 })
            .await
            .expect_err("not owned");
        assert!(st.message().contains("node 599 is not owned"), "{}", st.message());
        let st = c
            .fetch_node_ids(FetchNodeIdsRequest {
                rank: 3,
                world_size: 2,
                split: String::new(),
                node_type: String::new(),
                session_id: session,
            })
            .await
            .expect_err("rank 3 of 2");
        assert_eq!(st.code(), tonic::Code::InvalidArgument);
        let st = c
            .fetch_node_ids(FetchNodeIdsRequest {
                rank: 0,
                world_size: 1,
                split: "bogus".into(),
                node_type: String::new(),
                session_id: session,
            })
            .await
            .expect_err("bogus split");
        assert!(st.message().contains("split `bogus`"), "{}", st.message());
        let st = c
            .fetch_node_ids(FetchNodeIdsRequest {
                rank: 0,
                world_size: 1,
                split: String::new(),
                node_type: "user".into(),
                session_id: session,
            })
            .await
            .expect_err("node type");
        assert!(st.message().contains("node_type `user`"), "{}", st.message());
        // The server still answers after all that.
        let info = c.info(InfoRequest {}).await.expect("info").into_inner();
        assert_eq!((info.rank, info.world, info.owned_begin, info.owned_end), (0, 2, 0, 300));
        c.close_session(CloseSessionRequest { session_id: session }).await.expect("close");
    });
    drop(ds);
}

#[test]
fn shutdown_in_any_order_and_session_countdown() {
    let f = fixture();
    let mut o = ServeOptions::new(&f.gfg, 0, 1);
    o.sessions = Some(3);
    let h = ServerHandle::start(&o).expect("start");
    let a = vec![h.addr().to_string()];
    // A cluster with one server unreachable: the session the other opened is closed again.
    let unreachable = vec![h.addr().to_string(), "127.0.0.1:1".to_string()];
    let err = RemoteDataset::connect(&unreachable, &ConnectOptions { connect_retries: 0, ..ConnectOptions::default() })
        .expect_err("unreachable");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert_eq!(h.store().session_counts(), (0, 1, 1), "opened and closed");
    // Session 1: the dataset dropped before its loader; the session closes when the loader goes.
    let ds = RemoteDataset::connect(&a, &ConnectOptions::default()).expect("connect");
    let loader = NeighborLoader::new(&ds, (0..50).collect(), LoaderOptions { batch_size: 10, ..LoaderOptions::default() })
        .expect("loader");
    drop(ds);
    assert_eq!(loader.epoch(0).count(), 5);
    drop(loader);
    // Session 2: closed with a loader still open: the server releases it, the loader then fails by name.
    let ds = RemoteDataset::connect(&a, &ConnectOptions::default()).expect("connect");
    let loader = NeighborLoader::new(&ds, (0..50).collect(), LoaderOptions::default()).expect("loader");
    assert_eq!(ds.close().expect("close"), vec![1]);
    let first = loader.epoch(0).next().expect("an item");
    assert!(matches!(first, Err(StoreError::Closed)), "{first:?}");
    drop(loader);
    // Three sessions opened and closed: the server exits by itself.
    let t = Instant::now();
    h.wait().expect("exits cleanly");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_server_deadline_ends_calls_that_run_past_it() {
    let f = fixture();
    let mut o = ServeOptions::new(&f.gfg, 0, 1);
    o.deadline = Duration::from_nanos(1);
    let h = ServerHandle::start(&o).expect("start");
    // With a 1 ns deadline some call fails past it: a streamed one by the
    // server's own check between chunks (DeadlineExceeded), or any call by
    // the transport's timeout (Cancelled, "Timeout expired") when the
    // machine is slow enough that it fires first. Either names the method.
    let t = Instant::now();
    let result = RemoteDataset::connect(&[h.addr().to_string()], &ConnectOptions::default())
        .and_then(|ds| ds.fetch_node_ids(0, 1, None).map(|_| ()));
    let msg = result.expect_err("past the deadline").to_string();
    assert!(msg.contains("DeadlineExceeded") || msg.contains("Timeout expired"), "{msg}");
    assert!(["FetchNodeIds", "OpenSession", "Info"].iter().any(|m| msg.contains(&format!("{m} failed"))), "{msg}");
    assert!(t.elapsed() < Duration::from_secs(5));
}
