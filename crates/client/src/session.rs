//! The client side of one connection, without I/O: login, the Welcome, framing both
//! ways and heartbeats. Bytes and `now` go in; bytes to send, frames and the next
//! deadline ([`Connection::poll_timeout`]) come out. Whoever owns the socket (the
//! blocking [`crate::Subscriber`] / [`crate::Publisher`], a node's upstream link in its
//! event loop) moves the bytes.

use crate::ClientError;
use std::time::{Duration, Instant};
use tickwire_proto::frame::{FrameReader, FrameWriter};
use tickwire_proto::{
    code, Login, Message, MessageIter, Role, SlowConsumerPolicy, StreamState, PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
};

/// What a client says in its Login.
#[derive(Debug, Clone)]
pub struct LoginOptions {
    /// Publisher or subscriber.
    pub role: Role,
    /// The application name the login gives.
    pub application: String,
    /// The user to log in as.
    pub user: String,
    /// Its secret (a password or a token).
    pub token: String,
    /// The slow-consumer policy to ask the node for (`None`: the node's configured one).
    pub slow_consumer: Option<SlowConsumerPolicy>,
    /// How long the node has to answer the Login with its Welcome.
    pub welcome_timeout: Duration,
}

/// What the node said in its welcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The protocol version the node speaks.
    pub version: u16,
    /// The node's heartbeat interval.
    pub heartbeat: Duration,
    /// The largest frame the node takes.
    pub max_frame: usize,
    /// Streams the node lets one connection open.
    pub max_streams: u32,
    /// Bytes the node queues for this connection at most.
    pub max_output_bytes: u32,
    /// The node's name.
    pub node_name: String,
}

/// The protocol state of one connection to a node.
pub struct Connection {
    reader: FrameReader,
    writer: FrameWriter,
    /// `None` until the Welcome arrives.
    session: Option<Session>,
    welcome_deadline: Instant,
    last_rx: Instant,
    last_tx: Instant,
    /// The rest of the Welcome's frame (the directory, for a subscriber), returned by
    /// the next [`Connection::next_frame`] when `after_welcome_ready`.
    after_welcome: Vec<u8>,
    after_welcome_ready: bool,
    /// Input read beyond this waits for the caller to take frames.
    pub max_buffered: usize,
    /// Output the node may leave unread before the connection fails
    /// ([`Connection::check_output`]).
    pub max_unread_output: usize,
    /// Output this side queued of its own accord and not yet written (a publisher's
    /// images sent again after a reconnect): allowed beyond `max_unread_output`.
    owed: usize,
}

/// Output a node may leave unread (256 MiB) by default. Far above what a node that
/// reads leaves waiting (an interactive publisher answering 100,000 requests at once
/// with 1 KB images queues 100 MB, which the node reads as it comes); a node, or a peer
/// posing as one, that asks for image after image and reads none would otherwise make
/// the client hold every one of them.
pub const MAX_UNREAD_OUTPUT: usize = 256 << 20;

/// Input and output buffers keep up to this much memory once empty: what one large
/// frame, a burst, or every image sent again after a reconnect made them grow to is
/// released, not held for the life of the connection.
const KEEP_BUFFER: usize = 256 * 1024;

/// Frame payloads go up to this size before the Welcome says the node's maximum.
const FIRST_MAX_FRAME: usize = tickwire_proto::DEFAULT_MAX_FRAME;

impl Connection {
    /// A new connection: the Login is queued for sending.
    pub fn new(login: &LoginOptions, now: Instant) -> Result<Connection, ClientError> {
        let mut writer = FrameWriter::new(FIRST_MAX_FRAME);
        writer.push(&Message::Login(Login {
            version_min: PROTOCOL_VERSION_MIN,
            version_max: PROTOCOL_VERSION_MAX,
            role: login.role,
            application: &login.application,
            user: &login.user,
            token: &login.token,
            slow_consumer: login.slow_consumer,
        }))?;
        Ok(Connection {
            reader: FrameReader::new(FIRST_MAX_FRAME),
            writer,
            session: None,
            welcome_deadline: now + login.welcome_timeout,
            last_rx: now,
            last_tx: now,
            after_welcome: Vec::new(),
            after_welcome_ready: false,
            max_buffered: 4 * 1024 * 1024,
            max_unread_output: MAX_UNREAD_OUTPUT,
            owed: 0,
        })
    }

