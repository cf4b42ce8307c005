//! The subscriber: a watchlist of item streams on one node connection.

use crate::conn::{is_fatal, Conn, ConnectOptions, Io, Session};
use crate::events::{Event, EventRef, ItemRef};
use crate::{Backoff, ClientError};
use log::{info, warn};
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::{
    code, DataState, Message, MessageIter, Request, Role, ServiceState, State, Status, StreamState,
    View,
};

/// Identifies one item stream of a subscriber.
pub type StreamId = u32;

#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// One refresh, then the stream closes.
    pub snapshot: bool,
    /// Only these field ids (refresh and updates).
    pub view: Option<Vec<i16>>,
}

struct Watch {
    service: String,
    name: String,
    streaming: bool,
    view: Option<Vec<i16>>,
}

/// Subscribes to items on a node and delivers their refreshes, updates and statuses.
///
/// Drive it with [`dispatch`](Self::dispatch) (zero-copy callback) or
/// [`next_event`](Self::next_event) (owned events). When the connection is lost, every
/// open stream gets an open/suspect status, the subscriber reconnects with backoff and
/// requests its whole watchlist again.
pub struct Subscriber {
    opts: ConnectOptions,
    conn: Option<Conn>,
    /// Indexed by stream id (ids are dense, from 1).
    watch: Vec<Option<Watch>>,
    open_streams: usize,
    next_sid: u32,
    backoff: Backoff,
    retry_at: Instant,
    /// Statuses made up locally (connection lost) not yet delivered.
    synthetic: VecDeque<(u32, State<'static>, String)>,
    ready: VecDeque<Event>,
    directory: BTreeMap<String, ServiceState>,
    /// Streams the node closed with closed-recover, to request again at the given time.
    recover: Vec<(u32, Instant)>,
    /// After a reconnect: streams waiting for their service to appear in the directory.
    held: Vec<u32>,
    reconnects: u64,
}

impl Subscriber {
    /// Connects and logs in; fails if the node cannot be reached now.
    pub fn connect(opts: ConnectOptions) -> Result<Self, ClientError> {
        let conn = Conn::open(&opts, Role::Subscriber)?;
        info!(
            "subscriber connected to {} ({})",
            opts.addr, conn.session.node_name
        );
        Ok(Subscriber {
            backoff: Backoff::new(opts.backoff_min, opts.backoff_max),
            opts,
            conn: Some(conn),
            watch: vec![None],
            open_streams: 0,
            next_sid: 1,
            retry_at: Instant::now(),
            synthetic: VecDeque::new(),
            ready: VecDeque::new(),
            directory: BTreeMap::new(),
            recover: Vec::new(),
            held: Vec::new(),
            reconnects: 0,
        })
    }

    /// The current session, if connected.
    pub fn session(&self) -> Option<&Session> {
        self.conn.as_ref().map(|c| &c.session)
    }

    /// The socket, for callers that poll many subscribers from one thread and call
    /// `dispatch(Duration::ZERO, ..)` on the ready ones. `None` while reconnecting.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.conn.as_ref().map(|c| c.raw_fd())
    }

    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// Times the connection was re-established.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Services and their state, as the node's directory messages left them (each
    /// lists the services that changed; removed ones are gone from here).
    pub fn directory(&self) -> &BTreeMap<String, ServiceState> {
        &self.directory
    }

    /// Open streams in the watchlist.
    pub fn open_streams(&self) -> usize {
        self.open_streams
    }

    /// Opens a stream for an item; its refresh (or a status) arrives through dispatch.
    pub fn subscribe(
        &mut self,
        service: &str,
        name: &str,
        options: RequestOptions,
    ) -> Result<StreamId, ClientError> {
        let sid = self.next_sid;
        self.next_sid += 1;
        let w = Watch {
            service: service.to_string(),
            name: name.to_string(),
            streaming: !options.snapshot,
            view: options.view,
        };
        if let Some(conn) = &mut self.conn {
            push_request(&mut conn.writer, sid, &w)?;
            if let Err(e) = conn.flush_some() {
                self.lost(e)?;
            }
        }
        if self.watch.len() <= sid as usize {
            self.watch.resize_with(sid as usize + 1, || None);
        }
        self.watch[sid as usize] = Some(w);
        self.open_streams += 1;
        Ok(sid)
    }

