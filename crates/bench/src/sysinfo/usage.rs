//! What a process used between two samples.

use super::*;

/// One thread's usage over a window (part of [`ProcessUsage`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadUsage {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// CPU seconds (user + system) in the window.
    pub cpu_s: f64,
    /// CPU time as a percentage of one core over the window.
    pub cpu_percent: f64,
    /// CPU the thread last ran on at the end of the window.
    pub processor: Option<u32>,
    /// Scheduler migrations in the window.
    pub migrations: Option<u64>,
}

/// A process's resource usage over a window: the difference of two [`ProcSample`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// Caller's name for the process (e.g. "node", "pub-1").
    pub name: String,
    /// Process id.
    pub pid: u32,
    /// Length of the window in seconds.
    pub wall_s: f64,
    /// User-mode CPU seconds in the window.
    pub cpu_user_s: f64,
    /// Kernel-mode CPU seconds in the window.
    pub cpu_sys_s: f64,
    /// CPU time as a percentage of one core over the window (200 = two cores busy).
    pub cpu_percent: f64,
    /// Peak resident set size of the process's life up to the window's end (VmHWM).
    pub peak_rss_bytes: u64,
    /// Resident set size at the window's end.
    pub rss_bytes: u64,
    /// Largest RSS seen by sampling within the window (the window's ends and, with a
    /// [`ProcessMonitor`], every sample in between).
    pub max_sampled_rss_bytes: u64,
    /// Voluntary context switches in the window (the process blocked).
    pub voluntary_ctx_switches: u64,
    /// Involuntary context switches in the window (the process was preempted).
    pub involuntary_ctx_switches: u64,
    /// Scheduler migrations between CPUs in the window, if the kernel exposes them.
    pub migrations: Option<u64>,
    /// Seconds the process's threads spent runnable but not running in the window (woken
    /// and queued for a CPU, mostly behind another process), if the kernel exposes it.
    #[serde(default)]
    pub run_delay_s: Option<f64>,
    /// That wait per run on a CPU, in µs: what a wake-up of this process cost on average
    /// before it could work.
    #[serde(default)]
    pub run_delay_us_per_run: Option<f64>,
    /// System calls in the window, if counted (see [`start_syscall_count`]).
    pub syscalls: Option<u64>,
    /// Threads at the window's end.
    pub threads: u64,
    /// True if the process had exited by the window's end (figures then stop at its
    /// last sample).
    pub exited: bool,
    /// Per-thread usage, busiest first.
    pub thread_usage: Vec<ThreadUsage>,
}

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
            let ticks = (t.utime_ticks + t.stime_ticks)
                .saturating_sub(old.map(|o| o.utime_ticks + o.stime_ticks).unwrap_or(0));
            let cpu_s = ticks as f64 / tck;
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
        cpu_percent: percent(user_s + sys_s),
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
