//! One connection on the WebSocket port, without I/O: the HTTP request (an upgrade, a
//! token request, the dashboard, a node endpoint such as `/metrics`), then WebSocket
//! frames and the JSON session.
//!
//! The node feeds it the socket's bytes and the core's messages and writes [`out`] to
//! the socket; what it needs of the node (handing the client's messages to the core,
//! session tokens, the node's own endpoints) it asks through [`Host`]. To the core a
//! WebSocket client is a subscriber like any other.
//!
//! What the connection generates itself (pongs, answers to the client's JSON) is
//! bounded: a client that keeps sending while it leaves more than
//! [`Host::output_limit`] bytes unread is sent a close frame (1008) saying so, and not
//! answered again. The core's messages are translated only while less than
//! [`OUT_HIGH`] bytes wait ([`Connection::has_room`]), so a slow client's backlog stays
//! in the core's queue, where the slow-consumer policy applies.
//!
//! [`out`]: Connection::out

use crate::session::JsonOut;
use crate::token::{self, TOKEN_COOKIE, TOKEN_PATH};
use crate::ws::{self, Frame, FrameDecoder};
use crate::{Session, SessionConfig, UpdateCache, SUBPROTOCOLS, WS_PATH};
use log::{debug, info, warn};
use std::sync::Arc;
use tickwire_proto::Message;

/// JSON waiting for the socket above which no more is translated from the core.
pub const OUT_HIGH: usize = 256 * 1024;

/// What a connection asks of the node it belongs to.
pub trait Host {
    /// The node's own messages the client's JSON became (one frame's payload), for the
    /// core.
    fn to_node(&mut self, messages: &[u8]);
    /// The most the connection may hold for its socket before a client that sends more
    /// (and does not read) is closed.
    fn output_limit(&self) -> usize;
    /// Whether the node's ports speak TLS (a token's cookie is then `Secure`).
    fn tls(&self) -> bool;
    /// A session token from an upgrade's cookie: `None` if the node takes no tokens;
    /// its user, or why it is refused.
    fn present_session_token(&mut self, token: &str) -> Option<Result<String, String>>;
    /// A token request's credentials: the answer now, or `None` until the node has
    /// checked them ([`Connection::handle_token_answer`]).
    fn request_session_token(&mut self, user: &str, password: &str) -> Option<TokenAnswer>;
    /// A GET of one of the node's own endpoints (`/metrics`...), with its `Accept` and
    /// `Authorization` headers: true if it is one; the node then puts its answer in
    /// [`Connection::out`].
    fn node_endpoint(
        &mut self,
        target: &str,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> bool;
    /// The dashboard page, served at `/`.
    fn dashboard(&self) -> &'static str;
    /// The client's address, for the log.
    fn peer(&self) -> &str;
}

/// The node's answer to a token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenAnswer {
    /// A session token for `user`, valid `lifetime_s` seconds.
    Issued {
        /// The token.
        token: String,
        /// Whose it is.
        user: String,
        /// How long it is valid.
        lifetime_s: u64,
    },
    /// Refused: the HTTP status line's code and reason, and why.
    Refused(token::Refusal),
}

enum Phase {
    /// Reading the HTTP request head.
    Handshake(Vec<u8>),
    /// `POST /getToken`: reading its body, `len` bytes (at most `token::MAX_BODY`).
    TokenBody {
        body: Vec<u8>,
        len: usize,
    },
    /// `POST /getToken`: its password is being checked; the answer comes from the node.
    TokenPending,
    Open(Box<OpenWs>),
    /// An HTTP answer was sent (not an upgrade): close once it is written.
    Done,
}

/// An upgraded connection: its frame decoder and JSON session.
struct OpenWs {
    decoder: FrameDecoder,
    session: Session,
}

/// One connection on the WebSocket port.
pub struct Connection {
    phase: Phase,
    /// Bytes for the socket (HTTP answer, WebSocket frames).
    pub out: Vec<u8>,
    /// Close the connection once `out` is written. Set, nothing more is read from the
    /// client or added to `out` (bar the close frame already there).
    pub close_after_flush: bool,
    json: JsonOut,
    to_node: Vec<u8>,
    /// Which browser pages may upgrade (`websocket.allowed_origins`, the node's names).
    origins: Arc<ws::OriginRules>,
}

