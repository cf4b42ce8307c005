//! The embedded media driver: launched in a directory of its own, its duty cycle run by
//! its own thread or handed over to the event loop, the agent it runs after each cycle,
//! and the directories of drivers whose node is gone.

use super::LinkConfig;
use crate::park::{Parker, Unparker};
use crate::setup_guard;
use crate::{BackboneError, IdleStrategy, SpinThenPark};
use log::{info, warn};
use rusteron_client::IntoCString;
use rusteron_media_driver::bindings::aeron_threading_mode_enum;
use rusteron_media_driver::{AeronDriver, AeronDriverContext};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

const DRIVER_PREFIX: &str = "tickwire-aeron-";

pub(super) struct Driver {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub(super) dir: PathBuf,
    /// Work to run on the driver's thread (the receiver).
    commands: SyncSender<DriverCommand>,
    /// With [`DriverPlacement::EventLoop`](super::DriverPlacement::EventLoop), once the link is set up: the driver, run
    /// by the event loop (its thread has ended).
    pub(super) inline: Option<AeronDriver>,
    /// The receiver window it was given ([`effective_receiver_window`]).
    pub(super) receiver_window: usize,
    /// With a parking idle strategy: wakes the driver's own thread when it is parked
    /// (something was offered, or a command sent).
    unparker: Option<Arc<Unparker>>,
    /// The SETUP guard's settings and count, and the driver context it was set on.
    pub(super) guard: Arc<setup_guard::GuardShared>,
    context: usize,
}

/// Work run on the driver's thread after each of its duty cycles.
pub(super) trait Agent {
    /// Does what there is to do now; returns how much (0: idle).
    fn do_work(&mut self) -> usize;
}

/// Builds an agent on the driver's thread (what it holds need not be `Send`).
pub(super) type AgentFactory = Box<dyn FnOnce() -> Option<Box<dyn Agent>> + Send>;

pub(super) enum DriverCommand {
    Attach(AgentFactory),
    /// Drop the agent, then say so (its subscriptions go before the client does).
    Detach(SyncSender<()>),
    /// Stop running the driver and hand it over (to the event loop).
    HandOver(SyncSender<AeronDriver>),
}

impl Driver {
    /// From now on the calling thread runs the driver ([`Link::do_work`](super::Link::do_work)). Until
    /// then the driver's own thread ran it, which the blocking set-up calls (adding
    /// publications and subscriptions) need.
    pub(super) fn hand_over(&mut self) -> Result<(), BackboneError> {
        let (tx, rx) = sync_channel(1);
        self.command(DriverCommand::HandOver(tx))?;
        let driver = rx.recv().map_err(|_| BackboneError::DriverDied)?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The driver's idle strategy now sleeps in this thread (`backoff`: from 1 µs).
        // SAFETY: prctl on the calling thread with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000u64, 0, 0, 0) };
        self.inline = Some(driver);
        Ok(())
    }

    /// Sends `command` to the driver's own thread and wakes it if it is parked.
    pub(super) fn command(&self, command: DriverCommand) -> Result<(), BackboneError> {
        self.commands
            .send(command)
            .map_err(|_| BackboneError::DriverDied)?;
        self.unpark();
        Ok(())
    }

    /// Wakes the driver's own thread if it is parked.
    pub(super) fn unpark(&self) {
        if let Some(u) = &self.unparker {
            u.unpark();
        }
    }

    /// The media driver's two pollers (its receiver's and its sender's epoll sets,
    /// holding every UDP socket it reads): readable when a datagram waits.
    pub(super) fn poller_fds(driver: &AeronDriver) -> [RawFd; 2] {
        [driver.receiver.poller.fd, driver.sender.poller.fd]
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unpark();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.inline.take());
        setup_guard::forget(self.context);
        // The driver deletes it on a clean close; a failed close leaves nothing behind.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A kernel limit on socket buffers (`net.core.rmem_max` or `wmem_max`), if readable.
fn kernel_socket_buffer_cap(path: &str) -> Option<usize> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
}

