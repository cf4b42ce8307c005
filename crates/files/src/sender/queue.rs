//! The queue: files checked and queued (whole, or while their bytes arrive), put back
//! after a restart, the older files of a name replaced by a newer one, and transfers
//! failed, taken back or removed once they end.

use super::{
    waiting_for_bytes, Delivery, Ended, NewFile, Outgoing, QueueError, Sender, SenderEvent,
    SiteRecord, Urgent, MAX_SITES_PER_TRANSFER, REMEMBER_ENDED,
};
use crate::chunk_map::ChunkMap;
use crate::manifest::Manifest;
use crate::name::check_name;
use crate::wire::{chunk_count, MAX_CHUNK, MAX_TARGETS};
use std::time::Instant;

impl Sender {
    /// Queues a file; refused at once (never waits) when the queue is full.
    pub fn enqueue(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        let id = self.enqueue_with(file, now)?;
        self.replace_older(id, |_| true);
        Ok(id)
    }

    /// Queues a file whose bytes are still arriving in the sender's [`ChunkSource`](super::ChunkSource)
    /// (checked as [`Sender::enqueue`] checks): nothing of it goes out before
    /// [`Sender::handle_uploaded`] says how much has arrived.
    pub fn enqueue_arriving(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        let id = self.enqueue_with(file, now)?;
        let t = self.transfers.get_mut(&id).expect("just queued");
        t.available = 0;
        t.whole = false;
        Ok(id)
    }

    /// `bytes` of an arriving file are in its source; `whole`: all of it, and its
    /// SHA-256 checked. Until then its last chunk is held back.
    pub fn handle_uploaded(&mut self, transfer: u64, bytes: u64, whole: bool, now: Instant) {
        let Some(t) = self.transfers.get_mut(&transfer) else {
            return;
        };
        if !t.active && waiting_for_bytes(t) {
            // It may take a place in the window now.
            self.next_scan = self.next_scan.min(now);
        }
        if t.whole {
            return;
        }
        if whole {
            // Whole and checked: now it replaces the older files of its name (an upload
            // that fails leaves the older one to its sites), not one queued after it.
            t.available = t.chunks;
            t.whole = true;
            let older = self.queued_before(transfer);
            self.replace_older(transfer, |o| older.contains(&o.m.transfer));
            return;
        }
        let full = bytes / u64::from(t.m.chunk_size.max(1));
        t.available = (full.min(u64::from(t.chunks.saturating_sub(1)))) as u32;
    }

    /// Takes back a queued file (its upload failed): every site that does not have it
    /// fails with `reason`, and the sites are told to drop what they hold.
    pub fn withdraw(&mut self, transfer: u64, reason: &str) {
        if self.transfers.contains_key(&transfer) {
            self.fail_transfer(transfer, reason);
        }
    }

    /// A file whole under a name replaces the older files of that name still on their
    /// way (those `older` says are older) where it goes to every site they still need
    /// to reach: a site that took an older one later (after a full disk, say) would
    /// put its bytes back over the newer. An older file still due at a site the newer
    /// one does not go to is left to go.
    pub(super) fn replace_older(&mut self, newer: u64, older: impl Fn(&Outgoing) -> bool) {
        let Some(t) = self.transfers.get(&newer) else {
            return;
        };
        // A file for every site goes to the sites present when it starts: until it has
        // them it replaces nothing (`resolve_open` comes back), then it covers those.
        if t.unresolved {
            return;
        }
        let key = (t.m.service.clone(), t.m.name.clone());
        let covers = &t.m.targets;
        let replaced: Vec<u64> = self.by_name[&key]
            .iter()
            .filter(|id| **id != newer)
            .filter_map(|id| self.transfers.get(id).map(|o| (*id, o)))
            .filter(|(_, o)| older(o))
            .filter(|(_, o)| {
                !o.unresolved
                    && o.sites
                        .iter()
                        .filter(|(_, r)| r.target && r.state != Delivery::Done)
                        .all(|(site, _)| covers.contains(site))
            })
            .map(|(id, _)| id)
            .collect();
        // An older one with no sites yet cannot be replaced now: it remembers where the
        // newer goes, so that it reaches no site after the newer (`resolve_open`).
        let waiting: Vec<u64> = self.by_name[&key]
            .iter()
            .filter(|id| **id != newer)
            .filter(|id| {
                self.transfers
                    .get(id)
                    .is_some_and(|o| o.unresolved && older(o))
            })
            .copied()
            .collect();
        let covers = covers.clone();
        for id in waiting {
            self.note_replaced_at(id, newer, &covers);
        }
        let reason = format!("replaced by a newer file of the same name (transfer {newer:016x})");
        for id in replaced {
            self.fail_transfer(id, &reason);
        }
    }

