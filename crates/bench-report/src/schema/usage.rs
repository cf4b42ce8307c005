//! What a process and the whole system used over a window (from /proc, sampled by the
//! lab).

use serde::{Deserialize, Serialize};

/// One thread's usage over a window (part of [`ProcessUsage`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadUsage {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// CPU seconds in the window (schedstat's exact count where the kernel has it,
    /// else user + system clock ticks).
    pub cpu_s: f64,
    /// CPU time as a percentage of one core over the window.
    pub cpu_percent: f64,
    /// CPU the thread last ran on at the end of the window.
    pub processor: Option<u32>,
    /// Scheduler migrations in the window.
    pub migrations: Option<u64>,
}

/// A process's resource usage over a window: the difference of two samples of
/// /proc/PID.
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
    /// CPU time ([`ProcessUsage::cpu_s`]) as a percentage of one core over the window
    /// (200 = two cores busy).
    pub cpu_percent: f64,
    /// Seconds on a CPU in the window by the scheduler's own count (schedstat, in ns),
    /// if the kernel exposes it: every thread alive at the window's end (one that ended
    /// inside the window is not counted). `cpu_user_s` and `cpu_sys_s` come
    /// from clock ticks, which sample rather than count: a process that runs in short
    /// bursts (a node at 1,000 updates/s) can be charged half or twice its time.
    #[serde(default)]
    pub on_cpu_s: Option<f64>,
    /// Peak resident set size of the process's life up to the window's end (VmHWM).
    pub peak_rss_bytes: u64,
    /// Resident set size at the window's end.
    pub rss_bytes: u64,
    /// Largest RSS seen by sampling within the window (the window's ends and, with a
    /// the lab's process monitor, every sample in between).
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
    /// System calls in the window, if counted (by `perf stat` or `strace -c`).
    pub syscalls: Option<u64>,
    /// Threads at the window's end.
    pub threads: u64,
    /// True if the process had exited by the window's end (figures then stop at its
    /// last sample).
    pub exited: bool,
    /// Per-thread usage, busiest first.
    pub thread_usage: Vec<ThreadUsage>,
}

impl ProcessUsage {
    /// CPU seconds in the window: the scheduler's exact count where there is one, else
    /// user + system from clock ticks.
    pub fn cpu_s(&self) -> f64 {
        self.on_cpu_s.unwrap_or(self.cpu_user_s + self.cpu_sys_s)
    }
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

/// System-wide usage over a window: the difference of two /proc/stat readings.
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
