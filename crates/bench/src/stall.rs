//! `tickwire bench stall`: one of several subscribers stops, then the node itself.
//!
//! A node (cache on), one perf-pub and N perf-sub processes (one connection each, every
//! item of the watchlist). At a steady rate: a baseline, SIGSTOP of one perf-sub for a
//! few seconds, a recovery phase, SIGSTOP of the node for a moment, another recovery
//! phase. The healthy subscribers' latency per phase (perf-sub marks) and per interval
//! (perf-sub `--interval-ms`) shows whether one stopped consumer or a short node pause
//! hurts the others, and for how long. docs/BENCHMARKS.md defines every figure.

use crate::lab::{controlled, controlled_perf_sub, start_node, wait_for_images, Proc};
use crate::perf_sub::{Interval, Mark as SubMark, SubSummary};
use crate::stats::realtime_ns;
use crate::sysinfo::{sample_process, MonitorOptions, ProcessMonitor};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::{
    ProcessUsage, Stall, StallEvent, StallPhase, StallPoint, StallTarget, StoppedSubscriber,
};

/// An interval is "back to baseline" when its p99 is at most this times the subscriber's
/// p99 over the baseline phase.
pub const RECOVERY_FACTOR: f64 = 1.5;
/// ... and recovery needs this many such intervals in a row (one good interval between
/// bad ones is not recovery).
pub const RECOVERY_RUN: usize = 3;
/// Target: the healthy subscribers' p99 while one subscriber is stopped, at most this
/// times their baseline p99.
pub const STALL_P99_FACTOR: f64 = 2.0;
/// Target: recovery within this long after SIGCONT.
pub const RECOVERY_TARGET_MS: f64 = 1000.0;
/// Target: the publisher's send rate while a subscriber is stopped, at least this
/// fraction of its baseline rate ("unchanged", within the lab's 1% schedule tolerance).
pub const PUBLISHER_RATE_FRACTION: f64 = 0.99;

/// The timeline and the load of one stall run.
#[derive(Debug, Clone)]
pub struct StallPlan {
    /// Updates per second asked of the publisher.
    pub rate: u64,
    /// Items the publisher publishes and every subscriber watches.
    pub items: usize,
    /// perf-sub processes (the first is the one stopped); at least 2.
    pub subscribers: usize,
    /// At the rate, before the baseline (not measured).
    pub settle_s: f64,
    /// Seconds of the baseline phase, the reference for recovery and the targets.
    pub baseline_s: f64,
    /// How long the subscriber is stopped.
    pub stall_s: f64,
    /// Each recovery phase (after the subscriber, after the node).
    pub after_s: f64,
    /// How long the node is stopped.
    pub node_pause_ms: u64,
    /// The `node_pause` phase runs from the node's SIGSTOP until this long after its
    /// SIGCONT.
    pub pause_tail_s: f64,
    /// perf-sub `--interval-ms`.
    pub interval_ms: u64,
    /// Timestamped updates per second (perf-pub `--latency-rate`): enough that a 50 ms
    /// interval holds hundreds of samples per subscriber.
    pub latency_rate: u64,
}

/// Process usage of one phase, for results.json's `processes`.
pub struct PhaseUsage {
    /// The phase's name.
    pub phase: String,
    /// CPU and memory of each process of the run over the phase.
    pub usage: Vec<ProcessUsage>,
}

/// The definition of recovery, in words, for results.json and the report.
pub fn recovery_rule(interval_ms: u64) -> String {
    format!(
        "time from SIGCONT to the start of the first of {RECOVERY_RUN} consecutive {interval_ms} ms intervals (intervals without samples skipped) whose p99 is at most {RECOVERY_FACTOR} x the subscriber's baseline p99; 0 if the interval in progress at SIGCONT already starts such a run; for the healthy subscribers, the slowest of them"
    )
}

