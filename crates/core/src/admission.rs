//! Who may start logging in, and how fast a login may fail.
//!
//! - **Pending logins** (connections that have not logged in yet) are capped in all
//!   (`Limits::max_pending_logins`) and per address
//!   (`Limits::max_pending_logins_per_address`). At either cap a newcomer is not
//!   refused while an idle pending connection (one that has not sent a whole login
//!   yet) can make room: the oldest such connection (of the newcomer's address, at
//!   that address's cap) is closed. So connections that trickle bytes to hold their
//!   slot cannot lock real users out: a real login sends its login at once and is
//!   verified, and only the connections that never did are closed.
//! - **Failed logins** (a wrong secret, an unknown user, a bad token) are throttled
//!   per address and per user: past a few free ones, after each failure the next
//!   attempt from that address, or for that user, is refused without a check until a
//!   delay has passed, doubling with each failure up to a ceiling. A success clears
//!   them; so does a quiet hour. A user's hold-off spares the addresses it logged in
//!   from lately: anyone may fail in its name, and would otherwise keep it out.

use crate::{code, ConnId, ConnRole, Node};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::Hash;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use tracing::warn;

/// Whether a new connection may start logging in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Let it log in.
    Admit,
    /// Refused, with the reason to tell it.
    Refuse(String),
}

/// Failures in a row that cost nothing: a user mistyping a password a few times.
const FREE_FAILURES: u32 = 3;
/// The delay after the first failure past those; it doubles with each further one.
const FIRST_DELAY: Duration = Duration::from_millis(250);
/// The longest delay after failures from one address.
const MAX_ADDRESS_DELAY: Duration = Duration::from_secs(30);
/// The longest delay after failures for one user: shorter, since anyone may fail in
/// a user's name and so hold that user off.
const MAX_USER_DELAY: Duration = Duration::from_secs(5);
/// Failures are forgotten after this long without one.
const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Addresses and users with failures remembered at most (each side): past it the
/// oldest are forgotten, so a flood of addresses costs bounded memory.
const MAX_REMEMBERED: usize = 65_536;
/// How long an address a user logged in from stays the user's own: failures in the
/// user's name (which anyone may make, from anywhere) do not hold its logins from
/// there off, or one wrong secret every few seconds would keep the user out for good.
const KNOWN_FOR: Duration = Duration::from_secs(24 * 3600);

/// The addresses users logged in from lately, with when (at most [`MAX_REMEMBERED`]).
#[derive(Debug, Default)]
struct KnownAddresses {
    by_pair: FxHashMap<(IpAddr, String), Instant>,
}

impl KnownAddresses {
    fn logged_in(&mut self, ip: IpAddr, user: &str, now: Instant) {
        let key = (ip, user.to_string());
        if self.by_pair.len() >= MAX_REMEMBERED && !self.by_pair.contains_key(&key) {
            self.by_pair
                .retain(|_, at| now.saturating_duration_since(*at) < KNOWN_FOR);
            if self.by_pair.len() >= MAX_REMEMBERED {
                // Still full of recent ones: forget the oldest half.
                let mut ats: Vec<Instant> = self.by_pair.values().copied().collect();
                let (_, median, _) = ats.select_nth_unstable(MAX_REMEMBERED / 2);
                let median = *median;
                self.by_pair.retain(|_, at| *at > median);
            }
        }
        self.by_pair.insert(key, now);
    }

    fn knows(&self, ip: IpAddr, user: &str, now: Instant) -> bool {
        self.by_pair
            .get(&(ip, user.to_string()))
            .is_some_and(|at| now.saturating_duration_since(*at) < KNOWN_FOR)
    }
}

/// Failed logins of one kind of key (an address, a user).
#[derive(Debug)]
struct Failures<K> {
    by_key: FxHashMap<K, Penalty>,
    max_delay: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Penalty {
    count: u32,
    /// No attempt is checked before this.
    until: Instant,
    last: Instant,
}

impl<K: Hash + Eq + Clone> Failures<K> {
    fn new(max_delay: Duration) -> Self {
        Failures {
            by_key: FxHashMap::default(),
            max_delay,
        }
    }

