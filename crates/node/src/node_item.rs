//! The node's own figures as an item: service `TICKWIRE`, item `NODE`, published by the
//! node through its own core like any non-interactive publisher, so every client (the
//! dashboard over the WebSocket API, `tickwire subscribe --service TICKWIRE NODE`) reads
//! them the way it reads market data, with no other interface. Updated once a second.

use std::time::Instant;
use tickwire_core::{ConnId, Node};
use tickwire_proto::{
    FieldList, FieldListWriter, Message, MessageIter, Refresh, Role, State, Update, UpdateType,
    Value,
};

/// The service of the node's own item.
pub const NODE_SERVICE: &str = "TICKWIRE";
/// The item.
pub const NODE_ITEM: &str = "NODE";
const STREAM: u32 = 1;

// Field ids of the built-in dictionary (TW_*).
const TW_CONNS: i16 = -1001;
const TW_SUBS: i16 = -1002;
const TW_PUBS: i16 = -1003;
const TW_ITEMS: i16 = -1004;
const TW_UPD_IN: i16 = -1005;
const TW_UPD_OUT: i16 = -1006;
const TW_BEHIND: i16 = -1007;
const TW_CONFLATED: i16 = -1008;
const TW_SLOW_DISC: i16 = -1009;
const TW_SERVICES: i16 = -1010;
const TW_UPTIME: i16 = -1011;
const TW_BB_ROLE: i16 = -1020;
const TW_BB_SOURCES: i16 = -1021;
const TW_BB_EDGES: i16 = -1022;
const TW_BB_NAKS: i16 = -1023;
const TW_BB_RETX: i16 = -1024;
const TW_BB_REIMAGES: i16 = -1025;
const TW_BB_BYTES_IN: i16 = -1026;
const TW_BB_BYTES_OUT: i16 = -1027;
const TW_BB_LOST: i16 = -1028;
const TW_PATH: i16 = tickwire_upstream::TW_PATH;
const TW_UPSTREAM: i16 = -1030;
const TW_POSTS_IN: i16 = -1031;
const TW_POSTS_ACK: i16 = -1032;
const TW_POSTS_NAK: i16 = -1033;
const TW_JNL_RECORDS: i16 = -1034;
const TW_JNL_SYSCALLS: i16 = -1035;
const TW_SLOW_WHO: i16 = -1036;

/// The subscribers behind named in `TW_SLOW_WHO`, at most (the most queued first).
const SLOW_NAMED: usize = 10;

/// Updates the node has received, less this item's own (one a second, whether or not
/// any publisher sends anything).
pub(crate) fn updates_in_from_publishers(core: &Node) -> u64 {
    let own = core
        .service_figures()
        .into_iter()
        .find(|f| f.name == NODE_SERVICE);
    core.stats()
        .updates_in
        .saturating_sub(own.map_or(0, |f| f.updates_in))
}

pub(crate) struct NodeItem {
    conn: ConnId,
    seq: u32,
    started: Instant,
    last: (Instant, u64, u64),
    fields: Vec<u8>,
    /// The backbone's figures, when the node is on one (set before each tick).
    pub backbone: Option<tickwire_backbone::BackboneFigures>,
    /// The chain of nodes this one is fed from, itself first (see `tickwire-upstream`).
    pub path: String,
    /// The upstream link's state, when the node has one.
    pub upstream: Option<String>,
    /// The journal's figures, when the node has one.
    pub journal: Option<std::sync::Arc<crate::journal::JournalFigures>>,
}

impl NodeItem {
    /// Logs in (as an internal peer: no secret needed) as the publisher of `TICKWIRE`
    /// and publishes the first image.
    pub(crate) fn start(core: &mut Node, now: Instant) -> NodeItem {
        let conn = core.join_internal(
            &tickwire_core::InternalPeer {
                peer: "node (its own figures)",
                role: Role::Publisher,
                application: "tickwire-node",
                user: "node",
                slow_consumer: None,
            },
            now,
        );
        let mut me = NodeItem {
            conn,
            seq: 0,
            started: now,
            last: (
                now,
                updates_in_from_publishers(core),
                core.stats().updates_out,
            ),
            fields: Vec::new(),
            backbone: None,
            path: String::new(),
            upstream: None,
            journal: None,
        };
        let directory = Message::Directory(tickwire_proto::Directory::one_service(NODE_SERVICE, 1));
        core.on_message(conn, &directory, now);
        me.refresh(core, now, STREAM, false);
        me
    }

