//! Segment files: small files share them, so queuing one costs no file created and
//! delivering it no file removed (on a busy spool creating and removing thousands of
//! files a minute is what the file system spends its time on).
//!
//! A file's bytes are reserved in the current segment when it starts arriving (its
//! size is announced first), so files arriving at once write their own ranges. A
//! segment is removed when its last file is, and one that is mostly dead is emptied
//! into the current one by the spool ([`Segments::sparse`]), so the segments hold at
//! most about four times the bytes of the files in them. The current segment, once
//! empty, is truncated and reused.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The current segment takes files until it holds this many bytes.
pub(super) const SEGMENT_BYTES: u64 = 16 << 20;

struct Segment {
    file: Arc<File>,
    /// Bytes reserved so far.
    end: u64,
    /// Bytes of the files placed here and not yet removed.
    held: u64,
    files: usize,
}

pub(super) struct Segments {
    dir: PathBuf,
    open: BTreeMap<u32, Segment>,
    current: Option<u32>,
    next_id: u32,
}

fn segment_id(path: &Path) -> Option<u32> {
    if path.extension().and_then(|e| e.to_str()) != Some("segment") {
        return None;
    }
    u32::from_str_radix(path.file_stem()?.to_str()?, 16).ok()
}

impl Segments {
    /// The segments of the spool at `dir`; new ones are numbered after those there.
    pub(super) fn new(dir: &Path) -> io::Result<Self> {
        let mut last = 0;
        for entry in fs::read_dir(dir)? {
            if let Some(id) = segment_id(&entry?.path()) {
                last = last.max(id);
            }
        }
        Ok(Segments {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
            current: None,
            next_id: last.wrapping_add(1).max(1),
        })
    }

    fn path(&self, id: u32) -> PathBuf {
        self.dir.join(format!("{id:08x}.segment"))
    }

    /// Reserves `size` bytes for a file: the segment, the offset, and the segment's
    /// file to write them through.
    pub(super) fn reserve(&mut self, size: u64) -> io::Result<(u32, u64, Arc<File>)> {
        let full = self
            .current
            .and_then(|id| self.open.get(&id))
            .is_none_or(|s| s.end > 0 && s.end + size > SEGMENT_BYTES);
        if full {
            let id = self.next_id;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(self.path(id))?;
            self.next_id = id.wrapping_add(1).max(1);
            let old = self.current.replace(id);
            self.open.insert(
                id,
                Segment {
                    file: Arc::new(file),
                    end: 0,
                    held: 0,
                    files: 0,
                },
            );
            // A segment whose files are all gone goes as soon as it is not current.
            if let Some(old) = old {
                self.release(old, 0, 0);
            }
        }
        let id = self.current.expect("a current segment");
        let s = self.open.get_mut(&id).expect("the current segment is open");
        let at = s.end;
        s.end += size;
        s.held += size;
        s.files += 1;
        Ok((id, at, s.file.clone()))
    }

    /// Takes back a file a previous run placed at `at` in segment `id`; false when
    /// the segment is missing or too short (its bytes are lost).
    pub(super) fn adopt(&mut self, id: u32, at: u64, size: u64) -> bool {
        if !self.open.contains_key(&id) {
            let Ok(file) = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path(id))
            else {
                return false;
            };
            let Ok(len) = file.metadata().map(|m| m.len()) else {
                return false;
            };
            self.open.insert(
                id,
                Segment {
                    file: Arc::new(file),
                    end: len,
                    held: 0,
                    files: 0,
                },
            );
        }
        let s = self.open.get_mut(&id).expect("opened above");
        match at.checked_add(size) {
            Some(end) if end <= s.end => {}
            _ => return false,
        }
        s.held += size;
        s.files += 1;
        true
    }

    /// Segment files no file was placed in or adopted from: removed.
    pub(super) fn remove_unused(&mut self) -> io::Result<()> {
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if let Some(id) = segment_id(&path) {
                if !self.open.contains_key(&id) {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        let empty: Vec<u32> = self
            .open
            .iter()
            .filter(|(id, s)| s.files == 0 && Some(**id) != self.current)
            .map(|(id, _)| *id)
            .collect();
        for id in empty {
            self.release(id, 0, 0);
        }
        Ok(())
    }

    /// A file of `size` bytes left segment `id` (`files` is 1, or 0 to only check
    /// whether the segment is over).
    pub(super) fn release(&mut self, id: u32, size: u64, files: usize) {
        let Some(s) = self.open.get_mut(&id) else {
            return;
        };
        s.held = s.held.saturating_sub(size);
        s.files = s.files.saturating_sub(files);
        if s.files > 0 {
            return;
        }
        if self.current == Some(id) {
            // Empty and current: its space back, the file kept for the next ones.
            if s.end > 0 && s.file.set_len(0).is_ok() {
                s.end = 0;
            }
        } else {
            self.open.remove(&id);
            let _ = fs::remove_file(self.path(id));
        }
    }

    pub(super) fn file(&self, id: u32) -> Option<&File> {
        self.open.get(&id).map(|s| &*s.file)
    }

    /// A segment, not the current one, whose files hold under a quarter of it: its
    /// files are better moved and the segment removed.
    pub(super) fn sparse(&self) -> Option<u32> {
        self.open
            .iter()
            .find(|(id, s)| Some(**id) != self.current && s.held * 4 < s.end)
            .map(|(id, _)| *id)
    }

    /// Bytes in segment files on disk.
    pub(super) fn bytes(&self) -> u64 {
        self.open.values().map(|s| s.end).sum()
    }
}
