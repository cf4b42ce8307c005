//! A site's inbox on disk: the [`Store`] the node's receiver writes through.
//!
//! ```text
//! INBOX/
//!   FILES/eod/2026-11-25.csv        files, by service, visible only whole and checked
//!   .tickwire-partial/
//!     00c0ffee00c0ffee.part         the file being received (sparse, full size)
//!     00c0ffee00c0ffee.map          which chunks it holds (ChunkMap bytes)
//!     00c0ffee00c0ffee.manifest     its manifest (an encoded Offer), for a restart
//! ```
//!
//! The map and the manifest are written together, the first time the receiver saves
//! the map: a file that arrives before that (any file of one chunk) costs one file
//! created and one rename, and a restart resumes only what a saved map vouches for.
//!
//! Each service has a directory of its own (its name): the right to send files of one
//! service is never the right to replace a file of another. A commit renames the
//! partial file to its name in its service's directory (same file system: atomic),
//! creating the directories of the name, refusing any symbolic link on the way (a link could
//! lead out of the inbox). It replaces a file of the same name. The fsync policy says
//! when the bytes are durable. `always` and `batch` defer a commit to [`Inbox::flush`],
//! which syncs each pending file, renames it, then syncs each directory once: a group
//! commit, every file synced before its rename and its directory after, before the site
//! says done. They differ in when the flush comes ([`Fsync::commit_delay`]): `always` at
//! the end of the receiver's turn (the files completed in one turn share a directory's
//! sync), `batch` up to 10 ms later (more files to a sync). `never` renames at once and
//! leaves the rest to the kernel. Only the receiver's `done` follows a commit, so a site
//! says `done` only for bytes as durable as its policy.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::chunk_map::ChunkMap;
use crate::manifest::Manifest;
use crate::open_files::OpenFiles;
use crate::receiver::Store;
use crate::wire::FilesMessage;

/// The directory of partial files inside the inbox (no service may be named so).
pub const PARTIAL_DIR: &str = ".tickwire-partial";

/// Whether `service` may name a directory of the inbox: one part of a file name
/// (no `/`), not starting with `.` (the inbox's own directory, hidden files).
pub fn check_service_dir(service: &str) -> io::Result<()> {
    let refused = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("service {service:?} cannot name a directory of the inbox: {why}"),
        ))
    };
    if let Err(e) = crate::name::check_name(service) {
        return refused(e.to_string());
    }
    if service.contains('/') || service.starts_with('.') {
        return refused("it holds a \"/\" or starts with \".\"".into());
    }
    Ok(())
}
/// Partial files kept open at once (the least recently used is closed first).
const OPEN_FILES: usize = 64;

/// How long `batch` lets completed files gather before they are synced together.
pub const BATCH_DELAY: Duration = Duration::from_millis(10);

/// When a site's received files are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fsync {
    /// Each file and its directory, before the site says done, as soon as the turn
    /// that completed it ends.
    Always,
    /// As `always`, the files completed within [`BATCH_DELAY`] synced together.
    Batch,
    /// Never by Tickwire (the kernel writes back in its own time).
    Never,
}

impl Fsync {
    /// How long after a file is complete its commit may wait for others (see the
    /// module doc).
    pub fn commit_delay(self) -> Duration {
        match self {
            Fsync::Batch => BATCH_DELAY,
            Fsync::Always | Fsync::Never => Duration::ZERO,
        }
    }

    /// A policy from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "always" => Some(Fsync::Always),
            "batch" => Some(Fsync::Batch),
            "never" => Some(Fsync::Never),
            _ => None,
        }
    }
}

/// System calls that write or sync, for the lab's calls per file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboxCounts {
    /// `write` calls.
    pub writes: u64,
    /// `fsync` calls.
    pub syncs: u64,
    /// Files renamed into place.
    pub renames: u64,
}

/// A site's inbox (see the module doc).
pub struct Inbox {
    dir: PathBuf,
    partial: PathBuf,
    fsync: Fsync,
    open: OpenFiles,
    pending: Vec<Manifest>,
    counts: InboxCounts,
    /// Partial files whose manifest (and map) are on disk.
    saved: HashSet<u64>,
    /// Directory syncs fail (an unwritable disk, which a test cannot make).
    #[cfg(test)]
    pub(crate) fail_dir_syncs: bool,
}