/// Says when the kernel gives the driver's sockets less than `socket_buffer`: an edge
/// that pauses then overflows its socket sooner, and what it loses is recovered by NAK
/// and retransmission, at a cost in CPU and latency.
fn warn_if_the_kernel_caps_socket_buffers(socket_buffer: usize) {
    for (knob, path) in [
        ("net.core.rmem_max", RMEM_MAX),
        ("net.core.wmem_max", "/proc/sys/net/core/wmem_max"),
    ] {
        if let Some(cap) = kernel_socket_buffer_cap(path).filter(|&cap| cap < socket_buffer) {
            warn!(
                "backbone: the kernel caps socket buffers at {cap} bytes ({knob}), below \
                 backbone.socket_buffer_bytes = {socket_buffer}: raise it \
                 (sysctl -w {knob}={socket_buffer}) or an edge that pauses loses datagrams \
                 sooner (recovered, at a cost); the receiver window is held to it"
            );
        }
    }
}

const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";

/// The receiver window the driver is given: the configured one, within the socket
/// buffer asked for and within what the kernel grants (`rmem_max`). Aeron refuses to
/// start a driver whose window is larger than the buffer the kernel really gives (the
/// stock rmem_max of 212992 gives 425984 bytes, below the default 2 MiB window), and a
/// source may send a window's worth while an edge's driver is off the CPU: the socket
/// must hold it. Never below one datagram, which Aeron requires.
fn effective_receiver_window(cfg: &LinkConfig, rmem_max: Option<usize>) -> usize {
    cfg.receiver_window
        .min(cfg.socket_buffer)
        .min(rmem_max.unwrap_or(usize::MAX))
        .max(cfg.mtu)
}

