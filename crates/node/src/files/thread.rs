//! What runs on the files thread: opening its spool, inbox and audit log, then the hub's
//! loop (what the event loop hands it in, the hub's messages out, framed for the
//! backbone once the loop has said how), and its totals when it stops.

use super::audit_log::{drain_events, AuditLog};
use super::config::FilesSection;
use super::figures::{FilesFigures, ThreadFigures};
use super::outbox::Outbox;
use super::{wall_ms, Input, Spawned, ToLoop, IN_QUEUE, OUT_QUEUE};
use log::{info, warn};
use mio::Waker;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_backbone::FilesWire;
use tickwire_core::chunk_buffers;
use tickwire_files::audit;
use tickwire_files::inbox::Inbox;
use tickwire_files::spool::Spool;
use tickwire_files::{
    Hub, HubConfig, Peer, Receiver as FileReceiver, ReceiverConfig, Rights, Sender, SenderConfig,
};

/// The hub and what it writes to, opened from disk with what a previous run left put
/// back (the queue, partial files, the record).
pub(super) struct Opened {
    pub(super) hub: Hub,
    pub(super) audit: std::fs::File,
    pub(super) outbox: Option<Outbox>,
}

/// Where the thread's directories are opened.
pub(super) enum Opening {
    /// At the node's start, by the caller: an error stops the node.
    Done(Box<Opened>),
    /// When the thread starts again after a stop, by the new thread: the event loop
    /// does not read the audit log and the spool meanwhile, and an error ends the
    /// thread (tried again after the back-off).
    OnThread { cfg: FilesSection, site: String },
}

/// Starts the thread on what `opening` gives it.
pub(super) fn spawn(
    opening: Opening,
    waker: Arc<Waker>,
    figures: Arc<FilesFigures>,
) -> Result<Spawned, String> {
    let (input, inbox_rx) = mpsc::sync_channel::<Input>(IN_QUEUE);
    let (out_tx, output) = mpsc::sync_channel::<ToLoop>(OUT_QUEUE);
    let thread = std::thread::Builder::new()
        .name("tickwire-files".into())
        .spawn(move || {
            let (o, figures) = match opening {
                Opening::Done(o) => (*o, ThreadFigures::first(figures)),
                // A new seed: the transfer ids the stopped thread gave out are not
                // given again (sites remember the ones they finished).
                Opening::OnThread { cfg, site } => {
                    let figures = ThreadFigures::after_a_stop(figures);
                    let seed = tickwire_backbone::random_id();
                    (open(&cfg, &site, seed, &figures)?, figures)
                }
            };
            run(o.hub, inbox_rx, out_tx, waker, o.audit, o.outbox, figures);
            Ok(())
        })
        .map_err(|e| format!("cannot start the files thread: {e}"))?;
    Ok((input, output, thread))
}

