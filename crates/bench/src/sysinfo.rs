//! Process and system sampling from /proc (Linux).
//!
//! * [`sample_process`] reads one process's counters (CPU ticks, context switches, RSS,
//!   threads, the CPU each thread last ran on, scheduler migrations) into a [`ProcSample`];
//!   [`usage_between`] turns two samples into a [`ProcessUsage`].
//! * [`ProcessMonitor`] samples a set of processes in a background thread and reports
//!   per-window usage between [`Mark`]s, so a scenario gets figures for each of its steps.
//! * [`read_system_stat`] / [`read_cpu_times`] / [`cpu_utilisation`] give per-CPU
//!   utilisation and system-wide context switches from /proc/stat.
//! * [`machine`] describes the host for reports.
//! * [`syscall_counter`] / [`start_syscall_count`] count a process's system calls with
//!   `perf stat` (preferred) or `strace -c` (opt-in: it slows the traced process a lot).
//!
//! The text parsers are pure functions over `&str` (`parse_*`) so they can be tested on
//! captured samples; the readers around them only do the file I/O.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{self, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Clock ticks
// ---------------------------------------------------------------------------------------

/// Kernel clock ticks per second (`sysconf(_SC_CLK_TCK)`): the unit of the CPU times in
/// /proc/PID/stat and /proc/stat. Falls back to 100 if sysconf fails.
pub fn clock_ticks_per_sec() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if v > 0 {
            v as u64
        } else {
            100
        }
    })
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse {what}"))
}

// ---------------------------------------------------------------------------------------
// /proc/PID parsers
// ---------------------------------------------------------------------------------------

/// The fields of /proc/PID/stat (or /proc/PID/task/TID/stat) that this module uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatFields {
    /// Process (or thread) id, field 1.
    pub pid: u32,
    /// Command name, field 2, without the parentheses (may contain spaces and ')').
    pub comm: String,
    /// State letter, field 3 (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    /// User-mode CPU time in clock ticks, field 14.
    pub utime_ticks: u64,
    /// Kernel-mode CPU time in clock ticks, field 15.
    pub stime_ticks: u64,
    /// Number of threads, field 20.
    pub num_threads: u64,
    /// Start time after boot in clock ticks, field 22.
    pub start_time_ticks: u64,
    /// CPU the task last ran on, field 39 (absent on very old kernels).
    pub processor: Option<u32>,
}

/// CPU seconds (user + system, every thread) a process has used so far, from
/// /proc/PID/stat; `None` if it cannot be read.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let s = parse_stat(&text)?;
    Some((s.utime_ticks + s.stime_ticks) as f64 / clock_ticks_per_sec() as f64)
}

/// Parses /proc/PID/stat. The comm field can contain spaces and parentheses, so the
/// fixed fields are taken after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<StatFields> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // rest[0] is field 3.
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|s| s.parse::<u64>().ok());
    Some(StatFields {
        pid,
        comm,
        state: field(3)?.chars().next()?,
        utime_ticks: num(14)?,
        stime_ticks: num(15)?,
        num_threads: num(20)?,
        start_time_ticks: num(22)?,
        processor: field(39).and_then(|s| s.parse().ok()),
    })
}

/// The fields of /proc/PID/status that this module uses; each is `None` when absent
/// (zombies and kernel threads have no `Vm*` lines).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFields {
    /// `Name:`.
    pub name: Option<String>,
    /// First letter of `State:`.
    pub state: Option<char>,
    /// `Threads:`.
    pub threads: Option<u64>,
    /// `VmHWM:` (peak resident set) in bytes.
    pub vm_hwm_bytes: Option<u64>,
    /// `VmRSS:` (current resident set) in bytes.
    pub vm_rss_bytes: Option<u64>,
    /// `voluntary_ctxt_switches:` (of this task only, not the whole thread group).
    pub voluntary_ctxt_switches: Option<u64>,
    /// `nonvoluntary_ctxt_switches:` (of this task only).
    pub nonvoluntary_ctxt_switches: Option<u64>,
}

/// Parses a `N kB` (or plain `N`) value into bytes (or the plain number).
fn parse_kb(value: &str) -> Option<u64> {
    let mut it = value.split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some(unit) if unit.eq_ignore_ascii_case("kb") => Some(n * 1024),
        Some(unit) if unit.eq_ignore_ascii_case("mb") => Some(n * 1024 * 1024),
        _ => Some(n),
    }
}

/// Parses /proc/PID/status (or /proc/PID/task/TID/status).
pub fn parse_status(text: &str) -> StatusFields {
    let mut s = StatusFields::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => s.name = Some(value.to_string()),
            "State" => s.state = value.chars().next(),
            "Threads" => s.threads = value.parse().ok(),
            "VmHWM" => s.vm_hwm_bytes = parse_kb(value),
            "VmRSS" => s.vm_rss_bytes = parse_kb(value),
            "voluntary_ctxt_switches" => s.voluntary_ctxt_switches = value.parse().ok(),
            "nonvoluntary_ctxt_switches" => s.nonvoluntary_ctxt_switches = value.parse().ok(),
            _ => {}
        }
    }
    s
}

/// Parses `se.nr_migrations` (how often the scheduler moved the task to another CPU)
/// from /proc/PID/task/TID/sched. That file exists when the kernel has
/// CONFIG_SCHED_DEBUG.
pub fn parse_sched_migrations(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "se.nr_migrations")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// Parses /proc/PID/task/TID/schedstat: time on a CPU (ns), time waiting on a run queue
/// (ns: runnable, woken, not yet running) and the number of runs on a CPU. The file
/// exists when the kernel has CONFIG_SCHED_INFO.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64, u64)> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

/// A process's time on a CPU, every thread's, in ns (schedstat: not rounded to clock
/// ticks, so a window of a second or two is measured well); `None` without schedstat.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for t in tasks.flatten() {
        let text = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
        total += parse_schedstat(&text)?.0;
    }
    Some(total)
}

// ---------------------------------------------------------------------------------------
// Process samples
// ---------------------------------------------------------------------------------------

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
        thread_samples: threads,
    })
}

// ---------------------------------------------------------------------------------------
// Process usage
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// /proc/stat: per-CPU times and context switches
// ---------------------------------------------------------------------------------------

/// Cumulative CPU times of one CPU (or of all, `cpu: None`) from /proc/stat, in clock
/// ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// CPU number; `None` for the aggregate `cpu` line.
    pub cpu: Option<u32>,
    /// Time in user mode (includes guest time).
    pub user: u64,
    /// Time in user mode at low priority (nice).
    pub nice: u64,
    /// Time in kernel mode.
    pub system: u64,
    /// Idle time.
    pub idle: u64,
    /// Idle time waiting for I/O.
    pub iowait: u64,
    /// Time servicing hardware interrupts.
    pub irq: u64,
    /// Time servicing softirqs (network receive processing lands here).
    pub softirq: u64,
    /// Time stolen by the hypervisor for other guests.
    pub steal: u64,
}

impl CpuTimes {
    fn fields(&self) -> [u64; 8] {
        [
            self.user,
            self.nice,
            self.system,
            self.idle,
            self.iowait,
            self.irq,
            self.softirq,
            self.steal,
        ]
    }
}

