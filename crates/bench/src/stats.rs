//! Latency statistics, the clock the lab timestamps with, and this process's own CPU and
//! memory use.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tickwire_bench_report::schema::LatencySummary;

/// Highest latency recorded (60 s); larger values are clamped to it.
const MAX_NS: u64 = 60_000_000_000;

/// TIM_TRK_1 values below this are not timestamps: updates not selected for a latency
/// sample carry `NO_TIMESTAMP` instead, a 9-byte varint like a real timestamp, so every
/// update has the same size.
pub const TIMESTAMP_FLOOR: u64 = 1 << 57;
/// What TIM_TRK_1 carries on an update without a latency sample: below
/// [`TIMESTAMP_FLOOR`], and as many bytes on the wire as a real timestamp.
pub const NO_TIMESTAMP: u64 = 1 << 56;

/// Nanoseconds since the Unix epoch from CLOCK_REALTIME (vDSO, no system call). Publisher
/// and subscriber on one host read the same clock.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An HdrHistogram of latencies in nanoseconds (3 significant digits).
pub struct Latency {
    h: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            h: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds"),
        }
    }
}

impl Latency {
    /// Records one latency in ns (clamped to 1 ns .. 60 s).
    pub fn record(&mut self, ns: u64) {
        let _ = self.h.record(ns.clamp(1, MAX_NS));
    }

    /// Adds `other`'s samples to these.
    pub fn add(&mut self, other: &Latency) {
        let _ = self.h.add(&other.h);
    }

    /// Drops every sample.
    pub fn reset(&mut self) {
        self.h.reset();
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// Count, mean, standard deviation, min, max and percentiles, in ns (all 0 when
    /// empty).
    pub fn summary(&self) -> LatencySummary {
        let h = &self.h;
        if h.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: h.len(),
            mean_ns: h.mean(),
            stddev_ns: h.stdev(),
            min_ns: h.min(),
            max_ns: h.max(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            p9999_ns: h.value_at_quantile(0.9999),
        }
    }
}

/// CPU seconds and peak memory of this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SelfUsage {
    /// User-mode CPU seconds.
    pub cpu_user_s: f64,
    /// Kernel-mode CPU seconds.
    pub cpu_sys_s: f64,
    /// Peak resident set size, bytes.
    pub peak_rss_bytes: u64,
    /// Context switches where the process gave up its CPU (it waited).
    pub voluntary_ctx_switches: u64,
    /// Context switches where the kernel took the CPU from it.
    pub involuntary_ctx_switches: u64,
}

/// What a load tool used over its run, as its summary reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolUsage {
    /// User-mode CPU seconds over the run.
    pub cpu_user_s: f64,
    /// Kernel-mode CPU seconds over the run.
    pub cpu_sys_s: f64,
    /// CPU seconds per second of the run, in percent.
    pub cpu_percent: f64,
    /// Peak resident set size since the process started, bytes.
    pub peak_rss_bytes: u64,
    /// Voluntary context switches since the process started (not only over the run).
    pub voluntary_ctx_switches: u64,
    /// Involuntary context switches since the process started (not only over the run).
    pub involuntary_ctx_switches: u64,
}

impl ToolUsage {
    /// From `start` to `now`, over a run of `seconds`.
    pub fn between(start: &SelfUsage, now: &SelfUsage, seconds: f64) -> ToolUsage {
        let (user, sys) = (
            now.cpu_user_s - start.cpu_user_s,
            now.cpu_sys_s - start.cpu_sys_s,
        );
        ToolUsage {
            cpu_user_s: user,
            cpu_sys_s: sys,
            cpu_percent: 100.0 * (user + sys) / seconds.max(1e-9),
            peak_rss_bytes: now.peak_rss_bytes,
            voluntary_ctx_switches: now.voluntary_ctx_switches,
            involuntary_ctx_switches: now.involuntary_ctx_switches,
        }
    }
}

/// This process's CPU seconds, peak memory and context switches so far (getrusage).
pub fn self_usage() -> SelfUsage {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    SelfUsage {
        cpu_user_s: secs(ru.ru_utime),
        cpu_sys_s: secs(ru.ru_stime),
        peak_rss_bytes: ru.ru_maxrss as u64 * 1024,
        voluntary_ctx_switches: ru.ru_nvcsw as u64,
        involuntary_ctx_switches: ru.ru_nivcsw as u64,
    }
}

/// Asks the kernel not to delay this thread's timer wake-ups (the default slack is 50 µs),
/// so scheduled sends leave on time.
pub fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// Pins the calling thread to CPUs, for `--cpus`.
pub fn pin(cpus: &[usize]) -> anyhow::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is plain data; ids are checked against CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            anyhow::ensure!(
                c < libc::CPU_SETSIZE as usize,
                "--cpus: CPU {c} out of range"
            );
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            anyhow::bail!(
                "--cpus {cpus:?}: cannot pin: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let mut l = Latency::default();
        for v in 1..=1000u64 {
            l.record(v * 1000);
        }
        let s = l.summary();
        assert_eq!(s.count, 1000);
        assert!((s.mean_ns - 500_500.0).abs() < 1_000.0, "{s:?}");
        assert_eq!(s.min_ns, 1000);
        assert!(s.p50_ns.abs_diff(500_000) <= 500, "{s:?}");
        assert!(s.p99_ns.abs_diff(990_000) <= 1_000, "{s:?}");
        assert!(s.max_ns.abs_diff(1_000_000) <= 1_000, "{s:?}");
        assert_eq!(Latency::default().summary(), LatencySummary::default());
    }

    #[test]
    fn markers_are_outside_the_timestamp_range_and_the_same_size() {
        let now = realtime_ns();
        assert!(now >= TIMESTAMP_FLOOR && NO_TIMESTAMP < TIMESTAMP_FLOOR);
        let len = |v| tickwire_proto::wire::varint_len(v);
        assert_eq!(len(now), len(NO_TIMESTAMP));
    }
}
