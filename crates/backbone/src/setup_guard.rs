//! A guard in front of the media driver: how many new Aeron sessions it may take.
//!
//! Every Aeron SETUP frame naming a session the driver has not seen asks its conductor
//! to build an image (a log file, counters). In the SHARED threading mode the node
//! uses, the receiver hands that request to the conductor through a queue of about 400
//! requests and, when the queue is full, waits for room, yielding the CPU, on the very
//! thread that would empty it: a burst of forged SETUPs (about 900 on loopback, 40
//! bytes each) froze the driver, the event loop running it, and the node with it
//! (docs/OPERATIONS.md, "Floods on the backbone"). Aeron's own limit on sessions per
//! stream counts only images already built, so a burst overshoots it.
//!
//! This guard is an incoming interceptor (Aeron's extension point for what the driver
//! receives, where its loss generators sit): a SETUP for a session it has not let
//! through recently passes only while a token bucket allows (`[backbone]
//! new_sessions_per_s`, the bucket holding one second's worth), so that requests reach
//! the conductor far slower than it builds images, however fast they arrive. SETUPs of
//! sessions it let through pass freely (a source repeats its SETUP until answered);
//! everything else passes untouched. What it drops is counted.

use rusteron_media_driver::bindings::{
    aeron_alloc, aeron_driver_context_get_udp_channel_incoming_interceptors,
    aeron_driver_context_set_udp_channel_incoming_interceptors, aeron_driver_context_t,
    aeron_udp_channel_incoming_interceptor_t, aeron_udp_channel_interceptor_bindings_t,
    aeron_udp_channel_transport_affinity_t, aeron_udp_channel_transport_t, sockaddr_storage,
    timespec,
};
use rusteron_media_driver::AeronDriverContext;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Aeron's frame type of a SETUP, and the length of one (aeron_udp_protocol.h).
const SETUP: u16 = 5;
const SETUP_LENGTH: usize = 40;
/// Sessions let through are remembered this long after their last SETUP (a live
/// source sends none once answered; one that repeats is still setting up).
const REMEMBERED: Duration = Duration::from_secs(10);
/// Sessions remembered at most (the oldest is forgotten past it).
const MAX_REMEMBERED: usize = 4096;

/// What the node sets and reads; shared by the guard's instances in one driver.
#[derive(Debug)]
pub(crate) struct GuardShared {
    /// New sessions let through per second (and at most in one burst).
    pub per_second: u32,
    /// SETUPs dropped for want of a token.
    pub dropped: AtomicU64,
}

/// The guard of one driver data path (its receiver, its sender), on that path's thread.
struct SetupGuard {
    shared: Arc<GuardShared>,
    tokens: f64,
    refilled: Instant,
    /// (session, stream) let through, with when they last sent a SETUP.
    sessions: HashMap<(i32, i32), Instant>,
}

impl SetupGuard {
    fn new(shared: Arc<GuardShared>, now: Instant) -> SetupGuard {
        SetupGuard {
            tokens: f64::from(shared.per_second),
            shared,
            refilled: now,
            sessions: HashMap::new(),
        }
    }

