//! The TLS handshakes' crypto, on a thread of its own (`tickwire-tls`): a server's
//! answer to a ClientHello costs a key exchange and a signature (about 0.9 ms with an
//! RSA-2048 key, 0.25 ms with ECDSA P-256), and on the event loop every connection's
//! data would wait behind it.
//!
//! The event loop still does every read and write of the socket: it reads what the
//! peer sent into the connection's rustls session, then hands the session here
//! ([`HandshakeJob`]); this thread processes the records (the crypto), and hands the
//! session back with the records to send, through [`Handshakes::finished`] and the
//! loop's waker. Each connection has one job out at most; a job whose connection has
//! closed meanwhile is dropped unprocessed.
//!
//! The thread runs at the loop's priority, not below it: under a busy loop on the same
//! CPU a lower one fell behind `[tls] max_handshakes_per_s` (at nice 10, about 110 RSA
//! handshakes a second against a spinning loop), its queue filled and new clients were
//! closed. That setting is what bounds the CPU handshakes take.

use log::warn;
use mio::Waker;
use rustls::ServerConnection;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_core::ConnId;

/// One connection's session, out for its records to be processed.
pub struct HandshakeJob {
    /// The connection (the core's id).
    pub conn: ConnId,
    /// Which session of that id it is (an id is reused once its connection is gone).
    pub ticket: u64,
    /// The session, with the records the peer sent read into it.
    pub tls: Box<ServerConnection>,
    /// What processing them gave (set by the thread).
    pub result: Result<(), rustls::Error>,
    /// Set when the connection is gone: the thread skips the job.
    pub(super) closed: Arc<AtomicBool>,
}

/// What the thread and the connections share.
#[derive(Default)]
struct Shared {
    tickets: AtomicU64,
    /// Handshakes failed because the queue was full, since the last report.
    refused: AtomicU64,
    /// The same, since the start.
    refused_total: AtomicU64,
    /// Sessions the thread processed (a handshake takes two or three).
    processed: AtomicU64,
    /// The thread was found gone (said once).
    gone_said: AtomicBool,
    /// The failed handshakes logged in this window (the event loop's alone: a lock
    /// taken only when a handshake fails).
    /// Failed sessions, in their handshake or after (any peer can cause one at will:
    /// plaintext on the TLS port, a record garbled).
    failures_said: std::sync::Mutex<tickwire_core::QuietLog>,
}

/// The thread's side the connections hold: where their sessions go.
#[derive(Clone)]
pub struct HandshakeQueue {
    jobs: SyncSender<HandshakeJob>,
    shared: Arc<Shared>,
}

/// Why a session was not taken.
pub enum NotTaken {
    /// The queue is full: the thread is behind.
    Full(HandshakeJob),
    /// The thread is gone (it panicked): the loop processes the records itself.
    Gone(HandshakeJob),
}

impl HandshakeQueue {
    /// A ticket for a new session.
    pub fn ticket(&self) -> u64 {
        self.shared.tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether to log a failed session (in its handshake or after) now; if so, how many
    /// were not logged since the last one that was.
    pub fn failure_to_say(&self, now: Instant) -> Option<u64> {
        self.shared
            .failures_said
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(now)
    }

    /// Hands a session to the thread. A full queue is counted (and reported by
    /// [`Handshakes::report`]); a gone thread is said once.
    pub fn submit(&self, job: HandshakeJob) -> Result<(), NotTaken> {
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(j) => {
                self.shared.refused.fetch_add(1, Ordering::Relaxed);
                self.shared.refused_total.fetch_add(1, Ordering::Relaxed);
                NotTaken::Full(j)
            }
            TrySendError::Disconnected(j) => {
                if !self.shared.gone_said.swap(true, Ordering::Relaxed) {
                    warn!("the TLS handshakes' thread is gone: the event loop does their crypto from now on");
                }
                NotTaken::Gone(j)
            }
        })
    }
}

/// How often refused handshakes are reported at most.
const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The thread, as the event loop holds it.
pub struct Handshakes {
    queue: HandshakeQueue,
    done: Receiver<HandshakeJob>,
    capacity: usize,
    said_at: Option<Instant>,
}

