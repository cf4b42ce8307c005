//! The Tickwire node: the event loop, sockets, buffers, configuration and counters
//! around the sans-IO state machine in `tickwire-core`.
//!
//! This crate owns everything that touches the operating system for a node (sockets,
//! epoll, threads, CPU pinning, config files). It holds no market-data logic: every
//! decision about items, streams and fan-out is the core's.

#![warn(missing_docs)]

mod auth;
pub mod backbone;
mod background;
pub mod config;
mod config_error;
mod core_output;
mod driver_wait;
pub mod files;
mod io_counters;
pub mod journal;
mod metrics;
mod node_http;
mod node_item;
mod node_view;
mod outbound;
mod part;
mod readiness;
mod rssl;
mod rssl_provider;
mod server;
#[cfg(test)]
mod test_support;
pub mod tls;
pub mod upstream;
mod wrong_port;
mod ws;

pub use backbone::BackboneSection;
pub use config::{
    CacheMode, ConfigError, NodeConfig, SlowPolicy, TlsSection, WaitStrategy, WebSocketSection,
};
pub use node_item::{NODE_ITEM, NODE_SERVICE};
pub use server::{NodeServer, RunningNode, ShutdownHandle};
pub use tickwire_core::Stats;
pub use upstream::UpstreamSection;

/// The CPUs this process may run on (its affinity mask: `taskset`, a cgroup's cpuset),
/// in order.
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, filled by the kernel; CPU_ISSET reads within it
    // for ids below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Pins the calling thread to the given CPUs.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for ids < CPU_SETSIZE,
    // which config validation guarantees (ids below the machine's CPU count).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(std::io::Error::other(format!("CPU {c} out of range")));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
