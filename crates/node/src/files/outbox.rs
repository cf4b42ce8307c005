//! A watched outbox (`[files] outbox`): files that stood still are hashed on a thread
//! of their own and queued.

use log::{error, info, warn};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use tickwire_files::Hub;

/// A watched outbox: what appeared, and whether it stood still since the last look.
/// The files it takes are hashed on a thread of its own ([`OutboxHasher`]): a large
/// one would hold the files thread, and every transfer with it, for seconds.
pub(super) struct Outbox {
    dir: PathBuf,
    /// name -> (size, modified) at the last look.
    seen: std::collections::HashMap<String, (u64, Option<SystemTime>)>,
    /// Files refused already (said once each).
    told: std::collections::HashSet<String>,
    /// Files given to the hasher and not back yet.
    hashing: std::collections::HashSet<String>,
    hasher: Option<OutboxHasher>,
    next: Instant,
}

/// The outbox's hashing thread: a file's name and path in, its size and SHA-256 out.
/// It ends when the [`Outbox`] is dropped (its job sender with it).
struct OutboxHasher {
    jobs: mpsc::Sender<(String, PathBuf, bool)>,
    done: mpsc::Receiver<Hashed>,
}

/// A file the outbox's hasher read through.
struct Hashed {
    name: String,
    path: PathBuf,
    hash: std::io::Result<(u64, [u8; 32])>,
}

impl OutboxHasher {
    fn start() -> std::io::Result<OutboxHasher> {
        let (jobs, job_rx) = mpsc::channel::<(String, PathBuf, bool)>();
        let (done_tx, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("tickwire-outbox-hash".into())
            .spawn(move || {
                crate::background::yield_to_market_data("outbox hashing thread");
                for (name, path, sync) in job_rx {
                    let hash = tickwire_files::spool::hash_outbox_file(&path, sync);
                    if done_tx.send(Hashed { name, path, hash }).is_err() {
                        return;
                    }
                }
            })?;
        Ok(OutboxHasher { jobs, done })
    }
}

/// Files of the outbox being hashed at most (the rest at a later look).
const OUTBOX_BATCH: usize = 1000;

impl Outbox {
    pub(super) fn new(dir: PathBuf) -> Self {
        let hasher = OutboxHasher::start()
            .map_err(|e| error!("files: cannot start the outbox's hashing thread: {e}"))
            .ok();
        Outbox {
            dir,
            seen: Default::default(),
            told: Default::default(),
            hashing: Default::default(),
            hasher,
            next: Instant::now(),
        }
    }

    /// Whether files are being hashed: the files thread looks again soon, rather than
    /// at its next input or second.
    pub(super) fn busy(&self) -> bool {
        !self.hashing.is_empty()
    }

    /// Queues the files hashed since the last call; once a second, files that did not
    /// change since the last look go to be hashed.
    pub(super) fn look(&mut self, hub: &mut Hub, now: Instant) {
        let Some(hasher) = &self.hasher else { return };
        while let Ok(done) = hasher.done.try_recv() {
            self.hashing.remove(&done.name);
            let queued = done
                .hash
                .map_err(|e| e.to_string())
                .and_then(|h| hub.enqueue_hashed(&done.path, &done.name, h, now));
            said(&mut self.told, &done.name, queued);
        }
        if now < self.next {
            return;
        }
        self.next = now + Duration::from_secs(1);
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let sync = hub.outbox_syncs();
        let mut now_seen = std::collections::HashMap::new();
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if name.starts_with('.') || !meta.is_file() {
                continue;
            }
            let state = (meta.len(), meta.modified().ok());
            let stood_still = self.seen.get(&name) == Some(&state);
            // Remembered until it leaves: tried again when hashing or queuing failed.
            now_seen.insert(name.clone(), state);
            if !stood_still || self.hashing.contains(&name) || self.hashing.len() >= OUTBOX_BATCH {
                continue;
            }
            // Refused before it is read through, if it would be refused after.
            if let Err(e) = hub.can_enqueue_local(&name, meta.len()) {
                said(&mut self.told, &name, Err(e));
                continue;
            }
            if hasher.jobs.send((name.clone(), entry.path(), sync)).is_ok() {
                self.hashing.insert(name);
            }
        }
        self.seen = now_seen;
    }
}

/// Logs what became of an outbox file: queued, or (once until it is queued, `told`
/// remembering) why not.
fn said(
    told: &mut std::collections::HashSet<String>,
    name: &str,
    queued: Result<tickwire_files::Manifest, String>,
) {
    match queued {
        Ok(m) => {
            told.remove(name);
            info!(
                "files: {name} from the outbox queued as {:016x}",
                m.transfer
            );
        }
        Err(e) => {
            if told.insert(name.to_owned()) {
                warn!("files: {name} in the outbox is not queued yet: {e}");
            }
        }
    }
}
