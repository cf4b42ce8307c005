//! What the node logs of its counters: a line every `stats_interval_s` while they
//! move, and the totals when it stops.

use std::time::{Duration, Instant};
use tickwire_backbone::Backbone;
use tickwire_core::{Node, Stats};
use tickwire_gateway::UpdateCache;

use crate::node_item::updates_in_from_publishers;

pub(super) struct StatsLog {
    every: Duration,
    next: Instant,
    last: Stats,
}

/// One stats line's figures.
#[derive(Debug, PartialEq)]
struct Line {
    connections: usize,
    items: usize,
    updates_in_per_s: u64,
    updates_out_per_s: u64,
}

/// The counters, less the updates of the node's own figures item: it publishes one
/// every second, whether or not anything else moves (the line would never be quiet).
fn counters(core: &Node) -> Stats {
    let mut s = core.stats().clone();
    s.updates_in = updates_in_from_publishers(core);
    s
}

impl StatsLog {
    /// Every `every` (zero: never) from `start`.
    pub(super) fn new(every: Duration, core: &Node, start: Instant) -> Self {
        StatsLog {
            every,
            next: start + every,
            last: counters(core),
        }
    }

    /// Logs the rates since the last line, when due and something changed.
    pub(super) fn handle_timeout(&mut self, core: &Node, now: Instant) {
        if let Some(line) = self.due(core, now) {
            let s = core.stats();
            let behind = behind_text(core.connection_reports());
            tracing::info!(
                connections = line.connections,
                items = line.items,
                updates_in_per_s = line.updates_in_per_s,
                updates_out_per_s = line.updates_out_per_s,
                refreshes_out = s.refreshes_out,
                conflated = s.conflated_updates,
                slow_consumer_disconnects = s.slow_consumer_disconnects,
                behind = %behind,
                "stats"
            );
        }
    }

    /// The line to write now, if one is due and something changed.
    fn due(&mut self, core: &Node, now: Instant) -> Option<Line> {
        if self.every == Duration::ZERO || now < self.next {
            return None;
        }
        let s = counters(core);
        let secs = (now - self.next + self.every).as_secs_f64();
        let last = std::mem::replace(&mut self.last, s);
        self.next = now + self.every;
        let s = &self.last;
        if *s == last {
            return None;
        }
        let per_s = |now: u64, then: u64| ((now - then) as f64 / secs).round() as u64;
        // The node's own figures item (its connection and item) is not the clients'.
        Some(Line {
            connections: core.connection_count().saturating_sub(1),
            items: core.item_count().saturating_sub(1),
            updates_in_per_s: per_s(s.updates_in, last.updates_in),
            updates_out_per_s: per_s(s.updates_out, last.updates_out),
        })
    }
}

/// Subscribers behind the stats line names at most: those with the longest queues.
const BEHIND_NAMED: usize = 10;

