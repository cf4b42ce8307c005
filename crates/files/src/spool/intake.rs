//! Files into the spool: an upload written as it arrives ([`SpoolWriter`]), a local file
//! copied in (or hashed where it is, or moved in), each hashed on the way, and the
//! SHA-256 of a file or a reader.

use super::{log, Spool, SEGMENT_FILE_MAX};
use crate::inbox::Fsync;
use log::Place;
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// A file's size and SHA-256, read through once.
pub fn sha256_file(path: &Path) -> io::Result<(u64, [u8; 32])> {
    sha256_reader(&mut File::open(path)?)
}

/// An outbox file's size and SHA-256, and with `sync` its bytes synced (whoever wrote
/// it may not have): the slow part of queuing it, which needs no spool, so that it can
/// be done on a thread of its own. A file whose size or modification time changed
/// while it was read is an error: it is still being written.
pub fn hash_outbox_file(src: &Path, sync: bool) -> io::Result<(u64, [u8; 32])> {
    let mut file = File::open(src)?;
    let stamp = |f: &File| f.metadata().map(|m| (m.len(), m.modified().ok()));
    let before = stamp(&file)?;
    let got = sha256_reader(&mut file)?;
    if sync {
        file.sync_data()?;
    }
    if stamp(&file)? != before || got.0 != before.0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} changed while it was hashed", src.display()),
        ));
    }
    Ok(got)
}

/// The size and SHA-256 of what `r` gives until its end.
pub fn sha256_reader(r: &mut impl Read) -> io::Result<(u64, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok((size, h.finalize().into()))
}

/// A file arriving into the spool, hashed as written.
pub struct SpoolWriter {
    file: Arc<File>,
    /// Where the file starts in `file`.
    base: u64,
    /// Bytes reserved for it.
    cap: u64,
    hasher: Sha256,
    len: u64,
}

/// Moves `src` to `to`: a rename, or a copy and then a removal when `src` is on another
/// file system. A file whose size is no longer `size` goes back (or stays) where it
/// was, and this is an error.
pub(super) fn rename_or_copy(src: &Path, to: &Path, size: u64, sync: bool) -> io::Result<()> {
    let changed = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} changed since it was hashed", src.display()),
        )
    };
    match fs::rename(src, to) {
        Ok(()) => {
            let moved = fs::metadata(to).map_or(size, |m| m.len());
            if moved == size {
                return Ok(());
            }
            match fs::rename(to, src) {
                Ok(()) => Err(changed()),
                // It cannot go back: it stays queued, not lost (its sites find
                // its hash wrong and say so).
                Err(_) => Ok(()),
            }
        }
        // EXDEV: another file system.
        Err(e) if e.raw_os_error() == Some(18) => {
            let copied = fs::copy(src, to);
            if !copied.as_ref().is_ok_and(|n| *n == size) {
                let _ = fs::remove_file(to);
                return Err(copied.err().unwrap_or_else(changed));
            }
            if sync {
                // The copy and its name on the disk before the original goes.
                let dir = to.parent().unwrap_or(Path::new("."));
                let synced = File::open(to)
                    .and_then(|f| f.sync_data())
                    .and_then(|()| File::open(dir)?.sync_all());
                if let Err(e) = synced {
                    let _ = fs::remove_file(to);
                    return Err(e);
                }
            }
            fs::remove_file(src)
        }
        Err(e) => Err(e),
    }
}

impl SpoolWriter {
    /// Writes `data` at `offset` of the transfer's partial file.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.len + bytes.len() as u64 > self.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("more than the {} bytes announced", self.cap),
            ));
        }
        self.file.write_all_at(bytes, self.base + self.len)?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Nothing is spooled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's size and SHA-256.
    pub fn finish(self) -> (u64, [u8; 32]) {
        (self.len, self.hasher.finalize().into())
    }
}

