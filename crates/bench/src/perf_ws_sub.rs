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

struct Conn {
    ws: WebSocket<WsStream>,
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
        // SAFETY: a valid pollfd array for the duration of the call.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 10) };
        for (i, k) in conns.iter_mut().enumerate() {
            if pfds[i].revents == 0 {
                continue;
            }
            loop {
                let text = match k.ws.read() {
                    Ok(Message::Text(t)) => t,
                    Ok(Message::Close(_)) => bail!("the node closed WebSocket connection {i}"),
                    Ok(_) => continue,
                    Err(tungstenite::Error::Io(e))
                        if e.kind() == std::io::ErrorKind::WouldBlock =>
                    {
                        break
                    }
                    Err(e) => bail!("WebSocket connection {i}: {e}"),
                };
                let msgs: Vec<WsMsg> =
                    serde_json::from_str(&text).context("the node sent invalid JSON")?;
                for m in &msgs {
                    match m.ty {
                        Some(MsgType::Ping) => {
                            let _ = k.ws.send(Message::text("{\"Type\":\"Pong\"}"));
                        }
                        Some(MsgType::Refresh) if m.domain.is_none() => {
                            let Some(idx) = item_index(m.id, first_item_id, args.items) else {
                                continue;
                            };
                            if !k.images[idx] {
                                k.images[idx] = true;
                                c.images += 1;
                            }
                            k.seq[idx] = m.seq;
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
                            if let Some(prev) = k.seq[idx] {
                                if seq != prev + n.max(1) && n != 65_535 && n != 0 {
                                    c.gaps += 1;
                                }
                            }
                            k.seq[idx] = Some(seq);
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
            }
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
