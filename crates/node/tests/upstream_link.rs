//! The upstream link of a node in this process, over real sockets: what it does while
//! its upstream cannot be reached.

use std::net::TcpListener;
use std::time::{Duration, Instant};
use tickwire_node::config::NodeConfig;
use tickwire_node::NodeServer;

/// CPU time (clock ticks) of this process's thread named `name`.
fn thread_ticks(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        if std::fs::read_to_string(dir.join("comm")).ok()?.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let (user, system) = (fields.get(11)?, fields.get(12)?);
        return Some(user.parse::<u64>().ok()? + system.parse::<u64>().ok()?);
    }
    None
}

/// A refused connect leaves the link waiting for its next attempt, not polling a socket
/// it no longer has: the event loop is idle between attempts. (It once took a whole CPU
/// for as long as the upstream was down.)
#[test]
fn a_node_whose_upstream_refuses_connections_is_idle_between_attempts() {
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.upstream.nodes = vec![refused.to_string()];
    cfg.upstream.reconnect_min_ms = 5_000;
    cfg.upstream.reconnect_max_ms = 5_000;
    let _node = NodeServer::spawn(cfg).unwrap();
    // The first attempt is made at once and refused within milliseconds; over the next
    // second (well inside the 5 s backoff) the loop has nothing to do.
    let deadline = Instant::now() + Duration::from_secs(10);
    let start = loop {
        if let Some(t) = thread_ticks("tickwire-node") {
            break t;
        }
        assert!(Instant::now() < deadline, "no thread tickwire-node");
        std::thread::sleep(Duration::from_millis(10));
    };
    std::thread::sleep(Duration::from_millis(300));
    let from = thread_ticks("tickwire-node").unwrap();
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_ticks("tickwire-node").unwrap() - from;
    let wall_ticks = window.elapsed().as_millis() as u64 / 10;
    // A spinning loop takes every tick it is given (a third of them even with two CPU
    // hogs beside it); an idle one next to none.
    assert!(
        used * 5 < wall_ticks,
        "the event loop used {used} of {wall_ticks} clock ticks while waiting to reconnect \
         (since its start: {})",
        from - start
    );
}
