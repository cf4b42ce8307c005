//! Floods on the backbone: forged Aeron SETUP frames, each naming a new session, and
//! data frames of sessions never set up cost a node bounded work; it goes on serving its subscribers, answering /metrics and
//! stopping on SIGTERM. Sent only inside a network namespace the test makes.

mod common;

use common::*;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};
use tickwire_client::{Event, RequestOptions};

const T: Duration = Duration::from_secs(20);
/// 20 times what froze a node before the guard (about 900 on loopback).
const FORGED: u32 = 20_000;

/// An Aeron SETUP frame (aeron_udp_protocol.h: 40 bytes, little-endian) announcing
/// `session` on `stream`.
fn setup_frame(session: i32, stream: i32) -> [u8; 40] {
    let mut f = [0u8; 40];
    let words: [i32; 10] = [
        40,
        0x0005_0000,
        0,
        session,
        stream,
        session,
        session,
        1 << 16,
        1408,
        0,
    ];
    for (i, w) in words.iter().enumerate() {
        f[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    f
}

/// An Aeron DATA frame (32-byte header, 8 bytes of payload) of `session` on `stream`,
/// a session never set up: the receiver asks its sender for a SETUP.
fn data_frame(session: i32, stream: i32) -> [u8; 40] {
    let mut f = [0u8; 40];
    let words: [i32; 6] = [40, 0x0001_c000, 0, session, stream, session];
    for (i, w) in words.iter().enumerate() {
        f[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    f
}

#[test]
fn a_flood_of_forged_setups_costs_bounded_work_and_the_nodes_keep_serving() {
    in_network_namespace(flood);
}

fn flood() {
    // An odd group: Aeron sends the data there and control to the group above.
    let port = free_udp_port();
    let ch = format!("aeron:udp?endpoint=239.20.30.75:{port}|interface=127.0.0.1");
    let (mut source, source_http) =
        Node::start_ws(&["--backbone", &ch, "--role", "source", "--name", "src"]);
    source.proc.wait_for_line("backbone: source on", T);
    let (mut edge, edge_http) =
        Node::start_ws(&["--backbone", &ch, "--role", "edge", "--name", "edge"]);
    edge.proc.wait_for_line("backbone: edge on", T);
    let _feed = start_publisher(&source, "FEED", 3, 200, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = subscriber(edge.addr);
    sub.subscribe("FEED", "SYM0", RequestOptions::default())
        .unwrap();
    expect_event(&mut sub, T, "the refresh", |e| {
        matches!(e, Event::Refresh { .. })
    });

    // The attacker: new sessions on the data stream (the edge's) and the request
    // stream (the source's), as fast as loopback takes them.
    // The namespace routes multicast over its loopback.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let group = SocketAddrV4::new(Ipv4Addr::new(239, 20, 30, 75), port);
    let mut rng = Rng::new(11);
    let started = Instant::now();
    let mut sent = 0;
    while sent < FORGED && started.elapsed() < T {
        let stream = if sent % 2 == 0 { 1001 } else { 1002 };
        let session = rng.next_u64() as i32;
        // Three SETUPs, then data of a session never set up.
        let frame = if sent % 4 == 3 {
            data_frame(session, stream)
        } else {
            setup_frame(session, stream)
        };
        if socket.send_to(&frame, group).is_ok() {
            sent += 1;
        }
    }
    assert_eq!(sent, FORGED);

    // Both nodes dropped what came past their allowance, and say so.
    for http in [&edge_http, &source_http] {
        wait_for_metric(
            http,
            "tickwire_backbone_new_sessions_refused_total",
            T,
            // The kernel may drop much of a burst this fast before the driver reads
            // it: 500 is ten seconds' allowance (50 a second), far below what arrives.
            |v| v > 500.0,
        );
    }
    // The subscriber's data goes on, in sequence.
    let mut last = None;
    for _ in 0..20 {
        match expect_event(&mut sub, T, "an update after the flood", |e| {
            matches!(e, Event::Update { .. })
        }) {
            Event::Update { seq, .. } => {
                if let Some(l) = last {
                    assert_eq!(seq, u32::wrapping_add(l, 1));
                }
                last = Some(seq);
            }
            _ => unreachable!(),
        }
    }
    // Both stop on SIGTERM.
    for (name, node) in [("edge", &mut edge), ("source", &mut source)] {
        node.proc.signal(libc::SIGTERM);
        assert!(
            node.proc.wait_exit(T).is_some(),
            "the {name} ignored SIGTERM\n{}",
            node.proc.log()
        );
    }
}
