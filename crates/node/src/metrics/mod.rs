//! `GET /metrics` on the node's HTTP (WebSocket) port: the node's figures in the
//! OpenMetrics text format or the classic Prometheus text format, as the scraper's
//! `Accept` asks ([`format`](mod@format)), built with the `prometheus-client` crate; with the
//! standard `process_*` metrics ([`process`]) and `tickwire_build_info`.
//!
//! Nothing here is on the hot path: the core counts in plain integers on its own thread
//! (no atomics, no locks), and a scrape, handled on that same thread, reads them and
//! builds a registry of constant metrics for that one answer. Cardinality is bounded:
//! per-connection figures are given for the [`TOP_QUEUES`] longest queues only.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use tickwire_core::Node;

pub(crate) mod format;
mod process;

pub(crate) use format::Format;

/// The connections with the longest output queues shown one by one.
pub(crate) const TOP_QUEUES: usize = 10;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabel {
    service: PeerText,
}

/// A label value a peer chose (a service's name, a user's): escaped as the text
/// formats ask (`\\`, `\"`, `\n`). The `prometheus-client` crate writes label values
/// as they are, so a name holding a quote or a newline made the whole page unreadable
/// to the scraper, or added samples of the peer's making.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct PeerText(String);

impl EncodeLabelValue for PeerText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write;
        for c in self.0.chars() {
            match c {
                '\\' => encoder.write_str("\\\\")?,
                '"' => encoder.write_str("\\\"")?,
                '\n' => encoder.write_str("\\n")?,
                c => encoder.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DependencyLabel {
    dependency: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhereLabel {
    at: String,
}

/// One of the connections with the longest queues: its place (1 the longest), user and
/// role. Not its address: a label whose values are every peer's ephemeral port would
/// make a new series for every connection (the logs and the dashboard name the peer).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabel {
    rank: String,
    user: PeerText,
    role: String,
}

pub(crate) use crate::node_view::Extra;

/// A histogram whose buckets were counted elsewhere (the core's latency samples),
/// encoded as they are for one scrape.
#[derive(Debug)]
struct ConstHistogram {
    sum: f64,
    count: u64,
    /// (upper bound, samples in that bucket alone); the last bound is `f64::MAX` (+Inf).
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: String,
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

/// One value of each service, labelled with its name.
fn by_service<T>(
    services: &[tickwire_core::ServiceFigures],
    f: impl Fn(&tickwire_core::ServiceFigures) -> T,
) -> Vec<(ServiceLabel, T)> {
    services
        .iter()
        .map(|sf| {
            (
                ServiceLabel {
                    service: PeerText(sf.name.clone()),
                },
                f(sf),
            )
        })
        .collect()
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
pub(crate) fn render(core: &Node, extra: &Extra<'_>, format: Format) -> String {
    let mut root = Registry::default();
    process::register(&mut root);
    let r = root.sub_registry_with_prefix("tickwire");
    r.register(
        "build",
        "The node's version",
        prometheus_client::metrics::info::Info::new([("version", env!("CARGO_PKG_VERSION"))]),
    );
    let s = core.stats();
    let reports = core.connection_reports();

    // Readiness (what /readyz says).
    let checks = crate::readiness::checks(extra);
    gauge(
        r,
        "ready",
        "1 when the node is ready: the backbone link, upstream node and journal it has are there (as /readyz)",
        i64::from(checks.iter().all(|c| c.up)),
    );
    family(
        r,
        "dependency_up",
        "1 when the dependency is there: backbone (linked), upstream (logged in), journal (writable)",
        checks.iter().map(|c| {
            (
                DependencyLabel {
                    dependency: c.dependency.clone(),
                },
                i64::from(c.up),
            )
        }),
    );

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
        r,
        "connections",
        "Connections by role (the node's own internal publishers count as publishers)",
        roles
            .into_iter()
            .map(|(k, v)| (RoleLabel { role: k.into() }, v)),
    );
    counter(
        r,
        "connections_accepted",
        "Connections accepted",
        s.connections_accepted,
    );
    counter(r, "logins", "Logins accepted", s.logins);
    counter(
        r,
        "logins_refused",
        "Logins refused (credentials, entitlement, protocol version, a loop of nodes)",
        s.logins_refused,
    );
    counter(
        r,
        "logins_failed",
        "Logins whose secret or token failed its check (they throttle further attempts)",
        s.logins_failed,
    );
    counter(
        r,
        "idle_logins_closed",
        "Connections closed before logging in to make room for newer ones (limits.max_pending_logins)",
        s.idle_logins_closed,
    );
    counter(
        r,
        "internal_services_refused",
        "Services an upstream link or the backbone announced that the node did not take (another publisher's, or past limits.max_services)",
        s.internal_services_refused,
    );
    let (bytes_in, bytes_out) = crate::io_counters::totals();
    counter(
        r,
        "received_bytes",
        "Bytes read from connections (TCP and WebSocket; the plaintext under TLS)",
        bytes_in,
    );
    counter(
        r,
        "sent_bytes",
        "Bytes written to connections (TCP and WebSocket; the plaintext under TLS)",
        bytes_out,
    );
    counter_family(
        r,
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
    let services = core.service_figures();
    family(
        r,
        "service_up",
        "1 when the service has a publisher and is up, else 0",
        by_service(&services, |sf| sf.up as i64),
    );
    family(
        r,
        "service_items",
        "Items the node holds for the service",
        by_service(&services, |sf| sf.items as i64),
    );
    counter_family(
        r,
        "service_updates_in",
        "Updates received from the service's publisher",
        by_service(&services, |sf| sf.updates_in),
    );
    counter_family(
        r,
        "service_updates_out",
        "Updates of the service sent to subscribers",
        by_service(&services, |sf| sf.updates_out),
    );
    gauge(r, "items", "Items the node holds", core.item_count() as i64);

    // Data.
    counter(
        r,
        "updates_in",
        "Updates received from publishers",
        s.updates_in,
    );
    counter(
        r,
        "updates_out",
        "Updates sent to subscribers",
        s.updates_out,
    );
    counter(
        r,
        "refreshes_in",
        "Refreshes received from publishers",
        s.refreshes_in,
    );
    counter(
        r,
        "refreshes_out",
        "Refreshes sent to subscribers",
        s.refreshes_out,
    );
    counter(r, "requests", "Item requests from subscribers", s.requests);
    counter(
        r,
        "updates_on_unknown_streams",
        "Updates from publishers on streams the node does not know",
        s.updates_on_unknown_streams,
    );
    counter(
        r,
        "refreshes_on_closed_streams",
        "Refreshes from publishers on streams the node had closed (answers that crossed the close)",
        s.refreshes_on_closed_streams,
    );

    // Slow consumers.
    counter(
        r,
        "slow_consumer_episodes",
        "Times a subscriber fell behind and its updates started being conflated",
        s.slow_consumer_episodes,
    );
    counter(
        r,
        "conflated_updates",
        "Publisher updates merged into others for slow subscribers",
        s.conflated_updates,
    );
    counter(
        r,
        "dropped_updates",
        "Do-not-conflate updates a slow subscriber had no room for (it was told)",
        s.do_not_conflate_dropped,
    );
    gauge(
        r,
        "subscribers_behind",
        "Subscribers behind now (their updates conflated)",
        reports.iter().filter(|c| c.behind).count() as i64,
    );
    let mut longest: Vec<_> = reports.iter().filter(|c| c.queued_bytes > 0).collect();
    longest.sort_by_key(|c| std::cmp::Reverse(c.queued_bytes));
    longest.truncate(TOP_QUEUES);
    family(
        r,
        "connection_queued_bytes",
        "Bytes queued for the connections with the longest output queues (at most 10)",
        longest.iter().zip(1..).map(|(c, rank)| {
            (
                ConnectionLabel {
                    rank: rank.to_string(),
                    user: PeerText(c.user.clone()),
                    role: c.role.into(),
                },
                c.queued_bytes as i64,
            )
        }),
    );
    let mut highest: Vec<_> = reports
        .iter()
        .filter(|c| c.queued_bytes_high_water > 0)
        .collect();
    highest.sort_by_key(|c| std::cmp::Reverse(c.queued_bytes_high_water));
    highest.truncate(TOP_QUEUES);
    family(
        r,
        "connection_queue_high_water_bytes",
        "The most output queued for a connection when the node came to write it, for the \
         connections with the highest such marks (at most 10)",
        highest.iter().zip(1..).map(|(c, rank)| {
            (
                ConnectionLabel {
                    rank: rank.to_string(),
                    user: PeerText(c.user.clone()),
                    role: c.role.into(),
                },
                c.queued_bytes_high_water as i64,
            )
        }),
    );
    gauge(
        r,
        "queued_bytes",
        "Bytes queued for all connections",
        reports.iter().map(|c| c.queued_bytes as i64).sum(),
    );

    // Posts and the journal.
    let p = &s.posts;
    counter_family(
        r,
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
    if let Some(t) = extra.tls {
        counter_family(
            r,
            "tls_handshakes_refused",
            "New TLS connections closed before or in their handshake: past [tls] max_handshakes_per_s (rate), or because the handshakes' thread was behind (thread_behind)",
            [
                ("rate", t.refused_for_rate),
                ("thread_behind", t.refused_for_thread_behind),
            ]
            .map(|(k, v)| (ReasonLabel { reason: k.into() }, v)),
        );
        counter(
            r,
            "tls_handshake_sessions_processed",
            "Sessions the TLS handshakes' thread processed (a handshake takes two or three)",
            t.sessions_processed,
        );
    }
    if let Some(f) = extra.files {
        files(r, f);
        files_dropped(r, f, core, extra);
    }
    if let Some(j) = extra.journal.map(|j| &*j.figures) {
        counter(
            r,
            "journal_records",
            "Journal records written",
            j.records.load(Relaxed),
        );
        counter(
            r,
            "journal_commits",
            "Journal commits",
            j.commits.load(Relaxed),
        );
        counter(
            r,
            "journal_syscalls",
            "Journal write and fdatasync system calls",
            j.syscalls.load(Relaxed),
        );
        counter(
            r,
            "journal_segments_removed",
            "Old journal segments removed to stay within retain_mb",
            j.segments_removed.load(Relaxed),
        );
        counter(
            r,
            "journal_failures",
            "Journal records that could not be kept",
            p.journal_failures,
        );
    }

    counter(
        r,
        "websocket_updates_encoded",
        "Updates encoded as JSON for WebSocket clients",
        extra.websocket_updates_encoded,
    );
    counter(
        r,
        "websocket_updates_reused",
        "Updates sent to a WebSocket client with another client's encoding of them",
        extra.websocket_updates_reused,
    );

    // Latency of updates carrying the publisher's send time (sampled).
    let lat = core.latency();
    let bounds = tickwire_core::latency::BOUNDS_NS
        .iter()
        .map(|&b| b as f64 / 1e9)
        .chain([f64::MAX]);
    r.register(
        "update_latency_seconds",
        "Publisher's send time (TIM_TRK_1) to the node reading the update, one update \
         in 16 of those carrying it",
        ConstHistogram {
            sum: lat.sum_ns as f64 / 1e9,
            count: lat.count,
            buckets: bounds.zip(lat.counts.iter().copied()).collect(),
        },
    );
    counter(
        r,
        "update_stamps_ahead",
        "Sampled updates stamped later than the node's clock (the publisher's clock is ahead)",
        lat.ahead,
    );
    counter(
        r,
        "update_stamps_stale",
        "Sampled updates stamped more than an hour before the node's clock (no send time): not in the latency",
        lat.stale,
    );

    if let Some(b) = extra.backbone {
        backbone(r, b);
    }

    let mut out = String::with_capacity(8 * 1024);
    // Writing to a String does not fail.
    let _ = encode(&mut out, &root);
    match format {
        Format::OpenMetrics => out,
        Format::Text => format::classic_text(&out),
    }
}

/// A counter family's two samples, `direction="sent"` and `direction="received"`.
fn sent_and_received(sent: u64, received: u64) -> [(DirectionLabel, u64); 2] {
    [("sent", sent), ("received", received)].map(|(k, v)| {
        (
            DirectionLabel {
                direction: k.into(),
            },
            v,
        )
    })
}

/// The backbone's figures (PROTOCOL.md section 11; the Aeron driver's counters).
/// `[files]`: the sender's queue, chunks and rate; the receiver's files and chunks.
fn files(r: &mut Registry, thread: &crate::files::FilesThread) {
    let f = &*thread.figures;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    if f.sends {
        for (name, help, v) in [
            (
                "files_queued",
                "Files this node sends that some site still lacks",
                &f.queued_files,
            ),
            (
                "files_queued_bytes",
                "Bytes of those files",
                &f.queued_bytes,
            ),
            (
                "files_rate_bytes_per_second",
                "The files' sending rate now (rate_mb_per_s, less while the backbone loses)",
                &f.rate,
            ),
        ] {
            gauge(r, name, help, load(v) as i64);
        }
        for (name, help, v) in [
            (
                "files_chunks_sent",
                "File chunks sent, repairs included",
                &f.chunks_sent,
            ),
            (
                "files_chunks_repaired",
                "File chunks sent again for a site that missed them",
                &f.chunks_repaired,
            ),
            (
                "files_sent_bytes",
                "Bytes of the file chunks sent",
                &f.bytes_sent,
            ),
            (
                "files_rate_cuts",
                "Times the files' rate was cut for the backbone's loss",
                &f.rate_cuts,
            ),
            (
                "files_spool_syncs",
                "Syncs of the spool (bytes, directory, log) before files were said queued (fsync always or batch)",
                &f.spool_syncs,
            ),
            (
                "files_spool_sync_failures",
                "Spool syncs that failed: the uploads waiting for them were refused",
                &f.spool_sync_failures,
            ),
        ] {
            counter(r, name, help, load(v));
        }
    }
    if f.receives {
        counter_family(
            r,
            "files_received",
            "Files that arrived here: whole (checked and in the inbox), or failed",
            [("whole", &f.files_received), ("failed", &f.files_failed)]
                .map(|(k, v)| (ResultLabel { result: k.into() }, load(v))),
        );
        for (name, help, v) in [
            (
                "files_chunks_received",
                "File chunks taken",
                &f.chunks_received,
            ),
            (
                "files_chunks_duplicate",
                "File chunks that came again when already held",
                &f.chunks_duplicate,
            ),
            (
                "files_received_bytes",
                "Bytes of the file chunks taken",
                &f.bytes_received,
            ),
        ] {
            counter(r, name, help, load(v));
        }
    }
    for (name, help, v) in [
        (
            "files_malformed",
            "File-transfer messages that did not decode",
            load(&f.malformed),
        ),
        (
            "files_uploads_refused",
            "Uploads (files send) refused",
            load(&f.uploads_refused),
        ),
    ] {
        counter(r, name, help, v);
    }
    counter(
        r,
        "files_thread_restarts",
        "Times the files thread stopped (a panic) and was started again from its spool and inbox",
        thread.restarts,
    );
    gauge(
        r,
        "files_thread_running",
        "1 while the files thread runs (0: stopped, waiting to be started again)",
        i64::from(thread.is_running()),
    );
}

/// File-transfer messages dropped on their way, by where: each queue is bounded and
/// drops rather than holds the node (the transfers repair or repeat what was lost).
fn files_dropped(
    r: &mut Registry,
    thread: &crate::files::FilesThread,
    core: &Node,
    extra: &Extra<'_>,
) {
    let d = thread.drops();
    let mut at = vec![
        ("from_peers", core.stats().files_dropped),
        ("to_files_thread", d.to_thread),
        ("to_peers", d.to_peers),
    ];
    if extra.upstream.is_some() {
        at.push((
            "from_upstream",
            extra.upstream.map_or(0, |u| u.files_dropped()),
        ));
    }
    if extra.backbone.is_some() {
        at.extend([
            (
                "from_backbone",
                extra.backbone.map_or(0, |b| b.files_dropped),
            ),
            ("to_backbone_expired", d.expired),
            ("to_backbone_no_one", d.no_one),
        ]);
    }
    counter_family(
        r,
        "files_dropped",
        "File-transfer messages dropped, by where: a full queue from peers, the upstream or the backbone, the files thread behind (or stopped), a busy peer, a backbone message too old or with no node to take it (chunks are repaired; the rest is sent again)",
        at.into_iter().map(|(k, v)| (WhereLabel { at: k.into() }, v)),
    );
}

fn backbone(r: &mut Registry, b: &tickwire_backbone::BackboneFigures) {
    family(
        r,
        "backbone_role",
        "1 for the node's role on the backbone (source, edge, or both)",
        [(
            RoleLabel {
                role: b.role.into(),
            },
            1,
        )],
    );
    gauge(
        r,
        "backbone_edges",
        "Edges the source knows",
        b.edges as i64,
    );
    if let Some(edges) = b.driver.files_edges {
        gauge(
            r,
            "backbone_files_edges",
            "Edges whose pace the source's files follow (Aeron's min flow control group)",
            edges as i64,
        );
    }
    counter_family(
        r,
        "backbone_bytes",
        "Bytes the backbone's media driver sent and received",
        sent_and_received(b.driver.bytes_sent, b.driver.bytes_received),
    );
    counter_family(
        r,
        "backbone_naks",
        "Loss reports (NAKs) the media driver sent and received",
        sent_and_received(b.driver.naks_sent, b.driver.naks_received),
    );
    counter(
        r,
        "backbone_retransmits",
        "Retransmissions the media driver sent",
        b.driver.retransmits_sent,
    );
    counter(
        r,
        "backbone_invalid_packets",
        "Packets the media driver discarded as invalid",
        b.driver.invalid_packets,
    );
    counter(
        r,
        "backbone_reimages",
        "Items the edge asked for again after losing their source",
        b.reimages,
    );
    counter(
        r,
        "backbone_sources_lost",
        "Sources the edge lost (silent past the liveness time)",
        b.sources_lost,
    );
    counter(
        r,
        "backbone_link_restarts",
        "Times the backbone link was rebuilt",
        b.link_restarts,
    );
    counter(
        r,
        "backbone_new_sessions_refused",
        "SETUP frames of new Aeron senders the media driver dropped past [backbone] new_sessions_per_s (a flood, or many nodes joining at once)",
        b.driver.new_sessions_refused,
    );
    gauge(
        r,
        "backbone_authenticated",
        "1 when the backbone's messages are sealed and checked ([backbone] key_file)",
        i64::from(b.authenticated),
    );
    counter(
        r,
        "backbone_rejected",
        "Backbone messages dropped: not sealed with a key of the node, forged, replayed or stale",
        b.rejections.total(),
    );
    counter_family(
        r,
        "backbone_rejected_by_reason",
        "Backbone messages dropped, by reason",
        tickwire_backbone::Rejections::REASONS
            .iter()
            .zip(b.rejections.by_reason)
            .map(|(reason, n)| {
                (
                    ReasonLabel {
                        reason: (*reason).into(),
                    },
                    n,
                )
            }),
    );
}