impl Connection {
    /// A connection that accepts upgrades from pages `origins` allows (and from
    /// programs that send no `Origin`).
    pub fn new(origins: Arc<ws::OriginRules>) -> Self {
        Connection {
            phase: Phase::Handshake(Vec::new()),
            out: Vec::new(),
            close_after_flush: false,
            json: JsonOut::default(),
            to_node: Vec::new(),
            origins,
        }
    }

    /// Bytes received from the socket.
    pub fn handle_bytes(&mut self, bytes: &[u8], cfg: &Arc<SessionConfig>, host: &mut dyn Host) {
        if self.close_after_flush {
            // Closing: what the client sends now is dropped, not answered.
            return;
        }
        match &mut self.phase {
            Phase::TokenBody { body, len } => {
                let take = (*len - body.len()).min(bytes.len());
                body.extend_from_slice(&bytes[..take]);
                self.token_body_read(host);
                return;
            }
            // One request per connection: what follows the form is not read.
            Phase::TokenPending | Phase::Done => return,
            Phase::Handshake(_) | Phase::Open(_) => {}
        }
        if let Phase::Handshake(head) = &mut self.phase {
            head.extend_from_slice(bytes);
            match ws::parse_request(head) {
                Ok(None) => return,
                Ok(Some((req, used))) => {
                    let rest = head[used..].to_vec();
                    self.on_request(&req, &rest, cfg, host);
                    if matches!(self.phase, Phase::Open(_)) && !rest.is_empty() {
                        self.on_frames(&rest, host);
                    }
                }
                Err(e) => {
                    // 431 for a head over the limit, else 400.
                    debug!("{}: HTTP request refused: {e}", host.peer());
                    let text = e.to_string();
                    self.answer(e.http_status(), text.as_bytes());
                }
            }
            return;
        }
        self.on_frames(bytes, host);
    }

    /// Waiting for the node's answer to a token request.
    pub fn awaiting_token_answer(&self) -> bool {
        matches!(self.phase, Phase::TokenPending)
    }

    /// The HTTP answer to a checked token request (`tls`: the node's ports speak TLS,
    /// the token's cookie is then `Secure`).
    pub fn handle_token_answer(&mut self, answer: TokenAnswer, tls: bool) {
        match answer {
            TokenAnswer::Issued {
                token,
                user,
                lifetime_s,
            } => {
                let answer = token::issued_response(&token, &user, lifetime_s, tls);
                self.out.extend_from_slice(&answer);
                self.phase = Phase::Done;
                self.close_after_flush = true;
            }
            TokenAnswer::Refused(r) => self.token_refused(&r),
        }
    }

    /// Whether the core's messages are translated for this connection: upgraded and not
    /// closing (otherwise the node drops them).
    pub fn takes_node_messages(&self) -> bool {
        matches!(self.phase, Phase::Open(_)) && !self.close_after_flush
    }

    /// Whether more of the core's messages may be translated now.
    pub fn has_room(&self) -> bool {
        self.out.len() + self.json.len() < OUT_HIGH
    }

    /// One of the core's messages for the client.
    pub fn handle_node_message(&mut self, m: &Message<'_>, cache: &mut UpdateCache) {
        if let Phase::Open(open) = &mut self.phase {
            open.session.on_node_message(m, cache, &mut self.json);
        }
    }

    /// After a batch of the core's messages: their JSON is framed into `out`.
    pub fn frame_node_messages(&mut self) {
        self.json.take(&mut self.out);
    }

    /// After the core's messages of a turn: a session the node ended is closed.
    pub fn end_node_messages(&mut self) {
        if let Phase::Open(open) = &self.phase {
            if open.session.finished && !self.close_after_flush {
                ws::encode_close(&mut self.out, 1000, "session ended");
                self.close_after_flush = true;
            }
        }
    }

    /// An HTTP answer; the connection closes once it is written.
    fn answer(&mut self, status: &str, text: &[u8]) {
        self.out = ws::http_response(status, "text/plain; charset=utf-8", text);
        self.phase = Phase::Done;
        self.close_after_flush = true;
    }

