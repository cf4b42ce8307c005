//! The node's journal (`[journal]`, docs/JOURNAL.md) on a thread of its own: a sync
//! takes milliseconds, and the event loop must never wait for a disk. The core asks for
//! records ([`Node::take_journal_requests`]); this thread appends them, commits them
//! under the sync policy (with `batch`, everything that arrived while the previous sync
//! ran goes in one write and one sync: group commit) and hands each its seq, or the
//! reason it could not be kept, back through [`Node::on_journaled`].
//!
//! A journal that cannot be opened (an unwritable directory, a corrupt segment) leaves
//! the node serving market data: every post to a journaled service is then refused
//! with the reason.

use log::{error, info, warn};
use mio::Waker;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{JournalRequest, JournalWrite, Node, Redelivery};
use tickwire_journal::{Journal, JournalOptions, Received, SyncPolicy};
use tickwire_proto::FieldList;

/// `[journal]` in the node's TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JournalSection {
    /// Directory of the journal's segments; "": no journal.
    pub dir: String,
    /// Services whose posts are journaled; `["*"]`: every service.
    pub services: Vec<String>,
    /// When a post is on the disk: "always" (a sync per post, before its Ack), "batch"
    /// (group commit: one sync for all that arrived meanwhile), "never" (written to the
    /// operating system, never synced by the node).
    pub sync: SyncSetting,
    /// Segment size in MiB: a segment past it is closed and the next started.
    pub segment_mb: u64,
    /// The journal's size in MiB past which its oldest segments are removed (0: every
    /// segment kept). The segment being written and every one from the oldest holding a
    /// post not yet answered are kept whatever the size.
    pub retain_mb: u64,
    /// Also journal every refresh and update of those services, so subscribers can
    /// ask for an item's history (replay then join).
    pub updates: bool,
}

/// `[journal] sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncSetting {
    /// Every record synced before its answer.
    Always,
    /// Records synced in batches before their answers.
    Batch,
    /// Written, never synced by the node.
    Never,
}

impl SyncSetting {
    /// The journal's policy.
    pub fn policy(self) -> SyncPolicy {
        match self {
            SyncSetting::Always => SyncPolicy::Always,
            SyncSetting::Batch => SyncPolicy::Batch,
            SyncSetting::Never => SyncPolicy::Never,
        }
    }
}

impl Default for JournalSection {
    fn default() -> Self {
        JournalSection {
            dir: String::new(),
            services: Vec::new(),
            sync: SyncSetting::Batch,
            segment_mb: 64,
            retain_mb: 0,
            updates: false,
        }
    }
}

/// What the journal has done, for the node's figures.
#[derive(Debug, Default)]
pub struct JournalFigures {
    /// Records kept.
    pub records: AtomicU64,
    /// Commits made.
    pub commits: AtomicU64,
    /// write and fdatasync system calls.
    pub syscalls: AtomicU64,
    /// Bytes of journaled refreshes and updates the thread has taken off its queue.
    pub item_bytes_done: AtomicU64,
    /// The last commit failed (a full or failing disk): cleared by one that succeeds.
    pub last_commit_failed: AtomicBool,
    /// Old segments removed to stay within `retain_mb`.
    pub segments_removed: AtomicU64,
}

/// Journaled refreshes and updates waiting for the journal thread at most: past it (a
/// disk slower than the feed) a turn's batch is not journaled, and the node says so,
/// rather than let the queue grow without end.
pub const MAX_ITEM_BYTES_BEHIND: u64 = 256 * 1024 * 1024;

enum Answer {
    /// A record's seq (or why it was not kept), by ticket.
    Kept(u64, Result<u64, String>),
    /// An item's history, by ticket.
    History(u64, Result<tickwire_journal::History, String>),
}

enum Kind {
    Record,
    History,
}

/// Replays waiting for the replays' thread at most; past it a replay is refused at once.
const MAX_REPLAYS_WAITING: usize = 16;

/// A history to read, and where its answer goes (the core's ticket).
struct ReplayJob {
    ticket: u64,
    source: tickwire_journal::HistorySource,
    query: tickwire_journal::HistoryQuery,
}

impl ReplayJob {
    fn read(&self) -> Result<tickwire_journal::History, String> {
        self.source.read(&self.query).map_err(|e| e.to_string())
    }
}