/// Opens the spool, inbox and audit log and puts back what a previous run left.
pub(super) fn open(
    cfg: &FilesSection,
    site: &str,
    seed: u64,
    figures: &ThreadFigures,
) -> Result<Opened, String> {
    let now = Instant::now();
    let mut hub_cfg = HubConfig::new(site, cfg.services.clone());
    hub_cfg.expire_after = Duration::from_secs(cfg.expire_h * 3600);
    let sender = if cfg.spool.is_empty() {
        None
    } else {
        let spool = Spool::open(Path::new(&cfg.spool), cfg.fsync.policy())
            .map_err(|e| format!("files.spool: {e}"))?;
        let mut sc = SenderConfig::new(site);
        sc.chunk_size = cfg.chunk_kib * 1024;
        sc.rate = cfg.rate_mb_per_s * 1_000_000;
        sc.max_files = cfg.max_files;
        sc.max_bytes = cfg.max_queue_mb * 1_000_000;
        sc.expire_after = hub_cfg.expire_after;
        Some((Sender::new(sc, now), spool))
    };
    let receiver = if cfg.inbox.is_empty() {
        None
    } else {
        let inbox = Inbox::new(Path::new(&cfg.inbox), cfg.fsync.policy())
            .map_err(|e| format!("files.inbox: {e}"))?;
        let mut rc = ReceiverConfig::new(site, cfg.services.clone());
        rc.max_file_bytes = cfg.max_file_mb * 1_000_000;
        Some((FileReceiver::new(rc, now), inbox))
    };
    let audit_path = cfg.audit_path();
    let history = read_history(&audit_path, site, hub_cfg.keep_records);
    let mut hub = Hub::new(hub_cfg, sender, receiver, now, wall_ms(), seed);
    let past = history.files.len();
    hub.restore_history(history.files);
    let queued = hub
        .restore(now)
        .map_err(|e| format!("files.spool {}: {e}", cfg.spool))?;
    let interrupted = hub.interrupted_uploads();
    if interrupted > 0 {
        warn!(
            "files: {interrupted} uploads the last run did not finish: failed at their sites, \
                 which are told to drop what they got as they are heard (send them again)"
        );
    }
    let partial = hub
        .resume_receiver(history.arrived, now)
        .map_err(|e| format!("files.inbox {}: {e}", cfg.inbox))?;
    let audit = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(&audit_path)
        .map_err(|e| format!("files audit log {}: {e}", audit_path.display()))?;
    info!(
            "files: services {:?}, spool {}, inbox {} (fsync {}), audit log {}; {queued} files queued from before, {partial} partial files resumed, {past} finished files back in the record",
            cfg.services,
            if cfg.spool.is_empty() { "none (sends no files)" } else { &cfg.spool },
            if cfg.inbox.is_empty() { "none (receives no files)" } else { &cfg.inbox },
            format!("{:?}", cfg.fsync).to_lowercase(),
            audit_path.display()
        );
    let outbox = if cfg.outbox.is_empty() {
        None
    } else {
        std::fs::create_dir_all(&cfg.outbox)
            .map_err(|e| format!("files.outbox {}: {e}", cfg.outbox))?;
        Some(Outbox::new(PathBuf::from(&cfg.outbox)))
    };
    figures.publish(&hub);
    Ok(Opened { hub, audit, outbox })
}

/// The audit log's history (none if there is no log yet; a log that cannot be read
/// is said once and treated as empty: the files it named are not in the record).
pub(super) fn read_history(path: &Path, site: &str, keep: usize) -> audit::History {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return audit::History::default(),
        Err(e) => {
            warn!("files: cannot read the audit log {}: {e}", path.display());
            return audit::History::default();
        }
    };
    let history = audit::read_history(std::io::BufReader::new(file), site, keep);
    if history.unreadable > 0 {
        warn!(
            "files: {} lines of the audit log {} were not audit records (skipped)",
            history.unreadable,
            path.display()
        );
    }
    history
}

/// What the files did over the node's run, when it stops (`scripts/files_to_sites.sh`
/// prints it).
pub(super) fn log_totals(hub: &Hub) {
    if let Some((tx, files, _)) = hub.sender_figures() {
        info!(
            "files: sender stopped: {} chunks sent ({} repairs), {} bytes, {} offers, {} statuses; rate cut {} times, {} bytes/s at the end; {files} files unfinished",
            tx.chunks + tx.repairs,
            tx.repairs,
            tx.bytes,
            tx.offers,
            tx.statuses,
            tx.rate_cuts,
            tx.rate
        );
    }
    if let Some(rx) = hub.receiver_stats() {
        info!(
            "files: receiver stopped: {} files whole, {} failed; {} chunks taken, {} duplicates, {} unknown, {} offers",
            rx.files, rx.failures, rx.chunks, rx.duplicate_chunks, rx.unknown_chunks, rx.offers
        );
    }
}

/// Backbone messages the hub writes before the event loop has first told the thread how
/// to frame them: the thread starts before the loop's first turn, so a site's first
/// presence (and a restarted sender's first offers) would be lost and the other side
/// would learn of it only at the next one, a second later. Kept until then, the first
/// ones only (at most `BEFORE_FRAMING` messages and `BEFORE_FRAMING_BYTES`); once the
/// backbone has framed, a message it cannot frame (its link down) is lost, as the
/// transfers expect.
pub(super) struct BeforeFraming {
    kept: Option<Vec<Vec<u8>>>,
    bytes: usize,
}