/// A snapshot of /proc/stat: CPU times and system-wide counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemStat {
    /// When the snapshot was taken (not serialised; deserialises as "now").
    #[serde(skip, default = "Instant::now")]
    pub at: Instant,
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// One entry per `cpuN` line, in file order.
    pub cpus: Vec<CpuTimes>,
    /// Context switches since boot, all CPUs (`ctxt`).
    pub context_switches: u64,
    /// Processes and threads created since boot (`processes`).
    pub forks: u64,
    /// Runnable tasks at the moment of the snapshot (`procs_running`).
    pub procs_running: u64,
}

/// Parses /proc/stat. Returns `None` if there is no aggregate `cpu` line.
pub fn parse_proc_stat(text: &str) -> Option<SystemStat> {
    let mut total = None;
    let mut cpus = Vec::new();
    let mut stat = SystemStat {
        at: Instant::now(),
        total: CpuTimes::default(),
        cpus: Vec::new(),
        context_switches: 0,
        forks: 0,
        procs_running: 0,
    };
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some(key) = it.next() else { continue };
        if let Some(rest) = key.strip_prefix("cpu") {
            let cpu = if rest.is_empty() {
                None
            } else {
                match rest.parse::<u32>() {
                    Ok(n) => Some(n),
                    Err(_) => continue,
                }
            };
            let v: Vec<u64> = it.map(|s| s.parse().unwrap_or(0)).collect();
            let g = |i: usize| v.get(i).copied().unwrap_or(0);
            let times = CpuTimes {
                cpu,
                user: g(0),
                nice: g(1),
                system: g(2),
                idle: g(3),
                iowait: g(4),
                irq: g(5),
                softirq: g(6),
                steal: g(7),
            };
            match cpu {
                None => total = Some(times),
                Some(_) => cpus.push(times),
            }
        } else {
            let value = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            match key {
                "ctxt" => stat.context_switches = value,
                "processes" => stat.forks = value,
                "procs_running" => stat.procs_running = value,
                _ => {}
            }
        }
    }
    stat.total = total?;
    stat.cpus = cpus;
    Some(stat)
}

/// Reads /proc/stat.
pub fn read_system_stat() -> io::Result<SystemStat> {
    let text = std::fs::read_to_string("/proc/stat")?;
    parse_proc_stat(&text).ok_or_else(|| invalid("/proc/stat"))
}

/// Reads the per-CPU times (`cpuN` lines) from /proc/stat.
pub fn read_cpu_times() -> io::Result<Vec<CpuTimes>> {
    Ok(read_system_stat()?.cpus)
}

/// Utilisation of one CPU (or all, `cpu: None`) over a window, in percent of that CPU's
/// time. `busy_percent` = user + nice + system + irq + softirq; steal is reported
/// separately and not counted as busy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuUtil {
    /// CPU number; `None` for the aggregate.
    pub cpu: Option<u32>,
    /// Percentage of time doing work (user, nice, system, irq, softirq).
    pub busy_percent: f64,
    /// User + nice.
    pub user_percent: f64,
    /// Kernel mode (excluding interrupts).
    pub system_percent: f64,
    /// Hardware interrupts.
    pub irq_percent: f64,
    /// Softirqs (e.g. network receive).
    pub softirq_percent: f64,
    /// Waiting for I/O while idle.
    pub iowait_percent: f64,
    /// Stolen by the hypervisor.
    pub steal_percent: f64,
}

/// Utilisation of one CPU between two cumulative readings (b later).
pub fn cpu_util_between(a: &CpuTimes, b: &CpuTimes) -> CpuUtil {
    let fa = a.fields();
    let fb = b.fields();
    let d: Vec<u64> = fa
        .iter()
        .zip(fb.iter())
        .map(|(x, y)| y.saturating_sub(*x))
        .collect();
    let total: u64 = d.iter().sum();
    let pct = |v: u64| {
        if total == 0 {
            0.0
        } else {
            v as f64 / total as f64 * 100.0
        }
    };
    let (user, nice, system, _idle, iowait, irq, softirq, steal) =
        (d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
    CpuUtil {
        cpu: b.cpu,
        busy_percent: pct(user + nice + system + irq + softirq),
        user_percent: pct(user + nice),
        system_percent: pct(system),
        irq_percent: pct(irq),
        softirq_percent: pct(softirq),
        iowait_percent: pct(iowait),
        steal_percent: pct(steal),
    }
}

/// Per-CPU utilisation between two [`read_cpu_times`] readings, matched by CPU number
/// (CPUs missing from either reading are left out).
pub fn cpu_utilisation(a: &[CpuTimes], b: &[CpuTimes]) -> Vec<CpuUtil> {
    b.iter()
        .filter_map(|tb| {
            let ta = a.iter().find(|t| t.cpu == tb.cpu)?;
            Some(cpu_util_between(ta, tb))
        })
        .collect()
}

/// System-wide usage over a window: the difference of two [`SystemStat`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemUsage {
    /// Length of the window in seconds.
    pub wall_s: f64,
    /// All CPUs together.
    pub total: CpuUtil,
    /// Each CPU.
    pub cpus: Vec<CpuUtil>,
    /// Context switches on all CPUs in the window.
    pub context_switches: u64,
    /// Context switches per second.
    pub context_switches_per_s: f64,
}

/// System-wide usage between two /proc/stat snapshots (b later).
pub fn system_usage_between(a: &SystemStat, b: &SystemStat) -> SystemUsage {
    let wall_s = b.at.saturating_duration_since(a.at).as_secs_f64();
    let context_switches = b.context_switches.saturating_sub(a.context_switches);
    SystemUsage {
        wall_s,
        total: cpu_util_between(&a.total, &b.total),
        cpus: cpu_utilisation(&a.cpus, &b.cpus),
        context_switches,
        context_switches_per_s: if wall_s > 0.0 {
            context_switches as f64 / wall_s
        } else {
            0.0
        },
    }
}

// ---------------------------------------------------------------------------------------
// Machine description
// ---------------------------------------------------------------------------------------

/// A description of the host, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name (uname nodename).
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// CPU architecture (e.g. `x86_64`).
    pub arch: String,
    /// CPU model from /proc/cpuinfo ("unknown" if absent).
    pub cpu_model: String,
    /// CPUs this process may use (`available_parallelism`).
    pub cpus: usize,
    /// Total memory in bytes (/proc/meminfo MemTotal; 0 if unknown).
    pub memory_bytes: u64,
    /// Distribution name (PRETTY_NAME from /etc/os-release), if present.
    pub os: Option<String>,
    /// The kernel's cap on a socket's receive and send buffers (`net.core.rmem_max`,
    /// `wmem_max`), if readable: it bounds the backbone's receiver window, so figures
    /// across the backbone depend on it.
    pub socket_receive_buffer_max_bytes: Option<u64>,
    pub socket_send_buffer_max_bytes: Option<u64>,
    /// How idle CPUs wait (cpuidle driver and governor, guest halt polling): it decides
    /// what waking one costs, the floor of every latency figure.
    #[serde(default)]
    pub cpu_idle: crate::wakeup::IdleSettings,
    /// What waking a thread on an idle CPU and back costs here, measured by the lab at
    /// the start of a run (`None` when not measured).
    #[serde(default)]
    pub wake_round_trip: Option<crate::wakeup::WakeRoundTrip>,
}

