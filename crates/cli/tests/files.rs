//! Files over a node tree with real processes (docs/FILES.md): `tickwire files send`
//! to a node with a spool, sites fed by it (and by each other) receiving into their
//! inboxes, `tickwire files status` reading the record; restarts of a site and of the
//! sender in the middle of a transfer; the refusals a user meets.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// A node with `[files]` from `toml` (its `[node]` name set), listening on loopback.
fn files_node(dir: &Path, name: &str, toml: &str, extra: &[&str]) -> Node {
    let cfg = dir.join(format!("{name}.toml"));
    std::fs::write(&cfg, format!("[node]\nname = \"{name}\"\n{toml}")).expect("write config");
    let cfg = cfg.to_str().expect("utf-8 path").to_string();
    let mut args = vec!["--config", &cfg];
    args.extend_from_slice(extra);
    Node::start(&args)
}

fn sender_toml(dir: &Path, extra: &str) -> String {
    format!(
        "[files]\nservices = [\"FILES\"]\nspool = \"{}\"\n{extra}",
        dir.join("spool").display()
    )
}

fn site_toml(dir: &Path, name: &str, upstream: &Node, extra: &str) -> String {
    format!(
        "[upstream]\nnodes = [\"{}\"]\n[files]\nservices = [\"FILES\"]\ninbox = \"{}\"\n{extra}",
        upstream.addr,
        dir.join(format!("{name}-inbox")).display()
    )
}

fn write(dir: &Path, name: &str, len: usize, seed: u8) -> (PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..len).map(|i| ((i * 7919) as u8) ^ seed).collect();
    let path = dir.join(name);
    std::fs::write(&path, &data).expect("write");
    (path, data)
}

