//! What the node logs of its counters: a line every `stats_interval_s` while they
//! move, and the totals when it stops.

use std::time::{Duration, Instant};
use tickwire_backbone::Backbone;
use tickwire_core::{Node, Stats};
use tickwire_gateway::UpdateCache;

pub(super) struct StatsLog {
    every: Duration,
    next: Instant,
    last: Stats,
}

impl StatsLog {
    /// Every `every` (zero: never) from `start`.
    pub(super) fn new(every: Duration, core: &Node, start: Instant) -> Self {
        StatsLog {
            every,
            next: start + every,
            last: core.stats().clone(),
        }
    }

    /// Logs the rates since the last line, when due and something changed.
    pub(super) fn handle_timeout(&mut self, core: &Node, now: Instant) {
        if self.every == Duration::ZERO || now < self.next {
            return;
        }
        let s = core.stats().clone();
        let secs = (now - self.next + self.every).as_secs_f64();
        if s != self.last {
            let behind = behind_text(core.connection_reports());
            let last = &self.last;
            let per_s = |now: u64, then: u64| ((now - then) as f64 / secs).round() as u64;
            tracing::info!(
                connections = core.connection_count(),
                items = core.item_count(),
                updates_in_per_s = per_s(s.updates_in, last.updates_in),
                updates_out_per_s = per_s(s.updates_out, last.updates_out),
                refreshes_out = s.refreshes_out,
                conflated = s.conflated_updates,
                slow_consumer_disconnects = s.slow_consumer_disconnects,
                behind = %behind,
                "stats"
            );
        }
        self.last = s;
        self.next = now + self.every;
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
