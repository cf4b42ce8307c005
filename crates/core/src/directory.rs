//! Services: the directory subscribers are sent, publishers' announcements of their
//! services, and services coming up, going down and being forgotten.

use crate::items::ItemHandle;
use crate::security::Identity;
use crate::{ConnId, ConnRole, Node, Service, MAX_SERVICE_NAME};
use rustc_hash::FxHashMap;
use std::time::Instant;
use tickwire_auth::{Action, Services};
use tickwire_proto::{
    code, DataState, Directory, Message, ServiceEntry, ServiceState, State, Status, StreamState,
};
use tracing::{info, warn};

impl Node {
    /// What subscribers see of one service.
    pub(crate) fn service_entry(&self, svc: usize) -> ServiceEntry<'_> {
        let s = &self.services[svc];
        ServiceEntry {
            name: &s.name,
            state: if s.publisher.is_some() && s.up {
                ServiceState::Up
            } else {
                ServiceState::Down
            },
            interactive: s.interactive,
            item_count: s.items.len() as u32,
        }
    }

    /// Whether a connection may see every service in the directory: no entitlements
    /// to filter it by (an open node, the node's own peers, a user or an anonymous
    /// login entitled to subscribe to `"*"`).
    pub(crate) fn sees_every_service(&self, conn: ConnId) -> bool {
        self.entitlements_pass(conn, |e| e.subscribe == Services::All)
    }

    /// The whole directory, to a subscriber that just logged in or caught up: the
    /// services it may subscribe to (the others are not its business, not even their
    /// names).
    pub(crate) fn send_directory(&mut self, conn: ConnId) {
        let all = self.sees_every_service(conn);
        let entries: Vec<ServiceEntry<'_>> = (0..self.services.len())
            .filter(|&s| all || self.may(conn, Action::Subscribe, &self.services[s].name))
            .map(|s| self.service_entry(s))
            .collect();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        encode_directory(&entries, &mut buf, &mut ends);
        self.queue_encoded(conn, &buf, &ends);
    }

    /// Tells every subscriber what changed: `changed` services (their current entry)
    /// and `removed` ones, each subscriber only the services it may subscribe to. A
    /// subscriber that is behind gets nothing now and the whole directory when it
    /// catches up, so a publisher announcing services over and over cannot fill
    /// anyone's queue.
    ///
    /// Encoded once for every subscriber that sees every service, and once per distinct
    /// set of visible entries for the others: their entitlements are looked up once
    /// per user, and users with the same rights (a group) share one encoding. The cost
    /// is O(subscribers + users with restricted rights x services changed), on
    /// directory changes only (the update path does not look at any of this).
    pub(crate) fn broadcast_directory_change(&mut self, changed: &[usize], removed: &[String]) {
        if changed.is_empty() && removed.is_empty() {
            return;
        }
        let mut entries: Vec<ServiceEntry<'_>> =
            changed.iter().map(|&s| self.service_entry(s)).collect();
        entries.extend(removed.iter().map(|name| ServiceEntry {
            name,
            state: ServiceState::Removed,
            interactive: false,
            item_count: 0,
        }));
        // Encodings: [0] every entry; then one per distinct subset (entry indices).
        let (mut buf, mut ends) = (Vec::new(), Vec::new());
        encode_directory(&entries, &mut buf, &mut ends);
        let mut encoded: Vec<Encoded> = vec![(buf, ends)];
        let mut by_subset: FxHashMap<Vec<u32>, usize> = FxHashMap::default();
        let mut by_user: FxHashMap<&str, Option<usize>> = FxHashMap::default();
        // Per subscriber: the encoding it gets (`None`: nothing it may see changed),
        // or that it is behind.
        let mut plan: Vec<(ConnId, Result<Option<usize>, ()>)> = Vec::new();
        for (id, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.role != ConnRole::Subscriber {
                continue;
            }
            if c.conflation.is_some() {
                plan.push((id, Err(())));
                continue;
            }
            let memo = (c.identity == Identity::User)
                .then(|| by_user.get(c.user.as_str()).copied())
                .flatten();
            let which = match memo {
                Some(which) => which,
                None if self.sees_every_service(id) => Some(0),
                None => {
                    let subset: Vec<u32> = (0..entries.len() as u32)
                        .filter(|&i| self.may(id, Action::Subscribe, entries[i as usize].name))
                        .collect();
                    (!subset.is_empty()).then(|| {
                        *by_subset.entry(subset).or_insert_with_key(|subset| {
                            let chosen: Vec<ServiceEntry<'_>> = subset
                                .iter()
                                .map(|&i| entries[i as usize].clone())
                                .collect();
                            let mut e: Encoded = Default::default();
                            encode_directory(&chosen, &mut e.0, &mut e.1);
                            encoded.push(e);
                            encoded.len() - 1
                        })
                    })
                }
            };
            if c.identity == Identity::User {
                by_user.insert(c.user.as_str(), which);
            }
            plan.push((id, Ok(which)));
        }
        drop(by_user);
        for (id, which) in plan {
            match which {
                Err(()) => {
                    if let Some(c) = self.conn_mut(id) {
                        c.directory_stale = true;
                    }
                }
                Ok(None) => {}
                Ok(Some(i)) => {
                    let (buf, ends) = &encoded[i];
                    self.queue_encoded(id, buf, ends);
                }
            }
        }
    }

    pub(crate) fn on_publisher_directory(&mut self, conn: ConnId, dir: &Directory<'_>) {
        let mut changed = Vec::new();
        let internal = self.conns[conn].as_ref().is_some_and(|c| c.internal);
        // With an in-process peer: how many services were left out, and the first why.
        let mut left_out: (u64, Option<String>) = (0, None);
        for entry in &dir.services {
            if let Err((code, text)) = self.check_announced(conn, entry) {
                if internal {
                    // An in-process peer (an upstream link, the backbone) relays
                    // services it does not choose: the one it may not carry is left
                    // out, the others go on. Closing it would cut them all, and it
                    // cannot log in again.
                    left_out.0 += 1;
                    left_out.1.get_or_insert(text);
                    continue;
                }
                self.stats.protocol_disconnects += 1;
                self.reject(conn, code, &text);
                break;
            }
            let svc = match self.service_by_name.get(entry.name) {
                Some(&s) => s,
                None => {
                    self.services.push(Service {
                        name: entry.name.to_string(),
                        publisher: None,
                        up: false,
                        interactive: entry.interactive,
                        items: FxHashMap::default(),
                        orphaned_since: None,
                        updates_in: 0,
                        updates_out: 0,
                    });
                    let s = self.services.len() - 1;
                    self.service_by_name.insert(entry.name.to_string(), s);
                    changed.push(s);
                    s
                }
            };
            if self.services[svc].publisher.is_none() {
                self.services[svc].publisher = Some(conn);
                self.services[svc].orphaned_since = None;
                if let Some(c) = self.conn_mut(conn) {
                    c.services.push(svc);
                }
                changed.push(svc);
            }
            let service = &mut self.services[svc];
            let was_up = service.up;
            let up = entry.state == ServiceState::Up;
            if service.interactive == entry.interactive && was_up == up {
                continue; // nothing changed: nothing to log or tell
            }
            service.interactive = entry.interactive;
            service.up = up;
            changed.push(svc);
            info!(
                service = %service.name,
                interactive = entry.interactive,
                "service is {}",
                if up { "up" } else { "down" },
            );
            if up && !was_up {
                self.service_came_up(svc);
            } else if was_up && !up {
                self.service_went_down(svc);
            }
        }
        if let (n @ 1.., Some(first)) = left_out {
            self.stats.internal_services_refused += n;
            // One line per directory, however many it held (a peer posing as an
            // upstream node may announce thousands).
            warn!(
                peer = %self.conns[conn].as_ref().map_or("", |c| c.peer.as_str()),
                "service not taken from an in-process peer: {first}{}",
                if n > 1 { format!(" (and {} more services left out)", n - 1) } else { String::new() }
            );
        }
        changed.sort_unstable();
        changed.dedup();
        self.broadcast_directory_change(&changed, &[]);
    }

    /// Whether a publisher may announce this directory entry; the code and reason if
    /// not.
    pub(crate) fn check_announced(
        &self,
        conn: ConnId,
        entry: &ServiceEntry<'_>,
    ) -> Result<(), (u16, String)> {
        if entry.state == ServiceState::Removed {
            let text = format!(
                "service {:?}: state removed is sent by nodes only",
                entry.name
            );
            return Err((code::PROTOCOL, text));
        }
        if !self.may(conn, Action::Publish, entry.name) {
            let text = self.not_entitled(conn, Action::Publish, entry.name);
            warn!(target: "audit", "publisher refused: {text}");
            return Err((code::NOT_ENTITLED, text));
        }
        if entry.name.is_empty() || entry.name.len() > MAX_SERVICE_NAME {
            let text = format!(
                "service name of {} bytes: allowed 1 to {MAX_SERVICE_NAME}",
                entry.name.len()
            );
            return Err((code::PROTOCOL, text));
        }
        match self.service_by_name.get(entry.name) {
            Some(&svc) => match self.services[svc].publisher {
                Some(other) if other != conn => Err((
                    code::PROTOCOL,
                    format!(
                        "service {:?} is already published by {}",
                        entry.name,
                        self.conns[other].as_ref().map_or("", |c| c.peer.as_str())
                    ),
                )),
                _ => Ok(()),
            },
            None if self.services.len() >= self.cfg.limits.max_services => Err((
                code::TOO_MANY_SERVICES,
                format!(
                    "service limit reached: {} services on this node (limits.max_services)",
                    self.cfg.limits.max_services
                ),
            )),
            None => Ok(()),
        }
    }

    /// Removes the services that have had no publisher for `service_retention` and
    /// that nobody watches, with their cached images, and tells subscribers.
    pub(crate) fn expire_services(&mut self, now: Instant) {
        let keep = self.cfg.limits.service_retention;
        if keep.is_zero() {
            return;
        }
        let mut removed = Vec::new();
        let mut svc = 0;
        while svc < self.services.len() {
            let s = &self.services[svc];
            let expired = s.publisher.is_none()
                && s.orphaned_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= keep)
                && s.items
                    .values()
                    .all(|&h| self.items.get(h).is_none_or(|i| i.subs.is_empty()));
            if expired {
                removed.push(self.remove_service(svc));
            } else {
                svc += 1;
            }
        }
        self.broadcast_directory_change(&[], &removed);
    }

    /// Forgets a service nobody publishes or watches, and its items; the last service
    /// takes its index. Returns its name.
    pub(crate) fn remove_service(&mut self, svc: usize) -> String {
        let service = self.services.swap_remove(svc);
        self.service_by_name.remove(&service.name);
        for &h in service.items.values() {
            self.items.remove(h);
        }
        if let Some(moved) = self.services.get(svc) {
            let from = self.services.len();
            if let Some(i) = self.service_by_name.get_mut(&moved.name) {
                *i = svc;
            }
            for &h in moved.items.values() {
                if let Some(item) = self.items.get_mut(h) {
                    item.service = svc;
                }
            }
            if let Some(p) = moved.publisher {
                if let Some(c) = self.conns.get_mut(p).and_then(|c| c.as_mut()) {
                    for s in c.services.iter_mut().filter(|s| **s == from) {
                        *s = svc;
                    }
                }
            }
        }
        info!(
            "service {:?} removed: no publisher for {} s and nobody watching ({} cached items dropped)",
            service.name,
            self.cfg.limits.service_retention.as_secs(),
            service.items.len()
        );
        service.name
    }

    /// Streams held while the service was down: an interactive publisher is asked for
    /// them; a non-interactive one has pushed what it has, and the rest do not exist.
    pub(crate) fn service_came_up(&mut self, svc: usize) {
        // Stale images nobody watches go: the returning publisher re-images what it
        // still publishes (non-interactive) or is asked when someone wants it.
        let unwatched_stale: Vec<ItemHandle> = self.services[svc]
            .items
            .values()
            .copied()
            .filter(|&h| {
                self.items
                    .get(h)
                    .is_some_and(|i| i.subs.is_empty() && i.publisher.is_none())
            })
            .collect();
        for h in unwatched_stale {
            self.release_if_unused(h);
        }
        let interactive = self.services[svc].interactive;
        let watched: Vec<ItemHandle> = self.services[svc]
            .items
            .values()
            .copied()
            .filter(|&h| self.items.get(h).is_some_and(|i| !i.subs.is_empty()))
            .collect();
        for h in watched {
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            let waiting = item.subs.iter().any(|s| s.awaiting_refresh);
            if interactive {
                // Everything watched is asked for again; live streams (suspect since the
                // old publisher left) get the new image too.
                item.recovering = item.subs.iter().any(|s| !s.awaiting_refresh);
                // So is an item whose request was unanswered when the service went
                // down: the answer may have gone with it (an RSSL provider's lost
                // connection), and the item would wait for it for good.
                item.refresh_requested = false;
                self.request_from_publisher(h);
            } else if waiting {
                if item.publisher.is_some() {
                    self.request_from_publisher(h);
                } else {
                    let name = item.name.clone();
                    let text = format!(
                        "item {name:?} not found in service {:?}",
                        self.services[svc].name
                    );
                    self.close_item(h, State::closed(code::NOT_FOUND, &text));
                }
            }
        }
    }

    /// A live publisher announced its service down: its streams turn suspect.
    pub(crate) fn service_went_down(&mut self, svc: usize) {
        let text = format!("service {:?} is down", self.services[svc].name);
        let handles: Vec<ItemHandle> = self.services[svc].items.values().copied().collect();
        for h in handles {
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            item.data_state = DataState::Suspect;
            let subs: Vec<(ConnId, u32)> =
                item.subs.iter().map(|s| (s.conn, s.stream_id)).collect();
            for (c, sid) in subs {
                self.send_service_down(c, sid, &text);
            }
        }
    }

    /// Tells a subscriber stream its service is down (`text` says which): the stream
    /// stays open, its data suspect, until a publisher brings the service back (a
    /// request that finds the service down and a service that goes down alike).
    pub(crate) fn send_service_down(&mut self, conn: ConnId, stream_id: u32, text: &str) {
        self.send(
            conn,
            &Message::Status(Status {
                stream_id,
                state: State {
                    stream: StreamState::Open,
                    data: DataState::Suspect,
                    code: code::SERVICE_DOWN,
                    text,
                },
            }),
        );
    }

    /// The publisher of some services left: their streams turn suspect, caches stay.
    pub(crate) fn publisher_gone(&mut self, conn: ConnId, reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let services = std::mem::take(&mut c.services);
        c.pub_streams.clear();
        self.services_left(services, reason);
    }

    /// An in-process publisher (an upstream link, a backbone edge) no longer has the
    /// services `names` of its own (where it takes them from removed them): they go as
    /// if their publisher had left (their streams suspect, their caches kept), and
    /// unless a publisher announces them again, are removed after
    /// `service_retention` at this node and every node below it. A publisher may not
    /// remove a service itself: a peer that left and comes back finds it.
    pub fn release_services(&mut self, conn: ConnId, names: &[&str], reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mine: Vec<usize> = names
            .iter()
            .filter_map(|n| self.service_by_name.get(*n).copied())
            .filter(|svc| c.services.contains(svc))
            .collect();
        if mine.is_empty() {
            return;
        }
        c.services.retain(|svc| !mine.contains(svc));
        // Its streams of their items close, as for items nobody watches: it stops
        // sending them, and takes them again as a publisher of the service.
        let mut closed = Vec::new();
        for &svc in &mine {
            for h in self.services[svc].items.values() {
                match self.items.get(*h).and_then(|i| i.publisher) {
                    Some((p, sid)) if p == conn => {
                        c.pub_streams.remove(sid);
                        closed.push(sid);
                    }
                    _ => {}
                }
            }
        }
        for sid in closed {
            self.send(conn, &Message::Close { stream_id: sid });
        }
        self.services_left(mine, reason);
    }

    /// The services `services` lost their publisher (`reason`, for the log).
    pub(crate) fn services_left(&mut self, services: Vec<usize>, reason: &str) {
        let mut to_release = Vec::new();
        let now = self.now;
        for &svc in &services {
            self.services[svc].orphaned_since = Some(now);
            let name = self.services[svc].name.clone();
            warn!(service = %name, "service is down: its publisher left ({reason})");
            self.services[svc].publisher = None;
            self.services[svc].up = false;
            let text = format!("service {name:?} is down: its publisher left");
            let handles: Vec<ItemHandle> = self.services[svc].items.values().copied().collect();
            for h in handles {
                let Some(item) = self.items.get_mut(h) else {
                    continue;
                };
                item.publisher = None;
                item.refresh_requested = false;
                item.refresh_in_parts = false;
                item.data_state = DataState::Suspect;
                let subs: Vec<(ConnId, u32)> =
                    item.subs.iter().map(|s| (s.conn, s.stream_id)).collect();
                if subs.is_empty() {
                    to_release.push(h);
                }
                for (sc, sid) in subs {
                    self.send(
                        sc,
                        &Message::Status(Status {
                            stream_id: sid,
                            state: State {
                                stream: StreamState::Open,
                                data: DataState::Suspect,
                                code: code::PUBLISHER_GONE,
                                text: &text,
                            },
                        }),
                    );
                }
            }
        }
        for h in to_release {
            // With the cache off, an image-less item nobody watches is not worth keeping.
            if !self.cfg.cache {
                if let Some(item) = self.items.remove(h) {
                    self.services[item.service].items.remove(&*item.name);
                }
            }
        }
        self.broadcast_directory_change(&services, &[]);
    }
}

/// Encoded messages and where each ends in the bytes (what [`encode_directory`] makes).
pub(crate) type Encoded = (Vec<u8>, Vec<usize>);

/// Encodes directory entries as as many Directory messages as their size needs (a
/// message body holds at most 65,535 bytes); `ends` gets where each message ends.
pub(crate) fn encode_directory(
    entries: &[ServiceEntry<'_>],
    buf: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) {
    let mut rest = entries;
    while !rest.is_empty() {
        let mut size = 2;
        let mut n = 0;
        for e in rest {
            let entry = 8 + e.name.len();
            if n > 0 && size + entry > tickwire_proto::message::MAX_MESSAGE_BODY {
                break;
            }
            size += entry;
            n += 1;
        }
        let (chunk, later) = rest.split_at(n);
        let msg = Message::Directory(Directory {
            services: chunk.to_vec(),
        });
        if let Err(e) = msg.encode(buf) {
            // Only a name longer than a message could fail; publishers' are bounded.
            warn!("directory entries not encoded: {e}");
        }
        ends.push(buf.len());
        rest = later;
    }
}
