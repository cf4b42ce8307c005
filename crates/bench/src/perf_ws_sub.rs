//! `tickwire-bench perf-ws-sub`: the performance lab's WebSocket load subscriber. Many
//! WebSocket connections (tr_json2) from one thread, each logging in and opening every
//! item in one batch request; every message is parsed as JSON; updates are counted,
//! sequence gaps checked against `ConflationInfo`, and the latency measured from
//! TIM_TRK_1 (the publisher's intended send time) to now. It speaks the same `--control`
//! and `--json` lines as perf-sub, so `tickwire bench` drives either.

use crate::perf_sub::{control_channel, print_stand_in_summary, Counts, Reports};
use crate::stats::{realtime_ns, Latency, TIMESTAMP_FLOOR};
use anyhow::{bail, Context, Result};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::json;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::rustls;
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::{Message, WebSocket};

/// `tickwire-bench perf-ws-sub`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfWsSubArgs {
    /// The node's WebSocket address (host:port of `tickwire node --ws`).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15000")]
    pub ws: String,
    /// Service of the items.
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    pub service: String,
    /// Items SYM0..SYM{N-1}, all opened on every connection.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub items: usize,
    /// WebSocket connections.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub connections: usize,
    /// Seconds to run.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration: f64,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Read `mark NAME` / `quit` from standard input (as perf-sub).
    #[arg(long)]
    pub control: bool,
    /// User, secret and TLS (wss) as for every connecting command.
    #[command(flatten)]
    pub credentials: tickwire_client::Credentials,
}

/// The connection under the WebSocket: plain TCP or TLS (wss).
enum WsStream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl WsStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            WsStream::Plain(s) => s,
            WsStream::Tls(t) => &t.sock,
        }
    }
}

impl std::io::Read for WsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            WsStream::Plain(s) => s.read(buf),
            WsStream::Tls(t) => t.read(buf),
        }
    }
}

impl std::io::Write for WsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            WsStream::Plain(s) => s.write(buf),
            WsStream::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            WsStream::Plain(s) => s.flush(),
            WsStream::Tls(t) => t.flush(),
        }
    }
}

/// Messages read from one connection per turn of the loop at most. A node that sends
/// faster than they are parsed never leaves the socket empty: without a bound the loop
/// would stay on that connection, reading no other, answering no `mark` and never
/// seeing `--duration` end.
const READ_BUDGET: usize = 1024;

/// Reads up to `budget` messages from connection `i`, handing each text message to
/// `on_text` as it comes (so its latency is taken when it is read). Returns whether it
/// stopped at the budget: more may wait, some perhaps already read off the socket where
/// poll cannot see them.
fn read_some<S: std::io::Read + std::io::Write>(
    ws: &mut WebSocket<S>,
    budget: usize,
    i: usize,
    mut on_text: impl FnMut(&mut WebSocket<S>, &str) -> Result<()>,
) -> Result<bool> {
    for _ in 0..budget {
        let text = match ws.read() {
            Ok(Message::Text(t)) => t,
            Ok(Message::Close(_)) => bail!("the node closed WebSocket connection {i}"),
            Ok(_) => continue,
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Ok(false)
            }
            Err(e) => bail!("WebSocket connection {i}: {e}"),
        };
        on_text(ws, &text)?;
    }
    Ok(true)
}

struct Conn {
    ws: WebSocket<WsStream>,
    /// The last read stopped at [`READ_BUDGET`]: read again without waiting.
    more: bool,
    /// Last sequence number per client ID (ID - 1 indexes it; items are on 2..=N+1).
    seq: Vec<Option<u64>>,
    images: Vec<bool>,
}