pub(super) fn launch_driver(cfg: &LinkConfig) -> Result<Driver, BackboneError> {
    warn_if_the_kernel_caps_socket_buffers(cfg.socket_buffer);
    let receiver_window = effective_receiver_window(cfg, kernel_socket_buffer_cap(RMEM_MAX));
    let dir = cfg.driver_base.join(format!(
        "{DRIVER_PREFIX}{}-{}",
        std::process::id(),
        next_driver_number()
    ));
    let ctx = AeronDriverContext::new().map_err(|e| BackboneError::aeron("driver context", e))?;
    let dir_c = dir.to_string_lossy().to_string().into_c_string();
    let set = |what: &'static str, r: Result<i32, rusteron_media_driver::AeronCError>| {
        r.map(|_| ()).map_err(|e| BackboneError::aeron(what, e))
    };
    set("driver directory", ctx.set_dir(&dir_c))?;
    set("driver directory", ctx.set_dir_delete_on_start(true))?;
    set("driver directory", ctx.set_dir_delete_on_shutdown(true))?;
    set(
        "threading mode",
        ctx.set_threading_mode(aeron_threading_mode_enum::AERON_THREADING_MODE_SHARED),
    )?;
    if cfg.idle == IdleStrategy::Backoff || cfg.idle.parks() {
        // Aeron's back-off (with a parking strategy, the set-up's): 10 spins, 20
        // yields, then sleeps from 1 µs doubling up to the ceiling (Aeron's own default
        // ceiling is 1 ms). The arguments are read when the strategy is set, so they
        // go first.
        let args = format!("10-20-1us-{}us", cfg.max_park.as_micros().max(1));
        set(
            "idle strategy",
            ctx.set_shared_idle_strategy_init_args(&args.into_c_string()),
        )?;
    }
    set(
        "idle strategy",
        ctx.set_shared_idle_strategy(cfg.idle.driver_name()),
    )?;
    set("term length", ctx.set_term_buffer_length(cfg.term_length))?;
    set("MTU", ctx.set_mtu_length(cfg.mtu))?;
    set(
        "socket buffers",
        ctx.set_socket_so_rcvbuf(cfg.socket_buffer),
    )?;
    set(
        "socket buffers",
        ctx.set_socket_so_sndbuf(cfg.socket_buffer),
    )?;
    set(
        "receiver window",
        ctx.set_rcv_initial_window_length(receiver_window),
    )?;
    set(
        "NAK back-off",
        ctx.set_nak_multicast_max_backoff_ns(cfg.nak_max_backoff.as_nanos() as u64),
    )?;
    set(
        "retransmit linger",
        ctx.set_retransmit_unicast_linger_ns(cfg.retransmit_linger.as_nanos() as u64),
    )?;
    set(
        "image liveness",
        ctx.set_image_liveness_timeout_ns(cfg.image_liveness.as_nanos() as u64),
    )?;
    set(
        "stream session limit",
        ctx.set_stream_session_limit(cfg.max_sessions_per_stream.min(i32::MAX as u32) as i32),
    )?;
    let guard = Arc::new(setup_guard::GuardShared {
        per_second: cfg.new_sessions_per_s.max(1),
        dropped: AtomicU64::new(0),
    });
    let context = ctx.get_inner() as usize;
    setup_guard::install(&ctx, guard.clone())
        .map_err(|e| BackboneError::aeron("SETUP guard", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    type Started = Result<Option<Arc<Unparker>>, BackboneError>;
    let (started_tx, started_rx) = sync_channel::<Started>(1);
    let (commands, command_rx) = sync_channel::<DriverCommand>(4);
    let (idle, spin_limit) = (cfg.idle, cfg.spin_limit);
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("aeron-driver".into())
            .spawn(move || {
                // Sleeps of microseconds (the back-off's) last what they ask, not the
                // kernel's default 50 µs slack more.
                // SAFETY: prctl on the calling thread with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000u64, 0, 0, 0) };
                let driver = match AeronDriver::new(&ctx).and_then(|d| d.start(true).map(|_| d)) {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = started_tx.send(Err(BackboneError::aeron("media driver", e)));
                        return;
                    }
                };
                // A parking strategy parks this thread once it runs the receiver (with
                // the driver in a thread of its own); while the link is set up it
                // backs off as Aeron does, since the set-up's commands wake nothing.
                let mut parker = None;
                if idle.parks() {
                    let policy = SpinThenPark::for_strategy(idle, spin_limit);
                    match Parker::new(&Driver::poller_fds(&driver), policy) {
                        Ok(p) => parker = Some(p),
                        Err(e) => warn!(
                            "backbone: cannot park the driver's thread ({e}); it backs off instead"
                        ),
                    }
                }
                let _ = started_tx.send(Ok(parker.as_ref().map(|p| p.unparker())));
                let mut agent: Option<Box<dyn Agent>> = None;
                while !stop.load(Ordering::Acquire) {
                    match command_rx.try_recv() {
                        Ok(DriverCommand::Attach(make)) => agent = make(),
                        Ok(DriverCommand::Detach(done)) => {
                            agent = None;
                            let _ = done.send(());
                        }
                        Ok(DriverCommand::HandOver(to)) => {
                            drop(agent);
                            let _ = to.send(driver);
                            return;
                        }
                        Err(_) => {}
                    }
                    let attached = agent.is_some();
                    let mut duty_cycle = || {
                        let mut work = driver.main_do_work().unwrap_or(0).max(0) as usize;
                        if let Some(a) = agent.as_mut() {
                            work += a.do_work();
                        }
                        work
                    };
                    let work = duty_cycle();
                    match parker.as_mut() {
                        Some(p) if attached => p.wait(work, duty_cycle),
                        _ => driver.main_idle_strategy(work.min(i32::MAX as usize) as i32),
                    }
                }
            })
            .map_err(BackboneError::Thread)?
    };
    match started_rx.recv() {
        Ok(Ok(unparker)) => Ok(Driver {
            stop,
            thread: Some(thread),
            dir,
            commands,
            inline: None,
            receiver_window,
            unparker,
            guard,
            context,
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(BackboneError::DriverDied)
        }
    }
}

fn next_driver_number() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Removes the driver directories of node processes that no longer run (a node
/// killed with SIGKILL cannot remove its own).
pub fn remove_stale_drivers(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(DRIVER_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            info!(
                "backbone: removing {} (its node is gone)",
                e.path().display()
            );
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod window_tests {
    use super::{effective_receiver_window, LinkConfig};

    #[test]
    fn the_receiver_window_stays_within_what_the_kernel_grants_but_holds_a_datagram() {
        let cfg = LinkConfig::new("aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1");
        assert_eq!(effective_receiver_window(&cfg, None), 2 << 20);
        assert_eq!(effective_receiver_window(&cfg, Some(4 << 20)), 2 << 20);
        // A kernel with the common default net.core.rmem_max.
        assert_eq!(effective_receiver_window(&cfg, Some(212_992)), 212_992);
        let small_buffer = LinkConfig {
            socket_buffer: 1 << 20,
            ..cfg.clone()
        };
        assert_eq!(effective_receiver_window(&small_buffer, None), 1 << 20);
        let jumbo = LinkConfig {
            mtu: 8192,
            ..cfg.clone()
        };
        assert_eq!(effective_receiver_window(&jumbo, Some(4096)), 8192);
    }
}