/// How the file an install replaces was kept aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Previous {
    None,
    Linked,
    Moved,
}

/// A file renamed into the inbox, waiting for its directory's sync.
struct Installed {
    transfer: u64,
    to: PathBuf,
    /// The file it replaced, linked aside (in the partial directory).
    previous: Option<PathBuf>,
}

/// A partial file's path, or its map's or manifest's (`ext`).
fn partial_path(partial: &Path, transfer: u64, ext: &str) -> PathBuf {
    partial.join(format!("{}.{ext}", hex_id(transfer)))
}

fn hex_id(transfer: u64) -> String {
    format!("{transfer:016x}")
}

impl Inbox {
    /// Opens (creating) the inbox at `dir`.
    pub fn new(dir: &Path, fsync: Fsync) -> io::Result<Self> {
        let partial = dir.join(PARTIAL_DIR);
        fs::create_dir_all(&partial).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", partial.display()),
            )
        })?;
        Ok(Inbox {
            dir: dir.to_path_buf(),
            partial,
            fsync,
            open: OpenFiles::new(OPEN_FILES),
            pending: Vec::new(),
            counts: InboxCounts::default(),
            saved: HashSet::new(),
            #[cfg(test)]
            fail_dir_syncs: false,
        })
    }

    /// The inbox directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// System calls it made.
    pub fn counts(&self) -> InboxCounts {
        self.counts
    }

    fn path(&self, transfer: u64, ext: &str) -> PathBuf {
        partial_path(&self.partial, transfer, ext)
    }

    /// The manifests of the partial files a previous run left, to resume them
    /// (`Receiver::resume`). Unreadable ones are removed with their files.
    /// Partial files with no manifest (their map was never saved) cannot be resumed
    /// and are removed, as are maps a stop left half written (the map they were to
    /// replace is still there) and files a stop left linked aside during a flush.
    pub fn partial_manifests(&mut self) -> io::Result<Vec<Manifest>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.partial)? {
            let path = entry?.path();
            // A map half written, or a file a stop left linked aside (`flush`).
            if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("tmp" | "previous")
            ) {
                let _ = fs::remove_file(&path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) == Some("part")
                && !path.with_extension("manifest").exists()
            {
                let _ = fs::remove_file(&path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("manifest") {
                continue;
            }
            let bytes = fs::read(&path)?;
            match FilesMessage::decode(&bytes) {
                Ok(FilesMessage::Offer(o)) => out.push(Manifest::from_offer(&o)),
                _ => {
                    let stem = path.with_extension("");
                    for ext in ["manifest", "map", "part"] {
                        let _ = fs::remove_file(stem.with_extension(ext));
                    }
                }
            }
        }
        out.sort_by_key(|m| m.transfer);
        Ok(out)
    }

    fn file(&mut self, transfer: u64) -> io::Result<&File> {
        // The path is made only when the file is not open (not once per chunk).
        let partial = &self.partial;
        self.open.get(transfer, || {
            let path = partial_path(partial, transfer, "part");
            OpenOptions::new().read(true).write(true).open(path)
        })
    }

    /// Creates the directories of `name` under its service's directory in the inbox,
    /// refusing symbolic links and anything that is not a directory on the way;
    /// returns the file's full path. Under `always` and `batch` each directory made is
    /// synced into its parent at once: a file synced into a directory whose own entry
    /// a crash loses is lost with it.
    fn destination(&mut self, service: &str, name: &str) -> io::Result<PathBuf> {
        check_service_dir(service)?;
        let mut parts: Vec<&str> = name.split('/').collect();
        let file = parts.pop().unwrap_or(name);
        parts.insert(0, service);
        let mut at = self.dir.clone();
        for part in parts {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is a symbolic link (not followed)", at.display()),
                    ))
                }
                Ok(meta) if !meta.is_dir() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a directory", at.display()),
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&at)?;
                    if self.fsync != Fsync::Never {
                        let parent = at.parent().unwrap_or(&self.dir).to_path_buf();
                        if let Err(e) = self.sync_dir(&parent) {
                            // Taken out again, so that the next try makes and syncs it.
                            let _ = fs::remove_dir(&at);
                            return Err(io::Error::new(
                                e.kind(),
                                format!(
                                    "cannot sync the inbox directory {}: {e}",
                                    parent.display()
                                ),
                            ));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        at.push(file);
        if fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a directory", at.display()),
            ));
        }
        Ok(at)
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        self.counts.syncs += 1;
        #[cfg(test)]
        if self.fail_dir_syncs {
            return Err(io::Error::other("a directory sync failed (test)"));
        }
        File::open(dir)?.sync_all()
    }

    /// Renames a checked partial file to its name and forgets its map and manifest.
    fn install(&mut self, m: &Manifest) -> io::Result<PathBuf> {
        Ok(self.install_keeping(m, false)?.0)
    }

    /// As [`Inbox::install`]; with `keep`, a file it replaces is first linked aside in
    /// the partial directory (its path returned), so that it can be put back.
    fn install_keeping(
        &mut self,
        m: &Manifest,
        keep: bool,
    ) -> io::Result<(PathBuf, Option<PathBuf>)> {
        let to = self.destination(&m.service, &m.name)?;
        self.open.remove(m.transfer);
        let aside = self.path(m.transfer, "previous");
        // Linked aside (a link to a symbolic link is to the link itself), else moved
        // aside (the name is empty until the rename below).
        let previous = match keep && fs::symlink_metadata(&to).is_ok() {
            false => Previous::None,
            true if fs::hard_link(&to, &aside).is_ok() => Previous::Linked,
            true if fs::rename(&to, &aside).is_ok() => Previous::Moved,
            true => Previous::None,
        };
        if let Err(e) = fs::rename(self.path(m.transfer, "part"), &to) {
            let _ = match previous {
                Previous::Linked => fs::remove_file(&aside),
                Previous::Moved => fs::rename(&aside, &to),
                Previous::None => Ok(()),
            };
            return Err(e);
        }
        let kept = previous != Previous::None;
        self.counts.renames += 1;
        if self.saved.remove(&m.transfer) {
            let _ = fs::remove_file(self.path(m.transfer, "map"));
            let _ = fs::remove_file(self.path(m.transfer, "manifest"));
        }
        Ok((to, kept.then_some(aside)))
    }

    /// Commits every file waiting for its sync (`always`, `batch`): syncs them, renames
    /// them, syncs each directory once. Returns each transfer's result, for
    /// `Receiver::handle_committed`. A directory that cannot be synced fails the files
    /// renamed into it, and they are taken out of it again (a file one replaced is put
    /// back): a site does not show a file it says it does not have, nor lose one it
    /// had; it takes the file again when it retries.
    pub fn flush(&mut self) -> Vec<(u64, io::Result<()>)> {
        let pending = std::mem::take(&mut self.pending);
        let mut results = Vec::with_capacity(pending.len());
        // Each directory renamed into, with the files renamed there (and what each
        // replaced), in the order renamed.
        let mut dirs: Vec<(PathBuf, Vec<Installed>)> = Vec::new();
        for m in pending {
            let synced = self.file(m.transfer).and_then(|f| f.sync_all());
            self.counts.syncs += 1;
            match synced.and_then(|()| self.install_keeping(&m, true)) {
                Ok((to, previous)) => {
                    let parent = to.parent().unwrap_or(&self.dir).to_path_buf();
                    let installed = Installed {
                        transfer: m.transfer,
                        to,
                        previous,
                    };
                    match dirs.iter_mut().find(|(d, _)| *d == parent) {
                        Some((_, files)) => files.push(installed),
                        None => dirs.push((parent, vec![installed])),
                    }
                }
                Err(e) => results.push((m.transfer, Err(e))),
            }
        }
        for (dir, files) in dirs {
            match self.sync_dir(&dir) {
                Ok(()) => {
                    for f in files {
                        if let Some(p) = f.previous {
                            let _ = fs::remove_file(p);
                        }
                        results.push((f.transfer, Ok(())));
                    }
                }
                Err(e) => {
                    // Last renamed first: each puts back what it replaced.
                    for f in files.into_iter().rev() {
                        let _ = match &f.previous {
                            Some(p) => fs::rename(p, &f.to),
                            None => fs::remove_file(&f.to),
                        };
                        let why = format!(
                            "cannot sync the inbox directory {}: {e}; the file was taken out",
                            dir.display()
                        );
                        results.push((f.transfer, Err(io::Error::new(e.kind(), why))));
                    }
                }
            }
        }
        results
    }

    /// Whether commits wait for [`Inbox::flush`].
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Its fsync policy.
    pub fn fsync(&self) -> Fsync {
        self.fsync
    }
}

