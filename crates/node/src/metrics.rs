//! `GET /metrics` on the node's HTTP (WebSocket) port: the node's figures in the
//! OpenMetrics text format (which Prometheus reads), with the `prometheus-client`
//! crate.
//!
//! Nothing here is on the hot path: the core counts in plain integers on its own thread
//! (no atomics, no locks), and a scrape, handled on that same thread, reads them and
//! builds a registry of constant metrics for that one answer. Cardinality is bounded:
//! per-connection figures are given for the [`TOP_QUEUES`] longest queues only.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use tickwire_core::Node;

/// The connections with the longest output queues shown one by one.
pub const TOP_QUEUES: usize = 10;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabel {
    service: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabel {
    peer: String,
    user: String,
    role: String,
}

/// What the node knows beyond its core.
#[derive(Default)]
pub struct Extra<'a> {
    pub journal: Option<&'a crate::journal::JournalFigures>,
}

fn counter(r: &mut Registry, name: &str, help: &str, v: u64) {
    r.register(name, help, ConstCounter::new(v));
}

fn gauge(r: &mut Registry, name: &str, help: &str, v: i64) {
    r.register(name, help, ConstGauge::new(v));
}

fn family<
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
>(
    r: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, i64)>,
) {
    let f = Family::<L, Gauge>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).set(v);
    }
    r.register(name, help, f);
}

fn counter_family<
    L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static,
>(
    r: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, u64)>,
) {
    let f = Family::<L, prometheus_client::metrics::counter::Counter>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).inc_by(v);
    }
    r.register(name, help, f);
}

/// The metrics text for one scrape.
pub fn render(core: &Node, extra: &Extra<'_>) -> String {
    let mut r = Registry::with_prefix("tickwire");
    let s = core.stats();
    let reports = core.connection_reports();

    // Connections and sessions.
    let mut roles: std::collections::BTreeMap<&str, i64> =
        ["subscriber", "publisher", "login", "closing"]
            .into_iter()
            .map(|k| (k, 0))
            .collect();
    for c in &reports {
        *roles.entry(c.role).or_default() += 1;
    }
    family(
        &mut r,
        "connections",
        "Connections by role (the node's own internal publishers count as publishers)",
        roles
            .into_iter()
            .map(|(k, v)| (RoleLabel { role: k.into() }, v)),
    );
    counter(
        &mut r,
        "connections_accepted",
        "Connections accepted",
        s.connections_accepted,
    );
    counter(&mut r, "logins", "Logins accepted", s.logins);
    counter_family(
        &mut r,
        "disconnects",
        "Connections the node closed, by reason",
        [
            ("malformed", s.malformed_disconnects),
            ("protocol", s.protocol_disconnects),
            ("slow_consumer", s.slow_consumer_disconnects),
            ("heartbeat_timeout", s.heartbeat_timeouts),
        ]
        .map(|(k, v)| (ReasonLabel { reason: k.into() }, v)),
    );

    // Services and items.
    let services = core.services();
    family(
        &mut r,
        "service_up",
        "1 when the service has a publisher and is up, else 0",
        services.iter().map(|(name, up)| {
            (
                ServiceLabel {
                    service: name.clone(),
                },
                *up as i64,
            )
        }),
    );
    gauge(
        &mut r,
        "items",
        "Items the node holds",
        core.item_count() as i64,
    );

    // Data.
    counter(
        &mut r,
        "updates_in",
        "Updates received from publishers",
        s.updates_in,
    );
    counter(
        &mut r,
        "updates_out",
        "Updates sent to subscribers",
        s.updates_out,
    );
    counter(
        &mut r,
        "refreshes_in",
        "Refreshes received from publishers",
        s.refreshes_in,
    );
    counter(
        &mut r,
        "refreshes_out",
        "Refreshes sent to subscribers",
        s.refreshes_out,
    );
    counter(
        &mut r,
        "requests",
        "Item requests from subscribers",
        s.requests,
    );
    counter(
        &mut r,
        "updates_on_unknown_streams",
        "Updates from publishers on streams the node does not know",
        s.updates_on_unknown_streams,
    );

    // Slow consumers.
    counter(
        &mut r,
        "slow_consumer_episodes",
        "Times a subscriber fell behind and its updates started being conflated",
        s.slow_consumer_episodes,
    );
    counter(
        &mut r,
        "conflated_updates",
        "Publisher updates merged into others for slow subscribers",
        s.conflated_updates,
    );
    counter(
        &mut r,
        "dropped_updates",
        "Do-not-conflate updates a slow subscriber had no room for (it was told)",
        s.do_not_conflate_dropped,
    );
    gauge(
        &mut r,
        "subscribers_behind",
        "Subscribers behind now (their updates conflated)",
        reports.iter().filter(|c| c.behind).count() as i64,
    );
    let mut longest: Vec<_> = reports.iter().filter(|c| c.queued_bytes > 0).collect();
    longest.sort_by_key(|c| std::cmp::Reverse(c.queued_bytes));
    longest.truncate(TOP_QUEUES);
    family(
        &mut r,
        "connection_queued_bytes",
        "Bytes queued for the connections with the longest output queues (at most 10)",
        longest.iter().map(|c| {
            (
                ConnectionLabel {
                    peer: c.peer.clone(),
                    user: c.user.clone(),
                    role: c.role.into(),
                },
                c.queued_bytes as i64,
            )
        }),
    );
    gauge(
        &mut r,
        "queued_bytes",
        "Bytes queued for all connections",
        reports.iter().map(|c| c.queued_bytes as i64).sum(),
    );

    // Posts and the journal.
    let p = &s.posts;
    counter_family(
        &mut r,
        "posts",
        "Posts taken in, and answered: accepted, refused, refused for no answer in time",
        [
            ("received", p.posts_in),
            ("acked", p.acks_out),
            ("nakked", p.naks_out),
            ("timed_out", p.post_timeouts),
            ("redelivered", p.redelivered),
        ]
        .map(|(k, v)| (ResultLabel { result: k.into() }, v)),
    );
    if let Some(j) = extra.journal {
        counter(
            &mut r,
            "journal_records",
            "Journal records written",
            j.records.load(Relaxed),
        );
        counter(
            &mut r,
            "journal_commits",
            "Journal commits",
            j.commits.load(Relaxed),
        );
        counter(
            &mut r,
            "journal_syscalls",
            "Journal write and fdatasync system calls",
            j.syscalls.load(Relaxed),
        );
        counter(
            &mut r,
            "journal_failures",
            "Journal records that could not be kept",
            p.journal_failures,
        );
    }

    let mut out = String::with_capacity(8 * 1024);
    // Writing to a String does not fail.
    let _ = encode(&mut out, &r);
    out
}
