//! Files queued at this node: the uploads of `tickwire files send` (windowed, hashed,
//! spooled, synced before they are said queued) and the outbox's files.

use super::{Hub, Record, Rights};
use crate::manifest::Manifest;
use crate::name::check_name;
use crate::sender::NewFile;
use crate::sender::{Delivery, Sender};
use crate::spool::Spool;
use crate::spool::SpoolWriter;
use crate::wire::{Put, PutAnswer, PutState, PUT_FIRST_WINDOW};
use std::collections::BTreeMap;
use std::time::Instant;

/// An upload in progress: its transfer is queued already (`Sender::enqueue_arriving`).
pub(super) struct Upload {
    /// Who uploads it: one user's uploads in progress hold at most half the node's.
    pub(super) user: Box<str>,
    pub(super) size: u64,
    pub(super) sha256: [u8; 32],
    pub(super) transfer: u64,
    pub(super) writer: SpoolWriter,
    pub(super) acked: u64,
    pub(super) last_data: Instant,
}

/// An upload whole and checked whose bytes wait for the spool's sync.
pub(super) struct UnsyncedUpload {
    /// The client's connection (none once it is gone: the file is queued all the same).
    pub(super) conn: Option<usize>,
    pub(super) request: u32,
    pub(super) transfer: u64,
    pub(super) size: u64,
}

/// Logs a transfer whose bytes are in the spool as queued, with what its sites said
/// meanwhile (for a restart); the reason if the log cannot take it.
pub(super) fn save_queued(
    tx: &Sender,
    spool: &mut Spool,
    records: &BTreeMap<u64, Record>,
    transfer: u64,
) -> Result<(), String> {
    let Some((m, sites)) = tx.transfer(transfer) else {
        return Err(ENDED_BEFORE_UPLOAD.to_string());
    };
    spool
        .save(m)
        .map_err(|e| format!("the node cannot keep the file's manifest: {e}"))?;
    for (site, r) in sites {
        if r.state != Delivery::Queued {
            let line = records.get(&transfer).and_then(|rec| rec.sites.get(site));
            let since_ms = line.map(|l| l.since_ms);
            let _ = spool.record(transfer, site, r.state, &r.reason, since_ms);
        }
    }
    // Newer files of its name learned of while it was still arriving.
    if let Some((by, sites)) = tx.replaced_at(transfer) {
        let _ = spool.record_replaced_at(transfer, by, sites);
    }
    Ok(())
}

/// Why an upload ends whose transfer the sender gave up first.
pub(super) const ENDED_BEFORE_UPLOAD: &str =
    "the sender gave the file up before its upload ended (tickwire files status says why)";