    fn on_request(
        &mut self,
        req: &ws::Request,
        rest: &[u8],
        cfg: &Arc<SessionConfig>,
        host: &mut dyn Host,
    ) {
        let path = req.path.split('?').next().unwrap_or("");
        if path == TOKEN_PATH {
            self.on_token_request(req, rest, host);
            return;
        }
        if path == WS_PATH && req.is_websocket() {
            self.on_upgrade(req, cfg, host);
            return;
        }
        // The dashboard page is the same under any name; what the node says of itself
        // (its figures, its items) is not for a page under another site's name.
        let page = path == "/" || path == "/index.html";
        if req.method == "GET" && !page && self.origins.foreign_browser_host(req) {
            let named = req.header("host").unwrap_or("");
            warn!(
                "{}: GET {path} from a browser under the name {named:?} refused (403): not one of the node's names",
                host.peer()
            );
            let text = format!(
                "{named} is not one of this node's names (its address, localhost, its host \
                 name, or a host of websocket.allowed_origins): a page under it may not read \
                 the node"
            );
            self.answer("403 Forbidden", text.as_bytes());
            return;
        }
        if req.method == "GET"
            && host.node_endpoint(&req.path, req.header("accept"), req.header("authorization"))
        {
            self.phase = Phase::Done;
            self.close_after_flush = true;
            return;
        }
        if req.method == "GET" && (path == "/" || path == "/index.html") {
            let page = host.dashboard();
            self.out = ws::http_response("200 OK", "text/html; charset=utf-8", page.as_bytes());
            self.phase = Phase::Done;
            self.close_after_flush = true;
            return;
        }
        let (status, body) = if req.method != "GET" {
            (
                "405 Method Not Allowed",
                format!("only GET is served here (and POST at {TOKEN_PATH})"),
            )
        } else {
            (
                "404 Not Found",
                format!("not found: {path} (the WebSocket API is at {WS_PATH})"),
            )
        };
        self.answer(status, body.as_bytes());
    }

