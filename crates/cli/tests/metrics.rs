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
    ] {
        assert!(first.contains_key(name), "{name} missing from\n{body}");
    }
    assert!(first.keys().all(|k| k.starts_with("tickwire_")), "{body}");
    assert_eq!(first["tickwire_service_up{service=\"FEED\"}"], 1.0);
    assert_eq!(first["tickwire_posts_total{result=\"acked\"}"], 1.0);
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
        if grew("tickwire_updates_in_total") && grew("tickwire_updates_out_total") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the counters did not move:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The example Grafana dashboard asks only for metrics a node serves.
#[test]
fn the_example_grafana_dashboard_uses_only_metrics_the_node_serves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/grafana/tickwire-dashboard.json");
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
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
