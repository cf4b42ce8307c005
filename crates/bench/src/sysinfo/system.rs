//! /proc/stat: per-CPU times, utilisation, system-wide context switches.

use super::*;

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
