//! The node's journal of posts with real processes and real files: what it records, that
//! an acknowledged post survives SIGKILL of the node at any moment (and a torn last
//! write is cut), that nothing is delivered twice as new, and that a journal that cannot
//! keep posts (disk full, unwritable, corrupt) refuses them with the reason while market
//! data goes on.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, Event, PostTo, Subscriber};
use tickwire_proto::{encode_field_list, FieldList, NakCode, Real, Value as FieldValue};

const T: Duration = Duration::from_secs(20);

/// A directory in the temp directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("tickwire-journal-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(listen: &str, journal_dir: &str, sync: &str) -> String {
    format!(
        "[node]\nlisten = \"{listen}\"\n[posts]\nservices = [\"FEED\"]\n\
         [journal]\ndir = \"{journal_dir}\"\nservices = [\"FEED\"]\nsync = \"{sync}\"\n"
    )
}

/// A node journaling FEED's updates as well as its posts (in a directory of its own,
/// named after `tag`), with the directory and the config file it uses.
fn node_journaling_updates(tag: &str) -> (TempDir, TempConfig, Node) {
    let dir = TempDir::new(tag);
    let cfg = TempConfig::new(
        &format!("journal-{tag}"),
        &format!(
            "{}updates = true\n",
            config("127.0.0.1:0", dir.path(), "batch")
        ),
    );
    let node = Node::start(&["--config", cfg.path()]);
    (dir, cfg, node)
}

/// `tickwire publish --accept-posts` of SYM0..SYM2, posts logged (debug), and it
/// reconnects to a node that comes back.
fn posting_feed(node: &str) -> Proc {
    Proc::spawn_with(
        &[
            "publish",
            "--node",
            node,
            "--items",
            "3",
            "--rate",
            "0",
            "--accept-posts",
        ],
        |c| {
            c.env("TICKWIRE_LOG", "debug");
        },
    )
}

/// Every record of the journal, from `tickwire journal inspect`.
fn inspect(dir: &str) -> Vec<Value> {
    let out = run(&["journal", "inspect", dir], T);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn poster(node: &str) -> Subscriber {
    let mut opts = ConnectOptions::new(node.to_string());
    opts.application = "journal-test".into();
    opts.reconnect = false;
    opts.connect_timeout = Duration::from_secs(5);
    Subscriber::connect(opts).expect("the poster connects")
}

/// A quote whose bid names the post: `n` / 10,000 above 1.
fn quote(n: u32) -> Vec<u8> {
    let bid = 10_000 + n as i64;
    encode_field_list([
        (22, FieldValue::Real(Real::new(bid, -4))),
        (25, FieldValue::Real(Real::new(bid + 10_000_000, -4))),
    ])
}

#[test]
fn every_journaled_post_and_its_answer_are_recorded_in_order() {
    let dir = TempDir::new("records");
    let cfg = TempConfig::new(
        "journal-records",
        &config("127.0.0.1:0", dir.path(), "always"),
    );
    let node = Node::start(&["--config", cfg.path()]);
    let addr = node.addr_str();
    let _feed = posting_feed(&addr);
    wait_for_image(node.addr, "FEED", "SYM2", T).expect("the feed");
    for (item, fields, ok) in [
        ("SYM0", &["BID=10", "ASK=11"][..], true),
        ("SYM1", &["BID=12", "ASK=11"][..], false),
        ("NOPE", &["BID=1"][..], false),
    ] {
        let mut args = vec!["post", "--node", &addr, "--json", item];
        args.extend_from_slice(fields);
        let out = run(&args, T);
        assert_eq!(
            out.code(),
            Some(if ok { 0 } else { 1 }),
            "{} {}",
            out.stdout,
            out.stderr
        );
    }
    let records = inspect(dir.path());
    let streams: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r["stream"].as_str().unwrap(), r["item"].as_str().unwrap()))
        .collect();
    assert_eq!(
        streams,
        [
            ("received", "SYM0"),
            ("completed", "SYM0"),
            ("received", "SYM1"),
            ("completed", "SYM1"),
            ("received", "NOPE"),
            ("completed", "NOPE"),
        ]
    );
    for r in &records {
        assert_eq!(r["service"], "FEED");
        assert_eq!(r["post_id"], 1, "tickwire post numbers its one post 1: {r}");
    }
    assert_eq!(records[0]["fields"]["BID"], 10.0);
    assert_eq!(records[1]["ok"], true);
    assert_eq!(records[3]["nak_code"], "InvalidContent");
    assert_eq!(records[5]["nak_code"], "SymbolUnknown");
}

