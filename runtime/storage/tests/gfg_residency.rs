//! A page of a `.gfg` read through the mapping leaves the resident set when
//! released: what a paged run's bounded memory rests on. One test in its own
//! binary (its own process), so the file-backed resident set it measures is
//! its own.

use tiga_runtime::{Graph, TensorView};
use tiga_storage::save_gfg;
use tiga_storage::{FieldRole, GfgFile};

/// `RssFile` of this process in KiB (file-backed resident pages).
fn rss_file_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("RssFile:"))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("RssFile")
}

#[test]
fn released_pages_leave_the_resident_set() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("g.gfg");
    // 4M edges: 16 MB of columns, 8 MB of row offsets.
    let g = Graph::stencil_2d_4(1000, 1000).expect("stencil");
    let none: [(FieldRole, &str, TensorView<'_>); 0] = [];
    save_gfg(&path, &g, false, &none).expect("save");
    let f = GfgFile::open(&path).expect("open");
    let n = g.num_dst();
    let before = rss_file_kib();
    // First visit: the checks read the whole page, then unmap it again.
    let page = f.page(0..n).expect("page");
    let checked = rss_file_kib();
    assert!(checked < before + 4 * 1024, "the checked page stayed mapped: {before} -> {checked} KiB");
    // Reading it maps it (about 24 MB).
    let sum: u64 = page.cols.iter().map(|&c| u64::from(c)).sum::<u64>() + page.offsets.iter().sum::<u64>();
    let read = rss_file_kib();
    assert!(read >= before + 20 * 1024, "reading 24 MB mapped only {} KiB", read.saturating_sub(before));
    f.release_page(&page);
    let released = rss_file_kib();
    assert!(released < before + 4 * 1024, "release left {} KiB mapped", released.saturating_sub(before));
    // Views stay valid after a release: the data comes back from the file.
    let again: u64 = page.cols.iter().map(|&c| u64::from(c)).sum::<u64>() + page.offsets.iter().sum::<u64>();
    assert_eq!(sum, again);
    let expect: u64 = g.cols().iter().map(|&c| u64::from(c)).sum::<u64>() + g.offsets().iter().sum::<u64>();
    assert_eq!(sum, expect);
    f.release_page(&page);
    // Pages in a row, each released after the next one is read (as a paged
    // run does): the resident set stays about two pages.
    let mut prev = None;
    let mut most = 0;
    for start in (0..n).step_by(100_000) {
        let p = f.page(start..(start + 100_000).min(n)).expect("page");
        std::hint::black_box(p.cols.iter().map(|&c| u64::from(c)).sum::<u64>());
        if let Some(q) = prev.replace(p) {
            f.release_page(&q);
        }
        most = most.max(rss_file_kib().saturating_sub(before));
    }
    if let Some(q) = prev {
        f.release_page(&q);
    }
    f.release_adjacency();
    // Two pages are 4.8 MB; measured: about 2 MB (the page being read).
    assert!(most < 6 * 1024, "streaming held {most} KiB");
    assert!(rss_file_kib() < before + 2 * 1024, "release_adjacency left pages mapped");
}
