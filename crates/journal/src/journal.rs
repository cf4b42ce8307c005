//! The journal: recovery on open, appends, commits under a sync policy, and the posts
//! received and not completed.

use crate::files::{self, SegmentFile, SyscallCounts};
use crate::record::{Body, Completed, Received, Record};
use crate::segment::{self, Scan};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use tickwire_proto::NakCode;

/// When a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// Every post is on the disk (fdatasync) before its Ack: the Ack survives a crash of
    /// the machine. One sync per post.
    Always,
    /// Group commit: everything that arrived while the previous sync ran is written and
    /// synced together, then acknowledged. The same guarantee as `always`, one sync
    /// for many posts.
    Batch,
    /// Written to the operating system before the Ack, never synced by the node: the Ack
    /// survives a crash of the node, not of the machine.
    Never,
}

impl SyncPolicy {
    /// The policy as the config file spells it.
    pub fn name(self) -> &'static str {
        match self {
            SyncPolicy::Always => "always",
            SyncPolicy::Batch => "batch",
            SyncPolicy::Never => "never",
        }
    }

    /// A policy from its config spelling (`always`, `batch`, `never`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "always" => Some(SyncPolicy::Always),
            "batch" => Some(SyncPolicy::Batch),
            "never" => Some(SyncPolicy::Never),
            _ => None,
        }
    }
}

/// How a journal writes.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// When a record is synced to disk.
    pub sync: SyncPolicy,
    /// A segment past this size is closed and the next one started.
    pub segment_bytes: u64,
    /// The journal's size past which its oldest segments are removed, whole, as a new
    /// one starts and when it opens; 0: every segment is kept. The segment being
    /// appended to stays, and so does every segment from the oldest one holding a post
    /// not yet answered (a restart delivers it again): the journal may stay above this
    /// size while such a post waits.
    pub retain_bytes: u64,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            sync: SyncPolicy::Batch,
            segment_bytes: 64 * 1024 * 1024,
            retain_bytes: 0,
        }
    }
}

/// Why the journal cannot open or take a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {path}: cannot {op}: {source}")]
    Io {
        /// What it tried.
        op: &'static str,
        /// On which file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A record is not what was written, other than a torn last write.
    #[error("journal {path}: corrupt at byte {offset}: {why}")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where in it.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// Segments whose seqs do not follow each other.
    #[error("journal {path}: segments do not follow each other: {why}")]
    Gap {
        /// The segment.
        path: PathBuf,
        /// What does not follow.
        why: String,
    },
    /// Another process (another node) has the journal open: two writers would write
    /// over each other's records.
    #[error(
        "journal {0}: in use by another process (another node with the same journal directory?)"
    )]
    InUse(PathBuf),
    /// A record too large to encode.
    #[error("cannot encode a journal record: {0}")]
    Encode(#[from] tickwire_proto::EncodeError),
    /// A sync failed earlier: what was written since is in doubt, so nothing more is
    /// taken until the node restarts and recovers the journal.
    #[error("journal out of service since a failed sync ({0}); restart the node to recover it")]
    Failed(String),
}

impl JournalError {
    fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        JournalError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A post received and not yet completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingPost {
    /// The seq of its received record (the completed record names it).
    pub seq: u64,
    /// When it was received (ns since the Unix epoch).
    pub time_ns: u64,
    /// Its item's service.
    pub service: String,
    /// Its item.
    pub item: String,
    /// Who posted it (empty on an open node).
    pub user: String,
    /// The poster's number for it.
    pub post_id: u32,
    /// A whole image, not an update.
    pub image: bool,
    /// The encoded field list.
    pub fields: Vec<u8>,
}

/// A journaled refresh or update of an item, for a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastMessage {
    /// When the node received it (ns since the Unix epoch).
    pub time_ns: u64,
    /// The item's sequence number.
    pub seq: u32,
    /// A refresh, not an update.
    pub refresh: bool,
    /// The update type (0 for a refresh).
    pub update_type: u8,
    /// The encoded field list.
    pub fields: Vec<u8>,
}