    /// An upgrade: refused (with the reason), or the session starts, logged in at once
    /// when its cookie holds a session token.
    fn on_upgrade(&mut self, req: &ws::Request, cfg: &Arc<SessionConfig>, host: &mut dyn Host) {
        let peer = host.peer().to_string();
        if let Some((status, text)) = req.upgrade_refusal() {
            warn!("{peer}: WebSocket upgrade refused ({status}): {text}");
            // RFC 6455 4.4: every refusal says which version the node speaks.
            self.out = ws::http_response_with(
                status,
                "text/plain; charset=utf-8",
                &[("Sec-WebSocket-Version", "13")],
                text.as_bytes(),
            );
            self.phase = Phase::Done;
            self.close_after_flush = true;
            return;
        }
        if !ws::check_origin(req, &self.origins).allowed() {
            // A page from another site, in a browser that can reach the node: it must
            // not get a session (browsers let any page open WebSockets anywhere and
            // send its origin; programs send none, or their own).
            let origin = said_origin(req);
            warn!(
                "{peer}: WebSocket upgrade refused (403): origin {origin:?} is not the node's own and not in websocket.allowed_origins"
            );
            let text = format!(
                "WebSocket origin not allowed: {origin} (not this node's own origin, which \
                 is its address, localhost or its host name; to allow it, list it in \
                 websocket.allowed_origins in the node's config)"
            );
            self.answer("403 Forbidden", text.as_bytes());
            return;
        }
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
            self.answer("400 Bad Request", text.as_bytes());
            return;
        };
        let key = req.header("sec-websocket-key").unwrap_or("");
        self.out
            .extend_from_slice(ws::upgrade_response(key, protocol).as_bytes());
        info!("{peer}: WebSocket session ({protocol})");
        let mut session = Session::new(cfg.clone());
        if let Some(token) = token::cookie(req, TOKEN_COOKIE) {
            // A session token from /getToken: the node logs the client in as its user
            // right away (the published examples send no Login). A token the node does
            // not know gets that login refused, with the reason.
            if let Some(user) = host.present_session_token(token) {
                let position =
                    token::cookie(req, "AuthPosition").or_else(|| token::cookie(req, "position"));
                session.cookie_login(
                    user.as_deref().unwrap_or(""),
                    token::cookie(req, "applicationId"),
                    position,
                    &mut self.to_node,
                );
                host.to_node(&self.to_node);
                self.to_node.clear();
            }
        }
        self.phase = Phase::Open(Box::new(OpenWs {
            decoder: FrameDecoder::new(cfg.max_msg_size),
            session,
        }));
    }

    /// `POST /getToken`: refused at once (wrong method, another site's page, no or too
    /// large a body), or its body is read and its password checked.
    fn on_token_request(&mut self, req: &ws::Request, rest: &[u8], host: &mut dyn Host) {
        let refused = |status, text: String| token::Refusal { status, text };
        if req.method != "POST" {
            let text = format!("{TOKEN_PATH} takes a POST of a form with username and password");
            self.token_refused(&refused("405 Method Not Allowed", text));
            return;
        }
        if !ws::check_origin(req, &self.origins).allowed() {
            // A page of another site posting a form (browsers send no preflight for
            // that): it could log the browser in as someone else.
            let origin = said_origin(req);
            warn!("{}: token request refused (403): origin {origin:?} is not the node's own and not in websocket.allowed_origins", host.peer());
            let text = format!(
                "origin not allowed: {origin} (not this node's own origin, which is its \
                 address, localhost or its host name; to allow it, list it in \
                 websocket.allowed_origins in the node's config)"
            );
            self.token_refused(&refused("403 Forbidden", text));
            return;
        }
        let len = match token::body_length(req) {
            Ok(len) => len,
            Err(r) => {
                debug!(
                    "{}: token request refused: {} {}",
                    host.peer(),
                    r.status,
                    r.text
                );
                self.token_refused(&r);
                return;
            }
        };
        let body = rest[..len.min(rest.len())].to_vec();
        if body.len() < len
            && req
                .header("expect")
                .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
        {
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        self.phase = Phase::TokenBody { body, len };
        self.token_body_read(host);
    }

    /// Once the whole form is in, hands its credentials to the node.
    fn token_body_read(&mut self, host: &mut dyn Host) {
        let Phase::TokenBody { body, len } = &mut self.phase else {
            return;
        };
        if body.len() < *len {
            return;
        }
        let credentials = token::credentials(body);
        // The password is no longer needed here.
        body.fill(0);
        self.phase = Phase::TokenPending;
        match credentials {
            Err(r) => self.token_refused(&r),
            Ok((user, password)) => {
                if let Some(answer) = host.request_session_token(&user, &password) {
                    self.handle_token_answer(answer, host.tls());
                }
            }
        }
    }

    fn token_refused(&mut self, r: &token::Refusal) {
        self.out.extend_from_slice(&token::refused_response(r));
        self.phase = Phase::Done;
        self.close_after_flush = true;
    }

    fn on_frames(&mut self, bytes: &[u8], host: &mut dyn Host) {
        let limit = host.output_limit();
        let Phase::Open(open) = &mut self.phase else {
            return;
        };
        let OpenWs { decoder, session } = &mut **open;
        decoder.extend(bytes);
        loop {
            let waiting = self.out.len() + self.json.len();
            if waiting > limit {
                // The client sends but does not read what it is sent: answering it
                // (pongs above all) would grow this buffer without bound. Drop the
                // answers not queued yet and close, saying why.
                warn!(
                    "{}: WebSocket client sends but does not read ({waiting} bytes waiting, limit {limit}): closing it (1008)",
                    host.peer()
                );
                self.json = JsonOut::default();
                self.to_node.clear();
                ws::encode_close(
                    &mut self.out,
                    1008,
                    &format!("output not read: {waiting} bytes waiting, limit {limit}"),
                );
                self.close_after_flush = true;
                return;
            }
            match decoder.next_frame() {
                Ok(None) => break,
                Ok(Some(Frame::Text(text))) => {
                    let room = limit.saturating_sub(self.out.len() + self.json.len());
                    session.on_client_text_within(&text, &mut self.to_node, &mut self.json, room);
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
                    // Answers so far go before the close frame: nothing may follow it.
                    self.json.end_frame();
                    ws::encode_close(&mut self.json.frames, 1000, "bye");
                    self.close_after_flush = true;
                    break;
                }
                Err(e) => {
                    debug!("{}: WebSocket: {e}", host.peer());
                    self.json.end_frame();
                    ws::encode_close(&mut self.json.frames, e.close_code(), &e.to_string());
                    self.close_after_flush = true;
                    break;
                }
            }
            if !self.to_node.is_empty() {
                host.to_node(&self.to_node);
                self.to_node.clear();
            }
        }
        if !self.to_node.is_empty() {
            host.to_node(&self.to_node);
            self.to_node.clear();
        }
        self.json.take(&mut self.out);
        if session.finished && !self.close_after_flush {
            // Logged out: the connection ends once this is written.
            ws::encode_close(&mut self.out, 1000, "logged out");
            self.close_after_flush = true;
        }
    }
}

