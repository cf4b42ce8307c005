//! The TLS handshakes' crypto, on a thread of its own (`tickwire-tls`, at the lower
//! priority of `background`): a server's answer to a ClientHello costs a key exchange
//! and a signature (about 0.9 ms with an RSA-2048 key, 0.25 ms with ECDSA P-256), and
//! on the event loop every connection's data would wait behind it.
//!
//! The event loop still does every read and write of the socket: it reads what the
//! peer sent into the connection's rustls session, then hands the session here
//! ([`HandshakeJob`]); this thread processes the records (the crypto), and hands the
//! session back with the records to send, through [`Handshakes::finished`] and the
//! loop's waker. Each connection has one job out at most, so the queue is bounded by
//! the connections waiting to log in.

use mio::Waker;
use rustls::ServerConnection;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
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
}

/// The thread's side the connections hold: where their sessions go.
#[derive(Clone)]
pub struct HandshakeQueue {
    jobs: SyncSender<HandshakeJob>,
    tickets: Arc<AtomicU64>,
}

/// Why a session was not taken.
pub enum NotTaken {
    /// As many sessions wait as connections may wait to log in.
    Full(HandshakeJob),
    /// The thread is gone (it panicked): the loop processes the records itself.
    Gone(HandshakeJob),
}

impl HandshakeQueue {
    /// A ticket for a new session.
    pub fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a session to the thread.
    pub fn submit(&self, job: HandshakeJob) -> Result<(), NotTaken> {
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(j) => NotTaken::Full(j),
            TrySendError::Disconnected(j) => NotTaken::Gone(j),
        })
    }
}

/// The thread, as the event loop holds it.
pub struct Handshakes {
    queue: HandshakeQueue,
    done: Receiver<HandshakeJob>,
}

impl Handshakes {
    /// Starts the thread; it wakes the event loop with `waker` when a session is back.
    /// `max_waiting`: sessions queued at most (the node's cap on pending logins).
    pub fn start(waker: Arc<Waker>, max_waiting: usize) -> io::Result<Handshakes> {
        let (jobs, inbox) = mpsc::sync_channel::<HandshakeJob>(max_waiting.max(1));
        let (outbox, done) = mpsc::channel::<HandshakeJob>();
        std::thread::Builder::new()
            .name("tickwire-tls".into())
            .spawn(move || {
                crate::background::yield_to_market_data("TLS handshakes' thread");
                for mut job in inbox {
                    job.result = job.tls.process_new_packets().map(|_| ());
                    if outbox.send(job).is_err() {
                        break;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(Handshakes {
            queue: HandshakeQueue {
                jobs,
                tickets: Arc::new(AtomicU64::new(1)),
            },
            done,
        })
    }

    /// Where connections send their sessions.
    pub fn queue(&self) -> &HandshakeQueue {
        &self.queue
    }

    /// The sessions back from the thread, as many as there are now.
    pub fn finished(&self) -> impl Iterator<Item = HandshakeJob> + '_ {
        self.done.try_iter()
    }
}

/// A queue no thread reads, and the end it would read from (tests: a full queue, a
/// thread gone).
#[cfg(test)]
pub(super) fn unstarted(capacity: usize) -> (Handshakes, Receiver<HandshakeJob>) {
    let (jobs, inbox) = mpsc::sync_channel(capacity);
    let (_, done) = mpsc::channel();
    let queue = HandshakeQueue {
        jobs,
        tickets: Arc::new(AtomicU64::new(1)),
    };
    (Handshakes { queue, done }, inbox)
}