/// A history to read: the journaled refreshes and updates of one item from `from` (an
/// item seq, or a time) up to item seq `until` (the latest messages above it are left
/// out; earlier ones, from before its publisher started its seqs again, are not), at
/// most `max` of them and `max_bytes` of fields (the latest ones when there are more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryQuery {
    /// The item's service.
    pub service: String,
    /// The item.
    pub item: String,
    /// Where the history starts.
    pub from: tickwire_proto::ReplayFrom,
    /// The item's sequence number the history ends at.
    pub until: u32,
    /// Messages at most.
    pub max: usize,
    /// Bytes of fields at most.
    pub max_bytes: usize,
}

/// What [`Journal::history`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The messages, oldest first.
    pub messages: Vec<PastMessage>,
    /// There were more than asked for: these are the latest.
    pub truncated: bool,
}

/// When a segment was created (its header), if it can be read.
fn segment_created(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut h = [0u8; segment::HEADER_LEN];
    std::fs::File::open(path).ok()?.read_exact(&mut h).ok()?;
    Some(u64::from_be_bytes(h[24..32].try_into().ok()?))
}

/// What opening the journal found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segments read.
    pub segments: usize,
    /// Records read.
    pub records: u64,
    /// A torn last record that was cut off: the file, where, how many bytes, why.
    pub cut: Option<(PathBuf, u64, u64, String)>,
    /// Posts received and not completed, to deliver again.
    pub pending: usize,
}

/// What the journal has done since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Records appended.
    pub records: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Commits (a write, and a sync where the policy asks).
    pub commits: u64,
    /// The system calls they took.
    pub syscalls: SyscallCounts,
    /// Segments started.
    pub segments: u64,
    /// Times the next segment could not be started (a full disk); the current one
    /// went on past its size.
    pub roll_failures: u64,
    /// Old segments removed to keep the journal within `retain_bytes`.
    pub segments_removed: u64,
    /// Times an old segment could not be removed (the last error is in
    /// [`Journal::removal_error`]); removal stops there until the next try.
    pub removal_failures: u64,
    /// At the last look (the open, or a new segment) the journal was above
    /// `retain_bytes` and kept its oldest segment for the post of this seq, not yet
    /// answered (a restart delivers it again).
    pub retention_held_by: Option<u64>,
}

/// A segment before the one being appended to, as retention sees it.
#[derive(Debug)]
struct ClosedSegment {
    first: u64,
    path: PathBuf,
    bytes: u64,
}

/// A change to the pending posts, applied once its record is committed.
enum Change {
    Received(PendingPost),
    Completed(u64),
}

/// A durable journal of posts and their answers (and journaled items' updates):
/// appended records, committed under a sync policy, recovered on open.
pub struct Journal {
    dir: PathBuf,
    /// Holds the directory's lock for as long as the journal is open.
    _lock: std::fs::File,
    opts: JournalOptions,
    seg: SegmentFile,
    /// The seq of the first record of `seg` (its name).
    seg_first: u64,
    /// The segments before `seg`, oldest first, and their bytes in all.
    closed: VecDeque<ClosedSegment>,
    closed_bytes: u64,
    /// Why the last removal of an old segment failed.
    removal_error: Option<String>,
    /// Seq of the next record appended.
    next_seq: u64,
    /// Seq of the next record after the last commit (appends since are in `buf`).
    committed_seq: u64,
    buf: Vec<u8>,
    /// Whether `buf` holds a post's record (an Ack waits for its commit), not only
    /// refreshes and updates.
    awaited: bool,
    changes: Vec<Change>,
    pending: BTreeMap<u64, PendingPost>,
    stats: JournalStats,
    failed: Option<String>,
}