pub(super) const BEFORE_FRAMING: usize = 64;

pub(super) const BEFORE_FRAMING_BYTES: usize = 1 << 20;

pub(super) fn run(
    mut hub: Hub,
    input: Receiver<Input>,
    output: SyncSender<ToLoop>,
    waker: Arc<Waker>,
    audit: std::fs::File,
    mut outbox: Option<Outbox>,
    figures: ThreadFigures,
) {
    crate::background::yield_to_market_data("files thread");
    let mut audit = AuditLog::new(audit);
    let mut wire = FilesWire::new();
    let mut before_framing = BeforeFraming::new();
    loop {
        let now = Instant::now();
        // While the outbox's files are hashed, it looks for them every 10 ms.
        let at_most = match outbox.as_ref().is_some_and(Outbox::busy) {
            true => Duration::from_millis(10),
            false => Duration::from_secs(1),
        };
        let wait = hub
            .poll_timeout()
            .map_or(at_most, |at| at.saturating_duration_since(now))
            .min(at_most);
        let first = match input.recv_timeout(wait) {
            Ok(i) => Some(i),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // What is whole is committed (and recorded) before the node goes.
                hub.commit_pending(Instant::now());
                drain_events(&mut hub, &mut audit);
                return log_totals(&hub);
            }
        };
        let now = Instant::now();
        let mut next = first;
        let mut taken = 0;
        #[cfg(test)]
        let mut panic_after_turn = false;
        while let Some(i) = next {
            match i {
                Input::Message {
                    from,
                    user,
                    rights,
                    body,
                } => {
                    hub.handle(from, &user, rights, &body, now);
                    chunk_buffers::SHARED.give_back(body);
                }
                Input::FromBackbone(m) => {
                    match m.seal_to_check {
                        true => match wire.open(&m.bytes) {
                            Ok(body) => {
                                hub.handle(Peer::Backbone, "", Rights::default(), body, now)
                            }
                            Err(why) => log_rejected(&wire, why),
                        },
                        false => hub.handle(Peer::Backbone, "", Rights::default(), &m.bytes, now),
                    }
                    chunk_buffers::SHARED.give_back(m.bytes);
                }
                Input::Wire { framing, keys } => {
                    let has_way = framing.is_some();
                    wire.set_framing(framing);
                    if let Some(k) = keys {
                        wire.set_keys(k);
                    }
                    let mut sent = false;
                    for body in before_framing.release(has_way) {
                        if let Some((stream, bytes)) = wire.frame(&body) {
                            let o = ToLoop::Backbone {
                                stream,
                                bytes,
                                framed: Instant::now(),
                            };
                            if output.send(o).is_err() {
                                return;
                            }
                            sent = true;
                        }
                    }
                    if sent {
                        let _ = waker.wake();
                    }
                }
                Input::Gone(c) => hub.handle_gone(c),
                Input::Rights(c, rights, sites) => hub.handle_rights(c, rights, &*sites),
                Input::Network { naks, datagrams } => {
                    hub.handle_network_counters(naks, datagrams, now)
                }
                #[cfg(test)]
                Input::Panic => panic_after_turn = true,
            }
            taken += 1;
            // A disk that syncs slowly must not hold back the presences and statuses
            // the other sites and senders wait for: at most 50 ms of input per turn.
            // Nor may input (an upload) hold back a chunk the sender may send: its
            // pace keeps a burst of a few ms, and what it does not use is lost.
            next = if taken < 1024
                && now.elapsed() < Duration::from_millis(50)
                && !hub.chunk_due(Instant::now())
            {
                input.try_recv().ok()
            } else {
                None
            };
        }
        // The input may have taken a while: the deadlines and the pace go by the clock.
        let now = Instant::now();
        hub.handle_timeout(now);
        if let Some(o) = outbox.as_mut() {
            o.look(&mut hub, now);
        }
        loop {
            let more = hub.pump(now);
            // Recorded before a site's `done` or a client's `queued` goes out: a stop
            // in between would leave a file said to be here and not in the audit log
            // (a restarted site would take it again, and not list it).
            drain_events(&mut hub, &mut audit);
            let mut sent = false;
            while let Some(o) = hub.poll_output() {
                let to_loop = match o.to {
                    Peer::Backbone => match wire.frame(&o.body) {
                        Some((stream, bytes)) => ToLoop::Backbone {
                            stream,
                            bytes,
                            framed: Instant::now(),
                        },
                        // No way on the backbone yet: kept for the first framing;
                        // after it, none now: lost, as a transfer expects.
                        None => {
                            before_framing.keep(o.body);
                            continue;
                        }
                    },
                    _ => ToLoop::Peer(o),
                };
                if output.send(to_loop).is_err() {
                    return;
                }
                sent = true;
            }
            if sent {
                let _ = waker.wake();
            }
            if !more {
                break;
            }
        }
        #[cfg(test)]
        if panic_after_turn {
            panic!("asked to by a test");
        }
        figures.publish(&hub);
        figures.publish_wire(&wire);
        drain_events(&mut hub, &mut audit);
    }
}

