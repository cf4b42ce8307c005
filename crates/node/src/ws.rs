//! WebSocket connections of the node's event loop: the HTTP upgrade, WebSocket frames,
//! and the JSON session (`tickwire-gateway`) between the socket and the core.
//!
//! To the core a WebSocket client is a subscriber like any other: its JSON requests are
//! turned into the node's messages and handed to `Node::on_frame`, and what the core
//! queues for it is turned into JSON. That translation happens only while the socket
//! keeps up (less than [`WS_OUT_HIGH`] bytes waiting), so a slow WebSocket client's
//! backlog stays in the core's queue, where the slow-consumer policy applies.

use log::{debug, info};
use mio::net::TcpStream;
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{ConnId, Node};
use tickwire_gateway::session::JsonOut;
use tickwire_gateway::ws::{self, Frame, FrameDecoder};
use tickwire_gateway::{Session, SessionConfig, UpdateCache, SUBPROTOCOLS, WS_PATH};
use tickwire_proto::MessageIter;

/// The dashboard (quote board, session figures, latency histogram), built into the
/// binary: it works offline and talks to the node only through the WebSocket API.
const DASHBOARD: &str = include_str!("../assets/index.html");

/// JSON waiting for the socket above which no more is translated from the core.
const WS_OUT_HIGH: usize = 256 * 1024;

enum Phase {
    /// Reading the HTTP request head.
    Handshake(Vec<u8>),
    Open(Box<OpenWs>),
    /// An HTTP answer was sent (not an upgrade): close once it is written.
    Done,
}

/// An upgraded connection: its frame decoder and JSON session.
struct OpenWs {
    decoder: FrameDecoder,
    session: Session,
}

/// The WebSocket side of one connection.
pub struct WsConn {
    phase: Phase,
    /// Bytes for the socket (HTTP answer, WebSocket frames).
    pub out: Vec<u8>,
    /// Close the connection once `out` is written.
    pub close_after_flush: bool,
    json: JsonOut,
    to_node: Vec<u8>,
}

impl WsConn {
    pub fn new() -> Self {
        WsConn {
            phase: Phase::Handshake(Vec::new()),
            out: Vec::new(),
            close_after_flush: false,
            json: JsonOut::default(),
            to_node: Vec::new(),
        }
    }

    /// Bytes received from the socket.
    pub fn on_bytes(
        &mut self,
        bytes: &[u8],
        cfg: &Arc<SessionConfig>,
        core: &mut Node,
        id: ConnId,
        now: Instant,
        peer: &str,
    ) {
        if let Phase::Handshake(head) = &mut self.phase {
            head.extend_from_slice(bytes);
            match ws::parse_request(head) {
                Ok(None) => return,
                Ok(Some((req, used))) => {
                    let rest = head[used..].to_vec();
                    self.on_request(&req, cfg, peer);
                    if matches!(self.phase, Phase::Open(_)) && !rest.is_empty() {
                        self.on_frames(&rest, core, id, now);
                    }
                }
                Err(e) => {
                    self.out = ws::http_response(
                        "400 Bad Request",
                        "text/plain; charset=utf-8",
                        e.to_string().as_bytes(),
                    );
                    self.phase = Phase::Done;
                    self.close_after_flush = true;
                }
            }
            return;
        }
        self.on_frames(bytes, core, id, now);
    }

    fn on_request(&mut self, req: &ws::Request, cfg: &Arc<SessionConfig>, peer: &str) {
        let path = req.path.split('?').next().unwrap_or("");
        if path == WS_PATH && req.is_websocket() {
            let offered = req.tokens("sec-websocket-protocol");
            let Some(protocol) = SUBPROTOCOLS
                .iter()
                .find(|p| offered.iter().any(|o| o == *p))
            else {
                let text = format!(
                    "WebSocket subprotocol required: one of {} (offered: {})",
                    SUBPROTOCOLS.join(", "),
                    if offered.is_empty() {
                        "none".to_string()
                    } else {
                        offered.join(", ")
                    }
                );
                self.out = ws::http_response(
                    "400 Bad Request",
                    "text/plain; charset=utf-8",
                    text.as_bytes(),
                );
                self.phase = Phase::Done;
                self.close_after_flush = true;
                return;
            };
            let key = req.header("sec-websocket-key").unwrap_or("");
            self.out
                .extend_from_slice(ws::upgrade_response(key, protocol).as_bytes());
            info!("{peer}: WebSocket session ({protocol})");
            self.phase = Phase::Open(Box::new(OpenWs {
                decoder: FrameDecoder::new(cfg.max_msg_size),
                session: Session::new(cfg.clone()),
            }));
            return;
        }
        if req.method == "GET" && (path == "/" || path == "/index.html") {
            self.out =
                ws::http_response("200 OK", "text/html; charset=utf-8", DASHBOARD.as_bytes());
            self.phase = Phase::Done;
            self.close_after_flush = true;
            return;
        }
        let (status, body) = if req.method != "GET" {
            ("405 Method Not Allowed", "only GET is served".to_string())
        } else {
            (
                "404 Not Found",
                format!("not found: {path} (the WebSocket API is at {WS_PATH})"),
            )
        };
        self.out = ws::http_response(status, "text/plain; charset=utf-8", body.as_bytes());
        self.phase = Phase::Done;
        self.close_after_flush = true;
    }

