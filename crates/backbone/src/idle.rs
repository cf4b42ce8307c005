//! How the thread that runs the embedded media driver waits when it has nothing to do.
//!
//! A driver in the node's process needs a duty cycle whenever a datagram arrives, a
//! message was offered, or one of Aeron's timers is due. The classic answers keep the
//! thread polling (`yield`, `spin`: a CPU busy even at rest) or sleep between polls
//! (`sleep`, `backoff`: a CPU mostly idle, but what arrives during a sleep waits for
//! its end). `adaptive` and `block` park in epoll instead, on the driver's own sockets
//! beside the node's: a datagram wakes the thread at once, and at rest it costs nothing.
//! `adaptive` keeps polling through short pauses while work keeps coming back
//! ([`SpinThenPark`]), so that under load it answers as `yield` does, without a wake-up.

use std::time::{Duration, Instant};

/// How a thread running the driver waits when it has nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleStrategy {
    /// Poll through a pause while recent pauses were short (work keeps coming), else
    /// park in epoll until a socket is readable or a timer is due ([`SpinThenPark`]).
    Adaptive,
    /// Always park in epoll when there is nothing to do: the least CPU, one wake-up
    /// per burst of work.
    Block,
    /// Yield the CPU to the OS between polls: a CPU busy all the time, at rest too.
    Yield,
    /// Aeron's back-off: spin, then yield, then sleep up to `max_park`; what arrives
    /// during a sleep waits for its end.
    Backoff,
    /// Sleep 1 ms between empty polls: a millisecond of latency.
    Sleep,
    /// Never stop polling: a core of its own per thread.
    Spin,
}

impl IdleStrategy {
    /// Every value, as `[backbone] idle` spells it.
    pub const NAMES: &'static str = "adaptive, block, yield, backoff, sleep, spin";

    /// A strategy from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "adaptive" => IdleStrategy::Adaptive,
            "block" => IdleStrategy::Block,
            "yield" => IdleStrategy::Yield,
            "backoff" => IdleStrategy::Backoff,
            "sleep" => IdleStrategy::Sleep,
            "spin" => IdleStrategy::Spin,
            _ => return None,
        })
    }

    /// Its config spelling.
    pub fn name(self) -> &'static str {
        match self {
            IdleStrategy::Adaptive => "adaptive",
            IdleStrategy::Block => "block",
            IdleStrategy::Yield => "yield",
            IdleStrategy::Backoff => "backoff",
            IdleStrategy::Sleep => "sleep",
            IdleStrategy::Spin => "spin",
        }
    }

    /// Whether the thread parks in epoll on the driver's sockets (the caller then
    /// waits, with [`SpinThenPark`]'s advice) rather than in Aeron's own idle strategy.
    pub fn parks(self) -> bool {
        matches!(self, IdleStrategy::Adaptive | IdleStrategy::Block)
    }

    /// The name the media driver knows the strategy by. The parking ones have none:
    /// their driver's own thread, which runs it only while the link is set up, backs
    /// off as Aeron does.
    pub(crate) fn driver_name(self) -> &'static std::ffi::CStr {
        match self {
            IdleStrategy::Yield => c"yield",
            IdleStrategy::Backoff | IdleStrategy::Adaptive | IdleStrategy::Block => c"backoff",
            IdleStrategy::Sleep => c"sleeping",
            IdleStrategy::Spin => c"spin",
        }
    }
}

/// The first park after work: short, because Aeron may have a timer due soon after
/// what it just did (a NAK's back-off, a retransmission's linger: tens of microseconds
/// to a millisecond), and it has no way to say when. One millisecond: epoll's
/// granularity.
pub(crate) const FIRST_PARK: Duration = Duration::from_millis(1);
/// The longest park: parks grow fourfold from [`FIRST_PARK`] up to this while nothing
/// comes. Aeron's timers at rest (a heartbeat every 100 ms, a status message every
/// 200 ms, a client's keep-alive every 500 ms, liveness in seconds) tolerate being
/// this late; the node's own timers wake it on time.
pub(crate) const MAX_PARK: Duration = Duration::from_millis(50);
/// How much longer each park is than the one before while nothing comes: each wake-up
/// at rest costs tens of microseconds of CPU on a virtual machine, so few of them.
const PARK_GROWTH: u32 = 4;
/// How many pauses shorter than the spin limit in a row, since the last longer one,
/// make the adaptive wait poll: enough that a lone pair of messages at rest (a
/// heartbeat and a probe) does not, few enough that a steady load after a hiccup is
/// polled again within a few bursts.
const SHORT_PAUSES_TO_POLL: u32 = 3;

