//! WebSocket connections of the node's event loop: the socket side of
//! `tickwire_gateway::Connection` (the HTTP request, WebSocket frames and the JSON
//! session, without I/O), and what that connection asks of the node ([`NodeHost`]):
//! its messages into the core, session tokens, the node's own endpoints.
//!
//! The same port answers `POST /getToken` (a user's password for a session token, the
//! password checked on the node's verification thread, never here), and an upgrade
//! whose `AuthToken` cookie holds such a token is logged in as its user at once.

use crate::core_output::{drop_core_output, pull_frames, Translate};
use crate::tls::Transport;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{ConnId, Node, TokenAnswer, TokenRefusal};
use tickwire_gateway::connection::OUT_HIGH;
use tickwire_gateway::{token, Connection, Host, SessionConfig, UpdateCache};

/// The dashboard (quote board, session figures, latency histogram), built into the
/// binary: it works offline and talks to the node only through the WebSocket API.
const DASHBOARD: &str = include_str!("../assets/index.html");

/// The most a WebSocket connection may hold for its socket before a client that sends
/// more is closed: the core's JSON (up to [`OUT_HIGH`], plus one of its frames, taken
/// as up to 4 times larger as JSON) plus the subscriber's output bound
/// (`limits.max_output_bytes`) of the connection's own answers. Without it a client
/// sending pings and never reading grew the node by the size of its pings (110 MB of
/// pings, 106 MiB).
/// The machine's host name (and its first label, when it has several), lower-cased:
/// the names besides its addresses and `localhost` under which a page is the node's
/// own (its dashboard opened as `http://HOSTNAME:14080/`). Empty if it has none.
pub(crate) fn machine_names() -> Vec<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Vec::new();
    }
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let Ok(name) = std::str::from_utf8(&buf[..len]) else {
        return Vec::new();
    };
    let name = name.to_ascii_lowercase();
    let mut names = Vec::new();
    if let Some((first, _)) = name.split_once('.') {
        names.push(first.to_string());
    }
    if !name.is_empty() {
        names.push(name);
    }
    names
}

fn out_limit(core: &Node) -> usize {
    let l = &core.config().limits;
    OUT_HIGH + 4 * l.max_frame + l.max_output_bytes
}

/// The WebSocket side of one connection.
pub(crate) struct WsConn {
    /// The connection's protocol state; its `out` is what the socket is to take.
    pub(crate) conn: Connection,
    /// Our write side is shut down (`out` was written after `close_after_flush`).
    fin_sent: bool,
    /// `GET /metrics`, `/healthz`, `/readyz` or `/items` came: the caller writes the
    /// answer (it knows more than the core) into `conn.out`.
    pub(crate) node_request: Option<crate::node_http::NodeRequest>,
    /// The peer's address, for logs (asked of the socket once, at accept).
    peer: String,
}

/// What a WebSocket connection asks of the node: one connection of the core, now.
struct NodeHost<'a> {
    core: &'a mut Node,
    id: ConnId,
    now: Instant,
    peer: &'a str,
    node_request: &'a mut Option<crate::node_http::NodeRequest>,
}

impl Host for NodeHost<'_> {
    fn to_node(&mut self, messages: &[u8]) {
        self.core.on_frame(self.id, messages, self.now);
    }

    fn output_limit(&self) -> usize {
        out_limit(self.core)
    }

    fn tls(&self) -> bool {
        self.core.config().tls
    }

    fn present_session_token(&mut self, token: &str) -> Option<Result<String, String>> {
        self.core.present_session_token(self.id, token, self.now)
    }

    fn request_session_token(
        &mut self,
        user: &str,
        password: &str,
    ) -> Option<tickwire_gateway::TokenAnswer> {
        self.core
            .request_session_token(self.id, user, password, self.now)
            .map(http_answer)
    }

    fn node_endpoint(
        &mut self,
        target: &str,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> bool {
        *self.node_request = crate::node_http::NodeRequest::parse(target, accept, authorization);
        self.node_request.is_some()
    }

    fn dashboard(&self) -> &'static str {
        DASHBOARD
    }

    fn peer(&self) -> &str {
        self.peer
    }
}