    fn failed(&mut self, key: &K, now: Instant) -> Duration {
        if self.by_key.len() >= MAX_REMEMBERED && !self.by_key.contains_key(key) {
            self.by_key
                .retain(|_, p| now.saturating_duration_since(p.last) < FORGET_AFTER);
            if self.by_key.len() >= MAX_REMEMBERED {
                // Still full of recent ones: forget the oldest half.
                let mut lasts: Vec<Instant> = self.by_key.values().map(|p| p.last).collect();
                let (_, median, _) = lasts.select_nth_unstable(MAX_REMEMBERED / 2);
                let median = *median;
                self.by_key.retain(|_, p| p.last > median);
            }
        }
        let p = self.by_key.entry(key.clone()).or_insert(Penalty {
            count: 0,
            until: now,
            last: now,
        });
        if now.saturating_duration_since(p.last) >= FORGET_AFTER {
            p.count = 0;
        }
        p.count = p.count.saturating_add(1);
        let delay = match p.count.checked_sub(FREE_FAILURES + 1) {
            None => Duration::ZERO,
            Some(doublings) => FIRST_DELAY
                .saturating_mul(1u32 << doublings.min(16))
                .min(self.max_delay),
        };
        p.until = now + delay;
        p.last = now;
        delay
    }

    fn cleared(&mut self, key: &K) {
        self.by_key.remove(key);
    }

    /// While `key` is held off: its failures and how long it still waits.
    fn held_off(&self, key: &K, now: Instant) -> Option<(u32, Duration)> {
        let p = self.by_key.get(key)?;
        (now < p.until).then(|| (p.count, p.until - now))
    }
}

/// The state behind [`Node::admit`] and the login throttle.
#[derive(Debug)]
pub(crate) struct LoginGuard {
    /// Pending logins per address.
    pending_by_address: FxHashMap<IpAddr, u32>,
    /// Connections that were pending logins, oldest first, with when they connected
    /// (a reused id with another time is someone else); those that have logged in or
    /// gone are skipped and dropped as they are met.
    queue: VecDeque<(ConnId, Instant)>,
    by_address: Failures<IpAddr>,
    by_user: Failures<String>,
    /// Where each user logged in from lately: not held off by the user's failures.
    known: KnownAddresses,
    /// Warnings about connections closed before they logged in.
    pub(crate) prelogin_log: QuietLog,
}

impl Default for LoginGuard {
    fn default() -> Self {
        LoginGuard {
            pending_by_address: FxHashMap::default(),
            queue: VecDeque::new(),
            by_address: Failures::new(MAX_ADDRESS_DELAY),
            by_user: Failures::new(MAX_USER_DELAY),
            known: KnownAddresses::default(),
            prelogin_log: QuietLog::default(),
        }
    }
}

/// How many warnings a [`QuietLog`] lets through a window.
const QUIET_LOG_PER_WINDOW: u32 = 20;
const QUIET_LOG_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Warnings of one kind that a peer can cause at will (a connection closed before it
/// logged in, a failed TLS handshake): at most 20 each 10 s, the rest counted and said
/// with the next one logged, so that a flood of connections does not flood the log.
#[derive(Debug, Default)]
pub struct QuietLog {
    window: Option<Instant>,
    logged: u32,
    held: u64,
}

impl QuietLog {
    /// Whether to log one now; if so, how many were held back since the last logged.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .window
            .is_none_or(|w| now.saturating_duration_since(w) >= QUIET_LOG_WINDOW)
        {
            self.window = Some(now);
            self.logged = 0;
        }
        if self.logged < QUIET_LOG_PER_WINDOW {
            self.logged += 1;
            return Some(std::mem::take(&mut self.held));
        }
        self.held += 1;
        None
    }
}

impl Node {
    /// Whether a new connection from `peer` ("IP:port") may start logging in. At the
    /// caps on pending logins, the oldest connection that has not sent a whole login
    /// yet is closed to make room (of the same address at that address's cap); with
    /// none to close, the newcomer is refused with the reason.
    pub fn admit(&mut self, peer: &str, now: Instant) -> Admission {
        self.now = now;
        let ip = peer_ip(peer);
        let per_address = self.cfg.limits.max_pending_logins_per_address;
        if let Some(ip) = ip {
            let pending = self.guard.pending_by_address.get(&ip).copied().unwrap_or(0);
            if pending as usize >= per_address && !self.close_oldest_idle_login(Some(ip)) {
                return Admission::Refuse(format!(
                    "too many connections from {ip} waiting to log in: {per_address} (limits.max_pending_logins_per_address)"
                ));
            }
        }
        let max = self.cfg.limits.max_pending_logins;
        if self.awaiting_login >= max && !self.close_oldest_idle_login(None) {
            return Admission::Refuse(format!(
                "too many connections waiting to log in: {max} (limits.max_pending_logins)"
            ));
        }
        Admission::Admit
    }

