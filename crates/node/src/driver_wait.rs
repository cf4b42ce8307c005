//! How the event loop waits when it runs the backbone's media driver with a parking
//! idle strategy (`[backbone] idle = "adaptive"` or `"block"`): it parks in epoll on
//! its own sockets and on the driver's two pollers, for as long as the adaptive policy
//! ([`SpinThenPark`]) says, or polls again at once while work keeps coming.

use mio::{Interest, Registry, Token};
use std::time::{Duration, Instant};
use tickwire_backbone::{Backbone, SpinThenPark, Wait};

pub(crate) struct DriverWait {
    policy: SpinThenPark,
    /// What the last turn decided.
    next: Wait,
    /// The link whose pollers are in the loop's epoll (a rebuilt link has new ones).
    parked_on: Option<u64>,
}

impl DriverWait {
    pub(crate) fn new(backbone: &Backbone) -> DriverWait {
        DriverWait {
            policy: SpinThenPark::for_strategy(backbone.idle_strategy(), backbone.spin_limit()),
            next: Wait::Poll,
            parked_on: None,
        }
    }

    /// Whether the loop parks on the driver this turn (the driver is in the event loop
    /// with a parking strategy); the pollers of a new link join the loop's epoll,
    /// under `token`, the first time.
    pub(crate) fn parks(&mut self, backbone: &Backbone, registry: &Registry, token: Token) -> bool {
        if !backbone.polled_by_event_loop() {
            return false;
        }
        let Some((link, fds)) = backbone.wake_fds() else {
            return false;
        };
        if self.parked_on != Some(link) {
            self.parked_on = Some(link);
            // The old link's pollers left the epoll when they were closed.
            for fd in fds {
                let registered =
                    registry.register(&mut mio::unix::SourceFd(&fd), token, Interest::READABLE);
                if let Err(e) = registered {
                    log::warn!("backbone: cannot wait on the driver's poller {fd}: {e}; a datagram may wait up to 50 ms");
                }
            }
        }
        true
    }

    /// The longest the loop may block this turn: `None` to poll again at once.
    pub(crate) fn block_for(&self) -> Option<Duration> {
        match self.next {
            Wait::Park(at_most) => Some(at_most),
            Wait::Poll => None,
        }
    }

    /// After a turn: `input` counts what came from outside (sockets, backbone
    /// messages), the adaptive policy's sign that more may come; `driver_busy`, that
    /// the driver did something, which may leave more that no socket will announce (a
    /// backlog past a turn's cycles, a timer it armed), so the loop polls once more.
    pub(crate) fn after_turn(&mut self, now: Instant, input: usize, driver_busy: bool) {
        self.next = self.policy.after_turn(now, input);
        if driver_busy {
            self.next = Wait::Poll;
        }
        if self.next == Wait::Poll {
            std::thread::yield_now();
        }
    }
}