/// Posts as fast as acks come back (at most `window` waiting), until the connection
/// goes (the node was killed) or `until`: the post numbers acknowledged positively.
/// Posts until the node goes away (or `until`); `first_ack` is told when the first
/// post is acknowledged.
fn post_until_killed(
    node: &str,
    next: &mut u32,
    window: usize,
    until: Instant,
    first_ack: std::sync::mpsc::Sender<()>,
) -> BTreeSet<u32> {
    let mut sub = poster(node);
    let mut acked = BTreeSet::new();
    let mut waiting = 0usize;
    let mut alive = true;
    while alive && Instant::now() < until {
        while waiting < window {
            let n = *next;
            let fields = quote(n);
            let to = PostTo::Item {
                service: "FEED",
                name: "SYM1",
            };
            if sub
                .post(to, n, FieldList::decode(&fields).unwrap(), true)
                .is_err()
            {
                alive = false;
                break;
            }
            *next += 1;
            waiting += 1;
        }
        let res = sub.dispatch(Duration::from_millis(5), |e| {
            if let tickwire_client::EventRef::Ack(a) = e {
                waiting -= 1;
                if a.nak.is_none() {
                    if acked.is_empty() {
                        let _ = first_ack.send(());
                    }
                    acked.insert(a.post_id);
                }
            }
        });
        if res.is_err() || !sub.is_connected() {
            alive = false;
        }
    }
    acked
}

