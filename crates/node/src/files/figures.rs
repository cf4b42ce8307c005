//! What the files thread has done, for /metrics: its figures, shared with the event loop.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tickwire_backbone::FilesWire;
use tickwire_files::Hub;

/// What the files thread has done, for /metrics: stored by the thread after each of
/// its turns (relaxed atomics: a scrape may see one turn's figures half updated).
#[derive(Debug, Default)]
pub struct FilesFigures {
    /// The node sends files (it has a spool).
    pub sends: bool,
    /// The node receives files (it has an inbox).
    pub receives: bool,
    /// Files the sender has queued, not finished.
    pub queued_files: AtomicU64,
    /// Their bytes.
    pub queued_bytes: AtomicU64,
    /// Chunks sent, repairs included.
    pub chunks_sent: AtomicU64,
    /// Chunks sent again for a site that missed them.
    pub chunks_repaired: AtomicU64,
    /// Bytes of the chunks sent.
    pub bytes_sent: AtomicU64,
    /// The sender's rate now, bytes a second.
    pub rate: AtomicU64,
    /// Times the rate was cut for the backbone's loss.
    pub rate_cuts: AtomicU64,
    /// Files that arrived whole.
    pub files_received: AtomicU64,
    /// Files that failed here (hash, disk, name, size).
    pub files_failed: AtomicU64,
    /// Chunks taken.
    pub chunks_received: AtomicU64,
    /// Chunks that came again when already held.
    pub chunks_duplicate: AtomicU64,
    /// Bytes of the chunks taken.
    pub bytes_received: AtomicU64,
    /// Messages that did not decode.
    pub malformed: AtomicU64,
    /// Uploads refused.
    pub uploads_refused: AtomicU64,
    /// The spool's syncs before files were said queued (`fsync` always or batch).
    pub spool_syncs: AtomicU64,
    /// Spool syncs that failed (the uploads waiting for them refused).
    pub spool_sync_failures: AtomicU64,
    /// Messages of the backbone's files stream refused by their seals, by
    /// [`tickwire_backbone::auth::Rejected`] (added to the backbone's rejections).
    pub backbone_rejected: [AtomicU64; 5],
}

/// The counters a files thread left in [`FilesFigures`] when it stopped: the thread
/// started in its place counts on from them, so that /metrics' totals never go back.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    chunks_sent: u64,
    chunks_repaired: u64,
    bytes_sent: u64,
    rate_cuts: u64,
    files_received: u64,
    files_failed: u64,
    chunks_received: u64,
    chunks_duplicate: u64,
    bytes_received: u64,
    malformed: u64,
    uploads_refused: u64,
    spool_syncs: u64,
    spool_sync_failures: u64,
    backbone_rejected: [u64; 5],
}

impl FilesFigures {
    /// The counters as they stand (the gauges left out).
    fn counted(&self) -> Counted {
        Counted {
            chunks_sent: self.chunks_sent.load(Relaxed),
            chunks_repaired: self.chunks_repaired.load(Relaxed),
            bytes_sent: self.bytes_sent.load(Relaxed),
            rate_cuts: self.rate_cuts.load(Relaxed),
            files_received: self.files_received.load(Relaxed),
            files_failed: self.files_failed.load(Relaxed),
            chunks_received: self.chunks_received.load(Relaxed),
            chunks_duplicate: self.chunks_duplicate.load(Relaxed),
            bytes_received: self.bytes_received.load(Relaxed),
            malformed: self.malformed.load(Relaxed),
            uploads_refused: self.uploads_refused.load(Relaxed),
            spool_syncs: self.spool_syncs.load(Relaxed),
            spool_sync_failures: self.spool_sync_failures.load(Relaxed),
            backbone_rejected: self.backbone_rejected.each_ref().map(|a| a.load(Relaxed)),
        }
    }

    /// The hub's figures, its counters added to `base` (the threads before it).
    fn publish(&self, hub: &Hub, base: &Counted) {
        if let Some((tx, files, bytes)) = hub.sender_figures() {
            self.queued_files.store(files as u64, Relaxed);
            self.queued_bytes.store(bytes, Relaxed);
            self.chunks_sent
                .store(base.chunks_sent + tx.chunks + tx.repairs, Relaxed);
            self.chunks_repaired
                .store(base.chunks_repaired + tx.repairs, Relaxed);
            self.bytes_sent.store(base.bytes_sent + tx.bytes, Relaxed);
            self.rate.store(tx.rate, Relaxed);
            self.rate_cuts.store(base.rate_cuts + tx.rate_cuts, Relaxed);
        }
        if let Some(rx) = hub.receiver_stats() {
            self.files_received
                .store(base.files_received + rx.files, Relaxed);
            self.files_failed
                .store(base.files_failed + rx.failures, Relaxed);
            self.chunks_received
                .store(base.chunks_received + rx.chunks, Relaxed);
            self.chunks_duplicate
                .store(base.chunks_duplicate + rx.duplicate_chunks, Relaxed);
            self.bytes_received
                .store(base.bytes_received + rx.bytes, Relaxed);
        }
        let h = hub.stats();
        self.malformed.store(base.malformed + h.malformed, Relaxed);
        self.uploads_refused
            .store(base.uploads_refused + h.uploads_refused, Relaxed);
        self.spool_syncs
            .store(base.spool_syncs + h.spool_syncs, Relaxed);
        self.spool_sync_failures
            .store(base.spool_sync_failures + h.spool_sync_failures, Relaxed);
    }

    fn publish_wire(&self, wire: &FilesWire, base: &Counted) {
        let counters = self.backbone_rejected.iter().zip(base.backbone_rejected);
        for ((to, before), n) in counters.zip(wire.rejected()) {
            to.store(before + n, Relaxed);
        }
    }
}

/// One files thread's figures: what it has done, added to what the threads before it
/// did.
pub(super) struct ThreadFigures {
    shared: Arc<FilesFigures>,
    base: Counted,
}

impl ThreadFigures {
    /// The node's first files thread: it counts from nothing.
    pub(super) fn first(shared: Arc<FilesFigures>) -> Self {
        ThreadFigures {
            shared,
            base: Counted::default(),
        }
    }

    /// A thread started after one stopped: it counts on from what the stopped one
    /// published last (which stopped changing with it).
    pub(super) fn after_a_stop(shared: Arc<FilesFigures>) -> Self {
        let base = shared.counted();
        ThreadFigures { shared, base }
    }

    pub(super) fn publish(&self, hub: &Hub) {
        self.shared.publish(hub, &self.base);
    }

    pub(super) fn publish_wire(&self, wire: &FilesWire) {
        self.shared.publish_wire(wire, &self.base);
    }
}
