//! One step of a run (a rate held for a while, judged by the tools' exact counters) and
//! the search for the highest rate sustained.

use super::rig::Rig;
use crate::perf_sub::Mark as SubMark;
use crate::sysinfo::ProcessMonitor;
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::{ProcessUsage, Step};

/// Exact counters from both load tools at one instant.
pub(super) struct Marks {
    pub_total: u64,
    /// perf-sub's running total after this mark.
    sub_total: u64,
    pub_lag_ms: f64,
    sub: SubMark,
}

pub(super) fn take_marks(rig: &mut Rig, name: &str) -> Result<Marks> {
    rig.publisher.send("mark")?;
    rig.subscriber.send(&format!("mark {name}"))?;
    let p = rig.publisher.expect("mark", Duration::from_secs(30))?;
    let s = rig.subscriber.expect("mark", Duration::from_secs(30))?;
    let sub: SubMark = serde_json::from_value(s["mark"].clone()).context("perf-sub mark")?;
    rig.sub_total += sub.updates;
    Ok(Marks {
        sub_total: rig.sub_total,
        pub_total: p["total"].as_u64().unwrap_or(0),
        pub_lag_ms: p["max_lag_ms"].as_f64().unwrap_or(0.0),
        sub,
    })
}

/// Sets the rate on every rig, lets it settle, then measures `seconds`.
pub fn hold(
    rigs: &mut [Rig],
    rate: u64,
    seconds: f64,
    settle: f64,
    monitor: &ProcessMonitor,
) -> Result<Vec<Step>> {
    for rig in rigs.iter_mut() {
        rig.publisher.send(&format!("rate {rate}"))?;
    }
    std::thread::sleep(Duration::from_secs_f64(settle));
    let mut before = Vec::new();
    for rig in rigs.iter_mut() {
        before.push(take_marks(rig, "settle")?);
    }
    let m0 = monitor.mark();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let mut after = Vec::new();
    for rig in rigs.iter_mut() {
        after.push(take_marks(rig, &format!("rate-{rate}"))?);
    }
    let window = t0.elapsed().as_secs_f64();
    let m1 = monitor.mark();
    let all_usage = monitor.usage_between(m0, m1);
    let system = monitor.system_between(m0, m1);
    let mut steps = Vec::new();
    for (i, rig) in rigs.iter_mut().enumerate() {
        let (b, a) = (&before[i], &after[i]);
        let offered = a.pub_total.saturating_sub(b.pub_total);
        let delivered = a.sub.updates;
        let Verdict {
            ratio,
            backlog_start,
            backlog_end,
            mut reasons,
        } = verdict(rate, window, rig.fanout, b, a);
        if !rig.node.is_running() {
            reasons.push("node exited".into());
        }
        let names: Vec<String> = rig.pids().into_iter().map(|(n, _)| n).collect();
        let processes: Vec<ProcessUsage> = all_usage
            .iter()
            .filter(|u| names.contains(&u.name))
            .cloned()
            .collect();
        let node_cpu_s: f64 = processes
            .iter()
            .filter(|u| {
                u.name == rig.node.name || rig.edge.as_ref().is_some_and(|e| e.name == u.name)
            })
            // The exact count where there is one: a node at a low rate runs in bursts
            // shorter than a clock tick.
            .map(ProcessUsage::cpu_s)
            .sum();
        let node_cpu_ns_per_update = if offered > 0 {
            node_cpu_s * 1e9 / offered as f64
        } else {
            0.0
        };
        steps.push(Step {
            label: rig.label.clone(),
            target_rate: rate,
            seconds: window,
            offered,
            delivered,
            delivered_ratio: ratio,
            offered_per_s: offered as f64 / window,
            delivered_per_s: delivered as f64 / window,
            gaps: a.sub.gaps,
            statuses: a.sub.statuses,
            conflated: a.sub.conflated,
            backlog_start,
            backlog_end,
            publisher_max_lag_ms: a.pub_lag_ms,
            pass: reasons.is_empty(),
            reason: if reasons.is_empty() {
                "ok".into()
            } else {
                reasons.join("; ")
            },
            latency: a.sub.latency,
            node_cpu_ns_per_update,
            processes,
            system: system.clone(),
        });
    }
    Ok(steps)
}

/// A step's delivered ratio, backlog and reasons to fail (none: it passed).
pub(super) struct Verdict {
    ratio: f64,
    backlog_start: i64,
    backlog_end: i64,
    reasons: Vec<String>,
}