/// `files status --json` of `node`, as (file, site, state, reason) rows.
fn status(node: &Node) -> Vec<serde_json::Value> {
    let out = run(
        &["files", "status", "--node", &node.addr_str(), "--json"],
        T,
    );
    assert!(out.status.success(), "files status failed: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// Waits until the sender's record shows `file` done at every site of `sites`.
fn wait_done(sender: &Node, file: &str, sites: &[&str]) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + T;
    let mut rows = Vec::new();
    while Instant::now() < deadline {
        rows = status(sender);
        let done = sites.iter().all(|site| {
            rows.iter()
                .any(|r| r["file"] == file && r["site"] == *site && r["state"] == "done")
        });
        if done {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{file} not done at {sites:?} within {T:?}: {rows:#?}\n--- sender\n{}",
        sender.proc.log()
    );
}

fn send(sender: &Node, args: &[&str]) -> Output {
    let addr = sender.addr_str();
    let mut all = vec!["files", "send", "--node", &addr];
    all.extend_from_slice(args);
    run(&all, T)
}

#[test]
fn files_travel_down_a_node_tree_whole_to_every_site_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = files_node(d, "src", &sender_toml(d, ""), &[]);
    let edge1 = files_node(
        d,
        "edge1",
        &site_toml(d, "edge1", &src, "fsync = \"always\""),
        &[],
    );
    // edge2 is fed by edge1: files reach it through edge1, which relays them.
    let edge2 = files_node(d, "edge2", &site_toml(d, "edge2", &edge1, ""), &[]);
    let (big, big_bytes) = write(d, "big.bin", 3_000_000, 1);
    let (small, small_bytes) = write(d, "small.csv", 16_000, 2);
    let (empty, _) = write(d, "empty.dat", 0, 3);
    let deadline = Instant::now() + T;
    // Until both sites have said they are there, a file for them waits queued; it
    // is queued at once either way.
    let out = send(
        &src,
        &[
            "--to",
            "edge1,edge2",
            "--as-dir",
            "eod/2026-11-25",
            "--json",
            big.to_str().unwrap(),
            small.to_str().unwrap(),
            empty.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let queued: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(queued.len(), 3, "{}", out.stdout);
    assert_eq!(queued[0]["file"], "eod/2026-11-25/big.bin");
    assert_eq!(queued[0]["size"], 3_000_000);
    for f in ["big.bin", "small.csv", "empty.dat"] {
        wait_done(&src, &format!("eod/2026-11-25/{f}"), &["edge1", "edge2"]);
    }
    assert!(Instant::now() < deadline);
    for site in ["edge1", "edge2"] {
        let inbox = d.join(format!("{site}-inbox/FILES/eod/2026-11-25"));
        assert_eq!(
            std::fs::read(inbox.join("big.bin")).unwrap(),
            big_bytes,
            "{site}"
        );
        assert_eq!(
            std::fs::read(inbox.join("small.csv")).unwrap(),
            small_bytes,
            "{site}"
        );
        assert_eq!(
            std::fs::read(inbox.join("empty.dat")).unwrap().len(),
            0,
            "{site}"
        );
        let partial = d.join(format!("{site}-inbox/.tickwire-partial"));
        assert_eq!(
            std::fs::read_dir(partial).unwrap().count(),
            0,
            "{site}: partial files left"
        );
        // The site's audit log says what arrived, with the hash.
        let audit = std::fs::read_to_string(d.join(format!("{site}-inbox.audit.jsonl"))).unwrap();
        let arrived = audit
            .lines()
            .filter(|l| l.contains("\"event\":\"arrived\""))
            .count();
        assert_eq!(arrived, 3, "{site}: {audit}");
        assert!(audit.contains(queued[0]["sha256"].as_str().unwrap()));
    }
    // Delivered everywhere: the spool holds no file's bytes (its log and an empty
    // segment stay), the sender's audit log says so.
    let held: Vec<_> = std::fs::read_dir(d.join("spool"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "queue.log" && e.metadata().unwrap().len() > 0)
        .map(|e| e.file_name())
        .collect();
    assert!(held.is_empty(), "{held:?}");
    let audit = std::fs::read_to_string(d.join("spool.audit.jsonl")).unwrap();
    assert_eq!(audit.matches("\"delivered\":true").count(), 3, "{audit}");
    // A site's own record shows what it received.
    let rows = status(&edge2);
    assert!(
        rows.iter().any(|r| r["file"] == "eod/2026-11-25/big.bin"
            && r["site"] == "edge2"
            && r["state"] == "done"),
        "{rows:#?}"
    );
}

/// Starts the sender `src` (its `[files]` with `extra`), on the same port each time: a
/// sender its sites find again when it is started after a kill.
fn restartable_sender(d: &Path, extra: &str) -> impl Fn() -> Node {
    let listen = format!("127.0.0.1:{}", free_port_for_tests());
    let toml = sender_toml(d, extra);
    let d = d.to_path_buf();
    move || files_node(&d, "src", &toml, &["--listen", &listen])
}

#[test]
fn a_site_killed_mid_file_resumes_where_it_was_and_the_sender_continues_after_its_own_kill() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 2 MB/s: a 6 MB file takes about 3 s, time to kill processes in the middle.
    let start_src = restartable_sender(d, "rate_mb_per_s = 2\nchunk_kib = 32");
    let mut src = start_src();
    let site = site_toml(d, "edge1", &src, "");
    let mut edge1 = files_node(d, "edge1", &site, &[]);
    let (big, big_bytes) = write(d, "big.bin", 6_000_000, 4);
    let out = send(&src, &["--to", "edge1", big.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    // The site holds part of the file (its saved chunk map is there), then dies.
    let map = |d: &Path| {
        std::fs::read_dir(d.join("edge1-inbox/.tickwire-partial"))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .any(|e| e.path().extension().is_some_and(|x| x == "map"))
            })
            .unwrap_or(false)
    };
    let deadline = Instant::now() + T;
    while !map(d) {
        assert!(
            Instant::now() < deadline,
            "no chunk map saved\n{}",
            edge1.proc.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    edge1.proc.signal(libc::SIGKILL);
    edge1.proc.wait_exit(T);
    // The sender dies too, with the file still queued; both come back.
    src.proc.signal(libc::SIGKILL);
    src.proc.wait_exit(T);
    let src = start_src();
    let edge1 = files_node(d, "edge1", &site, &[]);
    wait_done(&src, "big.bin", &["edge1"]);
    assert_eq!(
        std::fs::read(d.join("edge1-inbox/FILES/big.bin")).unwrap(),
        big_bytes
    );
    let log = edge1.proc.log();
    assert!(log.contains("1 partial files resumed"), "{log}");
    let log = src.proc.log();
    assert!(log.contains("1 files queued from before"), "{log}");
    // Killed once more after the delivery: the record it starts with, read back from
    // its audit log, still says who has the file (the spool no longer holds it).
    let mut src = src;
    src.proc.signal(libc::SIGKILL);
    src.proc.wait_exit(T);
    let src = start_src();
    let log = src.proc.log();
    assert!(
        log.contains("0 files queued from before")
            && log.contains("1 finished files back in the record"),
        "{log}"
    );
    let rows = status(&src);
    assert!(
        rows.iter().any(|r| r["file"] == "big.bin"
            && r["site"] == "edge1"
            && r["state"] == "done"
            && r["sha256"].as_str().is_some_and(|h| h.len() == 64)),
        "{rows:#?}"
    );
}

/// Entries in edge1's folder of partial files.
fn edge1_partials(d: &Path) -> usize {
    std::fs::read_dir(
        d.join("edge1-inbox")
            .join(tickwire_files::inbox::PARTIAL_DIR),
    )
    .map(|r| r.filter_map(|e| e.ok()).count())
    .unwrap_or(0)
}

#[test]
fn a_sender_killed_mid_upload_has_its_sites_drop_what_they_got_once_it_is_back() {
    use tickwire_client::{ConnectOptions, Subscriber};
    use tickwire_files::wire::{FilesMessage, Put};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let start_src = restartable_sender(d, "chunk_kib = 32");
    let mut src = start_src();
    let site = site_toml(d, "edge1", &src, "");
    let edge1 = files_node(d, "edge1", &site, &[]);
    // A client that announces a 6 MB file, uploads its first 60 KB, and stalls: the
    // node sends the chunks it has to edge1 meanwhile.
    let (path, data) = write(d, "half.bin", 6_000_000, 3);
    let (size, sha256) = tickwire_files::spool::sha256_file(&path).unwrap();
    let mut opts = ConnectOptions::new(src.addr_str());
    opts.reconnect = false;
    let mut client = Subscriber::connect(opts).expect("connect");
    let mut body = Vec::new();
    let put = FilesMessage::Put(Put {
        request: 1,
        service: "FILES",
        name: "half.bin",
        size,
        sha256,
        to: vec!["edge1"],
    });
    put.encode(&mut body).unwrap();
    client.send_files(&body).unwrap();
    body.clear();
    let first = FilesMessage::PutData {
        request: 1,
        offset: 0,
        data: &data[..60_000],
    };
    first.encode(&mut body).unwrap();
    client.send_files(&body).unwrap();
    let deadline = Instant::now() + T;
    while edge1_partials(d) == 0 {
        assert!(
            Instant::now() < deadline,
            "edge1 got nothing of the file\n--- src\n{}\n--- edge1\n{}",
            src.proc.log(),
            edge1.proc.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The sender dies mid-upload; back, it tells edge1 to drop the part it holds.
    src.proc.signal(libc::SIGKILL);
    src.proc.wait_exit(T);
    drop(client);
    let src = start_src();
    let said = "files: 1 uploads the last run did not finish";
    let log = poll_until(
        T,
        Duration::from_millis(20),
        || src.proc.log(),
        |l| l.contains(said),
    );
    assert!(log.contains(said), "{log}");
    let deadline = Instant::now() + T;
    while edge1_partials(d) > 0 {
        assert!(
            Instant::now() < deadline,
            "edge1 still holds the part\n--- src\n{}\n--- edge1\n{}",
            src.proc.log(),
            edge1.proc.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!d.join("edge1-inbox/FILES/half.bin").exists());
    let why = "half.bin from src not taken: cancelled by its sender: the sending node stopped \
               before the file was uploaded whole";
    let deadline = Instant::now() + T;
    while !edge1.proc.log().contains(why) {
        assert!(Instant::now() < deadline, "{}", edge1.proc.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let rows = status(&src);
    assert!(
        rows.iter().any(|r| r["file"] == "half.bin"
            && r["site"] == "edge1"
            && r["state"] == "failed"
            && r["reason"]
                .as_str()
                .is_some_and(|why| why.contains("stopped before the file was uploaded whole"))),
        "{rows:#?}"
    );
}

#[test]
fn refusals_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (f, _) = write(d, "x.csv", 100, 5);
    let f = f.to_str().unwrap();
    // A node that moves no files.
    let plain = Node::start(&[]);
    let out = send(&plain, &[f]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("this node takes no files"),
        "{}",
        out.stderr
    );
    // A service the node does not have; a name that would leave the inbox.
    let src = files_node(d, "src", &sender_toml(d, ""), &[]);
    let out = send(&src, &["--service", "OTHER", f]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("this node has no files service \"OTHER\""),
        "{}",
        out.stderr
    );
    let out = send(&src, &["--as-dir", "../up", f]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("escape the inbox"), "{}", out.stderr);
    // A site-only node sends nothing.
    let site = files_node(d, "edge1", &site_toml(d, "edge1", &src, ""), &[]);
    let out = send(&site, &[f]);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("this node sends no files"),
        "{}",
        out.stderr
    );
    // A config naming no directory.
    let bad = d.join("bad.toml");
    std::fs::write(&bad, "[files]\nservices = [\"FILES\"]\n").unwrap();
    let out = run(
        &[
            "node",
            "--listen",
            "127.0.0.1:0",
            "--config",
            bad.to_str().unwrap(),
        ],
        T,
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("files.spool") && out.stderr.contains("files.inbox"),
        "{}",
        out.stderr
    );
}

/// A files node on the backbone, once it has joined it.
fn backbone_files_node(dir: &Path, name: &str, toml: &str, ch: &str, role: &str) -> Node {
    let mut node = files_node(dir, name, toml, &["--backbone", ch, "--role", role]);
    node.proc.wait_for_line(&format!("backbone: {role} on"), T);
    node
}

#[test]
fn one_stream_on_the_backbone_reaches_every_edge_and_the_sites_below_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ch = channel(90);
    let src = backbone_files_node(d, "src", &sender_toml(d, ""), &ch, "source");
    let inbox = |name: &str| {
        format!(
            "[files]\nservices = [\"FILES\"]\ninbox = \"{}\"\n",
            d.join(format!("{name}-inbox")).display()
        )
    };
    let edge1 = backbone_files_node(d, "edge1", &inbox("edge1"), &ch, "edge");
    let _edge2 = backbone_files_node(d, "edge2", &inbox("edge2"), &ch, "edge");
    // A site without multicast, fed by edge1 over TCP: edge1 relays its files, and
    // its statuses go back over the backbone.
    let _leaf = files_node(d, "leaf", &site_toml(d, "leaf", &edge1, ""), &[]);
    let (f, bytes) = write(d, "refdata.csv", 1_000_000, 6);
    let out = send(&src, &["--to", "edge1,edge2,leaf", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    let rows = wait_done(&src, "refdata.csv", &["edge1", "edge2", "leaf"]);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for site in ["edge1", "edge2", "leaf"] {
        assert_eq!(
            std::fs::read(d.join(format!("{site}-inbox/FILES/refdata.csv"))).unwrap(),
            bytes,
            "{site}"
        );
    }
}

/// Traffic both ways on one backbone: an edge sends a file up to the source while the
/// source sends one down to every edge, each whole where it was sent.
#[test]
fn an_edge_sends_files_up_to_the_source_while_the_source_sends_down() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ch = channel(91);
    let both = |name: &str| {
        format!(
            "[files]\nservices = [\"FILES\"]\nspool = \"{}\"\ninbox = \"{}\"\n",
            d.join(format!("{name}-spool")).display(),
            d.join(format!("{name}-inbox")).display()
        )
    };
    let src = backbone_files_node(d, "src", &both("src"), &ch, "source");
    let edge1 = backbone_files_node(d, "edge1", &both("edge1"), &ch, "edge");
    let edge2_toml = format!(
        "[files]\nservices = [\"FILES\"]\ninbox = \"{}\"\n",
        d.join("edge2-inbox").display()
    );
    let _edge2 = backbone_files_node(d, "edge2", &edge2_toml, &ch, "edge");
    let (down, down_bytes) = write(d, "eod-prices.csv", 1_500_000, 11);
    let (up, up_bytes) = write(d, "site-positions.csv", 1_500_000, 12);
    let out = send(&src, &["--to", "edge1,edge2", down.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = send(&edge1, &["--to", "src", up.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_done(&src, "eod-prices.csv", &["edge1", "edge2"]);
    let rows = wait_done(&edge1, "site-positions.csv", &["src"]);
    let sent: Vec<_> = rows
        .iter()
        .filter(|r| r["file"] == "site-positions.csv")
        .collect();
    assert_eq!(
        sent.len(),
        1,
        "the edge's file went to the source alone: {rows:#?}"
    );
    for site in ["edge1", "edge2"] {
        let got = std::fs::read(d.join(format!("{site}-inbox/FILES/eod-prices.csv"))).unwrap();
        assert_eq!(got, down_bytes, "{site}");
    }
    let got = std::fs::read(d.join("src-inbox/FILES/site-positions.csv")).unwrap();
    assert_eq!(got, up_bytes);
}

/// One new key line (`tickwire backbone keygen` without its comments).
fn key_line() -> String {
    let out = run(&["backbone", "keygen"], T);
    assert!(out.status.success(), "{}", out.stderr);
    out.stdout
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .expect("a key line")
        .to_string()
}

/// Rewrites a key file at once (a node never reads half of it), readable by its owner.
fn write_keys(path: &Path, lines: &[&String]) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("new");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A node's config on a backbone sealed with `key`, with a spool and an inbox.
fn keyed_files_toml(dir: &Path, name: &str, key: &Path) -> String {
    format!(
        "[backbone]\nkey_file = {:?}\n[files]\nservices = [\"FILES\"]\nspool = \"{}\"\ninbox = \"{}\"\n",
        key.display().to_string(),
        dir.join(format!("{name}-spool")).display(),
        dir.join(format!("{name}-inbox")).display()
    )
}

/// On an authenticated backbone the files thread seals and checks the files stream:
/// files go both ways between nodes holding the key; a node with another key is not
/// heard and hears nothing (what it refused is said and counted in /metrics).
#[test]
fn files_cross_an_authenticated_backbone_only_between_holders_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ch = channel(92);
    let ours = key_line();
    // The same key id with other bytes: the event loop's cheap check passes it, the
    // files thread's check of the seal refuses it.
    let id = ours.split_whitespace().next().unwrap();
    let theirs = format!("{id} {}", "5a".repeat(32));
    let (key, other) = (d.join("ours.keys"), d.join("theirs.keys"));
    write_keys(&key, &[&ours]);
    write_keys(&other, &[&theirs]);
    let toml = |name: &str, key: &Path| keyed_files_toml(d, name, key);
    let src = backbone_files_node(d, "src", &toml("src", &key), &ch, "source");
    let edge = backbone_files_node(d, "edge", &toml("edge", &key), &ch, "edge");
    let stranger_cfg = d.join("stranger.toml");
    std::fs::write(
        &stranger_cfg,
        format!("[node]\nname = \"stranger\"\n{}", toml("stranger", &other)),
    )
    .unwrap();
    let (mut stranger, stranger_http) = Node::start_ws(&[
        "--config",
        stranger_cfg.to_str().unwrap(),
        "--backbone",
        &ch,
        "--role",
        "edge",
    ]);
    stranger.proc.wait_for_line("backbone: edge on", T);
    let (down, down_bytes) = write(d, "eod-prices.csv", 1_500_000, 21);
    let (up, up_bytes) = write(d, "site-positions.csv", 700_000, 22);
    let out = send(&src, &["--to", "edge,stranger", down.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    let out = send(&edge, &["--to", "src", up.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_done(&src, "eod-prices.csv", &["edge"]);
    wait_done(&edge, "site-positions.csv", &["src"]);
    assert_eq!(
        std::fs::read(d.join("edge-inbox/FILES/eod-prices.csv")).unwrap(),
        down_bytes
    );
    assert_eq!(
        std::fs::read(d.join("src-inbox/FILES/site-positions.csv")).unwrap(),
        up_bytes
    );
    // The stranger refused the source's offers and chunks on its files thread.
    stranger.proc.wait_for_line(
        "backbone: dropped a files message: its MAC does not match",
        T,
    );
    wait_for_metric(
        &stranger_http,
        "tickwire_backbone_rejected_by_reason_total{reason=\"bad_mac\"}",
        T,
        |n| n > 0.0,
    );
    assert!(!d.join("stranger-inbox/FILES/eod-prices.csv").exists());
    let rows = status(&src);
    assert!(
        !rows
            .iter()
            .any(|r| r["site"] == "stranger" && r["state"] == "done"),
        "{rows:#?}"
    );
}

/// Keys rotate without a restart for files too: once the new key signs alone, files
/// still cross, so each node's files thread seals and checks with the keys its event
/// loop read again.
#[test]
fn files_cross_with_the_keys_of_a_rotated_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ch = channel(93);
    let (old, new) = (key_line(), key_line());
    let key = d.join("backbone.keys");
    write_keys(&key, &[&old]);
    let toml = |name: &str| keyed_files_toml(d, name, &key);
    let mut src = backbone_files_node(d, "src", &toml("src"), &ch, "source");
    let mut edge = backbone_files_node(d, "edge", &toml("edge"), &ch, "edge");
    // The documented rotation: the new key accepted everywhere, then signing, then alone.
    for lines in [vec![&old, &new], vec![&new, &old], vec![&new]] {
        write_keys(&key, &lines);
        for node in [&mut src, &mut edge] {
            node.proc.wait_for_line("read again", T);
        }
    }
    let (f, bytes) = write(d, "after-rotation.csv", 300_000, 31);
    let out = send(&src, &["--to", "edge", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_done(&src, "after-rotation.csv", &["edge"]);
    assert_eq!(
        std::fs::read(d.join("edge-inbox/FILES/after-rotation.csv")).unwrap(),
        bytes
    );
}

/// Where there is no multicast, the source's files reach its edges by
/// multi-destination-cast on a control port of their own (the data's plus one).
#[test]
fn without_multicast_files_reach_the_edges_by_multi_destination_cast() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = free_udp_port();
    let requests = free_udp_port();
    let ch = format!("aeron:udp?control=127.0.0.1:{data}|control-mode=dynamic");
    let backbone =
        format!("[backbone]\nrequest_channel = \"aeron:udp?endpoint=127.0.0.1:{requests}\"\n");
    let src_toml = format!("{backbone}{}", sender_toml(d, ""));
    let src = backbone_files_node(d, "src", &src_toml, &ch, "source");
    let edge_toml = |name: &str| {
        format!(
            "{backbone}[files]\nservices = [\"FILES\"]\ninbox = \"{}\"\n",
            d.join(format!("{name}-inbox")).display()
        )
    };
    let _edge1 = backbone_files_node(d, "edge1", &edge_toml("edge1"), &ch, "edge");
    let _edge2 = backbone_files_node(d, "edge2", &edge_toml("edge2"), &ch, "edge");
    let (f, bytes) = write(d, "corporate-actions.csv", 2_000_000, 13);
    let out = send(&src, &["--to", "edge1,edge2", f.to_str().unwrap()]);
    assert!(out.status.success(), "{}", out.stderr);
    wait_done(&src, "corporate-actions.csv", &["edge1", "edge2"]);
    for site in ["edge1", "edge2"] {
        let got =
            std::fs::read(d.join(format!("{site}-inbox/FILES/corporate-actions.csv"))).unwrap();
        assert_eq!(got, bytes, "{site}");
    }
}

#[test]
fn a_file_dropped_in_the_outbox_goes_to_every_site() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let outbox = d.join("outbox");
    let src_toml = sender_toml(d, &format!("outbox = \"{}\"", outbox.display()));
    let src = files_node(d, "src", &src_toml, &[]);
    let _edge1 = files_node(d, "edge1", &site_toml(d, "edge1", &src, ""), &[]);
    // Written under a dot name, then renamed in: the node never takes half a file.
    let (_, bytes) = write(d, "corp-actions.xml", 200_000, 7);
    std::fs::write(outbox.join(".corp-actions.xml.part"), &bytes).unwrap();
    std::fs::rename(
        outbox.join(".corp-actions.xml.part"),
        outbox.join("corp-actions.xml"),
    )
    .unwrap();
    wait_done(&src, "corp-actions.xml", &["edge1"]);
    assert_eq!(
        std::fs::read(d.join("edge1-inbox/FILES/corp-actions.xml")).unwrap(),
        bytes
    );
    assert_eq!(
        std::fs::read_dir(&outbox).unwrap().count(),
        0,
        "the outbox is emptied"
    );
    let audit = std::fs::read_to_string(d.join("spool.audit.jsonl")).unwrap();
    assert!(audit.contains("\"user\":\"outbox\""), "{audit}");
}

/// On a node with a users file, sending files takes the right to publish the files
/// service: a user entitled to it sends; one who may only subscribe to it is refused,
/// and told why; a wrong password is refused at login.
#[test]
fn only_users_entitled_to_publish_the_files_service_send() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let users = d.join("users.toml");
    std::fs::write(
        &users,
        format!(
            "[users.alice]\n{}\npublish = [\"FILES\"]\n\n[users.bob]\n{}\nsubscribe = [\"FILES\"]\n",
            hash_line("alice-pw", false),
            hash_line("bob-pw", false)
        ),
    )
    .unwrap();
    let toml = format!(
        "[security]\nusers_file = \"{}\"\n{}",
        users.display(),
        sender_toml(d, "")
    );
    let src = files_node(d, "src", &toml, &[]);
    let (f, _) = write(d, "entitled.csv", 1000, 9);
    let f = f.to_str().unwrap();
    let password = |name: &str, pw: &str| {
        let p = d.join(name);
        std::fs::write(&p, pw).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (alice, bob, wrong) = (
        password("alice.pw", "alice-pw"),
        password("bob.pw", "bob-pw"),
        password("wrong.pw", "nope"),
    );
    let out = send(&src, &["--user", "alice", "--password-file", &alice, f]);
    assert_eq!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    let out = send(&src, &["--user", "bob", "--password-file", &bob, f]);
    assert_eq!(out.code(), Some(1), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("refused by")
            && out
                .stderr
                .contains("user \"bob\" may not publish service \"FILES\""),
        "{}",
        out.stderr
    );
    let out = send(&src, &["--user", "alice", "--password-file", &wrong, f]);
    assert_ne!(out.code(), Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("login"), "{}", out.stderr);
}

/// On a node with a users file, a downstream connection speaks for the files sites of
/// its user's name and the user's `sites`, and no others: a user who may subscribe to
/// every service (the files service too) cannot say it is another site, so it can
/// neither take that site's files nor report them delivered.
#[test]
fn a_downstream_node_speaks_only_for_the_sites_its_user_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let users = d.join("users.toml");
    let token = |name: &str| {
        let p = d.join(format!("{name}.token"));
        std::fs::write(&p, format!("{name}-token")).unwrap();
        p
    };
    std::fs::write(
        &users,
        format!(
            "[users.alice]\n{}\npublish = [\"FILES\"]\n\n\
             [users.edge1]\n{}\nsubscribe = [\"FILES\"]\n\n\
             [users.ldn]\n{}\nsubscribe = [\"FILES\"]\nsites = [\"edge2\"]\n\n\
             [users.mallory]\n{}\nsubscribe = [\"*\"]\n",
            hash_line("alice-token", true),
            hash_line("edge1-token", true),
            hash_line("ldn-token", true),
            hash_line("mallory-token", true),
        ),
    )
    .unwrap();
    let toml = format!(
        "[security]\nusers_file = \"{}\"\n{}",
        users.display(),
        sender_toml(d, "")
    );
    let mut src = files_node(d, "src", &toml, &[]);
    // edge1 logs in as its own name, edge2 as a user given it, edge9 as mallory.
    let site = |name: &str, user: &str| {
        let toml = format!(
            "[upstream]\nnodes = [\"{}\"]\nuser = \"{user}\"\npassword_file = \"{}\"\n\
             [files]\nservices = [\"FILES\"]\ninbox = \"{}\"\n",
            src.addr,
            token(user).display(),
            d.join(format!("{name}-inbox")).display()
        );
        files_node(d, name, &toml, &[])
    };
    let _edge1 = site("edge1", "edge1");
    let _edge2 = site("edge2", "ldn");
    let _edge9 = site("edge9", "mallory");
    let (f, bytes) = write(d, "eod.csv", 20_000, 4);
    let alice = token("alice");
    let alice = alice.to_str().unwrap();
    let out = send(
        &src,
        &[
            "--user",
            "alice",
            "--password-file",
            alice,
            "--to",
            "edge1,edge2,edge9",
            f.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    src.proc
        .wait_for_line("user \"mallory\" may not speak for site \"edge9\"", T);
    let rows = |src: &Node| -> Vec<serde_json::Value> {
        let addr = src.addr_str();
        let out = run(
            &[
                "files",
                "status",
                "--node",
                &addr,
                "--json",
                "--user",
                "alice",
                "--password-file",
                alice,
            ],
            T,
        );
        assert!(out.status.success(), "{}", out.stderr);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let state = |rows: &[serde_json::Value], site: &str| {
        rows.iter()
            .find(|r| r["site"] == site)
            .map(|r| r["state"].as_str().unwrap().to_string())
    };
    let rows = poll_until(
        T,
        Duration::from_millis(100),
        || rows(&src),
        |rows| {
            state(rows, "edge1").as_deref() == Some("done")
                && state(rows, "edge2").as_deref() == Some("done")
        },
    );
    assert_eq!(state(&rows, "edge1").as_deref(), Some("done"), "{rows:#?}");
    assert_eq!(state(&rows, "edge2").as_deref(), Some("done"), "{rows:#?}");
    assert_eq!(
        state(&rows, "edge9").as_deref(),
        Some("queued"),
        "{rows:#?}"
    );
    for site in ["edge1", "edge2"] {
        assert_eq!(
            std::fs::read(d.join(format!("{site}-inbox/FILES/eod.csv"))).unwrap(),
            bytes
        );
    }
    assert!(!d.join("edge9-inbox/FILES/eod.csv").exists());
}

/// A time-out too large to be a time (or infinite) waits as long as the longest
/// allowed, rather than stopping the command.
#[test]
fn a_time_out_past_what_a_clock_holds_is_the_longest_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (f, _) = write(d, "x.csv", 100, 5);
    let src = files_node(d, "src", &sender_toml(d, ""), &[]);
    for timeout in ["1e300", "inf"] {
        let out = send(
            &src,
            &["--timeout", timeout, "--to", "edge1", f.to_str().unwrap()],
        );
        assert!(
            out.status.success(),
            "send --timeout {timeout}: {}",
            out.stderr
        );
        let addr = src.addr_str();
        let args = ["files", "status", "--node", &addr, "--timeout", timeout];
        let out = run(&args, T);
        assert!(
            out.status.success(),
            "status --timeout {timeout}: {}",
            out.stderr
        );
        assert!(out.stdout.contains("x.csv"), "{}", out.stdout);
    }
}
