//! What a process used between two samples.

use super::*;

/// Sums `f(b_thread) - f(a_thread)` over b's threads, matched by tid; threads that are
/// new in b count from zero. Falls back to the process totals without thread data.
fn thread_delta(a: &ProcSample, b: &ProcSample, f: impl Fn(&ThreadSample) -> u64) -> u64 {
    let before: HashMap<u32, &ThreadSample> = a.thread_samples.iter().map(|t| (t.tid, t)).collect();
    b.thread_samples
        .iter()
        .map(|t| match before.get(&t.tid) {
            Some(old) => f(t).saturating_sub(f(old)),
            None => f(t),
        })
        .sum()
}

/// The usage of a process between samples `a` and `b` (b later), named `name`.
/// Counters are deltas; the peak RSS is b's VmHWM; `syscalls` is left `None`.
pub fn usage_between(name: &str, a: &ProcSample, b: &ProcSample) -> ProcessUsage {
    let tck = clock_ticks_per_sec() as f64;
    let wall_s = b.at.saturating_duration_since(a.at).as_secs_f64();
    let user_s = b.utime_ticks.saturating_sub(a.utime_ticks) as f64 / tck;
    let sys_s = b.stime_ticks.saturating_sub(a.stime_ticks) as f64 / tck;
    let percent = |s: f64| {
        if wall_s > 0.0 {
            s / wall_s * 100.0
        } else {
            0.0
        }
    };
    let have_threads = !a.thread_samples.is_empty() && !b.thread_samples.is_empty();
    let (voluntary, involuntary) = if have_threads {
        (
            thread_delta(a, b, |t| t.voluntary_ctxt_switches),
            thread_delta(a, b, |t| t.nonvoluntary_ctxt_switches),
        )
    } else {
        (
            b.voluntary_ctxt_switches
                .saturating_sub(a.voluntary_ctxt_switches),
            b.nonvoluntary_ctxt_switches
                .saturating_sub(a.nonvoluntary_ctxt_switches),
        )
    };
    let migrations = match (a.migrations, b.migrations) {
        (_, None) => None,
        (_, Some(_)) if have_threads => Some(thread_delta(a, b, |t| t.migrations.unwrap_or(0))),
        (Some(x), Some(y)) => Some(y.saturating_sub(x)),
        (None, Some(_)) => None,
    };
    let have_schedstat = b.thread_samples.iter().any(|t| t.run_delay_ns.is_some());
    // The process's own count holds the threads that exited between a and b, whose time
    // the live threads' sum loses; that sum only when the process's was not read.
    let on_cpu_ns = match (a.on_cpu_ns, b.on_cpu_ns) {
        (Some(x), Some(y)) => Some(y.saturating_sub(x)),
        _ => have_schedstat.then(|| thread_delta(a, b, |t| t.on_cpu_ns.unwrap_or(0))),
    };
    let on_cpu_s = on_cpu_ns.map(|ns| ns as f64 / 1e9);
    let (run_delay_s, run_delay_us_per_run) = if have_schedstat {
        let delay_ns = thread_delta(a, b, |t| t.run_delay_ns.unwrap_or(0));
        let runs = thread_delta(a, b, |t| t.runs.unwrap_or(0));
        (
            Some(delay_ns as f64 / 1e9),
            (runs > 0).then(|| delay_ns as f64 / 1e3 / runs as f64),
        )
    } else {
        (None, None)
    };
    let before: HashMap<u32, &ThreadSample> = a.thread_samples.iter().map(|t| (t.tid, t)).collect();
    let mut thread_usage: Vec<ThreadUsage> = b
        .thread_samples
        .iter()
        .map(|t| {
            let old = before.get(&t.tid);
            let cpu_s = match t.on_cpu_ns {
                Some(ns) => {
                    ns.saturating_sub(old.and_then(|o| o.on_cpu_ns).unwrap_or(0)) as f64 / 1e9
                }
                None => {
                    let ticks = (t.utime_ticks + t.stime_ticks)
                        .saturating_sub(old.map(|o| o.utime_ticks + o.stime_ticks).unwrap_or(0));
                    ticks as f64 / tck
                }
            };
            ThreadUsage {
                tid: t.tid,
                name: t.comm.clone(),
                cpu_s,
                cpu_percent: percent(cpu_s),
                processor: t.processor,
                migrations: t
                    .migrations
                    .map(|m| m.saturating_sub(old.and_then(|o| o.migrations).unwrap_or(0))),
            }
        })
        .collect();
    thread_usage.sort_by(|x, y| y.cpu_s.total_cmp(&x.cpu_s).then(x.tid.cmp(&y.tid)));
    ProcessUsage {
        name: name.to_string(),
        pid: b.pid,
        wall_s,
        cpu_user_s: user_s,
        cpu_sys_s: sys_s,
        cpu_percent: percent(on_cpu_s.unwrap_or(user_s + sys_s)),
        on_cpu_s,
        peak_rss_bytes: b.vm_hwm_bytes.max(a.vm_hwm_bytes),
        rss_bytes: b.vm_rss_bytes,
        max_sampled_rss_bytes: a.vm_rss_bytes.max(b.vm_rss_bytes),
        voluntary_ctx_switches: voluntary,
        involuntary_ctx_switches: involuntary,
        migrations,
        run_delay_s,
        run_delay_us_per_run,
        syscalls: None,
        threads: b.threads,
        exited: b.is_exited(),
        thread_usage,
    }
}
