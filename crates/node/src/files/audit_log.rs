//! The audit log beside the inbox (JSON lines): the hub's events, a turn's lines in one
//! write, a line cut short by a full disk never left half.

use super::wall_ms;
use log::{error, info, warn};
use std::io::Write;
use tickwire_files::audit;
use tickwire_files::{Hub, HubEvent};

/// Where the audit log goes: a file (opened to append), which can be cut back.
pub(super) trait AuditFile: Write {
    fn len(&self) -> Option<u64>;
    fn set_len(&mut self, len: u64) -> std::io::Result<()>;
    /// Its last byte, when it can be read.
    fn last_byte(&self) -> Option<u8> {
        None
    }
}

impl AuditFile for std::fs::File {
    fn len(&self) -> Option<u64> {
        self.metadata().map(|m| m.len()).ok()
    }

    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        std::fs::File::set_len(self, len)
    }

    fn last_byte(&self) -> Option<u8> {
        use std::os::unix::fs::FileExt;
        let len = AuditFile::len(self)?.checked_sub(1)?;
        let mut b = [0u8];
        self.read_exact_at(&mut b, len).ok()?;
        Some(b[0])
    }
}

/// The audit log, appended a turn's lines at a time (one write for them: a small file
/// costs about four lines).
pub(super) struct AuditLog<F: AuditFile = std::fs::File> {
    file: F,
    /// Its length after the last whole line (known without a system call per line).
    len: Option<u64>,
    /// A write failed (said once).
    failed: bool,
}

impl<F: AuditFile> AuditLog<F> {
    pub(super) fn new(file: F) -> Self {
        let len = file.len();
        let mut log = AuditLog {
            file,
            len,
            failed: false,
        };
        // A line a crash cut short ends here: the next record starts a line of its
        // own (else it would be read back as part of the cut one, and lost).
        if log.file.last_byte().is_some_and(|b| b != b'\n') {
            log.write(b"\n");
        }
        log
    }

    /// Appends whole lines (`lines`, each ending in a newline). When they do not all
    /// fit (a full disk), what was written of them is taken back and they go one by
    /// one, so that every line that fits is kept and none is left in part.
    pub(super) fn append(&mut self, lines: &[u8]) {
        if lines.is_empty() || self.write(lines) {
            return;
        }
        for line in lines.split_inclusive(|&b| b == b'\n') {
            self.write(line);
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> bool {
        match self.file.write_all(bytes) {
            Ok(()) => {
                self.len = self.len.map(|l| l + bytes.len() as u64);
                true
            }
            Err(err) => {
                // Lines written in part are taken back: the next record starts a line
                // of its own.
                if let Some(len) = self.len {
                    let _ = self.file.set_len(len);
                }
                if !self.failed {
                    error!("files: cannot write the audit log: {err}");
                    self.failed = true;
                }
                false
            }
        }
    }
}

/// The hub's events to the log and the audit log.
pub(super) fn drain_events(hub: &mut Hub, audit: &mut AuditLog) {
    let mut lines = String::new();
    while let Some(e) = hub.poll_event() {
        match &e {
            HubEvent::Arrived { manifest } => info!(
                "files: {} arrived from {} ({} bytes, sha256 {})",
                manifest.name,
                manifest.sender,
                manifest.size,
                hex::encode(manifest.sha256)
            ),
            HubEvent::Failed { manifest, reason } => {
                warn!(
                    "files: {} from {} not taken: {reason}",
                    manifest.name, manifest.sender
                )
            }
            HubEvent::SpoolError { reason } => error!("files: {reason}"),
            _ => {}
        }
        lines.push_str(&audit::line(&e, wall_ms()).to_string());
        lines.push('\n');
    }
    audit.append(lines.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::{AuditFile, AuditLog};
    use std::io::Write;

    /// A disk with room for `room` bytes: a write past it takes what fits and fails.
    struct SmallDisk {
        bytes: Vec<u8>,
        room: usize,
        writes: usize,
    }

    impl Write for SmallDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.writes += 1;
            let n = buf.len().min(self.room - self.bytes.len());
            if n == 0 && !buf.is_empty() {
                return Err(std::io::ErrorKind::StorageFull.into());
            }
            self.bytes.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl AuditFile for SmallDisk {
        fn len(&self) -> Option<u64> {
            Some(self.bytes.len() as u64)
        }

        fn set_len(&mut self, len: u64) -> std::io::Result<()> {
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    fn disk(room: usize) -> AuditLog<SmallDisk> {
        AuditLog::new(SmallDisk {
            bytes: Vec::new(),
            room,
            writes: 0,
        })
    }

    /// A log whose last line a crash cut short: the first record after it is read back
    /// whole.
    #[test]
    fn a_record_after_a_line_cut_short_starts_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, b"{\"a\":1}\n{\"b\":").unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        let mut log = AuditLog::new(file);
        log.append(b"{\"c\":3}\n");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().last(), Some("{\"c\":3}"), "{text:?}");
        // A log that ends its lines is left as it is.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        AuditLog::new(file).append(b"{\"d\":4}\n");
        let again = std::fs::read_to_string(&path).unwrap();
        assert_eq!(again, text + "{\"d\":4}\n");
    }

    #[test]
    fn a_turns_lines_go_in_one_write() {
        let mut log = disk(1000);
        log.append(b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        log.append(b"");
        assert_eq!(log.file.writes, 1);
        assert_eq!(log.file.bytes, b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        assert!(!log.failed);
    }

    #[test]
    fn on_a_full_disk_every_whole_line_that_fits_is_kept_and_no_line_in_part() {
        // Room for the first line and half of the second.
        let mut log = disk(12);
        log.append(b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
        assert_eq!(log.file.bytes, b"{\"a\":1}\n");
        assert!(log.failed);
        // Room again (the disk cleaned): the next lines start lines of their own.
        log.file.room = 1000;
        log.append(b"{\"d\":4}\n");
        assert_eq!(log.file.bytes, b"{\"a\":1}\n{\"d\":4}\n");
    }
}