/// A message of the backbone's files stream refused by its seal: the first and then
/// every power of two of a reason is logged (a flood of forgeries does not flood the log).
pub(super) fn log_rejected(wire: &FilesWire, why: tickwire_backbone::auth::Rejected) {
    let n = wire.rejected()[why as usize];
    if n.is_power_of_two() {
        warn!(
            "backbone: dropped a files message: {} ({n} so far for this reason)",
            why.text()
        );
    }
}

impl BeforeFraming {
    fn new() -> BeforeFraming {
        BeforeFraming {
            kept: Some(Vec::new()),
            bytes: 0,
        }
    }

    /// A message that could not be framed: kept while the backbone has never framed
    /// and there is room.
    fn keep(&mut self, body: Vec<u8>) {
        let Some(kept) = self.kept.as_mut() else {
            return;
        };
        if kept.len() < BEFORE_FRAMING && self.bytes + body.len() <= BEFORE_FRAMING_BYTES {
            self.bytes += body.len();
            kept.push(body);
        }
    }

    /// The framing told (`framed`: the backbone has a way now): the messages kept, in
    /// order, the first time it has; nothing is kept after that.
    fn release(&mut self, framed: bool) -> Vec<Vec<u8>> {
        if !framed {
            return Vec::new();
        }
        self.bytes = 0;
        self.kept.take().unwrap_or_default()
    }
}

#[cfg(test)]
mod before_framing_tests {
    use super::{BeforeFraming, BEFORE_FRAMING, BEFORE_FRAMING_BYTES};

    #[test]
    fn what_comes_before_the_first_framing_waits_for_it_and_nothing_after() {
        let mut b = BeforeFraming::new();
        b.keep(vec![1]);
        b.keep(vec![2]);
        // Told there is no way yet: still kept.
        assert!(b.release(false).is_empty());
        b.keep(vec![3]);
        assert_eq!(b.release(true), vec![vec![1], vec![2], vec![3]]);
        // Framed once, a message that cannot be framed (the link down) is lost.
        b.keep(vec![4]);
        assert!(b.release(true).is_empty());
    }

    #[test]
    fn before_the_first_framing_the_first_messages_are_kept_within_bounds() {
        let mut b = BeforeFraming::new();
        for i in 0..BEFORE_FRAMING + 10 {
            b.keep(vec![i as u8]);
        }
        let kept = b.release(true);
        assert_eq!(kept.len(), BEFORE_FRAMING);
        assert_eq!(kept[0], vec![0]);
        assert_eq!(kept[BEFORE_FRAMING - 1], vec![(BEFORE_FRAMING - 1) as u8]);
        let mut b = BeforeFraming::new();
        b.keep(vec![0; BEFORE_FRAMING_BYTES - 10]);
        b.keep(vec![1; 11]);
        b.keep(vec![2; 10]);
        let kept = b.release(true);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[1], vec![2; 10]);
    }
}
