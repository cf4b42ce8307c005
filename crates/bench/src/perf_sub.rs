//! `tickwire-bench perf-sub`: the subscriber under load.
//!
//! Opens `--connections` subscriber connections (mounts) from one thread, requests items
//! per the commonality rule, and for every message decodes every field (as a real
//! consumer would), checks each stream's sequence numbers (a gap is counted when an
//! update's number is not the previous one plus its conflation count), measures image
//! retrieval time, update rate and latency (now minus TIM_TRK_1, the publisher's
//! intended send time) into HdrHistograms. With `--interval-ms` it also keeps a latency
//! time series (count, p50, p99 and max per interval) for the stall scenario.

use crate::load_flags::{FeedFlags, RunFlags};
use crate::stats::{pin, realtime_ns, self_usage, Latency, TIMESTAMP_FLOOR};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::LatencySummary;
use tickwire_client::{ConnectOptions, EventRef, RequestOptions, Subscriber};
use tickwire_proto::{fid, FieldList, Value};

/// How items are shared across connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum Commonality {
    /// Every connection requests every item (fan-out = connections).
    All,
    /// Items are split evenly across connections (fan-out 1).
    Partition,
    /// "Producer 50/50": connection c (0-based) of C requests item j when
    /// j mod C >= c, so item j is watched by (j mod C) + 1 connections and the average
    /// fan-out is (C + 1) / 2 (50.5 for 100 connections). Connection 0 watches every
    /// item, connection C-1 one item in C.
    #[value(name = "producer-50-50")]
    Producer5050,
}

impl Commonality {
    /// Whether connection `c` of `conns` requests item `j`.
    pub fn watches(self, c: usize, conns: usize, j: usize) -> bool {
        match self {
            Commonality::All => true,
            Commonality::Partition => j % conns == c,
            Commonality::Producer5050 => j % conns >= c,
        }
    }

    /// Streams `conns` connections open over `items` items (exactly: the average
    /// fan-out times the items is exact only when `conns` divides `items`).
    pub fn streams(self, conns: usize, items: usize) -> u64 {
        (0..items)
            .map(|j| (0..conns).filter(|&c| self.watches(c, conns, j)).count() as u64)
            .sum()
    }

    /// Average number of connections watching an item of `items` (perf-pub picks them
    /// alike). Producer 50/50's (C + 1) / 2 holds only where C divides the items: with
    /// 150 items and 100 connections it is 42.2, and 50.5 expected more than any node
    /// can deliver.
    pub fn fanout(self, conns: usize, items: usize) -> f64 {
        match self {
            Commonality::All => conns as f64,
            Commonality::Partition => 1.0,
            Commonality::Producer5050 => self.streams(conns, items) as f64 / items.max(1) as f64,
        }
    }
}

/// `tickwire-bench perf-sub`'s flags.
#[derive(clap::Args, Clone, Debug)]
pub struct PerfSubArgs {
    /// Node address (host:port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14002")]
    pub node: String,
    /// Who it logs in as and how it reaches a TLS node.
    #[command(flatten)]
    pub credentials: tickwire_client::Credentials,
    /// The watchlist, shared across the connections per `--commonality`.
    #[command(flatten)]
    pub feed: FeedFlags,
    /// Subscriber connections (mounts), all driven from one thread.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub connections: usize,
    /// How items are shared across connections.
    #[arg(long, value_enum, default_value = "all")]
    pub commonality: Commonality,
    /// Requests per second (0: all at once).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub request_rate: u64,
    /// `--duration` counts from connecting.
    #[command(flatten)]
    pub run: RunFlags,
    /// How to wait for data: `block` in poll(2), or `spin` (poll without sleeping: lower
    /// latency, one CPU busy).
    #[arg(long, value_name = "block|spin", default_value = "block")]
    pub wait: String,
    /// Read commands from standard input: `mark NAME` prints (JSON) the latency summary,
    /// updates and gaps since the previous mark; `quit` stops. Used by `tickwire bench`.
    #[arg(long)]
    pub control: bool,
    /// Also record latency per interval of this many milliseconds (count, p50, p99, max,
    /// updates), in the summary's `intervals` (at most 100,000 intervals are kept).
    #[arg(long, value_name = "MS")]
    pub interval_ms: Option<u64>,
}

