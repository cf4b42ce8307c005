//! The standard `process_*` metrics (as Prometheus's own client libraries give them),
//! read from `/proc/self` with the `procfs` crate at each scrape.

use procfs::process::{LimitValue, Process};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Registers the process's figures in `r` (a registry without the `tickwire` prefix).
/// Figures `/proc` cannot give (another kernel, a locked-down sandbox) are left out
/// rather than shown as zero.
pub(super) fn register(r: &mut Registry) {
    let Ok(me) = Process::myself() else {
        return;
    };
    if let Ok(stat) = me.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        r.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            ConstCounter::new((stat.utime + stat.stime) as f64 / ticks),
        );
        r.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            ConstGauge::new(stat.vsize),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            ConstGauge::new(stat.rss * procfs::page_size()),
        );
        r.register(
            "process_threads",
            "Number of OS threads in the process",
            ConstGauge::new(stat.num_threads),
        );
        if let Ok(boot) = procfs::boot_time_secs() {
            r.register(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                ConstGauge::new(boot as f64 + stat.starttime as f64 / ticks),
            );
        }
    }
    if let Ok(open) = me.fd_count() {
        r.register(
            "process_open_fds",
            "Number of open file descriptors",
            ConstGauge::new(open as u64),
        );
    }
    if let Ok(limits) = me.limits() {
        if let LimitValue::Value(max) = limits.max_open_files.soft_limit {
            r.register(
                "process_max_fds",
                "Maximum number of open file descriptors",
                ConstGauge::new(max),
            );
        }
    }
}