/// The CPU model from /proc/cpuinfo: the first `model name` (x86), else `Model` or
/// `Hardware` (ARM boards).
pub fn parse_cpuinfo_model(text: &str) -> Option<String> {
    for key in ["model name", "Model", "Hardware", "cpu model"] {
        let found = text.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key && !v.trim().is_empty()).then(|| v.trim().to_string())
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// `MemTotal` from /proc/meminfo, in bytes.
pub fn parse_meminfo_total(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == "MemTotal")
            .then(|| parse_kb(v.trim()))
            .flatten()
    })
}

/// `PRETTY_NAME` from /etc/os-release, unquoted.
pub fn parse_os_release_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let v = line.trim().strip_prefix("PRETTY_NAME=")?;
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(v);
        (!v.is_empty()).then(|| v.replace("\\\"", "\""))
    })
}

fn uname() -> (String, String) {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return (String::new(), String::new());
        }
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (s(&u.nodename), s(&u.release))
    }
}

/// Describes this machine. Never fails: unknown items are empty, "unknown" or 0.
pub fn machine() -> Machine {
    let (hostname, kernel) = uname();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    Machine {
        hostname,
        kernel,
        arch: std::env::consts::ARCH.to_string(),
        cpu_model: parse_cpuinfo_model(&read("/proc/cpuinfo"))
            .unwrap_or_else(|| "unknown".to_string()),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_bytes: parse_meminfo_total(&read("/proc/meminfo")).unwrap_or(0),
        os: parse_os_release_pretty_name(&read("/etc/os-release"))
            .or_else(|| parse_os_release_pretty_name(&read("/usr/lib/os-release"))),
        socket_receive_buffer_max_bytes: read("/proc/sys/net/core/rmem_max").trim().parse().ok(),
        socket_send_buffer_max_bytes: read("/proc/sys/net/core/wmem_max").trim().parse().ok(),
        cpu_idle: crate::wakeup::idle_settings(),
        wake_round_trip: None,
    }
}

// ---------------------------------------------------------------------------------------
// System call counting
// ---------------------------------------------------------------------------------------

/// The tracepoint counted by `perf stat`: one hit per system call entry.
const PERF_EVENT: &str = "raw_syscalls:sys_enter";

/// The tool available to count a process's system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyscallTool {
    /// `perf stat -e raw_syscalls:sys_enter -p PID`: counts in the kernel with a
    /// tracepoint; the traced process runs at nearly full speed.
    Perf,
    /// `strace -c -f -p PID`: stops the traced process at every system call (ptrace),
    /// which slows a syscall-heavy process by an order of magnitude or more (measured
    /// here: ~28k instead of ~1.5M write calls per second), so throughput and latency
    /// figures taken while it is attached are not representative.
    Strace,
    /// Neither tool can count.
    None,
}

/// Parses the output of `perf stat -e raw_syscalls:sys_enter`, in CSV (`-x,`) or human
/// format, with or without `-I` intervals: the sum of the counts of all lines for the
/// event (one line without `-I`). `<not counted>` (the task did not run) counts as 0;
/// `None` if the event is missing or `<not supported>`.
pub fn parse_perf_stat(text: &str) -> Option<u64> {
    let mut total: Option<u64> = None;
    for line in text.lines() {
        if !line.contains(PERF_EVENT) || line.trim_start().starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        let value = if let Some(i) = fields.iter().position(|f| f.trim() == PERF_EVENT) {
            // CSV: [time,]value,unit,event,...
            fields.get(i.checked_sub(2)?)?.trim().to_string()
        } else {
            // Human: [time] value event ...; the value may have grouping separators.
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let i = tokens.iter().position(|t| *t == PERF_EVENT)?;
            tokens.get(i.checked_sub(1)?)?.to_string()
        };
        let n = if value.contains("not counted") || value == "counted>" {
            0
        } else if value.contains("supported") {
            return None;
        } else {
            let digits: String = value.chars().filter(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() || value.chars().any(|c| c.is_ascii_alphabetic()) {
                return None;
            }
            digits.parse().ok()?
        };
        total = Some(total.unwrap_or(0) + n);
    }
    total
}

/// Parses the summary table of `strace -c`: the call count on the `total` line. The
/// count is found under the `calls` header (older strace versions leave the usecs/call
/// column of the total line blank), else as the 4th column.
pub fn parse_strace_summary(text: &str) -> Option<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let total_idx = lines
        .iter()
        .rposition(|l| l.split_whitespace().last() == Some("total"))?;
    let total_line = lines[total_idx];
    let header = lines[..total_idx]
        .iter()
        .rev()
        .find(|l| l.contains("calls") && l.contains("syscall"));
    if let Some(header) = header {
        let calls_end = header.find("calls")? + "calls".len();
        // The number is right-aligned under the header: the token ending at calls_end.
        let mut pos = 0;
        for token in total_line.split_whitespace() {
            let start = pos + total_line[pos..].find(token)?;
            let end = start + token.len();
            pos = end;
            if end == calls_end {
                return token.parse().ok();
            }
        }
    }
    let tokens: Vec<&str> = total_line.split_whitespace().collect();
    tokens.get(3).and_then(|t| t.parse().ok())
}

/// Runs a command with captured stderr, killing it after `timeout`. Returns the exit
/// success and stderr, or `None` if it could not be spawned or timed out.
fn run_briefly(cmd: &mut Command, timeout: Duration) -> Option<(bool, String)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let reader = spawn_reader(&mut child);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let err = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    status.map(|s| (s.success(), err))
}

fn spawn_reader(child: &mut Child) -> Option<JoinHandle<String>> {
    let mut stderr = child.stderr.take()?;
    Some(std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    }))
}

/// True if `perf stat` can count the `raw_syscalls:sys_enter` tracepoint (perf is
/// installed and tracepoints are accessible). Tested once with `perf stat ... -- true`.
pub fn perf_can_count_syscalls() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        run_briefly(
            Command::new("perf").args(["stat", "-x", ",", "-e", PERF_EVENT, "--", "true"]),
            Duration::from_secs(10),
        )
        .is_some_and(|(ok, err)| ok && parse_perf_stat(&err).is_some_and(|n| n > 0))
    })
}

/// True if an `strace` binary runs (`strace -V`). Attaching may still be refused by
/// ptrace restrictions (yama ptrace_scope) for non-root users.
pub fn strace_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        run_briefly(Command::new("strace").arg("-V"), Duration::from_secs(5))
            .is_some_and(|(ok, _)| ok)
    })
}

/// The tool [`start_syscall_count`] would use: perf if it can count the tracepoint, else
/// strace if `allow_strace` and it is installed, else none. strace is opt-in because it
/// slows the traced process a lot (see [`SyscallTool::Strace`]).
pub fn syscall_counter(allow_strace: bool) -> SyscallTool {
    if perf_can_count_syscalls() {
        SyscallTool::Perf
    } else if allow_strace && strace_available() {
        SyscallTool::Strace
    } else {
        SyscallTool::None
    }
}