    /// Whether a frame passes.
    fn admit(&mut self, frame: &[u8], now: Instant) -> bool {
        if frame.len() < SETUP_LENGTH || u16::from_le_bytes([frame[6], frame[7]]) != SETUP {
            return true;
        }
        let word = |at: usize| {
            i32::from_le_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
        };
        let key = (word(12), word(16));
        if let Some(last) = self.sessions.get_mut(&key) {
            if now.saturating_duration_since(*last) < REMEMBERED {
                *last = now;
                return true;
            }
        }
        let rate = f64::from(self.shared.per_second);
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.refilled = now;
        if self.tokens < 1.0 {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.tokens -= 1.0;
        if self.sessions.len() >= MAX_REMEMBERED {
            self.sessions
                .retain(|_, last| now.saturating_duration_since(*last) < REMEMBERED);
            if self.sessions.len() >= MAX_REMEMBERED {
                if let Some(oldest) = self
                    .sessions
                    .iter()
                    .min_by_key(|(_, t)| **t)
                    .map(|(k, _)| *k)
                {
                    self.sessions.remove(&oldest);
                }
            }
        }
        self.sessions.insert(key, now);
        true
    }
}

/// The guards' settings by driver context (several drivers may run in one process:
/// the demo's nodes, a lab rig's).
static REGISTRY: Mutex<Vec<(usize, Arc<GuardShared>)>> = Mutex::new(Vec::new());

unsafe extern "C" fn init(
    state: *mut *mut c_void,
    context: *mut aeron_driver_context_t,
    _affinity: aeron_udp_channel_transport_affinity_t,
) -> i32 {
    let shared = REGISTRY.lock().ok().and_then(|r| {
        r.iter()
            .find(|(c, _)| *c == context as usize)
            .map(|(_, s)| s.clone())
    });
    let Some(shared) = shared else {
        return -1;
    };
    let guard = Box::new(SetupGuard::new(shared, Instant::now()));
    // SAFETY: Aeron hands a place for this interceptor's state.
    unsafe { *state = Box::into_raw(guard).cast() };
    0
}

unsafe extern "C" fn close(state: *mut c_void) -> i32 {
    if !state.is_null() {
        // SAFETY: made by `init` with Box::into_raw, closed once by Aeron.
        drop(unsafe { Box::from_raw(state.cast::<SetupGuard>()) });
    }
    0
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn incoming(
    state: *mut c_void,
    next: *mut aeron_udp_channel_incoming_interceptor_t,
    transport: *mut aeron_udp_channel_transport_t,
    receiver_clientd: *mut c_void,
    endpoint_clientd: *mut c_void,
    destination_clientd: *mut c_void,
    buffer: *mut u8,
    length: usize,
    addr: *mut sockaddr_storage,
    media_timestamp: *mut timespec,
) {
    // SAFETY: `state` is this path's guard (made by `init`, used by its thread only);
    // `buffer` holds `length` received bytes.
    let pass = unsafe {
        let guard = &mut *state.cast::<SetupGuard>();
        guard.admit(std::slice::from_raw_parts(buffer, length), Instant::now())
    };
    if !pass {
        return;
    }
    // SAFETY: `next` is the rest of Aeron's chain, ending at the endpoint.
    unsafe {
        if let Some(f) = (*next).incoming_func {
            f(
                (*next).interceptor_state,
                (*next).next_interceptor,
                transport,
                receiver_clientd,
                endpoint_clientd,
                destination_clientd,
                buffer,
                length,
                addr,
                media_timestamp,
            );
        }
    }
}

/// Puts the guard first among the driver's incoming interceptors (before the loss
/// generators the lab may set through Aeron's environment). Call before the driver
/// is made from `context`; [`forget`] when it is gone.
pub(crate) fn install(ctx: &AeronDriverContext, shared: Arc<GuardShared>) -> Result<(), String> {
    let context = ctx.get_inner();
    if let Ok(mut r) = REGISTRY.lock() {
        r.retain(|(c, _)| *c != context as usize);
        r.push((context as usize, shared));
    }
    let size = std::mem::size_of::<aeron_udp_channel_interceptor_bindings_t>();
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `context` is a live driver context (it outlives this call); aeron_alloc
    // zeroes `size` bytes, which the context frees with aeron_free when it closes, as
    // it does the bindings it loads itself.
    unsafe {
        if aeron_alloc(&mut p, size) < 0 || p.is_null() {
            return Err("cannot allocate the SETUP guard's bindings".into());
        }
        let b = &mut *p.cast::<aeron_udp_channel_interceptor_bindings_t>();
        b.incoming_init_func = Some(init);
        b.incoming_func = Some(incoming);
        b.incoming_close_func = Some(close);
        b.meta_info.name = c"tickwire-setup-guard".as_ptr();
        b.meta_info.type_ = c"interceptor".as_ptr();
        b.meta_info.next_interceptor_bindings =
            aeron_driver_context_get_udp_channel_incoming_interceptors(context);
        if aeron_driver_context_set_udp_channel_incoming_interceptors(context, b) < 0 {
            return Err("cannot set the SETUP guard".into());
        }
    }
    Ok(())
}

/// The driver of `context` is gone.
pub(crate) fn forget(context: usize) {
    if let Ok(mut r) = REGISTRY.lock() {
        r.retain(|(c, _)| *c != context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(session: i32, stream: i32) -> Vec<u8> {
        let mut f = vec![0u8; SETUP_LENGTH];
        f[0..4].copy_from_slice(&(SETUP_LENGTH as i32).to_le_bytes());
        f[6..8].copy_from_slice(&SETUP.to_le_bytes());
        f[12..16].copy_from_slice(&session.to_le_bytes());
        f[16..20].copy_from_slice(&stream.to_le_bytes());
        f
    }

    fn guard(per_second: u32, now: Instant) -> SetupGuard {
        SetupGuard::new(
            Arc::new(GuardShared {
                per_second,
                dropped: AtomicU64::new(0),
            }),
            now,
        )
    }

    #[test]
    fn new_sessions_pass_at_the_rate_and_known_ones_always() {
        let t0 = Instant::now();
        let mut g = guard(10, t0);
        let passed = (0..1000).filter(|s| g.admit(&setup(*s, 1001), t0)).count();
        assert_eq!(passed, 10, "one second's worth in a burst");
        assert_eq!(g.shared.dropped.load(Ordering::Relaxed), 990);
        // A session let through repeats its SETUP until answered: it passes.
        assert!(g.admit(&setup(3, 1001), t0));
        // Half a second later, five more new ones.
        let t1 = t0 + Duration::from_millis(500);
        let passed = (2000..3000)
            .filter(|s| g.admit(&setup(*s, 1001), t1))
            .count();
        assert_eq!(passed, 5);
        // Other frames pass untouched, whatever their session.
        let mut data = setup(99_999, 1001);
        data[6..8].copy_from_slice(&1u16.to_le_bytes());
        assert!(g.admit(&data, t1));
        assert!(g.admit(&[1, 2, 3], t1));
    }

    #[test]
    fn what_is_remembered_stays_bounded() {
        let t0 = Instant::now();
        let mut g = guard(1_000_000, t0);
        for s in 0..(MAX_REMEMBERED as i32 * 2) {
            assert!(g.admit(&setup(s, 1), t0));
        }
        assert!(g.sessions.len() <= MAX_REMEMBERED);
    }
}