    /// Closes a stream.
    pub fn unsubscribe(&mut self, sid: StreamId) -> Result<(), ClientError> {
        if self.remove(sid) {
            if let Some(conn) = &mut self.conn {
                conn.writer.push(&Message::Close { stream_id: sid })?;
                if let Err(e) = conn.flush_some() {
                    self.lost(e)?;
                }
            }
        }
        Ok(())
    }

    fn remove(&mut self, sid: u32) -> bool {
        match self.watch.get_mut(sid as usize).and_then(|w| w.take()) {
            Some(_) => {
                self.open_streams -= 1;
                true
            }
            None => false,
        }
    }

    /// Writes any queued requests, waiting up to `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), ClientError> {
        if let Some(conn) = &mut self.conn {
            if let Err(e) = conn.flush_until(Instant::now() + timeout) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// Returns the next event, waiting up to `timeout`; `None` if nothing came.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(e) = self.ready.pop_front() {
            return Ok(Some(e));
        }
        let mut got = VecDeque::new();
        self.dispatch(timeout, |e| got.push_back(Event::from(&e)))?;
        self.ready = got;
        Ok(self.ready.pop_front())
    }

    /// Delivers the events available now to `f`, waiting up to `timeout` for the first.
    /// Returns how many were delivered. Events borrow the receive buffer: no copy, no
    /// allocation per message.
    pub fn dispatch(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(EventRef<'_>),
    ) -> Result<usize, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut delivered = self.deliver_synthetic(&mut f);
            if self.conn.is_none() {
                if delivered > 0 {
                    return Ok(delivered);
                }
                let now = Instant::now();
                // A reconnect that is due is tried even by a zero-timeout call (an
                // application polling with Duration::ZERO would otherwise never get one).
                if now >= self.retry_at {
                    self.try_reconnect()?;
                    continue;
                }
                if now >= deadline {
                    return Ok(0);
                }
                std::thread::sleep(self.retry_at.min(deadline) - now);
                continue;
            }
            match self.process_frames(&mut f) {
                Ok(n) => delivered += n,
                Err(e) => {
                    self.lost(e)?;
                    continue;
                }
            }
            if let Err(e) = self.release_held().and_then(|_| self.rerequest_recovered()) {
                self.lost(e)?;
                continue;
            }
            if delivered > 0 {
                return Ok(delivered);
            }
            let conn = self.conn.as_mut().expect("connected");
            let left = deadline.saturating_duration_since(Instant::now());
            let res = if left.is_zero() {
                conn.read_available()
            } else {
                conn.wait(left.min(conn.session.heartbeat / 2))
            };
            let res = res.and_then(|io| conn.heartbeat().map(|_| io));
            match res {
                Ok(Io::Read) => continue,
                Ok(Io::Idle) if left.is_zero() => return Ok(0),
                Ok(Io::Idle) => continue,
                Err(e) => self.lost(e)?,
            }
        }
    }

    /// Sends the held requests whose service the directory now lists.
    fn release_held(&mut self) -> Result<(), ClientError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let (watch, directory) = (&self.watch, &self.directory);
        let mut sent = false;
        let mut err = None;
        self.held.retain(|&sid| {
            let Some(Some(w)) = watch.get(sid as usize) else {
                return false;
            };
            if !directory.contains_key(&w.service) {
                return true;
            }
            if let Err(e) = push_request(&mut conn.writer, sid, w) {
                err = Some(e);
            }
            sent = true;
            false
        });
        if let Some(e) = err {
            return Err(e);
        }
        if sent {
            conn.flush_some()?;
        }
        Ok(())
    }

    /// Requests again the streams closed with closed-recover whose delay has passed.
    fn rerequest_recovered(&mut self) -> Result<(), ClientError> {
        if self.recover.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let mut i = 0;
        while i < self.recover.len() {
            let (sid, at) = self.recover[i];
            if at > now {
                i += 1;
                continue;
            }
            self.recover.swap_remove(i);
            if let Some(Some(w)) = self.watch.get(sid as usize) {
                push_request(&mut conn.writer, sid, w)?;
            }
        }
        conn.flush_some()
    }

    fn deliver_synthetic(&mut self, f: &mut impl FnMut(EventRef<'_>)) -> usize {
        let mut n = 0;
        while let Some((sid, state, text)) = self.synthetic.pop_front() {
            let Some(w) = self.watch.get(sid as usize).and_then(|w| w.as_ref()) else {
                continue;
            };
            f(EventRef::Status(
                ItemRef {
                    stream: sid,
                    service: &w.service,
                    name: &w.name,
                },
                Status {
                    stream_id: sid,
                    state: State {
                        text: &text,
                        ..state
                    },
                },
            ));
            n += 1;
        }
        n
    }

    /// Processes every complete frame received so far.
    fn process_frames(&mut self, f: &mut impl FnMut(EventRef<'_>)) -> Result<usize, ClientError> {
        let Subscriber {
            conn,
            watch,
            open_streams,
            directory,
            recover,
            opts,
            ..
        } = self;
        let mut ctx = Ctx {
            watch,
            open_streams,
            directory,
            recover,
            recover_delay: opts.backoff_min.max(Duration::from_millis(500)),
        };
        let conn = conn.as_mut().expect("connected");
        let mut n = 0;
        if !conn.after_welcome.is_empty() {
            let first = std::mem::take(&mut conn.after_welcome);
            n += handle_payload(&first, &mut ctx, &mut conn.writer, f)?;
        }
        while let Some(frame) = conn.reader.next_frame()? {
            n += handle_payload(frame, &mut ctx, &mut conn.writer, f)?;
        }
        if !conn.writer.is_empty() {
            conn.flush_some()?;
        }
        Ok(n)
    }

    /// The connection failed: tell every open stream, then reconnect later (or give up).
    fn lost(&mut self, err: ClientError) -> Result<(), ClientError> {
        self.conn = None;
        if let ClientError::Rejected { .. } = err {
            return Err(err);
        }
        if !self.opts.reconnect {
            return Err(err);
        }
        warn!("{err}; reconnecting to {}", self.opts.addr);
        let text = format!("connection to the node lost ({err}); reconnecting");
        for (sid, w) in self.watch.iter().enumerate() {
            if w.is_some() {
                self.synthetic.push_back((
                    sid as u32,
                    State {
                        stream: StreamState::Open,
                        data: DataState::Suspect,
                        code: code::CONNECTION_LOST,
                        text: "",
                    },
                    text.clone(),
                ));
            }
        }
        let now = Instant::now();
        self.retry_at = now + self.backoff.step(now);
        Ok(())
    }

    fn try_reconnect(&mut self) -> Result<(), ClientError> {
        match Conn::open(&self.opts, Role::Subscriber) {
            Ok(conn) => {
                self.backoff.connected(Instant::now());
                self.reconnects += 1;
                self.recover.clear(); // everything is requested again below
                self.directory.clear(); // the new node's directory follows its welcome
                info!(
                    "reconnected to {}; requesting {} streams again as their services appear",
                    self.opts.addr, self.open_streams
                );
                // A restarted node may not know a service until its publisher is back:
                // hold each request until the directory lists the service.
                self.held = (0..self.watch.len() as u32)
                    .filter(|&sid| self.watch[sid as usize].is_some())
                    .collect();
                self.conn = Some(conn);
                Ok(())
            }
            Err(e @ ClientError::Rejected { .. }) => Err(e),
            Err(e) => {
                let delay = self.backoff.step(Instant::now());
                warn!(
                    "reconnect to {} failed: {e}; next try in {} ms",
                    self.opts.addr,
                    delay.as_millis()
                );
                self.retry_at = Instant::now() + delay;
                Ok(())
            }
        }
    }
}

fn push_request(w: &mut FrameWriter, sid: u32, watch: &Watch) -> Result<(), ClientError> {
    w.push(&Message::Request(Request {
        stream_id: sid,
        streaming: watch.streaming,
        service: &watch.service,
        name: &watch.name,
        view: watch.view.as_deref().map(View::Fids),
    }))?;
    Ok(())
}

/// The parts of a subscriber that message handling updates.
struct Ctx<'s> {
    watch: &'s mut Vec<Option<Watch>>,
    open_streams: &'s mut usize,
    directory: &'s mut BTreeMap<String, ServiceState>,
    recover: &'s mut Vec<(u32, Instant)>,
    recover_delay: Duration,
}