/// What the load tools' marks at a step's start (`b`) and end (`a`) say of it: `rate`
/// asked, `window` seconds long, each update due to `fanout` streams.
pub(super) fn verdict(rate: u64, window: f64, fanout: f64, b: &Marks, a: &Marks) -> Verdict {
    let offered = a.pub_total.saturating_sub(b.pub_total);
    let expected = offered as f64 * fanout;
    let ratio = if expected > 0.0 {
        a.sub.updates as f64 / expected
    } else {
        1.0
    };
    let pub_kept_up =
        offered as f64 >= 0.99 * rate as f64 * a.sub.seconds.min(window).max(1e-9) || rate == 0;
    let mut reasons = Vec::new();
    if ratio < 0.995 {
        reasons.push(format!("delivered {:.2}% of offered", ratio * 100.0));
    }
    // Updates sent before perf-sub connected are not expected: the backlog is taken
    // relative to the start of the step.
    let backlog = |m: &Marks| (m.pub_total as f64 * fanout) as i64 - m.sub_total as i64;
    let (backlog_start, backlog_end) = (backlog(b), backlog(a));
    let growth = backlog_end - backlog_start;
    if growth as f64 > (0.005 * expected).max(1000.0) {
        reasons.push(format!("backlog grew by {growth} updates"));
    }
    if a.sub.gaps > 0 {
        reasons.push(format!("{} sequence gaps", a.sub.gaps));
    }
    if a.sub.conflated > 0 {
        reasons.push(format!(
            "{} updates conflated (the subscriber fell behind)",
            a.sub.conflated
        ));
    }
    // A connection re-established re-images its streams: what it missed meanwhile
    // shows as no gap, only as a shortfall the 0.5% tolerance can hide.
    let reconnects = a.sub.reconnects.saturating_sub(b.sub.reconnects);
    if reconnects > 0 {
        reasons.push(format!("the subscriber reconnected {reconnects} times"));
    }
    if !pub_kept_up {
        reasons.push(format!(
            "publisher sent {:.0}/s of {rate}/s asked (publisher-limited)",
            offered as f64 / window
        ));
    }
    Verdict {
        ratio,
        backlog_start,
        backlog_end,
        reasons,
    }
}

