//! `tickwire bench peers`: the same workload against Tickwire and against NATS in one
//! run (100,000 items, the 74-byte reference update with its intended-send timestamp,
//! one publisher and one subscriber process, the same rates and pass rules), so a user
//! choosing between them reads the two side by side.
//!
//! Tickwire runs with the cache off (NATS core keeps no last value). The NATS side is
//! `nats-server` from the system's packages (`scripts/setup.sh` installs it), fed by
//! `perf-pub --system nats` and read by `perf-nats-sub`. Without a `nats-server`, the
//! NATS entry says why and the rest of the run goes on.

use super::*;

/// Where the NATS server is: `$TICKWIRE_NATS_SERVER`, else `nats-server` on the PATH or
/// in /usr/sbin and /usr/bin (Debian puts it in /usr/sbin, off a user's PATH).
fn find_nats_server() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("TICKWIRE_NATS_SERVER") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "TICKWIRE_NATS_SERVER={} is not a file",
                p.display()
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join("nats-server"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "nats-server not found (PATH, /usr/sbin, /usr/bin): install Debian's `nats-server` \
             package (scripts/setup.sh does) or set TICKWIRE_NATS_SERVER"
                .into()
        })
}

fn version_of(program: &Path) -> String {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Lab {
    pub(super) fn peers(&mut self) -> Result<()> {
        let items = if self.quick {
            self.args.items.min(10_000)
        } else {
            self.args.items
        };
        let tickwire = RigSpec::new("peers tickwire cache=off", "off", items);
        let mut r = PeersResult {
            tickwire: self.peer(&tickwire, format!("tickwire {}", env!("CARGO_PKG_VERSION")))?,
            nats: PeerResult::default(),
            ..PeersResult::default()
        };
        r.nats = match find_nats_server() {
            Ok(server) => {
                let spec = RigSpec {
                    nats_server: Some(server.clone()),
                    ..RigSpec::new("peers nats", "off", items)
                };
                self.peer(&spec, version_of(&server))?
            }
            Err(why) => {
                eprintln!("bench peers: NATS not measured: {why}");
                PeerResult {
                    unavailable: Some(why),
                    items,
                    ..PeerResult::default()
                }
            }
        };
        self.results.peers = Some(r);
        Ok(())
    }

    /// One system: the max search, then the latency ladder on a fresh rig.
    fn peer(&mut self, spec: &RigSpec, version: String) -> Result<PeerResult> {
        let (secs, bisect) = (self.seconds(), self.bisections());
        let first = (self.args.max_rate / 4).clamp(1_000, 250_000);
        let (max, steps) = self.search_one_rig("peers", spec, first, secs, bisect)?;
        let ladder = self.ladder();
        let latency = self.latency_ladder(spec, "peers", &ladder)?;
        Ok(PeerResult {
            available: true,
            unavailable: None,
            version,
            items: spec.items,
            max_sustainable_updates_per_s: max,
            limited_by: limit_reason(&steps, max),
            steps,
            latency,
        })
    }
}

/// report.md's section: the two systems side by side.
pub(super) fn report(md: &mut String, p: &PeersResult) -> Result<()> {
    use std::fmt::Write as _;
    writeln!(
        md,
        "\n## Peers: the same workload on Tickwire and NATS\n\n\
         One publisher and one subscriber process, {} items, the 74-byte reference update \
         with its intended-send timestamp, the same rates and pass rules. Tickwire with the \
         cache off; NATS core (no last value). \"Server CPU\" is the node's or \
         nats-server's CPU time per update sent.\n",
        p.tickwire.items
    )?;
    let systems = [("tickwire", &p.tickwire), ("nats", &p.nats)];
    for (name, s) in systems {
        if let Some(why) = &s.unavailable {
            writeln!(md, "- **{name}** was not measured: {why}")?;
        }
    }
    writeln!(md, "\n| | tickwire | nats |\n|---|---|---|")?;
    let cell = |s: &PeerResult, f: &dyn Fn(&PeerResult) -> String| {
        if s.available {
            f(s)
        } else {
            "-".into()
        }
    };
    let row = |md: &mut String, what: &str, f: &dyn Fn(&PeerResult) -> String| {
        writeln!(
            md,
            "| {what} | {} | {} |",
            cell(&p.tickwire, f),
            cell(&p.nats, f)
        )
    };
    row(md, "version", &|s| s.version.clone())?;
    row(md, "highest sustained rate (updates/s)", &|s| {
        fmt_rate(s.max_sustainable_updates_per_s as f64)
    })?;
    row(md, "server CPU per update at that rate", &|s| {
        s.steps
            .iter()
            .find(|x| x.pass && x.target_rate == s.max_sustainable_updates_per_s)
            .map_or("-".into(), |x| ns(x.node_cpu_ns_per_update))
    })?;
    row(md, "what stopped the search", &|s| {
        s.limited_by.clone().unwrap_or_else(|| "-".into())
    })?;
    let mut rates: Vec<u64> = systems
        .iter()
        .flat_map(|(_, s)| s.latency.iter().map(|l| l.rate))
        .collect();
    rates.sort_unstable();
    rates.dedup();
    writeln!(
        md,
        "\n| rate (updates/s) | tickwire p50 / p99 / max (µs) | tickwire server CPU per update | nats p50 / p99 / max (µs) | nats server CPU per update |\n|---|---|---|---|---|"
    )?;
    for rate in rates {
        let at = |s: &PeerResult| -> (String, String) {
            match s.latency.iter().find(|l| l.rate == rate) {
                Some(l) => (
                    format!(
                        "{} / {} / {}{}",
                        us(l.p50_ns as f64),
                        us(l.p99_ns as f64),
                        us(l.max_ns as f64),
                        if l.sustained { "" } else { " (not sustained)" }
                    ),
                    ns(l.node_cpu_ns_per_update),
                ),
                None => ("-".into(), "-".into()),
            }
        };
        let (t, tc) = at(&p.tickwire);
        let (n, nc) = at(&p.nats);
        writeln!(
            md,
            "| {} | {t} | {tc} | {n} | {nc} |",
            fmt_rate(rate as f64)
        )?;
    }
    Ok(())
}
