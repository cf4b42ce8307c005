//! Parking the driver's own thread (`[backbone] driver = "thread"` with a parking idle
//! strategy): an epoll set holding the media driver's two pollers (its receiver's and
//! its sender's, themselves epoll sets of every UDP socket the driver reads) and an
//! eventfd the event loop writes when it has offered something to send.
//!
//! With the driver in the event loop, the node's own epoll holds the pollers instead
//! ([`crate::Link::wake_fds`]) and nothing here is used.

use crate::{SpinThenPark, Wait};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Wakes a parked driver thread; costs a system call only when it is parked.
#[derive(Debug)]
pub(crate) struct Unparker {
    eventfd: OwnedFd,
    parked: AtomicBool,
}

impl Unparker {
    pub(crate) fn unpark(&self) {
        // A full fence on both sides (here, and in `Parker::wait` after it says it is
        // parked): the offer's store to Aeron's buffer cannot pass the load of
        // `parked`, so either the thread sees the offer in its last duty cycle before
        // parking, or this sees it parked.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to an eventfd this struct owns.
            unsafe {
                libc::write(
                    self.eventfd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }
}

/// The driver thread's wait: the adaptive policy, and epoll to park in.
pub(crate) struct Parker {
    epoll: OwnedFd,
    unparker: Arc<Unparker>,
    policy: SpinThenPark,
}

const WAKE_TOKEN: u64 = u64::MAX;

impl Parker {
    /// Parks on `fds` (the driver's pollers) and on its own eventfd.
    pub(crate) fn new(fds: &[RawFd], policy: SpinThenPark) -> io::Result<Parker> {
        // SAFETY: plain system calls; each returned descriptor is owned at once.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        for (fd, token) in fds
            .iter()
            .map(|&fd| (fd, fd as u64))
            .chain([(efd, WAKE_TOKEN)])
        {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: token,
            };
            // SAFETY: `ev` lives across the call; the descriptors are open.
            if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Parker {
            epoll,
            unparker: Arc::new(Unparker {
                eventfd,
                parked: AtomicBool::new(false),
            }),
            policy,
        })
    }

    pub(crate) fn unparker(&self) -> Arc<Unparker> {
        self.unparker.clone()
    }

    /// After a duty cycle that did `work`: returns at once (poll again), or parks
    /// until a socket is readable, the eventfd is written or the park's time is up.
    /// `duty_cycle` runs once more after the thread says it is parked, so that what
    /// was offered just before is not left waiting for the park's end.
    pub(crate) fn wait(&mut self, work: usize, duty_cycle: impl FnOnce() -> usize) {
        let timeout = match self.policy.after_turn(Instant::now(), work) {
            Wait::Poll => {
                std::thread::yield_now();
                return;
            }
            Wait::Park(d) => d,
        };
        self.unparker.parked.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if duty_cycle() == 0 {
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
            let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: `events` is a live buffer of the length passed.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    ms,
                )
            };
            let woken = events[..n.max(0) as usize]
                .iter()
                .any(|e| e.u64 == WAKE_TOKEN);
            if woken {
                let mut count = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a live buffer of 8.
                unsafe {
                    libc::read(
                        self.unparker.eventfd.as_raw_fd(),
                        count.as_mut_ptr().cast(),
                        count.len(),
                    )
                };
            }
        }
        self.unparker.parked.store(false, Ordering::SeqCst);
    }
}
