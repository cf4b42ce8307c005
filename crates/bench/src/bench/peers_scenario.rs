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
            self.args.watchlist.items.min(10_000)
        } else {
            self.args.watchlist.items
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
        let first = (self.args.limit.max_rate / 4).clamp(1_000, 250_000);
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
