//! The clock tick, the parsers of /proc/PID/stat, status and schedstat, and a
//! process's exact CPU time.

use super::*;

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

pub(super) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("cannot parse {what}"))
}

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
pub(super) fn parse_kb(value: &str) -> Option<u64> {
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

/// A process's time on a CPU in ns, every thread's, those that have ended too: the
/// kernel's CPU-time clock of the process (`clock_getcpuclockid`), the threads' run
/// times as schedstat counts them plus those of the threads that have exited. Exact, not
/// rounded to clock ticks as /proc/PID/stat's utime and stime are, so a window of a
/// second or two is measured well. (The threads' schedstat files would lose an exited
/// thread's time, and a thread exiting while they are read would fail the read.) `None`
/// once the process has been reaped.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both calls only write the out-parameters, which are valid.
    let ok = unsafe {
        libc::clock_getcpuclockid(pid, &mut clock) == 0 && libc::clock_gettime(clock, &mut t) == 0
    };
    ok.then(|| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
}
