//! Sampling a set of processes on a thread of its own, in windows between marks.

use super::*;

/// Options of a [`ProcessMonitor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorOptions {
    /// Time between background samples.
    pub interval: Duration,
    /// Also count system calls with `perf stat -I` (only if perf can; strace is never
    /// used here). Counts lag by up to one interval (perf reports per interval).
    pub count_syscalls: bool,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        MonitorOptions {
            interval: Duration::from_millis(100),
            count_syscalls: false,
        }
    }
}

/// A point in a [`ProcessMonitor`]'s timeline; usage is reported between marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mark(pub(super) usize);

struct Tracked {
    name: String,
    pid: u32,
    first: ProcSample,
    last: ProcSample,
    exited: bool,
    /// Largest RSS sampled since the latest mark.
    seg_max_rss: u64,
    /// Running syscall total fed by `stream` (kept after the stream stops).
    syscalls: Option<Arc<AtomicU64>>,
    stream: Option<SyscallStream>,
}

struct MarkSnap {
    /// Each tracked process's sample and syscall total at the mark.
    procs: HashMap<u32, (ProcSample, Option<u64>)>,
    system: Option<SystemStat>,
    /// Largest RSS sampled between this mark and the next (filled when the next mark is
    /// taken).
    seg_max_rss: HashMap<u32, u64>,
}

struct MonitorState {
    procs: Vec<Tracked>,
    marks: Vec<MarkSnap>,
}

impl MonitorState {
    /// Records a fresh sample (or the process's exit) for `pid`.
    fn update(&mut self, pid: u32, sample: io::Result<ProcSample>) {
        let Some(t) = self.procs.iter_mut().find(|t| t.pid == pid) else {
            return;
        };
        if t.exited {
            return;
        }
        match sample {
            Ok(s) if s.is_exited() => {
                // A zombie still has its CPU times, but no memory figures or threads.
                t.last.utime_ticks = t.last.utime_ticks.max(s.utime_ticks);
                t.last.stime_ticks = t.last.stime_ticks.max(s.stime_ticks);
                t.last.state = s.state;
                t.last.at = s.at;
                t.exited = true;
            }
            Ok(s) => {
                if s.at >= t.last.at {
                    t.seg_max_rss = t.seg_max_rss.max(s.vm_rss_bytes);
                    t.last = s;
                }
            }
            Err(_) => {
                t.exited = true;
                t.last.state = 'X';
            }
        }
    }

    fn live_pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .filter(|t| !t.exited)
            .map(|t| t.pid)
            .collect()
    }
}