    fn on_frames(&mut self, bytes: &[u8], core: &mut Node, id: ConnId, now: Instant) {
        let Phase::Open(open) = &mut self.phase else {
            return;
        };
        let OpenWs { decoder, session } = &mut **open;
        decoder.extend(bytes);
        loop {
            match decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(Frame::Text(text))) => {
                    session.on_client_text(&text, &mut self.to_node, &mut self.json);
                }
                Ok(Some(Frame::Binary(_))) => {
                    session.on_client_text(
                        "\"binary WebSocket frames are not supported: send JSON as text\"",
                        &mut self.to_node,
                        &mut self.json,
                    );
                }
                Ok(Some(Frame::TooLarge(len))) => session.on_too_large(len, &mut self.json),
                Ok(Some(Frame::Ping(p))) => ws::encode_pong(&mut self.json.frames, &p),
                Ok(Some(Frame::Pong(_))) => {}
                Ok(Some(Frame::Close(_))) => {
                    ws::encode_close(&mut self.json.frames, 1000, "bye");
                    self.close_after_flush = true;
                    break;
                }
                Err(e) => {
                    debug!("WebSocket connection {id}: {e}");
                    ws::encode_close(&mut self.json.frames, 1002, &e.to_string());
                    self.close_after_flush = true;
                    break;
                }
            }
            if !self.to_node.is_empty() {
                core.on_frame(id, &self.to_node, now);
                self.to_node.clear();
            }
        }
        if !self.to_node.is_empty() {
            core.on_frame(id, &self.to_node, now);
            self.to_node.clear();
        }
        self.json.take(&mut self.out);
        if session.finished && !self.close_after_flush {
            // Logged out: the connection ends once this is written.
            ws::encode_close(&mut self.out, 1000, "logged out");
            self.close_after_flush = true;
        }
    }

    /// Turns what the core queued for this connection into JSON, while the socket keeps
    /// up. Returns true if bytes were added to `out`.
    pub fn pull_from_core(&mut self, core: &mut Node, id: ConnId, cache: &mut UpdateCache) -> bool {
        let Phase::Open(open) = &mut self.phase else {
            // Before the upgrade (or after an HTTP answer) the core's bytes are dropped.
            if let Some(o) = core.output(id) {
                let n = o.sealed_bytes().len();
                o.consume(n);
            }
            return false;
        };
        let session = &mut open.session;
        let before = self.out.len();
        for _ in 0..64 {
            if self.out.len() >= WS_OUT_HIGH {
                break;
            }
            let Some(o) = core.output(id) else { break };
            let bytes = o.sealed_bytes();
            if bytes.is_empty() {
                if core.on_output_written(id) {
                    continue;
                }
                break;
            }
            let mut at = 0;
            while bytes.len() - at >= 4 {
                let len =
                    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                        as usize;
                let Some(payload) = bytes.get(at + 4..at + 4 + len) else {
                    break;
                };
                for m in MessageIter::new(payload).flatten() {
                    session.on_node_message(&m.message, cache, &mut self.json);
                }
                at += 4 + len;
            }
            o.consume(at);
            self.json.take(&mut self.out);
            core.on_output_written(id);
        }
        if session.finished && !self.close_after_flush {
            ws::encode_close(&mut self.out, 1000, "session ended");
            self.close_after_flush = true;
        }
        self.out.len() > before
    }

    /// Writes `out` to the socket. Returns Err if the socket failed.
    pub fn write(&mut self, stream: &mut TcpStream) -> std::io::Result<()> {
        while !self.out.is_empty() {
            match stream.write(&self.out) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Default for WsConn {
    fn default() -> Self {
        Self::new()
    }
}

/// Reads what the socket holds (up to `limit` bytes). Ok(true) if the peer closed.
pub fn read_into(stream: &mut TcpStream, buf: &mut Vec<u8>, limit: usize) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < limit {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}