    /// An unresolved transfer learns that `newer` went to `covers` (see
    /// [`SenderEvent::ReplacedAt`]).
    fn note_replaced_at(&mut self, id: u64, newer: u64, covers: &[String]) {
        let Some(o) = self.transfers.get_mut(&id).filter(|o| o.unresolved) else {
            return;
        };
        let (by, sites) = o.replaced_at.get_or_insert_with(|| (newer, Vec::new()));
        *by = newer;
        for site in covers {
            if !sites.contains(site) {
                sites.push(site.clone());
            }
        }
        let (by, sites) = (*by, sites.clone());
        self.events.push_back(SenderEvent::ReplacedAt {
            transfer: id,
            by,
            sites,
        });
    }

    /// What an unresolved transfer knows of newer files of its name: the newest, and
    /// the sites they went to ([`SenderEvent::ReplacedAt`]).
    pub fn replaced_at(&self, transfer: u64) -> Option<(u64, &[String])> {
        let t = self.transfers.get(&transfer)?;
        t.replaced_at.as_ref().map(|(by, sites)| (*by, &sites[..]))
    }

    /// Puts back what a restored transfer knew of newer files of its name before the
    /// restart ([`SenderEvent::ReplacedAt`]): they may be over, and not restored.
    pub fn restore_replaced_at(&mut self, transfer: u64, by: u64, sites: &[String]) {
        self.note_replaced_at(transfer, by, sites);
    }

    /// The live transfers of `transfer`'s name queued before it.
    pub(super) fn queued_before(&self, transfer: u64) -> Vec<u64> {
        let Some(t) = self.transfers.get(&transfer) else {
            return Vec::new();
        };
        let key = (t.m.service.clone(), t.m.name.clone());
        self.by_name.get(&key).map_or(Vec::new(), |ids| {
            ids.iter().copied().take_while(|x| *x != transfer).collect()
        })
    }

    /// Fails a transfer at every site that does not have it, cancels it at the sites
    /// and removes it.
    pub(super) fn fail_transfer(&mut self, id: u64, reason: &str) {
        let Some(t) = self.transfers.get(&id) else {
            return;
        };
        for (site, r) in &t.sites {
            if r.target && r.state != Delivery::Done {
                self.events.push_back(SenderEvent::Site {
                    transfer: id,
                    site: site.clone(),
                    state: Delivery::Failed,
                    reason: reason.to_owned(),
                });
            }
        }
        if t.unresolved {
            // A file for every site that ended before it had its sites: its record's
            // one line, "every site" (the empty name), says it failed and why.
            self.events.push_back(SenderEvent::Site {
                transfer: id,
                site: String::new(),
                state: Delivery::Failed,
                reason: reason.to_owned(),
            });
        }
        self.remove(id, reason);
        self.urgent.push_back(Urgent::Cancel(id, reason.into()));
        self.events.push_back(SenderEvent::Finished {
            transfer: id,
            delivered: false,
        });
    }

    fn enqueue_with(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        check_name(&file.name).map_err(|reason| QueueError::BadName {
            name: file.name.clone(),
            reason,
        })?;
        if chunk_count(file.size, self.cfg.chunk_size).is_none() {
            return Err(QueueError::TooLarge {
                size: file.size,
                chunk_size: self.cfg.chunk_size,
            });
        }
        if let Some(to) = &file.to {
            if to.is_empty() {
                return Err(QueueError::NoTargets);
            }
            if to.len() > MAX_TARGETS {
                return Err(QueueError::TooManyTargets(to.len()));
            }
        }
        if self.transfers.len() >= self.cfg.max_files {
            return Err(QueueError::TooManyFiles {
                files: self.transfers.len(),
                max: self.cfg.max_files,
            });
        }
        if self.queued_bytes.saturating_add(file.size) > self.cfg.max_bytes {
            return Err(QueueError::TooManyBytes {
                queued: self.queued_bytes,
                size: file.size,
                max: self.cfg.max_bytes,
            });
        }
        if self.transfers.contains_key(&file.transfer) {
            return Err(QueueError::Duplicate(file.transfer));
        }
        let (open, targets) = match file.to {
            Some(mut to) => {
                to.sort();
                to.dedup();
                (false, to)
            }
            None => (true, Vec::new()),
        };
        let m = Manifest {
            transfer: file.transfer,
            sender: self.cfg.site.clone(),
            service: file.service,
            name: file.name,
            size: file.size,
            chunk_size: self.cfg.chunk_size,
            sha256: file.sha256,
            expires_ms: file.expires_ms,
            open,
            targets,
        };
        let expires_at = now + self.cfg.expire_after;
        self.insert(m, expires_at, now);
        self.next_scan = now;
        Ok(file.transfer)
    }