/// Intervals kept at most with `--interval-ms` (50 ms: 83 minutes), so a long run's
/// memory stays bounded; later intervals are counted in `intervals_dropped`.
pub const MAX_INTERVALS: usize = 100_000;

/// One interval of the latency time series (`--interval-ms`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Start of the interval, nanoseconds since the Unix epoch (CLOCK_REALTIME, the
    /// clock of TIM_TRK_1, so the lab can place its own events on the same axis).
    pub start_unix_ns: u64,
    /// Updates received in the interval.
    pub updates: u64,
    /// Latency samples in the interval (0: the figures below are 0 and mean nothing).
    pub count: u64,
    /// Median latency of the interval, ns.
    pub p50_ns: u64,
    /// 99th percentile latency of the interval, ns.
    pub p99_ns: u64,
    /// Highest latency of the interval, ns.
    pub max_ns: u64,
}

/// What `mark NAME` prints: figures since the previous mark.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Mark {
    /// The name given with `mark NAME`.
    pub name: String,
    /// Seconds since the previous mark.
    pub seconds: f64,
    /// Updates received since the previous mark.
    pub updates: u64,
    /// Sequence gaps since the previous mark (an update whose number is not the
    /// previous one plus its conflation count).
    pub gaps: u64,
    /// Streams whose first complete image arrived since the previous mark.
    pub images: u64,
    /// Status messages received since the previous mark.
    pub statuses: u64,
    /// Updates merged away by conflation since the previous mark: the sum of
    /// (conflation count - 1) over updates whose count is above 1.
    #[serde(default)]
    pub conflated: u64,
    /// Times any connection was re-established (running total, not since the mark).
    #[serde(default)]
    pub reconnects: u64,
    /// Latency of the timestamped updates since the previous mark.
    pub latency: LatencySummary,
}

/// Figures for one phase of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phase {
    /// Length of the phase, seconds.
    pub seconds: f64,
    /// Updates received in the phase.
    pub updates: u64,
    /// Updates per second over the phase.
    pub update_rate: f64,
    /// Streams whose first complete image arrived in the phase.
    pub images: u64,
    /// Sequence gaps in the phase.
    pub gaps: u64,
    /// Latency of the phase's timestamped updates.
    pub latency: LatencySummary,
}

/// The summary printed at the end (JSON with `--json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubSummary {
    /// Subscriber connections (`--connections`).
    pub connections: usize,
    /// Streams open across all connections (item requests).
    pub streams: u64,
    /// Average connections watching an item, from `--commonality` (exactly streams / items
    /// when the connections divide the items).
    pub fanout: f64,
    /// Seconds from the first request to the last image.
    pub image_retrieval_s: Option<f64>,
    /// Streams whose complete image arrived (at most `streams`).
    pub images: u64,
    /// Updates received.
    pub updates: u64,
    /// Sequence gaps (an update whose number is not the previous one plus its conflation
    /// count).
    pub gaps: u64,
    /// Status messages received.
    pub statuses: u64,
    /// Updates merged away by conflation (sum of conflation count - 1).
    #[serde(default)]
    pub conflated: u64,
    /// Times a connection was re-established (e.g. after the node dropped it as a slow
    /// consumer).
    #[serde(default)]
    pub reconnects: u64,
    /// `--interval-ms`, if given.
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// The latency time series (empty without `--interval-ms`).
    #[serde(default)]
    pub intervals: Vec<Interval>,
    /// Intervals not kept beyond [`MAX_INTERVALS`].
    #[serde(default)]
    pub intervals_dropped: u64,
    /// Until every image arrived.
    pub startup: Phase,
    /// After every image arrived.
    pub steady: Phase,
    /// The whole run.
    pub overall: Phase,
    /// The tool's own CPU and memory (its JSON keys at this level).
    #[serde(flatten)]
    pub usage: crate::stats::ToolUsage,
}

/// Per-stream state: the last sequence number and whether an image came.
#[derive(Clone, Copy, Default)]
struct StreamState {
    seq: u32,
    image: bool,
}

struct Counters {
    updates: u64,
    images: u64,
    gaps: u64,
    statuses: u64,
    conflated: u64,
    /// Sum of decoded values, so decoding cannot be optimised away.
    checksum: i64,
}

impl Counters {
    fn counts(&self) -> Counts {
        Counts {
            updates: self.updates,
            images: self.images,
            gaps: self.gaps,
            statuses: self.statuses,
            conflated: self.conflated,
        }
    }
}

