//! A sending site's spool on disk: its queue of files, kept until every site has them.
//!
//! ```text
//! SPOOL/
//!   00000001.segment        bytes of small files, one after another (segments.rs)
//!   00c0ffee00c0ffee.data   a large file's bytes, a file of its own
//!   queue.log               the transfers queued, their sites' states, the transfers
//!                           removed (log.rs)
//! ```
//!
//! A file is copied in before it is queued (intake.rs), so it cannot change while it is
//! sent (a source file that changes while it is copied is refused), and a restarted sender
//! finds its queue here ([`Spool::load`], then `Sender::restore`). One log for every
//! transfer and segments shared by small files: queuing a small file and delivering it
//! costs appends, no file created or removed. The log is rewritten with only what is
//! live when it is opened and when removed transfers dominate it. The [`ChunkSource`]
//! the sender reads through.
//!
//! Under an fsync policy other than `never` ([`Spool::fsync`]), what was written since
//! the last [`Spool::sync`] (files' bytes, log lines, names in the directory) is synced
//! together, bytes before the log and the directory last: the node tells a client its
//! file is queued only after that, so a queued file survives a power loss. The log's
//! rewrite is synced before it replaces the old one, and bytes a compaction moves before
//! the old ones go.

mod intake;
mod log;
mod segments;

pub use intake::{hash_outbox_file, sha256_file, sha256_reader, SpoolWriter};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::inbox::Fsync;
use crate::manifest::Manifest;
use crate::open_files::OpenFiles;
use crate::sender::{ChunkSource, Delivery};
use log::{LogLine, Place};
use segments::Segments;

/// Files of their own kept open at once for reading.
const OPEN_FILES: usize = 64;

/// The spool's log of queued transfers and their sites' states.
const LOG: &str = "queue.log";

/// The log is rewritten when more than this many of its lines are dead and they
/// outnumber the live ones twice.
const COMPACT_AFTER_DEAD: usize = 4096;

/// Files up to this size go into segments; larger ones get a file of their own.
const SEGMENT_FILE_MAX: u64 = 1 << 20;

/// Where a file with a file of its own keeps its bytes.
fn own_path(dir: &Path, transfer: u64) -> PathBuf {
    dir.join(format!("{transfer:016x}.data"))
}

/// A transfer found in the spool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spooled {
    /// Its manifest.
    pub manifest: Manifest,
    /// The last state of each site that said where it stands.
    pub sites: Vec<SpooledSite>,
    /// For a file for every site with no sites yet: the newest newer file of its name
    /// and every site they went to (`SenderEvent::ReplacedAt`).
    ///
    /// [`SenderEvent::ReplacedAt`]: crate::sender::SenderEvent::ReplacedAt
    pub replaced_at: Option<(u64, Vec<String>)>,
}

/// A site's last state of a transfer, as the spool keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpooledSite {
    /// The site.
    pub site: String,
    /// Where it stands.
    pub state: Delivery,
    /// Why it failed (empty otherwise).
    pub reason: String,
    /// Since when (milliseconds since 1970); none in the logs of earlier versions.
    pub since_ms: Option<u64>,
}

/// An upload a restart interrupted whose sites are told to drop what they got of it,
/// each as it is heard, until `until_ms`: kept in the spool until then, so that a
/// node stopped again meanwhile goes on telling them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCancel {
    /// The upload's transfer.
    pub transfer: u64,
    /// Its service.
    pub service: String,
    /// Until when sites are told (milliseconds since 1970).
    pub until_ms: u64,
    /// The sites told as often as they are told.
    pub told: Vec<String>,
}

