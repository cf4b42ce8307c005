//! `tickwire bench files`: the managed-file-transfer procedure of the reference, scaled
//! to this machine. Classes of files (thousands of 16 KB ones, hundreds of 63 KB,
//! dozens of 635 KB, one large file) go from one site to 1 and to 4 sites, each with
//! the receivers' fsync `always` and `never`; each row says files/minute, MB/s, CPU
//! seconds per GB delivered (every process of the run) and system calls per file
//! delivered. One class (`63KB-both-ways`) also goes the other way at the same time,
//! from the first site up to the source, as the reference's load had traffic both ways.
//!
//! Tickwire: a source node (`[files] spool`) and edge nodes (`[files] inbox`) on the
//! backbone (Aeron multicast on loopback: one stream to every site), files queued with
//! `tickwire files send`; a row ends when the last file is in the last inbox. Beside
//! it, on the same files: `rsync` (one-to-one: one daemon per site on loopback, one
//! client per site at once, `--fsync` for `always`) and `uftp` (Debian's multicast
//! file transfer, in a network namespace of its own: to one site on its loopback, which
//! takes multicast; to more, each site's `uftpd` in a namespace of its own, since one
//! cannot share its port with a second on a host, joined by veth pairs on one bridge;
//! it has no fsync setting).
//!
//! System calls are counted system-wide (`perf stat -a -e raw_syscalls:sys_enter`)
//! while a row runs, so every process of each system is counted the same way (forks
//! of the rsync daemon too); the lab's own look at the inboxes adds a few hundred.

use super::child_cpu::{cpu_with_children, limit_for, run_timed, wait_children_reaped};
use super::files_rig::{FilesRig, RigSpec, SERVICE};
use super::*;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

struct Class {
    name: &'static str,
    files: usize,
    size: u64,
    /// The files also go the other way at the same time: from the first site up to
    /// the source (the reference's "63 KB in the other direction").
    both_ways: bool,
}

impl Class {
    /// Files moved: each file once, twice when it also goes up.
    fn moved(&self) -> usize {
        self.files * if self.both_ways { 2 } else { 1 }
    }

    /// Bytes of the class's files.
    fn bytes(&self) -> u64 {
        self.size * self.files as u64
    }

    /// Files delivered: each file at every site, and at the source when it goes up.
    fn delivered(&self, sites: usize) -> usize {
        self.files * sites + if self.both_ways { self.files } else { 0 }
    }
}

/// The class whose files go both ways.
pub(super) const BOTH_WAYS: &str = "63KB-both-ways";

fn classes(scale: f64, large_mb: u64) -> Vec<Class> {
    let n = |base: f64| ((base * scale).round() as usize).max(1);
    vec![
        Class {
            name: "16KB",
            files: n(2000.0),
            size: 16_000,
            both_ways: false,
        },
        Class {
            name: "63KB",
            files: n(500.0),
            size: 63_000,
            both_ways: false,
        },
        Class {
            name: BOTH_WAYS,
            files: n(500.0),
            size: 63_000,
            both_ways: true,
        },
        Class {
            name: "635KB",
            files: n(50.0),
            size: 635_000,
            both_ways: false,
        },
        Class {
            name: "large",
            files: 1,
            size: large_mb * 1_000_000,
            both_ways: false,
        },
    ]
}

/// Writes the class's files (bytes from a seeded generator: they do not compress).
fn make_files(dir: &Path, c: &Class) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ c.size;
    let mut buf = vec![0u8; (c.size as usize).min(1 << 20)];
    let mut paths = Vec::with_capacity(c.files);
    for i in 0..c.files {
        let path = dir.join(format!("f{i:05}.dat"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut left = c.size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            for chunk in buf[..n].chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let b = state.to_le_bytes();
                chunk.copy_from_slice(&b[..chunk.len()]);
            }
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        f.flush()?;
        paths.push(path);
    }
    Ok(paths)
}

