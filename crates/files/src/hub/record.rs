//! The record `tickwire files status` reads (and the audit log's events): each file and
//! site, queued, sending, done or failed, and since when.

use super::{Hub, Output, Peer, Record, Rights, SiteLine, REPORT_BYTES};
use crate::audit::HubEvent;
use crate::manifest::Manifest;
use crate::sender::{Delivery, SenderEvent};
use crate::spool::Spool;
use crate::wire::{FilesMessage, ReportEntry};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

impl Hub {
    /// A queued file into the record (and the audit log): its target sites queued.
    pub(super) fn record_queued(&mut self, m: &Manifest, user: String, now: Instant) {
        let wall = self.wall_ms(now);
        let sites = m
            .targets
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    SiteLine {
                        state: Delivery::Queued,
                        since_ms: wall,
                        reason: String::new(),
                    },
                )
            })
            .collect();
        self.put_record(m.clone(), sites, false);
        self.events.push_back(HubEvent::Queued {
            manifest: m.clone(),
            user,
        });
    }

    /// Answers `requests` of `conn` (one walk of the record, a report for each).
    pub(super) fn on_query(&mut self, conn: usize, rights: Rights, requests: &[u32]) {
        let visible = rights.publish | rights.subscribe;
        let mut entries: Vec<ReportEntry> = Vec::new();
        let mut parts = Vec::new();
        let mut size = 0;
        // A file for every site, before it starts, has no site yet.
        let queued = SiteLine {
            state: Delivery::Queued,
            since_ms: 0,
            reason: String::new(),
        };
        let mut in_order: Vec<&Record> = self.records.values().collect();
        in_order.sort_by_key(|r| r.seq);
        for rec in in_order {
            let m = &rec.manifest;
            let Some(i) = self.cfg.services.iter().position(|s| *s == m.service) else {
                continue;
            };
            if visible & (1 << i) == 0 {
                continue;
            }
            let lines: Vec<(&str, &SiteLine)> = if rec.sites.is_empty() {
                vec![]
            } else {
                rec.sites.iter().map(|(s, l)| (s.as_str(), l)).collect()
            };
            let lines = if lines.is_empty() {
                vec![("", &queued)]
            } else {
                lines
            };
            for (site, line) in lines {
                let e = ReportEntry {
                    transfer: m.transfer,
                    service: &m.service,
                    name: &m.name,
                    size: m.size,
                    sha256: m.sha256,
                    site,
                    state: line.state.as_str(),
                    since_ms: line.since_ms,
                    reason: &line.reason,
                };
                let len = 80 + m.service.len() + m.name.len() + site.len() + line.reason.len();
                if size + len > REPORT_BYTES && !entries.is_empty() {
                    parts.push(std::mem::take(&mut entries));
                    size = 0;
                }
                size += len;
                entries.push(e);
            }
        }
        parts.push(entries);
        let mut bodies = Vec::new();
        for &request in requests {
            for (i, part) in parts.iter().enumerate() {
                let mut body = Vec::new();
                let report = FilesMessage::Report {
                    request,
                    last: i + 1 == parts.len(),
                    entries: part.clone(),
                };
                if report.encode(&mut body).is_ok() {
                    bodies.push(body);
                }
            }
        }
        for body in bodies {
            self.out.push_back(Output {
                to: Peer::Conn(conn),
                body,
                droppable: false,
            });
        }
    }

    /// A file this site received, or could not take (as the audit log's history has
    /// it after a restart): its line in the record. A file this node both sent and
    /// received keeps its sender's record.
    pub(super) fn record_received(
        &mut self,
        m: &Manifest,
        state: Delivery,
        reason: String,
        wall: u64,
    ) {
        let line = SiteLine {
            state,
            since_ms: wall,
            reason,
        };
        match self.records.get_mut(&m.transfer) {
            Some(rec) if rec.manifest.sender == self.cfg.site => {}
            // Failed before, taken now (or failed again).
            Some(rec) => {
                rec.sites = BTreeMap::from([(self.cfg.site.clone(), line)]);
            }
            None => {
                let sites = BTreeMap::from([(self.cfg.site.clone(), line)]);
                self.put_record(m.clone(), sites, true);
                self.finished_order.push_back(m.transfer);
            }
        }
    }

    /// One of the sender's events: into the spool, the records and the audit events.
    pub(super) fn sender_event(
        spool: &mut Spool,
        records: &mut BTreeMap<u64, Record>,
        finished_order: &mut VecDeque<u64>,
        events: &mut VecDeque<HubEvent>,
        e: SenderEvent,
        wall: u64,
    ) {
        // The spool keeps what a restart needs: each site's state, and the bytes until
        // the transfer is over.
        match e {
            SenderEvent::Site {
                transfer,
                site,
                state,
                reason,
            } => {
                if let Err(err) = spool.record(transfer, &site, state, &reason, Some(wall)) {
                    events.push_back(HubEvent::SpoolError {
                        reason: format!("cannot record a site's state in the spool: {err}"),
                    });
                }
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.sites.insert(
                        site.clone(),
                        SiteLine {
                            state,
                            since_ms: wall,
                            reason: reason.clone(),
                        },
                    );
                    events.push_back(HubEvent::Site {
                        manifest: rec.manifest.clone(),
                        site,
                        state,
                        reason,
                    });
                }
            }
            SenderEvent::ReplacedAt {
                transfer,
                by,
                sites,
            } => {
                if let Err(err) = spool.record_replaced_at(transfer, by, &sites) {
                    events.push_back(HubEvent::SpoolError {
                        reason: format!("cannot keep a file's newer files in the spool: {err}"),
                    });
                }
            }
            SenderEvent::Targets { transfer, targets } => {
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.manifest.targets = targets;
                    if let Err(err) = spool.resave(&rec.manifest) {
                        events.push_back(HubEvent::SpoolError {
                            reason: format!("cannot keep the sites of a file in the spool: {err}"),
                        });
                    }
                }
            }
            SenderEvent::Finished {
                transfer,
                delivered,
            } => {
                spool.remove(transfer);
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.finished = true;
                    finished_order.push_back(transfer);
                    events.push_back(HubEvent::Finished {
                        manifest: rec.manifest.clone(),
                        delivered,
                    });
                }
            }
        }
    }
}