    /// What the node said in its Welcome; `None` before it.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Messages to send are queued here (sealed into frames by [`Connection::transmit`]).
    pub fn writer(&mut self) -> &mut FrameWriter {
        &mut self.writer
    }

    /// Bytes ready to go to the node.
    pub fn transmit(&mut self) -> &[u8] {
        self.writer.sealed_bytes()
    }

    /// `n` bytes of [`Connection::transmit`] were written.
    pub fn sent(&mut self, n: usize, now: Instant) {
        if n > 0 {
            self.writer.consume(n);
            self.owed = self.owed.saturating_sub(n);
            self.writer.shrink_if_idle(KEEP_BUFFER);
            self.last_tx = now;
        }
    }

    /// Output queued and not yet written.
    pub fn pending_output(&self) -> usize {
        self.writer.pending_len()
    }

    /// `bytes` more of the output queued are this side's own (see [`Connection::check_output`]).
    pub(crate) fn owe(&mut self, bytes: usize) {
        self.owed = self.owed.saturating_add(bytes);
    }

    /// An error when more output waits than `max_unread_output`: what the node asked
    /// for (images, answers to its pings) piles up because it does not read it. What
    /// this side queued of its own accord ([`Connection::owe`]) is allowed on top.
    pub fn check_output(&self) -> Result<(), ClientError> {
        let waiting = self.writer.pending_len();
        if waiting > self.max_unread_output.saturating_add(self.owed) {
            return Err(ClientError::Disconnected(format!(
                "the node does not read what this connection sends: {waiting} bytes wait \
                 (at most {}, images sent again after a reconnect included)",
                self.max_unread_output.saturating_add(self.owed)
            )));
        }
        Ok(())
    }

    /// Room to read into (zero-copy input): fill it, then call [`Connection::received`].
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        self.reader.spare(min)
    }

    /// `n` bytes were read into [`Connection::spare`].
    pub fn received(&mut self, n: usize, now: Instant) {
        if n > 0 {
            self.reader.filled(n);
            self.last_rx = now;
        }
    }

    /// Copies received bytes in.
    pub fn receive(&mut self, bytes: &[u8], now: Instant) {
        let n = bytes.len();
        self.spare(n)[..n].copy_from_slice(bytes);
        self.received(n, now)
    }

    /// Input received and not yet taken as frames.
    pub fn buffered(&self) -> usize {
        self.reader.buffered()
    }

    /// Whether the caller should read more now (or first take the frames it has). Up
    /// to `max_buffered`, and always up to a whole frame of the largest size the node
    /// announced: a frame larger than `max_buffered` would otherwise never complete.
    pub fn wants_input(&self) -> bool {
        let whole_frame = self.reader.max_frame() + tickwire_proto::FRAME_HEADER_LEN;
        self.reader.buffered() < self.max_buffered.max(whole_frame)
    }

    /// The next whole frame payload after the Welcome. The Welcome itself is taken
    /// here (then [`Connection::session`] is set); a refused login is an error
    /// (`Rejected` for good, `Connect` for a refusal worth retrying).
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, ClientError> {
        if !self.take_welcome()? {
            return Ok(None);
        }
        if self.after_welcome_ready {
            self.after_welcome_ready = false;
            return Ok(Some(&self.after_welcome));
        }
        if self.reader.buffered() == 0 {
            self.reader.shrink_if_idle(KEEP_BUFFER);
            return Ok(None);
        }
        Ok(self.reader.next_frame()?)
    }

    /// Takes the Welcome if it is in: true once the session is open.
    pub fn take_welcome(&mut self) -> Result<bool, ClientError> {
        if self.session.is_some() {
            return Ok(true);
        }
        let Some(frame) = self.reader.next_frame()? else {
            return Ok(false);
        };
        let (session, rest) = welcome(frame)?;
        // A node announces 64 KiB to 16 MiB; a larger figure (a peer posing as a node)
        // is held to 16 MiB, and larger frames are refused as malformed.
        let max = session.max_frame.clamp(
            tickwire_proto::frame::MIN_MAX_FRAME,
            tickwire_proto::frame::MAX_MAX_FRAME,
        );
        self.reader.set_max_frame(max.max(FIRST_MAX_FRAME));
        self.writer.set_max_frame(max);
        self.session = Some(session);
        self.after_welcome = rest;
        self.after_welcome_ready = !self.after_welcome.is_empty();
        Ok(true)
    }

    /// When [`Connection::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(match &self.session {
            None => self.welcome_deadline,
            Some(s) => {
                let silent = self.last_rx + s.heartbeat * 3;
                if self.writer.is_empty() {
                    silent.min(self.last_tx + s.heartbeat)
                } else {
                    silent // output is waiting to be written: no ping is due
                }
            }
        })
    }

    /// Sends a ping when nothing was sent for a heartbeat interval; fails when the node
    /// has been silent for three, or did not welcome the login in time.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError> {
        let Some(s) = &self.session else {
            if now >= self.welcome_deadline {
                return Err(ClientError::Timeout(
                    "waiting for the node's welcome".into(),
                ));
            }
            return Ok(());
        };
        let hb = s.heartbeat;
        if now.saturating_duration_since(self.last_rx) >= hb * 3 {
            return Err(ClientError::Disconnected(format!(
                "node silent for {} ms (3 heartbeat intervals)",
                (hb * 3).as_millis()
            )));
        }
        if now.saturating_duration_since(self.last_tx) >= hb && self.writer.is_empty() {
            self.writer.push(&Message::Ping(0))?;
            // Counts as sent once queued: the driver writes it this turn.
            self.last_tx = now;
        }
        Ok(())
    }
}

