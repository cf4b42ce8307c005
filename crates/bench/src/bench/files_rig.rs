//! Tickwire's side of `tickwire bench files`: a source node with a spool and edge nodes
//! with inboxes on a loopback backbone (one Aeron stream to every site), each of which
//! can be killed and started again (the faults do).

use super::child_cpu::{limit_for, run_timed};
use super::*;
use serde_json::Value;
use std::process::Command;

/// How the rig's nodes are set up.
pub(super) struct RigSpec {
    /// Names the nodes' logs.
    pub(super) tag: String,
    pub(super) sites: usize,
    /// Every node's `[files] fsync` (the sites' inboxes, the spools).
    pub(super) fsync: String,
    /// The source's `[files] rate_mb_per_s`.
    pub(super) rate_mb: u64,
    /// Files go the other way too: the source has an inbox (with the same fsync) and
    /// the first site a spool (at the source's rate).
    pub(super) both_ways: bool,
}

/// How one site's node is started besides its config.
#[derive(Default, Clone)]
pub(super) struct SiteLaunch {
    /// Extra environment (Aeron's loss generator).
    pub(super) env: Vec<(String, String)>,
    /// A command the node runs through (a mount namespace with a small inbox).
    pub(super) wrapper: Vec<String>,
}

/// The files service of every node of the rig (its files arrive in the inbox's
/// directory of that name).
pub(super) const SERVICE: &str = "FILES";

/// One receiving site.
pub(super) struct Site {
    pub(super) name: String,
    pub(super) inbox: PathBuf,
    /// Its native address while it is up (`files send --node` for its own files).
    addr: String,
    cfg: PathBuf,
    launch: SiteLaunch,
    /// None while it is down.
    pub(super) node: Option<lab::Proc>,
    starts: usize,
}

impl Site {
    /// Where its files arrive: the inbox's directory of the rig's service.
    pub(super) fn files(&self) -> PathBuf {
        self.inbox.join(SERVICE)
    }
}

/// A source and its sites.
pub(super) struct FilesRig {
    bin: PathBuf,
    logs: PathBuf,
    channel: String,
    tag: String,
    src_cfg: PathBuf,
    src_starts: usize,
    /// None while it is down.
    pub(super) src: Option<lab::Proc>,
    /// The source's address (`files send --node`).
    pub(super) addr: String,
    /// The source's inbox, where files sent up arrive (`RigSpec::both_ways`).
    pub(super) src_inbox: Option<PathBuf>,
    pub(super) sites: Vec<Site>,
}

/// The nodes' backbone: chunks of 62 KiB in datagrams of 8 KiB (as uftp's largest
/// blocks), sealed with the run's key as the lab's other rigs are (`--backbone-auth`).
fn backbone_section(lab: &Lab) -> Result<String> {
    let key_file = match lab.backbone_mac() {
        Some(mac) => format!("key_file = {:?}\n", lab.backbone_key_file(mac)?.display()),
        None => String::new(),
    };
    Ok(format!("[backbone]\nmtu = 8192\n{key_file}"))
}

