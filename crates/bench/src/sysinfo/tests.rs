use super::*;

const STAT: &str = "12345 (tick wire) (x)) S 1 12345 12345 34816 12345 4194560 2770 53044 2 137 \
        421 37 104 302 20 0 7 0 268718 5124096 969 18446744073709551615 93943920492544 \
        93943921281949 140724746304768 0 0 0 65536 4 1132560123 1 0 0 17 1 0 0 0 0 0 \
        93943921515248 93943921563492 93944113565696 140724746312541 140724746312556 \
        140724746312556 140724746313706 0\n";

const STATUS: &str = "Name:\ttickwire-node\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t12345\n\
        Pid:\t12345\nPPid:\t1\nVmPeak:\t  105004 kB\nVmSize:\t  105004 kB\nVmHWM:\t    4012 kB\n\
        VmRSS:\t    3900 kB\nRssAnon:\t     968 kB\nThreads:\t7\nSigQ:\t0/96365\n\
        Cpus_allowed_list:\t0-1\nvoluntary_ctxt_switches:\t71\nnonvoluntary_ctxt_switches:\t9\n";

const SCHED: &str = "tickwire-node (12345, #threads: 7)\n\
        -------------------------------------------------------------------\n\
        se.exec_start                                :       2695631.354255\n\
        se.vruntime                                  :            86.490745\n\
        se.sum_exec_runtime                          :            16.441043\n\
        se.nr_migrations                             :                    5\n\
        nr_switches                                  :                   36\n\
        nr_voluntary_switches                        :                   31\n";

const PROC_STAT: &str = "cpu  109826 47738 26045 385604 1940 0 1392 531 0 0\n\
        cpu0 53186 17603 11726 202679 353 0 678 222 0 0\n\
        cpu1 56640 30135 14318 182925 1587 0 713 309 0 0\n\
        intr 1439592 0 0 0 0\n\
        ctxt 1719697\nbtime 1795319178\nprocesses 52428\nprocs_running 6\nprocs_blocked 0\n\
        softirq 1625075 0 129064 4 860933 88963 0 247 263430 3492 278942\n";

#[test]
fn parses_stat_with_parentheses_in_comm() {
    let s = parse_stat(STAT).unwrap();
    assert_eq!(s.pid, 12345);
    assert_eq!(s.comm, "tick wire) (x)");
    assert_eq!(s.state, 'S');
    assert_eq!(s.utime_ticks, 421);
    assert_eq!(s.stime_ticks, 37);
    assert_eq!(s.num_threads, 7);
    assert_eq!(s.start_time_ticks, 268718);
    assert_eq!(s.processor, Some(1));
    assert!(parse_stat("garbage").is_none());
    assert!(parse_stat("1 (x) S 1 2").is_none());
}

#[test]
fn parses_status() {
    let s = parse_status(STATUS);
    assert_eq!(s.name.as_deref(), Some("tickwire-node"));
    assert_eq!(s.state, Some('S'));
    assert_eq!(s.threads, Some(7));
    assert_eq!(s.vm_hwm_bytes, Some(4012 * 1024));
    assert_eq!(s.vm_rss_bytes, Some(3900 * 1024));
    assert_eq!(s.voluntary_ctxt_switches, Some(71));
    assert_eq!(s.nonvoluntary_ctxt_switches, Some(9));
    // A zombie has no Vm lines.
    let z = parse_status("Name:\tsleep\nState:\tZ (zombie)\nThreads:\t1\n");
    assert_eq!(z.state, Some('Z'));
    assert_eq!(z.vm_hwm_bytes, None);
}

#[test]
fn parses_sched_migrations() {
    assert_eq!(parse_sched_migrations(SCHED), Some(5));
    assert_eq!(parse_sched_migrations("nr_switches : 3\n"), None);
}

