//! Counting a process's system calls with `perf stat` or `strace -c`.

use super::*;

/// The tracepoint counted by `perf stat`: one hit per system call entry.
const PERF_EVENT: &str = "raw_syscalls:sys_enter";

/// The tool available to count a process's system calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SyscallTool {
    /// `perf stat -e raw_syscalls:sys_enter -p PID`: counts in the kernel with a
    /// tracepoint; the traced process runs at nearly full speed.
    Perf,
    /// `strace -c -f -p PID`: stops the traced process at every system call (ptrace),
    /// which slows a syscall-heavy process by an order of magnitude or more (measured
    /// here: ~28k instead of ~1.5M write calls per second), so throughput and latency
    /// figures taken while it is attached are not representative.
    Strace,
    /// Neither tool can count.
    None,
}

/// Parses the output of `perf stat -e raw_syscalls:sys_enter`, in CSV (`-x,`) or human
/// format, with or without `-I` intervals: the sum of the counts of all lines for the
/// event (one line without `-I`). `<not counted>` (the task did not run) counts as 0;
/// `None` if the event is missing or `<not supported>`.
pub fn parse_perf_stat(text: &str) -> Option<u64> {
    let mut total: Option<u64> = None;
    for line in text.lines() {
        if !line.contains(PERF_EVENT) || line.trim_start().starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        let value = if let Some(i) = fields.iter().position(|f| f.trim() == PERF_EVENT) {
            // CSV: [time,]value,unit,event,...
            fields.get(i.checked_sub(2)?)?.trim().to_string()
        } else {
            // Human: [time] value event ...; the value may have grouping separators.
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let i = tokens.iter().position(|t| *t == PERF_EVENT)?;
            tokens.get(i.checked_sub(1)?)?.to_string()
        };
        let n = if value.contains("not counted") || value == "counted>" {
            0
        } else if value.contains("supported") {
            return None;
        } else {
            let digits: String = value.chars().filter(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() || value.chars().any(|c| c.is_ascii_alphabetic()) {
                return None;
            }
            digits.parse().ok()?
        };
        total = Some(total.unwrap_or(0) + n);
    }
    total
}

/// Parses the summary table of `strace -c`: the call count on the `total` line. The
/// count is found under the `calls` header (older strace versions leave the usecs/call
/// column of the total line blank), else as the 4th column.
pub fn parse_strace_summary(text: &str) -> Option<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let total_idx = lines
        .iter()
        .rposition(|l| l.split_whitespace().last() == Some("total"))?;
    let total_line = lines[total_idx];
    let header = lines[..total_idx]
        .iter()
        .rev()
        .find(|l| l.contains("calls") && l.contains("syscall"));
    if let Some(header) = header {
        let calls_end = header.find("calls")? + "calls".len();
        // The number is right-aligned under the header: the token ending at calls_end.
        let mut pos = 0;
        for token in total_line.split_whitespace() {
            let start = pos + total_line[pos..].find(token)?;
            let end = start + token.len();
            pos = end;
            if end == calls_end {
                return token.parse().ok();
            }
        }
    }
    let tokens: Vec<&str> = total_line.split_whitespace().collect();
    tokens.get(3).and_then(|t| t.parse().ok())
}

/// Runs a command with captured stderr, killing it after `timeout`. Returns the exit
/// success and stderr, or `None` if it could not be spawned or timed out.
fn run_briefly(cmd: &mut Command, timeout: Duration) -> Option<(bool, String)> {
    let (mut child, reader) = spawn_reading_stderr(cmd)?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let err = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    status.map(|s| (s.success(), err))
}

/// Starts `cmd` without standard input or output, its standard error read to the end on
/// a thread of its own (joined for the text). `None` if it could not be started.
fn spawn_reading_stderr(cmd: &mut Command) -> Option<(Child, Option<JoinHandle<String>>)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let reader = spawn_reader(&mut child);
    Some((child, reader))
}

fn spawn_reader(child: &mut Child) -> Option<JoinHandle<String>> {
    let mut stderr = child.stderr.take()?;
    Some(std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    }))
}

/// True if `perf stat` can count the `raw_syscalls:sys_enter` tracepoint (perf is
/// installed and tracepoints are accessible). Tested once with `perf stat ... -- true`.
pub fn perf_can_count_syscalls() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        run_briefly(
            Command::new("perf").args(["stat", "-x", ",", "-e", PERF_EVENT, "--", "true"]),
            Duration::from_secs(10),
        )
        .is_some_and(|(ok, err)| ok && parse_perf_stat(&err).is_some_and(|n| n > 0))
    })
}