impl Hub {
    pub(super) fn on_put(
        &mut self,
        conn: usize,
        user: &str,
        rights: Rights,
        p: &Put,
        now: Instant,
    ) {
        let Some(i) = self.service_index(p.service) else {
            let reason = format!(
                "this node has no files service {:?} (its services: {:?})",
                p.service, self.cfg.services
            );
            return self.refuse(conn, p.request, &reason);
        };
        if rights.publish & (1 << i) == 0 {
            let reason = format!("user {user:?} may not publish service {:?}", p.service);
            return self.refuse(conn, p.request, &reason);
        }
        if self.uploads.contains_key(&(conn, p.request)) {
            return self.refuse(
                conn,
                p.request,
                "an upload with this request number is in progress",
            );
        }
        let Some((tx, _)) = self.sender.as_ref() else {
            return self.refuse(
                conn,
                p.request,
                "this node sends no files ([files] spool is not set)",
            );
        };
        if let Err(e) = check_name(p.name) {
            return self.refuse(
                conn,
                p.request,
                &format!("file name {:?} refused: {e}", p.name),
            );
        }
        let cfg = tx.config();
        if tx.queued_files() >= cfg.max_files {
            let reason = format!(
                "the send queue is full: {} files queued, the limit is {}",
                tx.queued_files(),
                cfg.max_files
            );
            return self.refuse(conn, p.request, &reason);
        }
        if tx.queued_bytes().saturating_add(p.size) > cfg.max_bytes {
            let reason = format!(
                "the send queue is full: {} bytes queued and {} more would pass the limit of {}",
                tx.queued_bytes(),
                p.size,
                cfg.max_bytes
            );
            return self.refuse(conn, p.request, &reason);
        }
        if self.uploads.len() >= self.cfg.max_uploads {
            let reason = format!(
                "{} uploads are in progress at this node; try again shortly",
                self.uploads.len()
            );
            return self.refuse(conn, p.request, &reason);
        }
        // One user (however slowly its bytes come) never holds every upload or the
        // whole queue: the others can still send.
        let (mine, my_bytes) = self
            .uploads
            .values()
            .filter(|u| &*u.user == user)
            .fold((0, 0u64), |(n, b), u| (n + 1, b.saturating_add(u.size)));
        if mine >= (self.cfg.max_uploads / 2).max(1) {
            let reason = format!(
                "user {user:?} has {mine} uploads in progress, the most one user may have; try again when one is done"
            );
            return self.refuse(conn, p.request, &reason);
        }
        if my_bytes.saturating_add(p.size) > cfg.max_bytes / 2 {
            let reason = format!(
                "user {user:?}'s uploads in progress would hold {} bytes, more than half the send queue's limit of {} (one user's uploads hold at most half of [files] max_queue_mb)",
                my_bytes.saturating_add(p.size),
                cfg.max_bytes
            );
            return self.refuse(conn, p.request, &reason);
        }
        let transfer = self.next_id();
        let wall = self.wall_ms(now);
        let (tx, spool) = self.sender.as_mut().expect("checked");
        let writer = match spool.begin(transfer, p.size) {
            Ok(w) => w,
            Err(e) => {
                return self.refuse(
                    conn,
                    p.request,
                    &format!("the node cannot spool the file: {e}"),
                )
            }
        };
        // Queued now, its chunks sent as they arrive (the sites check the SHA-256
        // announced; the last chunk waits until the node has checked it too).
        let file = NewFile {
            transfer,
            service: p.service.to_owned(),
            name: p.name.to_owned(),
            size: p.size,
            sha256: p.sha256,
            to: (!p.to.is_empty()).then(|| p.to.iter().map(|s| (*s).to_owned()).collect()),
            expires_ms: wall + self.cfg.expire_after.as_millis() as u64,
        };
        let m = match tx.enqueue_arriving(file, now) {
            Ok(t) => tx.transfer(t).expect("queued").0.clone(),
            Err(e) => {
                spool.remove(transfer);
                return self.refuse(conn, p.request, &e.to_string());
            }
        };
        // Chunks of a file larger than what comes with its Put reach the sites before
        // it is whole here: logged, so that a restart in between cancels it at the
        // sites rather than leaving them its first part until they give it up. Best
        // effort: a spool that cannot log fails the upload at its end anyway.
        if p.size > PUT_FIRST_WINDOW {
            let _ = spool.note_arriving(&m);
        }
        self.record_queued(&m, user.to_owned(), now);
        self.uploads.insert(
            (conn, p.request),
            Upload {
                user: user.into(),
                size: p.size,
                sha256: p.sha256,
                transfer,
                writer,
                acked: 0,
                last_data: now,
            },
        );
        self.stats.uploads += 1;
        let window = self.cfg.upload_window;
        self.answer(
            conn,
            PutAnswer {
                request: p.request,
                state: PutState::Go,
                transfer,
                received: 0,
                window,
                reason: "",
            },
        );
        if p.size == 0 {
            self.finish_upload(conn, p.request, now);
        }
    }

    pub(super) fn drop_upload(&mut self, conn: usize, request: u32, reason: &str) {
        if let Some(u) = self.uploads.remove(&(conn, request)) {
            self.withdraw_upload(u, reason);
        }
        self.refuse(conn, request, reason);
    }

    /// An upload that will not be whole: its bytes go, and its transfer is withdrawn
    /// from the sites that started on it.
    pub(super) fn withdraw_upload(&mut self, u: Upload, reason: &str) {
        drop(u.writer);
        if let Some((tx, spool)) = self.sender.as_mut() {
            spool.remove(u.transfer);
            tx.withdraw(u.transfer, &format!("the upload failed: {reason}"));
        }
    }