/// The adaptive wait: after a turn, poll again (yielding the CPU) or park, and for how
/// long at most.
///
/// Polling through a pause costs its length in CPU and saves a wake-up (tens of
/// microseconds on a virtual machine) when work comes back before the pause ends. The
/// policy polls for up to `spin_limit` after the last work when the last
/// `SHORT_PAUSES_TO_POLL` pauses between pieces of work were all shorter than
/// `spin_limit` (work keeps coming); otherwise it parks at once. At rest (heartbeats every 100 ms),
/// or with bursts further apart than `spin_limit`, it never polls; under a steady load
/// (a burst every millisecond) it never parks. A `spin_limit` of zero never polls:
/// [`IdleStrategy::Block`].
#[derive(Debug, Clone)]
pub struct SpinThenPark {
    spin_limit: Duration,
    last_work: Option<Instant>,
    /// Pauses shorter than `spin_limit` in a row, up to the last work.
    short_pauses: u32,
    /// Whether the last turn said to poll again: a pause that ends then was the thread
    /// kept off the CPU (by the scheduler, on a busy machine), not a pause in the work.
    polled_last: bool,
    /// The next park's length.
    park: Duration,
    /// Turns that polled again rather than park.
    pub polls: u64,
    /// Turns that parked.
    pub parks: u64,
}

/// What the thread does after a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Poll again now (yield the CPU first).
    Poll,
    /// Park until woken, for this long at most.
    Park(Duration),
}

impl SpinThenPark {
    /// A policy polling through pauses shorter than `spin_limit` while work keeps coming.
    pub fn new(spin_limit: Duration) -> Self {
        SpinThenPark {
            spin_limit,
            last_work: None,
            short_pauses: 0,
            polled_last: false,
            park: FIRST_PARK,
            polls: 0,
            parks: 0,
        }
    }

    /// For a strategy: `adaptive` polls through pauses up to `spin_limit`, `block`
    /// never does.
    pub fn for_strategy(idle: IdleStrategy, spin_limit: Duration) -> Self {
        match idle {
            IdleStrategy::Adaptive => SpinThenPark::new(spin_limit),
            _ => SpinThenPark::new(Duration::ZERO),
        }
    }

    /// After a turn that did `work` (0: none) at `now`: poll again, or park. `work`
    /// counts what came from outside (a socket readable, a message received), not
    /// what the thread's own timers did: that is no sign of more to come.
    pub fn after_turn(&mut self, now: Instant, work: usize) -> Wait {
        if work > 0 {
            let long = self.last_work.is_none_or(|last| {
                now.saturating_duration_since(last) >= self.spin_limit && !self.polled_last
            });
            self.short_pauses = if long {
                0
            } else {
                self.short_pauses.saturating_add(1)
            };
            self.last_work = Some(now);
            self.park = FIRST_PARK;
        }
        self.polled_last = self.polling(now);
        if self.polled_last {
            self.polls += 1;
            return Wait::Poll;
        }
        self.parks += 1;
        let park = self.park;
        if work == 0 {
            self.park = (self.park * PARK_GROWTH).min(MAX_PARK);
        }
        Wait::Park(park)
    }

