//! Process and system sampling from /proc (Linux).
//!
//! * [`sample_process`] reads one process's counters (CPU ticks, context switches, RSS,
//!   threads, the CPU each thread last ran on, scheduler migrations) into a [`ProcSample`];
//!   [`usage_between`] turns two samples into a [`ProcessUsage`].
//! * [`ProcessMonitor`] samples a set of processes in a background thread and reports
//!   per-window usage between [`Mark`]s, so a scenario gets figures for each of its steps.
//! * [`read_system_stat`] / [`read_cpu_times`] / [`cpu_utilisation`] give per-CPU
//!   utilisation and system-wide context switches from /proc/stat.
//! * [`machine`](fn@machine) describes the host for reports.
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
// The usage and machine types are the results schema's; sysinfo fills them.
use tickwire_bench_report::schema::{CpuUtil, Machine, ProcessUsage, SystemUsage, ThreadUsage};

mod machine;
mod monitor;
mod proc_pid;
mod sample;
mod syscalls;
mod system;
#[cfg(test)]
mod tests;
mod usage;

pub use machine::*;
pub use monitor::*;
pub use proc_pid::*;
pub use sample::*;
pub use syscalls::*;
pub use system::*;
pub use usage::*;