    /// Puts back a transfer a previous run of the sender had queued (from the
    /// driver's spool), with what its sites had said.
    pub fn restore(
        &mut self,
        m: Manifest,
        sites: impl IntoIterator<Item = (String, Delivery, String)>,
        expires_at: Instant,
        now: Instant,
    ) {
        if self.transfers.contains_key(&m.transfer) || m.chunk_size == 0 || m.chunk_size > MAX_CHUNK
        {
            return;
        }
        let id = m.transfer;
        self.insert(m, expires_at, now);
        let t = self.transfers.get_mut(&id).expect("just inserted");
        for (site, state, reason) in sites {
            let target = t.m.targets.contains(&site);
            if !target && t.sites.len() >= MAX_SITES_PER_TRANSFER {
                continue;
            }
            // A site that said where it stands was offered the file: a failed one
            // may try again when it is offered, parked, as before the restart.
            t.offered |= state != Delivery::Queued;
            // Sending resumes as queued: this run has sent nothing yet.
            let state = if state == Delivery::Sending {
                Delivery::Queued
            } else {
                state
            };
            t.sites.insert(
                site,
                SiteRecord {
                    state,
                    have: 0,
                    reason,
                    since: now,
                    target,
                },
            );
        }
        // Sites that said where they stand may hold parts of it: rather than a first
        // pass from chunk 0, its offers say every chunk went once, and each site
        // answers with what it misses, which alone is sent again (as repairs).
        if let Some(t) = self.transfers.get_mut(&id).filter(|t| t.offered) {
            t.first_pass = t.chunks;
        }
        // Every target had it (the log lost the line saying it was over, a full disk
        // say): over now, delivered, rather than kept until it expires undelivered.
        self.finish_if_delivered(id);
        // Files of one name put back in any order: the later queued (the later expiry)
        // replaces the earlier, as when they were queued.
        if let Some(t) = self.transfers.get(&id) {
            let (expires, key) = (t.m.expires_ms, (t.m.service.clone(), t.m.name.clone()));
            self.replace_older(id, |o| o.m.expires_ms < expires);
            let newer: Vec<u64> = self.by_name.get(&key).map_or(Vec::new(), |ids| {
                ids.iter()
                    .filter(|n| self.transfers[n].m.expires_ms > expires)
                    .copied()
                    .collect()
            });
            for n in newer {
                self.replace_older(n, |o| o.m.transfer == id);
            }
        }
        self.next_scan = now;
    }

    fn insert(&mut self, m: Manifest, expires_at: Instant, now: Instant) {
        let chunks = m.chunks();
        let unresolved = m.open && m.targets.is_empty();
        let sites = m
            .targets
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    SiteRecord {
                        state: Delivery::Queued,
                        have: 0,
                        reason: String::new(),
                        since: now,
                        target: true,
                    },
                )
            })
            .collect();
        self.queued_bytes += m.size;
        self.order.push_back(m.transfer);
        self.by_name
            .entry((m.service.clone(), m.name.clone()))
            .or_default()
            .push(m.transfer);
        self.transfers.insert(
            m.transfer,
            Outgoing {
                chunks,
                available: chunks,
                whole: true,
                unresolved,
                replaced_at: None,
                sites,
                first_pass: 0,
                offered: false,
                repairs: ChunkMap::new(chunks),
                repair_cursor: 0,
                offer_at: now,
                repair_queued: false,
                last_progress: now,
                idle_until: now,
                expires_at,
                active: false,
                m,
            },
        );
    }

    /// Removes a transfer that ended (`why`, told to any site that asks about it later).
    pub(super) fn remove(&mut self, transfer: u64, why: &str) {
        if let Some(t) = self.transfers.remove(&transfer) {
            self.queued_bytes -= t.m.size;
            let key = (t.m.service, t.m.name);
            if let Some(ids) = self.by_name.get_mut(&key) {
                ids.retain(|id| *id != transfer);
                if ids.is_empty() {
                    self.by_name.remove(&key);
                }
            }
            if self.ended_order.len() >= REMEMBER_ENDED {
                if let Some(old) = self.ended_order.pop_front() {
                    self.ended.remove(&old);
                }
            }
            let ended = Ended {
                service: key.0,
                reason: why.into(),
                told_at: None,
            };
            if self.ended.insert(transfer, ended).is_none() {
                self.ended_order.push_back(transfer);
            }
        }
        self.active.retain(|id| *id != transfer);
    }
}
