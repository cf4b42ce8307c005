//! Waiting for the node without holding the connection's lock: a thread waits on the
//! socket (and on two eventfds other threads use to wake it) with poll(2), and calls the
//! library with a zero timeout once there is something to do. It wakes when the socket
//! is readable (or writable, while output waits), when another thread pokes it (output
//! it left queued, a reconnect made), when the connection is closed, at the library's
//! next deadline (a heartbeat, a reconnect's back-off), and when a signal is handled
//! (Ctrl-C: Python's handlers run once the call returns to the interpreter). At rest it
//! wakes for the heartbeats alone.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The longest one wait lasts whatever the library's deadline (it always has one while
/// connected or reconnecting: a heartbeat, at most 30 s away, or the next try).
const LONGEST: Duration = Duration::from_secs(30);

/// What a waiting thread watches besides the socket.
pub(crate) struct Waker {
    /// Written by a thread that left something for the waiter to do; read (emptied)
    /// by the waiter it wakes.
    poke: OwnedFd,
    /// Written once, when the connection is closed, and never emptied: it wakes every
    /// waiter, however many, now and later.
    closed: OwnedFd,
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor of our own, owned from here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local to an eventfd (non-blocking: a counter at its
    // maximum refuses, and is then readable anyway).
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// What to wait for, from the library under the lock: its socket (`None` while
/// reconnecting), whether output waits to be written, and its next deadline.
#[derive(Clone, Copy)]
pub(crate) struct Wait {
    pub fd: Option<RawFd>,
    pub write: bool,
    pub until: Option<Instant>,
}

impl Waker {
    pub(crate) fn new() -> std::io::Result<Self> {
        Ok(Waker {
            poke: eventfd()?,
            closed: eventfd()?,
        })
    }

    /// Wakes a waiter: something waits to be done (output to write, a new socket).
    pub(crate) fn poke(&self) {
        signal(&self.poke);
    }

    /// Wakes every waiter, for good: the connection is closed.
    pub(crate) fn close(&self) {
        signal(&self.closed);
    }

    /// Waits (call it without the GIL and without the connection's lock) for what
    /// `wait` names, a poke, the close, a signal, or `wait.until` and `deadline`,
    /// whichever comes first. `at_least` is the wait while the library has no socket
    /// and its deadline has passed (a reconnect being made by another thread: it
    /// pokes when done).
    pub(crate) fn wait(&self, wait: Wait, deadline: Option<Instant>, at_least: Duration) {
        let now = Instant::now();
        let mut timeout = [wait.until, deadline]
            .into_iter()
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .min()
            .unwrap_or(LONGEST)
            .min(LONGEST);
        if wait.fd.is_none() && wait.until.is_some_and(|t| t <= now) {
            timeout = timeout
                .max(at_least.min(deadline.map_or(LONGEST, |d| d.saturating_duration_since(now))));
        }
        let mut fds = [
            libc::pollfd {
                fd: self.poke.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.closed.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative descriptor is ignored by poll.
                fd: wait.fd.unwrap_or(-1),
                events: libc::POLLIN | if wait.write { libc::POLLOUT } else { 0 },
                revents: 0,
            },
        ];
        // Round up: a sub-millisecond wait truncated to poll(0) would spin.
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: three valid pollfds for the call. The socket may be closed and
        // replaced meanwhile by another thread (a reconnect, under the lock); poll then
        // returns at once or at its timeout (the poke of the reconnect), and the caller
        // looks again. A signal ends it with EINTR, the caller's to look at.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n > 0 && fds[0].revents & libc::POLLIN != 0 {
            let mut count: u64 = 0;
            // SAFETY: reads the eventfd's 8-byte counter into a local (non-blocking).
            unsafe { libc::read(self.poke.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
        }
    }
}

/// Blocks every signal in the calling thread (a thread of the package's own that runs
/// no Python): the kernel then gives a signal sent to the process to a thread that can
/// take it, so Ctrl-C cuts short the wait of the interpreter's main thread.
pub(crate) fn block_signals() {
    // SAFETY: a full set built by sigfillset, applied to this thread alone.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