impl Spool {
    /// Starts a file of `size` bytes arriving as `transfer`.
    pub fn begin(&mut self, transfer: u64, size: u64) -> io::Result<SpoolWriter> {
        let (file, base, place) = if size <= SEGMENT_FILE_MAX {
            let (id, at, file) = self.segments.reserve(size)?;
            (file, at, Place::Segment { id, at })
        } else {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(self.own_path(transfer))?;
            (Arc::new(file), 0, Place::Own)
        };
        self.arriving.insert(transfer, (place, size));
        if self.fsync != Fsync::Never {
            let own = matches!(place, Place::Own).then_some(transfer);
            self.unsynced.file(own, &file);
            // A new file's name (its own, or a new segment's).
            self.unsynced.dir |= matches!(place, Place::Own | Place::Segment { at: 0, .. });
        }
        Ok(SpoolWriter {
            file,
            base,
            cap: size,
            hasher: Sha256::new(),
            len: 0,
        })
    }

    /// Copies the file at `src` in as `transfer`; refuses a file that changed while
    /// it was copied (its size or modification time moved). Returns size and SHA-256.
    pub fn copy_in(&mut self, transfer: u64, src: &Path) -> io::Result<(u64, [u8; 32])> {
        let mut from = File::open(src)?;
        let before = from.metadata()?;
        if !before.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", src.display()),
            ));
        }
        let mut w = self.begin(transfer, before.len())?;
        let mut buf = vec![0u8; 256 * 1024];
        let mut grew = false;
        let copied = loop {
            match from.read(&mut buf) {
                Ok(0) => break Ok(()),
                // More bytes than the size it had: it grows while copied.
                Ok(n) if w.len() + n as u64 > before.len() => {
                    grew = true;
                    break Ok(());
                }
                Ok(n) => {
                    if let Err(e) = w.write(&buf[..n]) {
                        break Err(e);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let after = from.metadata();
        let changed = match &after {
            Ok(a) => {
                grew || a.len() != before.len()
                    || w.len() != before.len()
                    || a.modified().ok() != before.modified().ok()
                    || w.len() != a.len()
            }
            Err(_) => true,
        };
        if let Err(e) = copied {
            self.remove(transfer);
            return Err(e);
        }
        if changed {
            self.remove(transfer);
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} changed while it was copied; send it again once it is complete",
                    src.display()
                ),
            ));
        }
        Ok(w.finish())
    }

    /// Hashes the outbox file at `src` where it is, to be queued as `transfer` with its
    /// bytes in a file of its own: [`Spool::save`] its manifest, then [`Spool::move_in`]
    /// the file. In that order a node stopped at any point leaves the file in the
    /// outbox, or queued with its bytes here: never neither. Returns size and SHA-256.
    pub fn hash_in_place(&mut self, transfer: u64, src: &Path) -> io::Result<(u64, [u8; 32])> {
        // Its bytes on the disk before its manifest is.
        let got = hash_outbox_file(src, self.fsync != Fsync::Never)?;
        self.hashed_in_place(transfer, got.0);
        Ok(got)
    }

    /// As [`Spool::hash_in_place`], for a file [`hash_outbox_file`] hashed (and synced
    /// as this spool's policy says) already: `size` bytes.
    pub fn hashed_in_place(&mut self, transfer: u64, size: u64) {
        self.arriving.insert(transfer, (Place::Own, size));
    }

    /// Moves the outbox file at `src` in as the bytes of `transfer`, whose manifest is
    /// saved with `size` bytes: a rename, or a copy and then a removal when `src` is
    /// on another file system. A file of another size changed since it was hashed:
    /// it stays in (or goes back to) the outbox, and this is an error.
    pub fn move_in(&mut self, transfer: u64, src: &Path, size: u64) -> io::Result<()> {
        let to = self.own_path(transfer);
        // Its bytes were synced when it was hashed; a copy is synced before the
        // original goes.
        rename_or_copy(src, &to, size, self.fsync != Fsync::Never)?;
        self.unsynced.dir |= self.fsync != Fsync::Never;
        Ok(())
    }

    /// An upload's bytes are all written (by `w`): they are synced at the next
    /// [`Spool::sync_data`], whatever an earlier sync took of them.
    pub fn written(&mut self, transfer: u64, w: &SpoolWriter) {
        if self.fsync == Fsync::Never {
            return;
        }
        let own = matches!(self.arriving.get(&transfer), Some((Place::Own, _)));
        self.unsynced.file(own.then_some(transfer), &w.file);
    }
}
