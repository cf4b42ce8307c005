//! The host, described for reports.

use super::*;

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
