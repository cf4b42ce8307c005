//! The node's WebSocket framing (`tickwire_gateway::ws`) beside tungstenite's
//! (`WebSocketContext`, the sans-IO core of the crate most Rust WebSocket servers use),
//! on the two paths a node runs per message:
//!
//! - **write**: one update's JSON (the tr_json2 text of a 10-field MarketPrice update,
//!   about 300 bytes) framed into a connection's output buffer, 1,000 times;
//! - **read**: 1,000 masked client text frames (item requests of about 100 bytes) in one
//!   buffer, decoded into messages.
//!
//! `cargo bench -p tickwire-gateway --bench ws_framing` (docs/BENCHMARKS.md).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::VecDeque;
use std::hint::black_box;
use std::io::{self, Read, Write};
use tickwire_gateway::ws::{encode_text, Frame, FrameDecoder};
use tungstenite::protocol::{Message, Role, WebSocketContext};

const MESSAGES: usize = 1000;

fn update_json() -> String {
    r#"[{"ID":5,"Type":"Update","UpdateType":"Quote","DoNotConflate":false,"SeqNumber":4711,"Key":{"Service":"FEED","Name":"SYM123"},"Fields":{"BID":101.25,"ASK":101.3,"BIDSIZE":500,"ASKSIZE":700,"TRDPRC_1":101.27,"ACVOL_1":123456,"QUOTIM":"12:30:45.123","TIM_TRK_1":1795680694619000000,"DSPLY_NAME":"SYMBOL 123","NETCHNG_1":0.05}}]"#.to_string()
}

fn request_json(i: usize) -> String {
    format!(r#"[{{"ID":{i},"Key":{{"Name":"SYM{i}","Service":"FEED"}},"View":["BID","ASK"]}}]"#)
}

/// A client frame: FIN, text, masked, as browsers send them.
fn masked_text(out: &mut Vec<u8>, payload: &[u8], mask: [u8; 4]) {
    out.push(0x81);
    assert!(payload.len() < 126);
    out.push(0x80 | payload.len() as u8);
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
}

/// An in-memory socket for tungstenite: reads from `input`, writes to `output`.
struct Memory {
    input: VecDeque<u8>,
    output: Vec<u8>,
}

impl Read for Memory {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.input.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.input.read(buf)
    }
}

impl Write for Memory {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn write_path(c: &mut Criterion) {
    let json = update_json();
    let mut g = c.benchmark_group("ws_write_1000_updates");
    g.throughput(Throughput::Elements(MESSAGES as u64));
    g.bench_function("tickwire", |b| {
        let mut out = Vec::with_capacity(512 * MESSAGES);
        b.iter(|| {
            out.clear();
            for _ in 0..MESSAGES {
                encode_text(&mut out, json.as_bytes());
            }
            black_box(out.len())
        })
    });
    // A message owns its text: each connection's copy of the update.
    g.bench_function("tungstenite", |b| {
        tungstenite_writes(b, || Message::text(json.clone()))
    });
    // Its best case: the update's text encoded once and shared by reference count (no
    // copy per connection), as the node shares an update's encoding.
    let shared = tungstenite::Utf8Bytes::from(json.clone());
    g.bench_function("tungstenite_shared_bytes", |b| {
        tungstenite_writes(b, || Message::Text(shared.clone()))
    });
    g.finish();
}

/// `MESSAGES` messages from `message` written and flushed by a server context.
fn tungstenite_writes(b: &mut criterion::Bencher<'_>, message: impl Fn() -> Message) {
    let mut ctx = WebSocketContext::new(Role::Server, None);
    let mut socket = Memory {
        input: VecDeque::new(),
        output: Vec::with_capacity(512 * MESSAGES),
    };
    b.iter(|| {
        socket.output.clear();
        for _ in 0..MESSAGES {
            ctx.write(&mut socket, message()).unwrap();
        }
        ctx.flush(&mut socket).unwrap();
        black_box(socket.output.len())
    })
}

fn read_path(c: &mut Criterion) {
    let mut wire = Vec::new();
    for i in 0..MESSAGES {
        masked_text(
            &mut wire,
            request_json(i).as_bytes(),
            [0x12, 0x34, 0x56, i as u8],
        );
    }
    let mut g = c.benchmark_group("ws_read_1000_requests");
    g.throughput(Throughput::Elements(MESSAGES as u64));
    g.bench_function("tickwire", |b| {
        b.iter(|| {
            let mut decoder = FrameDecoder::new(1 << 20);
            decoder.extend(&wire);
            let mut n = 0;
            while let Some(frame) = decoder.next_frame().unwrap() {
                if let Frame::Text(t) = frame {
                    n += t.len();
                }
            }
            black_box(n)
        })
    });
    g.bench_function("tungstenite", |b| {
        b.iter(|| {
            let mut ctx = WebSocketContext::new(Role::Server, None);
            let mut socket = Memory {
                input: VecDeque::from(wire.clone()),
                output: Vec::new(),
            };
            let mut n = 0;
            loop {
                match ctx.read(&mut socket) {
                    Ok(Message::Text(t)) => n += t.len(),
                    Ok(_) => {}
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        break
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, write_path, read_path);
criterion_main!(benches);
