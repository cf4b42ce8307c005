//! Files through a node (docs/FILES.md): queue a file at a node for its sites, and ask
//! a node what it has queued, sent and delivered. What `tickwire files send` and
//! `tickwire files status` do, over a logged-in [`Subscriber`].
//!
//! An upload is windowed: the client sends at most the node's window beyond what the
//! node has acknowledged, so a node busy with its disk is never flooded; the node
//! hashes what it receives and refuses a file whose hash differs from the one sent
//! first (a file changed while it was sent).

use crate::{ClientError, Event, Subscriber};
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_files::wire::{FilesMessage, Put, PutState};

/// Bytes of a file per upload message.
const DATA_BYTES: usize = 60_000;

/// A file the node has queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub transfer: u64,
    pub size: u64,
    pub sha256: [u8; 32],
}

/// One file at one site, from a node's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStatus {
    pub transfer: u64,
    pub service: String,
    pub file: String,
    pub size: u64,
    pub sha256: [u8; 32],
    /// Empty: no site yet (a file for every site, before it starts).
    pub site: String,
    /// `queued`, `sending`, `done` or `failed`.
    pub state: String,
    /// Milliseconds since 1970 when the state began (0: not known).
    pub since_ms: u64,
    pub reason: String,
}

fn encode(m: &FilesMessage) -> Result<Vec<u8>, ClientError> {
    let mut body = Vec::new();
    m.encode(&mut body)?;
    Ok(body)
}

/// Waits for the node's next answer about `request`, up to `deadline`.
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

/// Queues the file at `path` at the node as `name` in `service`, for the sites `to`
/// (empty: every site of the service). Waits until the node has it whole, checked and
/// queued; `timeout` bounds each wait for the node.
pub fn send_file(
    sub: &mut Subscriber,
    request: u32,
    service: &str,
    name: &str,
    path: &Path,
    to: &[String],
    timeout: Duration,
) -> Result<Queued, ClientError> {
    let (size, sha256) = tickwire_files::spool::sha256_file(path)?;
    let put = FilesMessage::Put(Put {
        request,
        service,
        name,
        size,
        sha256,
        to: to.iter().map(String::as_str).collect(),
    });
    sub.send_files(&encode(&put)?)?;
    let mut file = File::open(path)?;
    let mut sent = 0u64;
    let mut allowed = 0u64;
    let mut go = false;
    let mut buf = vec![0u8; DATA_BYTES];
    let mut deadline = Instant::now() + timeout;
    loop {
        // Send what the window allows, then wait for the node.
        while go && sent < size && sent < allowed {
            let n = (size - sent).min(DATA_BYTES as u64).min(allowed - sent) as usize;
            file.read_exact(&mut buf[..n]).map_err(|e| {
                ClientError::Io(std::io::Error::new(
                    e.kind(),
                    format!("{} changed while it was sent: {e}", path.display()),
                ))
            })?;
            let data = FilesMessage::PutData {
                request,
                offset: sent,
                data: &buf[..n],
            };
            sub.send_files(&encode(&data)?)?;
            sent += n as u64;
        }
        let Some(body) = next_files(sub, deadline)? else {
            return Err(ClientError::Timeout(format!(
                "waiting for the node to take {} ({sent} of {size} bytes sent)",
                path.display()
            )));
        };
        let Ok(FilesMessage::PutAnswer(a)) = FilesMessage::decode(&body) else {
            continue;
        };
        if a.request != request && a.request != 0 {
            continue;
        }
        deadline = Instant::now() + timeout;
        match a.state {
            PutState::Go | PutState::Progress => {
                go = true;
                allowed = allowed.max(a.received + a.window);
            }
            PutState::Queued => {
                return Ok(Queued {
                    transfer: a.transfer,
                    size,
                    sha256,
                })
            }
            PutState::Refused => {
                let reason = if a.reason.contains("do not match the SHA-256") {
                    format!(
                        "{}: {} (did the file change while it was sent?)",
                        path.display(),
                        a.reason
                    )
                } else {
                    a.reason.to_string()
                };
                return Err(ClientError::Refused(reason));
            }
            PutState::Unknown(c) => {
                return Err(ClientError::Protocol(format!(
                    "unknown upload state {c} from the node"
                )));
            }
        }
    }
}

/// What the node has queued, sent and delivered: one entry per file and site.
pub fn status(
    sub: &mut Subscriber,
    request: u32,
    timeout: Duration,
) -> Result<Vec<FileStatus>, ClientError> {
    sub.send_files(&encode(&FilesMessage::Query { request })?)?;
    let mut out = Vec::new();
    let mut deadline = Instant::now() + timeout;
    loop {
        let Some(body) = next_files(sub, deadline)? else {
            return Err(ClientError::Timeout(
                "waiting for the node's files report".into(),
            ));
        };
        let Ok(FilesMessage::Report {
            request: r,
            last,
            entries,
        }) = FilesMessage::decode(&body)
        else {
            continue;
        };
        if r != request {
            continue;
        }
        deadline = Instant::now() + timeout;
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
