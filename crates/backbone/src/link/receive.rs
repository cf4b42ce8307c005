//! The receiver: polls the subscriptions, puts each stream's messages back together
//! from Aeron's fragments and hands them, in batches, to the event loop.

use super::{Agent, LinkCounters, BATCH_BYTES};
use crate::reassembly::{Dropped, Place, Reassembler, MAX_MESSAGE};
use log::{info, warn};
use rusteron_client::{AeronFragmentHandlerCallback, AeronHeader, AeronSubscription, Handler};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

struct Sink {
    batch: Vec<u8>,
    kind: u8,
}

fn on_message(sink: &mut Sink, session: i32, msg: &[u8]) {
    sink.batch.push(sink.kind);
    sink.batch.extend_from_slice(&session.to_be_bytes());
    sink.batch
        .extend_from_slice(&(msg.len() as u32).to_be_bytes());
    sink.batch.extend_from_slice(msg);
}

/// What the receiver's polls hand each fragment to: each stream's messages are put back
/// together (bounded, [`crate::reassembly`]) into the batch being filled.
struct Inbound {
    sink: Sink,
    /// By stream: data, requests, files (the sink's `kind`).
    streams: [Reassembler; 3],
}

impl AeronFragmentHandlerCallback for Inbound {
    fn handle_aeron_fragment_handler(&mut self, fragment: &[u8], header: AeronHeader) {
        let Ok(values) = header.get_values() else {
            return;
        };
        let frame = values.frame();
        let (session, flags) = (frame.session_id(), frame.flags());
        let place = Place {
            term_id: frame.term_id(),
            term_offset: frame.term_offset(),
            frame_length: frame.frame_length(),
        };
        let Inbound { sink, streams } = self;
        streams[usize::from(sink.kind)].fragment(session, place, flags, fragment, |msg| {
            on_message(sink, session, msg)
        });
    }
}

/// What the receiver polls.
pub(super) struct Subscriptions {
    /// One per source channel (two with a standby over multi-destination-cast).
    pub(super) data_in: Vec<AeronSubscription>,
    pub(super) request_in: Option<AeronSubscription>,
    /// The files stream, on each source channel (none without a files stream).
    pub(super) files_in: Vec<AeronSubscription>,
    /// Set while the node's files thread is behind: the files stream is not polled, so
    /// Aeron holds its data and its flow control holds the sender, rather than the node
    /// dropping chunks that must then be sent again to every site.
    pub(super) files_hold: Arc<AtomicBool>,
}

/// Fragments of the files stream polled per duty cycle at most (market data's
/// streams take up to 64 each): a file backlog waits in Aeron rather than in the
/// batch ahead of market data.
const FILES_FRAGMENTS: usize = 16;

/// The receiver: polls the subscriptions and hands whole messages, in batches, to the
/// event loop.
pub(super) struct Receive {
    subs: Subscriptions,
    /// Called only from within this thread's polls; read and changed between them
    /// ([`Receive::inbound`]).
    inbound: Handler<Inbound>,
    /// Fragments dropped by the reassembly, as last logged.
    dropped_logged: u64,
    dropped_logged_at: Option<std::time::Instant>,
    batches: SyncSender<Vec<u8>>,
    empties: Receiver<Vec<u8>>,
    rejects: Receiver<i32>,
    wake: Box<dyn Fn() + Send>,
    counters: Arc<LinkCounters>,
    /// A full batch the event loop has no room for yet: nothing is polled until it
    /// is taken.
    waiting: Option<Vec<u8>>,
}

impl Receive {
    pub(super) fn new(
        subs: Subscriptions,
        batches: SyncSender<Vec<u8>>,
        empties: Receiver<Vec<u8>>,
        rejects: Receiver<i32>,
        wake: Box<dyn Fn() + Send>,
        counters: Arc<LinkCounters>,
    ) -> Option<Receive> {
        Some(Receive {
            subs,
            inbound: Handler::new(Inbound {
                sink: Sink {
                    batch: Vec::with_capacity(BATCH_BYTES),
                    kind: 0,
                },
                streams: Default::default(),
            }),
            dropped_logged: 0,
            dropped_logged_at: None,
            batches,
            empties,
            rejects,
            wake,
            counters,
            waiting: None,
        })
    }