impl Journal {
    /// Opens (creating it if need be) the journal in `dir` and recovers it: every
    /// segment is read and checked, a torn last record is cut off, the posts received
    /// and not completed are found. Corruption anywhere else is an error.
    pub fn open(dir: &Path, opts: JournalOptions) -> Result<(Journal, Recovery), JournalError> {
        let mut counts = SyscallCounts::default();
        files::create_dir_durably(dir, &mut counts)
            .map_err(|e| JournalError::io("create the directory", dir, e))?;
        // One writer: a second node on the directory would append at its own idea of the
        // end, over the first's records (acknowledged posts among them).
        let lock = files::lock_dir(dir)
            .map_err(|e| JournalError::io("lock", dir, e))?
            .ok_or_else(|| JournalError::InUse(dir.to_path_buf()))?;
        let list = files::list_segments(dir).map_err(|e| JournalError::io("list", dir, e))?;
        let mut recovery = Recovery {
            segments: list.len(),
            ..Recovery::default()
        };
        let mut pending: BTreeMap<u64, PendingPost> = BTreeMap::new();
        let mut next_seq = 1u64;
        // Every segment that reads whole; the last is appended to.
        let mut kept: Vec<ClosedSegment> = Vec::new();
        for (i, (first, path)) in list.iter().enumerate() {
            let is_last = i + 1 == list.len();
            if i > 0 && *first != next_seq {
                let (before_first, before) = &list[i - 1];
                // The node leaves only its last segment empty (it starts the next one
                // once this one is full): an empty one before another is a stray or cut
                // file, its records (if it had any) lost. Said as such, and of seq 0 (no
                // record has it) without counting below it.
                if *before_first == next_seq {
                    return Err(JournalError::Gap {
                        path: before.clone(),
                        why: format!(
                            "it holds no records, yet {} follows it (only the last segment can be empty)",
                            segment::file_name(*first)
                        ),
                    });
                }
                return Err(JournalError::Gap {
                    path: path.clone(),
                    why: format!(
                        "it starts at seq {first}, the one before ends at {}",
                        next_seq - 1
                    ),
                });
            }
            let bytes = files::read_file(path).map_err(|e| JournalError::io("read", path, e))?;
            let scan = match segment::scan(&bytes, *first) {
                Ok(s) => s,
                // A segment created by a crashed node before its header reached the
                // disk: nothing was ever written to it after the header.
                Err(e) if is_last && segment::header_cut_short(&bytes) => {
                    std::fs::remove_file(path).map_err(|e| JournalError::io("remove", path, e))?;
                    recovery.cut = Some((path.clone(), 0, bytes.len() as u64, e.to_string()));
                    recovery.segments -= 1;
                    continue;
                }
                Err(e) => {
                    return Err(JournalError::Corrupt {
                        path: path.clone(),
                        offset: 0,
                        why: e.to_string(),
                    })
                }
            };
            let Scan {
                records,
                valid_len,
                stopped,
            } = scan;
            if let Some(stop) = stopped {
                if !(is_last && stop.torn) {
                    return Err(JournalError::Corrupt {
                        path: path.clone(),
                        offset: stop.offset as u64,
                        why: stop.why,
                    });
                }
                recovery.cut = Some((
                    path.clone(),
                    valid_len as u64,
                    (bytes.len() - valid_len) as u64,
                    stop.why,
                ));
            }
            for r in &records {
                recovery.records += 1;
                apply(&mut pending, r);
            }
            next_seq = first + records.len() as u64;
            kept.push(ClosedSegment {
                first: *first,
                path: path.clone(),
                bytes: valid_len as u64,
            });
        }
        let (seg, seg_first) = match kept.pop() {
            Some(last) => (
                SegmentFile::open_at(&last.path, last.bytes, &mut counts)
                    .map_err(|e| JournalError::io("open for appending", &last.path, e))?,
                last.first,
            ),
            None => {
                recovery.segments = 1;
                (create_segment(dir, next_seq, &mut counts)?, next_seq)
            }
        };
        recovery.pending = pending.len();
        let stats = JournalStats {
            segments: recovery.segments as u64,
            syscalls: counts,
            ..JournalStats::default()
        };
        let mut journal = Journal {
            dir: dir.to_path_buf(),
            _lock: lock,
            opts,
            seg,
            seg_first,
            closed_bytes: kept.iter().map(|c| c.bytes).sum(),
            closed: kept.into(),
            removal_error: None,
            next_seq,
            committed_seq: next_seq,
            buf: Vec::with_capacity(64 * 1024),
            awaited: false,
            changes: Vec::new(),
            pending,
            stats,
            failed: None,
        };
        // A retention lowered since the last run applies at once.
        journal.retire();
        Ok((journal, recovery))
    }

