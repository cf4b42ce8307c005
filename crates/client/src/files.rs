//! Files through a node (docs/FILES.md): queue a file at a node for its sites, and ask
//! a node what it has queued, sent and delivered. What `tickwire files send` and
//! `tickwire files status` do, over a logged-in [`Subscriber`].
//!
//! An upload is windowed: the client sends at most the node's window beyond what the
//! node has acknowledged, so a node busy with its disk is never flooded; several go at
//! once, and a small file goes whole with its request (one round trip each); the node
//! hashes what it receives and refuses a file whose hash differs from the one sent
//! first (a file changed while it was sent).

use crate::{ClientError, Event, Subscriber};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_files::wire::{FilesMessage, Put, PutState, PUT_FIRST_WINDOW};

/// Bytes of a file per upload message.
const DATA_BYTES: usize = 60_000;

/// A file the node has queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The node's id for the transfer.
    pub transfer: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256.
    pub sha256: [u8; 32],
}

/// One file at one site, from a node's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStatus {
    /// The node's id for the transfer.
    pub transfer: u64,
    /// The files service.
    pub service: String,
    /// The file's name.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its SHA-256.
    pub sha256: [u8; 32],
    /// Empty: no site yet (a file for every site, before it starts).
    pub site: String,
    /// `queued`, `sending`, `done` or `failed`.
    pub state: String,
    /// Milliseconds since 1970 when the state began (0: not known).
    pub since_ms: u64,
    /// Why it failed, if it did.
    pub reason: String,
}

fn encode(m: &FilesMessage) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    m.encode(&mut body)?;
    Ok(body)
}

/// Waits for the node's next files message, up to `deadline`.
fn next_files(sub: &mut Subscriber, deadline: Instant) -> Result<Option<Vec<u8>>, ClientError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match sub.next_event(left.min(Duration::from_millis(200)))? {
            Some(Event::Files(body)) => return Ok(Some(body)),
            Some(Event::Status {
                stream: 0, state, ..
            }) => {
                return Err(ClientError::Disconnected(state.text));
            }
            _ => {}
        }
    }
}

/// Uploads a client keeps going at once on its connection.
pub const FILES_IN_FLIGHT: usize = 8;

/// A file to queue at the node: its name there and where it is here.
pub struct Upload<'a> {
    /// Its name at the sites.
    pub name: &'a str,
    /// Where it is here.
    pub path: &'a Path,
}

/// Where an upload's bytes come from.
enum Bytes {
    /// A file that goes whole with its `Put`, read once (its hash taken from memory).
    Held(Vec<u8>),
    /// A larger file, read once for its hash and again as the node's window allows.
    Open(File),
}

impl Bytes {
    /// Opens the file at `path` and takes its size and SHA-256: one open and, for a
    /// file that fits the first window, one read (thousands of small files cost a
    /// system call or two each, not a second open and read).
    fn open(path: &Path) -> std::io::Result<(Bytes, u64, [u8; 32])> {
        let mut file = File::open(path)?;
        // Room for the whole window: the file comes in one read, and the next says
        // it ended (an empty vector would be read into a few bytes at a time).
        let mut held = Vec::with_capacity(PUT_FIRST_WINDOW as usize + 1);
        (&mut file)
            .take(PUT_FIRST_WINDOW + 1)
            .read_to_end(&mut held)?;
        if held.len() as u64 <= PUT_FIRST_WINDOW {
            let (size, sha256) = (held.len() as u64, Sha256::digest(&held).into());
            return Ok((Bytes::Held(held), size, sha256));
        }
        file.seek(SeekFrom::Start(0))?;
        let (size, sha256) = tickwire_files::spool::sha256_reader(&mut file)?;
        file.seek(SeekFrom::Start(0))?;
        Ok((Bytes::Open(file), size, sha256))
    }

    /// Fills `buf` with the bytes at `at` (the next ones: uploads go in order).
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match self {
            Bytes::Held(b) => {
                buf.copy_from_slice(&b[at as usize..at as usize + buf.len()]);
                Ok(())
            }
            Bytes::Open(f) => f.read_exact(buf),
        }
    }
}

/// One upload on its way.
struct InFlight {
    index: usize,
    bytes: Bytes,
    size: u64,
    sha256: [u8; 32],
    sent: u64,
    /// Bytes the node takes so far (its window beyond what it has acknowledged).
    allowed: u64,
    /// When the node last moved it on (took more of it, or first let it go).
    heard: Instant,
    /// Bytes the node said it had taken, at `heard`.
    taken: u64,
}

