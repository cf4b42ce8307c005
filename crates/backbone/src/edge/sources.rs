//! The sources: heard by their heartbeats (and taken up to the most remembered), joined,
//! their directories merged and told to the core as services, lost when silent.

use super::{Edge, Phase, SourceView};
use crate::dense::DenseMap;
use crate::wire::BackboneMessage;
use log::{info, warn};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tickwire_core::Node;
use tickwire_proto::{code, Directory, Message, ServiceEntry, ServiceState};

impl Edge {
    /// `source` has just started to know this edge. If it had forgotten it (its
    /// requests went unheard for three liveness times, and it released the edge's
    /// streams), the items this edge has from it get nothing more: each is asked for
    /// again, its subscribers told it is suspect meanwhile, and re-imaged.
    pub(super) fn joined(&mut self, core: &mut Node, source: u64, now: Instant) {
        let live: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| it.source == Some(source) && it.phase == Phase::Live)
            .map(|(sid, _)| sid)
            .collect();
        if live.is_empty() {
            return;
        }
        let name = self
            .sources
            .get(&source)
            .map_or(String::new(), |s| s.name.clone());
        warn!(
            "backbone: source {name:?} ({source:016x}) had forgotten this edge (it heard none of its requests for too long): re-imaging its {} items",
            live.len()
        );
        self.stats.reimages += live.len() as u64;
        for sid in live {
            self.status_to_core(
                core,
                sid,
                code::UPDATES_DROPPED,
                "the source had lost track of this edge: re-imaging",
                now,
            );
            self.route(core, sid, now);
        }
    }

    pub(super) fn on_heartbeat(
        &mut self,
        image: i32,
        source: u64,
        name: &str,
        version: u32,
        now: Instant,
    ) {
        if self.own_source == Some(source) {
            return;
        }
        if !self.sources.contains_key(&source) {
            if self.sources.len() >= self.cfg.max_sources {
                // Room is made by forgetting the longest-silent lost source (a live
                // one is never pushed out).
                let Some(oldest) = self
                    .sources
                    .iter()
                    .filter(|(_, s)| !s.live)
                    .min_by_key(|(_, s)| s.last_heard)
                    .map(|(id, _)| *id)
                else {
                    if self.stats.sources_refused == 0 {
                        warn!(
                            "backbone: source {name:?} ({source:016x}) not taken: {} live sources already (the limit)",
                            self.sources.len()
                        );
                    }
                    self.stats.sources_refused += 1;
                    return;
                };
                self.sources.remove(&oldest);
            }
            self.sources.insert(
                source,
                SourceView {
                    name: name.to_string(),
                    image,
                    last_heard: now,
                    live: false,
                    directory_version: 0,
                    announced_version: version,
                    next_directory_request: now,
                    assembling: None,
                    services: BTreeMap::new(),
                    streams: DenseMap::new(1),
                    released: Vec::new(),
                },
            );
        }
        let s = self.sources.get_mut(&source).expect("present");
        s.last_heard = now;
        s.image = image;
        s.announced_version = version;
        if !s.live {
            s.live = true;
            info!("backbone: source {name:?} ({source:016x}) is live");
            for stream in std::mem::take(&mut s.released) {
                self.control.push(&BackboneMessage::Unsubscribe {
                    edge: self.id,
                    source,
                    stream,
                });
            }
        }
        if s.directory_version != version && now >= s.next_directory_request {
            s.next_directory_request = now + Duration::from_millis(200);
            self.queue_control(&BackboneMessage::DirectoryRequest {
                edge: self.id,
                source,
            });
        }
    }

    /// A live source that has `service` up, keeping `prefer` if it still does.
    pub(super) fn pick_source(&self, service: &str, prefer: Option<u64>) -> Option<u64> {
        let has = |id: &u64| {
            self.sources
                .get(id)
                .is_some_and(|s| s.live && s.services.get(service) == Some(&ServiceState::Up))
        };
        if let Some(p) = prefer.filter(|p| has(p)) {
            return Some(p);
        }
        // The source whose node name sorts first (then the lowest id): every edge
        // picks the same one, and operators choose the primary by its name.
        self.sources
            .iter()
            .filter(|(id, _)| has(id))
            .min_by(|a, b| (&a.1.name, a.0).cmp(&(&b.1.name, b.0)))
            .map(|(&id, _)| id)
    }

    /// The union of the live sources' directories, told to the core as changes.
    pub(super) fn directory_updated(&mut self, core: &mut Node, now: Instant) {
        let mut union: BTreeMap<String, bool> = BTreeMap::new();
        for s in self.sources.values().filter(|s| s.live) {
            for (name, state) in &s.services {
                if *state == ServiceState::Removed {
                    continue;
                }
                let up = *state == ServiceState::Up;
                let e = union.entry(name.clone()).or_insert(false);
                *e |= up;
            }
        }
        // Services no live source lists, while one has told its whole directory (the
        // sources removed them): let go of, so that they go down, and are removed
        // after the node's retention time (here and below) unless a source has them
        // again. While no source is heard, they stay known, down: the backbone may
        // only be cut off.
        let heard = self
            .sources
            .values()
            .any(|s| s.live && s.directory_version != 0);
        let gone: Vec<String> = match heard {
            true => (self.announced.keys())
                .filter(|n| !union.contains_key(*n))
                .cloned()
                .collect(),
            false => Vec::new(),
        };
        if !gone.is_empty() {
            for name in &gone {
                self.announced.remove(name);
            }
            self.services_version += 1;
            let names: Vec<&str> = gone.iter().map(String::as_str).collect();
            core.release_services(self.conn, &names, "no source on the backbone has it");
        }
        for name in self.announced.keys() {
            union.entry(name.clone()).or_insert(false);
        }
        let changed: Vec<(String, bool)> = union
            .iter()
            .filter(|(n, up)| self.announced.get(*n) != Some(up))
            .map(|(n, &up)| (n.clone(), up))
            .collect();
        if !changed.is_empty() {
            let directory = Message::Directory(Directory {
                services: changed
                    .iter()
                    .map(|(n, up)| ServiceEntry {
                        name: n,
                        state: if *up {
                            ServiceState::Up
                        } else {
                            ServiceState::Down
                        },
                        interactive: true,
                        item_count: 0,
                    })
                    .collect(),
            });
            core.on_message(self.conn, &directory, now);
            if !union.keys().eq(self.announced.keys()) {
                self.services_version += 1;
            }
            self.announced = union;
        }
        // Items without a source may have one now; items whose source no longer has
        // their service up (its publisher left, the node stays) move to a source that
        // has it, as when a source is lost.
        let orphans: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| {
                it.phase == Phase::NoSource
                    || it.source.is_some_and(|src| {
                        self.sources.get(&src).is_some_and(|s| {
                            s.live && s.services.get(&it.service) != Some(&ServiceState::Up)
                        })
                    })
            })
            .map(|(sid, _)| sid)
            .collect();
        for sid in orphans {
            let Some(it) = self.items.get(sid) else {
                continue;
            };
            if it.phase != Phase::NoSource {
                let service = it.service.clone();
                if self.pick_source(&service, None).is_none() {
                    // No other source has it either: the item waits where it is
                    // (the core has said the service is down).
                    continue;
                }
                self.stats.reimages += 1;
                let text = format!(
                    "service {service:?} went down at its source; moving to another source"
                );
                self.status_to_core(core, sid, code::PUBLISHER_GONE, &text, now);
            }
            self.route(core, sid, now);
        }
    }

    /// Services the backbone has up that the core has with no publisher are announced
    /// again. On a node that is both, the core refuses a service its own publisher has
    /// (the edge's announcement is dropped, not kept): when that publisher leaves, the
    /// service would stay down although another source has it up. (Not one the core
    /// does not have: a core at its service limit would refuse it, and say so, at
    /// every heartbeat.)
    pub(super) fn announce_unpublished(&mut self, core: &mut Node, now: Instant) {
        let services: Vec<ServiceEntry<'_>> = self
            .announced
            .iter()
            .filter(|(name, &up)| up && core.lacks_publisher(name))
            .map(|(name, _)| ServiceEntry {
                name,
                state: ServiceState::Up,
                interactive: true,
                item_count: 0,
            })
            .collect();
        if !services.is_empty() {
            core.on_message(self.conn, &Message::Directory(Directory { services }), now);
        }
    }

    /// The transport was rebuilt: every source is lost until heard again.
    pub fn all_sources_lost(&mut self, core: &mut Node, now: Instant) {
        let live: Vec<u64> = self
            .sources
            .iter()
            .filter(|(_, s)| s.live)
            .map(|(&id, _)| id)
            .collect();
        for id in live {
            self.source_lost(core, id, now);
        }
        self.reject.clear();
        // What was not sent is dropped with the old publication, but an Unsubscribe
        // is sent when its source is heard again: that source may only have been
        // unreachable, and would go on sending the stream to this edge.
        for m in self.control.take_all() {
            if let Ok(BackboneMessage::Unsubscribe { source, stream, .. }) =
                BackboneMessage::decode(&m)
            {
                if let Some(s) = self.sources.get_mut(&source) {
                    s.released.push(stream);
                }
            }
        }
    }

    /// Tells `id` that this edge no longer takes the streams it released there.
    pub(super) fn tell_released(&mut self, id: u64) {
        let Some(s) = self.sources.get(&id) else {
            return;
        };
        for &stream in &s.released {
            self.control.push(&BackboneMessage::Unsubscribe {
                edge: self.id,
                source: id,
                stream,
            });
        }
    }

    pub(super) fn source_lost(&mut self, core: &mut Node, id: u64, now: Instant) {
        let Some(s) = self.sources.get_mut(&id) else {
            return;
        };
        s.live = false;
        s.released
            .extend(s.streams.iter().map(|(stream, _)| stream));
        s.streams.clear();
        self.reject.push(s.image);
        s.directory_version = 0;
        s.assembling = None;
        let name = s.name.clone();
        self.stats.sources_lost += 1;
        warn!(
            "backbone: source {name:?} ({id:016x}) silent for {:?}: its items are suspect",
            self.cfg.liveness
        );
        let affected: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| it.source == Some(id))
            .map(|(sid, _)| sid)
            .collect();
        for &sid in &affected {
            if let Some(it) = self.items.get_mut(sid) {
                it.source_stream = None;
                it.phase = Phase::Waiting { since: now };
            }
        }
        // Services no live source has any more go down: the core tells their
        // subscribers (open/suspect, "service ... is down") once.
        self.directory_updated(core, now);
        let text = format!("source {name:?} lost; moving to another source");
        for sid in affected {
            self.stats.reimages += 1;
            let Some(service) = self.items.get(sid).map(|it| it.service.clone()) else {
                continue;
            };
            if self.pick_source(&service, None).is_some() {
                self.status_to_core(core, sid, code::PUBLISHER_GONE, &text, now);
                self.route(core, sid, now);
            } else if let Some(it) = self.items.get_mut(sid) {
                // Asked for again when a source with the service is heard.
                it.phase = Phase::NoSource;
            }
        }
    }
}
