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
fn what_a_gone_connection_sent_never_reaches_the_files_thread() {
    let mut h = files_harness();
    let gone = h.login(Role::Subscriber);
    let stays = h.login(Role::Subscriber);
    // The gone one filled the bound before it went.
    let big = vec![0u8; 60_000];
    for _ in 0..FILES_IN_BYTES / big.len() {
        h.send(gone, &[Message::Files(&big)]);
    }
    let now = h.now;
    h.node.on_disconnect(gone, now);
    // Its id is given to the next connection at once: what it sent must not reach
    // the files thread after its end, as if the new one had sent it; and it no longer
    // takes room.
    let next = h.login(Role::Subscriber);
    assert_eq!(next, gone, "the id is reused");
    h.send(stays, &[Message::Files(&big)]);
    assert_eq!(h.node.stats().files_dropped, 0);
    let (mut got, mut ended) = (Vec::new(), Vec::new());
    h.node.take_files(&mut got, &mut ended);
    let from: Vec<ConnId> = got.iter().map(|f| f.conn).collect();
    assert_eq!(from, vec![stays]);
    assert_eq!(ended, vec![gone]);
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
