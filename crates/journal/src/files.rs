//! The thin layer over the file system: the only code here that touches files. Every
//! system call that writes or syncs is counted, for the lab's system calls per post.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// System calls made by the journal's writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyscallCounts {
    /// `write` calls.
    pub writes: u64,
    /// `fdatasync` and `fsync` calls.
    pub syncs: u64,
}

/// The segments in `dir`, by first seq (files with other names are left alone).
pub fn list_segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(first) = name.to_str().and_then(crate::segment::parse_file_name) {
            out.push((first, entry.path()));
        }
    }
    out.sort_unstable_by_key(|(first, _)| *first);
    Ok(out)
}

/// Takes `dir` for this process alone: an advisory lock (`flock`) held until the
/// returned file is closed, by the process or by its death. `Ok(None)`: another process
/// holds it.
pub fn lock_dir(dir: &Path) -> std::io::Result<Option<File>> {
    let file = File::open(dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// A whole file.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Creates `dir` and the parents it lacks, each made durable in its parent as it is
/// made: a crash of the machine could otherwise lose a new journal's directory, and the
/// segments synced inside it with it.
pub fn create_dir_durably(dir: &Path, counts: &mut SyscallCounts) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    create_dir_durably(parent, counts)?;
    match std::fs::create_dir(dir) {
        Ok(()) => sync_dir(parent, counts),
        // Made meanwhile by another: its maker syncs it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes a directory's entries (a new segment) durable.
pub fn sync_dir(dir: &Path, counts: &mut SyscallCounts) -> std::io::Result<()> {
    counts.syncs += 1;
    File::open(dir)?.sync_all()
}

/// The segment being appended to.
pub struct SegmentFile {
    file: File,
    /// Where it is.
    pub path: PathBuf,
    /// Bytes in the file.
    pub len: u64,
}

impl SegmentFile {
    /// A new segment holding only `header`, synced, its directory entry too.
    pub fn create(
        dir: &Path,
        name: &str,
        header: &[u8],
        counts: &mut SyscallCounts,
    ) -> std::io::Result<SegmentFile> {
        let path = dir.join(name);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(&path)?;
        counts.writes += 1;
        let written = file
            .write_all(header)
            .and_then(|()| {
                counts.syncs += 1;
                file.sync_data()
            })
            .and_then(|()| sync_dir(dir, counts));
        if let Err(e) = written {
            // A full disk: the segment is not left behind, or the journal would hold
            // segments that do not follow each other (the current one goes on, and the
            // next try starts at a later seq), which a restart refuses.
            drop(file);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(SegmentFile {
            file,
            path,
            len: header.len() as u64,
        })
    }

    /// An existing segment, to append after its first `valid_len` bytes (anything after
    /// them is cut off first, and the cut synced).
    pub fn open_at(
        path: &Path,
        valid_len: u64,
        counts: &mut SyscallCounts,
    ) -> std::io::Result<SegmentFile> {
        let file = OpenOptions::new().write(true).open(path)?;
        if file.metadata()?.len() != valid_len {
            file.set_len(valid_len)?;
            counts.syncs += 1;
            file.sync_all()?;
        }
        let mut seg = SegmentFile {
            file,
            path: path.to_path_buf(),
            len: valid_len,
        };
        use std::io::Seek;
        seg.file.seek(std::io::SeekFrom::Start(valid_len))?;
        Ok(seg)
    }

    /// Writes all of `bytes` at the end (one system call, unless the kernel takes less).
    pub fn append(&mut self, bytes: &[u8], counts: &mut SyscallCounts) -> std::io::Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            counts.writes += 1;
            match self.file.write(rest) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    rest = &rest[n..];
                    self.len += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// fdatasync: what was written is on the disk when it returns.
    pub fn sync(&mut self, counts: &mut SyscallCounts) -> std::io::Result<()> {
        counts.syncs += 1;
        self.file.sync_data()
    }

    /// Cuts the file back to `len` bytes (after a failed write).
    pub fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        use std::io::Seek;
        self.file.set_len(len)?;
        self.file.seek(std::io::SeekFrom::Start(len))?;
        self.len = len;
        Ok(())
    }
}