/// Delivers the messages of one frame payload.
fn handle_payload(
    payload: &[u8],
    ctx: &mut Ctx<'_>,
    writer: &mut FrameWriter,
    f: &mut impl FnMut(EventRef<'_>),
) -> Result<usize, ClientError> {
    let Ctx {
        watch,
        open_streams,
        directory,
        recover,
        recover_delay,
    } = ctx;
    let mut n = 0;
    for raw in MessageIter::new(payload) {
        let msg = raw?.message;
        match msg {
            Message::Refresh(r) => {
                let sid = r.stream_id;
                let Some(w) = watch.get(sid as usize).and_then(|w| w.as_ref()) else {
                    continue; // a late message for a stream already closed
                };
                let done = r.complete && r.state.stream != StreamState::Open;
                f(EventRef::Refresh(
                    ItemRef {
                        stream: sid,
                        service: &w.service,
                        name: &w.name,
                    },
                    r,
                ));
                n += 1;
                if done && watch[sid as usize].take().is_some() {
                    **open_streams -= 1;
                }
            }
            Message::Update(u) => {
                let Some(w) = watch.get(u.stream_id as usize).and_then(|w| w.as_ref()) else {
                    continue;
                };
                f(EventRef::Update(
                    ItemRef {
                        stream: u.stream_id,
                        service: &w.service,
                        name: &w.name,
                    },
                    u,
                ));
                n += 1;
            }
            Message::Status(s) if s.stream_id == 0 => {
                f(EventRef::Status(
                    ItemRef {
                        stream: 0,
                        service: "",
                        name: "",
                    },
                    s.clone(),
                ));
                n += 1;
                if s.state.stream != StreamState::Open {
                    if is_fatal(s.state.stream, s.state.code) {
                        return Err(ClientError::Rejected {
                            code: s.state.code,
                            reason: s.state.text.to_string(),
                        });
                    }
                    return Err(ClientError::Disconnected(format!(
                        "node closed the connection: {}",
                        s.state.text
                    )));
                }
            }
            Message::Status(s) => {
                let sid = s.stream_id;
                let Some(w) = watch.get(sid as usize).and_then(|w| w.as_ref()) else {
                    continue;
                };
                let item = ItemRef {
                    stream: sid,
                    service: &w.service,
                    name: &w.name,
                };
                if s.state.stream == StreamState::ClosedRecover && w.streaming {
                    // Recoverable: the stream stays in the watchlist, shown as suspect,
                    // and is requested again shortly (or on reconnect).
                    let shown = Status {
                        stream_id: sid,
                        state: State {
                            stream: StreamState::Open,
                            data: DataState::Suspect,
                            ..s.state
                        },
                    };
                    f(EventRef::Status(item, shown));
                    n += 1;
                    recover.push((sid, Instant::now() + *recover_delay));
                    continue;
                }
                let done = s.state.stream != StreamState::Open;
                f(EventRef::Status(item, s));
                n += 1;
                if done && watch[sid as usize].take().is_some() {
                    **open_streams -= 1;
                }
            }
            Message::Directory(d) => {
                for e in &d.services {
                    if e.state == ServiceState::Removed {
                        directory.remove(e.name);
                    } else {
                        directory.insert(e.name.to_string(), e.state);
                    }
                }
                f(EventRef::Directory(&d));
                n += 1;
            }
            Message::Ping(t) => writer.push(&Message::Pong(t))?,
            Message::Pong(_) => {}
            other => {
                return Err(ClientError::Protocol(format!(
                    "unexpected {:?} message from the node",
                    other.message_type()
                )))
            }
        }
    }
    Ok(n)
}