/// Running totals of a load subscriber (perf-sub or perf-ws-sub).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub updates: u64,
    pub images: u64,
    pub gaps: u64,
    pub statuses: u64,
    pub conflated: u64,
}

/// The `mark` and per-second lines both load subscribers print, so the lab reads them
/// the same way.
pub(crate) struct Reports {
    tool: &'static str,
    json: bool,
    /// When the previous mark was taken, and the totals then.
    mark_at: (Instant, Counts),
    /// Totals at the previous per-second line.
    last: Counts,
    t: u64,
    next: Instant,
}

impl Reports {
    pub(crate) fn new(tool: &'static str, json: bool, start: Instant) -> Self {
        Reports {
            tool,
            json,
            mark_at: (Instant::now(), Counts::default()),
            last: Counts::default(),
            t: 0,
            next: start + Duration::from_secs(1),
        }
    }

    /// Prints the figures since the previous mark (`mark NAME` on --control).
    pub(crate) fn mark(&mut self, name: String, c: Counts, reconnects: u64, latency: &mut Latency) {
        let now = Instant::now();
        let at = self.mark_at.1;
        let m = Mark {
            name,
            seconds: (now - self.mark_at.0).as_secs_f64(),
            updates: c.updates - at.updates,
            gaps: c.gaps - at.gaps,
            images: c.images - at.images,
            statuses: c.statuses - at.statuses,
            conflated: c.conflated - at.conflated,
            reconnects,
            latency: latency.summary(),
        };
        println!("{}", json!({"type": "mark", "role": "perf-sub", "mark": m}));
        latency.reset();
        self.mark_at = (now, c);
    }

    /// Once a second: the second's updates, images, gaps and latency.
    pub(crate) fn second_if_due(&mut self, now: Instant, c: Counts, second: &mut Latency) {
        if now < self.next {
            return;
        }
        self.t += 1;
        let t = self.t;
        let s = second.summary();
        let (du, di, dg) = (
            c.updates - self.last.updates,
            c.images - self.last.images,
            c.gaps - self.last.gaps,
        );
        self.last = c;
        if self.json {
            println!(
                "{}",
                json!({"type": "second", "role": "perf-sub", "t": t, "updates": du,
                       "total": c.updates, "images": di, "gaps": dg, "total_gaps": c.gaps,
                       "total_conflated": c.conflated,
                       "lat_count": s.count, "lat_mean_ns": s.mean_ns, "lat_p99_ns": s.p99_ns})
            );
        } else {
            println!(
                "{} t={t:>3}s updates {du:>9}/s images {di:>7} gaps {dg} latency mean {:>8.1} µs p99 {:>8.1} µs ({} samples)",
                self.tool,
                s.mean_ns / 1e3,
                s.p99_ns as f64 / 1e3,
                s.count
            );
        }
        second.reset();
        self.next += Duration::from_secs(1);
    }
}

