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

/// A forged data frame (32-byte header) of `session` at `offset` of term `term`, with
/// Aeron's fragment `flags` (0x80 BEGIN, 0x40 END, 0 a middle).
fn fragment_frame(
    session: i32,
    stream: i32,
    term: i32,
    offset: i32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(32 + payload.len());
    f.extend_from_slice(&(32 + payload.len() as i32).to_le_bytes());
    f.extend_from_slice(&[0, flags]);
    f.extend_from_slice(&1u16.to_le_bytes());
    for w in [offset, session, stream, term] {
        f.extend_from_slice(&w.to_le_bytes());
    }
    f.extend_from_slice(&0i64.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// The node's anonymous memory (heap), from /proc, in bytes.
fn anonymous_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("RssAnon in /proc/PID/status")
        * 1024
}

/// Messages are put back together from Aeron's fragments before anything is checked
/// (no key is needed to send datagrams): forged sessions that begin a message and never
/// end it, each with a term of 64 MiB, grew an edge's heap by what they sent (four such
/// sessions of 40 MiB took 164 MB, kept after they were gone). The node now holds at most
/// 128 KiB of an unfinished message.
#[test]
fn forged_sessions_sending_messages_that_never_end_do_not_grow_the_heap() {
    in_network_namespace(never_ending_messages);
}

fn never_ending_messages() {
    let port = free_udp_port();
    let config = TempConfig::new(
        "never-ending",
        &format!(
            "[backbone]\nrole = \"edge\"\nchannel = \"aeron:udp?endpoint=127.0.0.1:{port}\"\n\
             request_channel = \"aeron:udp?endpoint=127.0.0.1:{}\"\n",
            port + 1
        ),
    );
    let mut edge = Node::start(&["--config", config.path(), "--name", "edge"]);
    edge.proc.wait_for_line("backbone: edge on", T);
    let before = anonymous_memory(edge.proc.pid());
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let (mtu, term_length) = (1408usize, 64i32 << 20);
    let payload = vec![b'x'; mtu - 32];
    let per_session = 16 << 20;
    let started = Instant::now();
    for n in 0..3 {
        let session = 0x5eed_0000 + n;
        let term: i32 = 7;
        // SETUP until the edge's driver answers with a status message (type 3), whose
        // window says how far the forger may send.
        let mut setup = setup_frame(session, 1001).to_vec();
        setup[20..24].copy_from_slice(&term.to_le_bytes());
        setup[24..28].copy_from_slice(&term.to_le_bytes());
        setup[28..32].copy_from_slice(&term_length.to_le_bytes());
        setup[32..36].copy_from_slice(&(mtu as i32).to_le_bytes());
        let mut window_end = None;
        let mut buf = [0u8; 2048];
        while window_end.is_none() && started.elapsed() < T {
            socket.send_to(&setup, to).unwrap();
            while let Ok(n) = socket.recv(&mut buf) {
                let kind = u16::from_le_bytes([buf[6], buf[7]]);
                if n >= 28 && kind == 3 && buf[8..12] == session.to_le_bytes() {
                    let at = |i: usize| i32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
                    window_end = Some(at(20) + at(24));
                }
            }
        }
        let mut window_end = window_end.expect("the edge's driver never answered the SETUP");
        let (mut offset, mut sent) = (0i32, 0usize);
        while sent < per_session && started.elapsed() < 2 * T {
            while offset + mtu as i32 <= window_end && sent < per_session {
                let flags = if offset == 0 { 0x80 } else { 0 };
                let frame = fragment_frame(session, 1001, term, offset, flags, &payload);
                socket.send_to(&frame, to).unwrap();
                offset += mtu as i32;
                sent += payload.len();
            }
            // The edge's status messages (type 3) move the window on; its NAKs (type
            // 2) ask again for datagrams lost on the way, without which it waits.
            while let Ok(n) = socket.recv(&mut buf) {
                let kind = u16::from_le_bytes([buf[6], buf[7]]);
                if n < 28 || buf[8..12] != session.to_le_bytes() {
                    continue;
                }
                let at = |i: usize| i32::from_le_bytes(buf[i..i + 4].try_into().unwrap());
                if kind == 3 {
                    window_end = window_end.max(at(20) + at(24));
                } else if kind == 2 {
                    let (from, len) = (at(20), at(24));
                    let mut o = from - from % mtu as i32;
                    while o < from + len && o < offset {
                        let flags = if o == 0 { 0x80 } else { 0 };
                        let frame = fragment_frame(session, 1001, term, o, flags, &payload);
                        socket.send_to(&frame, to).unwrap();
                        o += mtu as i32;
                    }
                }
            }
        }
        assert!(sent >= per_session, "session {n}: only {sent} bytes sent");
    }
    // What was sent is read by the edge's driver as it comes (the window moved on):
    // the heap is looked at for a while after, as the node says what it dropped.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(2) {
        let grown = anonymous_memory(edge.proc.pid()).saturating_sub(before);
        assert!(
            grown < 16 << 20,
            "the edge's heap grew by {grown} bytes for 48 MiB of unfinished messages\n{}",
            edge.proc.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    edge.proc
        .wait_for_line("fragments dropped that made no message", T);
    edge.proc.signal(libc::SIGTERM);
    assert!(edge.proc.wait_exit(T).is_some(), "{}", edge.proc.log());
}