/// The core's answer to a token request, as HTTP says it.
fn http_answer(answer: TokenAnswer) -> tickwire_gateway::TokenAnswer {
    match answer {
        TokenAnswer::Issued {
            token,
            user,
            lifetime,
        } => tickwire_gateway::TokenAnswer::Issued {
            token,
            user,
            lifetime_s: lifetime.as_secs(),
        },
        TokenAnswer::Refused { why, text } => {
            let status = match why {
                TokenRefusal::BadCredentials => "401 Unauthorized",
                TokenRefusal::NotIssued => "404 Not Found",
                TokenRefusal::NeedsTls => "403 Forbidden",
                TokenRefusal::Unavailable => "503 Service Unavailable",
            };
            tickwire_gateway::TokenAnswer::Refused(token::Refusal { status, text })
        }
    }
}

impl WsConn {
    /// A connection that accepts upgrades from browsers on the node's own origin only
    /// (and from programs that send no `Origin`).
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with_allowed_origins(&[], "peer".into())
    }

    /// As [`WsConn::with_origins`], allowing these origins besides the node's own
    /// (under its addresses and `localhost`).
    #[cfg(test)]
    pub(crate) fn with_allowed_origins(allowed_origins: &[String], peer: String) -> Self {
        let rules = tickwire_gateway::ws::OriginRules::new(allowed_origins, &[]);
        Self::with_origins(std::sync::Arc::new(rules), peer)
    }

    /// A connection that accepts upgrades from the pages `origins` allows
    /// (`websocket.allowed_origins`, the node's own names). `peer`: its address, for
    /// logs.
    pub(crate) fn with_origins(
        origins: std::sync::Arc<tickwire_gateway::ws::OriginRules>,
        peer: String,
    ) -> Self {
        WsConn {
            conn: Connection::new(origins),
            fin_sent: false,
            node_request: None,
            peer,
        }
    }

    /// Bytes received from the socket.
    pub(crate) fn on_bytes(
        &mut self,
        bytes: &[u8],
        cfg: &Arc<SessionConfig>,
        core: &mut Node,
        id: ConnId,
        now: Instant,
    ) {
        let mut host = NodeHost {
            core,
            id,
            now,
            peer: &self.peer,
            node_request: &mut self.node_request,
        };
        self.conn.handle_bytes(bytes, cfg, &mut host);
    }

    /// Turns what the core queued for this connection into JSON, while the socket keeps
    /// up. Returns true if bytes were added to `out`.
    pub(crate) fn pull_from_core(
        &mut self,
        core: &mut Node,
        id: ConnId,
        cache: &mut UpdateCache,
    ) -> bool {
        if self.conn.awaiting_token_answer() {
            drop_core_output(core, id);
            let Some(answer) = core.take_token_answer(id) else {
                return false;
            };
            let tls = core.config().tls;
            self.conn.handle_token_answer(http_answer(answer), tls);
            return true;
        }
        if !self.conn.takes_node_messages() {
            // Before the upgrade, after an HTTP answer, or with a close frame queued
            // (nothing may follow it): the core's bytes are dropped.
            drop_core_output(core, id);
            return false;
        }
        let before = self.conn.out.len();
        pull_frames(
            core,
            id,
            &mut WsTranslate {
                conn: &mut self.conn,
                cache,
            },
        );
        self.conn.end_node_messages();
        self.conn.out.len() > before
    }

    /// Writes `out` to the socket. Returns Err if the socket failed. Once all is
    /// written after `close_after_flush`, shuts down the write side: the peer reads
    /// EOF at once. (Waiting for a later writable event left an HTTP answer's
    /// connection open until the heartbeat timeout, as an idle socket gets none.)
    pub(crate) fn write(&mut self, stream: &mut Transport) -> std::io::Result<()> {
        let out = &mut self.conn.out;
        // What the socket took goes from the front once, not after each write (a
        // large backlog taken in pieces would be moved again at every piece).
        let mut written = 0;
        let result = loop {
            if written == out.len() {
                break Ok(());
            }
            match stream.write(&out[written..]) {
                Ok(0) => break Err(ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        out.drain(..written);
        result?;
        if !out.is_empty() {
            return Ok(());
        }
        if self.conn.close_after_flush && !self.fin_sent {
            // The peer closes in turn (read 0), which ends the connection. (TLS: after
            // a close_notify, once the socket has taken it.)
            stream.shutdown_write();
            self.fin_sent = true;
        }
        Ok(())
    }
}

/// The JSON session's side of [`pull_frames`]: whole frames of the core's queue while
/// the connection has room, each batch framed into its `out`.
struct WsTranslate<'a> {
    conn: &'a mut Connection,
    cache: &'a mut UpdateCache,
}

impl Translate for WsTranslate<'_> {
    fn has_room(&self) -> bool {
        self.conn.has_room()
    }

    fn message(&mut self, m: &tickwire_proto::Message<'_>) {
        self.conn.handle_node_message(m, self.cache);
    }

    fn end_batch(&mut self) {
        self.conn.frame_node_messages();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::net::TcpStream;
    use std::io::Read;
    use std::time::Duration;
    use tickwire_core::CoreConfig;

    fn cfg() -> Arc<SessionConfig> {
        Arc::new(SessionConfig::default())
    }

    /// A core with a small per-subscriber output bound, and one connection in it.
    fn core(max_output_bytes: usize) -> (Node, ConnId, Instant) {
        let now = Instant::now();
        let mut c = CoreConfig::default();
        c.limits.max_output_bytes = max_output_bytes;
        let mut core = Node::new(c, now);
        let id = core.connect("test", now);
        (core, id, now)
    }

    const UPGRADE: &[u8] = b"GET /WebSocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tr_json2\r\n\r\n";

    /// A masked client frame (payload under 126 bytes).
    fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// A client ping with a 125-byte payload (the largest a control frame holds).
    fn ping() -> Vec<u8> {
        client_frame(0x9, &(0..125u8).collect::<Vec<_>>())
    }

    /// The opcodes of the server frames in `out` (after the 101 answer).
    fn opcodes(out: &[u8]) -> Vec<u8> {
        let mut at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut ops = Vec::new();
        while at < out.len() {
            ops.push(out[at] & 0x0f);
            let (len, hdr) = match out[at + 1] {
                126 => (u16::from_be_bytes([out[at + 2], out[at + 3]]) as usize, 4),
                127 => panic!("no frame this large here"),
                n => (n as usize, 2),
            };
            at += hdr + len;
        }
        ops
    }

    /// The client's close (or a protocol error) is answered with a close frame that is
    /// the last frame: answers to what came before it are sent first.
    #[test]
    fn the_close_frame_is_the_last_frame() {
        for last in [
            client_frame(0x8, &1000u16.to_be_bytes()),
            vec![0x83, 0x80, 0, 0, 0, 0],
        ] {
            let (mut core, id, now) = core(1 << 20);
            let mut w = WsConn::new();
            w.on_bytes(UPGRADE, &cfg(), &mut core, id, now);
            let mut bytes = client_frame(0x1, b"not json");
            bytes.extend(client_frame(0x9, b"p"));
            bytes.extend(last);
            bytes.extend(client_frame(0x9, b"after the close"));
            w.on_bytes(&bytes, &cfg(), &mut core, id, now);
            assert_eq!(
                opcodes(&w.conn.out),
                [0xA, 0x1, 0x8],
                "pong, the error, close"
            );
        }
    }

    /// A peer that sends pings and never reads: the pongs it is owed are bounded.
    /// Past the bound it gets a close frame (1008, policy violation) saying why, and
    /// what it sends afterwards is not answered.
    #[test]
    fn a_peer_that_floods_pings_without_reading_is_closed_with_a_reason() {
        let max_out = 256 * 1024;
        let (mut core, id, now) = core(max_out);
        let mut w = WsConn::new();
        w.on_bytes(UPGRADE, &cfg(), &mut core, id, now);
        assert!(w.conn.out.starts_with(b"HTTP/1.1 101"));
        let batch: Vec<u8> = ping().repeat(2_000); // 262 KB, a read share
        for _ in 0..40 {
            w.on_bytes(&batch, &cfg(), &mut core, id, now);
        }
        let limit = OUT_HIGH + max_out + 4 * core.config().limits.max_frame;
        assert!(
            w.conn.out.len() <= limit + batch.len(),
            "{} bytes waiting for a peer that does not read (bound {limit})",
            w.conn.out.len()
        );
        assert!(w.conn.close_after_flush);
        // The last frame is the close: code 1008 and a reason.
        let close =
            w.conn.out.len() - w.conn.out.iter().rev().position(|&b| b == 0x88).unwrap() - 1;
        let frame = &w.conn.out[close..];
        assert_eq!(frame[1] as usize, frame.len() - 2, "{frame:?}");
        assert_eq!(u16::from_be_bytes([frame[2], frame[3]]), 1008);
        let reason = String::from_utf8_lossy(&frame[4..]);
        assert!(reason.contains("not read"), "{reason}");
        // Nothing is answered after the close frame.
        let n = w.conn.out.len();
        w.on_bytes(&batch, &cfg(), &mut core, id, now);
        assert_eq!(w.conn.out.len(), n);
    }

    /// A loopback pair: the node's side (non-blocking, mio) and the client's.
    fn pair() -> (Transport, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (Transport::Plain(TcpStream::from_std(server)), client)
    }

    /// What the client reads until EOF; panics if EOF does not come within the read
    /// timeout (5 s).
    fn read_to_eof(client: &mut std::net::TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        client
            .read_to_end(&mut got)
            .unwrap_or_else(|e| panic!("no EOF after {} bytes: {e}", got.len()));
        got
    }

    /// A plain HTTP answer says `Connection: close`: once it is written the node ends
    /// its side at once (the peer reads EOF without closing first), not at the
    /// heartbeat timeout.
    #[test]
    fn a_plain_http_answer_is_followed_by_eof() {
        for (request, status) in [
            (&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..], "200 OK"),
            (b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n", "404 Not Found"),
            (b"POST / HTTP/1.1\r\nHost: x\r\n\r\n", "405"),
            (b"GARBAGE\x00\r\n\r\n", "400 Bad Request"),
        ] {
            let (mut core, id, now) = core(1 << 20);
            let (mut server, mut client) = pair();
            let mut w = WsConn::new();
            w.on_bytes(request, &cfg(), &mut core, id, now);
            w.write(&mut server).unwrap();
            let got = read_to_eof(&mut client);
            let text = String::from_utf8_lossy(&got);
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status}")),
                "{text:.80}"
            );
            assert!(text.contains("Connection: close"));
        }
    }

    /// An upgrade from 127.0.0.1:15000 with this `Origin` header (none if `None`).
    fn upgrade_from(origin: Option<&str>) -> Vec<u8> {
        let origin = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
        format!(
            "GET /WebSocket HTTP/1.1\r\nHost: 127.0.0.1:15000\r\n{origin}Upgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tr_json2\r\n\r\n"
        )
        .into_bytes()
    }

    /// A browser page from another origin cannot open a WebSocket session: its upgrade
    /// gets 403, naming the config key, and the node ends the connection (EOF). Frames
    /// sent right behind the refused head are not read.
    #[test]
    fn an_upgrade_from_another_origin_gets_403_and_eof() {
        let (mut core, id, now) = core(1 << 20);
        let (mut server, mut client) = pair();
        let mut w =
            WsConn::with_allowed_origins(&["https://dash.example.com:8443".into()], "peer".into());
        let mut bytes = upgrade_from(Some("http://evil.example"));
        bytes.extend(client_frame(0x9, b"p"));
        w.on_bytes(&bytes, &cfg(), &mut core, id, now);
        assert!(w.conn.close_after_flush);
        assert!(
            !w.conn.takes_node_messages(),
            "an HTTP answer, not a session"
        );
        w.write(&mut server).unwrap();
        let got = read_to_eof(&mut client);
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
        assert!(text.contains("Connection: close"), "{text}");
        let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
        assert!(
            body.contains("http://evil.example")
                && body.contains("not allowed")
                && body.contains("websocket.allowed_origins"),
            "{body}"
        );
    }

    /// The node's own origin (the dashboard page), a listed origin, `*`, and no
    /// `Origin` at all (a program, not a browser) are upgraded.
    #[test]
    fn same_origin_listed_wildcard_and_no_origin_are_upgraded() {
        let listed = ["https://dash.example.com:8443".to_string()];
        for (allowed, origin) in [
            (&[][..], Some("http://127.0.0.1:15000")),
            (&[][..], None),
            (&listed[..], Some("https://dash.example.com:8443")),
            (&["*".to_string()][..], Some("http://evil.example")),
        ] {
            let (mut core, id, now) = core(1 << 20);
            let mut w = WsConn::with_allowed_origins(allowed, "peer".into());
            let bytes = upgrade_from(origin);
            w.on_bytes(&bytes, &cfg(), &mut core, id, now);
            assert!(
                w.conn
                    .out
                    .starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"),
                "{origin:?} with {allowed:?}: {}",
                String::from_utf8_lossy(&w.conn.out)
            );
            assert!(w.conn.takes_node_messages(), "upgraded");
        }
        // WsConn::new() allows the node's own origin only.
        let (mut core, id, now) = core(1 << 20);
        let mut w = WsConn::new();
        let bytes = upgrade_from(Some("https://dash.example.com:8443"));
        w.on_bytes(&bytes, &cfg(), &mut core, id, now);
        assert!(w.conn.out.starts_with(b"HTTP/1.1 403"));
    }

    /// Only the upgrade is checked: the dashboard page itself is served whatever the
    /// `Origin` (it is a plain page; its own upgrade is then same-origin).
    #[test]
    fn the_dashboard_page_is_served_to_any_origin() {
        let (mut core, id, now) = core(1 << 20);
        let mut w = WsConn::new();
        let req = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:15000\r\nOrigin: http://evil.example\r\n\r\n";
        w.on_bytes(req, &cfg(), &mut core, id, now);
        assert!(w.conn.out.starts_with(b"HTTP/1.1 200 OK\r\n"));
    }

    /// A browser's request for what the node says of itself (figures, items) under a
    /// name that is not the node's (DNS rebinding: a site's name pointed at the node's
    /// address) is refused; under the node's address, from a program, or for the page
    /// itself, it is served.
    #[test]
    fn a_browser_under_another_sites_name_reads_nothing_of_the_node() {
        let get = |path: &str, host: &str, browser: bool| {
            let (mut core, id, now) = core(1 << 20);
            let mut w = WsConn::new();
            let fetch = if browser {
                "Sec-Fetch-Site: same-origin\r\n"
            } else {
                ""
            };
            let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{fetch}\r\n");
            w.on_bytes(req.as_bytes(), &cfg(), &mut core, id, now);
            let head = String::from_utf8_lossy(&w.conn.out)
                .lines()
                .next()
                .map(str::to_owned);
            (w.node_request.is_some(), head.unwrap_or_default())
        };
        for path in ["/metrics", "/items?service=FEED", "/healthz"] {
            let (asked, head) = get(path, "evil.example:15000", true);
            assert!(!asked && head.starts_with("HTTP/1.1 403"), "{path}: {head}");
            for (host, browser) in [
                ("127.0.0.1:15000", true),
                ("localhost:15000", true),
                ("evil.example:15000", false),
            ] {
                assert!(get(path, host, browser).0, "{path} {host} {browser}");
            }
        }
        let (_, head) = get("/", "evil.example:15000", true);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }

    /// `[websocket] allowed_origins`: empty by default (the node's own origin only);
    /// entries must be `*` or an origin, and a bad one names the key and the form.
    #[test]
    fn allowed_origins_is_a_checked_config_key() {
        use crate::config::NodeConfig;
        assert!(NodeConfig::default().websocket.allowed_origins.is_empty());
        let cfg = NodeConfig::parse(
            "[websocket]\nallowed_origins = [\"https://dash.example.com:8443\", \"*\"]\n",
            "n.toml",
        )
        .unwrap();
        assert_eq!(
            cfg.websocket.allowed_origins,
            ["https://dash.example.com:8443", "*"]
        );
        for bad in ["https://dash.example.com/", "dash.example.com", "null"] {
            let text = format!("[websocket]\nallowed_origins = [\"*\", \"{bad}\"]\n");
            let e = NodeConfig::parse(&text, "n.toml").unwrap_err().to_string();
            assert!(
                e.contains("n.toml")
                    && e.contains("websocket.allowed_origins")
                    && e.contains(bad)
                    && e.contains("https://dash.example.com:8443"),
                "{e}"
            );
        }
    }

    /// A core with one user (alice, any service) and one connection from `peer`.
    fn secured_core(tls: bool, peer: &str) -> (Node, ConnId, Instant) {
        let now = Instant::now();
        let users = tickwire_core::Users::parse(
            &format!(
                "[users.alice]\ntoken_hash = \"sha256:{}\"\nsubscribe = [\"*\"]\n",
                "0".repeat(64)
            ),
            "users.toml",
        )
        .unwrap();
        let mut core = Node::new(
            CoreConfig {
                users: Some(Arc::new(users)),
                tls,
                ..CoreConfig::default()
            },
            now,
        );
        let id = core.connect(peer, now);
        (core, id, now)
    }

    fn token_post(body: &str, extra: &str) -> Vec<u8> {
        format!(
            "POST /getToken HTTP/1.1\r\nHost: 127.0.0.1:15000\r\n{extra}Content-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn text(out: &[u8]) -> String {
        String::from_utf8_lossy(out).into_owned()
    }

    /// `POST /getToken`: the form may come in pieces; the password goes to the
    /// verification thread (the event loop only queues it), the answer comes from the
    /// core, and the token it carries (a cookie) logs an upgrade in with no Login from
    /// the client: its login Refresh (ID -1) comes unasked.
    #[test]
    fn a_token_request_is_answered_once_checked_and_its_cookie_logs_an_upgrade_in() {
        let (mut core, id, now) = secured_core(true, "10.0.0.9:4000");
        let mut w = WsConn::new();
        let post = token_post("username=alice&password=p%40ss", "");
        let (a, b) = post.split_at(post.len() - 5);
        w.on_bytes(a, &cfg(), &mut core, id, now);
        w.on_bytes(b, &cfg(), &mut core, id, now);
        assert!(w.conn.out.is_empty() && !w.conn.close_after_flush);
        let mut reqs = Vec::new();
        core.take_auth_requests(&mut reqs);
        assert_eq!(reqs.len(), 1);
        assert_eq!(
            (reqs[0].user.as_str(), reqs[0].secret.as_str()),
            ("alice", "p@ss")
        );
        let mut cache = UpdateCache::default();
        assert!(
            !w.pull_from_core(&mut core, id, &mut cache),
            "not checked yet"
        );
        core.on_auth_result(id, reqs[0].ticket, Ok(()), now);
        assert!(w.pull_from_core(&mut core, id, &mut cache));
        let answer = text(&w.conn.out);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("; Secure"), "a TLS port's cookie: {answer}");
        assert!(answer.contains(r#""success":true"#), "{answer}");
        assert!(w.conn.close_after_flush);
        let token = answer
            .split("Set-Cookie: AuthToken=")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .expect("the token in a cookie")
            .to_string();

        for (cookie, want) in [
            (
                token.as_str(),
                r#""ID":-1,"Type":"Refresh","Domain":"Login","Key":{"Name":"alice""#,
            ),
            ("forged", r#""ID":-1,"Type":"Status","Domain":"Login""#),
        ] {
            let ws_id = core.connect("10.0.0.9:4001", now);
            let mut ws = WsConn::new();
            let upgrade = text(UPGRADE).replace(
                "\r\n\r\n",
                &format!("\r\nCookie: AuthToken={cookie};AuthPosition=10.0.0.9;applicationId=555;\r\n\r\n"),
            );
            ws.on_bytes(upgrade.as_bytes(), &cfg(), &mut core, ws_id, now);
            assert!(
                ws.conn.out.starts_with(b"HTTP/1.1 101"),
                "{}",
                text(&ws.conn.out)
            );
            ws.pull_from_core(&mut core, ws_id, &mut cache);
            let got = text(&ws.conn.out);
            assert!(got.contains(want), "{cookie}: {got}");
            if cookie == "forged" {
                assert!(got.contains("unknown or expired session token"), "{got}");
                assert!(
                    ws.conn.close_after_flush,
                    "a refused login ends the session"
                );
            } else {
                assert!(got.contains(r#""ApplicationId":"555""#), "{got}");
            }
        }
    }

    /// Token requests the node refuses: each answer is JSON with `success` false and a
    /// status that says why, and the connection ends.
    #[test]
    fn token_requests_are_refused_with_a_status_and_a_json_reason() {
        let big = "x".repeat(5000);
        let cases: Vec<(bool, &str, Vec<u8>, &str)> = vec![
            (
                true,
                "10.0.0.9:4000",
                b"GET /getToken HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                "405",
            ),
            (true, "10.0.0.9:4000", token_post(&big, ""), "413"),
            (
                true,
                "10.0.0.9:4000",
                token_post(
                    "username=alice&password=x",
                    "Origin: http://evil.example\r\n",
                ),
                "403",
            ),
            (true, "10.0.0.9:4000", token_post("user=alice", ""), "400"),
            // Plain HTTP from another host: the password would cross the network in
            // cleartext.
            (
                false,
                "10.0.0.9:4000",
                token_post("username=alice&password=x", ""),
                "403",
            ),
        ];
        for (tls, peer, request, status) in cases {
            let (mut core, id, now) = secured_core(tls, peer);
            let mut w = WsConn::new();
            w.on_bytes(&request, &cfg(), &mut core, id, now);
            let got = text(&w.conn.out);
            assert!(got.starts_with(&format!("HTTP/1.1 {status}")), "{got}");
            assert!(
                got.contains(r#""message":"#) && got.contains(r#""success":false"#),
                "{got}"
            );
            assert!(w.conn.close_after_flush);
            let mut reqs = Vec::new();
            core.take_auth_requests(&mut reqs);
            assert!(reqs.is_empty(), "nothing to check: {got}");
        }
        // A wrong password: 401 once the check says so.
        let (mut core, id, now) = secured_core(false, "127.0.0.1:4000");
        let mut w = WsConn::new();
        w.on_bytes(
            &token_post("username=alice&password=x", ""),
            &cfg(),
            &mut core,
            id,
            now,
        );
        let mut reqs = Vec::new();
        core.take_auth_requests(&mut reqs);
        core.on_auth_result(
            id,
            reqs[0].ticket,
            Err("login rejected for user \"alice\": unknown user or wrong secret".into()),
            now,
        );
        w.pull_from_core(&mut core, id, &mut UpdateCache::default());
        let got = text(&w.conn.out);
        assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
        assert!(
            got.contains("wrong secret") && !got.contains("Set-Cookie"),
            "{got}"
        );
    }

    /// A request head over the limit is refused with 431 even when it arrives whole
    /// in one read, and the connection ends.
    #[test]
    fn a_head_too_large_gets_431_and_eof() {
        let (mut core, id, now) = core(1 << 20);
        let (mut server, mut client) = pair();
        let mut w = WsConn::new();
        let head = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
            "a".repeat(100_000)
        );
        w.on_bytes(head.as_bytes(), &cfg(), &mut core, id, now);
        w.write(&mut server).unwrap();
        let got = read_to_eof(&mut client);
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{text:.80}"
        );
    }
}