    pub(super) fn on_put_data(
        &mut self,
        conn: usize,
        request: u32,
        offset: u64,
        data: &[u8],
        now: Instant,
    ) {
        let Some(u) = self.uploads.get_mut(&(conn, request)) else {
            self.stats.ignored += 1;
            return;
        };
        if offset != u.writer.len() {
            let reason = format!(
                "bytes missing: the node has {} and was sent bytes from {offset} (the node was too busy; send again)",
                u.writer.len()
            );
            return self.drop_upload(conn, request, &reason);
        }
        if u.writer.len() + data.len() as u64 > u.size {
            let reason = format!("more bytes than the {} announced", u.size);
            return self.drop_upload(conn, request, &reason);
        }
        if u.writer.len() + data.len() as u64 > u.acked + self.cfg.upload_window {
            let reason = format!(
                "bytes beyond the window: the node acknowledged {} and allows {} more",
                u.acked, self.cfg.upload_window
            );
            return self.drop_upload(conn, request, &reason);
        }
        if let Err(e) = u.writer.write(data) {
            return self.drop_upload(
                conn,
                request,
                &format!("the node cannot spool the file: {e}"),
            );
        }
        // Bytes, not messages, keep an upload alive: empty ones would hold its place.
        if !data.is_empty() {
            u.last_data = now;
        }
        let received = u.writer.len();
        if received == u.size {
            return self.finish_upload(conn, request, now);
        }
        let transfer = u.transfer;
        if let Some((tx, _)) = self.sender.as_mut() {
            tx.handle_uploaded(transfer, received, false, now);
        }
        let u = self.uploads.get_mut(&(conn, request)).expect("live");
        if received - u.acked >= self.cfg.upload_window / 2 {
            u.acked = received;
            let (transfer, window) = (u.transfer, self.cfg.upload_window);
            self.answer(
                conn,
                PutAnswer {
                    request,
                    state: PutState::Progress,
                    transfer,
                    received,
                    window,
                    reason: "",
                },
            );
        }
    }

    pub(super) fn finish_upload(&mut self, conn: usize, request: u32, now: Instant) {
        let u = self.uploads.remove(&(conn, request)).expect("an upload");
        let transfer = u.transfer;
        let (tx, spool) = self.sender.as_mut().expect("uploads need a sender");
        spool.written(transfer, &u.writer);
        let (size, sha) = u.writer.finish();
        let reason = if sha != u.sha256 {
            "the bytes received do not match the SHA-256 announced".to_string()
        } else if tx.transfer(transfer).is_none() {
            ENDED_BEFORE_UPLOAD.to_string()
        } else {
            let fsync = spool.fsync();
            if fsync != crate::inbox::Fsync::Never {
                // Logged queued once its bytes are on the disk, said queued (and its
                // last chunk sent: no site can finish it before) once the log is
                // (`sync_spool`).
                self.queued_unsynced.push(UnsyncedUpload {
                    conn: Some(conn),
                    request,
                    transfer,
                    size,
                });
                self.spool_sync_due
                    .get_or_insert(now + fsync.commit_delay());
                return;
            }
            tx.handle_uploaded(transfer, size, true, now);
            match save_queued(tx, spool, &self.records, transfer) {
                Ok(()) => return self.answer_queued(conn, request, transfer, size),
                Err(e) => e,
            }
        };
        spool.remove(transfer);
        tx.withdraw(transfer, &format!("the upload failed: {reason}"));
        self.refuse(conn, request, &reason);
    }

    /// Whether a file of this node's outbox named `name`, of `size` bytes, could be
    /// queued now (its name, a files service, a spool, room in the queue): asked
    /// before it is hashed, which takes a while for a large one.
    pub fn can_enqueue_local(&self, name: &str, size: u64) -> Result<(), String> {
        check_name(name).map_err(|e| format!("file name {name:?} refused: {e}"))?;
        if self.cfg.services.is_empty() {
            return Err("no files service".into());
        }
        let Some((tx, _)) = self.sender.as_ref() else {
            return Err("this node sends no files ([files] spool is not set)".into());
        };
        let cfg = tx.config();
        if tx.queued_files() >= cfg.max_files
            || tx.queued_bytes().saturating_add(size) > cfg.max_bytes
        {
            return Err(format!(
                "the send queue is full ({} files, {} bytes queued)",
                tx.queued_files(),
                tx.queued_bytes()
            ));
        }
        Ok(())
    }

    /// Whether an outbox file is synced as it is hashed ([`hash_outbox_file`]'s
    /// `sync`): the spool's fsync policy is not `never`.
    ///
    /// [`hash_outbox_file`]: crate::spool::hash_outbox_file
    pub fn outbox_syncs(&self) -> bool {
        self.sender
            .as_ref()
            .is_some_and(|(_, spool)| spool.fsync() != crate::inbox::Fsync::Never)
    }