/// Milliseconds from `resume_ns` until the latency is back to `baseline_p99`: the start of
/// the first interval, among those ending after `resume_ns` and starting before
/// `until_ns`, that begins a run of [`RECOVERY_RUN`] consecutive intervals with samples
/// whose p99 is at most [`RECOVERY_FACTOR`] x `baseline_p99`. Intervals without samples
/// neither break nor extend a run (nothing was measured). 0 when the interval in
/// progress at `resume_ns` begins such a run. None when there is no such run (or no
/// baseline).
pub fn recovery_ms(
    intervals: &[Interval],
    interval_ms: u64,
    baseline_p99: u64,
    resume_ns: u64,
    until_ns: u64,
) -> Option<f64> {
    if baseline_p99 == 0 {
        return None;
    }
    let limit = baseline_p99 as f64 * RECOVERY_FACTOR;
    let len_ns = interval_ms * 1_000_000;
    let mut run_start: Option<u64> = None;
    let mut run = 0;
    for i in intervals
        .iter()
        .filter(|i| i.start_unix_ns + len_ns > resume_ns && i.start_unix_ns < until_ns)
        .filter(|i| i.count > 0)
    {
        if i.p99_ns as f64 <= limit {
            run_start.get_or_insert(i.start_unix_ns);
            run += 1;
            if run >= RECOVERY_RUN {
                let start = run_start.unwrap_or(i.start_unix_ns);
                return Some(start.saturating_sub(resume_ns) as f64 / 1e6);
            }
        } else {
            run_start = None;
            run = 0;
        }
    }
    None
}

/// Stops a process with SIGSTOP and continues it with SIGCONT when resumed or dropped,
/// so an error in between never leaves a process stopped.
struct Stopped {
    pid: i32,
    what: String,
    resumed: bool,
}