/// A running system-call count attached to a process; [`SyscallCount::finish`] stops it
/// and returns the count.
#[derive(Debug)]
pub struct SyscallCount {
    tool: SyscallTool,
    pid: u32,
    child: Option<Child>,
    reader: Option<JoinHandle<String>>,
}

/// Attaches a system-call counter (see [`syscall_counter`]) to process `pid` (all its
/// threads). perf needs a few milliseconds to attach, and calls made before that are
/// not counted. With `allow_strace`, strace is used when perf cannot count; strace slows
/// the traced process a lot (see [`SyscallTool::Strace`]). `None` if no tool is
/// available or it could not be started.
pub fn start_syscall_count(pid: u32, allow_strace: bool) -> Option<SyscallCount> {
    let tool = syscall_counter(allow_strace);
    let pid_s = pid.to_string();
    let mut cmd = match tool {
        SyscallTool::Perf => {
            let mut c = Command::new("perf");
            c.args(["stat", "-x", ",", "-e", PERF_EVENT, "-p", &pid_s]);
            c
        }
        SyscallTool::Strace => {
            let mut c = Command::new("strace");
            c.args(["-c", "-f", "-p", &pid_s]);
            c
        }
        SyscallTool::None => return None,
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let reader = spawn_reader(&mut child);
    Some(SyscallCount {
        tool,
        pid,
        child: Some(child),
        reader,
    })
}

/// Sends SIGINT to a child, waits up to `timeout` for it, then kills it.
fn interrupt_and_wait(child: &mut Child, timeout: Duration) {
    if let Ok(None) = child.try_wait() {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child,
        // not yet reaped, so it cannot have been reused.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}

impl SyscallCount {
    /// The tool doing the counting.
    pub fn tool(&self) -> SyscallTool {
        self.tool
    }

    /// The traced process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops the counter (SIGINT: perf prints its count, strace detaches and prints its
    /// summary) and returns the number of system calls since it attached. If the traced
    /// process exited first, the count up to its exit.
    pub fn finish(mut self) -> Option<u64> {
        let mut child = self.child.take()?;
        interrupt_and_wait(&mut child, Duration::from_secs(5));
        let out = self.reader.take()?.join().ok()?;
        match self.tool {
            SyscallTool::Perf => parse_perf_stat(&out),
            SyscallTool::Strace => parse_strace_summary(&out),
            SyscallTool::None => None,
        }
    }
}

impl Drop for SyscallCount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            interrupt_and_wait(&mut child, Duration::from_secs(2));
        }
    }
}

/// A `perf stat -I` stream counting a process's system calls continuously: a reader
/// thread adds each interval's count to a running total.
#[derive(Debug)]
struct SyscallStream {
    total: Arc<AtomicU64>,
    child: Child,
    reader: Option<JoinHandle<()>>,
}

impl SyscallStream {
    fn start(pid: u32, interval: Duration) -> Option<SyscallStream> {
        let ms = interval.as_millis().clamp(10, 10_000).to_string();
        let mut child = Command::new("perf")
            .args(["stat", "-I", &ms, "-x", ",", "-e", PERF_EVENT])
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let stderr = child.stderr.take()?;
        let total = Arc::new(AtomicU64::new(0));
        let sink = Arc::clone(&total);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = parse_perf_stat(&line) {
                    sink.fetch_add(n, Ordering::Relaxed);
                }
            }
        });
        Some(SyscallStream {
            total,
            child,
            reader: Some(reader),
        })
    }
}

impl Drop for SyscallStream {
    fn drop(&mut self) {
        interrupt_and_wait(&mut self.child, Duration::from_secs(2));
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Process monitor
// ---------------------------------------------------------------------------------------

/// Options of a [`ProcessMonitor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorOptions {
    /// Time between background samples.
    pub interval: Duration,
    /// Also count system calls with `perf stat -I` (only if perf can; strace is never
    /// used here). Counts lag by up to one interval (perf reports per interval).
    pub count_syscalls: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            interval: Duration::from_millis(100),
            count_syscalls: false,
        }
    }
}

/// A point in a [`ProcessMonitor`]'s timeline; usage is reported between marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mark(usize);

struct Tracked {
    name: String,
    pid: u32,
    first: ProcSample,
    last: ProcSample,
    exited: bool,
    /// Largest RSS sampled since the latest mark.
    seg_max_rss: u64,
    /// Running syscall total fed by `stream` (kept after the stream stops).
    syscalls: Option<Arc<AtomicU64>>,
    stream: Option<SyscallStream>,
}

struct MarkSnap {
    /// Each tracked process's sample and syscall total at the mark.
    procs: HashMap<u32, (ProcSample, Option<u64>)>,
    system: Option<SystemStat>,
    /// Largest RSS sampled between this mark and the next (filled when the next mark is
    /// taken).
    seg_max_rss: HashMap<u32, u64>,
}

struct MonitorState {
    procs: Vec<Tracked>,
    marks: Vec<MarkSnap>,
}

impl MonitorState {
    /// Records a fresh sample (or the process's exit) for `pid`.
    fn update(&mut self, pid: u32, sample: io::Result<ProcSample>) {
        let Some(t) = self.procs.iter_mut().find(|t| t.pid == pid) else {
            return;
        };
        if t.exited {
            return;
        }
        match sample {
            Ok(s) if s.is_exited() => {
                // A zombie still has its CPU times, but no memory figures or threads.
                t.last.utime_ticks = t.last.utime_ticks.max(s.utime_ticks);
                t.last.stime_ticks = t.last.stime_ticks.max(s.stime_ticks);
                t.last.state = s.state;
                t.last.at = s.at;
                t.exited = true;
            }
            Ok(s) => {
                if s.at >= t.last.at {
                    t.seg_max_rss = t.seg_max_rss.max(s.vm_rss_bytes);
                    t.last = s;
                }
            }
            Err(_) => {
                t.exited = true;
                t.last.state = 'X';
            }
        }
    }

    fn live_pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .filter(|t| !t.exited)
            .map(|t| t.pid)
            .collect()
    }
}

