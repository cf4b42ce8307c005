//! File-transfer messages through the core: carried to the files thread, bounded,
//! refused by a node without files, sent back through the peer's queue.

use super::*;
use crate::FILES_IN_BYTES;

fn files_harness() -> Harness {
    Harness::with_config(CoreConfig {
        files: true,
        ..CoreConfig::default()
    })
}

#[test]
fn a_node_without_files_says_so_and_closes_the_connection() {
    let mut h = Harness::new(true);
    let c = h.login(Role::Subscriber);
    h.send(c, &[Message::Files(b"F\x01\x04")]);
    let got = h.recv(c);
    assert!(
        only_status(&got, code::PROTOCOL, "this node takes no files"),
        "{got:?}"
    );
}

#[test]
fn files_messages_reach_the_files_thread_only_after_login_and_within_a_bound() {
    let mut h = files_harness();
    let early = h.node.connect("x", h.now);
    h.send(early, &[Message::Files(b"before login")]);
    let c = h.login(Role::Subscriber);
    h.send(c, &[Message::Files(b"one"), Message::Files(b"two")]);
    let mut got = Vec::new();
    h.node.take_files(&mut got, &mut Vec::new());
    let bodies: Vec<(ConnId, &[u8])> = got.iter().map(|f| (f.conn, &f.body[..])).collect();
    assert_eq!(bodies, vec![(c, &b"one"[..]), (c, &b"two"[..])]);
    // A files thread that falls behind: past the bound, messages are dropped and
    // counted, never queued without end.
    let big = vec![0u8; 60_000];
    let fits = FILES_IN_BYTES / big.len();
    for _ in 0..fits + 5 {
        h.send(c, &[Message::Files(&big)]);
    }
    got.clear();
    h.node.take_files(&mut got, &mut Vec::new());
    assert_eq!(got.len(), fits);
    assert_eq!(h.node.stats().files_dropped, 5);
}

#[test]
fn files_go_out_through_the_peers_queue_and_wait_when_it_is_full() {
    let mut h = files_harness();
    let c = h.login(Role::Subscriber);
    assert!(h.node.send_files(c, b"offer", Some(1024)));
    let chunk = vec![7u8; 2000];
    assert!(h.node.send_files(c, &chunk, Some(1024)));
    // The peer has not read: past the room asked for, a chunk is not queued.
    assert!(!h.node.send_files(c, &chunk, Some(1024)));
    // An answer to a client is queued regardless (the queue's own bound holds).
    assert!(h.node.send_files(c, b"answer", None));
    let got = h.recv(c);
    assert_eq!(
        got,
        vec![
            Got::Files(b"offer".to_vec()),
            Got::Files(chunk.clone()),
            Got::Files(b"answer".to_vec())
        ]
    );
    assert!(!h.node.send_files(9999, b"x", None), "no such connection");
}