/// Queues `files` at the node in `service`, for the sites `to` (empty: every site of
/// the service), up to [`FILES_IN_FLIGHT`] at once on the connection. Calls `done`
/// with each file's index and outcome as the node answers: queued (whole, checked and
/// spooled), or refused with the node's reason. `timeout` bounds each wait for the
/// node about a file. An error that ends the connection's use (the node gone, a
/// timeout, a file that cannot be read) is returned; the node drops the uploads left.
pub fn send_files(
    sub: &mut Subscriber,
    service: &str,
    files: &[Upload<'_>],
    to: &[String],
    timeout: Duration,
    mut done: impl FnMut(usize, Result<Queued, ClientError>),
) -> Result<(), ClientError> {
    let to: Vec<&str> = to.iter().map(String::as_str).collect();
    let mut flying: HashMap<u32, InFlight> = HashMap::new();
    let mut next = 0;
    let mut buf = vec![0u8; DATA_BYTES];
    loop {
        while flying.len() < FILES_IN_FLIGHT && next < files.len() {
            let f = &files[next];
            let (bytes, size, sha256) = Bytes::open(f.path)?;
            let request = next as u32 + 1;
            let put = FilesMessage::Put(Put {
                request,
                service,
                name: f.name,
                size,
                sha256,
                to: to.clone(),
            });
            sub.send_files(&encode(&put)?)?;
            let mut up = InFlight {
                index: next,
                bytes,
                size,
                sha256,
                sent: 0,
                allowed: PUT_FIRST_WINDOW,
                heard: Instant::now(),
                taken: 0,
            };
            pump(sub, request, &mut up, f.path, &mut buf)?;
            flying.insert(request, up);
            next += 1;
        }
        let Some(oldest) = flying.values().min_by_key(|u| u.heard) else {
            return Ok(());
        };
        // (A time-out too long to add, `Duration::MAX` say, is a century.)
        let deadline = oldest
            .heard
            .checked_add(timeout)
            .unwrap_or_else(|| crate::driver::deadline_after(timeout));
        let index = oldest.index;
        let Some(body) = next_files(sub, deadline)? else {
            let u = &flying
                .values()
                .find(|u| u.index == index)
                .expect("in flight");
            return Err(ClientError::Timeout(format!(
                "waiting for the node to take {} ({} of {} bytes sent)",
                files[index].path.display(),
                u.sent,
                u.size
            )));
        };
        let Ok(FilesMessage::PutAnswer(a)) = FilesMessage::decode(&body) else {
            continue;
        };
        let Some(up) = flying.get_mut(&a.request) else {
            continue;
        };
        // Only an answer that moves the upload on restarts its wait: a node repeating
        // itself ("progress", nothing taken) would hold the call for ever.
        if a.received > up.taken || a.state != PutState::Progress {
            up.heard = Instant::now();
            up.taken = up.taken.max(a.received);
        }
        let path = files[up.index].path;
        match a.state {
            PutState::Go | PutState::Progress => {
                up.allowed = up.allowed.max(a.received.saturating_add(a.window));
                pump(sub, a.request, up, path, &mut buf)?;
            }
            PutState::Queued => {
                let up = flying.remove(&a.request).expect("in flight");
                done(
                    up.index,
                    Ok(Queued {
                        transfer: a.transfer,
                        size: up.size,
                        sha256: up.sha256,
                    }),
                );
            }
            PutState::Refused => {
                let up = flying.remove(&a.request).expect("in flight");
                let reason = if a.reason.contains("do not match the SHA-256") {
                    format!(
                        "{}: {} (did the file change while it was sent?)",
                        path.display(),
                        a.reason
                    )
                } else {
                    a.reason.to_string()
                };
                done(up.index, Err(ClientError::Refused(reason)));
            }
            PutState::Unknown(c) => {
                return Err(ClientError::Protocol(format!(
                    "unknown upload state {c} from the node"
                )));
            }
        }
    }
}

/// Sends what the node's window allows of an upload.
fn pump(
    sub: &mut Subscriber,
    request: u32,
    up: &mut InFlight,
    path: &Path,
    buf: &mut [u8],
) -> Result<(), ClientError> {
    while up.sent < up.size && up.sent < up.allowed {
        let n = (up.size - up.sent)
            .min(buf.len() as u64)
            .min(up.allowed - up.sent) as usize;
        up.bytes.read_at(up.sent, &mut buf[..n]).map_err(|e| {
            ClientError::Io(std::io::Error::new(
                e.kind(),
                format!("{} changed while it was sent: {e}", path.display()),
            ))
        })?;
        let data = FilesMessage::PutData {
            request,
            offset: up.sent,
            data: &buf[..n],
        };
        sub.send_files(&encode(&data)?)?;
        up.sent += n as u64;
    }
    Ok(())
}

/// What the node has queued, sent and delivered: one entry per file and site.
pub fn status(
    sub: &mut Subscriber,
    request: u32,
    timeout: Duration,
) -> Result<Vec<FileStatus>, ClientError> {
    sub.send_files(&encode(&FilesMessage::Query { request })?)?;
    let mut out = Vec::new();
    let mut deadline = crate::driver::deadline_after(timeout);
    loop {
        let Some(body) = next_files(sub, deadline)? else {
            return Err(ClientError::Timeout(
                "waiting for the node's files report".into(),
            ));
        };
        let (r, last, entries) = match FilesMessage::decode(&body) {
            Ok(FilesMessage::Report {
                request: r,
                last,
                entries,
            }) => (r, last, entries),
            // The node will not answer it (its files thread stopped or is behind).
            Ok(FilesMessage::QueryRefused { request: r, reason }) if r == request => {
                return Err(ClientError::Refused(reason.to_owned()));
            }
            _ => continue,
        };
        if r != request {
            continue;
        }
        deadline = crate::driver::deadline_after(timeout);
        out.extend(entries.into_iter().map(|e| FileStatus {
            transfer: e.transfer,
            service: e.service.to_owned(),
            file: e.name.to_owned(),
            size: e.size,
            sha256: e.sha256,
            site: e.site.to_owned(),
            state: e.state.to_owned(),
            since_ms: e.since_ms,
            reason: e.reason.to_owned(),
        }));
        if last {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes (a pattern that differs at every offset of interest) in a
    /// directory of this test's own.
    fn file_of(test: &str, len: usize) -> (std::path::PathBuf, Vec<u8>) {
        let dir =
            std::env::temp_dir().join(format!("tickwire-client-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let path = dir.join("f.dat");
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    /// What an upload of `b` sends, read as `pump` reads it.
    fn read_all(b: &mut Bytes, size: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; DATA_BYTES];
        while (out.len() as u64) < size {
            let n = (size - out.len() as u64).min(DATA_BYTES as u64) as usize;
            b.read_at(out.len() as u64, &mut buf[..n]).unwrap();
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn a_file_that_fits_the_first_window_is_read_once_and_hashed_from_memory() {
        for len in [0, 1, 16_000, PUT_FIRST_WINDOW as usize] {
            let (path, bytes) = file_of(&format!("small{len}"), len);
            let (mut b, size, sha256) = Bytes::open(&path).unwrap();
            assert!(matches!(b, Bytes::Held(_)), "{len} bytes are held");
            assert_eq!(size, len as u64);
            assert_eq!(sha256, <[u8; 32]>::from(Sha256::digest(&bytes)));
            // Gone from the disk, still sent whole: the upload never reads it again.
            std::fs::remove_file(&path).unwrap();
            assert_eq!(read_all(&mut b, size), bytes);
        }
    }

    #[test]
    fn a_larger_file_is_hashed_then_sent_from_its_start() {
        for len in [PUT_FIRST_WINDOW as usize + 1, 3 * DATA_BYTES + 17] {
            let (path, bytes) = file_of(&format!("large{len}"), len);
            let (mut b, size, sha256) = Bytes::open(&path).unwrap();
            assert!(matches!(b, Bytes::Open(_)), "{len} bytes are read as sent");
            assert_eq!(size, len as u64);
            assert_eq!(sha256, <[u8; 32]>::from(Sha256::digest(&bytes)));
            assert_eq!(read_all(&mut b, size), bytes);
        }
    }

    #[test]
    fn a_larger_file_cut_short_after_its_hash_is_an_error_not_a_short_upload() {
        let (path, _) = file_of("cut", PUT_FIRST_WINDOW as usize + 100);
        let (mut b, size, _) = Bytes::open(&path).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        let mut buf = vec![0u8; size as usize];
        let e = b.read_at(0, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