/// Opens the connections, requests the items and counts every message until
/// `--duration` ends, `stop` is raised or `quit` comes on the control input; prints
/// per-second lines and the summary it returns.
pub fn run(args: PerfSubArgs, stop: Arc<AtomicBool>) -> Result<SubSummary> {
    pin(&args.run.cpus)?;
    crate::stats::precise_timers();
    if args.connections == 0 || args.feed.items == 0 {
        bail!("--connections and --items must be at least 1");
    }
    let mut subs = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let mut o = ConnectOptions::new(args.node.clone());
        o.application = "tickwire-perf-sub".into();
        args.credentials.apply(&mut o).map_err(anyhow::Error::msg)?;
        subs.push(
            Subscriber::connect(o)
                .with_context(|| format!("perf-sub: cannot connect to {}", args.node))?,
        );
    }
    // Requests in item order, round-robin over connections, paced by --request-rate.
    let mut plan: Vec<(usize, usize)> = Vec::new();
    for j in 0..args.feed.items {
        for c in 0..args.connections {
            if args.commonality.watches(c, args.connections, j) {
                plan.push((c, j));
            }
        }
    }
    let streams = plan.len() as u64;
    let mut state: Vec<Vec<StreamState>> = vec![vec![StreamState::default(); 1]; args.connections];
    let usage0 = self_usage();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.run.duration.max(0.0));
    let mut requested = 0usize;
    let mut c = Counters {
        updates: 0,
        images: 0,
        gaps: 0,
        statuses: 0,
        conflated: 0,
        checksum: 0,
    };
    let (mut overall, mut startup, mut steady, mut second) = (
        Latency::default(),
        Latency::default(),
        Latency::default(),
        Latency::default(),
    );
    let mut images_done_at: Option<Instant> = None;
    let mut at_images_done = (0u64, 0u64); // updates, gaps when the last image came
    let mut reports = Reports::new("perf-sub", args.run.json, start);
    let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(args.connections);
    let marks = control_channel(args.control, stop.clone());
    let mut since_mark = Latency::default();
    let mut series = match args.interval_ms {
        Some(0) => bail!("--interval-ms must be at least 1"),
        Some(ms) => Some(Series::new(ms, start)),
        None => None,
    };
    let poll_ms = match args.wait.as_str() {
        "block" => 10,
        "spin" => 0,
        other => bail!("--wait {other:?}: allowed values are block, spin"),
    };
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        // Requests due by now.
        let due = if args.request_rate == 0 {
            plan.len()
        } else {
            ((start.elapsed().as_secs_f64() * args.request_rate as f64) as usize).min(plan.len())
        };
        while requested < due {
            let (conn, j) = plan[requested];
            let sid = subs[conn].subscribe(
                &args.feed.service,
                &format!("SYM{j}"),
                RequestOptions::default(),
            )?;
            let v = &mut state[conn];
            if v.len() <= sid as usize {
                v.resize(sid as usize + 1, StreamState::default());
            }
            requested += 1;
        }
        // Wait for any connection to have data (or 10 ms), then drain the ready ones.
        pfds.clear();
        for s in &subs {
            pfds.push(libc::pollfd {
                fd: s.raw_fd().unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: valid pollfd array for the duration of the call.
        unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, poll_ms) };
        // Close the interval before reading: what is read now belongs to the interval in
        // which it was read.
        if let Some(s) = series.as_mut() {
            s.roll(Instant::now(), c.updates);
        }
        for (i, sub) in subs.iter_mut().enumerate() {
            if pfds[i].revents == 0 && pfds[i].fd >= 0 {
                continue;
            }
            let streams = &mut state[i];
            let in_startup = images_done_at.is_none();
            // A lost connection (no fd) is re-established inside dispatch, but only when
            // its deadline has not passed yet: with a zero timeout it never would be.
            // 1 ms lets it reconnect once its backoff is over, at a cost of at most 1 ms
            // per loop turn while disconnected.
            let wait = if pfds[i].fd < 0 {
                Duration::from_millis(1)
            } else {
                Duration::ZERO
            };
            sub.dispatch(wait, |e| match e {
                EventRef::Refresh(item, r) => {
                    let s = &mut streams[item.stream as usize];
                    if !s.image && r.complete {
                        s.image = true;
                        c.images += 1;
                    }
                    s.seq = r.seq;
                    for (_, v) in r.fields.iter() {
                        c.checksum = c.checksum.wrapping_add(value_sum(&v));
                    }
                }
                EventRef::Update(item, u) => {
                    c.updates += 1;
                    let k = u.conflation_count;
                    if k > 1 {
                        c.conflated += u64::from(k - 1);
                    }
                    let s = &mut streams[item.stream as usize];
                    let expected = s.seq.wrapping_add(u32::from(k.max(1)));
                    // A count of u16::MAX means "65535 or more updates merged": the exact
                    // jump is unknown, so it cannot be checked (and is not a gap). A count
                    // of 0 continues a conflated update too large for one message (same
                    // sequence number).
                    if u.seq != expected && k != u16::MAX && k != 0 {
                        c.gaps += 1;
                    }
                    s.seq = u.seq;
                    if let Some(lat) = read_update(u.fields, &mut c.checksum) {
                        overall.record(lat);
                        since_mark.record(lat);
                        second.record(lat);
                        if let Some(s) = series.as_mut() {
                            s.lat.record(lat);
                        }
                        if in_startup {
                            startup.record(lat);
                        } else {
                            steady.record(lat);
                        }
                    }
                }
                EventRef::Status(_, _) => c.statuses += 1,
                EventRef::Directory(_) | EventRef::Ack(_) | EventRef::Files(_) => {}
            })?;
        }
        if images_done_at.is_none() && requested == plan.len() && c.images >= streams {
            images_done_at = Some(Instant::now());
            at_images_done = (c.updates, c.gaps);
        }
        if let Some(rx) = &marks {
            while let Ok(name) = rx.try_recv() {
                let reconnects = subs.iter().map(|s| s.reconnects()).sum();
                reports.mark(name, c.counts(), reconnects, &mut since_mark);
            }
        }
        reports.second_if_due(Instant::now(), c.counts(), &mut second);
    }
    let total_s = start.elapsed().as_secs_f64();
    let u = self_usage();
    let (startup_part, steady_part) = split_at_images(
        total_s,
        (c.updates, c.gaps),
        images_done_at.map(|t| ((t - start).as_secs_f64(), at_images_done)),
    );
    let phase = |seconds: f64, updates: u64, images: u64, gaps: u64, lat: &Latency| Phase {
        seconds,
        updates,
        update_rate: updates as f64 / seconds.max(1e-9),
        images,
        gaps,
        latency: lat.summary(),
    };
    let (intervals, intervals_dropped) = match series {
        Some(s) => s.finish(Instant::now(), c.updates),
        None => (Vec::new(), 0),
    };
    let summary = SubSummary {
        connections: args.connections,
        streams,
        fanout: args.commonality.fanout(args.connections, args.feed.items),
        image_retrieval_s: images_done_at.map(|t| (t - start).as_secs_f64()),
        images: c.images,
        updates: c.updates,
        gaps: c.gaps,
        statuses: c.statuses,
        conflated: c.conflated,
        reconnects: subs.iter().map(|s| s.reconnects()).sum(),
        interval_ms: args.interval_ms,
        intervals,
        intervals_dropped,
        startup: phase(
            startup_part.0,
            startup_part.1,
            c.images,
            startup_part.2,
            &startup,
        ),
        steady: phase(steady_part.0, steady_part.1, 0, steady_part.2, &steady),
        overall: phase(total_s, c.updates, c.images, c.gaps, &overall),
        usage: crate::stats::ToolUsage::between(&usage0, &u, total_s),
    };
    if args.run.json {
        println!(
            "{}",
            json!({"type": "summary", "role": "perf-sub", "summary": summary, "checksum": c.checksum})
        );
    } else {
        print_summary(&summary);
    }
    Ok(summary)
}