    /// Closes the oldest pending login (of `ip`, if given) that has not sent a whole
    /// login; false if there is none.
    fn close_oldest_idle_login(&mut self, ip: Option<IpAddr>) -> bool {
        let mut i = 0;
        while i < self.guard.queue.len() {
            let (conn, at) = self.guard.queue[i];
            let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
                self.guard.queue.remove(i);
                continue;
            };
            if c.connected_at != at || c.role != ConnRole::AwaitingLogin {
                self.guard.queue.remove(i);
                continue;
            }
            let idle =
                c.pending_login.is_none() && c.http.as_ref().is_none_or(|h| !h.is_checking());
            if !idle || ip.is_some_and(|ip| c.ip != Some(ip)) {
                i += 1;
                continue;
            }
            self.guard.queue.remove(i);
            self.stats.idle_logins_closed += 1;
            let waited = self.now.saturating_duration_since(at).as_millis();
            self.reject(
                conn,
                code::TIMEOUT,
                &format!(
                    "no login after {waited} ms, and newer connections are waiting to log in (limits.max_pending_logins)"
                ),
            );
            return true;
        }
        false
    }

    /// A connection started waiting to log in.
    pub(crate) fn login_pending(&mut self, conn: ConnId, ip: Option<IpAddr>, now: Instant) {
        if let Some(ip) = ip {
            *self.guard.pending_by_address.entry(ip).or_default() += 1;
        }
        self.guard.queue.push_back((conn, now));
        // Entries of connections that logged in long ago are dropped now and then, so
        // the queue stays within a few times the pending logins.
        if self.guard.queue.len() > 4 * self.cfg.limits.max_pending_logins + 64 {
            let conns = &self.conns;
            self.guard.queue.retain(|&(id, at)| {
                conns
                    .get(id)
                    .and_then(|c| c.as_ref())
                    .is_some_and(|c| c.connected_at == at && c.role == ConnRole::AwaitingLogin)
            });
        }
    }

