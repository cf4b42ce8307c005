//! The host a run ran on, for reports: a figure is only comparable with one from a
//! like machine.

use serde::{Deserialize, Serialize};

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
    /// `net.core.wmem_max`, the cap on a socket's send buffer (bytes), if readable.
    pub socket_send_buffer_max_bytes: Option<u64>,
    /// How idle CPUs wait (cpuidle driver and governor, guest halt polling): it decides
    /// what waking one costs, the floor of every latency figure.
    #[serde(default)]
    pub cpu_idle: IdleSettings,
    /// What waking a thread on an idle CPU and back costs here, measured by the lab at
    /// the start of a run (`None` when not measured).
    #[serde(default)]
    pub wake_round_trip: Option<WakeRoundTrip>,
}

/// A round trip between two threads on two CPUs, each after an idle millisecond.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeRoundTrip {
    /// Median round trip (ns).
    pub p50_ns: u64,
    /// 90th percentile round trip (ns).
    pub p90_ns: u64,
    /// Fastest round trip (ns).
    pub min_ns: u64,
    /// Round trips measured.
    pub count: usize,
    /// Idle time before each round trip (µs).
    pub idle_us: u64,
    /// The two CPUs the threads were pinned to (the same one when only one is allowed).
    pub cpus: [usize; 2],
}

/// How this machine's idle CPUs wait, from sysfs (`None` where not exposed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleSettings {
    /// `/sys/devices/system/cpu/cpuidle/current_driver` (e.g. `haltpoll`, `intel_idle`).
    pub driver: Option<String>,
    /// `/sys/devices/system/cpu/cpuidle/current_governor_ro` (e.g. `haltpoll`, `menu`).
    pub governor: Option<String>,
    /// `/sys/module/haltpoll/parameters/guest_halt_poll_ns`: how long an idle virtual CPU
    /// polls before it halts (0: it halts at once). Absent off a KVM guest.
    pub guest_halt_poll_ns: Option<u64>,
}