/// Bids (as the feed logs them) of the posts the feed applied, as new and as
/// redelivered.
fn applied_by_feed(log: &str) -> (HashMap<String, u32>, u64) {
    let mut new: HashMap<String, u32> = HashMap::new();
    let mut redelivered = 0;
    for line in log.lines().filter(|l| l.contains("post to SYM1: ")) {
        let bid = line
            .split("22=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("")
            .to_string();
        if line.ends_with("(redelivered)") {
            redelivered += 1;
        } else {
            *new.entry(bid).or_default() += 1;
        }
    }
    (new, redelivered)
}

/// The journal's received post numbers and completed ones.
fn journal_posts(records: &[Value]) -> (BTreeSet<u32>, BTreeMap<u64, bool>) {
    let mut received = BTreeSet::new();
    let mut completed = BTreeMap::new();
    for r in records {
        let id = r["post_id"].as_u64().unwrap() as u32;
        match r["stream"].as_str().unwrap() {
            "received" => {
                received.insert(id);
            }
            _ => {
                completed.insert(r["received"].as_u64().unwrap(), r["ok"] == true);
            }
        }
    }
    (received, completed)
}

#[test]
fn acknowledged_posts_survive_sigkill_of_the_node_at_random_moments() {
    let dir = TempDir::new("crash");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let mut rng = Rng::new(0x5eed);
    let mut next_post = 1u32;
    let mut acked_all = BTreeSet::new();
    let mut feed: Option<Proc> = None;
    // A start after an injected tear must cut it; a kill in the middle of a large write
    // can tear one too (the kernel stops a write between pages for a fatal signal), so
    // cuts at other starts are allowed and only reported.
    let mut torn_by_test = false;
    let mut cuts_by_kill = 0;
    const ROUNDS: usize = 8;
    for round in 0..ROUNDS {
        let sync = if round % 2 == 0 { "batch" } else { "always" };
        let cfg = TempConfig::new(
            &format!("journal-crash-{round}"),
            &config(&listen, dir.path(), sync),
        );
        let mut node = Node::start(&["--listen", &listen, "--config", cfg.path()]);
        if feed.is_none() {
            feed = Some(posting_feed(&listen));
        }
        if let Err(why) = wait_for_image(node.addr, "FEED", "SYM2", T) {
            let f = feed.as_mut().unwrap();
            panic!(
                "round {round}: the feed is not back: {why} (feed running: {})\n--- feed\n{}",
                f.is_running(),
                f.log()
                    .lines()
                    .filter(|l| !l.contains("post to"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let cut = node.proc.log().contains("journal: cut ");
        assert!(
            cut || !torn_by_test,
            "round {round}: the write torn before this start was not cut\n{}",
            node.proc.log()
        );
        if cut && !torn_by_test {
            cuts_by_kill += 1;
        }
        torn_by_test = false;
        // Posts for a random time from the first acknowledgement (however slow the
        // machine is to get there), then the node is killed while they flow.
        let run_for = Duration::from_millis(100 + rng.next_u64() % 400);
        let (first_ack, acked_once) = std::sync::mpsc::channel();
        let killer = {
            let pid = node.proc.pid();
            std::thread::spawn(move || {
                // No acknowledgement in time: killed anyway, and the round fails below.
                let _ = acked_once.recv_timeout(T);
                std::thread::sleep(run_for);
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            })
        };
        let started = Instant::now();
        let acked = post_until_killed(
            &listen,
            &mut next_post,
            64,
            Instant::now() + 2 * T + run_for,
            first_ack,
        );
        killer.join().unwrap();
        eprintln!(
            "round {round} ({sync}): {} posts acknowledged in {:?} before the kill",
            acked.len(),
            started.elapsed()
        );
        node.proc.kill();
        assert!(
            !acked.is_empty(),
            "round {round}: some posts were acknowledged before the kill"
        );
        acked_all.extend(&acked);
        // Every acknowledged post is in the journal, received and completed.
        let records = inspect(dir.path());
        let (received, _) = journal_posts(&records);
        let lost: Vec<&u32> = acked.iter().filter(|id| !received.contains(id)).collect();
        assert!(
            lost.is_empty(),
            "round {round} ({sync}): acknowledged and not in the journal: {lost:?}"
        );
        // On odd rounds, a write cut short at the end of the last segment, as a crash
        // in the middle of one leaves it: the next start must cut it and go on.
        if round % 2 == 1 {
            let last = std::fs::read_dir(&dir.0)
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "twj"))
                .max()
                .unwrap();
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&last)
                .unwrap();
            std::io::Write::write_all(&mut f, &[0, 0, 0, 200, 1, 2, 3, 4, 1, 0, 0]).unwrap();
            torn_by_test = true;
        }
    }
    // One more start: it delivers what the last kill left received and not completed.
    let cfg = TempConfig::new("journal-crash-final", &config(&listen, dir.path(), "batch"));
    let node = Node::start(&["--listen", &listen, "--config", cfg.path()]);
    wait_for_image(node.addr, "FEED", "SYM2", T).expect("the feed is back");
    assert!(
        node.proc.log().contains("journal: cut "),
        "the write torn before the last start was not cut\n{}",
        node.proc.log()
    );
    eprintln!("starts that cut a write torn by the kill itself: {cuts_by_kill}");
    let deadline = Instant::now() + T;
    loop {
        let (received, completed) = journal_posts(&inspect(dir.path()));
        let records = inspect(dir.path());
        let seqs_received: BTreeSet<u64> = records
            .iter()
            .filter(|r| r["stream"] == "received")
            .map(|r| r["seq"].as_u64().unwrap())
            .collect();
        let open = seqs_received
            .iter()
            .filter(|s| !completed.contains_key(s))
            .count();
        if open == 0 {
            assert!(acked_all.iter().all(|id| received.contains(id)));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} posts still not completed after the restart"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing the feed was given as new came twice.
    let feed = feed.unwrap();
    let (new, redelivered) = applied_by_feed(&feed.log());
    eprintln!(
        "{} posts acknowledged in all, {} applied by the feed as new, {redelivered} delivered again after a kill",
        acked_all.len(),
        new.len()
    );
    let twice: Vec<_> = new.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "posts delivered twice as new: {twice:?}");
    assert!(
        new.len() >= acked_all.len(),
        "the feed applied every acknowledged post"
    );
}

/// `tickwire node` inside a mount namespace of its own, with its journal on a tmpfs of
/// `kib` KiB.
fn node_on_small_disk(journal_dir: &Path, kib: u64, cfg: &str) -> Option<Node> {
    let probe = Command::new("unshare").args(["-m", "true"]).status().ok()?;
    if !probe.success() {
        return None;
    }
    let script = format!(
        "mount -t tmpfs -o size={kib}k tmpfs '{}' && exec '{}' node --config '{cfg}'",
        journal_dir.display(),
        node_program()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script])
        .env_remove("TICKWIRE_LOG")
        .stdin(std::process::Stdio::null());
    Some(Node::from_proc(Proc::spawn_command(
        cmd,
        format!("unshare ... {script}"),
    )))
}

#[test]
fn a_full_disk_refuses_posts_with_the_reason_and_market_data_goes_on() {
    let dir = TempDir::new("full");
    let cfg = TempConfig::new("journal-full", &config("127.0.0.1:0", dir.path(), "batch"));
    let Some(node) = node_on_small_disk(&dir.0, 64, cfg.path()) else {
        panic!("this test needs `unshare -m` and tmpfs mounts (root in a Linux VM or container with CAP_SYS_ADMIN)");
    };
    let addr = node.addr_str();
    let _feed = accepting_feed(&node, 3, 200);
    // Posts with a long text field fill the 64 KiB quickly.
    let mut sub = poster(&addr);
    let big = "x".repeat(4000);
    let fields = encode_field_list([(3, FieldValue::Ascii(&big))]);
    let mut refused: Option<(NakCode, String)> = None;
    for n in 1..=200u32 {
        sub.post(
            PostTo::Item {
                service: "FEED",
                name: "SYM0",
            },
            n,
            FieldList::decode(&fields).unwrap(),
            true,
        )
        .unwrap();
        let ev = expect_event(&mut sub, T, "the answer", |e| {
            matches!(e, Event::Ack { .. })
        });
        if let Event::Ack {
            nak: Some(code),
            text,
            ..
        } = ev
        {
            if code == NakCode::NoResources {
                refused = Some((code, text));
                break;
            }
        }
    }
    let (_, text) = refused.expect("the journal filled up and said so");
    assert!(text.contains("No space left on device"), "{text}");
    // Market data still flows, from the same node.
    assert_serves(node.addr, "FEED", "SYM1", 3);
}

/// The journal's records of a node started by [`node_on_small_disk`], read inside its
/// mount namespace (where its tmpfs is).
fn inspect_in_namespace(node: &Node, dir: &str) -> Vec<Value> {
    let out = Command::new("nsenter")
        .args([
            "-t",
            &node.proc.pid().to_string(),
            "-m",
            "--",
            node_program(),
        ])
        .args(["journal", "inspect", dir])
        .output()
        .expect("nsenter runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// A disk that fills while posts flow: the record that completes a post can fail
/// after the one that received it was kept, and the publisher has answered by then.
/// The poster gets an Ack only when that record was kept; otherwise a Nak naming the
/// error, so that no acknowledged post is delivered again after a restart.
#[test]
fn a_full_disk_never_acknowledges_a_post_whose_completion_it_did_not_record() {
    let dir = TempDir::new("full-completed");
    let cfg = TempConfig::new(
        "journal-full-completed",
        &config("127.0.0.1:0", dir.path(), "batch"),
    );
    let Some(node) = node_on_small_disk(&dir.0, 64, cfg.path()) else {
        panic!("this test needs `unshare -m` and tmpfs mounts (root in a Linux VM or container with CAP_SYS_ADMIN)");
    };
    let addr = node.addr_str();
    let _feed = accepting_feed(&node, 3, 0);
    let mut sub = poster(&addr);
    // Quotes the feed takes, 32 in flight: received and completed records of
    // different posts share commits, and the disk fills between them.
    let (mut acked, mut refused) = (BTreeSet::new(), Vec::new());
    let (mut next, mut waiting) = (1u32, 0usize);
    let deadline = Instant::now() + 3 * T;
    while refused.len() < 40 && next < 5_000 {
        assert!(
            Instant::now() < deadline,
            "{} acked, {} refused",
            acked.len(),
            refused.len()
        );
        while waiting < 32 {
            let to = PostTo::Item {
                service: "FEED",
                name: "SYM0",
            };
            let fields = quote(next);
            sub.post(to, next, FieldList::decode(&fields).unwrap(), true)
                .unwrap();
            next += 1;
            waiting += 1;
        }
        sub.dispatch(Duration::from_millis(20), |e| {
            if let tickwire_client::EventRef::Ack(a) = e {
                waiting -= 1;
                match a.nak {
                    None => {
                        acked.insert(a.post_id);
                    }
                    Some(code) => refused.push((a.post_id, code, a.text.to_string())),
                }
            }
        })
        .unwrap();
    }
    assert!(
        !acked.is_empty(),
        "no post was acknowledged before the disk filled: {:?}",
        &refused[..refused.len().min(3)]
    );
    for (id, code, text) in &refused {
        assert_eq!(*code, NakCode::NoResources, "post {id}: {text}");
        assert!(
            text.contains("No space left on device"),
            "post {id}: {text}"
        );
        if text.contains("cannot record its answer") {
            assert!(text.contains("do not post it again"), "post {id}: {text}");
        }
    }
    // Every acknowledged post is complete in the journal: received, and completed OK.
    let records = inspect_in_namespace(&node, dir.path());
    let mut seq_of = BTreeMap::new();
    let mut completed_ok = BTreeSet::new();
    for r in &records {
        match r["stream"].as_str().unwrap() {
            "received" => {
                seq_of.insert(
                    r["post_id"].as_u64().unwrap() as u32,
                    r["seq"].as_u64().unwrap(),
                );
            }
            _ => {
                if r["ok"] == true {
                    completed_ok.insert(r["received"].as_u64().unwrap());
                }
            }
        }
    }
    let incomplete: Vec<u32> = acked
        .iter()
        .copied()
        .filter(|id| !seq_of.get(id).is_some_and(|seq| completed_ok.contains(seq)))
        .collect();
    assert!(
        incomplete.is_empty(),
        "acknowledged, but their completion is not in the journal (a restart would deliver them again): {incomplete:?}; {} acked, {} refused",
        acked.len(),
        refused.len()
    );
    eprintln!(
        "{} posts acknowledged, {} refused for the full disk ({} of them after the publisher had answered)",
        acked.len(),
        refused.len(),
        refused.iter().filter(|(_, _, t)| t.contains("cannot record its answer")).count()
    );
}

#[test]
fn a_journal_that_cannot_be_opened_refuses_posts_with_the_reason_and_market_data_goes_on() {
    let dir = TempDir::new("broken");
    // A corrupt segment (a record whose checksum is wrong, followed by more data).
    let seg = dir.0.join("00000000000000000001.twj");
    let mut bytes = b"TWJOURN1".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 32, 0, 0, 0, 0]);
    bytes.extend_from_slice(&1u64.to_be_bytes());
    bytes.extend_from_slice(&0u64.to_be_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 4, 9, 9, 9, 9, 1, 2, 3, 4, 7, 7, 7]);
    std::fs::write(&seg, &bytes).unwrap();
    let cfg = TempConfig::new(
        "journal-broken",
        &config("127.0.0.1:0", dir.path(), "batch"),
    );
    let node = Node::start(&["--config", cfg.path()]);
    let addr = node.addr_str();
    let _feed = accepting_feed(&node, 3, 200);
    let out = run(&["post", "--node", &addr, "--json", "SYM0", "BID=1"], T);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    let answer: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(answer["nak_code"], "NoResources", "{answer}");
    let text = answer["text"].as_str().unwrap();
    assert!(
        text.contains("corrupt at byte 32") && text.contains("00000000000000000001.twj"),
        "{text}"
    );
    assert!(
        node.proc.log().contains("journal not available"),
        "{}",
        node.proc.log()
    );
    assert_serves(node.addr, "FEED", "SYM1", 3);
    // `journal inspect` says where, and fails.
    let out = run(&["journal", "inspect", dir.path()], T);
    assert_eq!(out.code(), Some(1));
    assert!(out.stderr.contains("corrupt at byte 32"), "{}", out.stderr);
    // The file is left as it was, for an operator.
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
}