impl Handshakes {
    /// Starts the thread; it wakes the event loop with `waker` when a session is back.
    /// `capacity`: sessions queued at most (the node's cap on pending logins).
    pub fn start(waker: Arc<Waker>, capacity: usize) -> io::Result<Handshakes> {
        let (jobs, inbox) = mpsc::sync_channel::<HandshakeJob>(capacity.max(1));
        let (outbox, done) = mpsc::channel::<HandshakeJob>();
        let handshakes = Handshakes::with(jobs, done, capacity);
        let shared = handshakes.queue.shared.clone();
        std::thread::Builder::new()
            .name("tickwire-tls".into())
            .spawn(move || {
                for mut job in inbox {
                    if job.closed.load(Ordering::Relaxed) {
                        continue;
                    }
                    job.result = job.tls.process_new_packets().map(|_| ());
                    shared.processed.fetch_add(1, Ordering::Relaxed);
                    if outbox.send(job).is_err() {
                        break;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(handshakes)
    }

    fn with(jobs: SyncSender<HandshakeJob>, done: Receiver<HandshakeJob>, capacity: usize) -> Self {
        Handshakes {
            queue: HandshakeQueue {
                jobs,
                shared: Arc::new(Shared {
                    tickets: AtomicU64::new(1),
                    ..Shared::default()
                }),
            },
            done,
            capacity,
            said_at: None,
        }
    }

    /// Handshakes failed because the thread was behind, and sessions it processed,
    /// since the start.
    pub fn figures(&self) -> (u64, u64) {
        let s = &self.queue.shared;
        (
            s.refused_total.load(Ordering::Relaxed),
            s.processed.load(Ordering::Relaxed),
        )
    }

    /// Where connections send their sessions.
    pub fn queue(&self) -> &HandshakeQueue {
        &self.queue
    }

    /// The sessions back from the thread, as many as there are now.
    pub fn finished(&self) -> impl Iterator<Item = HandshakeJob> + '_ {
        self.done.try_iter()
    }

    /// Says how many handshakes a full queue failed, at most every 10 s (a flood of
    /// them must not flood the log too); the count it said, if it did.
    pub fn report(&mut self, now: Instant) -> Option<u64> {
        if self
            .said_at
            .is_some_and(|t| now.saturating_duration_since(t) < REPORT_EVERY)
        {
            return None;
        }
        let refused = self.queue.shared.refused.swap(0, Ordering::Relaxed);
        if refused > 0 {
            warn!(
                "new TLS connections closed in their handshake: the handshakes' thread is behind ({} sessions waiting for it; the CPU is busy, or [tls] max_handshakes_per_s admits more than it can do); {refused} since the last report",
                self.capacity
            );
            self.said_at = Some(now);
            return Some(refused);
        }
        None
    }
}

/// A queue no thread reads, and the end it would read from (tests: a full queue, a
/// thread gone).
#[cfg(test)]
pub(super) fn unstarted(capacity: usize) -> (Handshakes, Receiver<HandshakeJob>) {
    let (jobs, inbox) = mpsc::sync_channel(capacity);
    let (_, done) = mpsc::channel();
    (Handshakes::with(jobs, done, capacity), inbox)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    fn config() -> Arc<rustls::ServerConfig> {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let cert = CertificateDer::from_pem_slice(ck.cert.pem().as_bytes()).unwrap();
        let key = PrivateKeyDer::from_pem_slice(ck.key_pair.serialize_pem().as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        Arc::new(cfg)
    }

    /// Handshakes a full queue failed are said at most every 10 s, each counted once.
    #[test]
    fn refused_handshakes_are_counted_and_said_at_most_every_ten_seconds() {
        let (mut handshakes, _inbox) = unstarted(1);
        let config = config();
        let job = || HandshakeJob {
            conn: 1,
            ticket: 1,
            tls: Box::new(ServerConnection::new(config.clone()).unwrap()),
            result: Ok(()),
            closed: Arc::new(AtomicBool::new(false)),
        };
        let refuse = |h: &Handshakes, n: usize| {
            for _ in 0..n {
                assert!(matches!(h.queue().submit(job()), Err(NotTaken::Full(_))));
            }
        };
        assert!(handshakes.queue().submit(job()).is_ok());
        let t0 = Instant::now();
        assert_eq!(handshakes.report(t0), None, "nothing refused yet");
        refuse(&handshakes, 2);
        assert_eq!(handshakes.report(t0), Some(2));
        refuse(&handshakes, 3);
        assert_eq!(handshakes.report(t0 + Duration::from_secs(9)), None);
        refuse(&handshakes, 1);
        assert_eq!(handshakes.report(t0 + Duration::from_secs(10)), Some(4));
        assert_eq!(handshakes.report(t0 + Duration::from_secs(30)), None);
    }

    /// A session whose connection closed while it waited is not processed (nor sent
    /// back): the thread takes the next.
    #[test]
    fn a_session_whose_connection_closed_is_skipped() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let handshakes = Handshakes::start(waker, 4).unwrap();
        let config = config();
        let job = |conn: ConnId, closed: bool| HandshakeJob {
            conn,
            ticket: conn as u64,
            tls: Box::new(ServerConnection::new(config.clone()).unwrap()),
            result: Ok(()),
            closed: Arc::new(AtomicBool::new(closed)),
        };
        assert!(handshakes.queue().submit(job(1, true)).is_ok());
        assert!(handshakes.queue().submit(job(2, false)).is_ok());
        // In order: once the second is back, the first would have been.
        let deadline = Instant::now() + Duration::from_secs(20);
        let back = loop {
            assert!(Instant::now() < deadline, "nothing came back");
            let back: Vec<ConnId> = handshakes.finished().map(|j| j.conn).collect();
            if !back.is_empty() {
                break back;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(back, vec![2]);
    }
}
