//! A node played by a test: it reads a client's Login and welcomes it, then does what
//! the test makes it do (read nothing, flood the client...).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tickwire_proto::{FrameWriter, Message, Welcome};

/// Reads what the client sent first (its Login, perhaps more), waiting `patience` at
/// most, and answers with a Welcome that announces `heartbeat_ms`, 1 MiB frames, 100
/// streams and `max_output_bytes`, under `node_name`.
pub(crate) fn welcome_the_login(
    s: &mut TcpStream,
    patience: Duration,
    heartbeat_ms: u32,
    max_output_bytes: u32,
    node_name: &str,
) {
    s.set_read_timeout(Some(patience)).unwrap();
    let _ = s.read(&mut [0u8; 4096]);
    let mut w = FrameWriter::new(1 << 20);
    w.push(&Message::Welcome(Welcome {
        version: 1,
        heartbeat_ms,
        max_frame: 1 << 20,
        max_streams: 100,
        max_output_bytes,
        node_name,
    }))
    .unwrap();
    s.write_all(w.sealed_bytes()).unwrap();
}