    /// Whether work keeps coming at `now`: the last work is less than `spin_limit`
    /// ago, and so were the pauses before it.
    pub fn polling(&self, now: Instant) -> bool {
        self.short_pauses >= SHORT_PAUSES_TO_POLL
            && self
                .last_work
                .is_some_and(|work| now.saturating_duration_since(work) < self.spin_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPIN: Duration = Duration::from_millis(2);

    /// Drives the policy through bursts of work `every` apart, each followed by idle
    /// turns 10 µs apart until the next; returns what it did in the last pause.
    fn run(p: &mut SpinThenPark, start: Instant, every: Duration, bursts: u32) -> Vec<Wait> {
        let mut last_pause = Vec::new();
        for b in 0..bursts {
            let at = start + every * b;
            p.after_turn(at, 3);
            last_pause.clear();
            let mut t = at + Duration::from_micros(10);
            while t < at + every {
                let w = p.after_turn(t, 0);
                last_pause.push(w);
                // A park lasts until its end (nothing wakes it before the next burst).
                t += match w {
                    Wait::Poll => Duration::from_micros(10),
                    Wait::Park(d) => d,
                };
            }
        }
        last_pause
    }

    /// A policy after 40 ms of a burst every millisecond, and the time of the last
    /// burst, after which it still polls.
    fn polling_after_a_steady_load() -> (SpinThenPark, Instant) {
        let mut p = SpinThenPark::new(SPIN);
        let start = Instant::now();
        run(&mut p, start, Duration::from_millis(1), 40);
        let last = start + Duration::from_millis(40);
        p.after_turn(last, 1);
        assert_eq!(p.after_turn(last + SPIN / 2, 0), Wait::Poll);
        (p, last)
    }

    #[test]
    fn a_steady_load_is_polled_through_and_never_parks() {
        let mut p = SpinThenPark::new(SPIN);
        let start = Instant::now();
        // For its first bursts it parks (the load came after a pause).
        let pause = run(&mut p, start, Duration::from_millis(1), 2);
        assert!(
            pause.iter().any(|w| matches!(w, Wait::Park(_))),
            "{pause:?}"
        );
        let mut p = SpinThenPark::new(SPIN);
        let pause = run(&mut p, start, Duration::from_millis(1), 5);
        assert!(pause.iter().all(|w| *w == Wait::Poll), "{pause:?}");
    }

    #[test]
    fn an_even_stream_faster_than_the_spin_limit_is_polled_through() {
        let mut p = SpinThenPark::new(SPIN);
        let pause = run(&mut p, Instant::now(), Duration::from_micros(200), 200);
        assert!(pause.iter().all(|w| *w == Wait::Poll), "{pause:?}");
    }

    #[test]
    fn at_rest_it_parks_at_once_and_parks_grow_to_the_ceiling() {
        let mut p = SpinThenPark::new(SPIN);
        let pause = run(&mut p, Instant::now(), Duration::from_millis(100), 20);
        assert_eq!(pause.first(), Some(&Wait::Park(FIRST_PARK)));
        assert_eq!(pause.last(), Some(&Wait::Park(MAX_PARK)));
        assert!(pause.iter().all(|w| matches!(w, Wait::Park(_))));
        // 1, 4, 16, 50, 50 ms: 5 parks in 100 ms.
        assert!(pause.len() <= 5, "{} parks", pause.len());
    }

    #[test]
    fn a_load_that_stops_is_polled_for_the_spin_limit_then_parked() {
        let (mut p, last) = polling_after_a_steady_load();
        assert_eq!(p.after_turn(last + SPIN, 0), Wait::Park(FIRST_PARK));
    }

    #[test]
    fn bursts_further_apart_than_the_spin_limit_are_parked_between_even_with_a_probe() {
        // A burst every 20 ms, and 100 µs after each a source's tail probe: polling
        // after the probe would cost 2 ms a burst for nothing.
        let mut p = SpinThenPark::new(SPIN);
        let start = Instant::now();
        for b in 0..50u32 {
            let at = start + Duration::from_millis(20) * b;
            assert!(matches!(p.after_turn(at, 5), Wait::Park(_)));
            let probe = at + Duration::from_micros(100);
            assert!(matches!(p.after_turn(probe, 1), Wait::Park(_)));
        }
        assert_eq!(p.polls, 0);
    }

    #[test]
    fn a_thread_kept_off_the_cpu_while_polling_goes_on_polling() {
        let (mut p, last) = polling_after_a_steady_load();
        // The next turn comes 5 ms later, with work: the scheduler, not the work,
        // paused (a pause of the work would have been parked in).
        let late = last + Duration::from_millis(5);
        p.after_turn(late, 1);
        assert_eq!(p.after_turn(late + SPIN / 2, 0), Wait::Poll);
    }

    #[test]
    fn after_a_real_pause_a_steady_load_is_polled_again_within_a_few_bursts() {
        let mut p = SpinThenPark::new(SPIN);
        let start = Instant::now();
        run(&mut p, start, Duration::from_millis(1), 10);
        // The load stops: polled for the spin limit, then parked...
        let last = start + Duration::from_millis(9);
        assert!(matches!(p.after_turn(last + SPIN, 0), Wait::Park(_)));
        // ...until it comes back, then every 1 ms.
        let back = start + Duration::from_millis(20);
        assert!(matches!(p.after_turn(back, 1), Wait::Park(_)));
        let pause = run(
            &mut p,
            back + Duration::from_millis(1),
            Duration::from_millis(1),
            4,
        );
        assert!(pause.iter().all(|w| *w == Wait::Poll), "{pause:?}");
    }

    #[test]
    fn block_never_polls() {
        let mut p = SpinThenPark::for_strategy(IdleStrategy::Block, SPIN);
        let pause = run(&mut p, Instant::now(), Duration::from_millis(1), 20);
        assert!(pause.iter().all(|w| matches!(w, Wait::Park(_))));
        assert_eq!(p.polls, 0);
    }

    #[test]
    fn every_name_parses_back() {
        for name in IdleStrategy::NAMES.split(", ") {
            assert_eq!(IdleStrategy::parse(name).map(|s| s.name()), Some(name));
        }
        assert_eq!(IdleStrategy::parse("busy"), None);
    }
}