/// Samples a set of processes every `interval` in a background thread and reports their
/// usage between [`Mark`]s. Keeps, per process, the first and the latest sample (a
/// process that exits keeps its last one) plus one snapshot per mark, so memory grows
/// only with the number of marks. The thread stops on [`ProcessMonitor::stop`] or drop.
pub struct ProcessMonitor {
    state: Arc<Mutex<MonitorState>>,
    options: MonitorOptions,
    syscalls_counted: bool,
    stop_tx: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProcessMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessMonitor")
            .field("options", &self.options)
            .field("syscalls_counted", &self.syscalls_counted)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl ProcessMonitor {
    /// Starts monitoring `procs` (name, pid) every `interval`, without syscall counts.
    /// Mark 0 ([`ProcessMonitor::start_mark`]) is taken at once.
    pub fn start(procs: &[(String, u32)], interval: Duration) -> ProcessMonitor {
        Self::start_with(
            procs,
            MonitorOptions {
                interval,
                count_syscalls: false,
            },
        )
    }

    /// Starts monitoring `procs` (name, pid) with `options`. Processes that do not exist
    /// are reported as exited with zero usage.
    pub fn start_with(procs: &[(String, u32)], options: MonitorOptions) -> ProcessMonitor {
        let syscalls_counted = options.count_syscalls && perf_can_count_syscalls();
        let state = Arc::new(Mutex::new(MonitorState {
            procs: Vec::new(),
            marks: Vec::new(),
        }));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let mut monitor = ProcessMonitor {
            state: Arc::clone(&state),
            options,
            syscalls_counted,
            stop_tx: Some(stop_tx),
            thread: None,
        };
        for (name, pid) in procs {
            monitor.add(name, *pid);
        }
        monitor.mark();
        let interval = options.interval.max(Duration::from_millis(1));
        monitor.thread = Some(std::thread::spawn(move || {
            // Sample every interval until stopped (message or sender dropped).
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(interval) {
                let pids = state.lock().map(|s| s.live_pids()).unwrap_or_default();
                let samples: Vec<(u32, io::Result<ProcSample>)> =
                    pids.into_iter().map(|p| (p, sample_process(p))).collect();
                let Ok(mut s) = state.lock() else { break };
                for (pid, sample) in samples {
                    s.update(pid, sample);
                }
            }
        }));
        monitor
    }

    /// Adds a process to monitor (e.g. one started after the monitor). Windows from
    /// marks taken before it was added start at its first sample. Adding a pid twice is
    /// a no-op.
    pub fn add(&self, name: &str, pid: u32) {
        let sample = sample_process(pid);
        let stream = if self.syscalls_counted && sample.is_ok() {
            SyscallStream::start(pid, self.options.interval)
        } else {
            None
        };
        let Ok(mut s) = self.state.lock() else { return };
        if s.procs.iter().any(|t| t.pid == pid) {
            return;
        }
        let (first, exited) = match sample {
            Ok(sample) => {
                let exited = sample.is_exited();
                (sample, exited)
            }
            Err(_) => (empty_sample(pid), true),
        };
        s.procs.push(Tracked {
            name: name.to_string(),
            pid,
            seg_max_rss: first.vm_rss_bytes,
            last: first.clone(),
            first,
            exited,
            syscalls: stream.as_ref().map(|c| Arc::clone(&c.total)),
            stream,
        });
    }

    /// True if system calls are being counted (requested and perf can count them).
    pub fn syscalls_counted(&self) -> bool {
        self.syscalls_counted
    }

    /// The mark taken when the monitor started.
    pub fn start_mark(&self) -> Mark {
        Mark(0)
    }

    /// Samples every live process now and records a mark: the start (or end) of a
    /// window for [`ProcessMonitor::usage_since`] and [`ProcessMonitor::usage_between`].
    pub fn mark(&self) -> Mark {
        let system = read_system_stat().ok();
        let pids = self.state.lock().map(|s| s.live_pids()).unwrap_or_default();
        let samples: Vec<(u32, io::Result<ProcSample>)> =
            pids.into_iter().map(|p| (p, sample_process(p))).collect();
        let Ok(mut s) = self.state.lock() else {
            return Mark(0);
        };
        for (pid, sample) in samples {
            s.update(pid, sample);
        }
        let mut procs = HashMap::new();
        let mut seg = HashMap::new();
        for t in s.procs.iter_mut() {
            seg.insert(t.pid, t.seg_max_rss);
            t.seg_max_rss = t.last.vm_rss_bytes;
            let sys = t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed));
            procs.insert(t.pid, (t.last.clone(), sys));
        }
        if let Some(prev) = s.marks.last_mut() {
            prev.seg_max_rss = seg;
        }
        s.marks.push(MarkSnap {
            procs,
            system,
            seg_max_rss: HashMap::new(),
        });
        Mark(s.marks.len() - 1)
    }

    /// Usage of each monitored process from `mark` until now (sampled now). For a process
    /// that exited, the window ends at its last sample.
    pub fn usage_since(&self, mark: Mark) -> Vec<ProcessUsage> {
        let pids = self.state.lock().map(|s| s.live_pids()).unwrap_or_default();
        let samples: Vec<(u32, io::Result<ProcSample>)> =
            pids.into_iter().map(|p| (p, sample_process(p))).collect();
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        for (pid, sample) in samples {
            s.update(pid, sample);
        }
        let s = &*s;
        let Some(_) = s.marks.get(mark.0) else {
            return Vec::new();
        };
        s.procs
            .iter()
            .map(|t| {
                let end = (
                    t.last.clone(),
                    t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed)),
                );
                let mut peak = t.seg_max_rss;
                for m in &s.marks[mark.0..s.marks.len() - 1] {
                    peak = peak.max(m.seg_max_rss.get(&t.pid).copied().unwrap_or(0));
                }
                window_usage(t, s.marks[mark.0].procs.get(&t.pid), &end, peak)
            })
            .collect()
    }

    /// Usage of each monitored process between marks `a` and `b` (a before b).
    /// Processes added after `b` are left out. Empty if either mark is unknown.
    pub fn usage_between(&self, a: Mark, b: Mark) -> Vec<ProcessUsage> {
        let (a, b) = (a.min(b), a.max(b));
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        let (Some(ma), Some(mb)) = (s.marks.get(a.0), s.marks.get(b.0)) else {
            return Vec::new();
        };
        s.procs
            .iter()
            .filter_map(|t| {
                let end = mb.procs.get(&t.pid)?;
                let mut peak = end.0.vm_rss_bytes;
                for m in &s.marks[a.0..b.0] {
                    peak = peak.max(m.seg_max_rss.get(&t.pid).copied().unwrap_or(0));
                }
                Some(window_usage(t, ma.procs.get(&t.pid), end, peak))
            })
            .collect()
    }

    /// Usage of each process from its first sample to its latest one.
    pub fn usage_total(&self) -> Vec<ProcessUsage> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        s.procs
            .iter()
            .map(|t| {
                let mut u = usage_between(&t.name, &t.first, &t.last);
                u.exited = t.exited;
                u.syscalls = t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed));
                u
            })
            .collect()
    }

    /// System-wide usage (/proc/stat) from `mark` until now.
    pub fn system_since(&self, mark: Mark) -> Option<SystemUsage> {
        let now = read_system_stat().ok()?;
        let s = self.state.lock().ok()?;
        Some(system_usage_between(
            s.marks.get(mark.0)?.system.as_ref()?,
            &now,
        ))
    }

    /// System-wide usage (/proc/stat) between marks `a` and `b`.
    pub fn system_between(&self, a: Mark, b: Mark) -> Option<SystemUsage> {
        let (a, b) = (a.min(b), a.max(b));
        let s = self.state.lock().ok()?;
        Some(system_usage_between(
            s.marks.get(a.0)?.system.as_ref()?,
            s.marks.get(b.0)?.system.as_ref()?,
        ))
    }

    /// Stops the sampling thread and the syscall counters. The figures gathered so far
    /// stay available. Idempotent.
    pub fn stop(&mut self) {
        self.stop_tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Dropping a stream stops perf, whose last partial interval still reaches the
        // shared total; do it outside the lock (it waits for perf).
        let streams: Vec<SyscallStream> = match self.state.lock() {
            Ok(mut s) => s.procs.iter_mut().filter_map(|t| t.stream.take()).collect(),
            Err(_) => Vec::new(),
        };
        drop(streams);
    }
}

