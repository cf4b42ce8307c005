//! A sending site's spool on disk: its queue of files, kept until every site has them.
//!
//! ```text
//! SPOOL/
//!   00c0ffee00c0ffee.data       the file's bytes, copied in when it was queued
//!   00c0ffee00c0ffee.manifest   its manifest (an encoded Offer)
//!   00c0ffee00c0ffee.sites      what its sites said, one JSON object per line
//! ```
//!
//! A file is copied in before it is queued, so it cannot change while it is sent (a
//! source file that changes while it is copied is refused), and a restarted sender
//! finds its queue here ([`Spool::load`], then `Sender::restore`). The [`ChunkSource`]
//! the sender reads through.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::manifest::Manifest;
use crate::sender::{ChunkSource, Delivery};
use crate::wire::FilesMessage;

/// Spooled files kept open at once for reading.
const OPEN_FILES: usize = 64;

/// A file's size and SHA-256, read through once.
pub fn sha256_file(path: &Path) -> io::Result<(u64, [u8; 32])> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match f.read(&mut buf) {
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

/// A transfer found in the spool: its manifest and the last state of each site.
pub type Spooled = (Manifest, Vec<(String, Delivery, String)>);

pub struct Spool {
    dir: PathBuf,
    open: HashMap<u64, (File, u64)>,
    use_clock: u64,
}

/// A file arriving into the spool (from a client over the network), hashed as written.
pub struct SpoolWriter {
    file: File,
    hasher: Sha256,
    len: u64,
}

impl SpoolWriter {
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file's size and SHA-256.
    pub fn finish(self) -> (u64, [u8; 32]) {
        (self.len, self.hasher.finalize().into())
    }
}

fn state_name(d: Delivery) -> &'static str {
    d.as_str()
}

fn parse_state(s: &str) -> Option<Delivery> {
    match s {
        "queued" => Some(Delivery::Queued),
        "sending" => Some(Delivery::Sending),
        "done" => Some(Delivery::Done),
        "failed" => Some(Delivery::Failed),
        _ => None,
    }
}

impl Spool {
    /// Opens (creating) the spool at `dir`.
    pub fn new(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
        })?;
        Ok(Spool {
            dir: dir.to_path_buf(),
            open: HashMap::new(),
            use_clock: 0,
        })
    }

    fn path(&self, transfer: u64, ext: &str) -> PathBuf {
        self.dir.join(format!("{transfer:016x}.{ext}"))
    }

    /// Where a transfer's bytes are.
    pub fn data_path(&self, transfer: u64) -> PathBuf {
        self.path(transfer, "data")
    }

    /// Starts a file arriving as `transfer`.
    pub fn begin(&mut self, transfer: u64) -> io::Result<SpoolWriter> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.path(transfer, "data"))?;
        Ok(SpoolWriter {
            file,
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
        let mut w = self.begin(transfer)?;
        let mut buf = vec![0u8; 256 * 1024];
        let copied = loop {
            match from.read(&mut buf) {
                Ok(0) => break Ok(()),
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
                a.len() != before.len()
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

    /// Moves the file at `src` in as `transfer` (a rename: it leaves `src`; a copy when
    /// `src` is on another file system), and hashes it. Returns size and SHA-256.
    pub fn adopt(&mut self, transfer: u64, src: &Path) -> io::Result<(u64, [u8; 32])> {
        let to = self.path(transfer, "data");
        match fs::rename(src, &to) {
            Ok(()) => sha256_file(&to),
            // EXDEV: another file system.
            Err(e) if e.raw_os_error() == Some(18) => {
                let got = self.copy_in(transfer, src)?;
                fs::remove_file(src)?;
                Ok(got)
            }
            Err(e) => Err(e),
        }
    }

    /// Saves a queued transfer's manifest (after its bytes are in).
    pub fn save(&mut self, m: &Manifest) -> io::Result<()> {
        let mut bytes = Vec::new();
        FilesMessage::Offer(m.offer(0))
            .encode(&mut bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let tmp = self.path(m.transfer, "manifest.tmp");
        fs::write(&tmp, bytes)?;
        fs::rename(tmp, self.path(m.transfer, "manifest"))
    }

    /// Appends what a site said of a transfer.
    pub fn record(
        &mut self,
        transfer: u64,
        site: &str,
        state: Delivery,
        reason: &str,
    ) -> io::Result<()> {
        let mut line =
            serde_json::json!({"site": site, "state": state_name(state), "reason": reason})
                .to_string();
        line.push('\n');
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(transfer, "sites"))?
            .write_all(line.as_bytes())
    }

    /// Every transfer in the spool (a restarted sender's queue), oldest first by the
    /// manifest's modification time. Data without a manifest (a crash while queuing)
    /// is removed.
    pub fn load(&mut self) -> io::Result<Vec<Spooled>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let path = entry.path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            let Ok(transfer) = u64::from_str_radix(stem, 16) else {
                continue;
            };
            if path.extension().and_then(|e| e.to_str()) != Some("data") {
                continue;
            }
            let manifest = fs::read(self.path(transfer, "manifest")).ok();
            let m = manifest
                .as_deref()
                .and_then(|b| match FilesMessage::decode(b) {
                    Ok(FilesMessage::Offer(o)) => Some(Manifest::from_offer(&o)),
                    _ => None,
                });
            let Some(m) = m else {
                self.remove(transfer);
                continue;
            };
            let mut sites: Vec<(String, Delivery, String)> = Vec::new();
            if let Ok(text) = fs::read_to_string(self.path(transfer, "sites")) {
                for line in text.lines() {
                    // A torn last line (a crash mid-append) is skipped.
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                        continue;
                    };
                    let (Some(site), Some(state)) = (
                        v["site"].as_str(),
                        v["state"].as_str().and_then(parse_state),
                    ) else {
                        continue;
                    };
                    let reason = v["reason"].as_str().unwrap_or("").to_owned();
                    match sites.iter_mut().find(|(s, _, _)| s == site) {
                        Some(e) => *e = (site.to_owned(), state, reason),
                        None => sites.push((site.to_owned(), state, reason)),
                    }
                }
            }
            let age = entry.metadata().and_then(|m| m.modified()).ok();
            found.push((age, m, sites));
        }
        found.sort_by_key(|(age, m, _)| (*age, m.transfer));
        Ok(found.into_iter().map(|(_, m, s)| (m, s)).collect())
    }

    /// Forgets a transfer: its bytes, manifest and record.
    pub fn remove(&mut self, transfer: u64) {
        self.open.remove(&transfer);
        for ext in ["data", "manifest", "manifest.tmp", "sites"] {
            let _ = fs::remove_file(self.path(transfer, ext));
        }
    }
}

impl ChunkSource for Spool {
    fn read_chunk(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.use_clock += 1;
        if !self.open.contains_key(&transfer) {
            if self.open.len() >= OPEN_FILES {
                if let Some(lru) = self
                    .open
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(t, _)| *t)
                {
                    self.open.remove(&lru);
                }
            }
            let f = File::open(self.path(transfer, "data"))?;
            self.open.insert(transfer, (f, 0));
        }
        let entry = self.open.get_mut(&transfer).expect("opened above");
        entry.1 = self.use_clock;
        entry.0.read_exact_at(buf, offset)
    }
}