/// Samples a set of processes every `interval` in a background thread and reports their
/// usage between [`Mark`]s. Keeps, per process, the first and the latest sample (a
/// process that exits keeps its last one) plus one snapshot per mark, so memory grows
/// only with the number of marks. The thread stops on [`ProcessMonitor::stop`] or drop.
pub struct ProcessMonitor {
    state: Arc<Mutex<MonitorState>>,
    options: MonitorOptions,
    syscalls_counted: bool,
    stop_tx: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ProcessMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessMonitor")
            .field("options", &self.options)
            .field("syscalls_counted", &self.syscalls_counted)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl ProcessMonitor {
    /// Starts monitoring `procs` (name, pid) every `interval`, without syscall counts.
    /// Mark 0 ([`ProcessMonitor::start_mark`]) is taken at once.
    pub fn start(procs: &[(String, u32)], interval: Duration) -> ProcessMonitor {
        Self::start_with(
            procs,
            MonitorOptions {
                interval,
                count_syscalls: false,
            },
        )
    }

    /// Starts monitoring `procs` (name, pid) with `options`. Processes that do not exist
    /// are reported as exited with zero usage.
    pub fn start_with(procs: &[(String, u32)], options: MonitorOptions) -> ProcessMonitor {
        let syscalls_counted = options.count_syscalls && perf_can_count_syscalls();
        let state = Arc::new(Mutex::new(MonitorState {
            procs: Vec::new(),
            marks: Vec::new(),
        }));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let mut monitor = ProcessMonitor {
            state: Arc::clone(&state),
            options,
            syscalls_counted,
            stop_tx: Some(stop_tx),
            thread: None,
        };
        for (name, pid) in procs {
            monitor.add(name, *pid);
        }
        monitor.mark();
        let interval = options.interval.max(Duration::from_millis(1));
        monitor.thread = Some(std::thread::spawn(move || {
            // Sample every interval until stopped (message or sender dropped).
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(interval) {
                let pids = state.lock().map(|s| s.live_pids()).unwrap_or_default();
                let samples: Vec<(u32, io::Result<ProcSample>)> =
                    pids.into_iter().map(|p| (p, sample_process(p))).collect();
                let Ok(mut s) = state.lock() else { break };
                for (pid, sample) in samples {
                    s.update(pid, sample);
                }
            }
        }));
        monitor
    }

    /// Adds a process to monitor (e.g. one started after the monitor). Windows from
    /// marks taken before it was added start at its first sample. Adding a pid twice is
    /// a no-op.
    pub fn add(&self, name: &str, pid: u32) {
        let sample = sample_process(pid);
        let stream = if self.syscalls_counted && sample.is_ok() {
            SyscallStream::start(pid, self.options.interval)
        } else {
            None
        };
        let Ok(mut s) = self.state.lock() else { return };
        if s.procs.iter().any(|t| t.pid == pid) {
            return;
        }
        let (first, exited) = match sample {
            Ok(sample) => {
                let exited = sample.is_exited();
                (sample, exited)
            }
            Err(_) => (empty_sample(pid), true),
        };
        s.procs.push(Tracked {
            name: name.to_string(),
            pid,
            seg_max_rss: first.vm_rss_bytes,
            last: first.clone(),
            first,
            exited,
            syscalls: stream.as_ref().map(|c| Arc::clone(&c.total)),
            stream,
        });
    }

    /// True if system calls are being counted (requested and perf can count them).
    pub fn syscalls_counted(&self) -> bool {
        self.syscalls_counted
    }

    /// The mark taken when the monitor started.
    pub fn start_mark(&self) -> Mark {
        Mark(0)
    }

    /// Samples every live process now and records a mark: the start (or end) of a
    /// window for [`ProcessMonitor::usage_since`] and [`ProcessMonitor::usage_between`].
    pub fn mark(&self) -> Mark {
        let system = read_system_stat().ok();
        let pids = self.state.lock().map(|s| s.live_pids()).unwrap_or_default();
        let samples: Vec<(u32, io::Result<ProcSample>)> =
            pids.into_iter().map(|p| (p, sample_process(p))).collect();
        let Ok(mut s) = self.state.lock() else {
            return Mark(0);
        };
        for (pid, sample) in samples {
            s.update(pid, sample);
        }
        let mut procs = HashMap::new();
        let mut seg = HashMap::new();
        for t in s.procs.iter_mut() {
            seg.insert(t.pid, t.seg_max_rss);
            t.seg_max_rss = t.last.vm_rss_bytes;
            let sys = t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed));
            procs.insert(t.pid, (t.last.clone(), sys));
        }
        if let Some(prev) = s.marks.last_mut() {
            prev.seg_max_rss = seg;
        }
        s.marks.push(MarkSnap {
            procs,
            system,
            seg_max_rss: HashMap::new(),
        });
        Mark(s.marks.len() - 1)
    }

    /// Usage of each monitored process from `mark` until now (sampled now). For a process
    /// that exited, the window ends at its last sample.
    pub fn usage_since(&self, mark: Mark) -> Vec<ProcessUsage> {
        let pids = self.state.lock().map(|s| s.live_pids()).unwrap_or_default();
        let samples: Vec<(u32, io::Result<ProcSample>)> =
            pids.into_iter().map(|p| (p, sample_process(p))).collect();
        let Ok(mut s) = self.state.lock() else {
            return Vec::new();
        };
        for (pid, sample) in samples {
            s.update(pid, sample);
        }
        let s = &*s;
        let Some(_) = s.marks.get(mark.0) else {
            return Vec::new();
        };
        s.procs
            .iter()
            .map(|t| {
                let end = (
                    t.last.clone(),
                    t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed)),
                );
                let mut peak = t.seg_max_rss;
                for m in &s.marks[mark.0..s.marks.len() - 1] {
                    peak = peak.max(m.seg_max_rss.get(&t.pid).copied().unwrap_or(0));
                }
                window_usage(t, s.marks[mark.0].procs.get(&t.pid), &end, peak)
            })
            .collect()
    }

    /// Usage of each monitored process between marks `a` and `b` (a before b).
    /// Processes added after `b` are left out. Empty if either mark is unknown.
    pub fn usage_between(&self, a: Mark, b: Mark) -> Vec<ProcessUsage> {
        let (a, b) = (a.min(b), a.max(b));
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        let (Some(ma), Some(mb)) = (s.marks.get(a.0), s.marks.get(b.0)) else {
            return Vec::new();
        };
        s.procs
            .iter()
            .filter_map(|t| {
                let end = mb.procs.get(&t.pid)?;
                let mut peak = end.0.vm_rss_bytes;
                for m in &s.marks[a.0..b.0] {
                    peak = peak.max(m.seg_max_rss.get(&t.pid).copied().unwrap_or(0));
                }
                Some(window_usage(t, ma.procs.get(&t.pid), end, peak))
            })
            .collect()
    }

    /// Usage of each process from its first sample to its latest one.
    pub fn usage_total(&self) -> Vec<ProcessUsage> {
        let Ok(s) = self.state.lock() else {
            return Vec::new();
        };
        s.procs
            .iter()
            .map(|t| {
                let mut u = usage_between(&t.name, &t.first, &t.last);
                u.exited = t.exited;
                u.syscalls = t.syscalls.as_ref().map(|c| c.load(Ordering::Relaxed));
                u
            })
            .collect()
    }

    /// System-wide usage (/proc/stat) from `mark` until now.
    pub fn system_since(&self, mark: Mark) -> Option<SystemUsage> {
        let now = read_system_stat().ok()?;
        let s = self.state.lock().ok()?;
        Some(system_usage_between(
            s.marks.get(mark.0)?.system.as_ref()?,
            &now,
        ))
    }

    /// System-wide usage (/proc/stat) between marks `a` and `b`.
    pub fn system_between(&self, a: Mark, b: Mark) -> Option<SystemUsage> {
        let (a, b) = (a.min(b), a.max(b));
        let s = self.state.lock().ok()?;
        Some(system_usage_between(
            s.marks.get(a.0)?.system.as_ref()?,
            s.marks.get(b.0)?.system.as_ref()?,
        ))
    }

    /// Stops the sampling thread and the syscall counters. The figures gathered so far
    /// stay available. Idempotent.
    pub fn stop(&mut self) {
        self.stop_tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Dropping a stream stops perf, whose last partial interval still reaches the
        // shared total; do it outside the lock (it waits for perf).
        let streams: Vec<SyscallStream> = match self.state.lock() {
            Ok(mut s) => s.procs.iter_mut().filter_map(|t| t.stream.take()).collect(),
            Err(_) => Vec::new(),
        };
        drop(streams);
    }
}