#[test]
fn parses_proc_stat_and_utilisation() {
    let a = parse_proc_stat(PROC_STAT).unwrap();
    assert_eq!(a.cpus.len(), 2);
    assert_eq!(a.total.cpu, None);
    assert_eq!(a.cpus[1].cpu, Some(1));
    assert_eq!(a.cpus[1].nice, 30135);
    assert_eq!(a.cpus[0].steal, 222);
    assert_eq!(a.context_switches, 1719697);
    assert_eq!(a.forks, 52428);
    assert_eq!(a.procs_running, 6);

    // cpu0: 50 user, 10 system, 20 softirq, 20 idle ticks; cpu1: all idle.
    let b_text = "cpu  0 0 0 0 0 0 0 0\n\
            cpu0 53236 17603 11736 202699 353 0 698 222 0 0\n\
            cpu1 56640 30135 14318 183025 1587 0 713 309 0 0\nctxt 1720697\n";
    let mut b = parse_proc_stat(b_text).unwrap();
    b.at = a.at + Duration::from_secs(2);
    let u = cpu_utilisation(&a.cpus, &b.cpus);
    assert_eq!(u.len(), 2);
    assert!((u[0].busy_percent - 80.0).abs() < 1e-9);
    assert!((u[0].user_percent - 50.0).abs() < 1e-9);
    assert!((u[0].system_percent - 10.0).abs() < 1e-9);
    assert!((u[0].softirq_percent - 20.0).abs() < 1e-9);
    assert_eq!(u[1].busy_percent, 0.0);
    let sys = system_usage_between(&a, &b);
    assert_eq!(sys.context_switches, 1000);
    assert!((sys.context_switches_per_s - 500.0).abs() < 1e-9);
    // Counters going backwards (iowait can) do not underflow; identical is all zero.
    let same = cpu_util_between(&a.cpus[0], &a.cpus[0]);
    assert_eq!(same.busy_percent, 0.0);
    assert!(parse_proc_stat("ctxt 5\n").is_none());
}

#[test]
fn parses_machine_files() {
    let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\n";
    assert_eq!(
        parse_cpuinfo_model(cpuinfo).as_deref(),
        Some("AMD EPYC 7B13 64-Core Processor")
    );
    let arm = "processor\t: 0\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";
    assert_eq!(
        parse_cpuinfo_model(arm).as_deref(),
        Some("Raspberry Pi 4 Model B Rev 1.4")
    );
    assert_eq!(parse_cpuinfo_model(""), None);
    let meminfo = "MemTotal:       24683656 kB\nMemFree:        22751312 kB\n";
    assert_eq!(parse_meminfo_total(meminfo), Some(24683656 * 1024));
    let os =
        "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
    assert_eq!(
        parse_os_release_pretty_name(os).as_deref(),
        Some("Debian GNU/Linux 12 (bookworm)")
    );
    assert_eq!(
        parse_os_release_pretty_name("PRETTY_NAME=Alpine\n").as_deref(),
        Some("Alpine")
    );
    assert_eq!(parse_os_release_pretty_name("ID=x\n"), None);
}

#[test]
fn parses_perf_stat_outputs() {
    // perf stat -x, -e raw_syscalls:sys_enter -p PID (stopped with SIGINT)
    let csv = "1536056,,raw_syscalls:sys_enter,960211861,100.00,,\n";
    assert_eq!(parse_perf_stat(csv), Some(1536056));
    // Human-readable format.
    let human = "\n Performance counter stats for process id '11690':\n\n\
            \x20          1538605      raw_syscalls:sys_enter                                             \n\n\
            \x20      0.963051747 seconds time elapsed\n\n";
    assert_eq!(parse_perf_stat(human), Some(1538605));
    // Human format with thousands grouping (locale-dependent).
    let grouped = "     1,538,605      raw_syscalls:sys_enter\n";
    assert_eq!(parse_perf_stat(grouped), Some(1538605));
    // perf stat -x, -o file writes a comment line first.
    let with_comment =
        "# started on Sun Nov 22 04:31:21 2026\n\n29,,raw_syscalls:sys_enter,515157,100.00,,\n";
    assert_eq!(parse_perf_stat(with_comment), Some(29));
    // -I intervals: summed.
    let intervals = "     0.100186856,100263,,raw_syscalls:sys_enter,50688098,100.00,,\n\
            \x20    0.200492253,83863,,raw_syscalls:sys_enter,52204197,100.00,,\n\
            \x20    0.228391910,20266,,raw_syscalls:sys_enter,9252122,100.00,,\n";
    assert_eq!(parse_perf_stat(intervals), Some(100263 + 83863 + 20266));
    // The task never ran: not counted = 0.
    let idle = "     0.100140418,<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n";
    assert_eq!(parse_perf_stat(idle), Some(0));
    assert_eq!(
        parse_perf_stat("   <not counted>      raw_syscalls:sys_enter\n"),
        Some(0)
    );
    assert_eq!(
        parse_perf_stat("<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n"),
        None
    );
    // Errors: no tracepoint access, perf missing for this kernel.
    let denied = "event syntax error: 'raw_syscalls:sys_enter'\n                     \\___ can't access trace events\n\nError:\tNo permissions to read /sys/kernel/tracing/events/raw_syscalls/sys_enter\nHint:\tTry 'sudo mount -o remount,mode=755 /sys/kernel/tracing/'\n";
    assert_eq!(parse_perf_stat(denied), None);
    assert_eq!(
        parse_perf_stat("WARNING: perf not found for kernel 6.1.0-13\n"),
        None
    );
    assert_eq!(parse_perf_stat(""), None);
}

