//! Free UDP ports for a backbone on loopback (the demo, the lab, the tests): two side by
//! side, the data's and, above it, the files' (`files_channel`'s default port). They are
//! taken below the kernel's ephemeral range: a port the kernel hands out for a bind to
//! port 0, in this process or any other, is never one of them, so none is taken between
//! this check and the node's own bind.

use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port tried.
const LOW: u32 = 20_000;

/// A port whose next one is free too, both on 127.0.0.1 a moment ago; None if none is.
/// Each process starts at a place of its own (so that processes side by side rarely
/// try the same) and moves on with each pick.
pub fn free_port_pair() -> Option<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let below = ephemeral_start().max(LOW + 2);
    let pairs = (below - LOW) / 2;
    let start = std::process::id().wrapping_mul(2_654_435_761) % pairs;
    let free = |p: u16| std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok();
    (0..pairs).find_map(|_| {
        let pair = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % pairs;
        let port = (LOW + 2 * pair) as u16;
        (free(port) && free(port + 1)).then_some(port)
    })
}

/// Where the kernel's ephemeral ports start (Linux's default, 32768, if it cannot be
/// read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_free_below_the_ephemeral_range_and_picks_move_on() {
        let a = free_port_pair().expect("a free pair");
        let b = free_port_pair().expect("another");
        assert_ne!(a, b);
        for p in [a, b] {
            assert!(u32::from(p) >= LOW && u32::from(p) + 1 < ephemeral_start().max(LOW + 2));
            assert!(std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok());
            assert!(std::net::UdpSocket::bind(("127.0.0.1", p + 1)).is_ok());
        }
    }
}