    /// A pending login ended (logged in, or gone).
    pub(crate) fn login_no_longer_pending(&mut self, ip: Option<IpAddr>) {
        let Some(ip) = ip else { return };
        if let Some(n) = self.guard.pending_by_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.guard.pending_by_address.remove(&ip);
            }
        }
    }

    /// Why a login of `user` on `conn` is not checked now (failures from its address,
    /// or for its user, not long ago), if it is not.
    pub(crate) fn login_held_off(&self, conn: ConnId, user: &str) -> Option<String> {
        let now = self.now;
        let c = self.conns.get(conn)?.as_ref()?;
        if c.internal {
            return None;
        }
        if let Some(ip) = c.ip {
            if let Some((n, wait)) = self.guard.by_address.held_off(&ip, now) {
                return Some(format!(
                    "login refused: {n} failed logins from {ip} lately; try again in {} ms",
                    wait.as_millis().max(1)
                ));
            }
            if self.guard.known.knows(ip, user, now) {
                return None;
            }
        }
        let (n, wait) = self.guard.by_user.held_off(&user.to_string(), now)?;
        Some(format!(
            "login refused: {n} failed logins for user {} lately; try again in {} ms",
            shown(user),
            wait.as_millis().max(1)
        ))
    }

    /// A login on `conn` as `user` failed its check.
    pub(crate) fn login_failed(&mut self, conn: ConnId, user: &str) {
        let now = self.now;
        let ip = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.ip);
        self.stats.logins_failed += 1;
        let by_user = self.guard.by_user.failed(&user.to_string(), now);
        let by_address = ip.map(|ip| self.guard.by_address.failed(&ip, now));
        if by_address.is_some_and(|d| d >= MAX_ADDRESS_DELAY) || by_user >= MAX_USER_DELAY {
            warn!(
                target: "audit",
                user = %shown(user), address = ?ip,
                "failed logins go on: each further attempt waits {} ms ({} for the user)",
                by_address.unwrap_or_default().as_millis(),
                by_user.as_millis()
            );
        }
    }

    /// A login on `conn` as `user` passed its check.
    pub(crate) fn login_succeeded(&mut self, conn: ConnId, user: &str) {
        let ip = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.ip);
        self.guard.by_user.cleared(&user.to_string());
        if let Some(ip) = ip {
            self.guard.by_address.cleared(&ip);
            self.guard.known.logged_in(ip, user, self.now);
        }
    }
}

/// The address a peer described as "IP:port" is counted by (the node's own in-process
/// peers have none): its IPv4 address, or its IPv6 address's /64, since one IPv6 host
/// has a /64 of addresses to pick from (counted one by one, each new address came
/// with pending logins and failed logins of its own).
pub(crate) fn peer_ip(peer: &str) -> Option<IpAddr> {
    let ip = peer.parse::<std::net::SocketAddr>().ok()?.ip();
    Some(counted_address(ip))
}

/// The address a peer's share of a per-address limit is kept under: its IPv4 address
/// (an IPv4 address in IPv6 form too), or its IPv6 address's /64, since one IPv6 host
/// has a /64 of addresses to pick from.
pub fn counted_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) if !v6.is_loopback() => {
            IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into())
        }
        ip => ip,
    }
}

/// Longest user or application name shown in logs and refusals whole.
const SHOWN_CHARS: usize = 64;

/// A name from a peer as logs and refusals show it: quoted, and past
/// [`SHOWN_CHARS`] characters cut, with its length, so that no peer can make a log
/// line long.
pub(crate) fn shown(name: &str) -> String {
    match name.char_indices().nth(SHOWN_CHARS) {
        None => format!("{name:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &name[..cut], name.len()),
    }
}

/// A peer's name (a user, an application) as a log field: as it is when it is plain,
/// quoted and escaped as `shown` does when it holds a space, `=`, a quote, a backslash
/// or a control character. Else a name such as `bob role=Publisher` added fields of the
/// peer's making to the record, and a control character a line or a terminal escape.
pub(crate) struct LogName<'a>(pub(crate) &'a str);