#[test]
fn parses_strace_summaries() {
    // strace 6.1: strace -c -f -p PID, detached with SIGINT.
    let new = "strace: Process 12151 attached\nstrace: Process 12151 detached\n\
% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.149262           5     28501           write\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.149262           5     28501           total\n";
    assert_eq!(parse_strace_summary(new), Some(28501));
    // Several syscalls, errors on the total line.
    let mixed = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 61.54    0.000400           4       100           sendto\n\
 30.77    0.000200           1       150        42 recvfrom\n\
  7.69    0.000050           2        25           epoll_wait\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.000650           2       275        42 total\n";
    assert_eq!(parse_strace_summary(mixed), Some(275));
    // Older strace (4.x) leaves usecs/call blank on the total line.
    let old = "% time     seconds  usecs/call     calls    errors syscall\n\
------ ----------- ----------- --------- --------- ----------------\n\
 28.57    0.000012           1         9           mmap\n\
 71.43    0.000030           1        43         3 read\n\
------ ----------- ----------- --------- --------- ----------------\n\
100.00    0.000042                    52         3 total\n";
    assert_eq!(parse_strace_summary(old), Some(52));
    assert_eq!(
        parse_strace_summary("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n"),
        None
    );
}

#[test]
fn usage_between_computes_deltas() {
    let t = |tid, u, vol, mig| ThreadSample {
        tid,
        comm: format!("t{tid}"),
        processor: Some(tid % 2),
        utime_ticks: u,
        stime_ticks: 0,
        voluntary_ctxt_switches: vol,
        nonvoluntary_ctxt_switches: 1,
        migrations: Some(mig),
        // 10 µs waited per run, runs counted by the voluntary switches.
        run_delay_ns: Some(vol * 10_000),
        runs: Some(vol),
        // The exact count says 25% more than the ticks sampled.
        on_cpu_ns: Some(u * 1_250_000_000 / clock_ticks_per_sec()),
    };
    let tck = clock_ticks_per_sec();
    let mut a = empty_sample(7);
    a.state = 'S';
    a.utime_ticks = 10;
    a.stime_ticks = 5;
    a.vm_hwm_bytes = 1000;
    a.vm_rss_bytes = 900;
    a.thread_samples = vec![t(7, 10, 100, 3), t(8, 0, 50, 1)];
    let mut b = a.clone();
    b.at = a.at + Duration::from_secs(2);
    b.utime_ticks = 10 + 2 * tck; // 2 s user
    b.stime_ticks = 5 + tck; // 1 s system
    b.vm_hwm_bytes = 5000;
    b.vm_rss_bytes = 4000;
    // Thread 8 exited, thread 9 is new.
    b.thread_samples = vec![t(7, 10 + 2 * tck, 130, 5), t(9, tck, 20, 2)];
    b.migrations = Some(7);
    a.migrations = Some(4);
    let u = usage_between("node", &a, &b);
    assert_eq!(u.name, "node");
    assert_eq!(u.pid, 7);
    assert!((u.wall_s - 2.0).abs() < 1e-9);
    assert!((u.cpu_user_s - 2.0).abs() < 1e-9);
    assert!((u.cpu_sys_s - 1.0).abs() < 1e-9);
    // Of the exact time (below), over 2 s.
    assert!((u.cpu_percent - 187.5).abs() < 1e-9, "{u:?}");
    assert_eq!(u.peak_rss_bytes, 5000);
    assert_eq!(u.max_sampled_rss_bytes, 4000);
    assert_eq!(u.voluntary_ctx_switches, 30 + 20);
    assert_eq!(u.involuntary_ctx_switches, 1);
    assert_eq!(u.migrations, Some(2 + 2));
    // Waits: 30 runs of thread 7 and the new thread 9's 20, 10 µs each.
    assert!(
        (u.run_delay_s.unwrap() - 50.0 * 10e-6).abs() < 1e-12,
        "{u:?}"
    );
    assert!(
        (u.run_delay_us_per_run.unwrap() - 10.0).abs() < 1e-9,
        "{u:?}"
    );
    // Exact time: thread 7's 2.5 s and the new thread 9's 1.25 s.
    assert!((u.on_cpu_s.unwrap() - 3.75).abs() < 1e-9, "{u:?}");
    assert!((u.cpu_s() - 3.75).abs() < 1e-9);
    assert_eq!(u.syscalls, None);
    assert!(!u.exited);
    assert_eq!(u.thread_usage.len(), 2);
    assert_eq!(u.thread_usage[0].tid, 7);
    assert!((u.thread_usage[0].cpu_percent - 125.0).abs() < 1e-9);
    // Identical samples: zero, no NaN.
    let z = usage_between("x", &a, &a);
    assert_eq!(z.cpu_percent, 0.0);
    assert_eq!(z.run_delay_s, Some(0.0));
    assert_eq!(
        z.run_delay_us_per_run, None,
        "no run in the window: no average"
    );
    let json = serde_json::to_string(&u).unwrap();
    let back: ProcessUsage = serde_json::from_str(&json).unwrap();
    assert_eq!(back, u);
}