    /// Hands over what was polled into the batch being filled, if anything (the
    /// event loop runs the receiver and drains it next).
    pub(super) fn hand_over_partial(&mut self) -> usize {
        if self.inbound().sink.batch.is_empty() || self.waiting.is_some() {
            return 0;
        }
        let next = self
            .empties
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH_BYTES));
        let full = std::mem::replace(&mut self.inbound().sink.batch, next);
        self.counters.messages_in.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_in
            .fetch_add(full.len() as u64, Ordering::Relaxed);
        self.hand_over(full);
        1
    }

    /// The polls' handler, between polls.
    fn inbound(&mut self) -> &mut Inbound {
        // SAFETY: the handler is called only from within `poll` on this thread, and the
        // reference returned here is gone before the next poll (it borrows `self`).
        unsafe { self.inbound.get_mut() }
    }

    /// Logs fragments the reassembly dropped (a forged or broken session), at most
    /// every 10 s.
    fn log_dropped(&mut self) {
        let inbound = self.inbound();
        let dropped: u64 = inbound.streams.iter().map(|r| r.dropped).sum();
        let why = inbound.streams.iter().find_map(|r| r.last_dropped);
        if dropped == self.dropped_logged
            || self
                .dropped_logged_at
                .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        warn!(
            "backbone: {} fragments dropped that made no message within {} KiB (the last for {}): a broken or forged sender",
            dropped - self.dropped_logged,
            MAX_MESSAGE / 1024,
            why.map_or("?", Dropped::text)
        );
        self.dropped_logged = dropped;
        self.dropped_logged_at = Some(std::time::Instant::now());
    }

    /// Hands `batch` to the event loop, or keeps it waiting; whether it went.
    fn hand_over(&mut self, batch: Vec<u8>) -> bool {
        match self.batches.try_send(batch) {
            Ok(()) => {
                (self.wake)();
                true
            }
            Err(TrySendError::Full(b)) => {
                if self.waiting.is_none() {
                    self.counters.receiver_waits.fetch_add(1, Ordering::Relaxed);
                }
                self.waiting = Some(b);
                (self.wake)();
                false
            }
            // The link is going away.
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

impl Agent for Receive {
    fn do_work(&mut self) -> usize {
        while let Ok(session) = self.rejects.try_recv() {
            if let Some(image) = self
                .subs
                .data_in
                .iter()
                .find_map(|s| s.image_by_session_id(session))
            {
                match image.reject(c"tickwire edge: source lost, re-imaging") {
                    Ok(_) => info!("backbone: rejected the image of Aeron session {session}"),
                    Err(e) => warn!("backbone: could not reject Aeron session {session}: {e:?}"),
                }
            }
        }
        // The event loop is behind: poll nothing (Aeron holds what arrives meanwhile).
        if let Some(batch) = self.waiting.take() {
            if !self.hand_over(batch) {
                return 0;
            }
        }
        let mut work = 0usize;
        let poll = |r: &mut Receive, kind: u8, sub: usize, limit: usize| {
            r.inbound().sink.kind = kind;
            let sub = match kind {
                0 => &r.subs.data_in[sub],
                1 => r.subs.request_in.as_ref().expect("polled only when there"),
                _ => &r.subs.files_in[sub],
            };
            sub.poll(Some(&r.inbound), limit).unwrap_or(0).max(0) as usize
        };
        for i in 0..self.subs.data_in.len() {
            work += poll(self, 0, i, 64);
        }
        if self.subs.request_in.is_some() {
            work += poll(self, 1, 0, 64);
        }
        if !self.subs.files_hold.load(Ordering::Relaxed) {
            for i in 0..self.subs.files_in.len() {
                work += poll(self, 2, i, FILES_FRAGMENTS);
            }
        }
        let filled = self.inbound().sink.batch.len();
        if filled > 0 && (work == 0 || filled >= BATCH_BYTES / 2) {
            work += self.hand_over_partial();
        }
        self.log_dropped();
        work
    }
}
