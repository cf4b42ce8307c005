//! What a command of the files scenario cost: the CPU of a process and the children it
//! reaped, and a command run to its end with its own CPU from `wait4`.

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// CPU seconds of a process and of its children it has waited for.
pub(super) fn cpu_with_children(pid: u32) -> f64 {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(close) = text.rfind(')') else {
        return 0.0;
    };
    let f: Vec<u64> = text[close + 2..]
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // After the state: utime 11, stime 12, cutime 13, cstime 14 (0-based from state).
    let ticks = f.get(11..15).map_or(0, |t| t.iter().sum::<u64>());
    ticks as f64 / crate::sysinfo::clock_ticks_per_sec() as f64
}

/// Runs a command to its end; returns whether it succeeded and its CPU seconds.
pub(super) fn run_timed(cmd: &mut Command) -> Result<(bool, f64, String)> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let out = child.stdout;
    let err = child.stderr;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut o) = out {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = err {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let mut status = 0;
    // SAFETY: rusage is plain data written by the kernel; the pid is our child, not
    // reaped elsewhere (the Child handle is dropped without waiting).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let output = format!(
        "{}{}",
        out_reader.join().unwrap_or_default(),
        err_reader.join().unwrap_or_default()
    );
    if r < 0 {
        bail!("waiting for {cmd:?} failed");
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
    let ok = std::process::ExitStatus::from_raw(status).success();
    Ok((ok, cpu, output))
}
