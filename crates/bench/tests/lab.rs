//! The performance lab's tools and scenarios run and their outputs are complete and
//! consistent. Nothing here asserts on speed: rates are tiny and only counts, shapes and
//! invariants (delivered <= offered, counts add up, a dropped update is a gap) are checked.

#[path = "../../cli/tests/common/mod.rs"]
mod common;

use common::Node;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tickwire_proto::{
    encode_field_list, Directory, FieldList, Login, Message, Real, Refresh, Role, Update,
    UpdateType, Value as FieldValue,
};

/// The lab's own program (its nodes come from the `tickwire` beside it).
fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tickwire-bench")
}

/// Runs a command to completion (bounded) and returns its stdout JSON lines.
fn json_lines(args: &[&str], timeout: Duration) -> Vec<Value> {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(status.success(), "{args:?} failed: {status}\n{err}");
            return out
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tickwire-bench TOOL --node ADDR FLAGS... --json` (`flags` split at white space), as
/// [`json_lines`] runs it.
fn json_tool_lines(tool: &str, addr: &str, flags: &str, timeout: Duration) -> Vec<Value> {
    let mut args = vec![tool, "--node", addr];
    args.extend(flags.split_whitespace());
    args.push("--json");
    json_lines(&args, timeout)
}

/// The summary of a tool's JSON lines (`expect` names the tool when it has none).
fn summary<'a>(lines: &'a [Value], expect: &str) -> &'a Value {
    &lines.iter().find(|v| v["type"] == "summary").expect(expect)["summary"]
}

/// `key` summed over a tool's per-second JSON lines.
fn per_second_total(lines: &[Value], key: &str) -> u64 {
    lines
        .iter()
        .filter(|v| v["type"] == "second")
        .map(|v| v[key].as_u64().unwrap())
        .sum()
}

#[test]
fn perf_pub_and_perf_sub_counts_are_consistent() {
    let node = Node::start(&[]);
    let addr = node.addr.to_string();
    let publisher = {
        let addr = addr.clone();
        std::thread::spawn(move || {
            json_tool_lines(
                "perf-pub",
                &addr,
                "--items 200 --update-rate 2000 --duration 6",
                Duration::from_secs(60),
            )
        })
    };
    // Every item published before perf-sub asks for them (its last one last).
    common::wait_for_image(node.addr, "FEED", "SYM199", Duration::from_secs(30))
        .expect("perf-pub's items");
    let sub = json_tool_lines(
        "perf-sub",
        &addr,
        "--items 200 --connections 3 --commonality producer-50-50 --duration 2",
        Duration::from_secs(60),
    );
    let publ = publisher.join().unwrap();
    let (p, s) = (summary(&publ, "pub summary"), summary(&sub, "sub summary"));
    // 3 connections producer 50/50 over 200 items: 100 + 67 + 33... streams = sum over
    // items of (j mod 3) + 1.
    let streams: u64 = (0..200u64).map(|j| j % 3 + 1).sum();
    assert_eq!(s["streams"], streams);
    assert_eq!(s["images"], streams, "every stream got its image: {s}");
    assert_eq!(s["gaps"], 0);
    let updates = s["updates"].as_u64().unwrap();
    let sent = p["sent"].as_u64().unwrap();
    assert!(updates > 0, "{s}");
    // A subscriber cannot receive more than was sent times the fan-out.
    assert!(
        updates as f64 <= sent as f64 * 2.0 + 1.0,
        "{updates} > {sent} x 2"
    );
    // Phases add up, and latency samples never outnumber the timestamped updates.
    let phase = |n: &str, k: &str| s[n][k].as_u64().unwrap();
    assert_eq!(
        phase("startup", "updates") + phase("steady", "updates"),
        updates
    );
    assert_eq!(phase("overall", "updates"), updates);
    let lat = s["overall"]["latency"]["count"].as_u64().unwrap();
    assert!(
        lat > 0 && lat <= updates,
        "{lat} samples of {updates} updates"
    );
    assert!(lat as f64 <= p["timestamped"].as_u64().unwrap() as f64 * 2.0);
    let ordered = |l: &Value| {
        let g = |k: &str| l[k].as_u64().unwrap();
        g("min_ns") <= g("p50_ns")
            && g("p50_ns") <= g("p90_ns")
            && g("p90_ns") <= g("p99_ns")
            && g("p99_ns") <= g("p999_ns")
            && g("p999_ns") <= g("max_ns")
    };
    assert!(
        ordered(&s["overall"]["latency"]),
        "{}",
        s["overall"]["latency"]
    );
    // The per-second lines add up to the total.
    assert!(per_second_total(&sub, "updates") <= updates);
    assert!(per_second_total(&publ, "sent") <= sent);
}

/// Sends messages in one frame on a raw socket.
fn send_frame(sock: &mut TcpStream, msgs: &[Message<'_>]) {
    let mut payload = Vec::new();
    for m in msgs {
        m.encode(&mut payload).unwrap();
    }
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    sock.write_all(&frame).unwrap();
}

/// A raw publisher of service FEED with one item, SYM0, on stream 1.
fn raw_publisher(node: &Node) -> TcpStream {
    let mut sock = TcpStream::connect(node.addr).unwrap();
    let img = encode_field_list([(22, FieldValue::Real(Real::new(100, 0)))]);
    send_frame(
        &mut sock,
        &[
            Message::Login(Login::new(Role::Publisher, "gap-test", "t", "")),
            Message::Directory(Directory::one_service("FEED", 1)),
            Message::Refresh(Refresh::whole(
                1,
                0,
                "FEED",
                "SYM0",
                FieldList::decode(&img).unwrap(),
            )),
        ],
    );
    sock
}

/// A lab tool running with `--json --control`, its lines read as they come.
struct ToolLines {
    child: std::process::Child,
    /// Its control input (`quit`; closing it stops the tool too).
    control: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl ToolLines {
    /// `tickwire-bench TOOL --node ADDR FLAGS... --json --control` (`flags` split at
    /// white space).
    fn start(tool: &str, addr: &str, flags: &str) -> ToolLines {
        use std::io::BufRead;
        let mut child = Command::new(bin())
            .args([tool, "--node", addr])
            .args(flags.split_whitespace())
            .args(["--json", "--control"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        let control = child.stdin.take().expect("stdin");
        ToolLines {
            child,
            control,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (up to `timeout`) until the lines so far satisfy `done`.
    fn wait_until(&mut self, what: &str, timeout: Duration, done: impl Fn(&[Value]) -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => self.seen.push(v),
                Err(_) => panic!("no {what} within {timeout:?}: {:?}", self.seen),
            }
        }
    }

    /// Asks the tool to stop, and returns every line once it has (within `timeout`).
    fn quit(mut self, timeout: Duration) -> Vec<Value> {
        writeln!(self.control, "quit").expect("the tool's control input");
        let status = common::wait_timeout(&mut self.child, timeout);
        if status.is_none() {
            let _ = self.child.kill();
            panic!("the tool did not end within {timeout:?}: {:?}", self.seen);
        }
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        self.seen.extend(self.lines.iter());
        self.seen
    }
}

/// perf-sub on one item, fed `updates` (seq, conflation count) by a raw publisher once
/// it has the item's image, and stopped once it has counted as many updates (both seen
/// in its per-second lines); returns its summary.
fn perf_sub_fed(updates: &[(u32, u16)]) -> Value {
    let node = Node::start(&[]);
    let addr = node.addr.to_string();
    let mut sock = raw_publisher(&node);
    // --duration is a bound: the test stops it.
    let mut sub = ToolLines::start("perf-sub", &addr, "--items 1 --duration 120");
    sub.wait_until("image", Duration::from_secs(30), |lines| {
        per_second_total(lines, "images") >= 1
    });
    let upd = encode_field_list([(22, FieldValue::Real(Real::new(101, 0)))]);
    let msgs: Vec<Message<'_>> = updates
        .iter()
        .map(|&(seq, conflation_count)| {
            Message::Update(Update {
                stream_id: 1,
                seq,
                update_type: UpdateType::Quote,
                do_not_conflate: false,
                conflation_count,
                fields: FieldList::decode(&upd).unwrap(),
            })
        })
        .collect();
    send_frame(&mut sock, &msgs);
    sub.wait_until("updates", Duration::from_secs(30), |lines| {
        per_second_total(lines, "updates") >= updates.len() as u64
    });
    summary(&sub.quit(Duration::from_secs(30)), "summary").clone()
}

/// A raw publisher that skips sequence number 3: perf-sub must count one gap.
#[test]
fn a_dropped_update_is_counted_as_a_gap() {
    // 1, 2, (3 dropped), 4, 5
    let s = perf_sub_fed(&[(1, 1), (2, 1), (4, 1), (5, 1)]);
    assert_eq!(s["updates"], 4, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["conflated"], 0, "{s}");
}

/// Conflated updates: a count of k covers k sequence numbers (k - 1 merged away); a
/// count of 65535 means "65535 or more", so any jump is accepted.
#[test]
fn conflation_counts_are_summed_and_a_saturated_count_is_not_a_gap() {
    let s = perf_sub_fed(&[
        (1, 1),
        (4, 3),              // 2 and 3 merged into 4: no gap, 2 conflated
        (200_000, u16::MAX), // 65535 or more: no gap, 65534 conflated
        (200_001, 1),
        (200_003, 1), // 200_002 missing: a gap
    ]);
    assert_eq!(s["updates"], 5, "{s}");
    assert_eq!(s["gaps"], 1, "{s}");
    assert_eq!(s["conflated"], 2 + 65_534, "{s}");
}

fn read_results(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    serde_json::from_str(&text).expect("valid JSON")
}

fn read_report(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("report.md")).unwrap()
}

/// An empty directory for a test's outputs, `tickwire-NAME-PID` under the temporary
/// directory.
fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tickwire-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run_bench(args: &[&str]) {
    let status = Command::new(bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{args:?}: {status}");
}

/// `tickwire-bench SCENARIO --out DIR FLAGS...` (`flags` split at white space), which
/// must succeed; its results.json.
fn run_scenario(scenario: &str, dir: &Path, flags: &str) -> Value {
    let mut args = vec![scenario, "--out", dir.to_str().unwrap()];
    args.extend(flags.split_whitespace());
    run_bench(&args);
    read_results(dir)
}

#[test]
fn bench_scenarios_write_complete_results_reports_and_plots() {
    let dir = out_dir("lab");
    let lat = dir.join("latency");
    let r = run_scenario(
        "latency",
        &lat,
        "--items 500 --rates 500,1000 --step-seconds 1 --max-rate 1000",
    );
    let steps = r["latency"].as_array().expect("latency list");
    // Both rates, unless the first was not sustained (a busy machine): then the
    // ladder stops there and says why.
    let stopped_early = steps.len() == 1
        && steps[0]["step"]["pass"] == false
        && steps[0]["step"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty());
    assert!(steps.len() == 2 || stopped_early, "{steps:?}");
    for (s, rate) in steps.iter().zip([500, 1000]) {
        assert_eq!(s["rate"], rate);
        for key in [
            "mean_ns",
            "stddev_ns",
            "min_ns",
            "max_ns",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p999_ns",
            "p9999_ns",
            "count",
            "gaps",
        ] {
            assert!(s.get(key).is_some(), "latency step lacks {key}: {s}");
        }
        assert!(s["count"].as_u64().unwrap() > 0);
        let st = &s["step"];
        // The node's CPU per update is there, the same on the entry and its step, and
        // not negative (a short step at a low rate may round to 0 ticks).
        let cpu = st["node_cpu_ns_per_update"]
            .as_f64()
            .expect("node_cpu_ns_per_update");
        assert!(cpu >= 0.0, "{st}");
        assert_eq!(s["node_cpu_ns_per_update"].as_f64(), Some(cpu), "{s}");
        // The publisher's and the subscriber's marks are a few milliseconds apart, so a
        // window may count a few updates more than the publisher's did; never more than
        // 1% (+2) of them.
        let (delivered, offered) = (
            st["delivered"].as_u64().unwrap(),
            st["offered"].as_u64().unwrap(),
        );
        assert!(
            delivered <= offered + offered / 100 + 2,
            "{delivered} delivered of {offered} offered"
        );
    }
    assert!(r["machine"]["cpus"].as_u64().unwrap() >= 1);
    // The wake-up probe ran before the rig and its figures are ordered.
    let wake = &r["machine"]["wake_round_trip"];
    let (min, p50, p90) = (
        wake["min_ns"].as_u64().expect("wake_round_trip.min_ns"),
        wake["p50_ns"].as_u64().unwrap(),
        wake["p90_ns"].as_u64().unwrap(),
    );
    assert!(0 < min && min <= p50 && p50 <= p90, "{wake}");
    assert!(wake["count"].as_u64().unwrap() > 0, "{wake}");
    assert!(r["machine"]["cpu_idle"].is_object(), "{}", r["machine"]);
    assert!(r["git_commit"].is_string());
    assert!(!r["commands"].as_array().unwrap().is_empty());
    // The ladder's publisher writes every 8 updates and yields after each such write.
    assert_eq!(r["settings"]["ladder_pub_yield"], "on");
    let pub_cmd = r["commands"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .find(|c| c.contains("perf-pub"))
        .expect("perf-pub's command line");
    assert!(
        pub_cmd.contains("--flush-every 8") && pub_cmd.contains("--yield-after-write"),
        "{pub_cmd}"
    );
    // Every process of every step has its figures.
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2 * 3, "3 processes x 2 steps: {procs:?}");
    for p in procs {
        for key in [
            "cpu_user_s",
            "cpu_sys_s",
            "cpu_percent",
            "peak_rss_bytes",
            "voluntary_ctx_switches",
            "involuntary_ctx_switches",
            "run_delay_s",
            "run_delay_us_per_run",
        ] {
            assert!(p.get(key).is_some(), "process lacks {key}: {p}");
        }
    }
    let report = read_report(&lat);
    assert!(report.contains("| rate/s | mean |"), "{report}");
    assert!(report.contains("node CPU per update"), "{report}");
    assert!(report.contains("woken and answering"), "{report}");
    assert!(report.contains("waited to run (µs per run)"), "{report}");
    assert!(report.contains("node waited to run"), "{report}");
    assert!(
        report.contains("the scale of this table's floor"),
        "{report}"
    );
    let svg = std::fs::read_to_string(lat.join("latency.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..80.min(svg.len())]
    );

    let thr = dir.join("throughput");
    let r = run_scenario(
        "throughput",
        &thr,
        "--items 500 --start-rate 500 --max-rate 1000 --step-seconds 1",
    );
    let t = r["throughput"].as_array().unwrap();
    assert_eq!(t.len(), 2);
    for (entry, cache) in t.iter().zip(["off", "on"]) {
        assert_eq!(entry["cache"], cache);
        let max = entry["max_sustainable_updates_per_s"].as_u64().unwrap();
        let steps = entry["steps"].as_array().unwrap();
        assert!(!steps.is_empty());
        // The reported maximum is a rate that passed (or 0 if none did).
        assert!(
            max == 0
                || steps
                    .iter()
                    .any(|s| s["pass"] == true && s["target_rate"] == max)
        );
    }
    assert!(thr.join("throughput.svg").exists());

    // A WebSocket subscriber (perf-ws-sub over the tr_json2 API).
    let ws = dir.join("ws");
    let r = run_scenario(
        "ws",
        &ws,
        "--ws-items 50 --start-rate 500 --max-rate 1000 --step-seconds 1 \
         --ws-connections 4 --ws-fanout-items 20 --ws-fanout-rate 400",
    );
    let w = &r["websocket"];
    // Fan-out: every run delivers the rate times the connections; the nodes that share
    // encodings reused them, the others encoded every update themselves.
    let f = &w["fanout"];
    for kind in ["shared", "unshared"] {
        let runs = f[kind].as_array().unwrap();
        assert_eq!(runs.len(), 2, "{f}");
        // One-second steps: the pass rule's 0.5% is 8 updates here, less than the
        // publisher's and the subscriber's marks may be apart; so no pass is required,
        // only every connection's share of what was offered within 10% (whatever rate
        // a busy machine let the publisher keep) and no gap.
        for st in runs {
            assert_eq!(st["gaps"], 0, "{st}");
            assert!(st["offered_per_s"].as_f64().unwrap() > 0.0, "{st}");
            let ratio = st["delivered_ratio"].as_f64().unwrap();
            assert!(
                (ratio - 1.0).abs() < 0.1,
                "delivered {ratio} of 4 x what was offered: {st}"
            );
        }
        assert!(
            f[format!("{kind}_node_cpu_us_per_update")]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }
    // Four connections watch every item: each update is encoded once, reused three times
    // (images and the first turn aside).
    let (enc, reused) = (
        f["shared_encoded"].as_u64().unwrap(),
        f["shared_reused"].as_u64().unwrap(),
    );
    assert!(reused >= 2 * enc, "shared: {enc} encoded, {reused} reused");
    assert_eq!(f["unshared_reused"], 0, "{f}");
    assert!(f["unshared_encoded"].as_u64().unwrap() > 0, "{f}");
    assert_eq!(w["items"], 50);
    // The ladder ran; a step that did not pass says why (a busy machine may fail them
    // all), and none lost an update.
    let steps = w["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for st in steps {
        assert_eq!(st["gaps"], 0, "{st}");
        let reason = st["reason"].as_str().unwrap_or("");
        assert!(
            st["pass"] == true || (!reason.is_empty() && reason != "ok"),
            "{st}"
        );
    }
    let lat = w["latency"].as_array().unwrap();
    assert!(!lat.is_empty());
    assert!(lat[0]["latency"]["count"].as_u64().unwrap() > 0, "{lat:?}");
    assert_eq!(lat[0]["gaps"], 0);
    assert!(read_report(&ws).contains("WebSocket subscriber"));

    // Compare a run with itself: every index is 100.
    let cmp = dir.join("cmp");
    run_bench(&[
        "compare",
        thr.to_str().unwrap(),
        thr.to_str().unwrap(),
        "--out",
        cmp.to_str().unwrap(),
    ]);
    let md = std::fs::read_to_string(cmp.join("compare.md")).unwrap();
    assert!(md.contains("| throughput cache off (updates/s) |"), "{md}");
    assert!(md.contains("| 100 |"), "{md}");
    assert!(cmp.join("compare.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench stall` with short phases, a low rate and few items: the `stall` object is
/// complete and its figures agree with each other (no figure is judged for speed).
#[test]
fn bench_stall_reports_every_phase_and_loses_nothing() {
    let dir = out_dir("stall");
    let started = std::time::Instant::now();
    let r = run_scenario(
        "stall",
        &dir,
        "--stall-rate 2000 --stall-items 100 --stall-subscribers 3 --stall-seconds 1 \
         --node-pause-ms 200 --stall-phase-seconds 1",
    );
    let s = &r["stall"];
    assert!(s.is_object(), "no stall object: {r}");
    let n = |k: &str| {
        s[k].as_u64()
            .unwrap_or_else(|| panic!("stall.{k} is not a count: {s}"))
    };
    assert_eq!(n("rate"), 2000);
    assert_eq!(s["rate_source"], "--stall-rate");
    assert_eq!((n("subscribers"), n("healthy_subscribers")), (3, 2));
    assert!(n("baseline_p99_ns") > 0, "{s}");
    assert!(n("stall_p99_ns") > 0, "{s}");
    // The node was stopped 200 ms: updates sent meanwhile waited at least that long
    // (less the 1 ms burst period the publisher's timestamps round to).
    assert!(n("node_pause_p99_ns") >= 150_000_000, "{s}");
    assert!(n("node_peak_rss_bytes") > 0, "{s}");
    assert_eq!(n("healthy_gaps"), 0, "{s}");
    assert_eq!(s["healthy_lost"], 0, "{s}");
    assert!(s["healthy_conflated"].is_u64(), "{s}");
    assert_eq!(n("healthy_reconnects"), 0, "{s}");
    // 2,000 updates/s of 89 bytes for 1 s stay far below the node's output limit.
    assert_eq!(s["stopped_subscriber_disconnected"], false, "{s}");
    assert_eq!(s["stopped_subscriber"]["gaps"], 0, "{s}");
    assert!(
        s["stopped_subscriber"]["updates"].as_u64().unwrap() > 0,
        "{s}"
    );
    assert!(s["conflated_updates"].is_u64(), "{s}");
    let stopped_ms = s["subscriber_stopped_ms"].as_f64().unwrap();
    assert!((1000.0..5000.0).contains(&stopped_ms), "{stopped_ms}");
    let paused_ms = s["node_stopped_ms"].as_f64().unwrap();
    assert!((200.0..2000.0).contains(&paused_ms), "{paused_ms}");
    // Recovery, where found, lies within the phase after the resume.
    for k in ["recovery_ms", "subscriber_recovery_ms"] {
        if let Some(v) = s[k].as_f64() {
            assert!((0.0..=2000.0).contains(&v), "{k} {v}");
        }
    }
    let phases = s["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "subscriber_stall",
            "after_subscriber",
            "node_pause",
            "after_node"
        ]
    );
    for p in phases {
        let updates = p["healthy_updates"].as_u64().unwrap();
        let sent = p["publisher_sent"].as_u64().unwrap();
        assert!(updates > 0 && sent > 0, "{p}");
        // Each healthy subscriber gets every update: about 2 x sent, up to what was in
        // flight at the phase's ends.
        assert!(updates <= 2 * sent + 2 * 200, "{p}");
        assert_eq!(p["healthy"].as_array().unwrap().len(), 2, "{p}");
        assert!(p["healthy_p99_ns"].as_u64().unwrap() > 0, "{p}");
    }
    assert_eq!(
        s["baseline_p99_ns"], phases[0]["healthy_p99_ns"],
        "the headline is the phase's figure"
    );
    let targets = s["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 5, "{targets:?}");
    assert_eq!(
        s["pass"].as_bool().unwrap(),
        targets.iter().all(|t| t["pass"] == true)
    );
    let events: Vec<&str> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for e in [
        "subscriber SIGSTOP",
        "subscriber SIGCONT",
        "node SIGSTOP",
        "node SIGCONT",
    ] {
        assert!(events.contains(&e), "{events:?}");
    }
    // The time series covers the run: about 6 s of 50 ms intervals.
    let series = s["series"].as_array().unwrap();
    assert!(series.len() >= 60, "{} intervals", series.len());
    assert!(series
        .iter()
        .any(|p| p["healthy_count"].as_u64().unwrap() > 0));
    // Per-phase process figures for node, publisher and the 3 subscribers.
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(
        procs.iter().filter(|p| p["scenario"] == "stall").count(),
        5 * 5
    );
    let report = read_report(&dir);
    assert!(report.contains("## Stall"), "{report}");
    assert!(report.contains("| target | required | measured | result |"));
    let svg = std::fs::read_to_string(dir.join("stall.svg")).unwrap();
    assert!(svg.contains("<svg"), "{}", &svg[..80.min(svg.len())]);
    // Fewer than 2 subscribers leaves none healthy: refused with a clear message.
    let bad = Command::new(bin())
        .args([
            "stall",
            "--out",
            dir.to_str().unwrap(),
            "--stall-rate",
            "100",
        ])
        .args(["--stall-subscribers", "1"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--stall-subscribers 1"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench tree` with tiny settings: the `tree` object has what other tools read
/// (single-node rate, throughput per cache, fan-out in and out, the latency ladder),
/// and the report has its section. No figure is judged for speed.
/// A scenario's steps through two nodes: each delivered updates with no gap.
fn data_went_through_both_nodes(scenario: &Value) {
    let steps = scenario["steps"].as_array().expect("steps");
    assert!(!steps.is_empty(), "{scenario}");
    for step in steps {
        assert!(step["delivered"].as_u64() > Some(0), "{step}");
        assert_eq!(step["gaps"], 0, "{step}");
    }
}

#[test]
fn bench_tree_writes_the_two_node_results() {
    let dir = out_dir("tree");
    let r = run_scenario(
        "tree",
        &dir,
        "--items 200 --fanout-items 50 --connections 4 --start-rate 500 --max-rate 1000 \
         --rates 500 --step-seconds 1",
    );
    let t = &r["tree"];
    assert!(t["single_node_updates_per_s"].as_u64().is_some(), "{t}");
    let thr = t["throughput"].as_array().expect("throughput list");
    let caches: Vec<&str> = thr.iter().map(|x| x["cache"].as_str().unwrap()).collect();
    assert_eq!(caches, ["off", "on"]);
    for x in thr {
        assert!(x["max_sustainable_updates_per_s"].as_u64().is_some(), "{x}");
        data_went_through_both_nodes(x);
    }
    // A rate of 0 is the lab's honest verdict on a machine too busy to hold even the
    // lowest rung within its criteria (other tests share these two CPUs): then it says
    // why, and its steps still show data through both nodes.
    let f = &t["fanout"];
    assert!(f["input_updates_per_s"].as_u64().is_some(), "{f}");
    assert!(f["output_updates_per_s"].as_u64().is_some(), "{f}");
    if f["input_updates_per_s"] == 0 {
        assert!(
            f["limited_by"].as_str().is_some_and(|w| !w.is_empty()),
            "{f}"
        );
    }
    data_went_through_both_nodes(f);
    let lat = t["latency"].as_array().expect("latency ladder");
    assert_eq!(lat[0]["rate"], 500, "{lat:?}");
    assert!(lat[0]["p50_ns"].as_u64().unwrap() > 0);
    let md = read_report(&dir);
    assert!(md.contains("## Through two nodes"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench wait`: one rig per idle strategy, at rest then a rung, each with the CPU of
/// every process; the report has its table. No figure is judged for speed.
#[test]
fn bench_wait_measures_each_idle_strategy_at_rest_and_under_load() {
    let dir = out_dir("wait");
    let r = run_scenario(
        "wait",
        &dir,
        "--items 100 --wait-strategies adaptive,block --rates 1000 --step-seconds 1",
    );
    assert_eq!(
        r["settings"]["wait_strategies"],
        json!(["adaptive", "block"])
    );
    // The rigs' backbone is authenticated by default, with a key made for the run and
    // kept with the logs (not with the results, which are kept).
    assert_eq!(r["settings"]["backbone_auth"], "on");
    assert!(!dir.join("backbone.keys").exists());
    let keys = std::fs::metadata(dir.join("logs/backbone.keys")).expect("the run's key file");
    // Its key is keyed BLAKE3, as keygen writes (`--backbone-auth hmac-sha256` for the other).
    let text = std::fs::read_to_string(dir.join("logs/backbone.keys")).unwrap();
    assert!(
        text.lines()
            .any(|l| !l.starts_with('#') && l.ends_with(" blake3")),
        "{text}"
    );
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&keys.permissions()) & 0o777,
        0o600
    );
    let node_configs: Vec<String> = std::fs::read_dir(dir.join("logs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".toml"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(!node_configs.is_empty());
    for c in &node_configs {
        assert!(c.contains("key_file = "), "{c}");
    }
    let strategies = r["wait"]["strategies"].as_array().expect("strategies");
    let names: Vec<&str> = strategies
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["adaptive", "block"]);
    for s in strategies {
        let ladder = s["latency"].as_array().expect("ladder");
        let rates: Vec<u64> = ladder.iter().map(|l| l["rate"].as_u64().unwrap()).collect();
        assert_eq!(rates, [0, 1000], "{s}");
        assert_eq!(ladder[0]["count"], 0, "at rest: no update, {s}");
        assert!(ladder[1]["p50_ns"].as_u64().unwrap() > 0, "{s}");
        for l in ladder {
            let procs = l["step"]["processes"].as_array().expect("processes");
            for role in ["node-source", "node-edge", "perf-pub", "perf-sub"] {
                let p = procs
                    .iter()
                    .find(|p| p["name"].as_str().unwrap().starts_with(role))
                    .unwrap_or_else(|| panic!("no {role} in {l}"));
                assert!(p["cpu_percent"].as_f64().is_some(), "{p}");
            }
        }
    }
    let md = read_report(&dir);
    assert!(md.contains("## What waiting costs"), "{md}");
    assert!(md.contains("| adaptive | at rest |"), "{md}");
    assert!(md.contains("| block | 1,000 |"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_journal_writes_one_line_per_sync_policy() {
    let dir = out_dir("journal-bench");
    let r = run_scenario(
        "journal",
        &dir,
        "--step-seconds 1 --items 200 --start-rate 500 --max-rate 1000",
    );
    let steps = r["journal"].as_array().expect("a journal list");
    let syncs: Vec<&str> = steps.iter().map(|s| s["sync"].as_str().unwrap()).collect();
    assert_eq!(syncs, ["always", "batch", "never", "off"]);
    for s in steps {
        for key in [
            "posts_per_s",
            "ack_p50_ns",
            "ack_p99_ns",
            "syscalls_per_post",
        ] {
            assert!(s[key].is_number(), "{key} in {s}");
        }
        assert!(s["posts_per_s"].as_f64().unwrap() > 0.0, "{s}");
        assert_eq!(s["nakked"], 0, "every post accepted: {s}");
        assert!(s["ack_p50_ns"].as_u64().unwrap() > 0, "{s}");
    }
    // A sync per record with "always" (received and completed: two records, each a
    // write and a sync); fewer with group commit; none without a journal.
    let per_post = |i: usize| steps[i]["syscalls_per_post"].as_f64().unwrap();
    assert!((per_post(0) - 4.0).abs() < 0.5, "always: {}", per_post(0));
    assert!(per_post(1) < per_post(0), "batch below always");
    // Group commit still writes and syncs (a journal that only buffered would show 0).
    assert!(per_post(1) > 0.0, "batch writes: {}", per_post(1));
    assert!(per_post(2) > 0.0, "never writes: {}", per_post(2));
    assert_eq!(per_post(3), 0.0, "no journal, no journal calls");
    // What journaling every update costs the sustained rate: both searches ran.
    // A rate below the first rung (a machine too busy for it: 0, or what the search
    // found under it) comes with its reason.
    let c = &r["journal_updates"];
    for side in ["without", "with"] {
        let rate = c[format!("{side}_journal_updates_per_s")].as_u64().unwrap();
        if rate < 500 {
            assert!(
                c[format!("{side}_limited_by")]
                    .as_str()
                    .is_some_and(|w| !w.is_empty()),
                "{side}: {c}"
            );
        }
    }
    let report = read_report(&dir);
    assert!(report.contains("## Posts and the journal"), "{report}");
    assert!(report.contains("Journaling every update"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn run_peers(dir: &Path, nats_server: Option<&str>) -> Value {
    let mut cmd = Command::new(bin());
    cmd.args(["peers", "--out", dir.to_str().unwrap()])
        .args(["--items", "200", "--rates", "500", "--step-seconds", "1"])
        .args(["--start-rate", "500", "--max-rate", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(p) = nats_server {
        cmd.env("TICKWIRE_NATS_SERVER", p);
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "bench peers: {status}");
    read_results(dir)
}

/// A system's entry: its highest sustained rate and a latency ladder shaped like the
/// single node's, every update delivered.
fn assert_peer_measured(p: &Value, name: &str) {
    assert_eq!(p["available"], true, "{name}: {p}");
    // The search ran. A rate below the first rung (500) is the lab's honest verdict on
    // a machine too busy to hold it (other tests share these CPUs): 0, or what the
    // search found under it (430/s once, beside lab_files and two CPU hogs); then it
    // says why.
    let max = p["max_sustainable_updates_per_s"].as_u64().unwrap();
    assert!(!p["steps"].as_array().unwrap().is_empty(), "{name}: {p}");
    if max < 500 {
        assert!(
            p["limited_by"].as_str().is_some_and(|w| !w.is_empty()),
            "{name}: {p}"
        );
    }
    let lat = p["latency"].as_array().expect("latency ladder");
    assert_eq!(lat[0]["rate"], 500, "{name}: {lat:?}");
    assert!(lat[0]["p50_ns"].as_u64().unwrap() > 0, "{name}");
    assert!(lat[0]["p99_ns"].as_u64().unwrap() >= lat[0]["p50_ns"].as_u64().unwrap());
    assert_eq!(lat[0]["gaps"], 0, "{name}");
    assert!(lat[0]["count"].as_u64().unwrap() > 0, "{name}");
}

/// `bench peers`: Tickwire and NATS (installed by scripts/setup.sh) measured by the
/// same procedure in one run, side by side in the report.
#[test]
fn bench_peers_measures_tickwire_and_nats_side_by_side() {
    let dir = out_dir("peers");
    let r = run_peers(&dir, None);
    let p = &r["peers"];
    assert_peer_measured(&p["tickwire"], "tickwire");
    assert_peer_measured(
        &p["nats"],
        "nats (is nats-server installed? scripts/setup.sh installs it)",
    );
    assert!(p["nats"]["version"]
        .as_str()
        .unwrap()
        .contains("nats-server"));
    let md = read_report(&dir);
    assert!(md.contains("## Peers"), "{md}");
    assert!(md.contains("perf-nats-sub --nats"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without the peer's server the scenario says so, still measures Tickwire and exits 0.
#[test]
fn bench_peers_without_nats_says_so_and_measures_tickwire() {
    let dir = out_dir("peers-none");
    let r = run_peers(&dir, Some("/nonexistent/nats-server"));
    let p = &r["peers"];
    assert_peer_measured(&p["tickwire"], "tickwire");
    assert_eq!(p["nats"]["available"], false, "{p}");
    let why = p["nats"]["unavailable"].as_str().unwrap();
    assert!(why.contains("TICKWIRE_NATS_SERVER"), "{why}");
    let md = read_report(&dir);
    assert!(md.contains("**nats** was not measured"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tickwire bench ...` is the lab under the node program's command: the same help,
/// the same exit status for a bad flag.
#[test]
fn tickwire_bench_is_the_lab_program() {
    let via_node = common::tickwire()
        .args(["bench", "--help"])
        .output()
        .unwrap();
    let lab = Command::new(bin()).arg("--help").output().unwrap();
    assert!(via_node.status.success(), "{via_node:?}");
    assert_eq!(via_node.stdout, lab.stdout);
    assert!(String::from_utf8_lossy(&lab.stdout).contains("quick"));
    let bad = common::tickwire()
        .args(["perf-pub", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("tickwire-bench perf-pub"),
        "{bad:?}"
    );
}