/// After a failed step: a low rate until the subscribers have caught up (bounded).
pub fn recover(rigs: &mut [Rig], seconds: f64) -> Result<()> {
    for rig in rigs.iter_mut() {
        rig.publisher.send("rate 1000")?;
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    for rig in rigs.iter_mut() {
        take_marks(rig, "recover")?;
    }
    Ok(())
}

/// Ramp (doubling from `start`) then bisection: the highest rate at which every rig's
/// step passes. Returns (max sustainable, steps).
pub fn find_max(
    rigs: &mut [Rig],
    start: u64,
    limit: u64,
    bisections: u32,
    seconds: f64,
    monitor: &ProcessMonitor,
    progress: &mut dyn FnMut(&[Step]),
) -> Result<(u64, Vec<Vec<Step>>)> {
    let mut all = Vec::new();
    // Holds `rate` on every rig and keeps the steps: whether every rig passed (after a
    // failure, a low rate lets the backlog drain).
    let passes = |rate: u64| -> Result<bool> {
        let steps = hold(rigs, rate, seconds, 1.0, monitor)?;
        progress(&steps);
        let pass = steps.iter().all(|s| s.pass);
        all.push(steps);
        if !pass {
            recover(rigs, 3.0)?;
        }
        Ok(pass)
    };
    let max = search(start, limit, bisections, passes)?;
    Ok((max, all))
}

/// The rates [`find_max`] tries, each judged by `passes`: from `start` (or `limit`, if
/// lower), doubling up to `limit` while they pass, then `bisections` halvings of the interval between the last
/// pass and the first failure. Returns the highest rate that passed (0: none). Every
/// rate tried is above the previous pass, so the search ends after at most 64 doublings
/// and `bisections` more.
pub(super) fn search(
    start: u64,
    limit: u64,
    bisections: u32,
    mut passes: impl FnMut(u64) -> Result<bool>,
) -> Result<u64> {
    // A first rate above the limit would try nothing and report 0 as the highest
    // sustained rate.
    let mut rate = start.min(limit);
    // Doubling 0 stays 0: the ramp would hold rate 0 for ever.
    if rate == 0 {
        bail!("a search's first rate (--start-rate) and its limit (--max-rate) must be at least 1");
    }
    let mut lo = 0u64;
    let mut hi = 0u64;
    while rate <= limit {
        if passes(rate)? {
            lo = rate;
            // Past u64::MAX there is nothing left to try.
            match rate.checked_mul(2) {
                Some(r) => rate = r,
                None => break,
            }
        } else {
            hi = rate;
            break;
        }
    }
    if hi > 0 {
        for _ in 0..bisections {
            let mid = round_rate((lo + hi) / 2);
            if mid <= lo || mid >= hi {
                break;
            }
            if passes(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(lo)
}

/// Rounds a rate to 2 significant digits (bisection points read better).
pub fn round_rate(r: u64) -> u64 {
    if r < 100 {
        return r;
    }
    let mag = 10u64.pow((r as f64).log10().floor() as u32 - 1);
    (r / mag) * mag
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks of a step's start and end: `sent` updates offered over 1 s at 1,000/s,
    /// `received` delivered, the subscriber's running reconnect count at each.
    fn marks(sent: u64, received: u64, reconnects: (u64, u64)) -> (Marks, Marks) {
        let mark = |pub_total, sub_total, updates, reconnects| Marks {
            pub_total,
            sub_total,
            pub_lag_ms: 0.0,
            sub: SubMark {
                seconds: 1.0,
                updates,
                reconnects,
                ..SubMark::default()
            },
        };
        (
            mark(1_000, 1_000, 0, reconnects.0),
            mark(1_000 + sent, 1_000 + received, received, reconnects.1),
        )
    }

    #[test]
    fn a_step_is_judged_by_its_marks() {
        let (b, a) = marks(1_000, 1_000, (2, 2));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert!(v.reasons.is_empty(), "{:?}", v.reasons);
        assert_eq!((v.ratio, v.backlog_start, v.backlog_end), (1.0, 0, 0));
        let (b, a) = marks(1_000, 900, (0, 0));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert_eq!(v.reasons, ["delivered 90.00% of offered"]);
    }

    #[test]
    fn a_step_in_which_the_subscriber_reconnected_fails() {
        // 0.3% lost while it reconnected: within the delivery tolerance, and no gap (its
        // streams were imaged again), but not every update delivered.
        let (b, a) = marks(1_000, 997, (1, 2));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert_eq!(v.reasons, ["the subscriber reconnected 1 times"]);
    }

    #[test]
    fn a_search_ends_whatever_its_first_rate() {
        // Every rate passes: the ramp ends at the limit, or where doubling overflows.
        let bounded = |start, limit| {
            let mut tried = Vec::new();
            let max = search(start, limit, 3, |r| {
                assert!(tried.len() < 100, "unbounded search: {tried:?}");
                tried.push(r);
                Ok(true)
            });
            (max.ok(), tried.len())
        };
        assert_eq!(bounded(1_000, 8_000), (Some(8_000), 4));
        assert_eq!(bounded(1 << 62, u64::MAX), (Some(1 << 63), 2));
        // Rate 0 doubled is 0: refused rather than held for ever.
        assert_eq!(bounded(0, 8_000), (None, 0));
        assert_eq!(bounded(1_000, 0), (None, 0));
        // A failure is bisected towards the last pass.
        let mut tried = Vec::new();
        let max = search(1_000, u64::MAX, 3, |r| {
            tried.push(r);
            Ok(r <= 5_000)
        });
        assert_eq!(max.unwrap(), 5_000);
        assert_eq!(tried, [1_000, 2_000, 4_000, 8_000, 6_000, 5_000, 5_500]);
    }

    #[test]
    fn a_search_whose_first_rate_is_above_its_limit_starts_at_the_limit() {
        let mut tried = Vec::new();
        let max = search(250_000, 100_000, 1, |r| {
            tried.push(r);
            Ok(true)
        });
        assert_eq!((max.unwrap(), tried), (100_000, vec![100_000]));
    }

    #[test]
    fn rates_round_to_two_digits() {
        assert_eq!(round_rate(1_234_567), 1_200_000);
        assert_eq!(round_rate(750_000), 750_000);
        assert_eq!(round_rate(99), 99);
        assert_eq!(round_rate(1_000), 1_000);
    }
}