impl FilesRig {
    /// Writes the nodes' configs under `dir` and starts them; `launch` says how each
    /// site is started (the default for sites it does not name).
    pub(super) fn start(
        lab: &Lab,
        dir: &Path,
        spec: &RigSpec,
        launch: &[SiteLaunch],
    ) -> Result<FilesRig> {
        std::fs::create_dir_all(dir)?;
        let backbone = backbone_section(lab)?;
        let src_cfg = dir.join("src.toml");
        let src_inbox = spec.both_ways.then(|| dir.join("src-inbox"));
        // One policy for every node: the sites' inboxes, and the spools (a file is said
        // queued once synced).
        let files = format!(
            "[files]\nservices = [{SERVICE:?}]\nfsync = \"{}\"\n",
            spec.fsync
        );
        let inbox_line = |inbox: &Path| format!("inbox = {:?}\n", inbox.display().to_string());
        let spool_line = |spool: &Path| {
            format!(
                "spool = {:?}\nrate_mb_per_s = {}\nchunk_kib = 62\n",
                spool.display().to_string(),
                spec.rate_mb
            )
        };
        std::fs::write(
            &src_cfg,
            format!(
                "[node]\nname = \"src\"\n{backbone}{files}{}{}",
                spool_line(&dir.join("spool")),
                src_inbox.as_deref().map(inbox_line).unwrap_or_default()
            ),
        )?;
        let mut sites = Vec::new();
        for i in 1..=spec.sites {
            let name = format!("site{i}");
            let inbox = dir.join(format!("{name}-inbox"));
            std::fs::create_dir_all(&inbox)?;
            let cfg = dir.join(format!("{name}.toml"));
            let spool = if spec.both_ways && i == 1 {
                spool_line(&dir.join(format!("{name}-spool")))
            } else {
                String::new()
            };
            std::fs::write(
                &cfg,
                format!(
                    "[node]\nname = \"{name}\"\n{backbone}{files}{}{spool}",
                    inbox_line(&inbox)
                ),
            )?;
            sites.push(Site {
                name,
                inbox,
                addr: String::new(),
                cfg,
                launch: launch.get(i - 1).cloned().unwrap_or_default(),
                node: None,
                starts: 0,
            });
        }
        let mut rig = FilesRig {
            bin: lab.programs.node.clone(),
            logs: lab.logs.clone(),
            channel: lab::BackboneSpec::loopback()?.channel,
            tag: spec.tag.clone(),
            src_cfg,
            src_starts: 0,
            src: None,
            addr: String::new(),
            src_inbox,
            sites,
        };
        rig.start_src()?;
        for i in 0..rig.sites.len() {
            rig.start_site(i)?;
        }
        Ok(rig)
    }

    fn args(&self, cfg: &Path, role: &str) -> Vec<String> {
        vec![
            "--config".into(),
            cfg.display().to_string(),
            "--backbone".into(),
            self.channel.clone(),
            "--role".into(),
            role.into(),
        ]
    }

    /// Starts the source (again: its queue comes back from its spool).
    pub(super) fn start_src(&mut self) -> Result<()> {
        self.src_starts += 1;
        let name = format!("files-src-{}-{}", self.tag, self.src_starts);
        let args = self.args(&self.src_cfg, "source");
        let (src, addr) = lab::start_node(&self.bin, &name, &args, &self.logs)?;
        self.src = Some(src);
        self.addr = addr;
        Ok(())
    }

    /// Starts site `i` (again: it resumes its partial files).
    pub(super) fn start_site(&mut self, i: usize) -> Result<()> {
        let args = self.args(&self.sites[i].cfg, "edge");
        let site = &mut self.sites[i];
        site.starts += 1;
        let name = format!("files-{}-{}-{}", site.name, self.tag, site.starts);
        let (node, addr) = lab::start_node_wrapped(
            &site.launch.wrapper,
            &self.bin,
            &name,
            &args,
            &self.logs,
            &site.launch.env,
        )?;
        site.node = Some(node);
        site.addr = addr;
        Ok(())
    }

    /// Kills the source with SIGKILL.
    pub(super) fn kill_src(&mut self) {
        drop(self.src.take());
    }

    /// Kills site `i` with SIGKILL.
    pub(super) fn kill_site(&mut self, i: usize) {
        drop(self.sites[i].node.take());
    }

    /// Every site's name, for `files send --to`.
    pub(super) fn site_names(&self) -> String {
        let names: Vec<&str> = self.sites.iter().map(|s| s.name.as_str()).collect();
        names.join(",")
    }