/// The item's sequence number now, from a snapshot.
fn current_seq(node: &Node, item: &str) -> u64 {
    let out = run(
        &[
            "subscribe",
            "--node",
            &node.addr_str(),
            "--snapshot",
            "--json",
            item,
        ],
        T,
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("a snapshot");
    v["seq"].as_u64().unwrap()
}

/// `tickwire replay ... --json --count N`: its messages.
fn replay(node: &Node, item: &str, from: &str, count: usize) -> Vec<Value> {
    let addr = node.addr_str();
    let n = count.to_string();
    let out = run(
        &[
            "replay",
            "--node",
            &addr,
            "--json",
            "--count",
            &n,
            "--timeout",
            "20",
            "--from",
            from,
            item,
        ],
        T,
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// History then live: every sequence number from the first, once, in order, with the
/// status that says where live begins somewhere in between.
fn assert_no_gap_no_repeat(msgs: &[Value], first: u64) -> usize {
    let mut expect = first;
    let mut joined_at = None;
    for (i, m) in msgs.iter().enumerate() {
        match m["type"].as_str().unwrap() {
            "status" => {
                let text = m["state"]["text"].as_str().unwrap();
                assert!(text.contains("live from seq"), "{m}");
                assert_eq!(m["state"]["stream"], "open", "{m}");
                assert!(joined_at.is_none(), "one join: {m}");
                joined_at = Some(i);
            }
            "update" => {
                assert_eq!(m["seq"].as_u64().unwrap(), expect, "message {i}: {m}");
                assert_eq!(m["conflation_count"].as_u64().unwrap_or(1), 1, "{m}");
                expect += 1;
            }
            // An image carries the item's current sequence number: the next one, or the
            // last update's again when the publisher re-images the item (after a
            // reconnect, which a loaded machine can cause). Never one ahead.
            "refresh" => {
                let seq = m["seq"].as_u64().unwrap();
                assert!(
                    seq == expect || seq + 1 == expect,
                    "message {i}: an image at seq {seq}, expected {expect} or {}: {m}",
                    expect.saturating_sub(1)
                );
                expect = seq + 1;
            }
            other => panic!("unexpected {other}: {m}"),
        }
    }
    let joined = joined_at.expect("the join status");
    assert!(
        joined > 0 && joined < msgs.len() - 1,
        "history before the join and live after it"
    );
    joined
}

#[test]
fn a_replay_gives_the_history_from_a_seq_or_a_time_then_live_with_no_gap_or_repeat() {
    let (dir, _cfg, node) = node_journaling_updates("replay");
    let addr = node.addr_str();
    let _feed = Proc::spawn(&["publish", "--node", &addr, "--items", "3", "--rate", "600"]);
    wait_for_image(node.addr, "FEED", "SYM2", T).expect("the feed");
    // Let some history build up.
    let deadline = Instant::now() + T;
    while current_seq(&node, "SYM1") < 120 {
        assert!(Instant::now() < deadline, "SYM1 does not update");
        std::thread::sleep(Duration::from_millis(100));
    }
    let now = current_seq(&node, "SYM1");
    let from = now - 100;
    let msgs = replay(&node, "SYM1", &from.to_string(), 160);
    let joined = assert_no_gap_no_repeat(&msgs, from);
    assert!(
        joined >= 100,
        "at least the 100 messages asked for before the join: {joined}"
    );

    // From a time: the journal's own times. Take the time of a record in the middle.
    let records = inspect(dir.path());
    let sym1: Vec<&Value> = records
        .iter()
        .filter(|r| r["stream"] == "update" && r["item"] == "SYM1")
        .collect();
    assert!(sym1
        .iter()
        .all(|r| r["post_id"].is_null() && r["service"] == "FEED"));
    let mid = sym1[sym1.len() / 2];
    let secs = mid["time_ns"].as_u64().unwrap() / 1_000_000_000;
    let nanos = mid["time_ns"].as_u64().unwrap() % 1_000_000_000;
    // As RFC 3339 (via the date command's arithmetic-free path: seconds since epoch).
    let stamp = {
        let out = std::process::Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%S"])
            .output()
            .unwrap();
        format!(
            "{}.{nanos:09}Z",
            String::from_utf8_lossy(&out.stdout).trim()
        )
    };
    // The history from there (and what came since), then some live ones.
    let msgs = replay(&node, "SYM1", &stamp, sym1.len() - sym1.len() / 2 + 200);
    let first = msgs[0]["seq"].as_u64().unwrap();
    // Messages journaled together share a time: the first with that time is first.
    let t = mid["time_ns"].as_u64().unwrap();
    let expected = sym1
        .iter()
        .find(|r| r["time_ns"].as_u64().unwrap() >= t)
        .unwrap();
    assert_eq!(
        first,
        expected["item_seq"].as_u64().unwrap(),
        "the first message at or after {stamp}"
    );
    assert_no_gap_no_repeat(&msgs, first);

    // A service with no history says so.
    let plain = Node::start(&[]);
    let _f = Proc::spawn(&[
        "publish",
        "--node",
        &plain.addr_str(),
        "--items",
        "1",
        "--rate",
        "10",
    ]);
    wait_for_image(plain.addr, "FEED", "SYM0", T).expect("the feed");
    let out = run(
        &[
            "replay",
            "--node",
            &plain.addr_str(),
            "--json",
            "--from",
            "1",
            "--timeout",
            "10",
            "SYM0",
        ],
        T,
    );
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("no history of service"),
        "{}",
        out.stdout
    );
}

/// Journaled updates wait a few milliseconds to share a write and a sync (nobody waits
/// for them): after a clean stop the journal ends with the item's last update. (That
/// the thread commits what waits when the node stops within those milliseconds is
/// checked in crates/node/src/journal.rs, where the timing is the test's own.)
#[test]
fn a_clean_stop_keeps_every_journaled_update() {
    let (dir, _cfg, mut node) = node_journaling_updates("clean-stop");
    let addr = node.addr_str();
    let mut feed = Proc::spawn(&["publish", "--node", &addr, "--items", "3", "--rate", "3000"]);
    wait_for_image(node.addr, "FEED", "SYM1", T).expect("the feed");
    let mut sub = subscriber(node.addr);
    sub.subscribe("FEED", "SYM1", Default::default())
        .expect("subscribe");
    let mut last = 0u32;
    expect_event(&mut sub, T, "30 updates", |e| match e {
        Event::Update { seq, .. } => {
            last = *seq;
            *seq >= 30
        }
        _ => false,
    });
    // The feed goes; the node tells its subscribers (suspect) after every update the
    // feed sent, so the last update seen before that is the node's last.
    feed.kill();
    expect_event(&mut sub, T, "the feed's loss", |e| match e {
        Event::Update { seq, .. } => {
            last = *seq;
            false
        }
        Event::Status { .. } => true,
        _ => false,
    });
    assert!(
        node.stop(T).is_some_and(|s| s.success()),
        "the node stops cleanly"
    );
    let journaled = inspect(dir.path())
        .iter()
        .filter(|r| r["stream"] == "update" && r["item"] == "SYM1")
        .filter_map(|r| r["item_seq"].as_u64())
        .max();
    assert_eq!(
        journaled,
        Some(u64::from(last)),
        "the last update of SYM1 is in the journal"
    );
}

/// `journal inspect` holds a journal to what the node does at its start: a missing
/// segment is an error (the node refuses the journal), and a last segment whose header
/// never reached the disk is not (the node removes it).
#[test]
fn journal_inspect_judges_segments_as_the_node_does() {
    use tickwire_journal::{segment, Journal, JournalOptions, Received, SyncPolicy};
    let dir = TempDir::new("inspect-segments");
    let f = encode_field_list([(22, FieldValue::Real(Real::new(1, -2)))]);
    {
        let opts = JournalOptions {
            sync: SyncPolicy::Never,
            segment_bytes: 1,
            ..JournalOptions::default()
        };
        let (mut j, _) = Journal::open(&dir.0, opts).unwrap();
        for post_id in 0..4 {
            j.received(
                &Received {
                    service: "FEED",
                    item: "SYM0",
                    user: "",
                    post_id,
                    image: false,
                    fields: FieldList::decode(&f).unwrap(),
                },
                0,
            )
            .unwrap();
            j.commit().unwrap();
        }
    }
    // Each commit started a segment: 1..=4 hold a record each, 5 is the empty current.
    let seg = |seq: u64| dir.0.join(segment::file_name(seq));
    assert!(seg(5).exists() && !seg(6).exists());
    // The current segment as a crash leaves it before its header reached the disk: not
    // corruption.
    std::fs::write(seg(5), b"").unwrap();
    let out = run(&["journal", "inspect", dir.path()], T);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("header never reached the disk"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout.lines().count(), 4);
    // An empty segment before another (here of seq 0, which no record has): the node
    // refuses the journal, naming it, and so does inspect.
    std::fs::write(seg(0), segment::encode_header(0, 0)).unwrap();
    let out = run(&["journal", "inspect", dir.path()], T);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "{}: segments do not follow each other: it holds no records",
            segment::file_name(0)
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout.lines().count(), 4);
    std::fs::remove_file(seg(0)).unwrap();
    // A segment missing in the middle: the node refuses the journal, and so does inspect.
    std::fs::remove_file(seg(2)).unwrap();
    let out = run(&["journal", "inspect", dir.path()], T);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("do not follow each other"),
        "{}",
        out.stderr
    );
}

