//! The window: the transfers sent at once, taken oldest first while a present site needs
//! them, parked when none does or they make no progress, and expired; the periodic scan
//! of the queue that does it.

use super::{waiting_for_bytes, Delivery, Sender, SenderEvent, SiteRecord, Urgent};
use crate::wire::MAX_TARGETS;
use std::time::{Duration, Instant};

/// How often the queue is scanned (expiry, window, parked offers).
const SCAN_INTERVAL: Duration = Duration::from_millis(100);
/// Parked transfers offered per scan at most (640 a second).
const PARKED_OFFERS_PER_SCAN: usize = 64;

impl Sender {
    /// Activates the oldest transfers a present site needs while the window has room,
    /// looking at the first `looks` of the queue.
    pub(super) fn fill_window(&mut self, now: Instant, looks: usize) {
        for i in 0..self.order.len().min(looks) {
            if self.active.len() >= self.cfg.window {
                break;
            }
            let id = self.order[i];
            // `order` keeps finished transfers until the next scan: skipped.
            let waiting = self.transfers.get(&id).is_some_and(|t| {
                !t.active && !waiting_for_bytes(t) && t.idle_until <= now && self.needy(t, now)
            });
            if waiting {
                self.activate(id, now);
            }
        }
    }

    /// Its deadlines passed by `now` (pacing, repairs, expiry).
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_scan {
            return;
        }
        self.next_scan = now + SCAN_INTERVAL;
        self.expire(now);
        self.resolve_open(now);
        // Park what no present site needs, what waits for its bytes, and what gets no
        // site further once its first pass is sent (a site whose partial files are all
        // taken ignores new offers until one is done; one whose chunks never arrive
        // asks for the same repairs again and again: waiting for either must not hold
        // the window; their repairs still go, outside it); fill the window, oldest
        // first.
        let quiet = self.cfg.offer_interval * 4;
        let active = std::mem::take(&mut self.active);
        for id in active {
            let Some(t) = self.transfers.get(&id) else {
                continue;
            };
            let stalled =
                t.first_pass >= t.chunks && now.saturating_duration_since(t.last_progress) >= quiet;
            if self.needy(t, now) && !waiting_for_bytes(t) && !stalled {
                self.active.push(id);
            } else if let Some(t) = self.transfers.get_mut(&id) {
                t.active = false;
                t.offer_at = now + self.cfg.park_offer_interval;
                if stalled {
                    t.idle_until = t.offer_at;
                }
                // The repairs its sites asked for still go, outside the window.
                if stalled && t.repairs.held() > 0 && !t.repair_queued {
                    t.repair_queued = true;
                    self.parked_repairs.push_back(id);
                }
            }
        }
        self.order.retain(|id| self.transfers.contains_key(id));
        let mut parked_offers = 0;
        let len = self.order.len();
        self.fill_window(now, len);
        // Offer a few parked transfers that were offered before (by this run or the
        // one before a restart), in turn, so failed and busy sites may ask again. One
        // never offered waits for the window: a site that
        // opened a partial file for it would hold a place the window's transfers need.
        for _ in 0..len {
            if parked_offers >= PARKED_OFFERS_PER_SCAN {
                break;
            }
            self.park_cursor = (self.park_cursor + 1) % len;
            let id = self.order[self.park_cursor];
            let t = self
                .transfers
                .get_mut(&id)
                .expect("order holds live transfers");
            if !t.active && !t.unresolved && t.offered && t.offer_at <= now {
                t.offer_at = now + self.cfg.park_offer_interval;
                self.urgent.push_back(Urgent::Offer(id));
                parked_offers += 1;
            }
        }
    }

    fn activate(&mut self, id: u64, now: Instant) {
        let present: Vec<String> = {
            let t = &self.transfers[&id];
            t.sites
                .iter()
                .filter(|(site, r)| {
                    r.target && r.state == Delivery::Queued && self.present(&t.m.service, site, now)
                })
                .map(|(site, _)| site.clone())
                .collect()
        };
        let t = self.transfers.get_mut(&id).expect("live");
        t.active = true;
        t.offered = true;
        t.last_progress = now;
        t.offer_at = now;
        for site in present {
            let rec = t.sites.get_mut(&site).expect("listed");
            rec.state = Delivery::Sending;
            rec.since = now;
            self.events.push_back(SenderEvent::Site {
                transfer: id,
                site,
                state: Delivery::Sending,
                reason: String::new(),
            });
        }
        self.active.push(id);
    }

    fn expire(&mut self, now: Instant) {
        let expired: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.fail_transfer(id, "expired");
        }
    }

    fn resolve_open(&mut self, now: Instant) {
        if now.saturating_duration_since(self.started) < self.cfg.listen_first {
            return;
        }
        // Oldest first: each, resolved, replaces the older ones of its name.
        let unresolved: Vec<u64> = self
            .order
            .iter()
            .filter(|id| self.transfers.get(id).is_some_and(|t| t.unresolved))
            .copied()
            .collect();
        for id in unresolved {
            let service = self.transfers[&id].m.service.clone();
            let mut targets: Vec<String> = self
                .sites
                .get(&service)
                .into_iter()
                .flatten()
                .filter(|(_, at)| now.saturating_duration_since(**at) < self.cfg.site_timeout)
                .map(|(site, _)| site.clone())
                .collect();
            if targets.is_empty() {
                continue; // waits for a site
            }
            targets.sort();
            targets.truncate(MAX_TARGETS);
            let t = self.transfers.get_mut(&id).expect("live");
            for site in &targets {
                let rec = t.sites.entry(site.clone()).or_insert_with(|| SiteRecord {
                    state: Delivery::Queued,
                    have: 0,
                    reason: String::new(),
                    since: now,
                    target: true,
                });
                rec.target = true;
            }
            t.m.targets = targets.clone();
            t.unresolved = false;
            let replaced = t
                .replaced_at
                .take()
                .filter(|(_, at)| targets.iter().all(|s| at.contains(s)));
            self.events.push_back(SenderEvent::Targets {
                transfer: id,
                targets,
            });
            if let Some((newer, _)) = replaced {
                let reason =
                    format!("replaced by a newer file of the same name (transfer {newer:016x})");
                self.fail_transfer(id, &reason);
                continue;
            }
            // Sites that answered before it was resolved may be done already.
            self.finish_if_delivered(id);
            // Whole, it now replaces the older files of its name where it goes.
            if self.transfers.get(&id).is_some_and(|t| t.whole) {
                let older = self.queued_before(id);
                self.replace_older(id, |o| older.contains(&o.m.transfer));
            }
        }
    }
}
