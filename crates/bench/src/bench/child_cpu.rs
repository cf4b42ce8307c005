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

/// Waits (up to `limit`) until no process has `pid` as its parent: a daemon that forks
/// a child per connection (rsync's) adds the child's CPU to its own only once it has
/// reaped it, which it does some time after the client is done. Returns whether it
/// got there.
pub(super) fn wait_children_reaped(pid: u32, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if !has_children(pid) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Whether any process (a zombie too: not reaped yet) has `pid` as its parent.
fn has_children(pid: u32) -> bool {
    !children_of(pid).is_empty()
}

/// The processes (zombies too) whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .is_ok_and(|stat| parent_of(&stat) == Some(pid))
        })
        .collect()
}

/// The parent pid in a `/proc/PID/stat` line (the field after the state).
fn parent_of(stat: &str) -> Option<u32> {
    let close = stat.rfind(')')?;
    stat[close + 1..].split_whitespace().nth(1)?.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(parent_of("42 (rsync (x) y) S 17 42 42 0 -1"), Some(17));
        assert_eq!(parent_of("42 (rsync) Z 1 0"), Some(1));
        assert_eq!(parent_of("garbage"), None);
    }

    /// Waits (bounded) until `pid` has forked a child; its pid.
    fn its_child(pid: u32) -> u32 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(&child) = children_of(pid).first() {
                return child;
            }
            assert!(std::time::Instant::now() < deadline, "no child within 10 s");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn kill(pid: u32) {
        // SAFETY: kill has no memory-safety preconditions; the pid is a child the
        // test started (or its own child).
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }

    #[test]
    fn a_parent_that_reaps_its_child_is_waited_for() {
        // The child lives until the test kills it, once seen: the shell then reaps it.
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .expect("sh");
        let child = its_child(sh.id());
        assert!(!wait_children_reaped(
            sh.id(),
            std::time::Duration::from_millis(50)
        ));
        kill(child);
        assert!(wait_children_reaped(
            sh.id(),
            std::time::Duration::from_secs(10)
        ));
        sh.wait().expect("wait");
    }

    #[test]
    fn a_child_not_reaped_yet_still_counts() {
        // The shell's place is taken by a sleep that never waits: its child, killed,
        // stays a zombie, still its child.
        let mut parent = Command::new("sh")
            .args(["-c", "sleep 30 & exec sleep 30"])
            .spawn()
            .expect("sh");
        let child = its_child(parent.id());
        kill(child);
        assert!(!wait_children_reaped(
            parent.id(),
            std::time::Duration::from_millis(200)
        ));
        assert_eq!(children_of(parent.id()), [child]);
        parent.kill().expect("kill");
        parent.wait().expect("wait");
    }
}
