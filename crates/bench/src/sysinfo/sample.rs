//! One process's counters at one moment, with its threads'.

use super::*;

/// One thread of a [`ProcSample`], from /proc/PID/task/TID/{stat,status,sched}.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadSample {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// CPU the thread last ran on.
    pub processor: Option<u32>,
    /// User-mode CPU time in clock ticks.
    pub utime_ticks: u64,
    /// Kernel-mode CPU time in clock ticks.
    pub stime_ticks: u64,
    /// Voluntary context switches (the thread blocked).
    pub voluntary_ctxt_switches: u64,
    /// Involuntary context switches (the thread was preempted).
    pub nonvoluntary_ctxt_switches: u64,
    /// `se.nr_migrations`, when /proc/PID/task/TID/sched exists.
    pub migrations: Option<u64>,
    /// Time spent runnable but waiting for a CPU (ns; from schedstat, when it exists):
    /// after a wake-up, the wait in a CPU's queue, mostly behind another process.
    #[serde(default)]
    pub run_delay_ns: Option<u64>,
    /// Runs on a CPU (schedstat's third field).
    #[serde(default)]
    pub runs: Option<u64>,
    /// Time on a CPU (ns; schedstat's first field): exact, where the clock ticks of
    /// `utime_ticks` and `stime_ticks` are samples.
    #[serde(default)]
    pub on_cpu_ns: Option<u64>,
}

/// A snapshot of one process's counters, from /proc/PID/stat, /proc/PID/status and
/// /proc/PID/task/*. Two samples make a [`ProcessUsage`] with [`usage_between`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcSample {
    /// Process id.
    pub pid: u32,
    /// When the sample was taken (not serialised; deserialises as "now").
    #[serde(skip, default = "Instant::now")]
    pub at: Instant,
    /// Command name.
    pub comm: String,
    /// State letter (`Z` for a zombie: exited, not yet reaped).
    pub state: char,
    /// User-mode CPU time of the whole process in clock ticks.
    pub utime_ticks: u64,
    /// Kernel-mode CPU time of the whole process in clock ticks.
    pub stime_ticks: u64,
    /// Voluntary context switches, summed over the live threads.
    pub voluntary_ctxt_switches: u64,
    /// Involuntary context switches, summed over the live threads.
    pub nonvoluntary_ctxt_switches: u64,
    /// Peak resident set size (VmHWM) in bytes.
    pub vm_hwm_bytes: u64,
    /// Current resident set size (VmRSS) in bytes.
    pub vm_rss_bytes: u64,
    /// Number of threads.
    pub threads: u64,
    /// CPU the main thread last ran on.
    pub processor: Option<u32>,
    /// Scheduler migrations summed over the live threads (`None` without sched files).
    pub migrations: Option<u64>,
    /// Time on a CPU (ns) of every thread, those that have exited too
    /// ([`process_cpu_ns`]); `None` if it could not be read.
    #[serde(default)]
    pub on_cpu_ns: Option<u64>,
    /// Per-thread details (empty if /proc/PID/task could not be read).
    pub thread_samples: Vec<ThreadSample>,
}

impl ProcSample {
    /// True if the process has exited (zombie or dead) when sampled.
    pub fn is_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

fn read_thread(pid: u32, tid: u32) -> Option<ThreadSample> {
    let base = format!("/proc/{pid}/task/{tid}");
    let stat = parse_stat(&std::fs::read_to_string(format!("{base}/stat")).ok()?)?;
    let status = std::fs::read_to_string(format!("{base}/status"))
        .map(|t| parse_status(&t))
        .unwrap_or_default();
    let migrations = std::fs::read_to_string(format!("{base}/sched"))
        .ok()
        .and_then(|t| parse_sched_migrations(&t));
    let schedstat = std::fs::read_to_string(format!("{base}/schedstat"))
        .ok()
        .and_then(|t| parse_schedstat(&t));
    Some(ThreadSample {
        tid,
        comm: stat.comm,
        processor: stat.processor,
        utime_ticks: stat.utime_ticks,
        stime_ticks: stat.stime_ticks,
        voluntary_ctxt_switches: status.voluntary_ctxt_switches.unwrap_or(0),
        nonvoluntary_ctxt_switches: status.nonvoluntary_ctxt_switches.unwrap_or(0),
        migrations,
        run_delay_ns: schedstat.map(|(_, delay, _)| delay),
        runs: schedstat.map(|(_, _, runs)| runs),
        on_cpu_ns: schedstat.map(|(on_cpu, _, _)| on_cpu),
    })
}

fn read_threads(pid: u32) -> Vec<ThreadSample> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut threads: Vec<ThreadSample> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        // A thread can exit between listing and reading: skip it.
        .filter_map(|tid| read_thread(pid, tid))
        .collect();
    threads.sort_by_key(|t| t.tid);
    threads
}

/// Samples process `pid`: /proc/PID/stat, /proc/PID/status and every thread's
/// stat/status/sched. Fails with `NotFound` once the process has been reaped.
///
/// Context switches in /proc/PID/status are the main thread's only, so the process
/// figures are summed over the live threads (those of threads that already exited are
/// lost).
pub fn sample_process(pid: u32) -> io::Result<ProcSample> {
    let stat_text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let stat = parse_stat(&stat_text).ok_or_else(|| invalid("/proc/PID/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|t| parse_status(&t))
        .unwrap_or_default();
    let threads = read_threads(pid);
    let (voluntary, nonvoluntary) = if threads.is_empty() {
        (
            status.voluntary_ctxt_switches.unwrap_or(0),
            status.nonvoluntary_ctxt_switches.unwrap_or(0),
        )
    } else {
        (
            threads.iter().map(|t| t.voluntary_ctxt_switches).sum(),
            threads.iter().map(|t| t.nonvoluntary_ctxt_switches).sum(),
        )
    };
    let migrations = threads
        .iter()
        .any(|t| t.migrations.is_some())
        .then(|| threads.iter().filter_map(|t| t.migrations).sum());
    Ok(ProcSample {
        pid,
        at: Instant::now(),
        comm: stat.comm,
        state: stat.state,
        utime_ticks: stat.utime_ticks,
        stime_ticks: stat.stime_ticks,
        voluntary_ctxt_switches: voluntary,
        nonvoluntary_ctxt_switches: nonvoluntary,
        vm_hwm_bytes: status.vm_hwm_bytes.unwrap_or(0),
        vm_rss_bytes: status.vm_rss_bytes.unwrap_or(0),
        threads: status.threads.unwrap_or(stat.num_threads),
        processor: stat.processor,
        migrations,
        on_cpu_ns: process_cpu_ns(pid),
        thread_samples: threads,
    })
}
