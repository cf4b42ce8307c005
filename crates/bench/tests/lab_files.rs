//! `tickwire bench files` as a test: a small run writes the results other tools read
//! (`files`, `peers.uftp`, `peers.rsync` with the same keys on the same classes) and
//! the rows of market data beside files. Its own test binary: the run moves
//! files at 200 MB/s over the backbone, which would starve the other lab tests beside it.

#[path = "../../cli/tests/common/mod.rs"]
mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;

/// `bench files` (a small run: 20 + 5 + 1 files and a 2 MB one to one site, market data
/// held 1 s) writes its keys: `files` and `peers.uftp` / `peers.rsync` on the
/// same classes, the rows of market data beside files, and the faults' rows (whose
/// files must be whole). No figure is judged for speed.
#[test]
fn bench_files_writes_files_peers_and_market_data_beside_files() {
    let dir = std::env::temp_dir().join(format!("tickwire-files-lab-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(
        &[
            "bench",
            "files",
            "--out",
            dir.to_str().unwrap(),
            "--files-scale",
            "0.01",
            "--files-large-mb",
            "2",
            "--files-sites",
            "1",
            "--files-fsync",
            "never",
            "--step-seconds",
            "1",
        ],
        Duration::from_secs(600),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("results.json")).expect("results.json"),
    )
    .expect("valid JSON");
    let classes = |rows: &Value| -> Vec<String> {
        rows.as_array()
            .expect("a list")
            .iter()
            .map(|row| {
                for key in [
                    "files",
                    "bytes",
                    "sites",
                    "files_per_min",
                    "mb_per_s",
                    "cpu_s_per_gb",
                    "syscalls_per_file",
                ] {
                    assert!(row[key].is_number(), "{key} in {row}");
                }
                assert_eq!(row["fsync"], "never", "{row}");
                assert_eq!(row["sites"], 1, "{row}");
                assert!(row["files_per_min"].as_f64() > Some(0.0), "{row}");
                row["class"].as_str().expect("class").to_string()
            })
            .collect()
    };
    let ours = classes(&r["files"]);
    assert_eq!(
        ours,
        ["16KB", "63KB", "63KB-both-ways", "635KB", "large"],
        "{}",
        r["files"]
    );
    for peer in ["uftp", "rsync"] {
        assert_eq!(classes(&r["peers"][peer]), ours, "{peer}: {}", r["peers"]);
    }
    // The files rigs' backbone is sealed with the run's key, as the lab's other rigs'.
    assert_eq!(
        r["files_backbone_auth"], "blake3",
        "{}",
        r["files_backbone_auth"]
    );
    let src_log = std::fs::read_to_string(dir.join("logs").join("files-src-1-never-1.log"))
        .expect("the files source's log");
    assert!(
        src_log.contains("signing with key") && src_log.contains("blake3)"),
        "{src_log}"
    );
    let md = r["files_market_data"]
        .as_array()
        .expect("files_market_data");
    assert_eq!(
        md.len(),
        4,
        "two shares, uploaded meanwhile and queued first: {md:?}"
    );
    for row in md {
        assert!(row["p99_us_without"].as_f64() > Some(0.0), "{row}");
        assert!(row["p99_us_during"].as_f64() > Some(0.0), "{row}");
        assert!(row["delivered_ratio_during"].as_f64() > Some(0.0), "{row}");
        // Files went while the latency was held, copies queued first too (all queued
        // before the window, they take longer than it at the share).
        assert!(row["files_mb_per_s"].as_f64() > Some(0.0), "{row}");
    }
    // Under every fault the file is whole, byte for byte, wherever it can be; each
    // node said what it did about it.
    let faults = r["files_faults"].as_array().expect("files_faults");
    let names: Vec<&str> = faults
        .iter()
        .map(|f| f["fault"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["none", "loss_1pct", "kill_site", "kill_sender", "full_disk"]
    );
    for f in faults {
        assert!(f.get("unavailable").is_none(), "{f}");
        assert_eq!(f["sites_whole"], f["sites_expected"], "{f}");
        assert!(f["seconds"].as_f64() > Some(0.0), "{f}");
    }
    let detail = |i: usize| faults[i]["detail"].as_str().unwrap().to_string();
    assert_eq!(faults[4]["sites_expected"], 1);
    assert!(
        detail(2).contains("1 partial files resumed"),
        "{}",
        detail(2)
    );
    assert!(
        detail(3).contains("1 files queued from before"),
        "{}",
        detail(3)
    );
    assert!(
        detail(4).starts_with("site2 failed:") && detail(4).contains("space"),
        "{}",
        detail(4)
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Files"), "{report}");
    assert!(report.contains("| kill_sender |"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