/// `journal inspect DIR | head` ends quietly, with status 0, when its reader stops
/// reading, as `subscribe` does: it failed with "Broken pipe".
#[test]
fn journal_inspect_ends_quietly_when_its_reader_stops_reading() {
    let (dir, _cfg, node) = node_journaling_updates("closed-pipe");
    let addr = node.addr_str();
    let _feed = Proc::spawn(&["publish", "--node", &addr, "--items", "3", "--rate", "0"]);
    wait_for_image(node.addr, "FEED", "SYM2", T).expect("the feed");
    let journaled = || {
        inspect(dir.path())
            .iter()
            .any(|r| r["stream"] == "update" && r["item"] == "SYM2")
    };
    let deadline = Instant::now() + T;
    while !journaled() {
        assert!(Instant::now() < deadline, "SYM2's image never journaled");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut child = tickwire()
        .args(["journal", "inspect", dir.path()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes before the first line is written.
    drop(child.stdout.take());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let status = wait_timeout(&mut child, T);
    let _ = child.kill();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// With `retain_mb` the journal removes its oldest segments as new ones start: the node
/// says so, the directory stays within the size (but for the segment being written and
/// a commit past it), and a replay from the first seq starts at the oldest update left,
/// with no gap after it.
#[test]
fn a_journal_with_retain_mb_removes_its_oldest_segments_and_replays_what_is_left() {
    let dir = TempDir::new("retain");
    let cfg = TempConfig::new(
        "journal-retain",
        &format!(
            "{}updates = true\nsegment_mb = 1\nretain_mb = 2\n",
            config("127.0.0.1:0", dir.path(), "never")
        ),
    );
    let mut node = Node::start(&["--config", cfg.path()]);
    let addr = node.addr_str();
    let mut feed = Proc::spawn(&[
        "publish", "--node", &addr, "--items", "3", "--rate", "20000",
    ]);
    node.proc.wait_for_line(
        "old segments removed to stay within retain_mb",
        Duration::from_secs(60),
    );
    feed.kill();
    let segments: Vec<(u64, u64)> = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let first = name.strip_suffix(".twj")?.parse().ok()?;
            Some((first, e.metadata().unwrap().len()))
        })
        .collect();
    let bytes: u64 = segments.iter().map(|s| s.1).sum();
    let mib = 1024 * 1024;
    assert!(bytes <= 4 * mib + mib / 2, "{bytes} bytes: {segments:?}");
    assert!(segments.iter().all(|s| s.0 > 1), "{segments:?}");

    let msgs = replay(&node, "SYM1", "1", 20);
    let seqs: Vec<u64> = msgs
        .iter()
        .filter(|m| m["type"] == "update")
        .map(|m| m["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 20, "{msgs:?}");
    assert!(seqs[0] > 1, "{seqs:?}");
    assert_eq!(seqs, (seqs[0]..seqs[0] + 20).collect::<Vec<_>>());
}