    /// How it writes.
    pub fn options(&self) -> &JournalOptions {
        &self.opts
    }

    /// Appends a received post (written at the next [`Journal::commit`]); its seq.
    pub fn received(&mut self, r: &Received<'_>, time_ns: u64) -> Result<u64, JournalError> {
        let seq = self.append(time_ns, Body::Received(r.clone()))?;
        self.changes.push(Change::Received(PendingPost {
            seq,
            time_ns,
            service: r.service.to_string(),
            item: r.item.to_string(),
            user: r.user.to_string(),
            post_id: r.post_id,
            image: r.image,
            fields: r.fields.as_bytes().to_vec(),
        }));
        Ok(seq)
    }

    /// Appends the answer to the post received as `received`; its seq.
    pub fn completed(
        &mut self,
        received: u64,
        nak: Option<NakCode>,
        text: &str,
        time_ns: u64,
    ) -> Result<u64, JournalError> {
        let seq = self.append(
            time_ns,
            Body::Completed(Completed {
                received,
                nak,
                text,
            }),
        )?;
        self.changes.push(Change::Completed(received));
        Ok(seq)
    }

    /// Appends a refresh or update of an item given as its encoded part
    /// ([`crate::record::ItemMessage::encode_part`]); its seq.
    pub fn item_message(&mut self, part: &[u8], time_ns: u64) -> Result<u64, JournalError> {
        if let Some(why) = &self.failed {
            return Err(JournalError::Failed(why.clone()));
        }
        let len = 1 + 8 + 8 + part.len();
        if len > crate::record::MAX_BODY {
            return Err(JournalError::Encode(tickwire_proto::EncodeError::TooLong {
                what: "journal record",
                len,
                max: crate::record::MAX_BODY,
            }));
        }
        let seq = self.next_seq;
        let start = self.buf.len();
        self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        self.buf.extend_from_slice(&[0; 4]);
        self.buf.push(crate::record::Stream::Update as u8);
        self.buf.extend_from_slice(&seq.to_be_bytes());
        self.buf.extend_from_slice(&time_ns.to_be_bytes());
        self.buf.extend_from_slice(part);
        let crc = crc32fast::hash(&self.buf[start + 8..]);
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
        self.next_seq += 1;
        Ok(seq)
    }

    fn append(&mut self, time_ns: u64, body: Body<'_>) -> Result<u64, JournalError> {
        if let Some(why) = &self.failed {
            return Err(JournalError::Failed(why.clone()));
        }
        let seq = self.next_seq;
        Record { seq, time_ns, body }.encode(&mut self.buf)?;
        self.next_seq += 1;
        self.awaited = true;
        Ok(seq)
    }

    /// What has been appended and not committed: its bytes, and whether a post's
    /// record is among them (someone waits for its commit). Refreshes and updates
    /// alone may wait for more to commit with (nobody waits for them).
    pub fn uncommitted(&self) -> (usize, bool) {
        (self.buf.len(), self.awaited)
    }