/// True if an `strace` binary runs (`strace -V`). Attaching may still be refused by
/// ptrace restrictions (yama ptrace_scope) for non-root users.
pub fn strace_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        run_briefly(Command::new("strace").arg("-V"), Duration::from_secs(5))
            .is_some_and(|(ok, _)| ok)
    })
}

/// The tool [`start_syscall_count`] would use: perf if it can count the tracepoint, else
/// strace if `allow_strace` and it is installed, else none. strace is opt-in because it
/// slows the traced process a lot (see [`SyscallTool::Strace`]).
pub fn syscall_counter(allow_strace: bool) -> SyscallTool {
    if perf_can_count_syscalls() {
        SyscallTool::Perf
    } else if allow_strace && strace_available() {
        SyscallTool::Strace
    } else {
        SyscallTool::None
    }
}

/// A running system-call count attached to a process; [`SyscallCount::finish`] stops it
/// and returns the count.
#[derive(Debug)]
pub struct SyscallCount {
    tool: SyscallTool,
    pid: u32,
    child: Option<Child>,
    reader: Option<JoinHandle<String>>,
}

/// Attaches a system-call counter (see [`syscall_counter`]) to process `pid` (all its
/// threads). perf needs a few milliseconds to attach, and calls made before that are
/// not counted. With `allow_strace`, strace is used when perf cannot count; strace slows
/// the traced process a lot (see [`SyscallTool::Strace`]). `None` if no tool is
/// available or it could not be started.
pub fn start_syscall_count(pid: u32, allow_strace: bool) -> Option<SyscallCount> {
    let tool = syscall_counter(allow_strace);
    let pid_s = pid.to_string();
    let mut cmd = match tool {
        SyscallTool::Perf => {
            let mut c = Command::new("perf");
            c.args(["stat", "-x", ",", "-e", PERF_EVENT, "-p", &pid_s]);
            c
        }
        SyscallTool::Strace => {
            let mut c = Command::new("strace");
            c.args(["-c", "-f", "-p", &pid_s]);
            c
        }
        SyscallTool::None => return None,
    };
    let (child, reader) = spawn_reading_stderr(&mut cmd)?;
    Some(SyscallCount {
        tool,
        pid,
        child: Some(child),
        reader,
    })
}

/// Sends SIGINT to a child, waits up to `timeout` for it, then kills it. Whether it
/// ended before being killed.
pub(crate) fn interrupt_and_wait(child: &mut Child, timeout: Duration) -> bool {
    if let Ok(None) = child.try_wait() {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child,
        // not yet reaped, so it cannot have been reused.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
    }
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

impl SyscallCount {
    /// The tool doing the counting.
    pub fn tool(&self) -> SyscallTool {
        self.tool
    }

    /// The traced process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stops the counter (SIGINT: perf prints its count, strace detaches and prints its
    /// summary) and returns the number of system calls since it attached. If the traced
    /// process exited first, the count up to its exit.
    pub fn finish(mut self) -> Option<u64> {
        let mut child = self.child.take()?;
        interrupt_and_wait(&mut child, Duration::from_secs(5));
        let out = self.reader.take()?.join().ok()?;
        match self.tool {
            SyscallTool::Perf => parse_perf_stat(&out),
            SyscallTool::Strace => parse_strace_summary(&out),
            SyscallTool::None => None,
        }
    }
}

impl Drop for SyscallCount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            interrupt_and_wait(&mut child, Duration::from_secs(2));
        }
    }
}

/// A `perf stat -I` stream counting a process's system calls continuously: a reader
/// thread adds each interval's count to a running total.
#[derive(Debug)]
pub(super) struct SyscallStream {
    pub(super) total: Arc<AtomicU64>,
    child: Child,
    reader: Option<JoinHandle<()>>,
}

impl SyscallStream {
    pub(super) fn start(pid: u32, interval: Duration) -> Option<SyscallStream> {
        let ms = interval.as_millis().clamp(10, 10_000).to_string();
        let mut child = Command::new("perf")
            .args(["stat", "-I", &ms, "-x", ",", "-e", PERF_EVENT])
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let stderr = child.stderr.take()?;
        let total = Arc::new(AtomicU64::new(0));
        let sink = Arc::clone(&total);
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = parse_perf_stat(&line) {
                    sink.fetch_add(n, Ordering::Relaxed);
                }
            }
        });
        Some(SyscallStream {
            total,
            child,
            reader: Some(reader),
        })
    }
}

impl Drop for SyscallStream {
    fn drop(&mut self) {
        interrupt_and_wait(&mut self.child, Duration::from_secs(2));
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
