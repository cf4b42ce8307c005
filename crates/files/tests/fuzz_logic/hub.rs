//! What the `files_hub` fuzz target does with an input, shared with the stable-Rust
//! corpus replay test: a node's hub (a real spool and inbox in a folder of their own,
//! fsync `batch`) takes a sequence of messages from peers, as a node's files thread
//! does, its deadlines run between them, and everything it sends must decode. A panic
//! is a bug; refusing or ignoring a message is fine.
//!
//! The input is frames of `peer u8`, `length u16` (big-endian) and that many bytes: the
//! peer's low 2 bits pick a client connection (0-2) or the upstream link (3), its bit
//! 2 the rights (all, or none), bit 3 that the connection goes after its message, and
//! its top 4 bits how far the clock moves on (10 ms steps).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tickwire_files::inbox::{Fsync, Inbox};
use tickwire_files::spool::Spool;
use tickwire_files::wire::FilesMessage;
use tickwire_files::{
    Hub, HubConfig, Peer, Receiver, ReceiverConfig, Rights, Sender, SenderConfig,
};

/// Messages taken from one input at most.
const MAX_MESSAGES: usize = 64;

/// A folder for this process's spool and inbox, emptied for each input.
fn folder() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tickwire-fuzz-hub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub(crate) fn files_hub(data: &[u8]) {
    let dir = folder();
    let t0 = Instant::now();
    let services = vec!["FILES".to_string(), "REF".to_string()];
    let Ok(spool) = Spool::open(&dir.join("spool"), Fsync::Batch) else {
        return;
    };
    let Ok(inbox) = Inbox::new(&dir.join("inbox"), Fsync::Batch) else {
        return;
    };
    let mut sc = SenderConfig::new("src");
    sc.chunk_size = 1024;
    let sender = Sender::new(sc, t0);
    let receiver = Receiver::new(ReceiverConfig::new("src", services.clone()), t0);
    let cfg = HubConfig::new("src", services);
    let mut hub = Hub::new(
        cfg,
        Some((sender, spool)),
        Some((receiver, inbox)),
        t0,
        0,
        7,
    );
    let mut now = t0;
    let mut rest = data;
    for _ in 0..MAX_MESSAGES {
        let [peer, a, b, tail @ ..] = rest else { break };
        let len = usize::from(u16::from_be_bytes([*a, *b])).min(tail.len());
        let (body, after) = tail.split_at(len);
        rest = after;
        let from = match peer & 3 {
            3 => Peer::Upstream,
            c => Peer::Conn(c as usize),
        };
        let rights = if peer & 4 != 0 {
            Rights::ALL
        } else {
            Rights::default()
        };
        hub.handle(from, "user", rights, body, now);
        if peer & 8 != 0 {
            if let Peer::Conn(c) = from {
                hub.handle_gone(c);
            }
        }
        now += Duration::from_millis(10 * u64::from(peer >> 4));
        drive(&mut hub, now);
    }
    // Whatever waits runs out.
    for step in [1, 10, 100, 1000, 10_000] {
        drive(&mut hub, now + Duration::from_millis(step));
    }
    hub.commit_pending(now + Duration::from_secs(20));
    drain(&mut hub);
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hub's deadlines and sending at `now`, bounded, and what it sends checked.
fn drive(hub: &mut Hub, now: Instant) {
    hub.handle_timeout(now);
    for _ in 0..1000 {
        if !hub.pump(now) {
            break;
        }
    }
    drain(hub);
}

fn drain(hub: &mut Hub) {
    let mut sent = 0;
    while let Some(o) = hub.poll_output() {
        // Empty: the end of a gone connection's messages, not a message.
        if !o.body.is_empty() {
            FilesMessage::decode(&o.body).expect("the hub's own message decodes");
        }
        sent += 1;
        assert!(sent < 1_000_000, "a hub keeps sending");
    }
    while hub.poll_event().is_some() {}
}