    /// Writes what was appended since the last commit (one write) and, unless the
    /// policy is `never`, syncs it. On `Ok` every record appended so far is in the
    /// journal. On `Err` none of those since the last commit is: a failed write is cut
    /// back off the file (the journal goes on, e.g. once a full disk has room again); a
    /// failed sync cuts them back off too and puts the journal out of service.
    pub fn commit(&mut self) -> Result<(), JournalError> {
        if let Some(why) = &self.failed {
            return Err(JournalError::Failed(why.clone()));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let before = self.seg.len;
        if let Err(e) = self.seg.append(&self.buf, &mut self.stats.syscalls) {
            let err = JournalError::io("write", &self.seg.path, e);
            self.abandon();
            if let Err(t) = self.seg.truncate(before) {
                self.failed = Some(format!("{err}; and cutting it back failed: {t}"));
            }
            return Err(err);
        }
        if self.opts.sync != SyncPolicy::Never {
            if let Err(e) = self.seg.sync(&mut self.stats.syscalls) {
                let err = JournalError::io("sync", &self.seg.path, e);
                // Refused, so cut back off as after a failed write: left in the file, a
                // restart would find them and deliver posts their posters were told
                // were not kept.
                self.failed = Some(match self.seg.truncate(before) {
                    Ok(()) => err.to_string(),
                    Err(t) => format!("{err}; and cutting it back failed: {t}"),
                });
                self.abandon();
                return Err(err);
            }
        }
        self.stats.records += self.next_seq - self.committed_seq;
        self.stats.bytes += self.buf.len() as u64;
        self.stats.commits += 1;
        self.committed_seq = self.next_seq;
        self.buf.clear();
        self.awaited = false;
        for c in self.changes.drain(..) {
            match c {
                Change::Received(p) => {
                    self.pending.insert(p.seq, p);
                }
                Change::Completed(seq) => {
                    self.pending.remove(&seq);
                }
            }
        }
        // What was committed is kept whether or not the next segment can be started
        // now (a full disk): the roll is tried again at the next commit.
        if self.seg.len >= self.opts.segment_bytes && self.roll().is_err() {
            self.stats.roll_failures += 1;
        }
        Ok(())
    }

    /// Forgets what was appended since the last commit.
    fn abandon(&mut self) {
        self.buf.clear();
        self.awaited = false;
        self.changes.clear();
        self.next_seq = self.committed_seq;
    }

    /// Starts the next segment (the current one is complete and, unless `never`,
    /// synced).
    fn roll(&mut self) -> Result<(), JournalError> {
        // With `never` the current segment's records were not synced: they are now, once
        // per segment, or a crash of the machine could keep the next segment (its header
        // is synced) and lose this one's last records, a gap that makes the journal
        // refuse to open.
        // A failed sync puts the journal out of service, as a commit's does: the
        // records it was to make durable were acknowledged, and may never reach the
        // disk (the kernel may drop pages it failed to write back), so no more are.
        if self.opts.sync == SyncPolicy::Never {
            if let Err(e) = self.seg.sync(&mut self.stats.syscalls) {
                let err = JournalError::io("sync", &self.seg.path, e);
                self.failed = Some(err.to_string());
                return Err(err);
            }
        }
        // Old segments past the retained size go first: on a full disk they are the room
        // the next one needs (and a roll that failed frees them when it is tried again).
        self.retire();
        match create_segment(&self.dir, self.next_seq, &mut self.stats.syscalls) {
            Ok(seg) => {
                let done = std::mem::replace(&mut self.seg, seg);
                self.closed_bytes += done.len;
                self.closed.push_back(ClosedSegment {
                    first: std::mem::replace(&mut self.seg_first, self.next_seq),
                    path: done.path,
                    bytes: done.len,
                });
                self.stats.segments += 1;
                self.retire();
                Ok(())
            }
            // Appends go on in the current segment; the next commit tries again.
            Err(e) => Err(e),
        }
    }

    /// Removes the oldest segments while the journal is above `retain_bytes`, but not
    /// the one holding the oldest post not yet answered, nor any after it: segments go
    /// oldest first, so those kept always follow each other, as a restart requires.
    fn retire(&mut self) {
        if self.opts.retain_bytes == 0 {
            return;
        }
        self.stats.retention_held_by = None;
        let oldest_pending = self.pending.keys().next().copied();
        while self.closed_bytes + self.seg.len > self.opts.retain_bytes {
            let Some(oldest) = self.closed.front() else {
                return;
            };
            let next_first = self.closed.get(1).map_or(self.seg_first, |c| c.first);
            if let Some(seq) = oldest_pending.filter(|&seq| seq < next_first) {
                self.stats.retention_held_by = Some(seq);
                return;
            }
            let removed = match std::fs::remove_file(&oldest.path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                // Each removal reaches the disk before the next is made: a crash that
                // undid an older one and kept a younger one would leave segments that do
                // not follow each other, which the journal refuses to open.
                _ => files::sync_dir(&self.dir, &mut self.stats.syscalls),
            };
            if let Err(e) = removed {
                self.stats.removal_failures += 1;
                self.removal_error = Some(JournalError::io("remove", &oldest.path, e).to_string());
                return;
            }
            self.closed_bytes -= oldest.bytes;
            self.closed.pop_front();
            self.stats.segments_removed += 1;
        }
    }

    /// Why the last removal of an old segment failed (see
    /// [`JournalStats::removal_failures`]).
    pub fn removal_error(&self) -> Option<&str> {
        self.removal_error.as_deref()
    }

    /// The history `q` asks for, oldest first (the latest when there are more than it
    /// holds: `truncated`). What was appended and not committed is committed first, so
    /// the history reaches everything handed to the journal before this call.
    pub fn history(&mut self, q: &HistoryQuery) -> Result<History, JournalError> {
        self.history_source()?.read(q)
    }

    /// What a history is read from, as the journal is now (what was appended is
    /// committed first): readable on another thread while the journal goes on, as
    /// segments are only appended to, and the last is read only as far as it was
    /// committed.
    pub fn history_source(&mut self) -> Result<HistorySource, JournalError> {
        self.commit()?;
        let segments =
            files::list_segments(&self.dir).map_err(|e| JournalError::io("list", &self.dir, e))?;
        Ok(HistorySource {
            segments,
            last: (self.seg.path.clone(), self.seg.len),
        })
    }

    /// Posts received and not completed, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &PendingPost> {
        self.pending.values()
    }

