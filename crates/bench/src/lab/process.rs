//! One `tickwire` process of the lab (its control channel, its log, killed when dropped),
//! a node started as one, and where the programs are.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// One `tickwire` process of the lab, killed when dropped.
pub struct Proc {
    /// Its name in the lab's messages and its log file (`NAME.log`).
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Its command line as results.json records it (program name, then arguments).
    pub command: String,
    /// A node's WebSocket address, when it serves one.
    pub ws_addr: Option<String>,
}

/// Makes the process `cmd` starts end with the lab. Every way out of the lab drops its
/// processes, which kills them; but a lab killed itself (SIGTERM, SIGKILL) drops
/// nothing, and a node, whose standard input is not the lab's, would run on. The
/// kernel sends the child SIGKILL when the thread that started it ends, so call this
/// only on a thread that lives as long as the lab (its main thread).
pub fn ends_with_lab(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let lab = std::process::id();
    // SAFETY: the closure makes only async-signal-safe system calls (prctl, getppid,
    // raise), as between fork and exec it must.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A lab that ended before the prctl sends nothing: its child goes too.
            if libc::getppid() as u32 != lab {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        })
    }
}

/// How a command line names `bin`: `tickwire` or `tickwire-bench` for Tickwire's own
/// programs, the path of anything else (a peer's server).
pub(super) fn program_name(bin: &Path) -> String {
    match bin.file_name().and_then(|n| n.to_str()) {
        Some(n @ ("tickwire" | "tickwire-bench")) => n.into(),
        _ => bin.display().to_string(),
    }
}

/// The two programs a lab run starts: the node's (`tickwire`: nodes, `publish`, `files
/// send`) and the lab's own (`tickwire-bench`: the load tools perf-pub, perf-sub...).
#[derive(Debug, Clone)]
pub struct Programs {
    /// The node's program (`tickwire`).
    pub node: PathBuf,
    /// The lab's own program (`tickwire-bench`), which runs the load tools.
    pub lab: PathBuf,
}

/// Starts a node on a free loopback port and waits for its address.
pub fn start_node(
    bin: &Path,
    name: &str,
    extra: &[String],
    log_dir: &Path,
) -> Result<(Proc, String)> {
    start_node_wrapped(&[], bin, name, extra, log_dir, &[])
}

/// [`start_node`] run through `wrapper` (a command that ends by executing its
/// arguments, e.g. `unshare` giving the node a mount namespace of its own; none if
/// empty) with extra environment variables `env` (e.g. Aeron's loss generator): the
/// process is still the node's, so signals and CPU figures reach it.
pub fn start_node_wrapped(
    wrapper: &[String],
    bin: &Path,
    name: &str,
    extra: &[String],
    log_dir: &Path,
    env: &[(String, String)],
) -> Result<(Proc, String)> {
    let mut args = vec!["node".to_string(), "--listen".into(), "127.0.0.1:0".into()];
    args.extend_from_slice(extra);
    let log_path = log_dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut child = ends_with_lab(&mut command)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("TICKWIRE_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .spawn()
        .with_context(|| format!("cannot start {} node", bin.display()))?;
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut log = log;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send(addr);
            }
            if let Some(rest) = line.split("WebSocket API on ws://").nth(1) {
                let addr = rest.split('/').next().unwrap_or("").to_string();
                let _ = tx.send(format!("ws {addr}"));
            }
        }
    });
    let (_tx, dead) = channel::<Value>();
    let mut proc = Proc {
        name: name.to_string(),
        child,
        stdin: None,
        lines: dead,
        command: {
            let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
            let wrapper: Vec<String> = wrapper.iter().map(|w| format!("{w} ")).collect();
            format!(
                "{}{}tickwire {}",
                env.concat(),
                wrapper.concat(),
                args.join(" ")
            )
        },
        ws_addr: None,
    };
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .map_err(|_| anyhow!("node did not start; see {}", log_path.display()))?;
    if !proc.is_running() {
        bail!("node exited at start; see {}", log_path.display());
    }
    // With --ws the WebSocket address follows; callers read it from `proc.ws_addr`.
    if args.iter().any(|a| a == "--ws") {
        let ws = rx.recv_timeout(Duration::from_secs(20)).map_err(|_| {
            anyhow!(
                "node did not log its WebSocket address; see {}",
                log_path.display()
            )
        })?;
        proc.ws_addr = ws.strip_prefix("ws ").map(str::to_string);
    }
    Ok((proc, addr))
}

