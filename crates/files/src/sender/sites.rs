//! What the sites say: which are present, and where each stands with a transfer; a
//! transfer every target site has is finished, and a site still asking about one that
//! ended is told again.

use super::{
    Delivery, Outgoing, Sender, SenderEvent, SiteRecord, Urgent, FILL_LOOKS, MAX_SITES_PER_TRANSFER,
};
use crate::wire::{SiteState, Status};
use std::time::{Duration, Instant};

/// Most sites whose presence a sender remembers (the longest silent goes first).
const MAX_KNOWN_SITES: usize = 4096;
/// A site's questions about an ended transfer are answered at most this often.
const RETELL_EVERY: Duration = Duration::from_secs(1);

impl Sender {
    /// A receiving site says it takes `service`.
    pub fn handle_present(&mut self, site: &str, service: &str, now: Instant) {
        self.heard(service, site, now);
    }

    fn heard(&mut self, service: &str, site: &str, now: Instant) {
        let timeout = self.cfg.site_timeout;
        if let Some(at) = self.sites.get_mut(service).and_then(|m| m.get_mut(site)) {
            if now.saturating_duration_since(*at) >= timeout {
                // Back after an absence: what waits for it is looked at now.
                self.next_scan = now;
            }
            *at = now;
            return;
        }
        // A site first heard: the transfers that wait for it start now, not at the
        // next scan.
        self.next_scan = now;
        if self.known_sites >= MAX_KNOWN_SITES {
            let oldest = self
                .sites
                .iter()
                .flat_map(|(svc, m)| m.iter().map(move |(site, at)| (*at, svc, site)))
                .min()
                .map(|(_, svc, site)| (svc.clone(), site.clone()));
            if let Some((svc, site)) = oldest {
                let m = self.sites.get_mut(&svc).expect("found");
                m.remove(&site);
                if m.is_empty() {
                    self.sites.remove(&svc);
                }
                self.known_sites -= 1;
            }
        }
        self.sites
            .entry(service.to_owned())
            .or_default()
            .insert(site.to_owned(), now);
        self.known_sites += 1;
    }

    pub(super) fn present(&self, service: &str, site: &str, now: Instant) -> bool {
        self.sites
            .get(service)
            .and_then(|m| m.get(site))
            .is_some_and(|at| now.saturating_duration_since(*at) < self.cfg.site_timeout)
    }

    /// A site's status for one of our transfers.
    pub fn handle_status(&mut self, s: &Status, now: Instant) {
        self.stats.statuses += 1;
        let Some(t) = self.transfers.get(&s.transfer) else {
            if !self.retell_ended(s, now) {
                self.stats.ignored_statuses += 1;
            }
            return;
        };
        // No site can have a file whose upload is still coming in (its last chunk
        // waits for the whole upload): such a `done` is not believed.
        let uploading = !t.whole;
        if !t.m.is_for(s.site) || (uploading && s.state == SiteState::Done) {
            self.stats.ignored_statuses += 1;
            return;
        }
        let service = t.m.service.clone();
        self.heard(&service, s.site, now);
        let t = self.transfers.get_mut(&s.transfer).expect("checked");
        if !t.sites.contains_key(s.site) {
            if t.sites.len() >= MAX_SITES_PER_TRANSFER {
                self.stats.ignored_statuses += 1;
                return;
            }
            t.sites.insert(
                s.site.to_owned(),
                SiteRecord {
                    state: Delivery::Queued,
                    have: 0,
                    reason: String::new(),
                    since: now,
                    target: false,
                },
            );
        }
        // A site's reason is shown to operators: kept printable.
        let failed_reason = crate::name::printable(s.reason);
        let (state, reason) = match s.state {
            SiteState::Receiving => {
                for r in &s.missing {
                    // Only chunks already sent: the first pass brings the rest.
                    t.repairs.insert_range(r.start..r.end.min(t.first_pass));
                }
                if !t.active && t.repairs.held() > 0 && !t.repair_queued {
                    t.repair_queued = true;
                    self.parked_repairs.push_back(s.transfer);
                }
                (Delivery::Sending, "")
            }
            SiteState::Done => (Delivery::Done, ""),
            SiteState::Failed => (Delivery::Failed, &*failed_reason),
            SiteState::Unknown(_) => return,
        };
        let rec = t.sites.get_mut(s.site).expect("inserted above");
        if rec.target && (s.have > rec.have || rec.state != state) {
            t.last_progress = now;
        }
        rec.have = s.have;
        if rec.state != state || rec.reason != reason {
            rec.state = state;
            rec.reason = reason.to_owned();
            rec.since = now;
            self.events.push_back(SenderEvent::Site {
                transfer: s.transfer,
                site: s.site.to_owned(),
                state,
                reason: reason.to_owned(),
            });
        }
        if state == Delivery::Done && self.finish_if_delivered(s.transfer) {
            // Its place in the window goes to the next file now, not at the next scan
            // (which looks further down a long queue than this does).
            self.fill_window(now, FILL_LOOKS);
        }
    }

    /// Removes the transfer if every site it is for has it; whether it did.
    pub(super) fn finish_if_delivered(&mut self, transfer: u64) -> bool {
        let Some(t) = self.transfers.get(&transfer) else {
            return false;
        };
        if t.unresolved
            || !t
                .sites
                .values()
                .filter(|r| r.target)
                .all(|r| r.state == Delivery::Done)
        {
            return false;
        }
        self.remove(
            transfer,
            "the transfer is over: every site named has the file",
        );
        self.events.push_back(SenderEvent::Finished {
            transfer,
            delivered: true,
        });
        true
    }

    /// The service of a transfer, live or ended lately (a site's status about it is
    /// taken in that service).
    pub fn service_of(&self, transfer: u64) -> Option<&str> {
        match self.transfers.get(&transfer) {
            Some(t) => Some(&t.m.service),
            None => self.ended.get(&transfer).map(|e| e.service.as_str()),
        }
    }

    /// A site still receiving a transfer that ended: told again to drop it (at most
    /// once per [`RETELL_EVERY`]).
    fn retell_ended(&mut self, s: &Status, now: Instant) -> bool {
        let Some(e) = self.ended.get_mut(&s.transfer) else {
            return false;
        };
        let due = match e.told_at {
            Some(at) => now.saturating_duration_since(at) >= RETELL_EVERY,
            None => true,
        };
        if s.state == SiteState::Receiving && due {
            e.told_at = Some(now);
            self.urgent
                .push_back(Urgent::Cancel(s.transfer, e.reason.clone()));
        }
        true
    }

    /// Whether the transfer has a present target site that still needs it.
    pub(super) fn needy(&self, t: &Outgoing, now: Instant) -> bool {
        !t.unresolved
            && t.sites.iter().any(|(site, r)| {
                r.target
                    && matches!(r.state, Delivery::Queued | Delivery::Sending)
                    && self.present(&t.m.service, site, now)
            })
    }
}
