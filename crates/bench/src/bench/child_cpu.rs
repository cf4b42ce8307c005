//! What a command of the files scenario cost: the CPU of a process and the children it
//! reaped, and a command run to its end with its own CPU from `wait4`.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// How long a command of the files scenario that moves `bytes` may run: ten minutes
/// and a second a megabyte, far beyond the slowest row's tens of MB/s. It is there so
/// that a transfer that hangs ends the row rather than the lab waiting for ever.
pub(super) fn limit_for(bytes: u64) -> Duration {
    Duration::from_secs(600 + bytes / 1_000_000)
}

/// Runs a command to its end, for at most `limit`; returns whether it succeeded, its CPU
/// seconds (from `wait4`) and its output. A command still running at `limit` is killed,
/// with the processes it started, and is an error.
pub(super) fn run_timed(cmd: &mut Command, limit: Duration) -> Result<(bool, f64, String)> {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let pid = child.id();
    // Each stream is read to its end on a thread of its own: a child blocked on a full
    // pipe would never end.
    let (tx, rx) = std::sync::mpsc::channel();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child.stdout.take().map(|o| Box::new(o) as _),
        child.stderr.take().map(|e| Box::new(e) as _),
    ];
    for (i, stream) in streams.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut stream) = stream {
                let _ = stream.read_to_string(&mut s);
            }
            let _ = tx.send((i, s));
        });
    }
    let deadline = Instant::now() + limit;
    if !exits_before(pid, deadline)? {
        kill_tree(pid);
        let _ = child.wait();
        bail!(
            "{name} did not finish within {:.0} s: killed",
            limit.as_secs_f64()
        );
    }
    let mut status = 0;
    // SAFETY: rusage is plain data written by the kernel; the pid is our child, exited
    // and not reaped elsewhere (the Child handle is dropped without waiting).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    if r < 0 {
        bail!("waiting for {name} failed");
    }
    // Its output ends when every process holding the pipes has: one it left running in
    // the background may hold them on.
    let grace = Instant::now()
        + deadline
            .saturating_duration_since(Instant::now())
            .max(GRACE);
    let mut output = [String::new(), String::new()];
    for _ in 0..2 {
        let left = grace.saturating_duration_since(Instant::now());
        let (i, s) = rx
            .recv_timeout(left)
            .map_err(|_| anyhow!("{name} ended but a process it started holds its output"))?;
        output[i] = s;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
    let ok = std::process::ExitStatus::from_raw(status).success();
    Ok((ok, cpu, output.concat()))
}

/// The least time left to read a command's output once it has ended.
const GRACE: Duration = Duration::from_secs(5);

/// Waits until child `pid` exits (not reaping it) or `deadline` passes; whether it
/// exited. A pidfd says so the moment it does, where polling would add its period to
/// the row's time.
fn exits_before(pid: u32, deadline: Instant) -> Result<bool> {
    // SAFETY: pidfd_open has no memory-safety preconditions; a non-negative result is a
    // new descriptor, which the OwnedFd alone then owns.
    let fd = unsafe {
        match libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) {
            fd if fd >= 0 => OwnedFd::from_raw_fd(fd as i32),
            _ => bail!(
                "cannot watch process {pid}: {}",
                std::io::Error::last_os_error()
            ),
        }
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a wait rounded down to 0 ms would spin.
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            1 => return Ok(true),
            0 if left.is_zero() => return Ok(false),
            r if r < 0 && std::io::Error::last_os_error().kind() != ErrorKind::Interrupted => {
                bail!(
                    "cannot watch process {pid}: {}",
                    std::io::Error::last_os_error()
                )
            }
            _ => {}
        }
    }
}

/// Kills `pid` and every process under it. They are found before any is killed (a
/// killed parent's children move to another parent); `pid` must not be reaped yet, so
/// that its pid is still its own.
fn kill_tree(pid: u32) {
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        for child in children_of(tree[i]) {
            if !tree.contains(&child) {
                tree.push(child);
            }
        }
        i += 1;
    }
    for p in tree {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(p as libc::pid_t, libc::SIGKILL);
        }
    }
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

    /// Waits (bounded) until `pid` has ended: gone, or a zombie no one has reaped.
    fn wait_ended(pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
            let state = stat.ok().and_then(|s| {
                let (_, rest) = s.rsplit_once(')')?;
                rest.trim().chars().next()
            });
            if matches!(state, None | Some('Z' | 'X')) {
                return;
            }
            assert!(Instant::now() < deadline, "process {pid} still runs");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_command_past_its_limit_is_killed_with_what_it_started() {
        let dir = std::env::temp_dir().join(format!("tw-run-timed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pids = dir.join("pids");
        // The shell and a sleep it started, which holds its output open too.
        let script = format!(
            "echo $$ > {p}; sleep 30 & echo $! >> {p}; wait",
            p = pids.display()
        );
        let err = run_timed(
            Command::new("sh").args(["-c", &script]),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("sh did not finish within 1 s: killed"),
            "{err}"
        );
        let pids = std::fs::read_to_string(&pids).unwrap();
        for pid in pids.lines() {
            wait_ended(pid.parse().unwrap());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_command_within_its_limit_gives_its_status_and_output() {
        let (ok, _, out) = run_timed(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(60),
        )
        .unwrap();
        assert!(!ok);
        assert_eq!(out, "out\nerr\n");
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
