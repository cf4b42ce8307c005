//! `GET /metrics` on the node's HTTP port while data flows, read by Prometheus's own
//! Python parser (prometheus_client's OpenMetrics parser): the format is real, the
//! names are those the contract gives, and the figures move.

mod common;

use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// `GET /metrics`: status line, headers, body.
fn scrape(addr: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the HTTP port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.to_string(), body.to_string())
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
    let mut child = std::process::Command::new(python_with_websocket_client())
        .args(["-c", code])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
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
        "tickwire_bytes_in_total",
        "tickwire_bytes_out_total",
        "tickwire_service_items{service=\"FEED\"}",
        "tickwire_service_updates_in_total{service=\"FEED\"}",
        "tickwire_service_updates_out_total{service=\"FEED\"}",
        "tickwire_update_latency_seconds_count",
        "tickwire_update_latency_seconds_bucket{le=\"0.001\"}",
        "tickwire_update_latency_seconds_bucket{le=\"+Inf\"}",
    ] {
        assert!(first.contains_key(name), "{name} missing from\n{body}");
    }
    assert!(first.keys().all(|k| k.starts_with("tickwire_")), "{body}");
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
        "tickwire_bytes_in_total",
        "tickwire_bytes_out_total",
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
                    .starts_with("tickwire_connection_queued_bytes_high_water{")
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
                if word.starts_with("tickwire_") {
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
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port");
    let ch = format!("aeron:udp?endpoint=239.20.30.61:{port}|interface=127.0.0.1");
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