impl Proc {
    /// Starts `bin args...`; JSON lines on stdout are collected, everything else (and
    /// stderr) goes to `log_dir/NAME.log`.
    pub fn spawn(bin: &Path, name: &str, args: &[String], log_dir: &Path) -> Result<Proc> {
        let log = std::fs::File::create(log_dir.join(format!("{name}.log")))
            .with_context(|| format!("cannot create the log of {name} in {}", log_dir.display()))?;
        let mut child = ends_with_lab(&mut Command::new(bin))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.try_clone()?)
            .env("TICKWIRE_LOG", "warn")
            .spawn()
            .with_context(|| format!("cannot start {} {}", bin.display(), args.join(" ")))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        let mut log = log;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v.is_object() => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    _ => {
                        let _ = writeln!(log, "{line}");
                    }
                }
            }
        });
        Ok(Proc {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            lines: rx,
            command: format!("{} {}", program_name(bin), args.join(" ")),
            ws_addr: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line to its control input (`rate N`, `mark NAME`, `quit`); fails when
    /// it has none or has exited.
    pub fn send(&mut self, command: &str) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{}: no control input", self.name))?;
        writeln!(stdin, "{command}").with_context(|| format!("{} stopped", self.name))?;
        stdin.flush()?;
        Ok(())
    }

    /// Waits for a JSON line of `type`, skipping others (up to `timeout`).
    pub fn expect(&mut self, ty: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) if v["type"] == ty => return Ok(v),
                Ok(_) => continue,
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        bail!(
                            "{} exited ({status}) before printing {ty:?}; see its log",
                            self.name
                        );
                    }
                    bail!("{} printed no {ty:?} within {timeout:?}", self.name);
                }
            }
        }
    }

    /// Whether it has not exited yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the process to stop (`quit` on its control input, else SIGINT) and waits.
    pub fn stop(mut self) -> Result<()> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

impl Programs {
    /// The lab is this process's program; the node's is `$TICKWIRE_BIN` when set, else
    /// the `tickwire` beside it (cargo builds both into one target folder).
    pub fn find() -> Result<Programs> {
        let lab = std::env::current_exe().context("cannot find the tickwire-bench program")?;
        let node = match std::env::var_os("TICKWIRE_BIN") {
            Some(path) => PathBuf::from(path),
            None => lab.with_file_name("tickwire"),
        };
        if !node.is_file() {
            bail!(
                "the node's program {} is missing: build it (`cargo build --release` builds \
                 tickwire and tickwire-bench) or name it with TICKWIRE_BIN",
                node.display()
            );
        }
        Ok(Programs { node, lab })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_does_not_outlive_the_thread_that_started_it() {
        // As when the lab is killed: its child's Proc is never dropped, so nothing
        // kills the child but its tie to the lab.
        let logs = std::env::temp_dir().join(format!("tickwire-lab-ends-{}", std::process::id()));
        std::fs::create_dir_all(&logs).unwrap();
        let pid = std::thread::spawn({
            let logs = logs.clone();
            move || {
                let p = Proc::spawn(Path::new("sleep"), "sleeper", &["30".into()], &logs).unwrap();
                let pid = p.pid();
                std::mem::forget(p);
                pid
            }
        })
        .join()
        .unwrap();
        // Gone, or a zombie nobody reaps (its Child was forgotten).
        let ended = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| crate::sysinfo::parse_stat(&t))
                .is_none_or(|s| s.state == 'Z')
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&logs);
        assert!(ended(), "process {pid} outlived the thread that started it");
    }
}