#[test]
fn the_time_on_a_cpu_keeps_a_thread_that_exited_in_the_window() {
    let t = |tid, on_cpu_ns| ThreadSample {
        tid,
        comm: format!("t{tid}"),
        processor: None,
        utime_ticks: 0,
        stime_ticks: 0,
        voluntary_ctxt_switches: 0,
        nonvoluntary_ctxt_switches: 0,
        migrations: None,
        run_delay_ns: Some(0),
        runs: Some(0),
        on_cpu_ns: Some(on_cpu_ns),
    };
    let mut a = empty_sample(7);
    a.thread_samples = vec![t(7, 1_000_000_000), t(8, 2_000_000_000)];
    a.on_cpu_ns = Some(3_000_000_000);
    let mut b = a.clone();
    // Thread 7 ran 0.5 s more; thread 8 ran 0.5 s more, then exited.
    b.thread_samples = vec![t(7, 1_500_000_000)];
    b.on_cpu_ns = Some(4_000_000_000);
    let u = usage_between("node", &a, &b);
    assert!((u.on_cpu_s.unwrap() - 1.0).abs() < 1e-9, "{u:?}");
    // Without the process's own count, the live threads' sum is all there is.
    b.on_cpu_ns = None;
    let u = usage_between("node", &a, &b);
    assert!((u.on_cpu_s.unwrap() - 0.5).abs() < 1e-9, "{u:?}");
}

#[test]
fn schedstat_gives_run_time_run_delay_and_runs() {
    assert_eq!(
        parse_schedstat("550021254 346223 37\n"),
        Some((550021254, 346223, 37))
    );
    assert_eq!(parse_schedstat("1 2"), None);
    assert_eq!(parse_schedstat("1 x 3"), None);
    assert_eq!(parse_schedstat(""), None);
}