    /// `tickwire files send` of `paths` to every site, under `as_dir` in the inboxes:
    /// whether it succeeded, its CPU seconds and its output (an error if it runs past
    /// [`limit_for`] its files' bytes).
    pub(super) fn send(&self, as_dir: &str, paths: &[PathBuf]) -> Result<(bool, f64, String)> {
        let bytes = paths
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        run_timed(
            &mut self.send_command(&self.addr, &self.site_names(), as_dir, paths),
            limit_for(bytes),
        )
    }

    /// The `tickwire files send` of `paths` from the first site up to the source, under
    /// `as_dir` in its inbox (`RigSpec::both_ways`), for [`run_timed`].
    pub(super) fn send_up_command(&self, as_dir: &str, paths: &[PathBuf]) -> Result<Command> {
        let site = self
            .sites
            .first()
            .ok_or_else(|| anyhow::anyhow!("no site to send up from"))?;
        Ok(self.send_command(&site.addr, "src", as_dir, paths))
    }

    /// `tickwire files send` of `paths` to the node at `node`, for the sites `to`.
    fn send_command(&self, node: &str, to: &str, as_dir: &str, paths: &[PathBuf]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "files",
            "send",
            "--node",
            node,
            "--to",
            to,
            "--as-dir",
            as_dir,
            "--timeout",
            "300",
        ]);
        cmd.args(paths);
        cmd
    }

    /// A first file to every site: the sites are present and the backbone's images are
    /// up before anything is timed. The source's record says when every site has it (a
    /// site's inbox may be in a mount namespace the lab does not see).
    pub(super) fn warm_up(&self, work: &Path) -> Result<()> {
        let warm = work.join("warmup.dat");
        std::fs::write(&warm, b"warm up")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (ok, _, out) = self.send("warmup", std::slice::from_ref(&warm))?;
            if !ok {
                bail!("tickwire files send (warm-up) failed: {out}");
            }
            let tried = Instant::now();
            while tried.elapsed() < Duration::from_secs(10) {
                let rows = self.status()?;
                let done = self.sites.iter().all(|site| {
                    rows.iter().any(|r| {
                        r["file"] == "warmup/warmup.dat"
                            && r["site"] == site.name.as_str()
                            && r["state"] == "done"
                    })
                });
                if done {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if Instant::now() > deadline {
                bail!("the sites did not take the warm-up file within 60 s");
            }
        }
    }

    /// `tickwire files status --json` of the source: one object per file and site.
    pub(super) fn status(&self) -> Result<Vec<Value>> {
        let out = Command::new(&self.bin)
            .args(["files", "status", "--node", &self.addr, "--json"])
            .output()?;
        if !out.status.success() {
            bail!(
                "tickwire files status failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// What the source's node (its last start) has logged.
    pub(super) fn src_log(&self) -> String {
        self.log(&format!("files-src-{}-{}", self.tag, self.src_starts))
    }

    /// What site `i`'s node (its last start) has logged.
    pub(super) fn site_log(&self, i: usize) -> String {
        let site = &self.sites[i];
        self.log(&format!("files-{}-{}-{}", site.name, self.tag, site.starts))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Every node's name and process id (the source first), for CPU figures.
    pub(super) fn pids(&self) -> Vec<(String, u32)> {
        let src = self.src.as_ref().map(|p| ("src".to_string(), p.pid()));
        let sites = self.sites.iter().filter_map(|s| {
            let node = s.node.as_ref()?;
            Some((s.name.clone(), node.pid()))
        });
        src.into_iter().chain(sites).collect()
    }

    /// The source's command line, for the results.
    pub(super) fn src_command(&self) -> Option<String> {
        self.src.as_ref().map(|s| s.command.clone())
    }

    /// Stops every node that is up.
    pub(super) fn stop(&mut self) -> Result<()> {
        if let Some(src) = self.src.take() {
            src.stop()?;
        }
        for site in &mut self.sites {
            if let Some(node) = site.node.take() {
                node.stop()?;
            }
        }
        Ok(())
    }
}