    /// Queues a file of this node's outbox for every site of the first service, once
    /// hashed (`hashed`: its size and SHA-256, from [`hash_outbox_file`] with
    /// [`Hub::outbox_syncs`]): queued, then moved into the spool (it leaves the outbox).
    /// An error leaves it where it is (it is tried again at the next look).
    ///
    /// [`hash_outbox_file`]: crate::spool::hash_outbox_file
    pub fn enqueue_hashed(
        &mut self,
        path: &std::path::Path,
        name: &str,
        hashed: (u64, [u8; 32]),
        now: Instant,
    ) -> Result<Manifest, String> {
        let (size, sha256) = hashed;
        self.can_enqueue_local(name, size)?;
        let service = self.cfg.services[0].clone();
        let wall = self.wall_ms(now);
        let transfer = self.next_id();
        let (tx, spool) = self.sender.as_mut().expect("checked");
        spool.hashed_in_place(transfer, size);
        let file = NewFile {
            transfer,
            service,
            name: name.to_owned(),
            size,
            sha256,
            to: None,
            expires_ms: wall + self.cfg.expire_after.as_millis() as u64,
        };
        let m = match tx.enqueue(file, now) {
            Ok(t) => tx.transfer(t).expect("queued").0.clone(),
            Err(e) => {
                spool.remove(transfer);
                return Err(e.to_string());
            }
        };
        // The manifest first, then the file: see `Spool::hash_in_place`. With a policy
        // the manifest is on the disk before the move is.
        let synced = |spool: &mut Spool| match spool.fsync() {
            crate::inbox::Fsync::Never => Ok(()),
            _ => spool.sync_log().map(|_| ()),
        };
        if let Err(e) = spool
            .save(&m)
            .and_then(|()| synced(spool))
            .and_then(|()| spool.move_in(transfer, path, size))
        {
            spool.remove(transfer);
            tx.withdraw(transfer, "it could not be taken into the spool");
            return Err(format!("cannot take it into the spool: {e}"));
        }
        let fsync = spool.fsync();
        if fsync != crate::inbox::Fsync::Never {
            self.spool_sync_due
                .get_or_insert(now + fsync.commit_delay());
        }
        self.record_queued(&m, "outbox".into(), now);
        Ok(m)
    }

    /// Syncs the spool (under its fsync policy): the bytes of the uploads that waited
    /// and the directory, then their manifests into the log, then the log; then tells
    /// their clients that the files are queued. In that order a power loss leaves no
    /// manifest without its bytes and no client told of a file the log lacks. An upload
    /// the spool cannot sync or log is refused (a file the node cannot keep is not one
    /// it may say it has) and withdrawn at the sites.
    pub(super) fn sync_spool(&mut self, now: Instant) {
        self.spool_sync_due = None;
        let Some((tx, spool)) = self.sender.as_mut() else {
            return;
        };
        let waiting = std::mem::take(&mut self.queued_unsynced);
        let mut failed: Vec<(UnsyncedUpload, String)> = Vec::new();
        let mut saved = Vec::new();
        match spool.sync_data() {
            Ok(n) => {
                self.stats.spool_syncs += n as u64;
                for w in waiting {
                    match save_queued(tx, spool, &self.records, w.transfer) {
                        Ok(()) => saved.push(w),
                        Err(e) => failed.push((w, e)),
                    }
                }
                match spool.sync_log() {
                    Ok(n) => self.stats.spool_syncs += n as u64,
                    Err(e) => {
                        self.stats.spool_sync_failures += 1;
                        let why = format!("the node cannot sync its spool: {e}");
                        failed.extend(saved.drain(..).map(|w| (w, why.clone())));
                    }
                }
            }
            Err(e) => {
                self.stats.spool_sync_failures += 1;
                let why = format!("the node cannot sync its spool: {e}");
                failed.extend(waiting.into_iter().map(|w| (w, why.clone())));
            }
        }
        for (w, why) in &failed {
            spool.remove(w.transfer);
            tx.withdraw(w.transfer, &format!("the upload failed: {why}"));
        }
        for w in &saved {
            tx.handle_uploaded(w.transfer, w.size, true, now);
        }
        for (w, why) in failed {
            if let Some(conn) = w.conn {
                self.refuse(conn, w.request, &why);
            }
        }
        for w in saved {
            if let Some(conn) = w.conn {
                self.answer_queued(conn, w.request, w.transfer, w.size);
            }
        }
    }
}