/// A request's `Origin` as a refusal and the node's log say it: cut at 256 bytes (an
/// origin is a scheme, a host name and a port), since each refused request logs a line
/// and a peer sending 15 KB origins made each one that long.
fn said_origin(req: &ws::Request) -> &str {
    ws::prefix_within(req.header("origin").unwrap_or(""), 256)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_proto::MessageIter;

    /// A node as the connection sees it: what it was handed and asked, recorded.
    #[derive(Default)]
    struct Recorder {
        messages: Vec<u8>,
        tokens_presented: Vec<String>,
        token_requests: Vec<(String, String)>,
        endpoints: Vec<String>,
        answer_now: Option<TokenAnswer>,
    }

    impl Host for Recorder {
        fn to_node(&mut self, messages: &[u8]) {
            self.messages.extend_from_slice(messages);
        }
        fn output_limit(&self) -> usize {
            64 * 1024
        }
        fn tls(&self) -> bool {
            false
        }
        fn present_session_token(&mut self, token: &str) -> Option<Result<String, String>> {
            self.tokens_presented.push(token.to_string());
            Some(Ok("alice".into()))
        }
        fn request_session_token(&mut self, user: &str, password: &str) -> Option<TokenAnswer> {
            self.token_requests.push((user.into(), password.into()));
            self.answer_now.take()
        }
        fn node_endpoint(&mut self, target: &str, _accept: Option<&str>, _: Option<&str>) -> bool {
            self.endpoints.push(target.to_string());
            target == "/metrics"
        }
        fn dashboard(&self) -> &'static str {
            "<html>dashboard</html>"
        }
        fn peer(&self) -> &str {
            "127.0.0.1:1"
        }
    }

    fn cfg() -> Arc<SessionConfig> {
        Arc::new(SessionConfig::default())
    }

    fn upgrade(extra: &str) -> Vec<u8> {
        format!(
            "GET /WebSocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Protocol: tr_json2\r\n{extra}\r\n"
        )
        .into_bytes()
    }

    /// A masked text frame, as a client sends it.
    fn text_frame(text: &str) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut f = vec![0x81, 0x80 | text.len() as u8];
        f.extend_from_slice(&mask);
        f.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    /// The node's messages the host was handed, by kind.
    fn kinds(bytes: &[u8]) -> Vec<String> {
        MessageIter::new(bytes)
            .map(|m| {
                let text = format!("{:?}", m.expect("a well-formed message").message);
                text.split(['(', ' ']).next().unwrap_or("").to_string()
            })
            .collect()
    }

    /// What a refused request sent is said cut short, in the answer and in the node's
    /// log line alike (a client repeating an upgrade with an origin of 15 KB wrote
    /// 4 MB a second of warnings).
    #[test]
    fn a_refusal_says_a_long_origin_or_version_cut_short() {
        let origin = format!("http://{}.example", "a".repeat(15_000));
        let token_request = format!(
            "POST /getToken HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\nContent-Length: 0\r\n\r\n"
        );
        for request in [
            upgrade(&format!("Origin: {origin}\r\n")),
            String::from_utf8(upgrade(""))
                .unwrap()
                .replace("Version: 13", &format!("Version: {}", "9".repeat(15_000)))
                .into_bytes(),
            token_request.into_bytes(),
        ] {
            let mut c = Connection::new(Default::default());
            c.handle_bytes(&request, &cfg(), &mut Recorder::default());
            assert!(c.out.starts_with(b"HTTP/1.1 4"), "{:?}", &c.out[..40]);
            assert!(c.out.len() < 1024, "an answer of {} bytes", c.out.len());
        }
    }

    #[test]
    fn an_upgrade_and_a_login_reach_the_node_as_its_own_messages() {
        let mut host = Recorder::default();
        let mut c = Connection::new(Default::default());
        let mut bytes = upgrade("");
        // The Login in the same segment as the upgrade: read as a frame after it.
        bytes.extend(text_frame(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"bob"}}"#,
        ));
        c.handle_bytes(&bytes, &cfg(), &mut host);
        assert!(c.out.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
        assert!(c.takes_node_messages());
        assert_eq!(kinds(&host.messages), ["Login"]);
    }

    #[test]
    fn a_token_cookie_logs_the_upgrade_in_as_the_nodes_user() {
        let mut host = Recorder::default();
        let mut c = Connection::new(Default::default());
        c.handle_bytes(&upgrade("Cookie: AuthToken=t0k\r\n"), &cfg(), &mut host);
        assert_eq!(host.tokens_presented, ["t0k"]);
        assert_eq!(
            kinds(&host.messages),
            ["Login"],
            "logged in without a Login of its own"
        );
    }

    #[test]
    fn a_token_request_is_answered_when_the_node_has_checked_it() {
        let mut host = Recorder::default();
        let mut c = Connection::new(Default::default());
        let body = "username=alice&password=s3cret";
        let req = format!(
            "POST /getToken HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        c.handle_bytes(req.as_bytes(), &cfg(), &mut host);
        assert_eq!(host.token_requests, [("alice".into(), "s3cret".into())]);
        assert!(c.awaiting_token_answer() && c.out.is_empty());
        let issued = TokenAnswer::Issued {
            token: "abc".into(),
            user: "alice".into(),
            lifetime_s: 60,
        };
        c.handle_token_answer(issued, false);
        let text = String::from_utf8_lossy(&c.out).to_string();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("AuthToken=abc"), "{text}");
        assert!(c.close_after_flush && !c.awaiting_token_answer());
    }

    #[test]
    fn gets_go_to_the_nodes_endpoints_the_dashboard_or_404() {
        let get = |path: &str| {
            let mut host = Recorder::default();
            let mut c = Connection::new(Default::default());
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            c.handle_bytes(req.as_bytes(), &cfg(), &mut host);
            assert!(c.close_after_flush && !c.takes_node_messages());
            (String::from_utf8_lossy(&c.out).to_string(), host.endpoints)
        };
        let (out, asked) = get("/metrics");
        assert!(out.is_empty(), "the node writes that answer: {out}");
        assert_eq!(asked, ["/metrics"]);
        let (out, _) = get("/");
        assert!(out.starts_with("HTTP/1.1 200 OK") && out.ends_with("<html>dashboard</html>"));
        let (out, _) = get("/nothing");
        assert!(out.starts_with("HTTP/1.1 404"), "{out}");
    }

    /// The close code of a connection failed for the client's frames (RFC 6455
    /// 7.4.1): 1007 for text that is not UTF-8 (a message, or a close frame's reason),
    /// 1002 for other breaches of the protocol.
    #[test]
    fn text_that_is_not_utf8_is_closed_with_1007_other_breaches_with_1002() {
        let masked = |opcode: u8, payload: &[u8]| {
            let mask = [1u8, 2, 3, 4];
            let mut f = vec![0x80 | opcode, 0x80 | payload.len() as u8];
            f.extend_from_slice(&mask);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            f
        };
        for (frame, code) in [
            (masked(0x1, &[b'"', 0xff, b'"']), 1007u16),
            (masked(0x8, &[0x03, 0xe8, 0xc3, 0x28]), 1007),
            (masked(0x8, &1005u16.to_be_bytes()), 1002),
            (vec![0x83, 0x80, 0, 0, 0, 0], 1002),
        ] {
            let mut c = Connection::new(Default::default());
            let mut host = Recorder::default();
            c.handle_bytes(&upgrade(""), &cfg(), &mut host);
            let head = c.out.len();
            c.handle_bytes(&frame, &cfg(), &mut host);
            let close = &c.out[head..];
            assert_eq!(close[0], 0x88, "{close:?}");
            assert_eq!(u16::from_be_bytes([close[2], close[3]]), code, "{frame:?}");
            assert!(c.close_after_flush);
        }
    }

    #[test]
    fn a_client_that_sends_pings_and_never_reads_is_closed_at_the_hosts_limit() {
        let mut host = Recorder::default();
        let mut c = Connection::new(Default::default());
        c.handle_bytes(&upgrade(""), &cfg(), &mut host);
        let mask = [9u8, 9, 9, 9];
        let mut ping = vec![0x89, 0x80 | 100];
        ping.extend_from_slice(&mask);
        ping.extend([0u8; 100].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        let batch: Vec<u8> = ping
            .iter()
            .copied()
            .cycle()
            .take(ping.len() * 100)
            .collect();
        for _ in 0..20 {
            c.handle_bytes(&batch, &cfg(), &mut host);
        }
        assert!(c.close_after_flush, "closed once over the limit");
        assert!(
            c.out.len() <= host.output_limit() + batch.len(),
            "{}",
            c.out.len()
        );
        // The last frame is the close, code 1008, saying why.
        let close = c.out.len() - c.out.iter().rev().position(|&b| b == 0x88).unwrap() - 1;
        let frame = &c.out[close..];
        assert_eq!(&frame[2..4], 1008u16.to_be_bytes(), "{frame:?}");
        assert!(String::from_utf8_lossy(&frame[4..]).contains("output not read"));
    }
}