fn connect(args: &PerfWsSubArgs) -> Result<Conn> {
    let tls = args.credentials.tls_config().map_err(anyhow::Error::msg)?;
    let scheme = if tls.is_some() { "wss" } else { "ws" };
    let url = format!("{scheme}://{}/WebSocket", args.ws);
    let mut req = url.as_str().into_client_request()?;
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("tr_json2"),
    );
    let stream = TcpStream::connect(&args.ws)
        .with_context(|| format!("perf-ws-sub: cannot connect to {}", args.ws))?;
    stream.set_nodelay(true)?;
    let stream = match tls {
        None => WsStream::Plain(stream),
        Some(cfg) => {
            let name = tickwire_client::tls::server_name(&args.ws).map_err(anyhow::Error::msg)?;
            let conn = rustls::ClientConnection::new(cfg, name).context("TLS")?;
            WsStream::Tls(Box::new(rustls::StreamOwned::new(conn, stream)))
        }
    };
    let (mut ws, _) = tungstenite::client(req, stream).context("WebSocket handshake")?;
    let user = args.credentials.user.as_deref().unwrap_or("perf-ws-sub");
    let secret = args.credentials.secret().map_err(anyhow::Error::msg)?;
    let mut elements = json!({"ApplicationId": "256"});
    if !secret.is_empty() {
        elements["Password"] = json!(secret);
    }
    let login = json!({"ID": 1, "Domain": "Login", "Key": {"Name": user, "Elements": elements}});
    ws.send(Message::text(login.to_string()))?;
    let names: Vec<String> = (0..args.items).map(|i| format!("SYM{i}")).collect();
    let req = json!({"ID": 1_000_000, "Key": {"Name": names, "Service": args.service}});
    ws.send(Message::text(req.to_string()))?;
    ws.get_mut().tcp().set_nonblocking(true)?;
    Ok(Conn {
        ws,
        more: false,
        seq: vec![None; args.items],
        images: vec![false; args.items],
    })
}

/// Opens the connections and items and counts every message until `--duration` ends,
/// `stop` is raised or `quit` comes on the control input; prints per-second lines and
/// a summary.
pub fn run(args: PerfWsSubArgs, stop: Arc<AtomicBool>) -> Result<()> {
    if args.connections == 0 || args.items == 0 {
        bail!("--connections and --items must be at least 1");
    }
    let mut conns = (0..args.connections)
        .map(|_| connect(&args))
        .collect::<Result<Vec<_>>>()?;
    let marks = control_channel(args.control, stop.clone());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration.max(0.0));
    let mut c = Counts::default();
    let (mut overall, mut since_mark, mut second) =
        (Latency::default(), Latency::default(), Latency::default());
    let mut reports = Reports::new("perf-ws-sub", args.json, start);
    let first_item_id = 1_000_001i64;
    let mut pfds: Vec<libc::pollfd> = Vec::new();
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        pfds.clear();
        pfds.extend(conns.iter().map(|k| libc::pollfd {
            fd: k.ws.get_ref().tcp().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }));
        // A connection left at its budget may hold read messages that poll cannot see.
        let wait_ms = if conns.iter().any(|k| k.more) { 0 } else { 10 };
        // SAFETY: a valid pollfd array for the duration of the call.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, wait_ms) };
        for (i, k) in conns.iter_mut().enumerate() {
            if pfds[i].revents == 0 && !k.more {
                continue;
            }
            let (seqs, images) = (&mut k.seq, &mut k.images);
            k.more = read_some(&mut k.ws, READ_BUDGET, i, |ws, text| {
                let msgs: Vec<WsMsg> =
                    serde_json::from_str(text).context("the node sent invalid JSON")?;
                for m in &msgs {
                    match m.ty {
                        Some(MsgType::Ping) => {
                            let _ = ws.send(Message::text("{\"Type\":\"Pong\"}"));
                        }
                        Some(MsgType::Refresh) if m.domain.is_none() => {
                            let Some(idx) = item_index(m.id, first_item_id, args.items) else {
                                continue;
                            };
                            if !images[idx] {
                                images[idx] = true;
                                c.images += 1;
                            }
                            seqs[idx] = m.seq;
                        }
                        Some(MsgType::Update) => {
                            let Some(idx) = item_index(m.id, first_item_id, args.items) else {
                                continue;
                            };
                            c.updates += 1;
                            let n = m.conflation.as_ref().map_or(1, |ci| ci.count);
                            if n > 1 {
                                c.conflated += n - 1;
                            }
                            let seq = m.seq.unwrap_or(0);
                            if let Some(prev) = seqs[idx] {
                                if seq != prev + n.max(1) && n != 65_535 && n != 0 {
                                    c.gaps += 1;
                                }
                            }
                            seqs[idx] = Some(seq);
                            if let Some(stamp) = m.fields.as_ref().and_then(|f| f.stamp) {
                                if stamp >= TIMESTAMP_FLOOR {
                                    let lat = realtime_ns().saturating_sub(stamp);
                                    overall.record(lat);
                                    since_mark.record(lat);
                                    second.record(lat);
                                }
                            }
                        }
                        Some(MsgType::Status) => c.statuses += 1,
                        _ => {}
                    }
                }
                Ok(())
            })?;
            // Pongs and the like queued while reading.
            let _ = k.ws.flush();
        }
        if let Some(rx) = &marks {
            while let Ok(name) = rx.try_recv() {
                reports.mark(name, c, 0, &mut since_mark);
            }
        }
        reports.second_if_due(Instant::now(), c, &mut second);
    }
    let s = overall.summary();
    let summary = json!({"connections": args.connections, "items": args.items,
        "updates": c.updates, "images": c.images, "gaps": c.gaps, "conflated": c.conflated,
        "seconds": start.elapsed().as_secs_f64(), "latency": s});
    print_stand_in_summary(args.json, "perf-ws-sub", summary);
    Ok(())
}

