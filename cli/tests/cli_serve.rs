//! `tigac serve` as a process: two servers on loopback give the mini-batch
//! `tigac sample` writes for the same seeds, fanouts and seed; `--sessions
//! 1` exits 0 once its session closed; a server killed (SIGKILL) mid-epoch
//! fails the loader within its deadline, naming it; a token file refuses
//! calls without the token; bad flags and files are refused by name.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use tiga_graph_store::{ConnectOptions, LoaderOptions, NeighborLoader, RemoteDataset};
use tiga_storage::{read_npy_ids, write_npy_ids};

fn tigac(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tigac")).args(args).output().expect("tigac runs")
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}\n{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
}

fn s(p: &Path) -> String {
    p.to_str().expect("path").to_string()
}

/// A 300-node graph as a .gfg (tigac convert), with a hub and empty rows.
fn gfg(dir: &Path) -> PathBuf {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut text = String::new();
    for _ in 0..3000 {
        let d = if next(5) == 0 { 1 } else { next(280) };
        text.push_str(&format!("{} {d}\n", next(300)));
    }
    text.push_str("299 299\n");
    let txt = dir.join("g.txt");
    std::fs::write(&txt, text).expect("edges");
    let g = dir.join("g.gfg");
    ok(&tigac(&["convert", &s(&txt), &s(&g)]));
    g
}

/// A running `tigac serve` and the address it printed.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tigac"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tigac serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("a line");
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    Server { child, addr }
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < within {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn two_servers_give_the_batch_tigac_sample_writes_then_exit_after_their_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = gfg(dir.path());
    let seeds = [1i64, 150, 299, 7, 150, 42];
    let seeds_npy = dir.path().join("seeds.npy");
    write_npy_ids(&seeds_npy, &seeds).expect("seeds");
    let out = dir.path().join("out");
    ok(&tigac(&["sample", "--graph", &s(&g), "--seeds", &s(&seeds_npy), "--fanout", "10,3", "--seed", "7", "--out", &s(&out)]));

    let mut servers: Vec<Server> =
        (0..2).map(|r| serve(&["--graph", &s(&g), "--partition", &format!("{r}/2"), "--sessions", "1"])).collect();
    let addrs: Vec<String> = servers.iter().map(|x| x.addr.clone()).collect();
    let ds = RemoteDataset::connect(&addrs, &ConnectOptions::default()).expect("connect");
    let opts = LoaderOptions { batch_size: seeds.len(), fanouts: vec![10, 3], sample_seed: 7, ..LoaderOptions::default() };
    let loader = NeighborLoader::new(&ds, seeds.to_vec(), opts).expect("loader");
    let batches: Vec<_> = loader.epoch(0).collect::<Result<_, _>>().expect("batches");
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    let read = |name: &str| read_npy_ids(out.join(format!("{name}.npy"))).expect("npy");
    assert_eq!(b.nodes, read("nodes"));
    for (k, h) in b.hops.iter().enumerate() {
        let widen = |v: &[u32]| v.iter().map(|&x| i64::from(x)).collect::<Vec<i64>>();
        assert_eq!(widen(&h.src), read(&format!("hop{k}.src")), "hop {k} src");
        assert_eq!(widen(&h.dst), read(&format!("hop{k}.dst")), "hop {k} dst");
        assert_eq!(h.edge_ids.iter().map(|&e| e as i64).collect::<Vec<_>>(), read(&format!("hop{k}.edge_ids")));
    }
    drop(loader);
    ds.close().expect("close");
    for srv in &mut servers {
        let st = wait_exit(&mut srv.child, Duration::from_secs(10)).expect("the server exits after its session");
        assert!(st.success(), "{st:?}");
    }
}

#[test]
fn a_killed_server_process_fails_the_loader_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = gfg(dir.path());
    let mut servers: Vec<Server> = (0..2).map(|r| serve(&["--graph", &s(&g), "--partition", &format!("{r}/2")])).collect();
    let addrs: Vec<String> = servers.iter().map(|x| x.addr.clone()).collect();
    let deadline = Duration::from_secs(3);
    let ds = RemoteDataset::connect(&addrs, &ConnectOptions { call_deadline: deadline, ..ConnectOptions::default() })
        .expect("connect");
    let opts = LoaderOptions { batch_size: 4, fanouts: vec![5, 5], prefetch: 1, ..LoaderOptions::default() };
    let loader = NeighborLoader::new(&ds, (0..300).collect(), opts).expect("loader");
    let mut epoch = loader.epoch(0);
    epoch.next().expect("a batch").expect("first batch");
    let victim = servers.pop().expect("server 1");
    let addr = victim.addr.clone();
    drop(victim); // SIGKILL
    let t = Instant::now();
    let err = epoch.find_map(Result::err).expect("an error after the kill");
    let msg = err.to_string();
    assert!(msg.contains(&addr) && msg.contains("storage server 1"), "{msg}");
    assert!(t.elapsed() < deadline + Duration::from_secs(2), "{:?}: {msg}", t.elapsed());
}

#[test]
fn tokens_and_bad_flags_are_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = gfg(dir.path());
    let token = dir.path().join("token");
    std::fs::write(&token, "abc123\n").expect("token");
    let srv = serve(&["--graph", &s(&g), "--partition", "0/1", "--token-file", &s(&token)]);
    let err = RemoteDataset::connect(std::slice::from_ref(&srv.addr), &ConnectOptions::default()).expect_err("no token");
    assert!(err.to_string().contains("Unauthenticated"), "{err}");
    let ds = RemoteDataset::connect(
        std::slice::from_ref(&srv.addr),
        &ConnectOptions { token: Some("abc123".into()), ..ConnectOptions::default() },
    )
    .expect("with the token");
    assert_eq!(ds.fetch_node_ids(0, 1, None).expect("ids").len(), 300);
    drop(ds);

    let o = tigac(&["serve", "--graph", &s(&g), "--partition", "2/2"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tigac(&["serve", "--graph", &s(&g), "--partition", "0/1", "--features", "x=missing.npy"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.npy"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tigac(&["serve", "--graph", &s(&g), "--partition", "0/1", "--split", "node:0.9,0.9,0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sum"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tigac(&["serve", "--graph", &s(&dir.path().join("nope.gfg")), "--partition", "0/1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope.gfg"));
}