#[test]
fn samples_current_process() {
    let pid = std::process::id();
    let a = sample_process(pid).unwrap();
    assert_eq!(a.pid, pid);
    assert!(a.vm_hwm_bytes > 0);
    assert!(a.vm_rss_bytes > 0);
    assert!(a.threads >= 1);
    assert!(!a.thread_samples.is_empty());
    assert!(a.processor.is_some());
    assert!(a.on_cpu_ns.is_some_and(|ns| ns > 0));
    // Busy for ~50 ms (longer only if the CPU time has not moved yet).
    let start = Instant::now();
    let mut x = 0u64;
    loop {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let elapsed = start.elapsed();
        if elapsed > Duration::from_secs(2) {
            break;
        }
        if elapsed > Duration::from_millis(50) {
            let now = sample_process(pid).unwrap();
            if now.utime_ticks + now.stime_ticks > a.utime_ticks + a.stime_ticks {
                break;
            }
        }
    }
    let b = sample_process(pid).unwrap();
    assert!(
        b.utime_ticks > a.utime_ticks,
        "{} {}",
        a.utime_ticks,
        b.utime_ticks
    );
    let u = usage_between("self", &a, &b);
    assert!(u.cpu_user_s > 0.0);
    assert!(u.cpu_percent > 0.0 && u.cpu_percent.is_finite());
    assert!(u.peak_rss_bytes > 0);
    let s = serde_json::to_string(&b).unwrap();
    let back: ProcSample = serde_json::from_str(&s).unwrap();
    assert_eq!(back.utime_ticks, b.utime_ticks);
    assert_eq!(
        sample_process(u32::MAX - 1).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn reads_system_and_machine() {
    let a = read_system_stat().unwrap();
    assert!(!a.cpus.is_empty());
    assert!(a.context_switches > 0);
    std::thread::sleep(Duration::from_millis(30));
    let b = read_system_stat().unwrap();
    let usage = system_usage_between(&a, &b);
    for c in usage.cpus.iter().chain(std::iter::once(&usage.total)) {
        assert!((0.0..=100.0).contains(&c.busy_percent), "{c:?}");
    }
    assert_eq!(read_cpu_times().unwrap().len(), a.cpus.len());
    let m = machine();
    assert!(m.cpus >= 1);
    assert!(!m.kernel.is_empty());
    assert!(m.memory_bytes > 0);
    assert!(!m.cpu_model.is_empty());
    assert!(m.socket_receive_buffer_max_bytes.is_some_and(|b| b > 0));
    assert!(clock_ticks_per_sec() > 0);
}

#[test]
fn monitor_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ProcessMonitor>();
    check::<SyscallCount>();
}

#[test]
fn syscall_tool_detection_returns() {
    let without = syscall_counter(false);
    assert_ne!(without, SyscallTool::Strace);
    let with = syscall_counter(true);
    if without == SyscallTool::Perf {
        assert_eq!(with, SyscallTool::Perf);
    }
}

#[test]
fn counts_syscalls_when_perf_can() {
    if syscall_counter(false) != SyscallTool::Perf {
        return;
    }
    let count = start_syscall_count(std::process::id(), false).unwrap();
    assert_eq!(count.tool(), SyscallTool::Perf);
    // 20,000 calls spread over about 2 s: perf, attaching meanwhile (it says nothing
    // when it has), counts at least 2,000 of them unless it takes 1.8 s to attach.
    for _ in 0..200 {
        for _ in 0..100 {
            // SAFETY: getppid has no preconditions.
            std::hint::black_box(unsafe { libc::getppid() });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let n = count.finish().unwrap();
    eprintln!("syscalls counted by perf: {n}");
    assert!(n >= 2000, "{n}");
}

#[test]
fn monitor_follows_a_child_to_its_exit() {
    let mut child = Command::new("sleep").arg("1").spawn().unwrap();
    let pid = child.id();
    let mut mon = ProcessMonitor::start(
        &[
            ("sleep".to_string(), pid),
            ("gone".to_string(), u32::MAX - 1),
        ],
        Duration::from_millis(50),
    );
    let m1 = mon.mark();
    std::thread::sleep(Duration::from_millis(200));
    let m2 = mon.mark();
    let mid = mon.usage_between(m1, m2);
    assert_eq!(mid.len(), 2);
    let s = mid.iter().find(|u| u.pid == pid).unwrap();
    assert!(!s.exited);
    assert!(s.peak_rss_bytes > 0);
    assert!(s.wall_s > 0.15 && s.wall_s < 1.0, "{}", s.wall_s);
    assert!(s.cpu_percent < 50.0);
    let gone = mid.iter().find(|u| u.name == "gone").unwrap();
    assert!(gone.exited);
    assert_eq!(gone.cpu_percent, 0.0);

    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let all = mon.usage_since(mon.start_mark());
    let s = all.iter().find(|u| u.pid == pid).unwrap();
    eprintln!("{s:?}");
    assert!(s.exited);
    assert_eq!(s.name, "sleep");
    assert!(s.peak_rss_bytes > 0, "the last sample before exit is kept");
    assert!(s.max_sampled_rss_bytes > 0);
    assert!(s.wall_s > 0.5, "{}", s.wall_s);
    assert!(mon.system_since(m1).is_some());
    assert!(mon.system_between(m1, m2).is_some());
    mon.stop();
    mon.stop();
    // Figures stay available after stop.
    assert_eq!(mon.usage_total().len(), 2);
    assert!(mon.usage_between(m1, Mark(99)).is_empty());
}

#[test]
fn monitor_measures_cpu_and_syscalls_of_a_busy_process() {
    let pid = std::process::id();
    let mon = ProcessMonitor::start_with(
        &[("self".to_string(), pid)],
        MonitorOptions {
            interval: Duration::from_millis(20),
            count_syscalls: true,
        },
    );
    std::thread::sleep(Duration::from_millis(300)); // let perf attach
    let m = mon.mark();
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(60) {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        // SAFETY: getppid has no preconditions.
        std::hint::black_box(unsafe { libc::getppid() });
    }
    // perf reports each interval once it has attached: a few more calls, and a look,
    // until it has (10 s at most).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut u = mon.usage_since(m);
    while mon.syscalls_counted()
        && u.first().and_then(|p| p.syscalls).is_none_or(|n| n == 0)
        && Instant::now() < deadline
    {
        // SAFETY: getppid has no preconditions.
        std::hint::black_box(unsafe { libc::getppid() });
        std::thread::sleep(Duration::from_millis(50));
        u = mon.usage_since(m);
    }
    eprintln!("{:?}", u);
    eprintln!("{:?}", mon.system_since(m));
    assert_eq!(u.len(), 1);
    assert!(u[0].cpu_user_s + u[0].cpu_sys_s > 0.0);
    assert!(!u[0].thread_usage.is_empty());
    if mon.syscalls_counted() {
        assert!(u[0].syscalls.unwrap() > 0);
    } else {
        assert_eq!(u[0].syscalls, None);
    }
    drop(mon);
}

/// The calling thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec, which is valid.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) },
        0
    );
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Not a test of its own: the process `the_cpu_of_a_thread_that_ended_is_counted`
/// starts (this test binary, for this test only). A thread runs until its own CPU clock
/// says 100 ms, then ends; the process prints that time and waits until its standard
/// input closes.
#[test]
#[ignore = "run by the_cpu_of_a_thread_that_ended_is_counted"]
fn a_thread_runs_and_ends() {
    if std::env::var_os("TICKWIRE_TEST_THREAD_ENDS").is_none() {
        return;
    }
    let burned = std::thread::spawn(|| loop {
        let ns = thread_cpu_ns();
        if ns >= 100_000_000 {
            return ns;
        }
    })
    .join()
    .unwrap();
    println!("thread-cpu-ns={burned}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn the_cpu_of_a_thread_that_ended_is_counted() {
    use std::io::BufRead;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sysinfo::tests::a_thread_runs_and_ends"])
        .args(["--ignored", "--nocapture", "--test-threads=1"])
        .env("TICKWIRE_TEST_THREAD_ENDS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // libtest may print the test's name on the same line.
    let burned: u64 = io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .find_map(|l| l.ok()?.split("thread-cpu-ns=").nth(1)?.trim().parse().ok())
        .expect("the child's thread ran");
    // The thread has ended: only the main thread, waiting, is left.
    let total = process_cpu_ns(child.id());
    drop(child.stdin.take());
    child.wait().unwrap();
    let total = total.expect("the child's CPU time");
    assert!(
        total >= burned,
        "{total} ns < the ended thread's {burned} ns"
    );
}