    /// The figures; the rates since the last update, which `advance` (an update) makes
    /// the start of the next (an image asked for between two leaves it: the update that
    /// follows would have had rates over an instant).
    fn write_fields(&mut self, core: &Node, now: Instant, advance: bool) {
        let reports = core.connection_reports();
        let count = |role: &str| reports.iter().filter(|r| r.role == role).count() as u64;
        let behind = reports.iter().filter(|r| r.behind).count() as u64;
        // Who is behind: "peer user application (N bytes queued)", the most queued first.
        let mut slow: Vec<_> = reports.iter().filter(|r| r.behind).collect();
        slow.sort_by_key(|r| std::cmp::Reverse(r.queued_bytes));
        let slow_who = slow
            .iter()
            .take(SLOW_NAMED)
            .map(|r| {
                format!(
                    "{} {} {} ({} bytes queued)",
                    r.peer, r.user, r.application, r.queued_bytes
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let s = core.stats();
        let updates_in = updates_in_from_publishers(core);
        let secs = now
            .saturating_duration_since(self.last.0)
            .as_secs_f64()
            .max(1e-3);
        let rate_in = ((updates_in - self.last.1) as f64 / secs) as u64;
        let rate_out = ((s.updates_out - self.last.2) as f64 / secs) as u64;
        if advance {
            self.last = (now, updates_in, s.updates_out);
        }
        let services: Vec<String> = core
            .services()
            .into_iter()
            .filter(|(n, _)| n != NODE_SERVICE)
            .map(|(n, up)| format!("{n} {}", if up { "up" } else { "down" }))
            .collect();
        let services = services.join(", ");
        self.fields.clear();
        let mut w = FieldListWriter::new(&mut self.fields);
        // The node's own publisher connection is not counted.
        w.push(
            TW_CONNS,
            Value::UInt(reports.len().saturating_sub(1) as u64),
        );
        w.push(TW_SUBS, Value::UInt(count("subscriber")));
        w.push(TW_PUBS, Value::UInt(count("publisher").saturating_sub(1)));
        w.push(
            TW_ITEMS,
            Value::UInt(core.item_count().saturating_sub(1) as u64),
        );
        w.push(TW_UPD_IN, Value::UInt(rate_in));
        w.push(TW_UPD_OUT, Value::UInt(rate_out));
        w.push(TW_BEHIND, Value::UInt(behind));
        w.push(TW_CONFLATED, Value::UInt(s.conflated_updates));
        w.push(TW_SLOW_DISC, Value::UInt(s.slow_consumer_disconnects));
        w.push(TW_SLOW_WHO, Value::Utf8(&slow_who));
        w.push(TW_SERVICES, Value::Utf8(&services));
        w.push(
            TW_UPTIME,
            Value::UInt(now.saturating_duration_since(self.started).as_secs()),
        );
        w.push(TW_PATH, Value::Utf8(&self.path));
        if let Some(u) = &self.upstream {
            w.push(TW_UPSTREAM, Value::Utf8(u));
        }
        w.push(TW_POSTS_IN, Value::UInt(s.posts.posts_in));
        w.push(TW_POSTS_ACK, Value::UInt(s.posts.acks_out));
        w.push(TW_POSTS_NAK, Value::UInt(s.posts.naks_out));
        if let Some(j) = &self.journal {
            use std::sync::atomic::Ordering::Relaxed;
            w.push(TW_JNL_RECORDS, Value::UInt(j.records.load(Relaxed)));
            w.push(TW_JNL_SYSCALLS, Value::UInt(j.syscalls.load(Relaxed)));
        }
        if let Some(b) = &self.backbone {
            w.push(TW_BB_ROLE, Value::Utf8(b.role));
            w.push(TW_BB_SOURCES, Value::Utf8(&b.sources));
            w.push(TW_BB_EDGES, Value::UInt(b.edges));
            w.push(TW_BB_NAKS, Value::UInt(b.driver.naks_sent));
            w.push(TW_BB_RETX, Value::UInt(b.driver.retransmits_sent));
            w.push(TW_BB_REIMAGES, Value::UInt(b.reimages));
            w.push(TW_BB_BYTES_IN, Value::UInt(b.driver.bytes_received));
            w.push(TW_BB_BYTES_OUT, Value::UInt(b.driver.bytes_sent));
            w.push(TW_BB_LOST, Value::UInt(b.sources_lost));
        }
        w.finish();
    }

    fn refresh(&mut self, core: &mut Node, now: Instant, stream_id: u32, solicited: bool) {
        self.write_fields(core, now, false);
        let refresh = Message::Refresh(Refresh {
            stream_id,
            seq: self.seq,
            complete: true,
            solicited,
            clear_cache: true,
            state: State::OPEN_OK,
            service: NODE_SERVICE,
            name: NODE_ITEM,
            fields: FieldList::from_trusted(&self.fields),
        });
        core.on_message(self.conn, &refresh, now);
    }

    /// Once a second: new figures as an update; answers what the core asked of this
    /// publisher (a cache-off node asks for the image), and drops the rest of its output.
    pub(crate) fn tick(&mut self, core: &mut Node, now: Instant) {
        let mut requests = Vec::new();
        if let Some(out) = core.output(self.conn) {
            let bytes = out.sealed_bytes();
            for (payload, _) in tickwire_proto::frame::frames(bytes) {
                for m in MessageIter::new(payload).flatten() {
                    if let Message::Request(r) = m.message {
                        requests.push(r.stream_id);
                    }
                }
            }
            let n = bytes.len();
            out.consume(n);
        }
        for sid in requests {
            self.refresh(core, now, sid, true);
        }
        self.seq = self.seq.wrapping_add(1);
        self.write_fields(core, now, true);
        let update = Message::Update(Update::new(
            STREAM,
            self.seq,
            UpdateType::Other,
            FieldList::from_trusted(&self.fields),
        ));
        core.on_message(self.conn, &update, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tickwire_proto::{Login, Request};

    use crate::test_support::{each_message_to, feed_publisher as publisher};

    /// The `TW_UPD_IN` of every update `conn` was sent.
    fn updates_in_per_s(core: &mut Node, conn: ConnId) -> Vec<u64> {
        let mut got = Vec::new();
        each_message_to(core, conn, |m| {
            if let Message::Update(u) = m {
                if let Some(Value::UInt(n)) = u.fields.get(TW_UPD_IN) {
                    got.push(n);
                }
            }
        });
        got
    }

    fn publish(core: &mut Node, conn: ConnId, updates: u32, now: Instant) {
        for seq in 1..=updates {
            let u = Update::new(1, seq, UpdateType::Other, FieldList::from_trusted(&[]));
            core.on_message(conn, &Message::Update(u), now);
        }
    }

    /// On a cache-off node the item answers a request with a refresh, then sends its
    /// update of that second: the update's rates are over the second too, not over
    /// the instant since the refresh (which made them 0).
    #[test]
    fn the_update_after_an_asked_image_has_the_rates_of_the_last_second() {
        let t0 = Instant::now();
        let mut cfg = crate::config::NodeConfig::default();
        cfg.node.cache = crate::config::CacheMode::Off;
        let mut core = Node::new(cfg.core_config(), t0);
        let mut item = NodeItem::start(&mut core, t0);
        let feed = publisher(&mut core, t0);
        let sub = core.connect("127.0.0.1:4000", t0);
        let login = Login::new(Role::Subscriber, "test", "", "");
        core.on_message(sub, &Message::Login(login), t0);
        let second = Duration::from_secs(1);
        item.tick(&mut core, t0 + second);
        let at = t0 + second * 3 / 2;
        publish(&mut core, feed, 3, at);
        let request = Request::streaming(5, NODE_SERVICE, NODE_ITEM);
        core.on_message(sub, &Message::Request(request), at);
        item.tick(&mut core, t0 + 2 * second);
        assert_eq!(updates_in_per_s(&mut core, sub), [3]);
    }

    /// The item's own updates, one a second, are not counted as updates in: an idle
    /// node says 0.
    #[test]
    fn the_items_own_updates_are_not_updates_in() {
        let t0 = Instant::now();
        let mut core = Node::new(crate::config::NodeConfig::default().core_config(), t0);
        let mut item = NodeItem::start(&mut core, t0);
        let sub = core.connect("127.0.0.1:4000", t0);
        let login = Login::new(Role::Subscriber, "test", "", "");
        core.on_message(sub, &Message::Login(login), t0);
        let request = Request::streaming(5, NODE_SERVICE, NODE_ITEM);
        core.on_message(sub, &Message::Request(request), t0);
        let second = Duration::from_secs(1);
        for k in 1..=3 {
            item.tick(&mut core, t0 + k * second);
        }
        assert_eq!(updates_in_per_s(&mut core, sub), [0, 0, 0]);
    }
}
