//! A node's files after a restart: the record from the audit log, the spool's queue, and
//! a receiver's transfers resumed.

use super::{
    Hub, Record, RestartCancel, SiteLine, RESTART_CANCEL_FOR, RESTART_CANCEL_TIMES, UNFINISHED,
};
use crate::audit::PastFile;
use crate::manifest::Manifest;
use crate::sender::Delivery;
use crate::spool::{PendingCancel, Spooled};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl Hub {
    /// The files whose story was over before this run (from the audit log, oldest
    /// first), put back in the record so that `files status` still lists them. Call
    /// before [`Hub::restore`]: a transfer the spool still holds replaces its past.
    pub fn restore_history(&mut self, past: Vec<PastFile>) {
        for file in past {
            let transfer = file.manifest.transfer;
            let sites = file
                .sites
                .into_iter()
                .map(|s| {
                    (
                        s.site,
                        SiteLine {
                            state: s.state,
                            since_ms: s.since_ms,
                            reason: s.reason,
                        },
                    )
                })
                .collect();
            self.put_record(file.manifest, sites, true);
            self.finished_order.push_back(transfer);
        }
        self.forget_beyond_keep();
    }

    /// Puts a file's record in, after every record there (reports list them in this
    /// order), in place of any of its transfer, which leaves the finished ones' order.
    pub(super) fn put_record(
        &mut self,
        manifest: Manifest,
        sites: BTreeMap<String, SiteLine>,
        finished: bool,
    ) {
        self.record_seq += 1;
        let transfer = manifest.transfer;
        let rec = Record {
            seq: self.record_seq,
            manifest,
            sites,
            finished,
        };
        if self.records.insert(transfer, rec).is_some() {
            self.finished_order.retain(|t| *t != transfer);
        }
    }

    /// Drops the oldest finished files from the record past `keep_records` (the audit
    /// log has them all).
    pub(super) fn forget_beyond_keep(&mut self) {
        while self.finished_order.len() > self.cfg.keep_records {
            if let Some(old) = self.finished_order.pop_front() {
                self.records.remove(&old);
            }
        }
    }

    /// The sender's queue, from the spool a previous run left: every transfer put back
    /// with what its sites had said.
    pub fn restore(&mut self, now: Instant) -> std::io::Result<usize> {
        let wall = self.wall_ms(now);
        let Some((sender, spool)) = self.sender.as_mut() else {
            return Ok(0);
        };
        let queued = spool.load()?;
        let n = queued.len();
        for Spooled {
            manifest: m,
            sites,
            replaced_at,
        } in queued
        {
            let left = Duration::from_millis(m.expires_ms.saturating_sub(wall));
            // Since when a site stands where it does: as the spool has it, unchanged by
            // the restart; a target that has said nothing yet, since the file was
            // queued (its expiry less `expire_after`); else (a site being sent to,
            // queued again; a line of an earlier version) since now.
            let queued_ms = m
                .expires_ms
                .saturating_sub(self.cfg.expire_after.as_millis() as u64)
                .min(wall);
            let since = |site: &str, state: Delivery| match sites.iter().find(|s| s.site == site) {
                Some(s) if s.state == state => s.since_ms.unwrap_or(wall),
                None if state == Delivery::Queued => queued_ms,
                _ => wall,
            };
            let line = |site: &str, state: Delivery, reason: &str| {
                let since_ms = since(site, state);
                let reason = reason.to_owned();
                (
                    site.to_owned(),
                    SiteLine {
                        state,
                        since_ms,
                        reason,
                    },
                )
            };
            self.record_seq += 1;
            let rec = Record {
                seq: self.record_seq,
                manifest: m.clone(),
                sites: sites
                    .iter()
                    .map(|s| line(&s.site, s.state, &s.reason))
                    .collect(),
                finished: false,
            };
            let transfer = m.transfer;
            if self.records.insert(transfer, rec).is_some() {
                self.finished_order.retain(|t| *t != transfer);
            }
            let said = sites
                .iter()
                .map(|s| (s.site.clone(), s.state, s.reason.clone()));
            sender.restore(m, said, now + left, now);
            if let Some((by, sites)) = replaced_at {
                sender.restore_replaced_at(transfer, by, &sites);
            }
            // As the sender has it now: its target sites that have said nothing yet
            // too (queued), and a site that was being sent to queued again.
            if let (Some((_, restored)), Some(rec)) =
                (sender.transfer(transfer), self.records.get_mut(&transfer))
            {
                rec.sites = restored
                    .iter()
                    .map(|(site, r)| line(site, r.state, &r.reason))
                    .collect();
            }
        }
        // Uploads the last run began and never finished: their bytes are gone, and
        // the sites are told to drop what they got; the spool keeps what is left to
        // tell, so a run stopped within that time leaves it to the next one (`fresh`:
        // not in the spool yet).
        let mut cancels: Vec<(PendingCancel, bool)> =
            spool.cancels().into_iter().map(|c| (c, false)).collect();
        for m in spool.take_unfinished() {
            self.record_seq += 1;
            let rec = Record {
                seq: self.record_seq,
                manifest: m.clone(),
                sites: Default::default(),
                finished: false,
            };
            if self.records.insert(m.transfer, rec).is_some() {
                self.finished_order.retain(|t| *t != m.transfer);
            }
            let transfer = m.transfer;
            let cancel = PendingCancel {
                transfer,
                service: m.service.clone(),
                until_ms: wall + RESTART_CANCEL_FOR.as_millis() as u64,
                told: Vec::new(),
            };
            cancels.push((cancel, true));
            // The record says why it failed at its sites.
            sender.restore(m, [], now, now);
            sender.withdraw(transfer, UNFINISHED);
        }
        for (c, fresh) in cancels {
            let service = self.cfg.services.iter().position(|s| *s == c.service);
            let Some(service) = service.filter(|_| c.until_ms > wall) else {
                let _ = spool.cancel_over(c.transfer);
                continue;
            };
            if fresh {
                // Best effort: one the log cannot take is told by this run only.
                let _ = spool.keep_cancel(&c);
            }
            let told = c.told.into_iter();
            self.restart_cancels.push(RestartCancel {
                transfer: c.transfer,
                service,
                until: now + Duration::from_millis(c.until_ms - wall),
                until_ms: c.until_ms,
                told: told.map(|site| (site, RESTART_CANCEL_TIMES)).collect(),
            });
        }
        Ok(n)
    }

    /// Uploads an earlier run began and never finished, whose sites are still to be
    /// told to drop what they got ([`Hub::restore`] found them).
    pub fn interrupted_uploads(&self) -> usize {
        self.restart_cancels.len()
    }

    /// Partial files a previous run of the receiver left, reopened; and the transfers
    /// it finished (from the audit log), answered "done" when offered again.
    pub fn resume_receiver(
        &mut self,
        done: impl IntoIterator<Item = u64>,
        now: Instant,
    ) -> std::io::Result<usize> {
        let Some((rx, inbox)) = self.receiver.as_mut() else {
            return Ok(0);
        };
        rx.remember_done(done);
        let partials = inbox.partial_manifests()?;
        let n = partials.len();
        for m in partials {
            rx.resume(m, now, inbox);
        }
        Ok(n)
    }
}