impl Drop for ProcessMonitor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A placeholder sample for a process that could not be read.
pub(super) fn empty_sample(pid: u32) -> ProcSample {
    ProcSample {
        pid,
        at: Instant::now(),
        comm: String::new(),
        state: 'X',
        utime_ticks: 0,
        stime_ticks: 0,
        voluntary_ctxt_switches: 0,
        nonvoluntary_ctxt_switches: 0,
        vm_hwm_bytes: 0,
        vm_rss_bytes: 0,
        threads: 0,
        processor: None,
        migrations: None,
        on_cpu_ns: None,
        thread_samples: Vec::new(),
    }
}

/// Usage of tracked process `t` from `start` (its snapshot at the window's start mark,
/// or its first sample if it was added later) to `end`.
fn window_usage(
    t: &Tracked,
    start: Option<&(ProcSample, Option<u64>)>,
    end: &(ProcSample, Option<u64>),
    peak: u64,
) -> ProcessUsage {
    let first = (t.first.clone(), Some(0));
    let start = start.unwrap_or(&first);
    let mut u = usage_between(&t.name, &start.0, &end.0);
    u.max_sampled_rss_bytes = u.max_sampled_rss_bytes.max(peak);
    u.exited = end.0.is_exited();
    u.syscalls = match (start.1, end.1) {
        (Some(x), Some(y)) => Some(y.saturating_sub(x)),
        _ => None,
    };
    u
}
