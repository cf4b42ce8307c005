//! The backbone with real processes: source and edge nodes, each with its own embedded
//! Aeron media driver, on UDP multicast over loopback (a group and port of their own
//! per test, so tests run side by side).

mod common;

use common::*;
use std::net::UdpSocket;
use std::time::Duration;
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{DataState, StreamState};

/// A multicast channel on loopback with a free port and a group of its own.
fn channel(group: u8) -> String {
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port");
    format!("aeron:udp?endpoint=239.20.30.{group}:{port}|interface=127.0.0.1")
}

fn backbone_node(channel: &str, role: &str, name: &str) -> Node {
    Node::start(&["--backbone", channel, "--role", role, "--name", name])
}

const T: Duration = Duration::from_secs(20);

#[test]
fn a_publisher_on_the_source_reaches_subscribers_on_two_edges() {
    let ch = channel(40);
    let source = backbone_node(&ch, "source", "src");
    let edge_a = backbone_node(&ch, "edge", "edge-a");
    let edge_b = backbone_node(&ch, "edge", "edge-b");
    let _feed = start_publisher(&source, "FEED", 20, 200, false);
    for edge in [&edge_a, &edge_b] {
        wait_for_image(edge.addr, "FEED", "SYM3", T)
            .unwrap_or_else(|e| panic!("{e}\n--- edge\n{}", edge.proc.log()));
    }
    // The command-line subscriber on an edge: a refresh, then updates.
    let out = run(
        &[
            "subscribe",
            "--node",
            &edge_b.addr_str(),
            "--json",
            "--count",
            "10",
            "--timeout",
            "15",
            "SYM7",
        ],
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["type"], "refresh", "{}", out.stdout);
    assert_eq!(lines[0]["state"]["data"], "ok", "{}", out.stdout);
    assert!(
        lines[1..].iter().all(|l| l["type"] == "update"),
        "{}",
        out.stdout
    );
    // Sequence numbers pass through from the publisher, in order, none missing.
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "sequence gap or disorder: {seqs:?}"
    );
    assert_serves(edge_a.addr, "FEED", "SYM11", 5);
}

#[test]
fn a_killed_source_makes_edge_streams_suspect_within_the_liveness_time_and_its_return_recovers_them(
) {
    let ch = channel(41);
    let source = backbone_node(&ch, "source", "src");
    let edge = backbone_node(&ch, "edge", "edge");
    let mut feed = start_publisher(&source, "FEED", 5, 100, false);
    wait_for_image(edge.addr, "FEED", "SYM0", T)
        .unwrap_or_else(|e| panic!("{e}\n--- edge\n{}", edge.proc.log()));
    let mut sub = subscriber(edge.addr);
    sub.subscribe("FEED", "SYM0", RequestOptions::default())
        .expect("subscribe");
    expect_event(&mut sub, T, "the refresh", |e| {
        matches!(e, Event::Refresh { .. })
    });
    expect_event(&mut sub, T, "an update", |e| {
        matches!(e, Event::Update { .. })
    });

    source.proc.signal(libc::SIGKILL);
    feed.kill();
    let killed = std::time::Instant::now();
    expect_event(&mut sub, Duration::from_secs(10), "open/suspect", |e| {
        matches!(e, Event::Status { state, .. }
            if state.stream == StreamState::Open && state.data == DataState::Suspect)
    });
    let took = killed.elapsed();
    // The liveness time is 1 s; the rest is slack for a loaded machine, and the
    // figure measured is in the log of this test.
    eprintln!("suspect {took:?} after the source was killed");
    assert!(took < Duration::from_secs(5), "suspect only after {took:?}");

    let source = backbone_node(&ch, "source", "src-again");
    let _feed = start_publisher(&source, "FEED", 5, 100, false);
    let refresh = expect_event(&mut sub, T, "a refresh from the new source", |e| {
        matches!(e, Event::Refresh { .. })
    });
    let Event::Refresh { state, .. } = refresh else {
        unreachable!()
    };
    assert_eq!(state.data, DataState::Ok);
    expect_event(&mut sub, T, "an update after recovery", |e| {
        matches!(e, Event::Update { .. })
    });
}

#[test]
fn bad_backbone_settings_are_refused_with_the_key_and_the_allowed_values() {
    let out = run(
        &[
            "node",
            "--backbone",
            "udp://239.1.1.1:4000",
            "--role",
            "edge",
        ],
        T,
    );
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("backbone.channel"), "{}", out.stderr);
    let ch = "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1";
    let out = run(&["node", "--backbone", ch, "--role", "middle"], T);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("backbone.role") && out.stderr.contains("source, edge, both"),
        "{}",
        out.stderr
    );
    let out = run(&["node", "--backbone", ch], T);
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("--role"), "{}", out.stderr);
}