/// What perf-ws-sub reads of a message: the rest (every other field value, the key,
/// the state) is skipped by the parser without being built, so the load tool spends
/// its time on the node's output rather than on allocating JSON trees.
#[derive(Deserialize)]
struct WsMsg {
    #[serde(rename = "Type")]
    ty: Option<MsgType>,
    #[serde(rename = "ID")]
    id: Option<i64>,
    /// Present only on the login stream's messages.
    #[serde(rename = "Domain")]
    domain: Option<IgnoredAny>,
    #[serde(rename = "SeqNumber")]
    seq: Option<u64>,
    #[serde(rename = "ConflationInfo")]
    conflation: Option<ConflationInfo>,
    #[serde(rename = "Fields")]
    fields: Option<Stamp>,
}

#[derive(Deserialize)]
enum MsgType {
    Ping,
    Refresh,
    Update,
    Status,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct ConflationInfo {
    #[serde(rename = "Count")]
    count: u64,
}

/// TIM_TRK_1, the publisher's send time, if the update has it.
#[derive(Deserialize)]
struct Stamp {
    #[serde(rename = "TIM_TRK_1")]
    stamp: Option<u64>,
}

/// The item index of a message on one of the batch's IDs.
fn item_index(id: Option<i64>, first: i64, items: usize) -> Option<usize> {
    let id = id?;
    let idx = usize::try_from(id - first).ok()?;
    (idx < items).then_some(idx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tungstenite::protocol::Role;

    /// A node's side of a socket as a client reads it: the same unmasked text frame
    /// `frames` times, then nothing yet (WouldBlock). Past `limit` bytes served it fails,
    /// so a reader that does not stop shows up as an error instead of running for ever.
    struct Feed {
        frame: Vec<u8>,
        left: usize,
        pos: usize,
        served: usize,
        limit: usize,
    }

    impl Feed {
        fn new(text: &str, frames: usize, limit: usize) -> Feed {
            let mut frame = vec![0x81, text.len() as u8];
            frame.extend_from_slice(text.as_bytes());
            Feed {
                frame,
                left: frames,
                pos: 0,
                served: 0,
                limit,
            }
        }
    }

    impl Read for Feed {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.served >= self.limit {
                return Err(std::io::Error::other("read on past the budget"));
            }
            let mut n = 0;
            while n < buf.len() && self.left > 0 {
                buf[n] = self.frame[self.pos];
                n += 1;
                self.pos += 1;
                if self.pos == self.frame.len() {
                    self.pos = 0;
                    self.left -= 1;
                }
            }
            if n == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
            self.served += n;
            Ok(n)
        }
    }

    impl Write for Feed {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_connection_that_never_runs_dry_is_read_a_budget_at_a_time() {
        let text = r#"[{"ID":1000001,"Type":"Update"}]"#;
        // A node sending without end (here: far more than a budget, then an error).
        let feed = Feed::new(text, usize::MAX, 1 << 24);
        let mut ws = WebSocket::from_raw_socket(feed, Role::Client, None);
        let mut seen = 0;
        let more = read_some(&mut ws, 100, 0, |_, t| {
            assert_eq!(t, text);
            seen += 1;
            Ok(())
        });
        assert!(more.unwrap(), "stopped at the budget, more to read");
        assert_eq!(seen, 100);
        // A connection that runs dry first says so.
        let mut ws = WebSocket::from_raw_socket(Feed::new(text, 3, 1 << 24), Role::Client, None);
        let mut seen = 0;
        let more = read_some(&mut ws, 100, 0, |_, _| {
            seen += 1;
            Ok(())
        });
        assert!(!more.unwrap());
        assert_eq!(seen, 3);
    }
}