/// The sender's queue on disk, so a restarted node continues it.
pub struct Spool {
    dir: PathBuf,
    /// Files of their own open for reading.
    own_open: OpenFiles,
    segments: Segments,
    /// Transfers whose bytes are arriving or in, not yet queued ([`Spool::save`]).
    arriving: HashMap<u64, (Place, u64)>,
    /// The log, open for appending.
    log: File,
    /// Its length after the last line written whole: a line a failed write left in
    /// part is cut back to here, so that the next line does not continue it.
    log_len: u64,
    /// What the log holds that is still live, to rewrite it without the rest.
    live: HashMap<u64, Kept>,
    /// Large uploads this run began and logged ([`Spool::note_arriving`]), not yet
    /// queued whole nor removed; and those a previous run never finished, until their
    /// cancel takes their place ([`Spool::keep_cancel`]).
    begun: HashMap<u64, Manifest>,
    /// Uploads a previous run began and never finished ([`Spool::take_unfinished`]).
    unfinished: Vec<Manifest>,
    /// Sites still to tell to drop uploads a restart interrupted.
    cancels: BTreeMap<u64, PendingCancel>,
    /// Order of queuing, for the live transfers.
    seq: u64,
    live_lines: usize,
    dead_lines: usize,
    /// When written bytes reach the disk (`never`: left to the kernel).
    fsync: Fsync,
    /// What was written since the last [`Spool::sync`] (with a policy).
    unsynced: Unsynced,
}

/// What a sync must cover: files written, the log, the directory's names.
#[derive(Default)]
struct Unsynced {
    /// Each with its transfer when it is that transfer's own (none: a segment).
    files: Vec<(Option<u64>, Arc<File>)>,
    log: bool,
    dir: bool,
}

impl Unsynced {
    fn file(&mut self, transfer: Option<u64>, f: &Arc<File>) {
        if !self.files.iter().any(|(_, g)| Arc::ptr_eq(f, g)) {
            self.files.push((transfer, f.clone()));
        }
    }

    /// A transfer's own file went: it is not kept open (nor synced) for nothing.
    fn forget(&mut self, transfer: u64) {
        self.files.retain(|(t, _)| *t != Some(transfer));
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty() && !self.log && !self.dir
    }
}

/// A live transfer as the log holds it.
struct Kept {
    seq: u64,
    manifest: Manifest,
    place: Place,
    sites: Vec<SpooledSite>,
    replaced_at: Option<(u64, Vec<String>)>,
}

impl Kept {
    /// The log's lines it takes.
    fn lines(&self) -> usize {
        1 + self.sites.len() + usize::from(self.replaced_at.is_some())
    }
}

impl Spool {
    /// Opens (creating) the spool at `dir`, reading its log and rewriting it with only
    /// what is live; no fsync policy (see [`Spool::open`]).
    pub fn new(dir: &Path) -> io::Result<Self> {
        Spool::open(dir, Fsync::Never)
    }