/// The thread that reads replays' histories (`tickwire-replay`), beside the journal's:
/// answers go to the event loop as the journal's do. `None` if it cannot start (the
/// journal thread then reads them itself).
fn start_replays(outbox: Sender<Answer>, waker: Arc<Waker>) -> Option<SyncSender<ReplayJob>> {
    let (jobs, inbox) = mpsc::sync_channel::<ReplayJob>(MAX_REPLAYS_WAITING);
    let spawned = std::thread::Builder::new()
        .name("tickwire-replay".into())
        .spawn(move || {
            for job in inbox {
                if outbox
                    .send(Answer::History(job.ticket, job.read()))
                    .is_err()
                {
                    break;
                }
                let _ = waker.wake();
            }
        });
    match spawned {
        Ok(_) => Some(jobs),
        Err(e) => {
            warn!("journal: cannot start the replays' thread ({e}): the journal thread reads replays itself");
            None
        }
    }
}

/// Records for the journal thread at most in one commit.
const MAX_BATCH: usize = 8192;
/// How long journaled refreshes and updates, with no post among them, may wait
/// uncommitted for more to share their write and sync...
const ITEMS_WAIT: std::time::Duration = std::time::Duration::from_millis(10);
/// ...and how many bytes of them.
const ITEMS_BYTES: usize = 1 << 20;