/// The heartbeat the client keeps at least: a node announcing less is taken at this.
const MIN_HEARTBEAT_MS: u32 = 100;
/// The heartbeat the client keeps at most, whatever the node announced: it pings at
/// least this often when it has sent nothing, the node answers every ping, so a node
/// silent for three of these is gone. A node (or a peer posing as one) announcing
/// hours would otherwise be trusted to be alive for hours of silence.
const MAX_HEARTBEAT_MS: u32 = 30_000;

/// The Welcome that starts a frame, and the rest of that frame; or why the node refused.
fn welcome(frame: &[u8]) -> Result<(Session, Vec<u8>), ClientError> {
    let raw = match MessageIter::new(frame).next() {
        Some(r) => r?,
        None => return Err(ClientError::Protocol("an empty first frame".into())),
    };
    match raw.message {
        Message::Welcome(w) => Ok((
            Session {
                version: w.version,
                heartbeat: Duration::from_millis(
                    w.heartbeat_ms.clamp(MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS) as u64,
                ),
                max_frame: w.max_frame as usize,
                max_streams: w.max_streams,
                max_output_bytes: w.max_output_bytes,
                node_name: w.node_name.to_string(),
            },
            frame[raw.encoded.len()..].to_vec(),
        )),
        Message::Status(s) if is_fatal(s.state.stream, s.state.code) => {
            Err(ClientError::Rejected {
                code: s.state.code,
                reason: s.state.text.to_string(),
            })
        }
        // Connection limit, node shutting down: worth trying again later.
        Message::Status(s) => Err(ClientError::Refused(s.state.text.to_string())),
        other => Err(ClientError::Protocol(format!(
            "expected a welcome, got {:?}",
            other.message_type()
        ))),
    }
}

/// Whether a connection-level status from the node ends the session for good.
pub(crate) fn is_fatal(stream: StreamState, status_code: u16) -> bool {
    // Refused for who the client is (its login, or its rights to what it announced):
    // trying again gets the same answer until the node's users file changes.
    stream == StreamState::Closed
        && matches!(status_code, code::LOGIN_REJECTED | code::NOT_ENTITLED)
}

#[cfg(test)]
mod welcome_tests {
    use super::*;
    use tickwire_proto::Welcome;

