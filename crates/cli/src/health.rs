//! `tickwire health`: asks a node on its HTTP port whether it is alive (`GET /healthz`)
//! or ready (`GET /readyz`), for container health checks and orchestrators' probes that
//! have no HTTP client of their own (the image has no curl).

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub(crate) struct HealthArgs {
    /// The node's WebSocket/HTTP port, host:port: what it was given as `--ws` or
    /// `websocket.listen` (e.g. 127.0.0.1:15000).
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    ws: Option<String>,
    /// Take the address from the node's configuration file (`websocket.listen`; an
    /// unspecified address such as 0.0.0.0 is asked on loopback).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Ask whether the node is ready (`/readyz`: its backbone link, upstream node and
    /// journal, those it has, are there) rather than alive (`/healthz`).
    #[arg(long)]
    ready: bool,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
}

/// Prints the node's answer; Ok when it was 200 OK. Every failure exits with status 1,
/// as container health checks expect.
pub(crate) fn run(a: HealthArgs) -> Result<()> {
    // No default: a node with no WebSocket/HTTP port (the default) has nothing to ask,
    // and a guessed port would only say "connection refused".
    let addr = match (&a.config, &a.ws) {
        (Some(path), _) => address_from_config(path)?,
        (None, Some(ws)) => ws.clone(),
        (None, None) => bail!(
            "give the node's WebSocket/HTTP port: --ws ADDR (its `--ws` or websocket.listen) \
             or --config FILE (its configuration file); a node serves /healthz and /readyz \
             only there, and has none unless configured"
        ),
    };
    let path = if a.ready { "/readyz" } else { "/healthz" };
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!("--timeout {}: give a number of seconds above 0", a.timeout);
    }
    // (A day at most: Duration cannot hold every float.)
    let timeout = Duration::from_secs_f64(a.timeout.clamp(0.001, 86_400.0));
    let (status, body) =
        get(&addr, path, timeout).with_context(|| format!("no answer from http://{addr}{path}"))?;
    crate::stdout::text(&body)?;
    if status != 200 {
        bail!("http://{addr}{path} answered {status}");
    }
    Ok(())
}

fn address_from_config(path: &std::path::Path) -> Result<String> {
    // Not checked whole: the node's flags may override or complete it (`tickwire node
    // --config FILE --role edge`), and only the HTTP port is needed here.
    let cfg = tickwire_node::NodeConfig::read(path)?;
    if cfg.websocket.listen.is_empty() {
        bail!(
            "{}: websocket.listen is empty: this node has no HTTP port to ask",
            path.display()
        );
    }
    if cfg.tls.enabled() {
        bail!(
            "{}: the node's HTTP port speaks TLS ([tls]); `tickwire health` asks in plain HTTP",
            path.display()
        );
    }
    // As the node reads it: an address, or a host name and port.
    let mut addr: SocketAddr = cfg
        .websocket
        .address()
        .with_context(|| format!("{}: websocket.listen", path.display()))?
        .context("websocket.listen is empty")?;
    if addr.ip().is_unspecified() {
        addr.set_ip(if addr.is_ipv4() {
            std::net::Ipv4Addr::LOCALHOST.into()
        } else {
            std::net::Ipv6Addr::LOCALHOST.into()
        });
    }
    Ok(addr.to_string())
}

/// Bytes of an answer read at most (answers are small).
const MAX_ANSWER: usize = 64 * 1024;

/// One GET, whole within `timeout`: the status code and the body (a peer that answers
/// a byte at a time does not stretch it).
fn get(addr: &str, path: &str, timeout: Duration) -> Result<(u16, String)> {
    let deadline = Instant::now() + timeout;
    let to = addr
        .to_socket_addrs()?
        .next()
        .context("the address resolves to nothing")?;
    let mut s = TcpStream::connect_timeout(&to, timeout)?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while answer.len() < MAX_ANSWER {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            bail!("no whole answer within {} s", timeout.as_secs_f64());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n.min(MAX_ANSWER - answer.len())]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // The read's own time-out (what is left of the request's) ran out.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                bail!("no whole answer within {} s", timeout.as_secs_f64());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").context("not an HTTP answer")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP status line: {:?}", head.lines().next()))?;
    Ok((status, body.to_string()))
}