impl Store for Inbox {
    fn open(&mut self, m: &Manifest) -> io::Result<Option<ChunkMap>> {
        // Refuse a service that cannot name a directory before any byte is written.
        check_service_dir(&m.service)?;
        let part = self.path(m.transfer, "part");
        let saved = match fs::metadata(&part) {
            Ok(meta) if meta.len() == m.size => fs::read(self.path(m.transfer, "map"))
                .ok()
                .and_then(|b| ChunkMap::from_bytes(&b, m.chunks())),
            _ => None,
        };
        if saved.is_some() {
            self.saved.insert(m.transfer);
        } else {
            if self.saved.remove(&m.transfer) {
                let _ = fs::remove_file(self.path(m.transfer, "map"));
                let _ = fs::remove_file(self.path(m.transfer, "manifest"));
            }
            self.open.remove(m.transfer);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&part)?;
            f.set_len(m.size)?;
            self.open.insert(m.transfer, f);
        }
        Ok(saved)
    }

    fn write(&mut self, transfer: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        self.counts.writes += 1;
        self.file(transfer)?.write_all_at(data, offset)
    }

    fn read(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file(transfer)?.read_exact_at(buf, offset)
    }

    fn save_map(&mut self, m: &Manifest, map: &ChunkMap) -> io::Result<()> {
        let transfer = m.transfer;
        if !self.saved.contains(&transfer) {
            let mut offer = Vec::new();
            FilesMessage::Offer(m.offer(0))
                .encode(&mut offer)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            fs::write(self.path(transfer, "manifest"), offer)?;
            self.saved.insert(transfer);
        }
        // Whole or not at all: a torn map would claim chunks never written.
        let tmp = self.path(transfer, "map.tmp");
        fs::write(&tmp, map.to_bytes())?;
        fs::rename(&tmp, self.path(transfer, "map"))
    }

    fn commit(&mut self, m: &Manifest) -> io::Result<bool> {
        match self.fsync {
            Fsync::Never => {
                self.install(m)?;
                Ok(true)
            }
            Fsync::Always | Fsync::Batch => {
                self.pending.push(m.clone());
                Ok(false)
            }
        }
    }

    fn discard(&mut self, transfer: u64) {
        self.open.remove(transfer);
        self.pending.retain(|m| m.transfer != transfer);
        self.saved.remove(&transfer);
        for ext in ["part", "map", "manifest", "map.tmp"] {
            let _ = fs::remove_file(self.path(transfer, ext));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(transfer: u64, name: &str) -> Manifest {
        Manifest::sample(transfer, name, 3)
    }

    /// An inbox under `fsync` with files `names` written whole and waiting for their sync.
    fn committed(dir: &Path, names: &[&str]) -> Inbox {
        let mut inbox = Inbox::new(dir, Fsync::Always).unwrap();
        for (i, name) in names.iter().enumerate() {
            let m = manifest(i as u64 + 1, name);
            assert_eq!(inbox.open(&m).unwrap(), None);
            inbox.write(m.transfer, 0, b"abc").unwrap();
            assert!(!inbox.commit(&m).unwrap(), "waits for the sync");
        }
        inbox
    }

    #[test]
    fn files_a_directory_sync_fails_for_are_failed_and_not_left_visible() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("FILES/sub")).unwrap();
        let mut inbox = committed(dir.path(), &["a.csv", "sub/b.csv"]);
        inbox.fail_dir_syncs = true;
        let results = inbox.flush();
        assert_eq!(results.len(), 2);
        for (t, r) in results {
            let e = r.expect_err("a directory that cannot be synced fails its files");
            assert!(e.to_string().contains("the file was taken out"), "{t}: {e}");
        }
        assert!(!dir.path().join("FILES/a.csv").exists(), "not left visible");
        assert!(
            !dir.path().join("FILES/sub/b.csv").exists(),
            "not left visible"
        );
    }

    #[test]
    fn a_file_a_withdrawn_one_replaced_is_put_back() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("FILES")).unwrap();
        fs::write(dir.path().join("FILES/a.csv"), b"old").unwrap();
        // Two transfers of the same name in one flush, over an earlier file.
        let mut inbox = committed(dir.path(), &["a.csv", "a.csv"]);
        inbox.fail_dir_syncs = true;
        assert!(inbox.flush().iter().all(|(_, r)| r.is_err()));
        assert_eq!(fs::read(dir.path().join("FILES/a.csv")).unwrap(), b"old");
        let left: Vec<_> = fs::read_dir(dir.path().join(PARTIAL_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "nothing left aside: {left:?}");
        // Synced: the new file stays, and nothing is left aside.
        let mut inbox = committed(dir.path(), &["a.csv"]);
        assert!(inbox.flush().iter().all(|(_, r)| r.is_ok()));
        assert_eq!(fs::read(dir.path().join("FILES/a.csv")).unwrap(), b"abc");
        assert_eq!(
            fs::read_dir(dir.path().join(PARTIAL_DIR)).unwrap().count(),
            0
        );
    }

    #[test]
    fn a_symbolic_link_a_withdrawn_file_replaced_is_put_back() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("FILES")).unwrap();
        std::os::unix::fs::symlink("elsewhere", dir.path().join("FILES/a.csv")).unwrap();
        let mut inbox = committed(dir.path(), &["a.csv"]);
        inbox.fail_dir_syncs = true;
        assert!(inbox.flush().iter().all(|(_, r)| r.is_err()));
        let back = fs::read_link(dir.path().join("FILES/a.csv")).unwrap();
        assert_eq!(back, std::path::Path::new("elsewhere"));
    }

    #[test]
    fn files_whose_directory_syncs_are_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = committed(dir.path(), &["a.csv", "b.csv"]);
        let results = inbox.flush();
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        assert_eq!(fs::read(dir.path().join("FILES/b.csv")).unwrap(), b"abc");
        // One sync per file, one for the directory they share, one for the inbox's
        // entry of that directory (made for them).
        assert_eq!(inbox.counts().syncs, 4);
        // The directory there already: nothing but the files and it.
        let mut inbox = committed(dir.path(), &["c.csv"]);
        assert!(inbox.flush().iter().all(|(_, r)| r.is_ok()));
        assert_eq!(inbox.counts().syncs, 2);
    }

    /// Directories made for a file are synced into their parents, each one, before the
    /// file is acknowledged: a crash cannot take a synced file's directory away.
    #[test]
    fn directories_made_for_a_file_are_synced_into_their_parents() {
        let dir = tempfile::tempdir().unwrap();
        let mut inbox = committed(dir.path(), &["sub/deeper/c.csv"]);
        assert!(inbox.flush().iter().all(|(_, r)| r.is_ok()));
        assert_eq!(
            fs::read(dir.path().join("FILES/sub/deeper/c.csv")).unwrap(),
            b"abc"
        );
        // The file; the inbox (for FILES), FILES (for sub), sub (for deeper); deeper.
        assert_eq!(inbox.counts().syncs, 5);
        // A directory that cannot be synced into its parent fails the file, and is
        // taken out, to be made (and synced) again when the file comes again.
        let mut inbox = committed(dir.path(), &["other/d.csv"]);
        inbox.fail_dir_syncs = true;
        let results = inbox.flush();
        let e = results[0].1.as_ref().expect_err("not acknowledged");
        assert!(
            e.to_string().contains("cannot sync the inbox directory"),
            "{e}"
        );
        assert!(!dir.path().join("FILES/other").exists(), "taken out");
        // Under `never`, nothing is synced.
        let mut inbox = Inbox::new(dir.path(), Fsync::Never).unwrap();
        let m = manifest(9, "third/e.csv");
        assert_eq!(inbox.open(&m).unwrap(), None);
        inbox.write(m.transfer, 0, b"abc").unwrap();
        assert!(inbox.commit(&m).unwrap());
        assert_eq!(inbox.counts().syncs, 0);
    }
}