    fn welcomed_with(heartbeat_ms: u32) -> Duration {
        let mut frame = Vec::new();
        Message::Welcome(Welcome {
            version: 1,
            heartbeat_ms,
            max_frame: 1 << 20,
            max_streams: 10,
            max_output_bytes: 1 << 20,
            node_name: "n",
        })
        .encode(&mut frame)
        .unwrap();
        welcome(&frame).expect("a welcome").0.heartbeat
    }

    /// A connection that got a Welcome announcing `max_frame`.
    fn welcomed_connection(max_frame: u32) -> Connection {
        let login = LoginOptions {
            role: tickwire_proto::Role::Subscriber,
            application: "test".into(),
            user: "test".into(),
            token: String::new(),
            slow_consumer: None,
            welcome_timeout: Duration::from_secs(5),
        };
        let now = Instant::now();
        let mut c = Connection::new(&login, now).unwrap();
        let mut w = FrameWriter::new(FIRST_MAX_FRAME);
        w.push(&Message::Welcome(Welcome {
            version: 1,
            heartbeat_ms: 1000,
            max_frame,
            max_streams: 10,
            max_output_bytes: 1 << 20,
            node_name: "n",
        }))
        .unwrap();
        c.receive(w.sealed_bytes(), now);
        assert!(c.take_welcome().unwrap());
        c
    }

    /// A frame larger than what the connection buffers before its frames are taken
    /// (`max_buffered`), within what the node announced, is read whole: input is wanted
    /// until it is complete. (A reader that stopped at `max_buffered` waited for the
    /// rest forever.)
    #[test]
    fn a_frame_larger_than_the_buffered_bound_is_read_whole() {
        let mut c = welcomed_connection(16 << 20);
        assert_eq!(c.max_buffered, 4 << 20);
        let payload = 6 << 20;
        let mut frame = (payload as u32).to_be_bytes().to_vec();
        frame.resize(4 + payload, 0);
        let now = Instant::now();
        let mut at = 0;
        while at < frame.len() {
            assert!(
                c.wants_input(),
                "input refused at {at} of {} bytes",
                frame.len()
            );
            let n = (frame.len() - at).min(64 * 1024);
            c.receive(&frame[at..at + n], now);
            at += n;
        }
        // Whole: taken as a frame (whose bytes are not a message: that is the caller's).
        assert_eq!(c.next_frame().unwrap().map(|f| f.len()), Some(payload));
        assert!(c.wants_input());
    }

    /// A large frame in and a large burst out leave the connection's buffers at
    /// [`KEEP_BUFFER`] once they are empty again, not at the size they grew to.
    #[test]
    fn buffers_grown_by_a_large_frame_are_released_once_empty() {
        let mut c = welcomed_connection(16 << 20);
        let now = Instant::now();
        let payload = 6 << 20;
        let mut frame = (payload as u32).to_be_bytes().to_vec();
        frame.resize(4 + payload, 0);
        for chunk in frame.chunks(64 * 1024) {
            c.receive(chunk, now);
        }
        assert_eq!(c.next_frame().unwrap().map(|f| f.len()), Some(payload));
        assert!(c.next_frame().unwrap().is_none());
        let held = c.spare(0).len();
        assert!(held <= KEEP_BUFFER, "{held} bytes held for no input");
        for _ in 0..100 {
            c.writer().push(&Message::Files(&[7; 60_000])).unwrap();
        }
        let n = c.transmit().len();
        assert!(n > 6_000_000);
        c.sent(n, now);
        let held = c.writer.capacity();
        assert!(held <= KEEP_BUFFER, "{held} bytes held for no output");
    }

    /// A peer posing as a node cannot make the connection take frames above the
    /// protocol's 16 MiB by announcing more.
    #[test]
    fn a_max_frame_above_the_protocols_is_held_to_it() {
        let c = welcomed_connection(u32::MAX);
        assert_eq!(c.reader.max_frame(), tickwire_proto::frame::MAX_MAX_FRAME);
    }

    #[test]
    fn the_heartbeat_a_node_announces_is_kept_within_bounds() {
        assert_eq!(welcomed_with(5_000), Duration::from_secs(5));
        assert_eq!(welcomed_with(0), Duration::from_millis(100));
        // A peer posing as a node cannot buy hours of silence.
        assert_eq!(welcomed_with(u32::MAX), Duration::from_secs(30));
    }
}