/// The subscribers behind, for the stats line: the [`BEHIND_NAMED`] with the longest
/// queues, and how many more there are (thousands can be behind at once in a burst,
/// and the line is written on the event loop).
fn behind_text(mut reports: Vec<tickwire_core::ConnectionReport>) -> String {
    reports.retain(|r| r.behind);
    if reports.is_empty() {
        return "none".into();
    }
    let more = reports.len().saturating_sub(BEHIND_NAMED);
    if more > 0 {
        reports
            .select_nth_unstable_by(BEHIND_NAMED - 1, |a, b| b.queued_bytes.cmp(&a.queued_bytes));
        reports.truncate(BEHIND_NAMED);
    }
    reports.sort_by_key(|r| std::cmp::Reverse(r.queued_bytes));
    let mut text = reports
        .iter()
        .map(|r| format!("{} ({}, {} bytes queued)", r.peer, r.user, r.queued_bytes))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// The totals, as the node stops.
pub(super) fn node_stopped(
    stats: &Stats,
    backbone: Option<&Backbone>,
    ws_cache: &UpdateCache,
    share_encoding: bool,
    now: Instant,
) {
    tracing::info!(
        connections_accepted = stats.connections_accepted,
        logins = stats.logins,
        updates_in = stats.updates_in,
        updates_out = stats.updates_out,
        refreshes_in = stats.refreshes_in,
        refreshes_out = stats.refreshes_out,
        requests = stats.requests,
        slow_consumer_episodes = stats.slow_consumer_episodes,
        conflated = stats.conflated_updates,
        do_not_conflate_dropped = stats.do_not_conflate_dropped,
        malformed_disconnects = stats.malformed_disconnects,
        protocol_disconnects = stats.protocol_disconnects,
        slow_consumer_disconnects = stats.slow_consumer_disconnects,
        heartbeat_timeouts = stats.heartbeat_timeouts,
        "node stopped"
    );
    if let Some(b) = backbone {
        let f = b.figures(now);
        tracing::info!(
            bytes_in = f.driver.bytes_received,
            bytes_out = f.driver.bytes_sent,
            naks_sent = f.driver.naks_sent,
            naks_received = f.driver.naks_received,
            retransmits_sent = f.driver.retransmits_sent,
            sources_lost = f.sources_lost,
            reimages = f.reimages,
            link_restarts = f.link_restarts,
            files_dropped = b.files_dropped,
            "backbone stopped"
        );
    }
    if ws_cache.hits + ws_cache.misses > 0 {
        log::info!(
            "WebSocket updates: {} encoded, {} reused from another client's encoding (websocket.share_encoding = {share_encoding})",
            ws_cache.misses,
            ws_cache.hits,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_core::ConnectionReport;

    fn report(id: usize, behind: bool, queued_bytes: usize) -> ConnectionReport {
        ConnectionReport {
            id,
            peer: format!("10.0.0.{}:4000", id % 250),
            user: format!("user{id}"),
            application: "app".into(),
            role: "subscriber",
            policy: tickwire_proto::SlowConsumerPolicy::Conflate,
            behind,
            queued_bytes,
            queued_bytes_high_water: queued_bytes,
            queued_messages: 1,
            streams: 1,
            pending_streams: 0,
            slow_episodes: 1,
            conflated_updates: 0,
            do_not_conflate_dropped: 0,
        }
    }

    /// An idle node writes no stats line, though its own figures item updates every
    /// second; a client's traffic makes one, the node's own connection and item left
    /// out of it.
    #[test]
    fn the_nodes_own_figures_item_makes_no_stats_line() {
        use tickwire_proto::{Message, Update, UpdateType};
        let t0 = Instant::now();
        let mut core = Node::new(crate::config::NodeConfig::default().core_config(), t0);
        let mut item = crate::node_item::NodeItem::start(&mut core, t0);
        let second = Duration::from_secs(1);
        let mut log = StatsLog::new(second, &core, t0);
        for k in 1..=3 {
            item.tick(&mut core, t0 + k * second);
            assert_eq!(log.due(&core, t0 + k * second), None, "second {k}");
        }
        let publisher = crate::test_support::feed_publisher(&mut core, t0);
        let fields = tickwire_proto::FieldList::from_trusted(&[]);
        for seq in 1..=4 {
            let update = Update::new(1, seq, UpdateType::Other, fields);
            core.on_message(publisher, &Message::Update(update), t0);
        }
        item.tick(&mut core, t0 + 4 * second);
        let line = log.due(&core, t0 + 4 * second);
        assert_eq!(
            line,
            Some(Line {
                connections: 1,
                items: 1,
                updates_in_per_s: 4,
                updates_out_per_s: 0,
            })
        );
    }

    /// Thousands of subscribers behind at once make a stats line naming the ten with
    /// the longest queues and counting the rest, not one naming them all.
    #[test]
    fn the_stats_line_names_the_ten_longest_queues_behind_and_counts_the_rest() {
        assert_eq!(behind_text(vec![report(1, false, 5)]), "none");
        let reports: Vec<ConnectionReport> =
            (0..10_000).map(|i| report(i, i % 2 == 0, i * 10)).collect();
        let text = behind_text(reports);
        assert!(text.len() < 1_000, "{} bytes", text.len());
        assert!(
            text.starts_with("10.0.0.248:4000 (user9998, 99980 bytes queued), "),
            "{text}"
        );
        assert!(text.ends_with(" and 4990 more"), "{text}");
        let few = behind_text(vec![
            report(1, true, 5),
            report(2, true, 7),
            report(3, false, 9),
        ]);
        assert_eq!(
            few,
            "10.0.0.2:4000 (user2, 7 bytes queued), 10.0.0.1:4000 (user1, 5 bytes queued)"
        );
    }
}