/// The journal on a thread of its own: records go to it, answers come back (the loop's
/// `Journal` part).
pub struct JournalThread {
    /// Bytes of journaled refreshes and updates handed to the thread so far.
    item_bytes_sent: std::cell::Cell<u64>,
    requests: Option<Sender<JournalRequest>>,
    answers: Option<Receiver<Answer>>,
    /// Why there is no journal (it could not be opened).
    unavailable: Option<String>,
    /// What it has done, for /metrics and the figures item.
    pub figures: Arc<JournalFigures>,
    /// Joined on drop: the thread commits what still waits once `requests` is gone.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for JournalThread {
    fn drop(&mut self) {
        self.requests = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl JournalThread {
    /// Opens and recovers the journal, hands the core the posts to deliver again, and
    /// starts the thread. A journal that cannot be opened is logged and leaves a
    /// `JournalThread` that refuses every record with the reason.
    pub fn start(cfg: &JournalSection, core: &mut Node, waker: Arc<Waker>) -> JournalThread {
        let figures = Arc::new(JournalFigures::default());
        let opts = JournalOptions {
            sync: cfg.sync.policy(),
            segment_bytes: cfg.segment_mb.max(1) * 1024 * 1024,
            retain_bytes: cfg.retain_mb.saturating_mul(1024 * 1024),
        };
        let dir = PathBuf::from(&cfg.dir);
        let (journal, recovery) = match Journal::open(&dir, opts) {
            Ok(j) => j,
            Err(e) => {
                error!(
                    "journal not available, posts to {:?} are refused: {e}",
                    cfg.services
                );
                return JournalThread {
                    item_bytes_sent: Default::default(),
                    requests: None,
                    answers: None,
                    unavailable: Some(e.to_string()),
                    figures,
                    thread: None,
                };
            }
        };
        if let Some((file, at, len, why)) = &recovery.cut {
            warn!(
                "journal: cut {len} bytes at byte {at} of {} (an interrupted last write: {why})",
                file.display()
            );
        }
        info!(
            "journal {}: {} segments, {} records, sync {}; {} posts received and not completed, to deliver again",
            dir.display(),
            recovery.segments,
            recovery.records,
            cfg.sync.policy().name(),
            recovery.pending
        );
        let removed = journal.stats().segments_removed;
        if removed > 0 {
            info!("journal: {removed} old segments removed to stay within retain_mb");
        }
        core.redeliver_posts(
            journal
                .pending()
                .map(|p| Redelivery {
                    seq: p.seq,
                    service: p.service.clone(),
                    item: p.item.clone(),
                    image: p.image,
                    fields: p.fields.clone(),
                })
                .collect(),
        );
        let (requests, inbox) = mpsc::channel::<JournalRequest>();
        let (outbox, answers) = mpsc::channel::<Answer>();
        let f = figures.clone();
        let spawned = std::thread::Builder::new()
            .name("tickwire-journal".into())
            .spawn(move || run(journal, inbox, outbox, waker, f));
        let thread = match spawned {
            Ok(t) => t,
            Err(e) => {
                let why = format!("cannot start the journal thread: {e}");
                error!("{why}");
                return JournalThread {
                    item_bytes_sent: Default::default(),
                    requests: None,
                    answers: None,
                    unavailable: Some(why),
                    figures,
                    thread: None,
                };
            }
        };
        JournalThread {
            item_bytes_sent: Default::default(),
            requests: Some(requests),
            answers: Some(answers),
            unavailable: None,
            figures,
            thread: Some(thread),
        }
    }

    /// Hands the core's requests to the thread (or refuses them, without a journal).
    pub fn submit(&self, core: &mut Node, reqs: &mut Vec<JournalRequest>, now: Instant) {
        for req in reqs.drain(..) {
            let req_kind = if matches!(req.write, JournalWrite::History(_)) {
                Kind::History
            } else {
                Kind::Record
            };
            if let JournalWrite::ItemMessages { parts, count } = &req.write {
                let sent = self.item_bytes_sent.get();
                let done = self.figures.item_bytes_done.load(Ordering::Relaxed);
                if sent.saturating_sub(done) > MAX_ITEM_BYTES_BEHIND {
                    let why = format!(
                        "the journal is {} MB behind: {count} refreshes and updates were not journaled (their history will have a gap)",
                        sent.saturating_sub(done) / 1_000_000
                    );
                    core.on_journaled(0, Err(why), now);
                    continue;
                }
                self.item_bytes_sent.set(sent + parts.len() as u64);
            }
            let refused = match &self.requests {
                Some(tx) => match tx.send(req) {
                    Ok(()) => continue,
                    Err(mpsc::SendError(req)) => {
                        (req.ticket, "the journal thread has stopped".to_string())
                    }
                },
                None => (
                    req.ticket,
                    self.unavailable
                        .clone()
                        .unwrap_or_else(|| "no journal".into()),
                ),
            };
            if matches!(req_kind, Kind::History) {
                core.on_history(refused.0, Err(refused.1), now);
            } else {
                core.on_journaled(refused.0, Err(refused.1), now);
            }
        }
    }

    /// Whether the journal takes records now: opened, its thread running, its last
    /// commit kept; else why not.
    pub fn writable(&self) -> Result<(), String> {
        if let Some(why) = &self.unavailable {
            return Err(why.clone());
        }
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return Err("the journal thread has stopped".into());
        }
        if self.figures.last_commit_failed.load(Ordering::Relaxed) {
            return Err("its last commit failed (see the node's log)".into());
        }
        Ok(())
    }

    /// Hands the answers that are ready to the core.
    pub fn deliver(&self, core: &mut Node, now: Instant) {
        if let Some(rx) = &self.answers {
            while let Ok(a) = rx.try_recv() {
                match a {
                    Answer::Kept(ticket, result) => core.on_journaled(ticket, result, now),
                    Answer::History(ticket, result) => core.on_history(ticket, result, now),
                }
            }
        }
    }
}

fn run(
    mut journal: Journal,
    inbox: Receiver<JournalRequest>,
    outbox: Sender<Answer>,
    waker: Arc<Waker>,
    figures: Arc<JournalFigures>,
) {
    let always = journal.options().sync == SyncPolicy::Always;
    let replays = start_replays(outbox.clone(), waker.clone());
    let mut batch: Vec<JournalRequest> = Vec::new();
    let mut answers: Vec<Answer> = Vec::new();
    // Answers of this batch whose records are committed already (by a history's commit,
    // or one by one with "always"): a later commit that fails does not undo them.
    let mut settled: Vec<Answer> = Vec::new();
    // Since when refreshes and updates have waited, uncommitted, for more to share
    // their write and sync.
    let mut waiting_since: Option<Instant> = None;
    // Their answers (a failure is news to the core), sent once they are committed.
    let mut held: Vec<Answer> = Vec::new();
    // What the open removed was said with the recovery.
    let mut rolls = RollWatch {
        removed: journal.stats().segments_removed,
        ..RollWatch::default()
    };
    // Ends when the event loop drops its sender.
    loop {
        let first = match waiting_since {
            None => match inbox.recv() {
                Ok(r) => r,
                Err(_) => break,
            },
            Some(since) => {
                let left = (since + ITEMS_WAIT).saturating_duration_since(Instant::now());
                match inbox.recv_timeout(left) {
                    Ok(r) => r,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let _ = commit(&mut journal, &mut held, &figures);
                        waiting_since = None;
                        publish_figures(&journal, &figures, &mut rolls);
                        if !deliver(&mut held, &outbox, &waker) {
                            return;
                        }
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        batch.push(first);
        // Group commit: whatever arrived while the last commit ran goes in this one.
        // With "always" each record is committed (and synced) on its own.
        while batch.len() < MAX_BATCH {
            match inbox.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        for req in batch.drain(..) {
            let now = tickwire_journal::now_ns();
            let appended = match &req.write {
                JournalWrite::Received {
                    service,
                    item,
                    user,
                    post_id,
                    image,
                    fields,
                } => journal.received(
                    &Received {
                        service,
                        item,
                        user,
                        post_id: *post_id,
                        image: *image,
                        fields: FieldList::from_trusted(fields),
                    },
                    now,
                ),
                JournalWrite::Completed {
                    received,
                    nak,
                    text,
                } => journal.completed(*received, *nak, text, now),
                JournalWrite::ItemMessages { parts, .. } => {
                    figures
                        .item_bytes_done
                        .fetch_add(parts.len() as u64, Ordering::Relaxed);
                    append_parts(&mut journal, parts, now)
                }
                JournalWrite::History(query) => {
                    // What was appended before it is committed first, the refreshes and
                    // updates held from earlier turns too: a failure there fails those
                    // records (the core hears of them as of any failed commit); one in
                    // reading the history only it.
                    answers.splice(0..0, held.drain(..));
                    if let Err(why) = commit(&mut journal, &mut answers, &figures) {
                        answers.push(Answer::History(req.ticket, Err(why)));
                        continue;
                    }
                    settled.append(&mut answers);
                    let job = match journal.history_source() {
                        Ok(source) => ReplayJob {
                            ticket: req.ticket,
                            source,
                            query: query.clone(),
                        },
                        Err(e) => {
                            answers.push(Answer::History(req.ticket, Err(e.to_string())));
                            continue;
                        }
                    };
                    // Read on the replays' thread: a history reads every segment, and
                    // posts must not wait behind it for their records.
                    let read_here = match &replays {
                        Some(r) => match r.try_send(job) {
                            Ok(()) => None,
                            Err(TrySendError::Full(job)) => {
                                let why = format!(
                                    "{MAX_REPLAYS_WAITING} replays are being read already: ask again later"
                                );
                                answers.push(Answer::History(job.ticket, Err(why)));
                                None
                            }
                            // The replays' thread ended.
                            Err(TrySendError::Disconnected(job)) => Some(job),
                        },
                        None => Some(job),
                    };
                    if let Some(job) = read_here {
                        answers.push(Answer::History(job.ticket, job.read()));
                    }
                    continue;
                }
            };
            answers.push(Answer::Kept(
                req.ticket,
                appended.map_err(|e| e.to_string()),
            ));
            if always {
                let last = answers.len() - 1;
                let _ = commit(&mut journal, &mut answers[last..], &figures);
                settled.append(&mut answers);
            }
        }
        // Group commit: one write and one sync for everything appended in this turn,
        // at once when a post's Ack waits for it. Refreshes and updates alone wait up to
        // ITEMS_WAIT (or ITEMS_BYTES) for more: nobody waits for them, and a sync for
        // each turn's few would cost the node more than the records themselves.
        if !always {
            let (bytes, awaited) = journal.uncommitted();
            let since = *waiting_since.get_or_insert_with(Instant::now);
            if bytes == 0 || awaited || bytes >= ITEMS_BYTES || since.elapsed() >= ITEMS_WAIT {
                answers.splice(0..0, held.drain(..));
                let _ = commit(&mut journal, &mut answers, &figures);
                waiting_since = None;
            } else {
                let (items, others): (Vec<Answer>, Vec<Answer>) = answers
                    .drain(..)
                    .partition(|a| matches!(a, Answer::Kept(0, _)));
                held.extend(items);
                answers.extend(others);
            }
        }
        publish_figures(&journal, &figures, &mut rolls);
        settled.append(&mut answers);
        if !deliver(&mut settled, &outbox, &waker) {
            return;
        }
    }
    // The event loop has gone: what still waits is committed.
    if let Err(e) = journal.commit() {
        warn!("journal: {e}");
    }
}

/// Hands `answers` to the event loop and wakes it, if any is news to it (a kept
/// refresh or update is not); false when the event loop has gone.
fn deliver(answers: &mut Vec<Answer>, outbox: &Sender<Answer>, waker: &Waker) -> bool {
    let mut news = false;
    for a in answers.drain(..) {
        if matches!(a, Answer::Kept(0, Ok(_))) {
            continue;
        }
        news = true;
        if outbox.send(a).is_err() {
            return false;
        }
    }
    if news {
        let _ = waker.wake();
    }
    true
}

/// Whether the journal could start its next segment, and what its retention did, as
/// last said in the log.
#[derive(Default)]
struct RollWatch {
    failures: u64,
    /// Failing since the journal had this many segments.
    failing_at: Option<u64>,
    removed: u64,
    removal_failures: u64,
    held_by: Option<u64>,
}

impl RollWatch {
    /// Says when starting new segments begins to fail (a full disk: the current segment
    /// goes on past its size, nothing is lost) and when it works again; not each try.
    fn look(&mut self, journal: &Journal) {
        let s = journal.stats();
        match self.failing_at {
            None if s.roll_failures > self.failures => {
                warn!(
                    "journal: cannot start the next segment in {} (a full disk?): the \
                     current one grows past its size until it can",
                    journal.dir().display()
                );
                self.failing_at = Some(s.segments);
            }
            Some(at) if s.segments > at => {
                info!("journal: the next segment is started again");
                self.failing_at = None;
            }
            _ => {}
        }
        self.failures = s.roll_failures;
        self.look_at_retention(journal);
    }

    /// Says which old segments went, when removing them fails and works again, and
    /// which unanswered post keeps the journal above `retain_mb` (once per post).
    fn look_at_retention(&mut self, journal: &Journal) {
        let s = journal.stats();
        if s.segments_removed > self.removed {
            info!(
                "journal: {} old segments removed to stay within retain_mb ({} in all)",
                s.segments_removed - self.removed,
                s.segments_removed
            );
            if self.removal_failures > 0 {
                info!("journal: old segments are removed again");
                self.removal_failures = 0;
            }
        }
        if s.removal_failures > self.removal_failures && self.removal_failures == 0 {
            warn!(
                "journal: above retain_mb, and an old segment cannot be removed: {}; tried again at the next segment",
                journal.removal_error().unwrap_or("unknown")
            );
            self.removal_failures = s.removal_failures;
        }
        if s.retention_held_by.is_some() && s.retention_held_by != self.held_by {
            warn!(
                "journal: above retain_mb, and its oldest segment is kept for the post of seq {} not yet answered (a restart delivers it again)",
                s.retention_held_by.unwrap_or_default()
            );
        }
        self.removed = s.segments_removed;
        self.held_by = s.retention_held_by;
    }
}

fn publish_figures(journal: &Journal, figures: &JournalFigures, rolls: &mut RollWatch) {
    rolls.look(journal);
    let s = journal.stats();
    figures.records.store(s.records, Ordering::Relaxed);
    figures.commits.store(s.commits, Ordering::Relaxed);
    figures
        .segments_removed
        .store(s.segments_removed, Ordering::Relaxed);
    figures
        .syscalls
        .store(s.syscalls.writes + s.syscalls.syncs, Ordering::Relaxed);
}

/// Appends journaled refreshes and updates (each a u32 length, then its part); the
/// last seq.
fn append_parts(
    journal: &mut Journal,
    mut parts: &[u8],
    now: u64,
) -> Result<u64, tickwire_journal::JournalError> {
    let mut last = 0;
    while let [a, b, c, d, rest @ ..] = parts {
        let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
        let Some((part, tail)) = rest.split_at_checked(len) else {
            break;
        };
        last = journal.item_message(part, now)?;
        parts = tail;
    }
    Ok(last)
}

/// Commits what was appended for `answers`; on failure none of them is kept (each
/// says why) and the reason is returned.
fn commit(
    journal: &mut Journal,
    answers: &mut [Answer],
    figures: &JournalFigures,
) -> Result<(), String> {
    // Nothing to write tells nothing of the disk: the last failure stands.
    if journal.uncommitted().0 == 0 {
        return Ok(());
    }
    let result = journal.commit();
    figures
        .last_commit_failed
        .store(result.is_err(), Ordering::Relaxed);
    result.map_err(|e| {
        warn!("journal: {e}");
        let why = e.to_string();
        fail(answers, &why);
        why
    })
}

fn fail(answers: &mut [Answer], why: &str) {
    for a in answers.iter_mut() {
        if let Answer::Kept(_, r) = a {
            if r.is_ok() {
                *r = Err(why.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_core::CoreConfig;
    use tickwire_journal::ItemMessage;
    use tickwire_proto::{encode_field_list, Value};

    /// An update of FEED/SYM1 as a part of `ItemMessages`, after what `parts` holds:
    /// its length, then it.
    fn update_part(seq: u32, fields: &[u8], parts: &mut Vec<u8>) {
        let at = parts.len();
        parts.extend_from_slice(&[0; 4]);
        ItemMessage {
            service: "FEED",
            item: "SYM1",
            seq,
            refresh: false,
            update_type: 0,
            fields: FieldList::from_trusted(fields),
        }
        .encode_part(parts)
        .expect("encodes");
        let len = (parts.len() - at - 4) as u32;
        parts[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// Journaled updates alone wait a little before their commit; a node that stops
    /// meanwhile (dropping its `JournalThread`) still has them in the journal.
    #[test]
    fn updates_waiting_for_their_commit_are_kept_when_the_thread_is_dropped() {
        let dir =
            std::env::temp_dir().join(format!("tickwire-journal-drop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = JournalSection {
            dir: dir.display().to_string(),
            services: vec!["*".into()],
            updates: true,
            ..JournalSection::default()
        };
        let mut core = Node::new(CoreConfig::default(), Instant::now());
        let poll = mio::Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).expect("waker"));
        let thread = JournalThread::start(&cfg, &mut core, waker);
        let fields = encode_field_list([(22, Value::Int(1))]);
        let mut parts = Vec::new();
        for seq in 1..=3 {
            update_part(seq, &fields, &mut parts);
        }
        let mut reqs = vec![JournalRequest {
            ticket: 0,
            write: JournalWrite::ItemMessages { parts, count: 3 },
        }];
        thread.submit(&mut core, &mut reqs, Instant::now());
        // At once: well within the time updates may wait for their commit.
        drop(thread);
        let (_, recovery) = Journal::open(&dir, JournalOptions::default()).expect("reopens");
        assert_eq!(recovery.records, 3, "the three updates were committed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    const FSIZE_INSIDE: &str = "TICKWIRE_JOURNAL_FSIZE_DIR";

    /// Runs the test `name` again in a process whose files may not pass 32 KiB
    /// (`ulimit -f`: a write past it fails, EFBIG, as on a full disk), and checks that it
    /// passed: `None`. In that process: `Some` (the journal's directory).
    fn under_a_file_size_limit(name: &str) -> Option<PathBuf> {
        if let Ok(dir) = std::env::var(FSIZE_INSIDE) {
            return Some(PathBuf::from(dir));
        }
        let dir = std::env::temp_dir().join(format!(
            "tickwire-journal-fsize-{}-{}",
            name.rsplit(':').next().unwrap_or(name),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let exe = std::env::current_exe().expect("the test binary");
        let out = std::process::Command::new("sh")
            .arg("-c")
            // Past the limit a write fails (EFBIG) instead of killing the process.
            .arg("trap '' XFSZ; ulimit -f 64 && exec \"$0\" \"$@\"")
            .arg(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(FSIZE_INSIDE, &dir)
            .output()
            .expect("runs");
        let _ = std::fs::remove_dir_all(&dir);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("1 passed"), "{text}");
        None
    }

    /// One batch: a post, a history (whose commit writes the post), then a post too large
    /// for the file size the process may write: the last commit fails. The first post is
    /// in the journal (a restart delivers it again), so it must not be refused: it goes
    /// on to its publisher.
    #[test]
    fn a_failed_commit_does_not_refuse_a_post_a_history_committed_before_it() {
        let Some(dir) = under_a_file_size_limit(
            "journal::tests::a_failed_commit_does_not_refuse_a_post_a_history_committed_before_it",
        ) else {
            return;
        };
        let opts = JournalOptions {
            sync: SyncPolicy::Batch,
            segment_bytes: 1 << 20,
            ..JournalOptions::default()
        };
        let (journal, _) = Journal::open(&dir, opts.clone()).expect("opens");
        let post = |ticket, post_id, fields: Vec<u8>| JournalRequest {
            ticket,
            write: JournalWrite::Received {
                service: "FEED".into(),
                item: "SYM1".into(),
                user: String::new(),
                post_id,
                image: false,
                fields,
            },
        };
        let text = "x".repeat(60_000);
        let (tx, inbox) = mpsc::channel();
        tx.send(post(1, 1, encode_field_list([(22, Value::Int(1))])))
            .expect("sends");
        tx.send(JournalRequest {
            ticket: 2,
            write: JournalWrite::History(tickwire_journal::HistoryQuery {
                service: "FEED".into(),
                item: "SYM1".into(),
                from: tickwire_proto::ReplayFrom::Seq(1),
                until: 0,
                max: 10,
                max_bytes: 1 << 20,
            }),
        })
        .expect("sends");
        tx.send(post(3, 2, encode_field_list([(25, Value::Ascii(&text))])))
            .expect("sends");
        drop(tx);
        let (outbox, answers) = mpsc::channel();
        let poll = mio::Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).expect("waker"));
        // All three are waiting: one batch.
        run(journal, inbox, outbox, waker, Arc::default());
        let kept: std::collections::HashMap<u64, Result<u64, String>> = answers
            .try_iter()
            .filter_map(|a| match a {
                Answer::Kept(t, r) => Some((t, r)),
                Answer::History(..) => None,
            })
            .collect();
        assert!(
            kept[&3].is_err(),
            "the large post is not kept: {:?}",
            kept[&3]
        );
        let (j, _) = Journal::open(&dir, opts).expect("reopens");
        assert_eq!(j.pending().map(|p| p.post_id).collect::<Vec<_>>(), [1]);
        assert!(
            kept[&1].is_ok(),
            "post 1 is in the journal, yet refused: {:?}",
            kept[&1]
        );
    }

    /// Refreshes and updates wait, uncommitted, for more to share their commit; a
    /// replay's question commits them first. When that commit fails (a full disk) they
    /// are lost, and the core must hear of it as of any failed commit (counted, logged:
    /// the history has a gap), and the node's readiness must show the failure.
    #[test]
    fn updates_a_replays_commit_cannot_keep_are_reported_as_not_kept() {
        let Some(dir) = under_a_file_size_limit(
            "journal::tests::updates_a_replays_commit_cannot_keep_are_reported_as_not_kept",
        ) else {
            return;
        };
        let (journal, _) = Journal::open(&dir, JournalOptions::default()).expect("opens");
        let fields = encode_field_list([(22, Value::Int(1))]);
        let (tx, inbox) = mpsc::channel();
        // A whole batch of updates, 400 KB: more than the file may hold, less than what
        // commits at once. They wait for more...
        for seq in 1..=MAX_BATCH as u32 {
            let mut parts = Vec::new();
            update_part(seq, &fields, &mut parts);
            tx.send(JournalRequest {
                ticket: 0,
                write: JournalWrite::ItemMessages { parts, count: 1 },
            })
            .expect("sends");
        }
        // ...and the next batch, a replay's question, commits them first.
        tx.send(JournalRequest {
            ticket: 1,
            write: JournalWrite::History(tickwire_journal::HistoryQuery {
                service: "FEED".into(),
                item: "SYM1".into(),
                from: tickwire_proto::ReplayFrom::Seq(1),
                until: MAX_BATCH as u32,
                max: 10,
                max_bytes: 1 << 20,
            }),
        })
        .expect("sends");
        drop(tx);
        let (outbox, answers) = mpsc::channel();
        let poll = mio::Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).expect("waker"));
        let figures = Arc::new(JournalFigures::default());
        run(journal, inbox, outbox, waker, figures.clone());
        let answers: Vec<Answer> = answers.try_iter().collect();
        assert!(
            answers
                .iter()
                .any(|a| matches!(a, Answer::History(1, Err(_)))),
            "the replay is refused"
        );
        let lost = answers
            .iter()
            .filter(|a| matches!(a, Answer::Kept(0, Err(_))))
            .count();
        assert!(lost > 0, "the updates lost are not reported");
        assert!(
            figures.last_commit_failed.load(Ordering::Relaxed),
            "the failed commit is not shown"
        );
        let (_, recovery) = Journal::open(&dir, JournalOptions::default()).expect("reopens");
        assert_eq!(recovery.records, 0, "the updates were lost");
    }
}
