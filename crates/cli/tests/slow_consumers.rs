//! Slow consumers with real processes: a `tickwire subscribe` stopped with SIGSTOP while
//! a `tickwire publish` feed updates 100 items fast, next to healthy subscribers.
//!
//! - `conflate` (the default): the others keep receiving every update at the same rate,
//!   the node's memory stays bounded, and after SIGCONT the stopped subscriber's images
//!   come to equal the node's cache exactly (waited for, bounded: how fast depends on
//!   the machine); its trades (do-not-conflate updates) all arrive, none merged.
//! - `disconnect` (asked for at login): it gets closed-recover "slow consumer", is
//!   dropped, reconnects and is served again.
//!
//! Every process is on 127.0.0.1, every wait is bounded, and children are killed on drop.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_client::{EventRef, RequestOptions};

const ITEMS: usize = 100;

/// The two scenarios run one at a time: each loads both CPUs of a small machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
const RATE: u64 = 10_000;

fn item_names() -> Vec<String> {
    (0..ITEMS).map(|i| format!("SYM{i}")).collect()
}

/// `tickwire subscribe --json` as a child process; every line it prints is kept with
/// the time it arrived.
struct JsonSubscriber {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, Value)>>>,
    reader: Option<JoinHandle<()>>,
}

impl JsonSubscriber {
    fn spawn(node: &str, extra: &[&str]) -> JsonSubscriber {
        // A fixed receive buffer: with autotuning the kernel could hold the whole stall.
        let mut args = vec![
            "subscribe",
            "--node",
            node,
            "--json",
            "--receive-buffer",
            "65536",
        ];
        args.extend_from_slice(extra);
        let names = item_names();
        args.extend(names.iter().map(|s| s.as_str()));
        let mut child = tickwire()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tickwire subscribe");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                sink.lock().unwrap().push((Instant::now(), v));
            }
        });
        JsonSubscriber {
            child,
            lines,
            reader: Some(reader),
        }
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(self.pid(), sig) }, 0);
    }

    /// Lines that arrived up to `until`.
    fn lines_until(&self, until: Instant) -> Vec<Value> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|(t, _)| *t <= until)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn count(&self, pred: impl Fn(&Value) -> bool) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, v)| pred(v))
            .count()
    }

    fn try_wait_for(&self, timeout: Duration, pred: impl Fn(&[(Instant, Value)]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if pred(&self.lines.lock().unwrap()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&[(Instant, Value)]) -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if pred(&self.lines.lock().unwrap()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let lines = self.lines.lock().unwrap();
        let tail: Vec<String> = lines
            .iter()
            .rev()
            .take(3)
            .map(|(_, v)| v.to_string())
            .collect();
        panic!(
            "the JSON subscriber never showed {what} within {timeout:?}; {} lines, the last: {tail:#?}",
            lines.len()
        );
    }
}

impl Drop for JsonSubscriber {
    fn drop(&mut self) {
        // SAFETY: as in `signal`; SIGCONT first in case a failing test left it stopped.
        unsafe {
            libc::kill(self.pid(), libc::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// Images (field name -> JSON value) per item, from `subscribe --json` lines.
fn images_of(lines: &[Value]) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut images: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for v in lines {
        let (Some(kind), Some(item)) = (v["type"].as_str(), v["item"].as_str()) else {
            continue;
        };
        let Some(fields) = v["fields"].as_object() else {
            continue;
        };
        let img = images.entry(item.to_string()).or_default();
        if kind == "refresh" {
            img.clear();
        }
        for (k, val) in fields {
            img.insert(k.clone(), val.clone());
        }
    }
    images
}

/// The node's cache, as a snapshot subscriber sees it.
fn node_cache(node: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut args = vec!["subscribe", "--node", node, "--json", "--snapshot"];
    let names = item_names();
    args.extend(names.iter().map(|s| s.as_str()));
    let out = run(&args, Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "snapshot failed: {}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let images = images_of(&lines);
    assert_eq!(images.len(), ITEMS, "snapshot of every item");
    images
}

/// Checks the chain of trades of every item: each do-not-conflate trade arrives on its
/// own (conflation count 1) and its ACVOL_1 - TRDVOL_1 is the ACVOL_1 of the trade
/// before, so a missing or merged trade is seen. Returns the number of trades.
fn check_trade_chain(lines: &[Value]) -> usize {
    let mut volume: BTreeMap<String, u64> = BTreeMap::new();
    let mut trades = 0;
    for v in lines {
        let item = v["item"].as_str().unwrap_or_default().to_string();
        match v["type"].as_str() {
            Some("refresh") => {
                if let Some(acvol) = v["fields"]["ACVOL_1"].as_u64() {
                    volume.insert(item, acvol);
                }
            }
            Some("update") if v["do_not_conflate"] == Value::Bool(true) => {
                assert_eq!(v["conflation_count"], 1, "a trade was merged: {v}");
                let acvol = v["fields"]["ACVOL_1"].as_u64().expect("ACVOL_1");
                let size = v["fields"]["TRDVOL_1"].as_u64().expect("TRDVOL_1");
                let before = volume.get(&item).copied().expect("an image first");
                assert_eq!(acvol - size, before, "a trade of {item} is missing: {v}");
                volume.insert(item, acvol);
                trades += 1;
            }
            _ => {}
        }
    }
    trades
}

/// An in-process subscriber on every item, reading as fast as it can: counts updates
/// (a conflated one counts for all it stands for) and sequence gaps.
struct Healthy {
    updates: Arc<AtomicU64>,
    gaps: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Healthy {
    fn start(node: std::net::SocketAddr) -> Healthy {
        let mut sub = subscriber(node);
        for name in item_names() {
            sub.subscribe("FEED", &name, RequestOptions::default())
                .expect("subscribe");
        }
        let (updates, gaps, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (u, g, s) = (updates.clone(), gaps.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut last_seq = vec![None::<u32>; 1 << 16];
            let deadline = Instant::now() + Duration::from_secs(60);
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let res = sub.dispatch(Duration::from_millis(50), |e| match e {
                    EventRef::Refresh(i, r) => last_seq[i.stream as usize] = Some(r.seq),
                    EventRef::Update(i, up) => {
                        let n = up.conflation_count.max(1);
                        let slot = &mut last_seq[i.stream as usize];
                        if let Some(prev) = *slot {
                            if n != u16::MAX && up.seq != prev.wrapping_add(u32::from(n)) {
                                g.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        *slot = Some(up.seq);
                        u.fetch_add(u64::from(n), Ordering::Relaxed);
                    }
                    _ => {}
                });
                res.expect("healthy subscriber keeps its connection");
            }
        });
        Healthy {
            updates,
            gaps,
            stop,
            thread: Some(thread),
        }
    }

    fn updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }
}

impl Drop for Healthy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Updates per second the healthy subscribers received over `d`, and the node's
/// largest RSS (KiB) sampled meanwhile.
fn observe(healthy: &[Healthy], node: &Node, d: Duration) -> (Vec<f64>, u64) {
    let before: Vec<u64> = healthy.iter().map(|h| h.updates()).collect();
    let start = Instant::now();
    let mut max_rss = node.rss_kib();
    while start.elapsed() < d {
        std::thread::sleep(Duration::from_millis(100));
        max_rss = max_rss.max(node.rss_kib());
    }
    let secs = start.elapsed().as_secs_f64();
    let rates = healthy
        .iter()
        .zip(before)
        .map(|(h, b)| (h.updates() - b) as f64 / secs)
        .collect();
    (rates, max_rss)
}

/// Waits (at most `timeout`) until the resumed subscriber's images equal the node's
/// cache, and the cache has stopped changing (the stopped publisher's last bytes may
/// still be arriving when it is first read). Returns that cache and every line the
/// subscriber printed; on timeout returns the last cache read, for the caller to show
/// the difference.
fn wait_until_caught_up(
    victim: &JsonSubscriber,
    node: &str,
    timeout: Duration,
) -> (BTreeMap<String, BTreeMap<String, Value>>, Vec<Value>) {
    let deadline = Instant::now() + timeout;
    let mut cache = node_cache(node);
    loop {
        let seen = victim.lines_until(Instant::now());
        if images_of(&seen) == cache {
            let again = node_cache(node);
            if again == cache {
                return (cache, seen);
            }
            cache = again;
            continue;
        }
        if Instant::now() >= deadline {
            return (cache, seen);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_refresh(v: &Value) -> bool {
    v["type"] == "refresh"
}

#[test]
fn a_stopped_subscriber_is_conflated_and_catches_up_exactly_while_others_keep_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // A small kernel send buffer makes the stalled backlog reach the node's queue at
    // this test's rate (the default autotuned one would absorb several MB first).
    let cfg = TempConfig::new(
        "slow-conflate",
        "[node]\nstats_interval_s = 1\n[limits]\nsocket_send_buffer_bytes = 65536\n\
         [slow_consumer]\npolicy = \"conflate\"\nconflate_above_bytes = 65536\n",
    );
    let node = Node::start(&["--config", cfg.path()]);
    let addr = node.addr_str();
    let publisher = start_publisher(&node, "FEED", ITEMS, RATE, false);
    let healthy = [Healthy::start(node.addr), Healthy::start(node.addr)];
    let victim = JsonSubscriber::spawn(&addr, &[]);
    victim.wait_for("100 images", Duration::from_secs(10), |l| {
        l.iter().filter(|(_, v)| is_refresh(v)).count() >= ITEMS
    });

    let (base_rates, base_rss) = observe(&healthy, &node, Duration::from_millis(1500));
    victim.signal(libc::SIGSTOP);
    let (stall_rates, stall_rss) = observe(&healthy, &node, Duration::from_secs(3));
    // The node's figures (and the dashboard) name who is behind: the stopped one.
    let deadline = Instant::now() + Duration::from_secs(10);
    let who = loop {
        let who = node_figures(&node)["TW_SLOW_WHO"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if who.contains("tickwire-subscribe") || Instant::now() > deadline {
            break who;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        who.contains("127.0.0.1:")
            && who.contains("tickwire-subscribe")
            && who.contains("bytes queued"),
        "TW_SLOW_WHO: {who:?}"
    );
    // Freeze the feed and wake the subscriber: from here the node's cache stops
    // changing, and the subscriber must reach it exactly. How long that takes depends
    // on the machine, so the test waits for the condition (bounded), not for a time.
    publisher.signal(libc::SIGSTOP);
    victim.signal(libc::SIGCONT);
    let (cache, seen) = wait_until_caught_up(&victim, &addr, Duration::from_secs(30));
    publisher.signal(libc::SIGCONT);

    let node_log = node.proc.log();
    for (i, (b, s)) in base_rates.iter().zip(&stall_rates).enumerate() {
        assert!(*b > RATE as f64 * 0.3, "healthy {i} baseline only {b:.0}/s");
        // A blocked publisher would drop this to about zero.
        assert!(
            *s > b * 0.5,
            "healthy subscriber {i}: {b:.0}/s before the stall, {s:.0}/s during it\n{node_log}"
        );
    }
    for (i, h) in healthy.iter().enumerate() {
        assert_eq!(
            h.gaps.load(Ordering::Relaxed),
            0,
            "healthy subscriber {i} saw gaps"
        );
    }
    assert!(
        stall_rss < base_rss + 16 * 1024,
        "node RSS grew from {base_rss} KiB to {stall_rss} KiB during the stall"
    );
    assert!(
        node_log.contains("slow consumer") && node_log.contains("conflating"),
        "the node names the slow consumer:\n{node_log}"
    );

    let images = images_of(&seen);
    for (item, img) in &cache {
        assert_eq!(
            images.get(item),
            Some(img),
            "{item}: the stopped subscriber's image after SIGCONT differs from the node's cache"
        );
    }
    let conflated = seen
        .iter()
        .filter(|v| v["conflation_count"].as_u64().is_some_and(|n| n > 1))
        .count();
    assert!(
        conflated > 0,
        "no conflated update reached the stopped subscriber"
    );
    let trades = check_trade_chain(&seen);
    assert!(trades > 100, "only {trades} trades seen");
    // The stopped subscriber's catch-up is logged with its items. (On a busy machine a
    // healthy subscriber may fall behind for a moment too: its line does not count.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let caught_up = |log: &str| {
        log.lines()
            .find(|l| l.contains("caught up after") && l.contains("tickwire-subscribe"))
            .map(str::to_string)
    };
    let line = loop {
        if let Some(line) = caught_up(&node.proc.log()) {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "the node never logged the stopped subscriber's catch-up\n{}",
            node.proc.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(line.contains("FEED/SYM"), "{line}");
}

#[test]
fn with_policy_disconnect_a_stopped_subscriber_is_told_and_dropped_then_recovers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = TempConfig::new(
        "slow-disconnect",
        "[limits]\nsocket_send_buffer_bytes = 65536\nmax_output_bytes = 262144\n",
    );
    let node = Node::start(&["--config", cfg.path()]);
    let addr = node.addr_str();
    let _publisher = start_publisher(&node, "FEED", ITEMS, RATE, false);
    let healthy = [Healthy::start(node.addr)];
    let victim = JsonSubscriber::spawn(&addr, &["--slow-consumer", "disconnect"]);
    victim.wait_for("100 images", Duration::from_secs(10), |l| {
        l.iter().filter(|(_, v)| is_refresh(v)).count() >= ITEMS
    });
    victim.signal(libc::SIGSTOP);
    let (stall_rates, _) = observe(&healthy, &node, Duration::from_secs(2));
    victim.signal(libc::SIGCONT);
    let slow_status = |v: &Value| {
        v["type"] == "status"
            && v["stream"] == 0
            && v["state"]["stream"] == "closed-recover"
            && v["state"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("slow consumer"))
    };
    if !victim.try_wait_for(Duration::from_secs(5), |l| {
        l.iter().any(|(_, v)| slow_status(v))
    }) {
        let statuses: Vec<String> = victim
            .lines_until(Instant::now())
            .iter()
            .filter(|v| v["type"] == "status")
            .take(5)
            .map(|v| v.to_string())
            .collect();
        panic!(
            "no slow-consumer status; first statuses: {statuses:#?}\n--- node\n{}",
            node.proc.log()
        );
    }
    // It comes back by itself and every item is imaged again.
    victim.wait_for("100 new images", Duration::from_secs(10), |l| {
        let at = l
            .iter()
            .position(|(_, v)| slow_status(v))
            .unwrap_or(l.len());
        l[at..].iter().filter(|(_, v)| is_refresh(v)).count() >= ITEMS
    });
    assert_eq!(victim.count(slow_status), 1);
    let log = node.proc.log();
    assert!(
        log.contains("disconnecting slow consumer") && log.contains("tickwire-subscribe"),
        "the node names the dropped subscriber:\n{log}"
    );
    assert!(stall_rates[0] > RATE as f64 * 0.3, "{stall_rates:?}");
    assert_eq!(healthy[0].gaps.load(Ordering::Relaxed), 0);
}