/// A run's (seconds, updates, gaps) before and after its last image came: `totals` are
/// the run's updates and gaps, `images_done` when the last image came (seconds from the
/// start) and the totals then. A run that never had every image was all start-up: its
/// steady phase is empty (not every update in no time).
fn split_at_images(
    total_s: f64,
    totals: (u64, u64),
    images_done: Option<(f64, (u64, u64))>,
) -> ((f64, u64, u64), (f64, u64, u64)) {
    let (done_s, (updates, gaps)) = images_done.unwrap_or((total_s, totals));
    (
        (done_s, updates, gaps),
        (
            (total_s - done_s).max(0.0),
            totals.0 - updates,
            totals.1 - gaps,
        ),
    )
}

/// The latency time series of `--interval-ms`: a fixed grid of intervals from the start,
/// so a process that was stopped (SIGSTOP) shows the intervals it missed as empty ones.
struct Series {
    every: Duration,
    origin: Instant,
    origin_unix_ns: u64,
    /// Index of the current interval on the grid.
    slot: u64,
    lat: Latency,
    /// Updates received before the current interval.
    updates_before: u64,
    out: Vec<Interval>,
    dropped: u64,
}

impl Series {
    fn new(ms: u64, origin: Instant) -> Series {
        // The realtime clock read next to `origin` places the grid on TIM_TRK_1's clock.
        let origin_unix_ns = realtime_ns().saturating_sub(origin.elapsed().as_nanos() as u64);
        Series {
            every: Duration::from_millis(ms),
            origin,
            origin_unix_ns,
            slot: 0,
            lat: Latency::default(),
            updates_before: 0,
            out: Vec::new(),
            dropped: 0,
        }
    }

    fn slot_of(&self, now: Instant) -> u64 {
        ((now - self.origin).as_nanos() / self.every.as_nanos()) as u64
    }

    fn push(&mut self, slot: u64, updates: u64, lat: LatencySummary) {
        if self.out.len() >= MAX_INTERVALS {
            self.dropped += 1;
            return;
        }
        self.out.push(Interval {
            start_unix_ns: self.origin_unix_ns + slot * self.every.as_nanos() as u64,
            updates,
            count: lat.count,
            p50_ns: lat.p50_ns,
            p99_ns: lat.p99_ns,
            max_ns: lat.max_ns,
        });
    }