    /// As [`Spool::new`], under `fsync`: with `always` or `batch` the rewritten log is
    /// synced before it replaces the old one, and [`Spool::sync_data`] and
    /// [`Spool::sync_log`] make what was written durable (the node calls them before it
    /// logs a file queued and before it says so).
    pub fn open(dir: &Path, fsync: Fsync) -> io::Result<Self> {
        fs::create_dir_all(dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
        })?;
        let mut live: HashMap<u64, Kept> = HashMap::new();
        let mut begun: HashMap<u64, Manifest> = HashMap::new();
        let mut cancels = BTreeMap::new();
        let mut seq = 0;
        match File::open(dir.join(LOG)) {
            Ok(f) => {
                for line in BufReader::new(f).split(b'\n') {
                    // A torn line (a crash mid-append, perhaps inside a character) is
                    // skipped; the rewrite below drops it.
                    let line = line?;
                    let Some(l) = std::str::from_utf8(&line).ok().and_then(LogLine::parse) else {
                        continue;
                    };
                    seq += 1;
                    Self::replay(&mut live, &mut begun, &mut cancels, l, seq);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Uploads the last run began and never finished: given once, and kept in the
        // log until their cancel replaces them there (`Spool::keep_cancel`).
        let mut unfinished: Vec<Manifest> = begun.values().cloned().collect();
        unfinished.sort_by_key(|m| m.transfer);
        let log = Self::rewrite(dir, &live, &begun, &cancels, fsync)?;
        let log_len = log.metadata()?.len();
        let live_lines =
            live.values().map(Kept::lines).sum::<usize>() + begun.len() + cancels.len();
        Ok(Spool {
            dir: dir.to_path_buf(),
            own_open: OpenFiles::new(OPEN_FILES),
            segments: Segments::new(dir)?,
            arriving: HashMap::new(),
            log,
            log_len,
            live,
            begun,
            unfinished,
            cancels,
            seq,
            live_lines,
            dead_lines: 0,
            fsync,
            unsynced: Unsynced::default(),
        })
    }

    /// Its fsync policy.
    pub fn fsync(&self) -> Fsync {
        self.fsync
    }

    /// Whether something written waits for a sync.
    pub fn needs_sync(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Syncs the bytes written since the last sync, then the directory (new files,
    /// renames): before the log names them. Returns how many syncs it made; what failed
    /// stays to sync.
    pub fn sync_data(&mut self) -> io::Result<usize> {
        let mut syncs = 0;
        while let Some((_, f)) = self.unsynced.files.last() {
            f.sync_data()?;
            self.unsynced.files.pop();
            syncs += 1;
        }
        if self.unsynced.dir {
            File::open(&self.dir)?.sync_all()?;
            self.unsynced.dir = false;
            syncs += 1;
        }
        Ok(syncs)
    }

    /// Syncs the log's lines written since the last sync. Returns how many syncs it
    /// made (0 or 1).
    pub fn sync_log(&mut self) -> io::Result<usize> {
        if !self.unsynced.log {
            return Ok(0);
        }
        self.log.sync_data()?;
        self.unsynced.log = false;
        Ok(1)
    }

    /// [`Spool::sync_data`], then [`Spool::sync_log`].
    pub fn sync(&mut self) -> io::Result<usize> {
        Ok(self.sync_data()? + self.sync_log()?)
    }

    fn replay(
        live: &mut HashMap<u64, Kept>,
        begun: &mut HashMap<u64, Manifest>,
        cancels: &mut BTreeMap<u64, PendingCancel>,
        l: LogLine,
        seq: u64,
    ) {
        match l {
            LogLine::Cancel(c) => {
                begun.remove(&c.transfer);
                cancels.insert(c.transfer, c);
            }
            LogLine::CancelOver(t) => {
                begun.remove(&t);
                cancels.remove(&t);
            }
            LogLine::Arriving(m) => {
                begun.insert(m.transfer, m);
            }
            LogLine::Queued(manifest, place) => {
                begun.remove(&manifest.transfer);
                let old = live.remove(&manifest.transfer);
                let (sites, replaced_at) =
                    old.map_or_else(Default::default, |k| (k.sites, k.replaced_at));
                live.insert(
                    manifest.transfer,
                    Kept {
                        seq,
                        manifest,
                        place,
                        sites,
                        replaced_at,
                    },
                );
            }
            LogLine::Site { transfer, site } => {
                if let Some(k) = live.get_mut(&transfer) {
                    match k.sites.iter_mut().find(|s| s.site == site.site) {
                        Some(e) => *e = site,
                        None => k.sites.push(site),
                    }
                }
            }
            LogLine::ReplacedAt {
                transfer,
                by,
                sites,
            } => {
                if let Some(k) = live.get_mut(&transfer) {
                    k.replaced_at = Some((by, sites));
                }
            }
            LogLine::Moved { transfer, place } => {
                if let Some(k) = live.get_mut(&transfer) {
                    k.place = place;
                }
            }
            LogLine::Removed(t) => {
                live.remove(&t);
                begun.remove(&t);
            }
        }
    }

    /// Writes the live transfers to a new log and puts it in place of the old one;
    /// returns it open for appending.
    fn rewrite(
        dir: &Path,
        live: &HashMap<u64, Kept>,
        begun: &HashMap<u64, Manifest>,
        cancels: &BTreeMap<u64, PendingCancel>,
        fsync: Fsync,
    ) -> io::Result<File> {
        let mut kept: Vec<&Kept> = live.values().collect();
        kept.sort_by_key(|k| k.seq);
        let mut text = String::new();
        for m in begun.values() {
            text.push_str(&LogLine::Arriving(m.clone()).to_json()?);
        }
        for c in cancels.values() {
            text.push_str(&LogLine::Cancel(c.clone()).to_json()?);
        }
        for k in kept {
            text.push_str(&LogLine::Queued(k.manifest.clone(), k.place).to_json()?);
            for site in &k.sites {
                let line = LogLine::Site {
                    transfer: k.manifest.transfer,
                    site: site.clone(),
                };
                text.push_str(&line.to_json()?);
            }
            if let Some((by, sites)) = &k.replaced_at {
                let line = LogLine::ReplacedAt {
                    transfer: k.manifest.transfer,
                    by: *by,
                    sites: sites.clone(),
                };
                text.push_str(&line.to_json()?);
            }
        }
        let tmp = dir.join(format!("{LOG}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        if fsync != Fsync::Never {
            // The new log on the disk before it replaces the old one, and its name
            // after: a crash leaves one log or the other, whole.
            f.sync_data()?;
        }
        fs::rename(&tmp, dir.join(LOG))?;
        if fsync != Fsync::Never {
            File::open(dir)?.sync_all()?;
        }
        OpenOptions::new().append(true).open(dir.join(LOG))
    }

    fn append(&mut self, l: LogLine) -> io::Result<()> {
        let line = l.to_json()?;
        if let Err(e) = self.log.write_all(line.as_bytes()) {
            // A full or failing disk may have taken part of the line.
            let _ = self.log.set_len(self.log_len);
            return Err(e);
        }
        self.log_len += line.len() as u64;
        self.unsynced.log = self.fsync != Fsync::Never;
        self.seq += 1;
        Self::replay(
            &mut self.live,
            &mut self.begun,
            &mut self.cancels,
            l,
            self.seq,
        );
        Ok(())
    }

    fn own_path(&self, transfer: u64) -> PathBuf {
        own_path(&self.dir, transfer)
    }

    /// Where a transfer's bytes are when it has a file of its own.
    pub fn data_path(&self, transfer: u64) -> PathBuf {
        self.own_path(transfer)
    }

    /// Logs that the upload of `m` (begun with [`Spool::begin`]) is under way, so that
    /// if this node stops before the file is whole, its next run knows the transfer
    /// ([`Spool::take_unfinished`]) and can tell the sites to drop what they hold of
    /// it. For uploads that take more than a message or two: a small file is whole
    /// before anything of it is sent.
    pub fn note_arriving(&mut self, m: &Manifest) -> io::Result<()> {
        if !self.arriving.contains_key(&m.transfer) {
            return Ok(());
        }
        self.live_lines += 1;
        self.append(LogLine::Arriving(m.clone()))
    }

    /// The uploads the previous run of the node began and never finished (their bytes
    /// are gone): given once.
    pub fn take_unfinished(&mut self) -> Vec<Manifest> {
        std::mem::take(&mut self.unfinished)
    }

    /// The uploads a restart interrupted whose sites are still told to drop them, as
    /// the log had them when the spool opened or as [`Spool::keep_cancel`] wrote them.
    pub fn cancels(&self) -> Vec<PendingCancel> {
        self.cancels.values().cloned().collect()
    }

    /// Logs (again) an upload a restart interrupted whose sites are told to drop it, in
    /// place of its unfinished upload's line: so that a node stopped again goes on.
    pub fn keep_cancel(&mut self, c: &PendingCancel) -> io::Result<()> {
        let t = c.transfer;
        if self.begun.contains_key(&t) || self.cancels.contains_key(&t) {
            self.dead_lines += 1;
        } else {
            self.live_lines += 1;
        }
        self.append(LogLine::Cancel(c.clone()))
    }

    /// An interrupted upload's sites are told no more (its time is over): forgotten.
    pub fn cancel_over(&mut self, transfer: u64) -> io::Result<()> {
        if !self.begun.contains_key(&transfer) && !self.cancels.contains_key(&transfer) {
            return Ok(());
        }
        self.live_lines -= 1;
        self.dead_lines += 2;
        self.append(LogLine::CancelOver(transfer))
    }

    /// Writes the manifest of a queued transfer again (its targets resolved); one
    /// still arriving is left alone: its [`Spool::save`] at the end writes it.
    pub fn resave(&mut self, m: &Manifest) -> io::Result<()> {
        match self.live.get(&m.transfer) {
            Some(k) if !self.arriving.contains_key(&m.transfer) => {
                let place = k.place;
                self.dead_lines += 1;
                self.append(LogLine::Queued(m.clone(), place))
            }
            _ => Ok(()),
        }
    }

    /// Queues a transfer whose bytes are in: its manifest goes into the log.
    pub fn save(&mut self, m: &Manifest) -> io::Result<()> {
        let place = match self.arriving.get(&m.transfer) {
            Some((place, _)) => *place,
            None => match self.live.get(&m.transfer) {
                Some(k) => k.place,
                None => Place::Own,
            },
        };
        let was_live = self.live.contains_key(&m.transfer);
        let was_begun = self.begun.contains_key(&m.transfer);
        // Still arriving if the log does not take it: `remove` then finds its bytes.
        self.append(LogLine::Queued(m.clone(), place))?;
        self.arriving.remove(&m.transfer);
        if was_begun {
            self.live_lines -= 1;
            self.dead_lines += 1;
        }
        if was_live {
            self.dead_lines += 1;
        } else {
            self.live_lines += 1;
        }
        Ok(())
    }

    /// Appends what a site said of a transfer, and since when (so that a restart does
    /// not make it new).
    pub fn record(
        &mut self,
        transfer: u64,
        site: &str,
        state: Delivery,
        reason: &str,
        since_ms: Option<u64>,
    ) -> io::Result<()> {
        match self.live.get(&transfer) {
            Some(k) if k.sites.iter().any(|s| s.site == site) => self.dead_lines += 1,
            Some(_) => self.live_lines += 1,
            None => return Ok(()),
        }
        let site = SpooledSite {
            site: site.to_owned(),
            state,
            reason: reason.to_owned(),
            since_ms,
        };
        self.append(LogLine::Site { transfer, site })
    }

    /// Appends what a file for every site with no sites yet knows of newer files of its
    /// name (`SenderEvent::ReplacedAt`): they may be over before a restart.
    pub fn record_replaced_at(
        &mut self,
        transfer: u64,
        by: u64,
        sites: &[String],
    ) -> io::Result<()> {
        match self.live.get(&transfer) {
            Some(k) if k.replaced_at.is_some() => self.dead_lines += 1,
            Some(_) => self.live_lines += 1,
            None => return Ok(()),
        }
        self.append(LogLine::ReplacedAt {
            transfer,
            by,
            sites: sites.to_vec(),
        })
    }

    /// Every transfer in the spool (a restarted sender's queue), in the order they were
    /// queued. Bytes without a manifest (a crash while queuing) are removed, and so
    /// is a manifest without its bytes.
    pub fn load(&mut self) -> io::Result<Vec<Spooled>> {
        let mut lost = Vec::new();
        let mut own = HashSet::new();
        for (t, k) in &self.live {
            let found = match k.place {
                Place::Own => self.own_path(*t).exists(),
                Place::Segment { id, at } => self.segments.adopt(id, at, k.manifest.size),
            };
            match (found, k.place) {
                (false, _) => lost.push(*t),
                (true, Place::Own) => {
                    own.insert(*t);
                }
                (true, Place::Segment { .. }) => {}
            }
        }
        for t in lost {
            let _ = self.forget(t);
        }
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("data") {
                continue;
            }
            let transfer = path
                .file_stem()
                .and_then(|s| s.to_str())
                .and_then(|s| u64::from_str_radix(s, 16).ok());
            if transfer.is_none_or(|t| !own.contains(&t) && !self.arriving.contains_key(&t)) {
                let _ = fs::remove_file(&path);
            }
        }
        self.segments.remove_unused()?;
        let mut kept: Vec<&Kept> = self.live.values().collect();
        kept.sort_by_key(|k| k.seq);
        Ok(kept
            .into_iter()
            .map(|k| Spooled {
                manifest: k.manifest.clone(),
                sites: k.sites.clone(),
                replaced_at: k.replaced_at.clone(),
            })
            .collect())
    }

    /// Lets go of a transfer's bytes.
    fn release(&mut self, transfer: u64, place: Place, size: u64) {
        match place {
            Place::Own => {
                self.own_open.remove(transfer);
                self.unsynced.forget(transfer);
                let _ = fs::remove_file(self.own_path(transfer));
            }
            Place::Segment { id, .. } => self.segments.release(id, size, 1),
        }
    }

    /// Drops a live transfer from the log; false if the log could not say so (a full
    /// disk): it is gone from memory all the same.
    fn forget(&mut self, transfer: u64) -> bool {
        let Some(k) = self.live.get(&transfer) else {
            return true;
        };
        let lines = k.lines();
        self.live_lines -= lines;
        self.dead_lines += lines + 1;
        if self.append(LogLine::Removed(transfer)).is_err() {
            self.live.remove(&transfer);
            return false;
        }
        true
    }

    /// Forgets a transfer: its bytes and what the log says of it.
    pub fn remove(&mut self, transfer: u64) {
        if let Some((place, size)) = self.arriving.remove(&transfer) {
            self.release(transfer, place, size);
            if self.begun.contains_key(&transfer) {
                self.live_lines -= 1;
                self.dead_lines += 2;
                let _ = self.append(LogLine::Removed(transfer));
            }
        }
        if let Some((place, size)) = self.live.get(&transfer).map(|k| (k.place, k.manifest.size)) {
            // Its bytes go only once the log says it is gone: a log that still holds it
            // (a full disk took the line) must not find another file's bytes in its
            // place at the next load. Kept instead, it is loaded whole, and sent again.
            if self.forget(transfer) {
                self.release(transfer, place, size);
            }
        }
        self.move_out_of_sparse_segment();
        if self.dead_lines > COMPACT_AFTER_DEAD && self.dead_lines > 2 * self.live_lines {
            let rewritten = Self::rewrite(
                &self.dir,
                &self.live,
                &self.begun,
                &self.cancels,
                self.fsync,
            )
            .and_then(|log| Ok((log.metadata()?.len(), log)));
            if let Ok((len, log)) = rewritten {
                self.log = log;
                self.log_len = len;
                self.dead_lines = 0;
            }
        }
    }

    /// Moves the files of a mostly dead segment into the current one (the segment is
    /// removed with its last file), unless one of them is still arriving.
    fn move_out_of_sparse_segment(&mut self) {
        let Some(id) = self.segments.sparse() else {
            return;
        };
        let in_segment = |p: &Place| matches!(p, Place::Segment { id: s, .. } if *s == id);
        if self.arriving.values().any(|(p, _)| in_segment(p)) {
            return;
        }
        let mut moving: Vec<(u64, u64)> = self
            .live
            .iter()
            .filter(|(_, k)| in_segment(&k.place))
            .map(|(t, k)| (k.seq, *t))
            .collect();
        moving.sort_unstable();
        // Copied first; then (with a policy) the copies synced; then the moves logged
        // (and the log synced); only then the old bytes let go: a crash at any point
        // leaves every file's bytes where the log says they are.
        let mut buf = vec![0u8; 256 * 1024];
        let mut copies: Vec<(u64, u64, Place, Arc<File>)> = Vec::new();
        for (_, t) in moving {
            let k = &self.live[&t];
            let (old, size) = (k.place, k.manifest.size);
            let Place::Segment { at: from, .. } = old else {
                continue;
            };
            let Ok((new_id, at, to)) = self.segments.reserve(size) else {
                break;
            };
            let copied = (|| -> io::Result<()> {
                let src = self.segments.file(id).ok_or(io::ErrorKind::NotFound)?;
                let mut done = 0u64;
                while done < size {
                    let n = (size - done).min(buf.len() as u64) as usize;
                    src.read_exact_at(&mut buf[..n], from + done)?;
                    to.write_all_at(&buf[..n], at + done)?;
                    done += n as u64;
                }
                Ok(())
            })();
            if copied.is_err() {
                // Left where it was; the reservation is given back.
                self.segments.release(new_id, size, 1);
                break;
            }
            copies.push((t, size, Place::Segment { id: new_id, at }, to));
        }
        let give_back = |segments: &mut Segments, copies: &[(u64, u64, Place, Arc<File>)]| {
            for (_, size, new, _) in copies {
                if let Place::Segment { id, .. } = new {
                    segments.release(*id, *size, 1);
                }
            }
        };
        if self.fsync != Fsync::Never {
            let mut files: Vec<&Arc<File>> = Vec::new();
            for (_, _, _, f) in &copies {
                if !files.iter().any(|g| Arc::ptr_eq(f, g)) {
                    files.push(f);
                }
            }
            let new_segment = copies
                .iter()
                .any(|(_, _, p, _)| matches!(p, Place::Segment { at: 0, .. }));
            let synced = files.iter().try_for_each(|f| f.sync_data()).and_then(|()| {
                if new_segment {
                    File::open(&self.dir)?.sync_all()?;
                }
                Ok(())
            });
            if synced.is_err() {
                give_back(&mut self.segments, &copies);
                return;
            }
        }
        let mut logged = 0;
        for (t, _, new, _) in &copies {
            self.dead_lines += 1;
            let moved = LogLine::Moved {
                transfer: *t,
                place: *new,
            };
            if self.append(moved).is_err() {
                break;
            }
            logged += 1;
        }
        give_back(&mut self.segments, &copies[logged..]);
        // Moves the log may not hold after a crash keep their old bytes as well.
        if self.fsync != Fsync::Never && self.log.sync_data().is_err() {
            return;
        }
        for (_, size, _, _) in &copies[..logged] {
            self.segments.release(id, *size, 1);
        }
    }

    /// Bytes the spool holds on disk in segments (for the lab and tests).
    pub fn segment_bytes(&self) -> u64 {
        self.segments.bytes()
    }
}

impl ChunkSource for Spool {
    fn read_chunk(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let place = match self.live.get(&transfer) {
            Some(k) => k.place,
            None => self.arriving.get(&transfer).map_or(Place::Own, |(p, _)| *p),
        };
        if let Place::Segment { id, at } = place {
            let f = self.segments.file(id).ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("segment {id} is gone"))
            })?;
            return f.read_exact_at(buf, at + offset);
        }
        // The path is made only when the file is not open (not once per chunk).
        let dir = &self.dir;
        self.own_open
            .get(transfer, || File::open(own_path(dir, transfer)))?
            .read_exact_at(buf, offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transfer whose removal the log cannot take (a full disk) keeps its bytes: the
    /// log still holds it, and the next load must find its own bytes there, not those
    /// of a file that took its place meanwhile.
    #[test]
    fn a_removal_the_log_cannot_take_keeps_the_transfers_bytes() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("spool");
        let mut spool = Spool::open(&dir, Fsync::Never).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let src = root.path().join("a");
        fs::write(&src, &data).unwrap();
        let (size, sha256) = spool.copy_in(1, &src).unwrap();
        let mut m = Manifest::sample(1, "a.csv", 3);
        (m.size, m.sha256, m.chunk_size) = (size, sha256, 4096);
        spool.save(&m).unwrap();
        // The log fails from now on (as on a full disk).
        spool.log = File::open(dir.join(LOG)).unwrap();
        spool.remove(1);
        // Another file, which may not take its place.
        let other = root.path().join("b");
        fs::write(&other, vec![0xEE; 10_000]).unwrap();
        let _ = spool.copy_in(2, &other);
        drop(spool);
        let mut spool = Spool::open(&dir, Fsync::Never).unwrap();
        let loaded: Vec<u64> = spool
            .load()
            .unwrap()
            .iter()
            .map(|s| s.manifest.transfer)
            .collect();
        assert_eq!(loaded, [1], "the log still holds it");
        let mut buf = vec![0; 4096];
        spool.read_chunk(1, 4096, &mut buf).unwrap();
        assert!(buf == data[4096..8192], "another file's bytes in its place");
    }
}
