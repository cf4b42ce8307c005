//! `GET /metrics` on the node's HTTP port while data flows: OpenMetrics read by
//! Prometheus's own Python parser (prometheus_client's OpenMetrics parser), the classic
//! text format checked by `promtool check metrics`, and a real Prometheus server
//! scraping a node; the names are those the contract gives, and the figures move.
//! `/healthz` and `/readyz`, and `tickwire health` asking them.

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The `Accept` header Prometheus 2.x scrapes with.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET path` (with an `Accept` header if given): status line and headers, body.
fn get(addr: &str, path: &str, accept: Option<&str>) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.to_string(), body.to_string())
}

/// `GET /metrics` as Prometheus asks for it (OpenMetrics).
fn scrape(addr: &str) -> (String, String) {
    get(addr, "/metrics", Some(PROMETHEUS_ACCEPT))
}

/// A program of Debian's `prometheus` package (.ci/test installs it).
fn prometheus_tool(name: &str) -> std::process::Command {
    let found = std::process::Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{name} is not installed: install Debian's prometheus package (apt-get install --no-install-recommends prometheus), as .ci/test does"
    );
    std::process::Command::new(name)
}

/// Runs `cmd` with `input` on its standard input; what it printed and its status.
fn run_with_input(mut cmd: std::process::Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `promtool check metrics` on a classic-format body: its complaints, empty when none.
fn promtool_complaints(body: &str) -> String {
    let mut promtool = prometheus_tool("promtool");
    promtool.args(["check", "metrics"]);
    let out = run_with_input(promtool, body);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        said.trim().to_string()
    } else {
        format!("(exit {:?}) {said}", out.status.code())
    }
}

/// Every sample, parsed by prometheus_client: {"name{labels}": value}.
fn parse(body: &str) -> serde_json::Map<String, Value> {
    let code = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        out[s.name + ("{" + labels + "}" if labels else "")] = s.value
print(json.dumps(out))
"#;
    let mut python = std::process::Command::new(python_with_websocket_client());
    python.args(["-c", code]);
    let out = run_with_input(python, body);
    assert!(
        out.status.success(),
        "the parser refused the metrics: {}\n{body}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).unwrap() {
        Value::Object(m) => m,
        other => panic!("{other}"),
    }
}

#[test]
fn the_metrics_parse_and_move_while_data_flows() {
    let (node, ws) = Node::start_ws(&["--posts", "FEED"]);
    let _feed = accepting_feed(&node, 10, 1000);
    let mut sub = subscriber(node.addr);
    sub.subscribe("FEED", "SYM1", Default::default()).unwrap();
    let out = run(
        &["post", "--node", &node.addr_str(), "SYM1", "BID=1", "ASK=2"],
        Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);

    let (head, body) = scrape(&ws);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    let first = parse(&body);
    for name in [
        "tickwire_updates_in_total",
        "tickwire_updates_out_total",
        "tickwire_items",
        "tickwire_connections{role=\"subscriber\"}",
        "tickwire_service_up{service=\"FEED\"}",
        "tickwire_posts_total{result=\"acked\"}",
        "tickwire_slow_consumer_episodes_total",
        "tickwire_conflated_updates_total",
        "tickwire_logins_refused_total",
        "tickwire_received_bytes_total",
        "tickwire_sent_bytes_total",
        "tickwire_service_items{service=\"FEED\"}",
        "tickwire_service_updates_in_total{service=\"FEED\"}",
        "tickwire_service_updates_out_total{service=\"FEED\"}",
        "tickwire_update_latency_seconds_count",
        "tickwire_update_latency_seconds_bucket{le=\"0.001\"}",
        "tickwire_update_latency_seconds_bucket{le=\"+Inf\"}",
        "tickwire_ready",
        "tickwire_websocket_updates_encoded_total",
        "tickwire_websocket_updates_reused_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(first.contains_key(name), "{name} missing from\n{body}");
    }
    assert!(
        first
            .keys()
            .all(|k| k.starts_with("tickwire_") || k.starts_with("process_")),
        "{body}"
    );
    let version = format!(
        "tickwire_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(first[&version], 1.0, "{body}");
    // No backbone, upstream or journal to wait for: ready.
    assert_eq!(first["tickwire_ready"], 1.0);
    assert!(first["process_resident_memory_bytes"].as_f64() > Some(1e6));
    assert!(first["process_open_fds"].as_f64() >= Some(3.0));

    // Asked without OpenMetrics (curl, promtool): the classic text format, which
    // promtool finds nothing to say about, with the same samples.
    for accept in [None, Some("*/*"), Some("text/plain")] {
        let (head, text) = get(&ws, "/metrics", accept);
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{accept:?}: {head}"
        );
        assert_eq!(promtool_complaints(&text), "", "{accept:?}:\n{text}");
        assert!(
            text.contains("\n# TYPE tickwire_logins_total counter\n"),
            "{text}"
        );
        assert!(text.contains(&format!("\n{version} 1\n")), "{text}");
        assert!(!text.contains("# EOF"), "{text}");
    }
    assert_eq!(first["tickwire_service_up{service=\"FEED\"}"], 1.0);
    assert_eq!(first["tickwire_posts_total{result=\"acked\"}"], 1.0);
    assert_eq!(first["tickwire_service_items{service=\"FEED\"}"], 10.0);
    // Updates keep flowing: the counters move between two scrapes, the per-service
    // ones with the totals, and the feed's send stamps fill the latency histogram.
    let moving = [
        "tickwire_updates_in_total",
        "tickwire_updates_out_total",
        "tickwire_service_updates_in_total{service=\"FEED\"}",
        "tickwire_service_updates_out_total{service=\"FEED\"}",
        "tickwire_received_bytes_total",
        "tickwire_sent_bytes_total",
        "tickwire_update_latency_seconds_count",
    ];
    // Updates keep flowing: both counters move between two scrapes.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        while sub
            .next_event(Duration::from_millis(10))
            .ok()
            .flatten()
            .is_some()
        {}
        let (_, body) = scrape(&ws);
        let now = parse(&body);
        let grew = |k: &str| now[k].as_f64() > first[k].as_f64();
        if moving.iter().all(|k| grew(k)) {
            // The subscriber's queue had something in it when the node wrote to it.
            assert!(
                now.iter().any(|(k, v)| k
                    .starts_with("tickwire_connection_queue_high_water_bytes{")
                    && k.contains("role=\"subscriber\"")
                    && v.as_f64() > Some(0.0)),
                "no subscriber's queue high-water mark:\n{body}"
            );
            // A histogram's +Inf bucket holds every sample, and its buckets only grow.
            let count = now["tickwire_update_latency_seconds_count"].as_f64();
            assert_eq!(
                now["tickwire_update_latency_seconds_bucket{le=\"+Inf\"}"].as_f64(),
                count
            );
            assert!(now["tickwire_update_latency_seconds_bucket{le=\"0.001\"}"].as_f64() <= count);
            // The node's own figures item goes through a service of its own: FEED's
            // figures are part of the totals, never more.
            for (total, feed) in [
                (
                    "tickwire_updates_in_total",
                    "tickwire_service_updates_in_total{service=\"FEED\"}",
                ),
                (
                    "tickwire_updates_out_total",
                    "tickwire_service_updates_out_total{service=\"FEED\"}",
                ),
            ] {
                assert!(
                    now[feed].as_f64() <= now[total].as_f64(),
                    "{feed} > {total}"
                );
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the counters did not move:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Service and user names are the peers' own: quotes, backslashes and newlines in them
/// are escaped in both formats, so the page stays readable to the scraper (one such
/// name made it unreadable, losing every metric of the node, or added samples of the
/// peer's making), and the names parse back as they were.
#[test]
fn names_a_peer_chose_are_escaped_in_both_formats() {
    let (node, ws) = Node::start_ws(&[]);
    let service = "FE\"ED\\\nfake_metric 1";
    let user = "u\"x\nfake_user 2";
    let _feed = publish_as(
        user,
        "",
        &node.addr_str(),
        &["--service", service, "--items", "2", "--rate", "100"],
    );
    // A subscriber under that name too: its queue is among those shown by user.
    let _sub = Proc::spawn_with(
        &[
            "subscribe",
            "--node",
            &node.addr_str(),
            "--service",
            service,
            "--user",
            user,
            "SYM0",
            "SYM1",
        ],
        |cmd| {
            cmd.env("TICKWIRE_PASSWORD", "");
        },
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let (expect_service, expect_user) = (
        format!("tickwire_service_up{{service=\"{service}\"}}"),
        format!("user=\"{user}\""),
    );
    loop {
        let (_, body) = scrape(&ws);
        let samples = parse(&body);
        assert!(
            samples.keys().all(|k| !k.starts_with("fake_")),
            "a sample of the peer's making:\n{body}"
        );
        if samples.get(&expect_service).and_then(Value::as_f64) == Some(1.0)
            && samples.keys().any(|k| k.contains(&expect_user))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{expect_service} and a queue of {user:?} not found:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, text) = get(&ws, "/metrics", None);
    assert_eq!(promtool_complaints(&text), "", "\n{text}");
}

/// Every metric name the example Grafana dashboard's queries use.
fn dashboard_metric_names() -> Vec<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/grafana/tickwire-dashboard.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut asked = Vec::new();
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("tickwire_") || word.starts_with("process_") {
                    asked.push(word.to_string());
                }
            }
        }
    }
    asked
}

/// The example Grafana dashboard asks only for metrics a node serves.
#[test]
fn the_example_grafana_dashboard_uses_only_metrics_the_node_serves() {
    let dir = std::env::temp_dir().join(format!("tickwire-metrics-journal-{}", std::process::id()));
    let cfg = TempConfig::new(
        "metrics-journal",
        &format!(
            "[posts]\nservices = [\"FEED\"]\n[journal]\ndir = \"{}\"\nservices = [\"FEED\"]\n",
            dir.display()
        ),
    );
    let (node, ws) = Node::start_ws(&["--config", cfg.path()]);
    let _feed = Proc::spawn(&[
        "publish",
        "--node",
        &node.addr_str(),
        "--items",
        "2",
        "--rate",
        "100",
    ]);
    wait_for_image(node.addr, "FEED", "SYM1", Duration::from_secs(20)).expect("the feed");
    // A subscriber with something queued shows in the per-connection queue figure.
    let (_, body) = scrape(&ws);
    let served: std::collections::BTreeSet<String> = parse(&body)
        .keys()
        .map(|k| k.split('{').next().unwrap().to_string())
        .collect();
    let asked: Vec<String> = dashboard_metric_names()
        .into_iter()
        // A node off the backbone has none of those: the backbone test checks them.
        .filter(|n| !n.starts_with("tickwire_backbone_"))
        .collect();
    assert!(asked.len() >= 6, "{asked:?}");
    for name in asked {
        // A family with no sample yet (no queue is long now) is still declared.
        let declared = body.contains(&format!("# TYPE {} ", name.trim_end_matches("_total")));
        assert!(
            served.contains(&name) || declared,
            "the dashboard asks for {name}, which the node does not serve:\n{body}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a backbone edge, `/metrics` carries the backbone's figures (the media driver's
/// bytes and NAKs, the edge's re-imaging), which grow as the source's data arrives.
#[test]
fn a_backbone_edges_metrics_carry_the_backbone_figures() {
    let ch = channel(61);
    let t = Duration::from_secs(20);
    let mut source = Node::start(&["--backbone", &ch, "--role", "source", "--name", "src"]);
    source.proc.wait_for_line("backbone: source on", t);
    let (mut edge, ws) = Node::start_ws(&["--backbone", &ch, "--role", "edge", "--name", "e"]);
    edge.proc.wait_for_line("backbone: edge on", t);
    let _feed = start_publisher(&source, "FEED", 5, 200, false);
    wait_for_image(edge.addr, "FEED", "SYM1", t).expect("the edge serves the source's item");
    // The figures are taken once a second: wait for them, and for bytes to show.
    let deadline = Instant::now() + t;
    let (m, body) = loop {
        let (_, body) = scrape(&ws);
        let m = parse(&body);
        let received = m
            .get("tickwire_backbone_bytes_total{direction=\"received\"}")
            .and_then(Value::as_f64);
        if received > Some(0.0) {
            break (m, body);
        }
        assert!(Instant::now() < deadline, "no backbone bytes:\n{body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(m["tickwire_backbone_role{role=\"edge\"}"], 1.0, "{body}");
    for name in [
        "tickwire_backbone_naks_total{direction=\"sent\"}",
        "tickwire_backbone_retransmits_total",
        "tickwire_backbone_reimages_total",
        "tickwire_backbone_sources_lost_total",
        "tickwire_backbone_link_restarts_total",
        "tickwire_backbone_authenticated",
        "tickwire_backbone_rejected_total",
    ] {
        assert!(m.contains_key(name), "{name} missing from\n{body}");
    }
    // The example dashboard's backbone panel asks for what an edge serves.
    let served: std::collections::BTreeSet<&str> =
        m.keys().map(|k| k.split('{').next().unwrap()).collect();
    let asked: Vec<String> = dashboard_metric_names()
        .into_iter()
        .filter(|n| n.starts_with("tickwire_backbone_"))
        .collect();
    assert!(!asked.is_empty());
    for name in asked {
        assert!(
            served.contains(name.as_str()),
            "the dashboard asks for {name}:\n{body}"
        );
    }
}

/// A source's files follow the slowest of its edges (`files_flow_control =
/// "slowest"`, Aeron's min flow control): its `/metrics` counts both edges in that
/// group. On the data's UDP endpoint Aeron gave the files the data's flow control
/// (max, no group), and a site off the CPU fell past what the source still resends.
#[test]
fn a_sources_files_follow_each_of_its_edges() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ch = channel(63);
    let t = Duration::from_secs(20);
    let cfg = |name: &str, files: &str| {
        TempConfig::new(
            &format!("metrics-files-edges-{name}"),
            &format!(
                "[node]\nname = \"{name}\"\n[files]\nservices = [\"FILES\"]\n{files} = \"{}\"\n",
                d.join(format!("{name}-{files}")).display()
            ),
        )
    };
    let src_cfg = cfg("src", "spool");
    let (mut src, src_http) = Node::start_ws(&[
        "--config",
        src_cfg.path(),
        "--backbone",
        &ch,
        "--role",
        "source",
    ]);
    src.proc.wait_for_line("backbone: source on", t);
    let edge_cfgs = [cfg("e1", "inbox"), cfg("e2", "inbox")];
    let _edges: Vec<Node> = edge_cfgs
        .iter()
        .map(|c| {
            let mut edge =
                Node::start(&["--config", c.path(), "--backbone", &ch, "--role", "edge"]);
            edge.proc.wait_for_line("backbone: edge on", t);
            edge
        })
        .collect();
    // The figures are taken once a second; the edges join the group with their first
    // status message for the files stream.
    let deadline = Instant::now() + t;
    loop {
        let body = scrape(&src_http).1;
        let edges = parse(&body)
            .get("tickwire_backbone_files_edges")
            .and_then(Value::as_f64);
        if edges == Some(2.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the source's files do not follow both edges ({edges:?}):\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// With `[files]`, `/metrics` shows the sender's chunks, queue and rate and the
/// receiver's files and chunks, as a file goes from one node to a site below it.
#[test]
fn the_files_figures_follow_a_file_from_sender_to_site() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let services = "[files]\nservices = [\"FILES\"]\n";
    let src_cfg = TempConfig::new(
        "metrics-files-src",
        &format!(
            "[node]\nname = \"src\"\n{services}spool = \"{}\"\nrate_mb_per_s = 7\n",
            d.join("spool").display()
        ),
    );
    let (src, src_http) = Node::start_ws(&["--config", src_cfg.path()]);
    let site_cfg = TempConfig::new(
        "metrics-files-site",
        &format!(
            "[node]\nname = \"site\"\n[upstream]\nnodes = [\"{}\"]\n{services}inbox = \"{}\"\n",
            src.addr,
            d.join("inbox").display()
        ),
    );
    let (_site, site_http) = Node::start_ws(&["--config", site_cfg.path()]);
    let body = scrape(&src_http).1;
    let m = parse(&body);
    assert_eq!(m["tickwire_files_queued"], 0.0, "{body}");
    assert_eq!(m["tickwire_files_rate_bytes_per_second"], 7e6, "{body}");
    // A file of 20 chunks of 16 KiB.
    let file = d.join("eod.csv");
    std::fs::write(&file, vec![7u8; 20 * 16 * 1024]).unwrap();
    let out = run(
        &[
            "files",
            "send",
            "--node",
            &src.addr_str(),
            "--to",
            "site",
            file.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", out.stderr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (sent, received) = loop {
        let (sent, received) = (parse(&scrape(&src_http).1), parse(&scrape(&site_http).1));
        let whole = received
            .get("tickwire_files_received_total{result=\"whole\"}")
            .and_then(Value::as_f64);
        let queued = sent.get("tickwire_files_queued").and_then(Value::as_f64);
        if whole == Some(1.0) && queued == Some(0.0) {
            break (sent, received);
        }
        assert!(
            Instant::now() < deadline,
            "the file did not show as sent and whole:\n{sent:?}\n{received:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let at_least = |m: &serde_json::Map<String, Value>, key: &str, n: f64| {
        let v = m.get(key).and_then(Value::as_f64);
        assert!(v >= Some(n), "{key} = {v:?}, want at least {n}: {m:?}");
    };
    at_least(&sent, "tickwire_files_chunks_sent_total", 20.0);
    at_least(
        &sent,
        "tickwire_files_sent_bytes_total",
        (20 * 16 * 1024) as f64,
    );
    at_least(&received, "tickwire_files_chunks_received_total", 20.0);
    at_least(
        &received,
        "tickwire_files_received_bytes_total",
        (20 * 16 * 1024) as f64,
    );
    assert_eq!(
        received["tickwire_files_received_total{result=\"failed\"}"], 0.0,
        "{received:?}"
    );
    // Each side shows only its own part.
    assert!(
        !received.contains_key("tickwire_files_queued"),
        "{received:?}"
    );
    assert!(
        !sent.contains_key("tickwire_files_received_total{result=\"whole\"}"),
        "{sent:?}"
    );
    // Both files threads run; nothing was dropped on the way, and the site, fed by an
    // upstream node, counts that link's queue too.
    for m in [&sent, &received] {
        assert_eq!(m["tickwire_files_thread_running"], 1.0, "{m:?}");
        assert_eq!(m["tickwire_files_thread_restarts_total"], 0.0, "{m:?}");
        for at in ["from_peers", "to_files_thread", "to_peers"] {
            let key = format!("tickwire_files_dropped_total{{at=\"{at}\"}}");
            assert_eq!(
                m.get(&key).and_then(Value::as_f64),
                Some(0.0),
                "{key}: {m:?}"
            );
        }
    }
    // The sender's spool (fsync batch by default) was synced before the file was said
    // queued, and nothing failed.
    at_least(&sent, "tickwire_files_spool_syncs_total", 2.0);
    assert_eq!(
        sent["tickwire_files_spool_sync_failures_total"], 0.0,
        "{sent:?}"
    );
    let from_upstream = "tickwire_files_dropped_total{at=\"from_upstream\"}";
    assert_eq!(received[from_upstream], 0.0, "{received:?}");
    assert!(!sent.contains_key(from_upstream), "{sent:?}");
}

/// `GET` of an HTTP API on loopback: the JSON it answers (asked in HTTP/1.0, so the
/// body comes whole, never chunked).
fn get_json(addr: &str, path_and_query: &str) -> Option<Value> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut all = String::new();
    s.read_to_string(&mut all).ok()?;
    let (_, body) = all.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// A real Prometheus server (Debian's) scrapes a node as it would in production, with
/// the project's alerting rules loaded: the target is up, the node's samples are
/// queryable, and every rule loads and evaluates without error.
#[test]
fn prometheus_itself_scrapes_the_node_and_loads_the_alert_rules() {
    let (_node, ws) = Node::start_ws(&[]);
    let dir = std::env::temp_dir().join(format!("tickwire-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/prometheus/alerts.yml")
        .canonicalize()
        .unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [\"{}\"]\n\
             scrape_configs:\n  - job_name: tickwire\n    static_configs:\n      - targets: [\"{ws}\"]\n",
            rules.display()
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port_for_tests());
    let mut cmd = prometheus_tool("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"));
    let mut prometheus = Proc::spawn_command(cmd, "prometheus".into());
    prometheus.wait_for_line(
        "Server is ready to receive web requests",
        Duration::from_secs(60),
    );

    let query = |q: &str| -> Vec<Value> {
        get_json(&web, &format!("/api/v1/query?query={q}"))
            .and_then(|v| v["data"]["result"].as_array().cloned())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // up{job="tickwire"} == 1 and the node's own samples are stored.
        let up = query("up%7Bjob%3D%22tickwire%22%7D");
        let build = query("tickwire_build_info");
        let cpu = query("process_cpu_seconds_total");
        if up.first().map(|s| s["value"][1].clone()) == Some(Value::from("1"))
            && !build.is_empty()
            && !cpu.is_empty()
        {
            assert_eq!(build[0]["metric"]["job"], "tickwire", "{build:?}");
            assert_eq!(
                build[0]["metric"]["version"],
                env!("CARGO_PKG_VERSION"),
                "{build:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not scrape the node: up {up:?}, build {build:?}; targets {:?}\n{}",
            get_json(&web, "/api/v1/targets"),
            prometheus.log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The rules loaded, and each has been evaluated without error.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rules = get_json(&web, "/api/v1/rules").unwrap_or(Value::Null);
        let all: Vec<&Value> = rules["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let evaluated = all.iter().all(|r| {
            r["health"] == "ok"
                && r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
        });
        if all.len() >= 10 && evaluated {
            assert!(all.iter().any(|r| r["name"] == "TickwireDown"), "{rules}");
            break;
        }
        assert!(
            all.iter().all(|r| r["health"] != "err"),
            "a rule failed to evaluate: {rules}"
        );
        assert!(
            Instant::now() < deadline,
            "the rules were not all evaluated: {rules}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    prometheus.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The alerting rules shipped in deploy/prometheus are valid and pass their own unit
/// tests (`promtool test rules`), which fire each alert on the series it watches.
#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ] {
        let out = prometheus_tool("promtool")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every metric the rules watch is one a node serves (or Prometheus's own `up`).
    let text = std::fs::read_to_string(dir.join("alerts.yml")).unwrap();
    let served = [
        "tickwire_dependency_up",
        "tickwire_service_up",
        "tickwire_subscribers_behind",
        "tickwire_disconnects_total",
        "tickwire_dropped_updates_total",
        "tickwire_backbone_naks_total",
        "tickwire_backbone_reimages_total",
        "tickwire_backbone_sources_lost_total",
        "tickwire_backbone_rejected_total",
        "tickwire_journal_failures_total",
        "tickwire_files_thread_restarts_total",
        "tickwire_files_thread_running",
        "tickwire_files_spool_sync_failures_total",
        "process_open_fds",
        "process_max_fds",
    ];
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("tickwire_") || word.starts_with("process_") {
            assert!(
                served.contains(&word),
                "alerts.yml watches {word}: add it here if a node serves it"
            );
        }
    }
}

/// `/healthz` answers while the event loop turns; `/readyz` (and `tickwire health
/// --ready`) says not ready, and why, until what the node depends on is there: here an
/// upstream node that starts later, then a journal that cannot be opened.
#[test]
fn readyz_waits_for_the_upstream_node_and_names_what_is_missing() {
    let upstream_port = free_port_for_tests();
    let upstream_addr = format!("127.0.0.1:{upstream_port}");
    let (_node, ws) = Node::start_ws(&["--upstream", &upstream_addr]);
    let (head, body) = get(&ws, "/healthz", None);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert_eq!(body, "ok\n");
    let (head, body) = get(&ws, "/readyz", None);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}\n{body}");
    assert!(
        body.starts_with("not ready\n")
            && body.contains(&format!(
                "upstream: not logged in: connecting ({upstream_addr})"
            )),
        "{body}"
    );
    assert!(
        metric(&ws, "tickwire_dependency_up{dependency=\"upstream\"}") == Some(0.0)
            && metric(&ws, "tickwire_ready") == Some(0.0),
        "{}",
        get(&ws, "/metrics", None).1
    );
    let asked = run(&["health", "--ws", &ws, "--ready"], Duration::from_secs(20));
    assert_eq!(asked.code(), Some(1), "{}{}", asked.stdout, asked.stderr);
    assert!(
        asked.stdout.contains("upstream: not logged in"),
        "{}",
        asked.stdout
    );
    assert!(asked.stderr.contains("answered 503"), "{}", asked.stderr);
    let alive = run(&["health", "--ws", &ws], Duration::from_secs(20));
    assert_eq!(alive.code(), Some(0), "{}{}", alive.stdout, alive.stderr);

    // The upstream node comes: the node logs in to it and becomes ready.
    let _upstream = Node::start(&["--listen", &upstream_addr]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (head, body) = get(&ws, "/readyz", None);
        if head.starts_with("HTTP/1.1 200 OK") {
            assert!(
                body.starts_with("ready\n") && body.contains("upstream: logged in to"),
                "{body}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {head}\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let asked = run(&["health", "--ws", &ws, "--ready"], Duration::from_secs(20));
    assert_eq!(asked.code(), Some(0), "{}{}", asked.stdout, asked.stderr);

    // A journal directory that is a file: the journal cannot open, so never ready.
    let file =
        std::env::temp_dir().join(format!("tickwire-readyz-not-a-dir-{}", std::process::id()));
    std::fs::write(&file, b"not a directory").unwrap();
    let cfg = TempConfig::new(
        "readyz-journal",
        &format!(
            "[posts]\nservices = [\"FEED\"]\n[journal]\ndir = \"{}\"\nservices = [\"FEED\"]\n",
            file.display()
        ),
    );
    let (_journaled, ws) = Node::start_ws(&["--config", cfg.path()]);
    let (head, body) = get(&ws, "/readyz", None);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}\n{body}");
    assert!(body.contains("journal: not writable: "), "{body}");
    assert_eq!(
        metric(&ws, "tickwire_dependency_up{dependency=\"journal\"}"),
        Some(0.0)
    );
    let _ = std::fs::remove_file(&file);
}

/// `tickwire health --config` reads `websocket.listen` as the node does (a host name
/// and port too; it was refused, so a container's health check always failed), and
/// `--timeout` takes any number of seconds without a panic.
#[test]
fn health_takes_the_address_from_a_config_as_the_node_reads_it() {
    let port = free_port_for_tests();
    let cfg = TempConfig::new(
        "health-host-name",
        &format!("[websocket]\nlisten = \"localhost:{port}\"\n"),
    );
    let mut node = Node::start(&["--config", cfg.path()]);
    node.proc
        .wait_for_line("WebSocket", Duration::from_secs(20));
    let asked = run(&["health", "--config", cfg.path()], Duration::from_secs(20));
    assert_eq!(asked.code(), Some(0), "{}{}", asked.stdout, asked.stderr);
    let huge = run(
        &["health", "--config", cfg.path(), "--timeout", "1e30"],
        Duration::from_secs(20),
    );
    assert_eq!(huge.code(), Some(0), "{}{}", huge.stdout, huge.stderr);
    let nan = run(
        &["health", "--ws", "127.0.0.1:1", "--timeout", "NaN"],
        Duration::from_secs(20),
    );
    assert_eq!(nan.code(), Some(1), "{}{}", nan.stdout, nan.stderr);
    assert!(nan.stderr.contains("--timeout"), "{}", nan.stderr);
}

/// A config file the node's flags complete or override is one `tickwire health
/// --config` takes too: the node runs with it, and its HTTP port is there to ask.
#[test]
fn health_takes_a_config_the_nodes_flags_override() {
    let port = free_port_for_tests();
    let cfg = TempConfig::new(
        "health-flags",
        &format!("[websocket]\nlisten = \"127.0.0.1:{port}\"\n[limits]\nheartbeat_ms = 50\n"),
    );
    let mut node = Node::start(&["--config", cfg.path(), "--heartbeat-ms", "1000"]);
    node.proc
        .wait_for_line("WebSocket", Duration::from_secs(20));
    let asked = run(&["health", "--config", cfg.path()], Duration::from_secs(20));
    assert_eq!(asked.code(), Some(0), "{}{}", asked.stdout, asked.stderr);
}

/// A directory of its own (`tickwire-TAG-PID`) holding a users file in which alice may
/// read FEED: the directory and the file.
fn alice_may_read_feed(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tickwire-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let users = dir.join("users.toml");
    let line = hash_line("pw", false);
    std::fs::write(
        &users,
        format!("[users.alice]\n{line}\nsubscribe = [\"FEED\"]\n"),
    )
    .unwrap();
    (dir, users)
}

/// `GET /items`: a service's item names for the dashboard's picker, in order, bounded,
/// by prefix; an unknown service is 404; a node with a users file lists none (403).
#[test]
fn items_lists_a_services_names_by_prefix_and_only_on_an_open_node() {
    let (node, ws) = Node::start_ws(&[]);
    let _feed = start_publisher(&node, "FEED", 12, 10, false);
    let items = |query: &str| -> (String, String) { get(&ws, &format!("/items?{query}"), None) };
    let (head, body) = items("service=FEED&prefix=SYM1");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains("Content-Type: application/json"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["items"],
        serde_json::json!(["SYM1", "SYM10", "SYM11"]),
        "{v}"
    );
    assert_eq!(v["more"], false, "{v}");
    let v: Value = serde_json::from_str(&items("service=FEED&limit=3").1).unwrap();
    assert_eq!(
        v["items"],
        serde_json::json!(["SYM0", "SYM1", "SYM10"]),
        "{v}"
    );
    assert_eq!(v["more"], true, "{v}");
    let (head, body) = items("service=NOPE");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}\n{body}");
    assert!(body.contains("no service \"NOPE\""), "{body}");

    let (dir, users) = alice_may_read_feed("items-users");
    let cfg = TempConfig::new(
        "items-users",
        &format!("[security]\nusers_file = \"{}\"\n", users.display()),
    );
    let (_guarded, ws) = Node::start_ws(&["--config", cfg.path()]);
    let (head, body) = get(&ws, "/items?service=FEED", None);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}\n{body}");
    assert!(body.contains("users file"), "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shared login token guards the node like a users file: its item names and figures
/// are not shown to whoever reaches the HTTP port without it (they were: /items listed
/// the names and /metrics the users of a node only token holders may log in to).
#[test]
fn a_node_with_a_login_token_lists_no_items_and_serves_metrics_only_with_the_token() {
    let dir = std::env::temp_dir().join(format!("tickwire-login-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.join("metrics.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let cfg = TempConfig::new(
        "login-token-http",
        &format!(
            "[websocket]\nmetrics_token_file = \"{}\"\n[security]\nlogin_token = \"shared-login-token\"\n",
            token_file.display()
        ),
    );
    let (_node, ws) = Node::start_ws(&["--config", cfg.path()]);
    let (head, body) = get(&ws, "/items?service=TICKWIRE", None);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}\n{body}");
    assert!(body.contains("login token"), "{body}");
    let (head, body) = get(&ws, "/metrics", None);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}\n{body}");
    assert!(!body.contains("tickwire_"), "{body}");
    let (head, body) = get_with_token(&ws, "/metrics", token);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET path` with `Authorization: Bearer token`: status line and headers, body.
fn get_with_token(addr: &str, path: &str, token: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.to_string(), body.to_string())
}

/// The figures name services and users: a node with a users file serves /metrics only
/// to a scraper holding the token of `[websocket] metrics_token_file` (anyone reaching
/// the port read them); /healthz stays open; a token file that is too short is refused
/// at start.
#[test]
fn a_node_with_a_users_file_serves_metrics_only_with_the_token() {
    let (dir, users) = alice_may_read_feed("metrics-token");
    let security = format!("[security]\nusers_file = \"{}\"\n", users.display());
    let no_token = TempConfig::new("metrics-no-token", &security);
    let (_node, ws) = Node::start_ws(&["--config", no_token.path()]);
    let (head, body) = get(&ws, "/metrics", None);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}\n{body}");
    assert!(body.contains("metrics_token_file"), "{body}");
    assert!(!body.contains("tickwire_"), "{body}");
    let (head, _) = get(&ws, "/healthz", None);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    let token = "0123456789abcdef0123456789abcdef";
    let token_file = dir.join("metrics.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let with_token = TempConfig::new(
        "metrics-token",
        &format!(
            "[websocket]\nmetrics_token_file = \"{}\"\n{security}",
            token_file.display()
        ),
    );
    let (_node, ws) = Node::start_ws(&["--config", with_token.path()]);
    for wrong in ["", "0123456789abcdef0123456789abcdeX"] {
        let (head, body) = get_with_token(&ws, "/metrics", wrong);
        assert!(
            head.starts_with("HTTP/1.1 403"),
            "{wrong:?}: {head}\n{body}"
        );
    }
    let (head, body) = get_with_token(&ws, "/metrics", token);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    assert!(body.contains("tickwire_ready 1"), "{body}");

    std::fs::write(&token_file, "short\n").unwrap();
    let out = run(
        &["node", "--config", with_token.path()],
        Duration::from_secs(20),
    );
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("websocket.metrics_token_file"),
        "{}",
        out.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tickwire health --timeout` bounds the whole request: a peer that answers a byte at
/// a time (each read within the time-out) does not stretch it.
#[test]
fn health_gives_up_on_an_answer_that_comes_a_byte_at_a_time() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.read(&mut [0u8; 4096]);
        // A good answer, a byte every 100 ms (about 3 s in all), until the reader goes.
        for b in b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n" {
            if s.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let asked = run(
        &["health", "--ws", &addr, "--timeout", "1"],
        Duration::from_secs(20),
    );
    assert_eq!(asked.code(), Some(1), "{}{}", asked.stdout, asked.stderr);
    assert!(
        asked.stderr.contains("no whole answer within 1 s"),
        "{}",
        asked.stderr
    );
    peer.join().unwrap();
}