    /// Closes the current interval if `now` is past its end; intervals skipped entirely
    /// (nothing ran in them) are recorded empty.
    fn roll(&mut self, now: Instant, updates: u64) {
        let slot = self.slot_of(now);
        if slot <= self.slot {
            return;
        }
        let summary = self.lat.summary();
        self.push(self.slot, updates - self.updates_before, summary);
        let skipped = slot - self.slot - 1;
        // Bounded: past the cap, the skipped intervals are only counted.
        let room = (MAX_INTERVALS - self.out.len().min(MAX_INTERVALS)) as u64;
        for k in 0..skipped.min(room) {
            self.push(self.slot + 1 + k, 0, LatencySummary::default());
        }
        self.dropped += skipped - skipped.min(room);
        self.lat.reset();
        self.slot = slot;
        self.updates_before = updates;
    }

    /// The series, the last (partial) interval included.
    fn finish(mut self, now: Instant, updates: u64) -> (Vec<Interval>, u64) {
        self.roll(now, updates);
        let summary = self.lat.summary();
        self.push(self.slot, updates - self.updates_before, summary);
        (self.out, self.dropped)
    }
}

/// Prints the summary of a tool that stands in for perf-sub (perf-ws-sub,
/// perf-nats-sub): with `json`, the JSON line perf-sub's summary comes in, else
/// `TOOL: SUMMARY`.
pub(crate) fn print_stand_in_summary(json: bool, tool: &str, summary: serde_json::Value) {
    if json {
        println!(
            "{}",
            json!({"type": "summary", "role": "perf-sub", "summary": summary})
        );
    } else {
        println!("{tool}: {summary}");
    }
}

/// With `--control`: a thread reading `mark NAME` / `quit` lines from standard input.
pub(crate) fn control_channel(
    enabled: bool,
    stop: Arc<AtomicBool>,
) -> Option<std::sync::mpsc::Receiver<String>> {
    use std::io::BufRead;
    if !enabled {
        return None;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let mut words = line.split_whitespace();
            match words.next() {
                Some("mark") => {
                    let _ = tx.send(words.next().unwrap_or("").to_string());
                }
                Some("quit") => break,
                _ => eprintln!("perf-sub: unknown command {line:?} (mark NAME | quit)"),
            }
        }
        stop.store(true, Ordering::SeqCst);
    });
    Some(rx)
}

/// Decodes every field of an update, as a real consumer would (their sum goes into
/// `checksum`, so the decoding cannot be optimised away), and returns its latency: now
/// minus TIM_TRK_1, the publisher's intended send time, when the update carries one.
pub(crate) fn read_update(fields: FieldList<'_>, checksum: &mut i64) -> Option<u64> {
    let mut stamp = 0;
    for (f, v) in fields.iter() {
        *checksum = checksum.wrapping_add(value_sum(&v));
        if f == fid::TIM_TRK_1 {
            if let Value::UInt(ts) = v {
                stamp = ts;
            }
        }
    }
    (stamp >= TIMESTAMP_FLOOR).then(|| realtime_ns().saturating_sub(stamp))
}

fn value_sum(v: &Value<'_>) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::UInt(u) => *u as i64,
        Value::Real(r) => r.mantissa,
        Value::Time(t) => t.nanos_since_midnight as i64,
        Value::Enum(e) => *e as i64,
        Value::Ascii(s) | Value::Utf8(s) => s.len() as i64,
        Value::Date(d) => d.day as i64,
        Value::DateTime(d, t) => d.day as i64 + t.nanos_since_midnight as i64,
        Value::Buffer(b) => b.len() as i64,
        Value::Blank => 0,
    }
}

