//! The `tickwire` binary end to end: every subcommand run as a separate process against
//! a real node on 127.0.0.1 (port 0), each bounded in time.

mod common;

use common::{expect_event, run, start_publisher, subscriber, Node, RawConn};
use serde_json::Value as Json;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{code, DataState, MessageType, Role, StreamState};

const T: Duration = Duration::from_secs(20);

/// The flags the README's command table names, per subcommand.
fn readme_flags() -> HashMap<String, BTreeSet<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    let text = std::fs::read_to_string(path).expect("read README.md");
    let mut flags: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `tickwire ") else {
            continue;
        };
        let command = rest.split_whitespace().next().unwrap_or("");
        let command = command.trim_end_matches('`').to_string();
        // Only the first column: the command line.
        let usage = rest.split("` |").next().unwrap_or(rest);
        let set = flags.entry(command).or_default();
        for word in usage.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            if word.starts_with("--") && word.len() > 2 {
                set.insert(word.to_string());
            }
        }
    }
    flags
}

#[test]
fn help_of_every_subcommand_names_the_readme_flags() {
    let flags = readme_flags();
    // Guard the README parsing itself.
    for (cmd, must) in [
        ("node", &["--listen", "--cache", "--config"][..]),
        (
            "publish",
            &["--node", "--service", "--items", "--rate", "--interactive"][..],
        ),
        (
            "subscribe",
            &[
                "--node",
                "--service",
                "--json",
                "--count",
                "--snapshot",
                "--view",
            ][..],
        ),
        ("demo", &["--duration"][..]),
    ] {
        let got = flags
            .get(cmd)
            .unwrap_or_else(|| panic!("README table has no `tickwire {cmd}` row: {flags:?}"));
        for f in must {
            assert!(got.contains(*f), "README row for {cmd} lost {f}: {got:?}");
        }
    }

    let top = run(&["--help"], T);
    assert_eq!(top.code(), Some(0), "tickwire --help: {top:?}");
    for cmd in ["node", "publish", "subscribe", "demo"] {
        assert!(
            top.stdout.contains(cmd),
            "tickwire --help does not mention {cmd}:\n{}",
            top.stdout
        );
    }

    for (cmd, wanted) in &flags {
        // `files` names the flags of its two commands in one row.
        let helps: Vec<Vec<&str>> = match cmd.as_str() {
            "files" => vec![
                vec!["files", "send", "--help"],
                vec!["files", "status", "--help"],
            ],
            _ => vec![vec![cmd, "--help"]],
        };
        let mut out = run(&helps[0], T);
        assert_eq!(out.code(), Some(0), "tickwire {cmd} --help: {out:?}");
        for more in &helps[1..] {
            let next = run(more, T);
            assert_eq!(next.code(), Some(0), "tickwire {more:?}: {next:?}");
            out.stdout.push_str(&next.stdout);
        }
        for f in wanted {
            assert!(
                out.stdout.contains(f.as_str()),
                "`tickwire {cmd} --help` does not mention {f}:\n{}",
                out.stdout
            );
        }
    }
}

