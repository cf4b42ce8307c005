//! A node's links to the nodes and providers it is fed by (an upstream node, an
//! interactive RSSL provider), in this process, over real sockets: what they cost while
//! the other side cannot be reached.

use std::net::TcpListener;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tickwire_node::config::NodeConfig;
use tickwire_node::NodeServer;

/// One node at a time: the event loop is found by its thread's name, so a second
/// node's thread (starting, or ending with its test) would be counted with it.
fn one_node_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// CPU time (clock ticks) of this process's threads named `name`, if there is one.
/// Threads that end while they are read (the test harness's own) are passed over.
fn thread_ticks(name: &str) -> Option<u64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if comm.trim() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let (user, system) = (fields.get(11)?, fields.get(12)?);
        *total.get_or_insert(0) += user.parse::<u64>().ok()? + system.parse::<u64>().ok()?;
    }
    total
}

/// The event loop's CPU ticks over one second, from a moment well after the node
/// started (its first connects made and refused).
fn loop_ticks_over_a_second() -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while thread_ticks("tickwire-node").is_none() {
        assert!(Instant::now() < deadline, "no thread tickwire-node");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let from = thread_ticks("tickwire-node").expect("the event loop's thread has ended");
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let to = thread_ticks("tickwire-node").expect("the event loop's thread has ended");
    let used = to - from;
    (used, window.elapsed().as_millis() as u64 / 10)
}

/// An address nothing listens on.
fn refused_address() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// Starts a node of `cfg` on a port of its own, whose links cannot connect, and checks
/// that its event loop is all but idle over a second of waiting to reconnect: a spinning
/// loop takes every tick it is given (a third of them even with two CPU hogs beside it);
/// an idle one next to none.
fn assert_idle_while_waiting_to_reconnect(mut cfg: NodeConfig) {
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    let _serial = one_node_at_a_time();
    let _node = NodeServer::spawn(cfg).unwrap();
    let (used, wall) = loop_ticks_over_a_second();
    assert!(
        used * 5 < wall,
        "the event loop used {used} of {wall} clock ticks while waiting to reconnect"
    );
}

/// The same for an interactive RSSL provider the node connects to as a consumer.
#[test]
fn a_node_whose_rssl_provider_refuses_connections_is_idle_between_attempts() {
    let mut cfg = NodeConfig::default();
    cfg.rssl.providers = vec![tickwire_node::config::RsslProviderSection {
        address: refused_address().to_string(),
        ..Default::default()
    }];
    assert_idle_while_waiting_to_reconnect(cfg);
}

/// A refused connect leaves the link waiting for its next attempt, not polling a socket
/// it no longer has: the event loop is idle between attempts. (It once took a whole CPU
/// for as long as the upstream was down.)
#[test]
fn a_node_whose_upstream_refuses_connections_is_idle_between_attempts() {
    let mut cfg = NodeConfig::default();
    cfg.upstream.nodes = vec![refused_address().to_string()];
    // The first attempt is made at once and refused within milliseconds; the second
    // second is well inside the 5 s backoff, with nothing to do.
    cfg.upstream.reconnect_min_ms = 5_000;
    cfg.upstream.reconnect_max_ms = 5_000;
    assert_idle_while_waiting_to_reconnect(cfg);
}