fn print_summary(s: &SubSummary) {
    println!(
        "perf-sub: {} connections, {} streams (fan-out {:.1}), images {} in {}, updates {}, gaps {}, statuses {}, conflated {}, reconnects {}",
        s.connections,
        s.streams,
        s.fanout,
        s.images,
        s.image_retrieval_s
            .map_or("(not all)".to_string(), |t| format!("{t:.2} s")),
        s.updates,
        s.gaps,
        s.statuses,
        s.conflated,
        s.reconnects
    );
    println!(
        "{:<8} {:>8} {:>11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "phase",
        "seconds",
        "updates/s",
        "count",
        "mean µs",
        "stddev",
        "min",
        "max",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "p99.99"
    );
    for (name, p) in [
        ("startup", &s.startup),
        ("steady", &s.steady),
        ("overall", &s.overall),
    ] {
        let l = &p.latency;
        let us = |ns: u64| ns as f64 / 1e3;
        println!(
            "{name:<8} {:>8.2} {:>11.0} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            p.seconds,
            p.update_rate,
            l.count,
            l.mean_ns / 1e3,
            l.stddev_ns / 1e3,
            us(l.min_ns),
            us(l.max_ns),
            us(l.p50_ns),
            us(l.p90_ns),
            us(l.p99_ns),
            us(l.p999_ns),
            us(l.p9999_ns)
        );
    }
    println!(
        "CPU {:.0}% ({:.2} s user, {:.2} s sys), peak RSS {:.1} MiB",
        s.usage.cpu_percent,
        s.usage.cpu_user_s,
        s.usage.cpu_sys_s,
        s.usage.peak_rss_bytes as f64 / 1048576.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_50_50_with_100_connections_has_fanout_50_5() {
        let conns = 100;
        let items = 10_000;
        let streams: usize = (0..items)
            .map(|j| {
                (0..conns)
                    .filter(|&c| Commonality::Producer5050.watches(c, conns, j))
                    .count()
            })
            .sum();
        assert_eq!(streams as f64 / items as f64, 50.5);
        assert_eq!(Commonality::Producer5050.fanout(conns, items), 50.5);
        // Partition: every item exactly once.
        let once = (0..items).all(|j| {
            (0..conns)
                .filter(|&c| Commonality::Partition.watches(c, conns, j))
                .count()
                == 1
        });
        assert!(once);
    }

    #[test]
    fn a_run_without_every_image_has_no_steady_phase() {
        // Images all in after 2 s, with 100 updates and 1 gap then.
        assert_eq!(
            split_at_images(10.0, (5_000, 3), Some((2.0, (100, 1)))),
            ((2.0, 100, 1), (8.0, 4_900, 2))
        );
        // Never all in: everything was start-up.
        assert_eq!(
            split_at_images(10.0, (5_000, 3), None),
            ((10.0, 5_000, 3), (0.0, 0, 0))
        );
    }

    #[test]
    fn the_fanout_is_what_the_connections_watch_of_the_items() {
        // 100 items watched by 1..100 connections, 50 by 1..50: 6,325 streams.
        let fanout = Commonality::Producer5050.fanout(100, 150);
        assert!((fanout - 6_325.0 / 150.0).abs() < 1e-9, "{fanout}");
        // Fewer items than connections: item j is watched by j + 1.
        assert_eq!(Commonality::Producer5050.fanout(100, 10), 5.5);
        for (conns, items) in [(100, 150), (7, 1000), (3, 2)] {
            let c = Commonality::Producer5050;
            let exact = c.streams(conns, items) as f64 / items as f64;
            assert!((c.fanout(conns, items) - exact).abs() < 1e-9);
        }
        assert_eq!(Commonality::All.fanout(4, 9), 4.0);
        assert_eq!(Commonality::Partition.fanout(4, 9), 1.0);
    }

    #[test]
    fn series_is_a_fixed_grid_with_skipped_intervals_empty() {
        let origin = Instant::now();
        let ms = Duration::from_millis;
        let mut s = Series::new(50, origin);
        s.lat.record(1_000);
        s.roll(origin + ms(10), 3);
        assert!(s.out.is_empty(), "still in the first interval");
        s.roll(origin + ms(60), 5);
        assert_eq!(s.out.len(), 1);
        assert_eq!((s.out[0].updates, s.out[0].count), (5, 1));
        // Stopped from 60 ms to 260 ms: intervals 2, 3 and 4 saw nothing.
        s.roll(origin + ms(260), 5);
        s.lat.record(2_000);
        let (out, dropped) = s.finish(origin + ms(270), 7);
        assert_eq!(dropped, 0);
        assert_eq!(out.len(), 6);
        for w in out.windows(2) {
            assert_eq!(w[1].start_unix_ns - w[0].start_unix_ns, 50_000_000);
        }
        assert!(out[1..5].iter().all(|i| i.count == 0 && i.updates == 0));
        assert_eq!((out[5].updates, out[5].count), (2, 1));
        assert!(out[5].p99_ns.abs_diff(2_000) <= 2, "{:?}", out[5]);
    }
}
