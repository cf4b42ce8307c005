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
            let behind: Vec<String> = core
                .connection_reports()
                .into_iter()
                .filter(|r| r.behind)
                .map(|r| format!("{} ({}, {} bytes queued)", r.peer, r.user, r.queued_bytes))
                .collect();
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
                behind = %if behind.is_empty() { "none".to_string() } else { behind.join(", ") },
                "stats"
            );
        }
        self.last = s;
        self.next = now + self.every;
    }
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