    /// Posts received and not yet completed.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Its figures.
    pub fn stats(&self) -> JournalStats {
        self.stats
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// A segment's bytes are what an interrupted creation leaves: zeros, or the start of a
/// header.
fn apply(pending: &mut BTreeMap<u64, PendingPost>, r: &Record<'_>) {
    match &r.body {
        Body::Received(p) => {
            pending.insert(
                r.seq,
                PendingPost {
                    seq: r.seq,
                    time_ns: r.time_ns,
                    service: p.service.to_string(),
                    item: p.item.to_string(),
                    user: p.user.to_string(),
                    post_id: p.post_id,
                    image: p.image,
                    fields: p.fields.as_bytes().to_vec(),
                },
            );
        }
        Body::Completed(c) => {
            pending.remove(&c.received);
        }
        Body::Update(_) => {}
    }
}

/// The segments a history is read from ([`Journal::history_source`]).
#[derive(Debug, Clone)]
pub struct HistorySource {
    segments: Vec<(u64, PathBuf)>,
    /// The segment being appended to, and its committed length then.
    last: (PathBuf, u64),
}

impl HistorySource {
    /// The history `q` asks for (see [`Journal::history`]).
    pub fn read(&self, q: &HistoryQuery) -> Result<History, JournalError> {
        let HistoryQuery {
            ref service,
            ref item,
            from,
            until,
            max,
            max_bytes,
        } = *q;
        // The history up to the last message that reaches `until`...
        let mut out = Window::new(max, max_bytes);
        // ...and the messages after it (seqs above `until`): part of the history only if
        // one that reaches it comes later (an item's seqs start again when its publisher
        // does, and the messages before that restart, with higher seqs, are part of it).
        let mut tail = Window::new(max, max_bytes);
        // The first segment read, while what was read of it counts.
        let mut read_from: Option<&Path> = None;
        for (i, (first, path)) in self.segments.iter().enumerate() {
            // From a time: a segment whose successor was created before it holds
            // nothing as late (records are written in time order).
            if let (tickwire_proto::ReplayFrom::Time(t), Some((_, next))) =
                (from, self.segments.get(i + 1))
            {
                if segment_created(next).is_some_and(|c| c < t) {
                    continue;
                }
            }
            let mut bytes = match files::read_file(path) {
                Ok(b) => b,
                // Removed since the source was taken (the journal's retention): only the
                // oldest go, so the history starts later. Those read before it went too
                // (while they were read): what they gave is dropped, or the history
                // would have a hole. One of them still there is a hole: corruption.
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        && read_from.is_none_or(|p| !p.exists()) =>
                {
                    read_from = None;
                    out = Window::new(max, max_bytes);
                    tail = Window::new(max, max_bytes);
                    continue;
                }
                Err(e) => return Err(JournalError::io("read", path, e)),
            };
            read_from.get_or_insert(path);
            if *path == self.last.0 {
                // Only what was committed when the source was taken: the journal may be
                // appending after it.
                bytes.truncate(self.last.1 as usize);
            }
            let scan = segment::scan(&bytes, *first).map_err(|e| JournalError::Corrupt {
                path: path.clone(),
                offset: 0,
                why: e.to_string(),
            })?;
            // A history with a hole in it would be a replay with a gap, which a replay
            // promises not to have: refused instead, with where and why.
            if let Some(stop) = &scan.stopped {
                return Err(JournalError::Corrupt {
                    path: path.clone(),
                    offset: stop.offset as u64,
                    why: stop.why.clone(),
                });
            }
            for r in &scan.records {
                let Body::Update(m) = &r.body else { continue };
                if m.service != service.as_str() || m.item != item.as_str() {
                    continue;
                }
                let wanted = match from {
                    tickwire_proto::ReplayFrom::Seq(s) => m.seq >= s,
                    tickwire_proto::ReplayFrom::Time(t) => r.time_ns >= t,
                };
                if !wanted {
                    continue;
                }
                let past = PastMessage {
                    time_ns: r.time_ns,
                    seq: m.seq,
                    refresh: m.refresh,
                    update_type: m.update_type,
                    fields: m.fields.as_bytes().to_vec(),
                };
                if m.seq > until {
                    tail.push(past);
                    continue;
                }
                if tail.cut {
                    // The tail alone was more than a history holds: all of `out` is older.
                    out.msgs.clear();
                    out.bytes = 0;
                    out.cut = true;
                }
                tail.cut = false;
                tail.bytes = 0;
                for t in std::mem::take(&mut tail.msgs) {
                    out.push(t);
                }
                out.push(past);
            }
        }
        Ok(History {
            messages: out.msgs.into(),
            truncated: out.cut,
        })
    }
}

/// The latest messages of a history within its bounds.
struct Window {
    msgs: std::collections::VecDeque<PastMessage>,
    /// Bytes of fields in `msgs`.
    bytes: usize,
    max: usize,
    max_bytes: usize,
    /// Older messages were left out.
    cut: bool,
}

impl Window {
    fn new(max: usize, max_bytes: usize) -> Self {
        Window {
            msgs: std::collections::VecDeque::new(),
            bytes: 0,
            max,
            max_bytes,
            cut: false,
        }
    }

    fn push(&mut self, m: PastMessage) {
        let size = m.fields.len();
        while !self.msgs.is_empty()
            && (self.msgs.len() >= self.max || self.bytes + size > self.max_bytes)
        {
            if let Some(old) = self.msgs.pop_front() {
                self.bytes -= old.fields.len();
            }
            self.cut = true;
        }
        if self.max == 0 || size > self.max_bytes {
            self.cut = true;
            return;
        }
        self.bytes += size;
        self.msgs.push_back(m);
    }
}

fn create_segment(
    dir: &Path,
    first_seq: u64,
    counts: &mut SyscallCounts,
) -> Result<SegmentFile, JournalError> {
    let name = segment::file_name(first_seq);
    let header = segment::encode_header(first_seq, now_ns());
    SegmentFile::create(dir, &name, &header, counts)
        .map_err(|e| JournalError::io("create a segment", &dir.join(&name), e))
}

/// The wall clock in ns since the Unix epoch (records' time).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