/// Clears what a class left at a site: a class of many files is set aside (removed
/// with `work` at the end of the scenario).
fn clear_class(work: &Path, dir: &Path, c: &Class) {
    if c.files > 1 {
        set_aside(work, dir);
    } else {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Moves `dir` under `work/aside`.
fn set_aside(work: &Path, dir: &Path) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let aside = work.join("aside");
    let _ = std::fs::create_dir_all(&aside);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if std::fs::rename(dir, aside.join(n.to_string())).is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Files and bytes under `dir` (recursively), skipping hidden entries.
pub(super) fn count(dir: &Path) -> (usize, u64) {
    let mut files = 0;
    let mut bytes = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            let (f, b) = count(&e.path());
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += meta.len();
        }
    }
    (files, bytes)
}

/// Writes every dirty page back (`sync`) before a row is timed, so that no row pays for
/// the kernel writing back what came before it: the 300 MB of files the lab has just
/// made (before Tickwire's first row), or the row before's files with fsync `never`.
/// Returns whether it synced and how long it took.
pub(super) fn settle_disk() -> (bool, f64) {
    let t0 = Instant::now();
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    (synced, t0.elapsed().as_secs_f64())
}

/// How long perf may take to print its count and exit once interrupted: it does so
/// within a second.
const PERF_STOP_LIMIT: Duration = Duration::from_secs(10);

/// `perf stat -a` counting every system call on the machine until `finish`, or until
/// dropped: a row that fails on its way must not leave it counting for ever.
struct SystemCalls(Option<std::process::Child>);

impl SystemCalls {
    fn start() -> Self {
        if !crate::sysinfo::perf_can_count_syscalls() {
            return SystemCalls(None);
        }
        let child = crate::lab::ends_with_lab(&mut Command::new("perf"))
            .args(["stat", "-a", "-x", ",", "-e", "raw_syscalls:sys_enter"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok();
        // perf needs a moment to attach to every CPU.
        std::thread::sleep(Duration::from_millis(200));
        SystemCalls(child)
    }

    /// Stops the count (SIGINT: perf prints it and exits) and returns it; `None` if perf
    /// has not exited within `limit`, when it is killed: a row must not wait for ever on a
    /// counter.
    fn finish(mut self, limit: Duration) -> Option<u64> {
        let mut child = self.0.take()?;
        // Read on a thread of its own: what is waited for is then perf exiting, bounded.
        let stderr = child.stderr.take();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut e) = stderr {
                let _ = std::io::Read::read_to_string(&mut e, &mut s);
            }
            s
        });
        if !crate::sysinfo::interrupt_and_wait(&mut child, limit) {
            eprintln!(
                "bench files: perf stat did not exit within {:.0} s of SIGINT: killed, the row has no system call count",
                limit.as_secs_f64()
            );
            return None;
        }
        crate::sysinfo::parse_perf_stat(&reader.join().ok()?)
    }
}

impl Drop for SystemCalls {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            crate::sysinfo::interrupt_and_wait(&mut child, Duration::from_secs(2));
        }
    }
}

/// An rsync daemon (`--no-detach`), stopped when dropped: on every way out of the
/// rsync rows, a failed one too.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn row(
    c: &Class,
    sites: usize,
    fsync: &str,
    seconds: f64,
    cpu: BTreeMap<String, f64>,
    syscalls: Option<u64>,
) -> FilesRow {
    let delivered = c.size as f64 * c.delivered(sites) as f64;
    let total_cpu: f64 = cpu.values().sum();
    FilesRow {
        files_per_min: c.moved() as f64 * 60.0 / seconds.max(1e-9),
        mb_per_s: (c.size * c.moved() as u64) as f64 / 1e6 / seconds.max(1e-9),
        cpu_s_per_gb: total_cpu / (delivered / 1e9).max(1e-12),
        syscalls_per_file: syscalls.map(|n| n as f64 / c.delivered(sites) as f64),
        seconds,
        cpu_s: cpu,
        unavailable: None,
        ..row_of(c, sites, fsync)
    }
}

fn unavailable(c: &Class, sites: usize, fsync: &str, why: &str) -> FilesRow {
    FilesRow {
        unavailable: Some(why.into()),
        ..row_of(c, sites, fsync)
    }
}