impl std::fmt::Display for LogName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plain =
            |c: char| !(c.is_whitespace() || c.is_control() || matches!(c, '=' | '"' | '\\'));
        let short = self.0.chars().nth(SHOWN_CHARS).is_none();
        if short && self.0.chars().all(plain) {
            f.write_str(self.0)
        } else {
            f.write_str(&shown(self.0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_name_is_plain_or_quoted_never_a_field_or_a_line_of_its_own() {
        assert_eq!(LogName("alice").to_string(), "alice");
        assert_eq!(LogName("ws:256").to_string(), "ws:256");
        assert_eq!(LogName("").to_string(), "");
        assert_eq!(
            LogName("bob role=Publisher").to_string(),
            "\"bob role=Publisher\""
        );
        assert_eq!(LogName("x\n2026 INFO").to_string(), "\"x\\n2026 INFO\"");
        assert_eq!(
            LogName("c1\u{9b}31m\u{85}").to_string(),
            "\"c1\\u{9b}31m\\u{85}\""
        );
        assert_eq!(LogName("a\u{2028}b").to_string(), "\"a\\u{2028}b\"");
        assert!(LogName(&"n".repeat(100))
            .to_string()
            .ends_with("(100 bytes)"));
    }

    #[test]
    fn delays_double_from_a_quarter_second_to_their_ceiling_and_a_success_clears_them() {
        let mut f = Failures::<u32>::new(Duration::from_secs(5));
        let t = Instant::now();
        let delays: Vec<u128> = (0..10).map(|_| f.failed(&1, t).as_millis()).collect();
        assert_eq!(delays, [0, 0, 0, 250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(f.held_off(&1, t), Some((10, Duration::from_secs(5))));
        assert_eq!(f.held_off(&1, t + Duration::from_secs(5)), None);
        assert_eq!(f.held_off(&2, t), None);
        f.cleared(&1);
        assert_eq!(f.held_off(&1, t), None);
    }

    #[test]
    fn failures_are_forgotten_after_a_quiet_hour() {
        let mut f = Failures::<u32>::new(Duration::from_secs(30));
        let t = Instant::now();
        for _ in 0..5 {
            f.failed(&1, t);
        }
        let later = t + FORGET_AFTER;
        assert_eq!(f.failed(&1, later), Duration::ZERO);
        assert_eq!(f.by_key[&1].count, 1);
    }

    #[test]
    fn remembered_keys_stay_bounded() {
        let mut f = Failures::<u32>::new(Duration::from_secs(30));
        let t = Instant::now();
        for k in 0..(MAX_REMEMBERED as u32 + 10) {
            f.failed(&k, t + Duration::from_micros(k as u64));
        }
        assert!(f.by_key.len() <= MAX_REMEMBERED);
        // The newest are kept.
        assert!(f.held_off(&(MAX_REMEMBERED as u32 + 9), t).is_some());
    }

    #[test]
    fn long_names_are_cut_with_their_length() {
        assert_eq!(shown("alice"), "\"alice\"");
        let long = "x".repeat(65_000);
        let s = shown(&long);
        assert!(s.len() < 100, "{s}");
        assert!(s.ends_with("... (65000 bytes)"), "{s}");
        // Cut on a character boundary.
        let wide = "é".repeat(100);
        assert!(shown(&wide).contains("(200 bytes)"));
    }

    #[test]
    fn a_peer_address_is_read_from_ip_and_port() {
        assert_eq!(
            peer_ip("127.0.0.2:4000"),
            Some("127.0.0.2".parse().unwrap())
        );
        assert_eq!(peer_ip("[::1]:4000"), Some("::1".parse().unwrap()));
        assert_eq!(peer_ip("backbone"), None);
    }

    /// One IPv6 host has a /64 of addresses to pick from: counted one by one, each
    /// new address had its own pending logins and free failures, and the failed-login
    /// hold-off of an address never held such a host off. An IPv4 address in IPv6
    /// form is its IPv4 address.
    #[test]
    fn ipv6_peers_are_counted_by_their_64_bit_prefix() {
        assert_eq!(
            peer_ip("[2001:db8:1:2:aaaa::1]:4000"),
            peer_ip("[2001:db8:1:2::9]:5")
        );
        assert_eq!(
            peer_ip("[2001:db8:1:2:aaaa::1]:4000"),
            Some("2001:db8:1:2::".parse().unwrap())
        );
        assert_ne!(
            peer_ip("[2001:db8:1:3::1]:4000"),
            peer_ip("[2001:db8:1:2::1]:4000")
        );
        assert_eq!(
            peer_ip("[::ffff:10.1.2.3]:4000"),
            Some("10.1.2.3".parse().unwrap())
        );
        assert_ne!(
            peer_ip("[::ffff:10.1.2.3]:1"),
            peer_ip("[::ffff:10.1.2.4]:1")
        );
    }
}
