//! A non-interactive RSSL provider whose group news reaches 20,000 items a message: the
//! node handles its input a share a turn (the rest waits in the channel, its socket not
//! read meanwhile). What it sends during that backlog is read once the backlog is done.
//! Real sockets, a node in this process.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickwire_node::config::NodeConfig;
use tickwire_node::{NodeServer, RunningNode};
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::rwf::msg::{class, data, domain, stream, Msg};
use tickwire_rssl::testing;

const ITEMS: i32 = 20_000;
const LIMIT: Duration = Duration::from_secs(60);

/// A provider's connection: the socket and its RIPC channel.
struct Provider {
    socket: TcpStream,
    channel: Channel,
    buf: Vec<u8>,
}

impl Provider {
    /// Connected, logged in as a non-interactive provider, service 7 up, its 20,000
    /// items published, all of them in the node's core (`refreshes_in` says so).
    fn publishing(node: &RunningNode, ws: SocketAddr) -> Provider {
        let socket = TcpStream::connect(node.addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut p = Provider {
            socket,
            channel: Channel::connect(Settings::default(), "test", Instant::now()),
            buf: vec![0; 65536],
        };
        p.flush();
        p.read_until(|i, _| i == Input::Connected);
        p.send(&testing::eta_login(1));
        p.read_until(|_, m| {
            m.is_some_and(|m| (m.domain, m.class) == (domain::LOGIN, class::REFRESH))
        });
        p.send(&testing::service_up(
            -1,
            testing::DirectoryMsg::Unsolicited,
            7,
            b"PROV",
        ));
        let before = refreshes_in(ws);
        for i in 0..ITEMS {
            p.channel
                .send(&testing::item_refresh(-10 - i, 7, &format!("I{i}")));
        }
        p.flush();
        p.pump_until(ws, before + ITEMS as u64);
        p
    }

    fn send(&mut self, msg: &[u8]) {
        self.channel.send(msg);
        self.flush();
    }

    fn flush(&mut self) {
        self.channel.end_batch();
        while !self.channel.transmit().is_empty() {
            let n = self.socket.write(self.channel.transmit()).unwrap();
            self.channel.consume(n);
        }
    }

    /// Reads what the node sends once (a short wait); false if the node closed.
    fn read_once(&mut self) -> bool {
        match self.socket.read(&mut self.buf) {
            Ok(0) => false,
            Ok(n) => {
                self.channel.handle_bytes(&self.buf[..n], Instant::now());
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => true,
            Err(e) => panic!("{e}"),
        }
    }

    fn read_until(&mut self, want: impl Fn(Input, Option<&Msg<'_>>) -> bool) {
        let start = Instant::now();
        let mut msg = Vec::new();
        loop {
            assert!(start.elapsed() < LIMIT, "no answer from the node");
            while let Some(input) = self.channel.poll(&mut msg).unwrap() {
                let m = (input == Input::Message).then(|| Msg::decode(&msg).unwrap());
                if want(input, m.as_ref()) {
                    return;
                }
            }
            assert!(self.read_once(), "the node closed the connection");
        }
    }

    /// Reads until the node's core counts `refreshes` refreshes in (its own items'
    /// among them); panics if the node closes the connection first.
    fn pump_until(&mut self, ws: SocketAddr, refreshes: u64) {
        let start = Instant::now();
        let mut checked = Instant::now();
        loop {
            assert!(
                start.elapsed() < LIMIT,
                "{} of {refreshes} refreshes in after {LIMIT:?}",
                refreshes_in(ws)
            );
            assert!(self.read_once(), "the node closed the connection");
            while let Ok(Some(_)) = self.channel.poll(&mut Vec::new()) {}
            if checked.elapsed() >= Duration::from_millis(200) {
                checked = Instant::now();
                if refreshes_in(ws) >= refreshes {
                    return;
                }
            }
        }
    }

    /// News for the default group that reaches every item: `n` messages, suspect and
    /// ok in turn, sent at once.
    fn group_news(&mut self, n: usize) {
        for k in 0..n {
            let d = if k % 2 == 0 { data::SUSPECT } else { data::OK };
            self.channel.send(&testing::group_update(
                -1,
                7,
                &[(testing::DEFAULT_GROUP, None, Some((stream::OPEN, d)))],
            ));
        }
        self.flush();
    }
}

fn node(heartbeat_ms: u64) -> (RunningNode, SocketAddr) {
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.limits.heartbeat_ms = heartbeat_ms;
    // Its HTTP has /metrics.
    cfg.websocket.listen = "127.0.0.1:0".into();
    let node = NodeServer::spawn(cfg).unwrap();
    let ws = node.ws_addr.expect("the WebSocket API's HTTP");
    (node, ws)
}

/// The node's count of refreshes taken in, from /metrics.
fn refreshes_in(ws: SocketAddr) -> u64 {
    let mut h = TcpStream::connect(ws).unwrap();
    h.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    h.read_to_string(&mut text).unwrap();
    text.lines()
        .find(|l| l.contains("refreshes_in") && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// An item sent while group news keeps the node busy for many turns, and nothing after
/// it: the node reads it once the news is handled (the socket's readiness was taken by
/// the turn that left the backlog). The item is sent a moment after the news, so that
/// the node has read the news before it comes (were it read with them, it would be
/// handled with them: the test would pass without telling anything).
#[test]
fn what_comes_during_a_backlog_is_read_after_it() {
    let (node, ws) = node(60_000);
    let mut p = Provider::publishing(&node, ws);
    let before = refreshes_in(ws);
    p.group_news(100);
    std::thread::sleep(Duration::from_millis(50));
    p.send(&testing::item_refresh(-5, 7, "LAST"));
    p.pump_until(ws, before + 1);
}