/// The row of class `c` sent to `sites` sites with `fsync`, before any figure.
fn row_of(c: &Class, sites: usize, fsync: &str) -> FilesRow {
    FilesRow {
        class: c.name.into(),
        files: c.moved(),
        bytes: c.size * c.moved() as u64,
        sites,
        fsync: fsync.into(),
        ..FilesRow::default()
    }
}

/// Waits until every directory in `dirs` holds all of class `c`'s files, whole, under
/// the class's name.
fn wait_delivered(dirs: &[PathBuf], c: &Class, limit: Duration) -> Result<()> {
    let (sub, files, bytes) = (c.name, c.files, c.size * c.files as u64);
    let deadline = Instant::now() + limit;
    loop {
        let done = dirs.iter().all(|d| count(&d.join(sub)) == (files, bytes));
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            let got: Vec<(usize, u64)> = dirs.iter().map(|d| count(&d.join(sub))).collect();
            bail!("not delivered within {limit:?}: want {files} files ({bytes} bytes) in each of {dirs:?}, have {got:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Lab {
    pub(super) fn files(&mut self) -> Result<()> {
        let classes = classes(self.args.files.files_scale, self.args.files.files_large_mb);
        self.results.files_backbone_auth =
            Some(self.backbone_mac().map_or("off", |m| m.name()).to_string());
        let work = self.logs.join("files-work");
        let _ = std::fs::remove_dir_all(&work);
        let mut sources = Vec::new();
        for c in &classes {
            self.progress.line(
                &format!("files: making {} files of class {}", c.files, c.name),
                0.0,
            );
            sources.push(make_files(&work.join("src").join(c.name), c)?);
        }
        let mut tw = Vec::new();
        let mut rsync = Vec::new();
        let mut uftp = Vec::new();
        let sites_list = self.args.files.files_sites.clone();
        let fsyncs = self.args.files.files_fsync.clone();
        for &sites in &sites_list {
            for fsync in &fsyncs {
                self.progress.line(
                    &format!("files: tickwire, {sites} sites, fsync {fsync}"),
                    0.1,
                );
                tw.extend(self.files_tickwire(&classes, &sources, &work, sites, fsync)?);
                self.progress
                    .line(&format!("files: rsync, {sites} sites, fsync {fsync}"), 0.1);
                rsync.extend(self.files_rsync(&classes, &work, sites, fsync)?);
                self.progress
                    .line(&format!("files: uftp, {sites} sites, fsync {fsync}"), 0.05);
                uftp.extend(self.files_uftp(&classes, &work, sites, fsync)?);
            }
        }
        self.results.files = tw;
        let peers = self.results.peers.get_or_insert_with(Default::default);
        peers.uftp = uftp;
        peers.rsync = rsync;
        self.progress
            .line("files: market data without files and during them", 0.1);
        let large = classes
            .iter()
            .zip(&sources)
            .find(|(c, _)| c.name == "large")
            .and_then(|(_, p)| p.first())
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no large file"))?;
        self.results.files_market_data = self.files_market_data(&large, &work)?;
        self.progress
            .line("files: the large file under faults", 0.1);
        self.results.files_faults = self.files_faults(&large, &work)?;
        let _ = std::fs::remove_dir_all(&work);
        Ok(())
    }

    fn files_tickwire(
        &mut self,
        classes: &[Class],
        sources: &[Vec<PathBuf>],
        work: &Path,
        sites: usize,
        fsync: &str,
    ) -> Result<Vec<FilesRow>> {
        let dir = work.join(format!("tw-{sites}-{fsync}"));
        let spec = RigSpec {
            tag: format!("{sites}-{fsync}"),
            sites,
            fsync: fsync.to_string(),
            rate_mb: self.args.files.files_rate_mb,
            both_ways: true,
        };
        let mut rig = FilesRig::start(self, &dir, &spec, &[])?;
        rig.warm_up(work)?;
        let inboxes: Vec<PathBuf> = rig.sites.iter().map(|s| s.files()).collect();
        let src_files = rig.src_inbox.as_ref().map(|i| i.join(SERVICE));
        let mut rows = Vec::new();
        for (c, paths) in classes.iter().zip(sources) {
            settle_disk();
            let pids = rig.pids();
            let before: Vec<f64> = pids.iter().map(|(_, p)| cpu_with_children(*p)).collect();
            let calls = SystemCalls::start();
            let t0 = Instant::now();
            let mut up_cmd = match c.both_ways {
                true => Some(rig.send_up_command(c.name, paths)?),
                false => None,
            };
            let (down, up) = std::thread::scope(|s| {
                let up = up_cmd
                    .as_mut()
                    .map(|cmd| s.spawn(move || run_timed(cmd, limit_for(c.bytes()))));
                let down = rig.send(c.name, paths);
                (down, up.map(|h| h.join()))
            });
            let (ok, send_cpu, out) = down?;
            if !ok {
                bail!("tickwire files send ({}) failed: {out}", c.name);
            }
            let mut cpu = BTreeMap::new();
            let mut receivers = inboxes.clone();
            if let Some(up) = up {
                let (ok, up_cpu, out) =
                    up.map_err(|_| anyhow::anyhow!("the upward send panicked"))??;
                if !ok {
                    bail!("tickwire files send ({}, up) failed: {out}", c.name);
                }
                cpu.insert("tickwire files send (up)".to_string(), up_cpu);
                receivers.extend(src_files.clone());
            }
            wait_delivered(&receivers, c, Duration::from_secs(900))?;
            let seconds = t0.elapsed().as_secs_f64();
            let syscalls = calls.finish(PERF_STOP_LIMIT);
            cpu.insert("tickwire files send".to_string(), send_cpu);
            for ((name, pid), b) in pids.iter().zip(before) {
                cpu.insert(format!("node {name}"), cpu_with_children(*pid) - b);
            }
            rows.push(row(c, sites, fsync, seconds, cpu, syscalls));
            // What this class left in the inboxes goes aside until the end (the peers'
            // too): removing
            // thousands of files just before the next row would time the file system
            // reusing their inodes (on ext4 without a journal, each new file skips the
            // ones removed within the last minutes).
            for inbox in inboxes.iter().chain(&src_files) {
                clear_class(work, &inbox.join(c.name), c);
            }
        }
        self.results.commands.extend(rig.src_command());
        rig.stop()?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(rows)
    }

    fn files_rsync(
        &mut self,
        classes: &[Class],
        work: &Path,
        sites: usize,
        fsync: &str,
    ) -> Result<Vec<FilesRow>> {
        if Command::new("rsync").arg("--version").output().is_err() {
            return Ok(classes
                .iter()
                .map(|c| {
                    unavailable(
                        c,
                        sites,
                        fsync,
                        "rsync is not installed (scripts/setup.sh installs it)",
                    )
                })
                .collect());
        }
        let dir = work.join(format!("rsync-{sites}-{fsync}"));
        let mut daemons = Vec::new();
        let mut dests = Vec::new();
        let mut ports = Vec::new();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        // Site 0 is the source's, where files go up (the both-ways class only): one
        // more daemon and one more client, as a site sending up would run them.
        for i in 0..=sites {
            let dest = dir.join(format!("site{i}"));
            std::fs::create_dir_all(&dest)?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let conf = dir.join(format!("site{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "use chroot = no\n{}[site]\npath = {}\nread only = no\n",
                    if root { "uid = root\ngid = root\n" } else { "" },
                    dest.display()
                ),
            )?;
            let log =
                std::fs::File::create(self.logs.join(format!("rsyncd-{sites}-{fsync}-{i}.log")))?;
            let child = crate::lab::ends_with_lab(&mut Command::new("rsync"))
                .args([
                    "--daemon",
                    "--no-detach",
                    "--address",
                    "127.0.0.1",
                    "--port",
                    &port.to_string(),
                    "--config",
                ])
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .context("cannot start the rsync daemon")?;
            daemons.push(Daemon(child));
            dests.push(dest);
            ports.push(port);
        }
        // Until every daemon answers.
        for p in &ports {
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::net::TcpStream::connect(("127.0.0.1", *p)).is_err() {
                if Instant::now() > deadline {
                    bail!("the rsync daemon on port {p} did not start");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let mut rows = Vec::new();
        for c in classes {
            let src = work.join("src").join(c.name);
            settle_disk();
            let before: Vec<f64> = daemons
                .iter()
                .map(|d| cpu_with_children(d.0.id()))
                .collect();
            let calls = SystemCalls::start();
            let t0 = Instant::now();
            let receivers = if c.both_ways { 0 } else { 1 };
            let clients: Vec<_> = ports[receivers..]
                .iter()
                .map(|p| {
                    let mut cmd = Command::new("rsync");
                    cmd.args(["-a", "--whole-file"]);
                    if fsync == "always" {
                        cmd.arg("--fsync");
                    }
                    cmd.arg(format!("{}/", src.display()));
                    cmd.arg(format!("rsync://127.0.0.1:{p}/site/{}/", c.name));
                    let limit = limit_for(c.bytes());
                    std::thread::spawn(move || run_timed(&mut cmd, limit))
                })
                .collect();
            let mut client_cpu = 0.0;
            for h in clients {
                let (ok, cpu, out) = h
                    .join()
                    .map_err(|_| anyhow::anyhow!("an rsync client thread panicked"))??;
                if !ok {
                    bail!("rsync failed: {out}");
                }
                client_cpu += cpu;
            }
            wait_delivered(&dests[receivers..], c, Duration::from_secs(60))?;
            let seconds = t0.elapsed().as_secs_f64();
            let syscalls = calls.finish(PERF_STOP_LIMIT);
            let mut cpu = BTreeMap::new();
            cpu.insert("rsync clients".to_string(), client_cpu);
            // Each daemon counts a connection's CPU once it has reaped the child that
            // served it: read too soon, the daemons cost nothing.
            for d in &mut daemons {
                // A daemon that died has no children either, and counts nothing.
                if let Ok(Some(status)) = d.0.try_wait() {
                    bail!("an rsync daemon exited during the run ({status})");
                }
                if !wait_children_reaped(d.0.id(), Duration::from_secs(10)) {
                    bail!("an rsync daemon did not reap its children within 10 s");
                }
            }
            let daemon_cpu: f64 = daemons
                .iter()
                .zip(before)
                .map(|(d, b)| cpu_with_children(d.0.id()) - b)
                .sum();
            cpu.insert("rsync daemons".to_string(), daemon_cpu);
            rows.push(row(c, sites, fsync, seconds, cpu, syscalls));
            for d in &dests[receivers..] {
                clear_class(work, &d.join(c.name), c);
            }
        }
        drop(daemons);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(rows)
    }

    fn files_uftp(
        &mut self,
        classes: &[Class],
        work: &Path,
        sites: usize,
        fsync: &str,
    ) -> Result<Vec<FilesRow>> {
        let why = if Command::new("uftp").arg("-h").output().is_err() {
            Some("uftp is not installed (scripts/setup.sh installs it)")
        } else if fsync == "always" {
            Some("uftpd has no fsync setting")
        } else if unsafe { libc::geteuid() } != 0 {
            Some("needs network namespaces of its own (root)")
        } else {
            None
        };
        if let Some(why) = why {
            return Ok(classes
                .iter()
                .map(|c| unavailable(c, sites, fsync, why))
                .collect());
        }
        let dir = work.join("uftp");
        let mut rows = Vec::new();
        for c in classes {
            let dest = dir.join("dest");
            clear_class(work, &dir, c);
            // Site 0: the source's receiver, for the both-ways class.
            let first = if c.both_ways { 0 } else { 1 };
            let dests: Vec<PathBuf> = (first..=sites)
                .map(|i| dest.join(format!("site{i}")))
                .collect();
            for d in &dests {
                std::fs::create_dir_all(d)?;
            }
            let script = uftp_script(
                sites,
                c.both_ways,
                &dest,
                &work.join("src").join(c.name),
                &work.join("src"),
                &dir,
            );
            settle_disk();
            let calls = SystemCalls::start();
            // Every site's copy (and the one up) goes at once.
            let limit = limit_for(c.bytes() * dests.len() as u64);
            let (ok, uftp_cpu, out) = run_timed(
                Command::new("unshare").args(["-n", "bash", "-c", &script]),
                limit,
            )?;
            let syscalls = calls.finish(PERF_STOP_LIMIT);
            if !ok {
                rows.push(unavailable(
                    c,
                    sites,
                    fsync,
                    &format!("uftp failed: {}", out.trim()),
                ));
                continue;
            }
            let field = |key: &str| {
                out.lines().find_map(|l| {
                    l.strip_prefix(key)
                        .and_then(|v| v.trim().parse::<f64>().ok())
                })
            };
            let (Some(seconds), Some(uftpd_ticks)) = (field("seconds "), field("uftpd ")) else {
                bail!("uftp's script said: {out}");
            };
            let want = (c.files, c.size * c.files as u64);
            let short: Vec<(usize, u64)> = dests
                .iter()
                .map(|d| count(&d.join(c.name)))
                .filter(|got| *got != want)
                .collect();
            if !short.is_empty() {
                rows.push(unavailable(
                    c,
                    sites,
                    fsync,
                    &format!(
                        "uftp delivered {short:?} of {} files at some sites",
                        c.files
                    ),
                ));
                continue;
            }
            let mut cpu = BTreeMap::new();
            let uftpd = uftpd_ticks / crate::sysinfo::clock_ticks_per_sec() as f64;
            // run_timed's CPU is the script's: uftp and the shell (uftpd, killed at the
            // end and never waited for, is read from /proc).
            cpu.insert("uftp (server, script)".to_string(), uftp_cpu);
            cpu.insert(
                if sites == 1 {
                    "uftpd"
                } else {
                    "uftpd (every site)"
                }
                .to_string(),
                uftpd,
            );
            rows.push(row(c, sites, fsync, seconds, cpu, syscalls));
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(rows)
    }
}

/// The files part of report.md.
/// The shell script of one uftp row, run in a network namespace of its own: the
/// server's time and the programs' CPU ticks, printed. One site: its uftpd on the
/// namespace's loopback, which takes multicast. More: uftpd cannot share its port with a
/// second one on a host, so each site's runs in a namespace of its own, joined to the
/// server's by a veth pair on one bridge (multicast flooded to every port, 9,000-byte
/// frames so that uftp's 8,800-byte blocks are not fragmented). Both ways: a second
/// uftpd where the server is (port 41045, its files under `site0`) and a second uftp
/// where the first site is, sending it the same files at the same time.
fn uftp_script(
    sites: usize,
    both_ways: bool,
    dest: &Path,
    src: &Path,
    base: &Path,
    log: &Path,
) -> String {
    let (dest, src, base, log) = (dest.display(), src.display(), base.display(), log.display());
    let ids: Vec<String> = (1..=sites).map(|i| format!("0x{i:08x}")).collect();
    let (net, server_ip) = if sites == 1 {
        (
            format!(
                r#"ip link set lo multicast on
ip route add 239.0.0.0/8 dev lo
uftpd -d -I 127.0.0.1 -M 239.20.33.1 -p 41044 -U {id} -D {dest}/site1 >/dev/null 2>{log}/uftpd1.log &
U=$!
UP_NS=""
UP_IP=127.0.0.1"#,
                id = ids[0]
            ),
            "127.0.0.1",
        )
    } else {
        (
            format!(
                r#"ip link add tw-br type bridge
ip link set tw-br type bridge mcast_snooping 0
ip link set tw-br mtu 9000
ip addr add 10.77.0.1/24 dev tw-br
ip link set tw-br up
ip route add 239.0.0.0/8 dev tw-br
I=0
for ID in {ids}; do
  I=$((I + 1))
  unshare -n sleep 3600 &
  H=$!
  HOLD="$HOLD $H"
  while [ "$(readlink /proc/$H/ns/net)" = "$(readlink /proc/self/ns/net)" ]; do sleep 0.01; done
  ip link add tw-s$I mtu 9000 type veth peer name eth0 mtu 9000 netns $H
  ip link set tw-s$I master tw-br up
  nsenter -t $H -n sh -c "ip link set lo up && ip addr add 10.77.0.$((10 + I))/24 dev eth0 && ip link set eth0 up && ip route add 239.0.0.0/8 dev eth0"
  nsenter -t $H -n uftpd -d -I 10.77.0.$((10 + I)) -M 239.20.33.1 -p 41044 -U $ID -D {dest}/site$I >/dev/null 2>{log}/uftpd$I.log &
  U="$U $!"
  if [ $I = 1 ]; then UP_NS="nsenter -t $H -n"; fi
done
UP_IP=10.77.0.11"#,
                ids = ids.join(" ")
            ),
            "10.77.0.1",
        )
    };
    format!(
        r#"set -e
U=""
HOLD=""
trap 'kill $U $HOLD 2>/dev/null' EXIT
ip link set lo up
{net}
{up_receiver}
sleep 0.5
set +e
T0=$(date +%s.%N)
{up_sender}
uftp -I {server_ip} -M 239.20.33.1 -P 239.20.33.3 -p 41044 -R -1 -b 8800 -H {hosts} -E {base}/ {src} >/dev/null 2>{log}/uftp.log
RC=$?
{up_wait}
T1=$(date +%s.%N)
echo "seconds $(echo "$T0 $T1" | awk '{{print $2 - $1}}')"
echo "uftpd $(for P in $U; do awk '{{print $14+$15}}' /proc/$P/stat; done | awk '{{s += $1}} END {{print s}}')"
exit $RC
"#,
        hosts = ids.join(","),
        up_receiver = if both_ways {
            format!("uftpd -d -I {server_ip} -M 239.20.33.2 -p 41045 -U 0x000000ff -D {dest}/site0 >/dev/null 2>{log}/uftpd0.log &\nU=\"$U $!\"")
        } else {
            String::new()
        },
        up_sender = if both_ways {
            format!("$UP_NS uftp -I $UP_IP -M 239.20.33.2 -P 239.20.33.4 -p 41045 -R -1 -b 8800 -H 0x000000ff -E {base}/ {src} >/dev/null 2>{log}/uftp-up.log &\nUP=$!")
        } else {
            String::new()
        },
        up_wait = if both_ways { "wait $UP || RC=$?" } else { "" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process that would run for a minute.
    fn sleeper() -> std::process::Child {
        Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sleep")
    }

    /// Whether `pid` is still there (running, or exited and not waited for).
    fn still_there(pid: u32) -> bool {
        Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn a_counter_that_does_not_exit_is_killed() {
        // A count that ignores SIGINT, as a perf that hangs would.
        let calls = Command::new("sh")
            .args(["-c", "trap '' INT; exec sleep 60"])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh");
        let pid = calls.id();
        // Once sleep runs, the shell has set the trap.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap() != "sleep\n" {
            assert!(Instant::now() < deadline, "sleep did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(SystemCalls(Some(calls)).finish(Duration::from_millis(100)));
        });
        // Only a guard against a wait for ever; the limit is 100 ms.
        let Ok(count) = rx.recv_timeout(Duration::from_secs(30)) else {
            // SAFETY: kill has no memory-safety preconditions; the pid is not reaped yet.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("finish waited past its limit");
        };
        assert_eq!(count, None);
        assert!(!still_there(pid), "perf's stand-in left behind");
    }

    #[test]
    fn a_row_that_fails_leaves_no_counter_and_no_daemon_running() {
        // What a row holds when an error takes it out early: each is dropped unfinished.
        let (calls, daemon) = (sleeper(), sleeper());
        let pids = [calls.id(), daemon.id()];
        drop(SystemCalls(Some(calls)));
        drop(Daemon(daemon));
        for pid in pids {
            assert!(!still_there(pid), "process {pid} left behind");
        }
    }
}