fn signal(pid: i32, sig: libc::c_int, what: &str) -> Result<()> {
    // SAFETY: kill(2) on a child process this lab started and still holds.
    if unsafe { libc::kill(pid, sig) } != 0 {
        bail!(
            "cannot send signal {sig} to {what} (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

impl Stopped {
    fn stop(pid: u32, what: &str) -> Result<Stopped> {
        let pid = i32::try_from(pid).with_context(|| format!("{what}: pid {pid} out of range"))?;
        signal(pid, libc::SIGSTOP, what)?;
        Ok(Stopped {
            pid,
            what: what.to_string(),
            resumed: false,
        })
    }

    /// SIGCONT; returns the realtime clock just after.
    fn resume(mut self) -> Result<u64> {
        self.resumed = true;
        signal(self.pid, libc::SIGCONT, &self.what)?;
        Ok(realtime_ns())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = signal(self.pid, libc::SIGCONT, &self.what);
        }
    }
}

struct PubMark {
    total: u64,
    max_lag_ms: f64,
}

/// Asks the publisher and `subs` for their counters (`mark`): requests go out to all
/// first, so the replies describe nearly the same instant.
fn take_marks(
    publisher: &mut Proc,
    subs: &mut [Proc],
    name: &str,
) -> Result<(PubMark, Vec<SubMark>)> {
    publisher.send("mark")?;
    for s in subs.iter_mut() {
        s.send(&format!("mark {name}"))?;
    }
    let p = publisher.expect("mark", Duration::from_secs(30))?;
    let total = p["total"]
        .as_u64()
        .ok_or_else(|| anyhow!("perf-pub's mark has no total: {p}"))?;
    let max_lag_ms = p["max_lag_ms"].as_f64().unwrap_or(0.0);
    let mut marks = Vec::with_capacity(subs.len());
    for s in subs.iter_mut() {
        let v = s.expect("mark", Duration::from_secs(30))?;
        let m: SubMark = serde_json::from_value(v["mark"].clone())
            .with_context(|| format!("{}: unreadable mark {v}", s.name))?;
        marks.push(m);
    }
    Ok((PubMark { total, max_lag_ms }, marks))
}

/// The highest p99 latency among the healthy subscribers' marks, ns.
fn healthy_p99_ns(marks: &[SubMark]) -> u64 {
    marks.iter().map(|x| x.latency.p99_ns).max().unwrap_or(0)
}

/// Asks a perf-sub to quit and returns its summary (with the interval series).
fn quit_with_summary(sub: &mut Proc) -> Result<SubSummary> {
    sub.send("quit")?;
    let v = sub.expect("summary", Duration::from_secs(30))?;
    serde_json::from_value(v["summary"].clone())
        .with_context(|| format!("{}: unreadable summary", sub.name))
}

fn sleep_s(s: f64) {
    std::thread::sleep(Duration::from_secs_f64(s.max(0.0)));
}

/// Everything a stall run produced.
pub struct StallRun {
    /// What was measured (results.json's `stall`).
    pub stall: Stall,
    /// Each phase's process usage.
    pub processes: Vec<PhaseUsage>,
    /// The command lines of the node, the publisher and the subscribers.
    pub commands: Vec<String>,
}

/// Runs the stall timeline with its own node, publisher and subscribers (stopped after).
pub fn run(
    programs: &crate::lab::Programs,
    logs: &Path,
    plan: &StallPlan,
    monitor_options: MonitorOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<StallRun> {
    if plan.subscribers < 2 {
        bail!(
            "--stall-subscribers {}: at least 2 (one stopped, the others healthy)",
            plan.subscribers
        );
    }
    if plan.items == 0 {
        bail!("--stall-items must be at least 1");
    }
    if plan.interval_ms == 0 {
        bail!("--stall-interval-ms must be at least 1");
    }
    let node_args: Vec<String> = ["--cache", "on", "--heartbeat-ms", "5000"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (node, addr) = start_node(&programs.node, "node-stall", &node_args, logs)?;
    let items = plan.items.to_string();
    // The publisher starts at rate 0: nothing is sent before the first (quiet) mark, so
    // sent and received counts of the whole scenario can be compared exactly.
    let pub_args = controlled(
        "perf-pub",
        &[
            "--node",
            &addr,
            "--items",
            &items,
            "--update-rate",
            "0",
            "--tick-rate",
            "1000",
            "--latency-rate",
            &plan.latency_rate.to_string(),
        ],
    );
    let mut publisher = Proc::spawn(&programs.lab, "perf-pub-stall", &pub_args, logs)?;
    publisher.expect("second", Duration::from_secs(120))?;
    let interval = plan.interval_ms.to_string();
    let sub_args = controlled_perf_sub(&addr, &items, "1", "all", &["--interval-ms", &interval]);
    let mut subs = Vec::with_capacity(plan.subscribers);
    for i in 0..plan.subscribers {
        subs.push(Proc::spawn(
            &programs.lab,
            &format!("perf-sub-stall-{i}"),
            &sub_args,
            logs,
        )?);
    }
    for s in subs.iter_mut() {
        wait_for_images(s, plan.items as u64, "stall")?;
    }
    let mut commands = vec![node.command.clone(), publisher.command.clone()];
    commands.extend(subs.iter().map(|s| s.command.clone()));
    let mut pids = vec![
        (node.name.clone(), node.pid()),
        (publisher.name.clone(), publisher.pid()),
    ];
    pids.extend(subs.iter().map(|s| (s.name.clone(), s.pid())));
    let monitor = ProcessMonitor::start_with(&pids, monitor_options);

    // Subscriber 0 is the one stopped; 1.. are the healthy ones.
    let (start_pub, _) = take_marks(&mut publisher, &mut subs, "warmup")?;
    publisher.send(&format!("rate {}", plan.rate))?;
    sleep_s(plan.settle_s);
    let (settle_pub, settle) = take_marks(&mut publisher, &mut subs, "settle")?;
    let origin = realtime_ns();
    let t_ms = |ns: u64| (ns as f64 - origin as f64) / 1e6;
    let mut bounds = vec![(Instant::now(), monitor.mark())];
    // (name, publisher mark, healthy subscribers' marks)
    let mut phase_marks: Vec<(&str, PubMark, Vec<SubMark>)> = Vec::new();
    let mut events = Vec::new();
    let mut pub_before = settle_pub.total;

    sleep_s(plan.baseline_s);
    let (p, mut m) = take_marks(&mut publisher, &mut subs, "baseline")?;
    bounds.push((Instant::now(), monitor.mark()));
    let stopped_baseline = m.remove(0);
    let mut phase_progress = |what: &str, m: &[SubMark]| {
        progress(&format!(
            "stall: {what}, healthy p99 {:.0} µs",
            healthy_p99_ns(m) as f64 / 1e3
        ))
    };
    phase_progress(&format!("baseline at {} updates/s", plan.rate), &m);
    phase_marks.push(("baseline", p, m));

    let stopped = Stopped::stop(subs[0].pid(), &subs[0].name)?;
    let sub_stop_ns = realtime_ns();
    events.push(StallEvent {
        name: "subscriber SIGSTOP".into(),
        t_ms: t_ms(sub_stop_ns),
    });
    sleep_s(plan.stall_s);
    // The phase closes while the subscriber is still stopped.
    let marks = take_marks(&mut publisher, &mut subs[1..], "subscriber_stall");
    let sub_cont_ns = stopped.resume()?;
    let (p, m) = marks?;
    bounds.push((Instant::now(), monitor.mark()));
    events.push(StallEvent {
        name: "subscriber SIGCONT".into(),
        t_ms: t_ms(sub_cont_ns),
    });
    let stopped_s = (sub_cont_ns - sub_stop_ns) as f64 / 1e9;
    phase_progress(&format!("subscriber 0 stopped {stopped_s:.1} s"), &m);
    phase_marks.push(("subscriber_stall", p, m));

    sleep_s(plan.after_s);
    let (p, m) = take_marks(&mut publisher, &mut subs[1..], "after_subscriber")?;
    bounds.push((Instant::now(), monitor.mark()));
    phase_marks.push(("after_subscriber", p, m));

    let stopped = Stopped::stop(node.pid(), "the node")?;
    let node_stop_ns = realtime_ns();
    std::thread::sleep(Duration::from_millis(plan.node_pause_ms));
    let node_cont_ns = stopped.resume()?;
    events.push(StallEvent {
        name: "node SIGSTOP".into(),
        t_ms: t_ms(node_stop_ns),
    });
    events.push(StallEvent {
        name: "node SIGCONT".into(),
        t_ms: t_ms(node_cont_ns),
    });
    sleep_s(plan.pause_tail_s);
    let (p, m) = take_marks(&mut publisher, &mut subs[1..], "node_pause")?;
    bounds.push((Instant::now(), monitor.mark()));
    let stopped_ms = (node_cont_ns - node_stop_ns) as f64 / 1e6;
    phase_progress(&format!("node stopped {stopped_ms:.0} ms"), &m);
    phase_marks.push(("node_pause", p, m));

    sleep_s(plan.after_s);
    let (p, m) = take_marks(&mut publisher, &mut subs[1..], "after_node")?;
    bounds.push((Instant::now(), monitor.mark()));
    let end_ns = realtime_ns();
    phase_marks.push(("after_node", p, m));

    // A quiet end: nothing in flight, so sent minus received is what was lost.
    publisher.send("rate 0")?;
    sleep_s(1.0);
    let (end_pub, drain) = take_marks(&mut publisher, &mut subs[1..], "drain")?;
    let node_peak_rss_bytes = sample_process(node.pid())
        .map(|s| s.vm_hwm_bytes)
        .context("cannot read the node's /proc status")?;

    let mut summaries = Vec::with_capacity(subs.len());
    for s in subs.iter_mut() {
        // The stopped subscriber may have died; the run still reports the others.
        summaries.push(quit_with_summary(s));
    }
    for s in subs {
        s.stop()?;
    }
    publisher.stop()?;
    node.stop()?;

    // Phases.
    let mut phases = Vec::new();
    for (k, (name, p, m)) in phase_marks.iter().enumerate() {
        let (t0, mark0) = bounds[k];
        let (t1, mark1) = bounds[k + 1];
        let seconds = (t1 - t0).as_secs_f64();
        let sent = p.total.saturating_sub(pub_before);
        pub_before = p.total;
        let usage = monitor.usage_between(mark0, mark1);
        let node_usage = usage.iter().find(|u| u.name == "node-stall");
        phases.push(StallPhase {
            name: name.to_string(),
            seconds,
            publisher_sent: sent,
            publisher_per_s: sent as f64 / seconds.max(1e-9),
            publisher_max_lag_ms: p.max_lag_ms,
            healthy_updates: m.iter().map(|x| x.updates).sum(),
            healthy_gaps: m.iter().map(|x| x.gaps).sum(),
            healthy_conflated: m.iter().map(|x| x.conflated).sum(),
            healthy_p99_ns: healthy_p99_ns(m),
            healthy_max_ns: m.iter().map(|x| x.latency.max_ns).max().unwrap_or(0),
            node_max_rss_bytes: node_usage.map_or(0, |u| u.max_sampled_rss_bytes),
            node_cpu_percent: node_usage.map_or(0.0, |u| u.cpu_percent),
            healthy: m.iter().map(|x| x.latency).collect(),
        });
    }
    let processes = phases
        .iter()
        .enumerate()
        .map(|(k, ph)| PhaseUsage {
            phase: ph.name.clone(),
            usage: monitor.usage_between(bounds[k].1, bounds[k + 1].1),
        })
        .collect();
    let p99 = |name: &str| {
        phases
            .iter()
            .find(|p| p.name == name)
            .map_or(0, |p| p.healthy_p99_ns)
    };
    let per_s = |name: &str| {
        phases
            .iter()
            .find(|p| p.name == name)
            .map_or(0.0, |p| p.publisher_per_s)
    };

    // Loss and gaps of the healthy subscribers, from the quiet start to the quiet end.
    let sent_total = end_pub.total.saturating_sub(start_pub.total);
    let healthy = plan.subscribers - 1;
    let mut healthy_lost = 0i64;
    let mut healthy_conflated = 0u64;
    let mut healthy_gaps = 0u64;
    for h in 0..healthy {
        // Healthy subscriber h is subs[h + 1]; the phase marks hold the healthy ones only.
        let phase_sum =
            |f: fn(&SubMark) -> u64| phase_marks.iter().map(|(_, _, m)| f(&m[h])).sum::<u64>();
        let received = settle[h + 1].updates + phase_sum(|m| m.updates) + drain[h].updates;
        let merged = settle[h + 1].conflated + phase_sum(|m| m.conflated) + drain[h].conflated;
        healthy_conflated += merged;
        healthy_lost += sent_total as i64 - received as i64 - merged as i64;
        healthy_gaps += settle[h + 1].gaps + phase_sum(|m| m.gaps) + drain[h].gaps;
    }
    let healthy_reconnects = drain.iter().map(|m| m.reconnects).sum();

    // Recovery, from the interval series.
    let interval_ms = plan.interval_ms;
    let mut recovery: Option<f64> = Some(0.0);
    for (h, s) in summaries.iter().enumerate().skip(1) {
        let baseline = phase_marks[0].2[h - 1].latency.p99_ns;
        let r = match s {
            Ok(s) => recovery_ms(&s.intervals, interval_ms, baseline, node_cont_ns, end_ns),
            Err(_) => None,
        };
        recovery = match (recovery, r) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }
    for (h, s) in summaries.iter().enumerate().skip(1) {
        if let Err(e) = s {
            bail!("healthy subscriber {h} gave no summary: {e:#}");
        }
    }
    let stopped_summary = summaries[0].as_ref().ok();
    let stopped_recovery = stopped_summary.and_then(|s| {
        recovery_ms(
            &s.intervals,
            interval_ms,
            stopped_baseline.latency.p99_ns,
            sub_cont_ns,
            node_stop_ns,
        )
    });
    let stopped_subscriber = match stopped_summary {
        Some(s) => StoppedSubscriber {
            updates: s.updates,
            gaps: s.gaps,
            conflated: s.conflated,
            statuses: s.statuses,
            reconnects: s.reconnects,
            baseline_p99_ns: stopped_baseline.latency.p99_ns,
            recovery_ms: stopped_recovery,
            exited: false,
        },
        None => StoppedSubscriber {
            baseline_p99_ns: stopped_baseline.latency.p99_ns,
            exited: true,
            ..StoppedSubscriber::default()
        },
    };
    let conflated_updates = summaries
        .iter()
        .filter_map(|s| s.as_ref().ok())
        .map(|s| s.conflated)
        .sum();

    // The time series on one grid: each perf-sub has its own, aligned to the interval.
    let len_ns = interval_ms as f64 * 1e6;
    let mut grid: BTreeMap<i64, StallPoint> = BTreeMap::new();
    for (i, s) in summaries.iter().enumerate() {
        let Ok(s) = s else { continue };
        for iv in &s.intervals {
            let slot = ((iv.start_unix_ns as f64 - origin as f64) / len_ns).round() as i64;
            if slot < 0 || iv.start_unix_ns > end_ns {
                continue;
            }
            let pt = grid.entry(slot).or_insert_with(|| StallPoint {
                t_ms: slot as f64 * interval_ms as f64,
                ..StallPoint::default()
            });
            if i == 0 {
                pt.stopped_p99_ns = iv.p99_ns;
                pt.stopped_count = iv.count;
            } else if iv.count > 0 {
                pt.healthy_p99_ns = pt.healthy_p99_ns.max(iv.p99_ns);
                pt.healthy_count += iv.count;
            }
        }
    }
    for (k, (name, _, _)) in phase_marks.iter().enumerate() {
        events.push(StallEvent {
            name: format!("end of {name}"),
            t_ms: (bounds[k + 1].0 - bounds[0].0).as_secs_f64() * 1e3,
        });
    }
    events.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));

    let baseline_p99_ns = p99("baseline");
    let stall_p99_ns = p99("subscriber_stall");
    let publisher_baseline_per_s = per_s("baseline");
    let publisher_stall_per_s = per_s("subscriber_stall");
    let ms = |v: Option<f64>| v.map_or("not recovered".to_string(), |v| format!("{v:.0} ms"));
    let targets = vec![
        StallTarget {
            name: "healthy p99 while a subscriber is stopped".into(),
            target: format!("<= {STALL_P99_FACTOR} x baseline p99"),
            value: format!(
                "{:.0} µs vs {:.0} µs ({:.2}x)",
                stall_p99_ns as f64 / 1e3,
                baseline_p99_ns as f64 / 1e3,
                stall_p99_ns as f64 / (baseline_p99_ns as f64).max(1.0)
            ),
            pass: baseline_p99_ns > 0
                && stall_p99_ns as f64 <= STALL_P99_FACTOR * baseline_p99_ns as f64,
        },
        StallTarget {
            name: "healthy recovery after the node pause".into(),
            target: format!("<= {RECOVERY_TARGET_MS} ms"),
            value: ms(recovery),
            pass: recovery.is_some_and(|r| r <= RECOVERY_TARGET_MS),
        },
        StallTarget {
            name: "stopped subscriber's recovery".into(),
            target: format!("<= {RECOVERY_TARGET_MS} ms"),
            value: ms(stopped_recovery),
            pass: stopped_recovery.is_some_and(|r| r <= RECOVERY_TARGET_MS),
        },
        StallTarget {
            name: "healthy subscribers: zero loss".into(),
            target: "0 gaps, 0 lost, 0 reconnects".into(),
            value: format!(
                "{healthy_gaps} gaps, {healthy_lost} lost, {healthy_reconnects} reconnects"
            ),
            pass: healthy_gaps == 0 && healthy_lost == 0 && healthy_reconnects == 0,
        },
        StallTarget {
            name: "publisher's send rate while a subscriber is stopped".into(),
            target: format!("unchanged (>= {PUBLISHER_RATE_FRACTION} x baseline)"),
            value: format!("{publisher_stall_per_s:.0}/s vs {publisher_baseline_per_s:.0}/s"),
            pass: publisher_stall_per_s >= PUBLISHER_RATE_FRACTION * publisher_baseline_per_s,
        },
    ];
    let pass = targets.iter().all(|t| t.pass);
    let stall = Stall {
        rate: plan.rate,
        items: plan.items,
        subscribers: plan.subscribers,
        healthy_subscribers: healthy,
        cache: "on".into(),
        interval_ms,
        subscriber_stopped_ms: (sub_cont_ns.saturating_sub(sub_stop_ns)) as f64 / 1e6,
        node_stopped_ms: (node_cont_ns.saturating_sub(node_stop_ns)) as f64 / 1e6,
        baseline_p99_ns,
        stall_p99_ns,
        after_subscriber_p99_ns: p99("after_subscriber"),
        node_pause_p99_ns: p99("node_pause"),
        after_node_p99_ns: p99("after_node"),
        recovery_ms: recovery,
        subscriber_recovery_ms: stopped_recovery,
        recovery_rule: recovery_rule(interval_ms),
        healthy_gaps,
        healthy_lost,
        healthy_conflated,
        healthy_reconnects,
        node_peak_rss_bytes,
        conflated_updates,
        stopped_subscriber_disconnected: stopped_subscriber.reconnects > 0,
        stopped_subscriber,
        publisher_baseline_per_s,
        publisher_stall_per_s,
        phases,
        events,
        series: grid.into_values().collect(),
        targets,
        pass,
        ..Stall::default()
    };
    Ok(StallRun {
        stall,
        processes,
        commands,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Intervals of 50 ms from t = 1,000 ms with the given p99s (0: no samples).
    fn series(p99s: &[u64]) -> Vec<Interval> {
        p99s.iter()
            .enumerate()
            .map(|(k, &p99)| Interval {
                start_unix_ns: 1_000 * MS + k as u64 * 50 * MS,
                updates: 10,
                count: u64::from(p99 > 0) * 10,
                p50_ns: p99 / 2,
                p99_ns: p99,
                max_ns: p99,
            })
            .collect()
    }

    #[test]
    fn recovery_is_the_start_of_the_first_good_run() {
        // Baseline p99 100: good is <= 150.
        let s = series(&[900, 900, 100, 120, 150, 100]);
        // Resumed at 1,010 ms: the good run starts at 1,100 ms.
        assert_eq!(recovery_ms(&s, 50, 100, 1_010 * MS, u64::MAX), Some(90.0));
    }

    #[test]
    fn a_run_broken_by_a_bad_interval_starts_again() {
        let s = series(&[100, 100, 900, 100, 100, 100]);
        assert_eq!(recovery_ms(&s, 50, 100, 1_000 * MS, u64::MAX), Some(150.0));
    }

    #[test]
    fn already_good_at_resume_is_zero_and_empty_intervals_are_skipped() {
        // The interval in progress at SIGCONT (1,020 ms) starts the run; empty ones
        // between good ones neither break nor extend it.
        let s = series(&[100, 0, 100, 0, 100]);
        assert_eq!(recovery_ms(&s, 50, 100, 1_020 * MS, u64::MAX), Some(0.0));
    }

    #[test]
    fn no_run_or_no_baseline_is_not_recovered() {
        let s = series(&[900, 100, 100, 900, 100, 100]);
        assert_eq!(recovery_ms(&s, 50, 100, 1_000 * MS, u64::MAX), None);
        assert_eq!(
            recovery_ms(&series(&[100; 6]), 50, 0, 1_000 * MS, u64::MAX),
            None
        );
        // Intervals after `until` do not count.
        let s = series(&[900, 900, 900, 100, 100, 100]);
        assert_eq!(recovery_ms(&s, 50, 100, 1_000 * MS, 1_150 * MS), None);
    }
}