impl Drop for ProcessMonitor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A placeholder sample for a process that could not be read.
fn empty_sample(pid: u32) -> ProcSample {
    ProcSample {
        pid,
        at: Instant::now(),
        comm: String::new(),
        state: 'X',
        utime_ticks: 0,
        stime_ticks: 0,
        voluntary_ctxt_switches: 0,
        nonvoluntary_ctxt_switches: 0,
        vm_hwm_bytes: 0,
        vm_rss_bytes: 0,
        threads: 0,
        processor: None,
        migrations: None,
        thread_samples: Vec::new(),
    }
}

/// Usage of tracked process `t` from `start` (its snapshot at the window's start mark,
/// or its first sample if it was added later) to `end`.
fn window_usage(
    t: &Tracked,
    start: Option<&(ProcSample, Option<u64>)>,
    end: &(ProcSample, Option<u64>),
    peak: u64,
) -> ProcessUsage {
    let first = (t.first.clone(), Some(0));
    let start = start.unwrap_or(&first);
    let mut u = usage_between(&t.name, &start.0, &end.0);
    u.max_sampled_rss_bytes = u.max_sampled_rss_bytes.max(peak);
    u.exited = end.0.is_exited();
    u.syscalls = match (start.1, end.1) {
        (Some(x), Some(y)) => Some(y.saturating_sub(x)),
        _ => None,
    };
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str =
        "12345 (tick wire) (x)) S 1 12345 12345 34816 12345 4194560 2770 53044 2 137 \
        421 37 104 302 20 0 7 0 268718 5124096 969 18446744073709551615 93943920492544 \
        93943921281949 140724746304768 0 0 0 65536 4 1132560123 1 0 0 17 1 0 0 0 0 0 \
        93943921515248 93943921563492 93944113565696 140724746312541 140724746312556 \
        140724746312556 140724746313706 0\n";

    const STATUS: &str = "Name:\ttickwire-node\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t12345\n\
        Pid:\t12345\nPPid:\t1\nVmPeak:\t  105004 kB\nVmSize:\t  105004 kB\nVmHWM:\t    4012 kB\n\
        VmRSS:\t    3900 kB\nRssAnon:\t     968 kB\nThreads:\t7\nSigQ:\t0/96365\n\
        Cpus_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t71\nnonvoluntary_ctxt_switches:\t9\n";

    const SCHED: &str = "tickwire-node (12345, #threads: 7)\n\
        -------------------------------------------------------------------\n\
        se.exec_start                                :       2695631.354255\n\
        se.vruntime                                  :            86.490745\n\
        se.sum_exec_runtime                          :            16.441043\n\
        se.nr_migrations                             :                    5\n\
        nr_switches                                  :                   36\n\
        nr_voluntary_switches                        :                   31\n";

    const PROC_STAT: &str = "cpu  109826 47738 26045 385604 1940 0 1392 531 0 0\n\
        cpu0 53186 17603 11726 202679 353 0 678 222 0 0\n\
        cpu1 56640 30135 14318 182925 1587 0 713 309 0 0\n\
        intr 1439592 0 0 0 0\n\
        ctxt 1719697\nbtime 1795319178\nprocesses 52428\nprocs_running 6\nprocs_blocked 0\n\
        softirq 1625075 0 129064 4 860933 88963 0 247 263430 3492 278942\n";

    #[test]
    fn parses_stat_with_parentheses_in_comm() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.pid, 12345);
        assert_eq!(s.comm, "tick wire) (x)");
        assert_eq!(s.state, 'S');
        assert_eq!(s.utime_ticks, 421);
        assert_eq!(s.stime_ticks, 37);
        assert_eq!(s.num_threads, 7);
        assert_eq!(s.start_time_ticks, 268718);
        assert_eq!(s.processor, Some(1));
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1 2").is_none());
    }

    #[test]
    fn parses_status() {
        let s = parse_status(STATUS);
        assert_eq!(s.name.as_deref(), Some("tickwire-node"));
        assert_eq!(s.state, Some('S'));
        assert_eq!(s.threads, Some(7));
        assert_eq!(s.vm_hwm_bytes, Some(4012 * 1024));
        assert_eq!(s.vm_rss_bytes, Some(3900 * 1024));
        assert_eq!(s.voluntary_ctxt_switches, Some(71));
        assert_eq!(s.nonvoluntary_ctxt_switches, Some(9));
        // A zombie has no Vm lines.
        let z = parse_status("Name:\tsleep\nState:\tZ (zombie)\nThreads:\t1\n");
        assert_eq!(z.state, Some('Z'));
        assert_eq!(z.vm_hwm_bytes, None);
    }

    #[test]
    fn parses_sched_migrations() {
        assert_eq!(parse_sched_migrations(SCHED), Some(5));
        assert_eq!(parse_sched_migrations("nr_switches : 3\n"), None);
    }

    #[test]
    fn parses_proc_stat_and_utilisation() {
        let a = parse_proc_stat(PROC_STAT).unwrap();
        assert_eq!(a.cpus.len(), 2);
        assert_eq!(a.total.cpu, None);
        assert_eq!(a.cpus[1].cpu, Some(1));
        assert_eq!(a.cpus[1].nice, 30135);
        assert_eq!(a.cpus[0].steal, 222);
        assert_eq!(a.context_switches, 1719697);
        assert_eq!(a.forks, 52428);
        assert_eq!(a.procs_running, 6);

        // cpu0: 50 user, 10 system, 20 softirq, 20 idle ticks; cpu1: all idle.
        let b_text = "cpu  0 0 0 0 0 0 0 0\n\
            cpu0 53236 17603 11736 202699 353 0 698 222 0 0\n\
            cpu1 56640 30135 14318 183025 1587 0 713 309 0 0\nctxt 1720697\n";
        let mut b = parse_proc_stat(b_text).unwrap();
        b.at = a.at + Duration::from_secs(2);
        let u = cpu_utilisation(&a.cpus, &b.cpus);
        assert_eq!(u.len(), 2);
        assert!((u[0].busy_percent - 80.0).abs() < 1e-9);
        assert!((u[0].user_percent - 50.0).abs() < 1e-9);
        assert!((u[0].system_percent - 10.0).abs() < 1e-9);
        assert!((u[0].softirq_percent - 20.0).abs() < 1e-9);
        assert_eq!(u[1].busy_percent, 0.0);
        let sys = system_usage_between(&a, &b);
        assert_eq!(sys.context_switches, 1000);
        assert!((sys.context_switches_per_s - 500.0).abs() < 1e-9);
        // Counters going backwards (iowait can) do not underflow; identical is all zero.
        let same = cpu_util_between(&a.cpus[0], &a.cpus[0]);
        assert_eq!(same.busy_percent, 0.0);
        assert!(parse_proc_stat("ctxt 5\n").is_none());
    }

    #[test]
    fn parses_machine_files() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n";
        assert_eq!(
            parse_cpuinfo_model(cpuinfo).as_deref(),
            Some("AMD EPYC 7B13 64-Core Processor")
        );
        let arm = "processor\t: 0\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
        assert_eq!(
            parse_cpuinfo_model(arm).as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert_eq!(parse_cpuinfo_model(""), None);
        let meminfo = "MemTotal:       24683656 kB\nMemFree:        22751312 kB\n";
        assert_eq!(parse_meminfo_total(meminfo), Some(24683656 * 1024));
        let os = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            parse_os_release_pretty_name(os).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            parse_os_release_pretty_name("PRETTY_NAME=Alpine\n").as_deref(),
            Some("Alpine")
        );
        assert_eq!(parse_os_release_pretty_name("ID=x\n"), None);
    }

    #[test]
    fn parses_perf_stat_outputs() {
        // perf stat -x, -e raw_syscalls:sys_enter -p PID (stopped with SIGINT)
        let csv = "1536056,,raw_syscalls:sys_enter,960211861,100.00,,\n";
        assert_eq!(parse_perf_stat(csv), Some(1536056));
        // Human-readable format.
        let human = "\n Performance counter stats for process id '11690':\n\n\
            \x20          1538605      raw_syscalls:sys_enter                                             \n\n\
            \x20      0.963051747 seconds time elapsed\n\n";
        assert_eq!(parse_perf_stat(human), Some(1538605));
        // Human format with thousands grouping (locale-dependent).
        let grouped = "     1,538,605      raw_syscalls:sys_enter\n";
        assert_eq!(parse_perf_stat(grouped), Some(1538605));
        // perf stat -x, -o file writes a comment line first.
        let with_comment =
            "# started on Sun Nov 22 04:31:21 2026\n\n29,,raw_syscalls:sys_enter,515157,100.00,,\n";
        assert_eq!(parse_perf_stat(with_comment), Some(29));
        // -I intervals: summed.
        let intervals = "     0.100186856,100263,,raw_syscalls:sys_enter,50688098,100.00,,\n\
            \x20    0.200492253,83863,,raw_syscalls:sys_enter,52204197,100.00,,\n\
            \x20    0.228391910,20266,,raw_syscalls:sys_enter,9252122,100.00,,\n";
        assert_eq!(parse_perf_stat(intervals), Some(100263 + 83863 + 20266));
        // The task never ran: not counted = 0.
        let idle = "     0.100140418,<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n";
        assert_eq!(parse_perf_stat(idle), Some(0));
        assert_eq!(
            parse_perf_stat("   <not counted>      raw_syscalls:sys_enter\n"),
            Some(0)
        );
        assert_eq!(
            parse_perf_stat("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n"),
            None
        );
        // Errors: no tracepoint access, perf missing for this kernel.
        let denied = "event syntax error: 'raw_syscalls:sys_enter'\n                     \\___ can't access trace events\n\nError:\tNo permissions to read /sys/kernel/tracing/events/raw_syscalls/sys_enter\nHint:\tTry 'sudo mount -o remount,mode=755 /sys/kernel/tracing/'\n";
        assert_eq!(parse_perf_stat(denied), None);
        assert_eq!(
            parse_perf_stat("WARNING: perf not found for kernel 6.1.0-13\n"),
            None
        );
        assert_eq!(parse_perf_stat(""), None);
    }

    #[test]
    fn parses_strace_summaries() {
        // strace 6.1: strace -c -f -p PID, detached with SIGINT.
        let new = "strace: Process 12151 attached\nstrace: Process 12151 detached\n\
% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.149262           5     28501           write\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.149262           5     28501           total\n";
        assert_eq!(parse_strace_summary(new), Some(28501));
        // Several syscalls, errors on the total line.
        let mixed = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 61.54    0.000400           4       100           sendto\n\
 30.77    0.000200           1       150        42 recvfrom\n\
  7.69    0.000050           2        25           epoll_wait\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.000650           2       275        42 total\n";
        assert_eq!(parse_strace_summary(mixed), Some(275));
        // Older strace (4.x) leaves usecs/call blank on the total line.
        let old = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 28.57    0.000012           1         9           mmap\n\
 71.43    0.000030           1        43         3 read\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.000042                    52         3 total\n";
        assert_eq!(parse_strace_summary(old), Some(52));
        assert_eq!(
            parse_strace_summary(
                "strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"
            ),
            None
        );
    }

    #[test]
    fn usage_between_computes_deltas() {
        let t = |tid, u, vol, mig| ThreadSample {
            tid,
            comm: format!("t{tid}"),
            processor: Some(tid % 2),
            utime_ticks: u,
            stime_ticks: 0,
            voluntary_ctxt_switches: vol,
            nonvoluntary_ctxt_switches: 1,
            migrations: Some(mig),
            // 10 µs waited per run, runs counted by the voluntary switches.
            run_delay_ns: Some(vol * 10_000),
            runs: Some(vol),
        };
        let tck = clock_ticks_per_sec();
        let mut a = empty_sample(7);
        a.state = 'S';
        a.utime_ticks = 10;
        a.stime_ticks = 5;
        a.vm_hwm_bytes = 1000;
        a.vm_rss_bytes = 900;
        a.thread_samples = vec![t(7, 10, 100, 3), t(8, 0, 50, 1)];
        let mut b = a.clone();
        b.at = a.at + Duration::from_secs(2);
        b.utime_ticks = 10 + 2 * tck; // 2 s user
        b.stime_ticks = 5 + tck; // 1 s system
        b.vm_hwm_bytes = 5000;
        b.vm_rss_bytes = 4000;
        // Thread 8 exited, thread 9 is new.
        b.thread_samples = vec![t(7, 10 + 2 * tck, 130, 5), t(9, tck, 20, 2)];
        b.migrations = Some(7);
        a.migrations = Some(4);
        let u = usage_between("node", &a, &b);
        assert_eq!(u.name, "node");
        assert_eq!(u.pid, 7);
        assert!((u.wall_s - 2.0).abs() < 1e-9);
        assert!((u.cpu_user_s - 2.0).abs() < 1e-9);
        assert!((u.cpu_sys_s - 1.0).abs() < 1e-9);
        assert!((u.cpu_percent - 150.0).abs() < 1e-9);
        assert_eq!(u.peak_rss_bytes, 5000);
        assert_eq!(u.max_sampled_rss_bytes, 4000);
        assert_eq!(u.voluntary_ctx_switches, 30 + 20);
        assert_eq!(u.involuntary_ctx_switches, 1);
        assert_eq!(u.migrations, Some(2 + 2));
        // Waits: 30 runs of thread 7 and the new thread 9's 20, 10 µs each.
        assert!(
            (u.run_delay_s.unwrap() - 50.0 * 10e-6).abs() < 1e-12,
            "{u:?}"
        );
        assert!(
            (u.run_delay_us_per_run.unwrap() - 10.0).abs() < 1e-9,
            "{u:?}"
        );
        assert_eq!(u.syscalls, None);
        assert!(!u.exited);
        assert_eq!(u.thread_usage.len(), 2);
        assert_eq!(u.thread_usage[0].tid, 7);
        assert!((u.thread_usage[0].cpu_percent - 100.0).abs() < 1e-9);
        // Identical samples: zero, no NaN.
        let z = usage_between("x", &a, &a);
        assert_eq!(z.cpu_percent, 0.0);
        assert_eq!(z.run_delay_s, Some(0.0));
        assert_eq!(
            z.run_delay_us_per_run, None,
            "no run in the window: no average"
        );
        let json = serde_json::to_string(&u).unwrap();
        let back: ProcessUsage = serde_json::from_str(&json).unwrap();
        assert_eq!(back, u);
    }

    #[test]
    fn schedstat_gives_run_time_run_delay_and_runs() {
        assert_eq!(
            parse_schedstat("550021254 346223 37\n"),
            Some((550021254, 346223, 37))
        );
        assert_eq!(parse_schedstat("1 2"), None);
        assert_eq!(parse_schedstat("1 x 3"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn samples_current_process() {
        let pid = std::process::id();
        let a = sample_process(pid).unwrap();
        assert_eq!(a.pid, pid);
        assert!(a.vm_hwm_bytes > 0);
        assert!(a.vm_rss_bytes > 0);
        assert!(a.threads >= 1);
        assert!(!a.thread_samples.is_empty());
        assert!(a.processor.is_some());
        // Busy for ~50 ms (longer only if the CPU time has not moved yet).
        let start = Instant::now();
        let mut x = 0u64;
        loop {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let elapsed = start.elapsed();
            if elapsed > Duration::from_secs(2) {
                break;
            }
            if elapsed > Duration::from_millis(50) {
                let now = sample_process(pid).unwrap();
                if now.utime_ticks + now.stime_ticks > a.utime_ticks + a.stime_ticks {
                    break;
                }
            }
        }
        let b = sample_process(pid).unwrap();
        assert!(
            b.utime_ticks > a.utime_ticks,
            "{} {}",
            a.utime_ticks,
            b.utime_ticks
        );
        let u = usage_between("self", &a, &b);
        assert!(u.cpu_user_s > 0.0);
        assert!(u.cpu_percent > 0.0 && u.cpu_percent.is_finite());
        assert!(u.peak_rss_bytes > 0);
        let s = serde_json::to_string(&b).unwrap();
        let back: ProcSample = serde_json::from_str(&s).unwrap();
        assert_eq!(back.utime_ticks, b.utime_ticks);
        assert_eq!(
            sample_process(u32::MAX - 1).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn reads_system_and_machine() {
        let a = read_system_stat().unwrap();
        assert!(!a.cpus.is_empty());
        assert!(a.context_switches > 0);
        std::thread::sleep(Duration::from_millis(30));
        let b = read_system_stat().unwrap();
        let usage = system_usage_between(&a, &b);
        for c in usage.cpus.iter().chain(std::iter::once(&usage.total)) {
            assert!((0.0..=100.0).contains(&c.busy_percent), "{c:?}");
        }
        assert_eq!(read_cpu_times().unwrap().len(), a.cpus.len());
        let m = machine();
        assert!(m.cpus >= 1);
        assert!(!m.kernel.is_empty());
        assert!(m.memory_bytes > 0);
        assert!(!m.cpu_model.is_empty());
        assert!(m.socket_receive_buffer_max_bytes.is_some_and(|b| b > 0));
        assert!(clock_ticks_per_sec() > 0);
    }

    #[test]
    fn monitor_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ProcessMonitor>();
        check::<SyscallCount>();
    }

    #[test]
    fn syscall_tool_detection_returns() {
        let without = syscall_counter(false);
        assert_ne!(without, SyscallTool::Strace);
        let with = syscall_counter(true);
        if without == SyscallTool::Perf {
            assert_eq!(with, SyscallTool::Perf);
        }
    }

    #[test]
    fn counts_syscalls_when_perf_can() {
        if syscall_counter(false) != SyscallTool::Perf {
            return;
        }
        let count = start_syscall_count(std::process::id(), false).unwrap();
        assert_eq!(count.tool(), SyscallTool::Perf);
        std::thread::sleep(Duration::from_millis(300)); // let perf attach
        for _ in 0..2000 {
            // SAFETY: getppid has no preconditions.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        let n = count.finish().unwrap();
        eprintln!("syscalls counted by perf: {n}");
        assert!(n >= 2000, "{n}");
    }

    #[test]
    fn monitor_follows_a_child_to_its_exit() {
        let mut child = Command::new("sleep").arg("1").spawn().unwrap();
        let pid = child.id();
        let mut mon = ProcessMonitor::start(
            &[
                ("sleep".to_string(), pid),
                ("gone".to_string(), u32::MAX - 1),
            ],
            Duration::from_millis(50),
        );
        let m1 = mon.mark();
        std::thread::sleep(Duration::from_millis(200));
        let m2 = mon.mark();
        let mid = mon.usage_between(m1, m2);
        assert_eq!(mid.len(), 2);
        let s = mid.iter().find(|u| u.pid == pid).unwrap();
        assert!(!s.exited);
        assert!(s.peak_rss_bytes > 0);
        assert!(s.wall_s > 0.15 && s.wall_s < 1.0, "{}", s.wall_s);
        assert!(s.cpu_percent < 50.0);
        let gone = mid.iter().find(|u| u.name == "gone").unwrap();
        assert!(gone.exited);
        assert_eq!(gone.cpu_percent, 0.0);

        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let all = mon.usage_since(mon.start_mark());
        let s = all.iter().find(|u| u.pid == pid).unwrap();
        eprintln!("{s:?}");
        assert!(s.exited);
        assert_eq!(s.name, "sleep");
        assert!(s.peak_rss_bytes > 0, "the last sample before exit is kept");
        assert!(s.max_sampled_rss_bytes > 0);
        assert!(s.wall_s > 0.5, "{}", s.wall_s);
        assert!(mon.system_since(m1).is_some());
        assert!(mon.system_between(m1, m2).is_some());
        mon.stop();
        mon.stop();
        // Figures stay available after stop.
        assert_eq!(mon.usage_total().len(), 2);
        assert!(mon.usage_between(m1, Mark(99)).is_empty());
    }

    #[test]
    fn monitor_measures_cpu_and_syscalls_of_a_busy_process() {
        let pid = std::process::id();
        let mon = ProcessMonitor::start_with(
            &[("self".to_string(), pid)],
            MonitorOptions {
                interval: Duration::from_millis(20),
                count_syscalls: true,
            },
        );
        std::thread::sleep(Duration::from_millis(300)); // let perf attach
        let m = mon.mark();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(60) {
            for i in 0..10_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            // SAFETY: getppid has no preconditions.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        std::thread::sleep(Duration::from_millis(100)); // let perf report
        let u = mon.usage_since(m);
        eprintln!("{:?}", u);
        eprintln!("{:?}", mon.system_since(m));
        assert_eq!(u.len(), 1);
        assert!(u[0].cpu_user_s + u[0].cpu_sys_s > 0.0);
        assert!(!u[0].thread_usage.is_empty());
        if mon.syscalls_counted() {
            assert!(u[0].syscalls.unwrap() > 0);
        } else {
            assert_eq!(u[0].syscalls, None);
        }
        drop(mon);
    }
}