#[test]
fn node_logs_the_address_it_actually_listens_on() {
    let mut node = Node::start(&["--cache", "off"]);
    assert_eq!(node.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(node.addr.port(), 0, "port 0 not resolved: {}", node.line);
    assert!(
        node.line.contains(&format!("listening on {}", node.addr)) && node.line.contains("INFO"),
        "{}",
        node.line
    );
    assert!(node.line.contains("(cache off)"), "{}", node.line);
    // Something really listens there: a login is welcomed.
    let mut raw = RawConn::connect(node.addr);
    raw.send(&common::encode(&[common::login(Role::Subscriber)]))
        .unwrap();
    raw.read_until(Duration::from_secs(5), "a welcome", |g| {
        g.ty == MessageType::Welcome
    });
    assert!(node.is_running());
}

#[test]
fn print_config_prints_toml_and_reflects_flags() {
    let out = run(&["node", "--print-config"], T);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for key in ["listen", "cache", "max_frame_bytes"] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{key} ="))),
            "--print-config lacks {key}:\n{}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("[node]") && out.stdout.contains("[limits]"));

    let out = run(
        &[
            "node",
            "--print-config",
            "--cache",
            "off",
            "--listen",
            "127.0.0.1:9",
        ],
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.contains("listen = \"127.0.0.1:9\""),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("cache = \"off\""), "{}", out.stdout);
}

/// Commands whose report goes to a reader already gone (`| head -0`) end with their own
/// status, not a panic (status 101) at the first line.
#[test]
fn a_report_to_a_reader_gone_is_no_failure() {
    for args in [
        &["node", "--print-config"][..],
        &["backbone", "keygen"],
        &["users", "hash", "--token"],
    ] {
        // The reading end is closed before the command starts: its first write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut child = common::tickwire()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            let _ = stdin.write_all(b"a secret\n");
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn bad_config_files_are_named_with_the_offending_key() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let check = |name: &str, text: Option<&str>, must: &[&str]| {
        let path = dir.join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let p = path.to_str().unwrap();
        let out = run(&["node", "--config", p, "--listen", "127.0.0.1:0"], T);
        assert!(
            out.code().is_some_and(|c| c != 0),
            "config {name}: expected a non-zero exit, got {out:?}"
        );
        assert!(
            out.stderr.contains(p),
            "config {name}: stderr does not name {p}:\n{}",
            out.stderr
        );
        for m in must {
            assert!(
                out.stderr.contains(m),
                "config {name}: stderr does not mention {m:?}:\n{}",
                out.stderr
            );
        }
    };
    check(
        "bad-cache.toml",
        Some("[node]\ncache = \"maybe\"\n"),
        &["cache"],
    );
    check(
        "unknown-key.toml",
        Some("[node]\nlisen = \"x\"\n"),
        &["lisen"],
    );
    check("missing.toml", None, &[]);
}

/// Flags override the config file: a file's value a flag replaces is not refused, and
/// a key a file leaves to a flag (the backbone channel in the file, `--role` per host)
/// is taken; what is refused after the flags still names the file.
#[test]
fn flags_override_the_config_file_before_it_is_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    // `node --config FILE FLAGS... --print-config`
    let print_config = |config: &str, flags: &[&str]| {
        let mut args = vec!["node", "--config", config];
        args.extend_from_slice(flags);
        args.push("--print-config");
        run(&args, T)
    };
    let channel = file(
        "channel.toml",
        "[backbone]\nchannel = \"aeron:udp?endpoint=239.1.1.1:40456|interface=127.0.0.1\"\n",
    );
    let out = print_config(&channel, &["--role", "edge"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("role = \"edge\""), "{}", out.stdout);

    let heartbeat = file("heartbeat.toml", "[limits]\nheartbeat_ms = 50\n");
    let out = print_config(&heartbeat, &["--heartbeat-ms", "1000"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("heartbeat_ms = 1000"), "{}", out.stdout);

    let out = print_config(&heartbeat, &[]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains(&heartbeat) && out.stderr.contains("limits.heartbeat_ms = 50"),
        "{}",
        out.stderr
    );
}

/// `tickwire subscribe --node ADDR ARGS...`, given 20 s.
fn subscribe(addr: &str, args: &[&str]) -> common::Output {
    let mut all = vec!["subscribe", "--node", addr];
    all.extend_from_slice(args);
    run(&all, T)
}

/// `subscribe --node ADDR ARGS...` with `--json` among ARGS, which must exit 0: the
/// objects it printed.
fn subscribe_json(addr: &str, args: &[&str]) -> Vec<Json> {
    let out = subscribe(addr, args);
    assert_eq!(out.code(), Some(0), "{out:?}");
    json_lines(&out.stdout)
}

/// Parses `--json` output: one object per line.
fn json_lines(stdout: &str) -> Vec<Json> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn subscribe_json_prints_refreshes_then_updates() {
    let node = Node::start(&[]);
    let addr = node.addr_str();
    let _feed = start_publisher(&node, "FEED", 10, 200, false);
    let lines = subscribe_json(
        &addr,
        &[
            "--service",
            "FEED",
            "--json",
            "--count",
            "5",
            "--timeout",
            "15",
            "SYM0",
            "SYM1",
        ],
    );
    assert_eq!(lines.len(), 5, "expected exactly 5 lines:\n{lines:#?}");
    let mut seen = BTreeSet::new();
    for m in &lines {
        let ty = m["type"].as_str().unwrap_or("");
        assert!(ty == "refresh" || ty == "update", "type {ty:?} in {m}");
        assert_eq!(m["service"], "FEED", "{m}");
        let item = m["item"].as_str().unwrap_or("");
        assert!(item == "SYM0" || item == "SYM1", "item {item:?} in {m}");
        let fields = m["fields"].as_object().unwrap_or_else(|| panic!("{m}"));
        if seen.insert(item.to_string()) {
            assert_eq!(
                ty, "refresh",
                "first message for {item} is not a refresh: {m}"
            );
            assert!(
                fields.contains_key("BID") && fields.contains_key("ASK"),
                "refresh without BID/ASK: {m}"
            );
        }
    }
}

#[test]
fn subscribe_snapshot_view_and_unknown_service() {
    let node = Node::start(&[]);
    let addr = node.addr_str();
    let _feed = start_publisher(&node, "FEED", 10, 200, false);

    // A snapshot: one non-streaming refresh, then exit 0.
    let lines = subscribe_json(&addr, &["--json", "--snapshot", "--timeout", "15", "SYM3"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["type"], "refresh", "{}", lines[0]);
    assert_eq!(lines[0]["item"], "SYM3", "{}", lines[0]);
    assert_eq!(lines[0]["state"]["stream"], "non-streaming", "{}", lines[0]);

    // A view: only the fields asked for, in the refresh and in every update.
    let lines = subscribe_json(
        &addr,
        &[
            "--view",
            "BID,ASK",
            "--json",
            "--count",
            "3",
            "--timeout",
            "15",
            "SYM2",
        ],
    );
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(lines[0]["type"], "refresh", "{}", lines[0]);
    for m in &lines {
        let fields = m["fields"].as_object().unwrap_or_else(|| panic!("{m}"));
        assert!(!fields.is_empty(), "empty fields: {m}");
        for k in fields.keys() {
            assert!(k == "BID" || k == "ASK", "field {k} outside the view: {m}");
        }
    }

    // An unknown service: a closed status and exit status 1.
    assert_closed_with_exit_1(&addr, "NO_SUCH_SERVICE", "SYM0");
}

/// `subscribe --json SERVICE ITEM` prints one closed status and exits with status 1.
fn assert_closed_with_exit_1(addr: &str, service: &str, item: &str) {
    let out = subscribe(
        addr,
        &["--service", service, "--json", "--timeout", "5", item],
    );
    assert_eq!(out.code(), Some(1), "{service}/{item}: {out:?}");
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert_eq!(lines[0]["type"], "status", "{}", lines[0]);
    assert_eq!(lines[0]["service"], service, "{}", lines[0]);
    assert_eq!(lines[0]["item"], item, "{}", lines[0]);
    assert_eq!(lines[0]["state"]["stream"], "closed", "{}", lines[0]);
    assert!(
        !lines[0]["state"]["text"].as_str().unwrap_or("").is_empty(),
        "{}",
        lines[0]
    );
}

/// A snapshot the node ends closed-recover, without its image (the node stops while
/// the item waits for its publisher), is no answer: exit status 1, as for a closed one.
#[test]
fn a_snapshot_ended_by_a_stopping_node_exits_1() {
    use std::io::BufRead;
    let node = Node::start(&[]);
    // A publisher that announces FEED down and publishes nothing.
    let mut feed = RawConn::connect(node.addr);
    feed.send(&common::encode(&[
        common::login(Role::Publisher),
        tickwire_proto::Message::Directory(tickwire_proto::Directory {
            services: vec![tickwire_proto::ServiceEntry {
                name: "FEED",
                state: tickwire_proto::ServiceState::Down,
                interactive: false,
                item_count: 0,
            }],
        }),
    ]))
    .unwrap();
    let mut sub = common::tickwire()
        .args([
            "subscribe",
            "--node",
            &node.addr_str(),
            "--snapshot",
            "SYM0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = sub.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    // The item waits for its service, open/suspect.
    let first = rx.recv_timeout(T);
    if !first.as_ref().is_ok_and(|l| l.contains("waiting")) {
        let _ = sub.kill();
        panic!("no waiting status: {first:?}");
    }
    node.proc.signal(libc::SIGTERM);
    let status = common::wait_timeout(&mut sub, T);
    let _ = sub.kill();
    // Every line it wrote: the reader ends at the end of its output, which came with
    // its exit (what was read before the exit may still be on its way).
    let lines: Vec<String> = rx.iter().collect();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("closed-recover")),
        "{lines:?}"
    );
}

#[test]
fn subscribe_unknown_item_is_closed_with_exit_1() {
    let node = Node::start(&[]);
    let _feed = start_publisher(&node, "FEED", 10, 200, false);
    assert_closed_with_exit_1(&node.addr_str(), "FEED", "NO_SUCH_ITEM");
}

/// `subscribe --json --count N ITEM`: a refresh then updates, exit 0.
fn assert_cli_gets_refresh_and_updates(addr: &str, item: &str) {
    let lines = subscribe_json(addr, &["--json", "--count", "4", "--timeout", "15", item]);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(lines[0]["type"], "refresh", "{}", lines[0]);
    assert_eq!(lines[0]["state"]["data"], "ok", "{}", lines[0]);
    for m in &lines {
        assert_eq!(m["item"], item, "{m}");
    }
    for m in &lines[1..] {
        assert_eq!(m["type"], "update", "{m}");
    }
}

#[test]
fn cache_off_node_serves_refreshes_and_updates() {
    let node = Node::start(&["--cache", "off"]);
    assert!(node.line.contains("cache off"), "{}", node.line);
    let _feed = start_publisher(&node, "FEED", 10, 200, false);
    assert_cli_gets_refresh_and_updates(&node.addr_str(), "SYM4");
}

#[test]
fn cache_off_node_serves_an_interactive_publisher() {
    // Cache off, every request goes to the publisher for its image.
    let node = Node::start(&["--cache", "off"]);
    let _feed = start_publisher(&node, "FEED", 10, 200, true);
    assert_cli_gets_refresh_and_updates(&node.addr_str(), "SYM5");
}

#[test]
fn interactive_publisher_serves_items_on_request() {
    let node = Node::start(&[]);
    let _feed = start_publisher(&node, "FEED", 10, 200, true);
    assert_cli_gets_refresh_and_updates(&node.addr_str(), "SYM7");
    // An item the feed does not have: the publisher refuses it, the stream closes.
    assert_closed_with_exit_1(&node.addr_str(), "FEED", "NO_SUCH_ITEM");
}

#[test]
fn publisher_lost_turns_streams_suspect_and_a_new_one_recovers_them() {
    let node = Node::start(&[]);
    let mut feed = start_publisher(&node, "FEED", 10, 200, false);
    let mut sub = subscriber(node.addr);
    sub.subscribe("FEED", "SYM1", RequestOptions::default())
        .unwrap();
    let long = Duration::from_secs(10);
    expect_event(
        &mut sub,
        long,
        "the first refresh",
        |e| matches!(e, Event::Refresh { name, state, .. } if name == "SYM1" && state.data == DataState::Ok),
    );
    expect_event(&mut sub, long, "an update", |e| {
        matches!(e, Event::Update { .. })
    });

    feed.kill();
    let e = expect_event(
        &mut sub,
        long,
        "a suspect status",
        |e| matches!(e, Event::Status { name, .. } if name == "SYM1"),
    );
    let Event::Status { state, .. } = &e else {
        unreachable!()
    };
    assert_eq!(state.data, DataState::Suspect, "{e:?}");
    assert_eq!(state.stream, StreamState::Open, "{e:?}");
    assert_eq!(state.code, code::PUBLISHER_GONE, "{e:?}");

    let _feed2 = start_publisher(&node, "FEED", 10, 200, false);
    expect_event(
        &mut sub,
        long,
        "a recovering refresh",
        |e| matches!(e, Event::Refresh { name, state, .. } if name == "SYM1" && state.data == DataState::Ok),
    );
    expect_event(
        &mut sub,
        long,
        "an update after recovery",
        |e| matches!(e, Event::Update { name, .. } if name == "SYM1"),
    );
}

#[test]
fn sigint_closes_streams_recoverably_and_the_node_exits_0() {
    let mut node = Node::start(&[]);
    let _feed = start_publisher(&node, "FEED", 10, 200, false);
    let mut raw = RawConn::connect(node.addr);
    raw.send(&common::encode(&[
        common::login(Role::Subscriber),
        common::request(1, "FEED", "SYM0"),
    ]))
    .unwrap();
    raw.read_until(Duration::from_secs(5), "the refresh of SYM0", |g| {
        g.ty == MessageType::Refresh && g.stream_id == 1
    });

    node.proc.signal(libc::SIGINT);
    let end = raw.read_until_end(Duration::from_secs(5));
    let status = node.proc.wait_exit(Duration::from_secs(5));
    let log = node.proc.log();
    assert_eq!(end, common::End::Eof, "{:?}\n{log}", raw.received);
    // The item stream ends closed-recover (SHUTDOWN), never plainly closed. (If the
    // publisher's connection is closed first, an open/suspect "publisher left" status
    // may come before it.)
    let statuses: Vec<_> = raw
        .received
        .iter()
        .filter(|g| g.ty == MessageType::Status && g.stream_id == 1)
        .collect();
    let last = statuses
        .last()
        .unwrap_or_else(|| panic!("no status on stream 1: {:?}", raw.received));
    let st = last.state.as_ref().unwrap();
    assert_eq!(st.stream, StreamState::ClosedRecover, "{statuses:?}");
    assert_eq!(st.code, code::SHUTDOWN, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|g| g.state.as_ref().unwrap().stream != StreamState::Closed),
        "{statuses:?}"
    );
    let conn_status = raw
        .received
        .iter()
        .find(|g| g.is_conn_status())
        .unwrap_or_else(|| panic!("no connection status: {:?}", raw.received));
    let st = conn_status.state.as_ref().unwrap();
    assert_eq!(st.stream, StreamState::ClosedRecover, "{conn_status:?}");
    assert_eq!(st.code, code::SHUTDOWN, "{conn_status:?}");
    let status = status.unwrap_or_else(|| panic!("node still running 5 s after SIGINT\n{log}"));
    assert!(status.success(), "node exited with {status:?}\n{log}");
}

/// `tickwire demo ARGS...` on ports of its own, which must exit 0 within 30 s.
fn finished_demo(args: &[&str]) -> common::Output {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--listen", "127.0.0.1:0", "--ws", "127.0.0.1:0"]);
    let out = run(&all, Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{out:?}");
    out
}

#[test]
fn demo_without_a_tty_prints_lines_and_finishes() {
    let out = finished_demo(&["--duration", "2"]);
    assert!(
        out.stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("dashboard http://127.0.0.1:")),
        "the dashboard's URL is printed:\n{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains('\x1b'),
        "escape sequences without a tty:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.lines().any(|l| l.contains("bid")),
        "no line with a bid:\n{}",
        out.stdout
    );
    let last = out.stdout.lines().last().unwrap_or("");
    assert!(last.contains("demo finished"), "last line {last:?}");
}

/// `tickwire demo | head -2`: the demo ends when its reader has gone, quietly and with
/// status 0, as Ctrl-C ends it (it ended with "Broken pipe" and status 1).
#[test]
fn a_demo_whose_reader_has_gone_ends_quietly() {
    use std::io::{BufRead, Read};
    use std::process::Stdio;
    let mut child = common::tickwire()
        .args(["demo", "--single", "--duration", "60"])
        .args(["--listen", "127.0.0.1:0", "--ws", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    // The first line, then the reader goes.
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("tickwire demo:"), "{first:?}");
    let status = common::wait_timeout(&mut child, Duration::from_secs(30));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let err = err.join().unwrap();
    let status =
        status.unwrap_or_else(|| panic!("demo still running 30 s after its reader went\n{err}"));
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.lines().any(|l| l.starts_with("tickwire:")), "{err}");
}

/// The demo stops as soon as its time is up: its board left its node only after the
/// node had stopped, and a node stopping waits up to 2 s for its peers to close, so
/// `--duration 0` took 2 s and every demo 2 s longer than asked.
#[test]
fn a_demo_does_not_wait_for_its_own_board_to_leave() {
    let out = finished_demo(&["--single", "--duration", "0"]);
    // "tickwire demo finished after 0.0 s: ..."
    let secs: f64 = out
        .stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("tickwire demo finished after "))
        .and_then(|l| l.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no finished line:\n{}", out.stdout));
    // A node stopping with a peer still connected waits 2 s (its grace) for it: the
    // bound is just under it, as far as it can be from a stop that takes milliseconds.
    assert!(secs < 1.9, "stopping took {secs} s:\n{}", out.stdout);
}

#[test]
fn a_bad_flag_value_names_the_flag_and_the_key_it_sets() {
    for (args, flag, key) in [
        (
            &["--heartbeat-ms", "5"][..],
            "--heartbeat-ms",
            "limits.heartbeat_ms",
        ),
        (
            &["--upstream", "no-port"][..],
            "--upstream",
            "upstream.nodes",
        ),
    ] {
        let mut all = vec!["node", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let out = run(&all, T);
        assert!(out.code().is_some_and(|c| c != 0), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(flag) && out.stderr.contains(key),
            "{args:?}: {}",
            out.stderr
        );
    }
}

/// A number of seconds no clock can count to (negative, infinite, not a number, past
/// what a time-out can hold) is refused naming the flag, before anything is connected:
/// it used to end the command in a panic once it was.
#[test]
fn a_number_of_seconds_out_of_range_is_refused_naming_the_flag() {
    let node = Node::start(&[]);
    let addr = node.addr_str();
    let a = addr.as_str();
    for (args, flag) in [
        (
            &["subscribe", "--node", a, "--timeout", "1e30", "X"][..],
            "--timeout",
        ),
        (
            &["subscribe", "--node", a, "--timeout=-1", "X"],
            "--timeout",
        ),
        (
            &["subscribe", "--node", a, "--timeout", "NaN", "X"],
            "--timeout",
        ),
        (
            &[
                "replay",
                "--node",
                a,
                "--from",
                "1",
                "--timeout",
                "inf",
                "X",
            ],
            "--timeout",
        ),
        (
            &["post", "--node", a, "--timeout", "1e30", "X", "BID=1"],
            "--timeout",
        ),
        (
            &["publish", "--node", a, "--items", "1", "--duration", "1e30"],
            "--duration",
        ),
        (&["demo", "--duration", "1e30"], "--duration"),
    ] {
        refused_as_usage(args, &[flag, "number of seconds"]);
    }
}

/// `args` end with the usage error status (2), their error saying each of `words` and
/// nothing printed on standard output.
fn refused_as_usage(args: &[&str], words: &[&str]) {
    let out = run(args, T);
    assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
    for w in words {
        assert!(
            out.stderr.contains(w),
            "{args:?}: {w:?} not in {}",
            out.stderr
        );
    }
    assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
}

/// The demo's `--items 0` and `--board 0` are refused naming the flag: the demo ran one
/// item and said "0 items".
#[test]
fn a_demo_of_0_items_is_refused_naming_the_flag() {
    for flag in ["--items", "--board"] {
        let args = ["demo", "--single", "--duration", "1", flag, "0"];
        let ports = ["--listen", "127.0.0.1:0", "--ws", "127.0.0.1:0"];
        refused_as_usage(&[&args[..], &ports[..]].concat(), &[flag]);
    }
}

/// `--count 0` is refused naming the flag: it printed a message and exited 0 as if
/// one had been asked for.
#[test]
fn a_count_of_0_is_refused_naming_the_flag() {
    let node = Node::start(&[]);
    let addr = node.addr_str();
    let a = addr.as_str();
    for args in [
        &[
            "subscribe",
            "--node",
            a,
            "--count",
            "0",
            "--timeout",
            "5",
            "X",
        ][..],
        &[
            "replay",
            "--node",
            a,
            "--from",
            "1",
            "--count",
            "0",
            "--timeout",
            "5",
            "X",
        ],
    ] {
        refused_as_usage(args, &["--count"]);
    }
}

/// The first record of a JSON log that `pred` picks; panics naming `what` if none does.
fn json_record(log: &str, what: &str, pred: impl Fn(&Json) -> bool) -> Json {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .find(|v| pred(v))
        .unwrap_or_else(|| panic!("no {what} record:\n{log}"))
}

#[test]
fn log_lines_carry_the_date_and_can_be_json_and_a_bad_level_is_an_error() {
    // Text: an RFC 3339 date and time, the level, where from.
    let mut node = Node::start(&[]);
    node.stop(Duration::from_secs(10));
    let line = node
        .proc
        .log()
        .lines()
        .find(|l| l.contains("listening on"))
        .expect("the listening line")
        .to_string();
    let (stamp, rest) = line.split_once(' ').unwrap();
    assert!(
        stamp.len() >= 20
            && stamp.as_bytes()[4] == b'-'
            && stamp.contains('T')
            && stamp.ends_with('Z'),
        "{line}"
    );
    assert!(rest.trim_start().starts_with("INFO"), "{line}");
    // JSON: one object per line, with the same.
    let mut node = Node::start(&["--log-format", "json"]);
    // A login: its record carries who and from where as fields, not only as text.
    let sub = common::subscriber(node.addr);
    node.proc
        .wait_for_line("\"logged in\"", Duration::from_secs(20));
    drop(sub);
    node.proc
        .wait_for_line("\"disconnected\"", Duration::from_secs(20));
    node.stop(Duration::from_secs(10));
    let log = node.proc.log();
    let login = json_record(&log, "subscriber login", |v| {
        v["fields"]["message"] == "logged in" && v["fields"]["role"] == "Subscriber"
    });
    let peer = login["fields"]["peer"].as_str().unwrap_or("");
    assert!(peer.starts_with("127.0.0.1:"), "{login}");
    // Strings as they are, not quoted a second time.
    for key in ["user", "application"] {
        let v = login["fields"][key].as_str().unwrap_or("\"");
        assert!(!v.starts_with('"') && !v.is_empty(), "{key}: {login}");
    }
    // The subscriber leaving is logged with the reason and who it was.
    let gone = json_record(&log, "disconnection", |v| {
        v["fields"]["message"] == "disconnected"
    });
    assert_eq!(gone["fields"]["reason"], "closed by the peer", "{gone}");
    assert_eq!(gone["fields"]["peer"], login["fields"]["peer"], "{gone}");
    assert_eq!(gone["fields"]["role"], "Subscriber", "{gone}");
    // The shutdown's totals are typed fields, not prose.
    let stopped = json_record(&log, "shutdown", |v| {
        v["fields"]["message"] == "node stopped"
    });
    assert!(
        stopped["fields"]["connections_accepted"].as_u64() >= Some(1),
        "{stopped}"
    );
    assert_eq!(
        stopped["fields"]["malformed_disconnects"].as_u64(),
        Some(0),
        "{stopped}"
    );
    let mut seen = 0;
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["timestamp"].as_str().unwrap().contains('T'), "{v}");
        assert!(v["level"].is_string() && v["target"].is_string(), "{v}");
        // Records bridged from the `log` facade carry no metadata fields of their own.
        let fields = v["fields"].as_object().unwrap();
        assert!(fields.keys().all(|k| !k.starts_with("log.")), "{v}");
        if v["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("listening on")
        {
            seen += 1;
        }
    }
    assert_eq!(seen, 1, "{log}");
    // A level nobody knows: an error naming it, not a silent default.
    let out = std::process::Command::new(common::node_program())
        .args(["node", "--listen", "127.0.0.1:0"])
        .env("TICKWIRE_LOG", "verbose")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TICKWIRE_LOG=\"verbose\" is not a log level"),
        "{err}"
    );
    // With JSON logs, a fatal error is a JSON record too, the command's last line.
    let bad = common::TempConfig::new("json-fatal", "[node]\nlisten = \"nohost.invalid:1\"\n");
    let out = run(
        &["--log-format", "json", "node", "--config", bad.path()],
        Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {}", out.stderr));
    assert_eq!(v["level"], "ERROR", "{v}");
    assert_eq!(v["fields"]["fatal"], true, "{v}");
    assert!(
        v["fields"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("nohost.invalid:1"),
        "{v}"
    );
    for line in out.stderr.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
}

#[test]
fn a_host_name_is_taken_where_an_address_to_listen_on_is_and_a_bad_one_is_named() {
    // The flag and both keys take HOST:PORT.
    let node = Node::start(&["--listen", "localhost:0"]);
    assert!(node.addr.ip().is_loopback(), "{}", node.line);
    let cfg = common::TempConfig::new(
        "listen-hostnames",
        "[node]\nlisten = \"localhost:0\"\n[websocket]\nlisten = \"localhost:0\"\n",
    );
    let (node, ws) = Node::start_ws(&["--config", cfg.path(), "--listen", "localhost:0"]);
    assert!(node.addr.ip().is_loopback());
    assert!(
        ws.starts_with("127.0.0.1:") || ws.starts_with("[::1]:"),
        "{ws}"
    );
    // A name that does not resolve: the key, the value and what is expected.
    let bad = common::TempConfig::new("listen-bad-host", "[node]\nlisten = \"nohost.invalid:1\"\n");
    let out = run(&["node", "--config", bad.path()], Duration::from_secs(20));
    assert_eq!(out.code(), Some(1));
    assert!(
        out.stderr.contains("nohost.invalid:1") && out.stderr.contains("HOST:PORT"),
        "{}",
        out.stderr
    );
}

/// The node's program ships without the lab: `tickwire bench` alone says where the lab
/// is and how to build it, and leaves nothing half-done.
#[test]
fn bench_without_the_lab_beside_says_how_to_get_it() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("node-program-alone");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A copy, not a link: the program finds the lab beside its own path.
    let alone = dir.join("tickwire");
    std::fs::copy(common::node_program(), &alone).unwrap();
    // Another test's fork may hold the copy's descriptor open for a moment (an exec
    // then fails with "Text file busy") until that child execs or exits.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        match std::process::Command::new(&alone)
            .args(["bench", "quick", "--out", dir.join("out").to_str().unwrap()])
            .env("PATH", "/nonexistent")
            .output()
        {
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => break other.unwrap(),
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("tickwire-bench") && stderr.contains("cargo build --release"),
        "{stderr}"
    );
    assert!(
        !dir.join("out").exists(),
        "nothing is started without the lab"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tickwire health` with no address: a default node has no HTTP port, so there is no
/// address to guess (it asked 127.0.0.1:15000, and failed with "Connection refused"
/// against a node that was fine). It says what to give, and `--help` says it too.
#[test]
fn health_without_an_address_says_what_to_give() {
    let out = run(&["health"], T);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(
        out.stderr.contains("--ws ADDR") && out.stderr.contains("--config FILE"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("15000"), "{}", out.stderr);
    let help = run(&["health", "--help"], T);
    assert_eq!(help.code(), Some(0), "{help:?}");
    assert!(
        help.stdout.contains("there is no default"),
        "{}",
        help.stdout
    );
}
