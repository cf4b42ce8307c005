//! `tickwire bench files`, faults: the large file from a source to two sites with real
//! processes, once as it should go and once under each fault the procedure names:
//! 1% of the sites' datagrams lost (Aeron's own loss generator in the sites' media
//! drivers), a site killed with SIGKILL in the middle of the file and started again,
//! the source killed the same way and started again, and one site's disk full (its
//! inbox on a tmpfs smaller than the file, in a mount namespace of its own). Each row
//! says how long the file took to be whole at the sites that could take it (compared
//! byte for byte with the source's), against the same transfer without the fault, and
//! what the nodes said (a resumed partial file, a queue put back, the full site's
//! reason).

use super::files_rig::{FilesRig, RigSpec, SiteLaunch};
use super::files_scenario::count;
use super::*;
use std::io::Read;

const SITES: usize = 2;

/// The faults, in the order they run.
const FAULTS: [&str; 5] = ["none", "loss_1pct", "kill_site", "kill_sender", "full_disk"];

impl Lab {
    /// The fault rows, with `large` as the file.
    pub(super) fn files_faults(&mut self, large: &Path, work: &Path) -> Result<Vec<FilesFault>> {
        let bytes = std::fs::metadata(large)?.len();
        // At least 3 s a transfer: time to kill a node in the middle of it.
        let rate_mb = self.args.files.files_rate_mb.min(bytes / 3_000_000).max(1);
        let mut rows: Vec<FilesFault> = Vec::new();
        for fault in FAULTS {
            self.progress.line(&format!("files: fault {fault}"), 0.02);
            let mut row = self.files_fault(fault, large, bytes, rate_mb, work)?;
            row.seconds_without = rows.first().map_or(row.seconds, |r| r.seconds);
            self.progress.line(
                &format!(
                    "files: fault {fault}: {:.1} s ({:.1} s without), whole at {}/{} sites; {}",
                    row.seconds,
                    row.seconds_without,
                    row.sites_whole,
                    row.sites_expected,
                    row.detail
                ),
                0.0,
            );
            rows.push(row);
        }
        Ok(rows)
    }

    fn files_fault(
        &mut self,
        fault: &str,
        large: &Path,
        bytes: u64,
        rate_mb: u64,
        work: &Path,
    ) -> Result<FilesFault> {
        let mut row = FilesFault {
            fault: fault.into(),
            sites: SITES,
            bytes,
            rate_mb_per_s: rate_mb,
            sites_expected: if fault == "full_disk" {
                SITES - 1
            } else {
                SITES
            },
            ..FilesFault::default()
        };
        let dir = work.join(format!("fault-{fault}"));
        let launch = match fault {
            "loss_1pct" => (1..=SITES)
                .map(|i| SiteLaunch {
                    env: vec![
                        (
                            "AERON_UDP_CHANNEL_INCOMING_INTERCEPTORS".into(),
                            "loss".into(),
                        ),
                        // Data frames (type 1) only; each site loses its own.
                        (
                            "AERON_UDP_CHANNEL_TRANSPORT_BINDINGS_LOSS_ARGS".into(),
                            format!("rate=0.01|seed={}|recv-msg-mask=0x2", 7 + i),
                        ),
                    ],
                    wrapper: vec![],
                })
                .collect(),
            "full_disk" => match small_disk_wrapper(bytes / 2) {
                Ok(wrapper) => vec![
                    SiteLaunch::default(),
                    SiteLaunch {
                        env: vec![(
                            "INBOX".into(),
                            dir.join("site2-inbox").display().to_string(),
                        )],
                        wrapper,
                    },
                ],
                Err(why) => {
                    row.unavailable = Some(why);
                    return Ok(row);
                }
            },
            _ => vec![],
        };
        let spec = RigSpec {
            tag: format!("fault-{fault}"),
            sites: SITES,
            fsync: "never".into(),
            rate_mb,
            both_ways: false,
        };
        let mut rig = FilesRig::start(self, &dir, &spec, &launch)?;
        rig.warm_up(work)?;
        let t0 = Instant::now();
        let (ok, _, out) = rig.send("fault", &[large.to_path_buf()])?;
        if !ok {
            bail!("tickwire files send ({fault}) failed: {out}");
        }
        let limit = Duration::from_secs(120 + 8 * bytes / (rate_mb * 1_000_000));
        let mut notes = Vec::new();
        match fault {
            "kill_site" | "kill_sender" => {
                wait_for_partial(&rig.sites[0].inbox, limit)?;
                if fault == "kill_site" {
                    rig.kill_site(0);
                    rig.start_site(0)?;
                    notes.push(said(&rig.site_log(0), "partial files resumed"));
                } else {
                    rig.kill_src();
                    rig.start_src()?;
                    notes.push(said(&rig.src_log(), "files queued from before"));
                }
            }
            _ => {}
        }
        let name = large.file_name().unwrap_or_default();
        let expected: Vec<usize> = (0..row.sites_expected).collect();
        let deadline = t0 + limit;
        loop {
            let done = expected
                .iter()
                .all(|&i| count(&rig.sites[i].files().join("fault")) == (1, bytes));
            let full_said = fault != "full_disk" || full_site_failed(&rig)?.is_some();
            if (done && full_said) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        row.seconds = t0.elapsed().as_secs_f64();
        for i in expected {
            if same_bytes(large, &rig.sites[i].files().join("fault").join(name))? {
                row.sites_whole += 1;
            }
        }
        if fault == "full_disk" {
            notes.push(match full_site_failed(&rig)? {
                Some(reason) => format!("site2 failed: {reason}"),
                None => "site2 never said it failed".into(),
            });
        }
        if Instant::now() > deadline {
            notes.push(format!("not done within {} s", limit.as_secs()));
        }
        self.results.commands.extend(rig.src_command());
        rig.stop()?;
        if fault == "loss_1pct" {
            // Their last words: the backbone's figures, NAKs among them.
            let naks: Vec<String> = (0..SITES)
                .map(|i| figure(&rig.site_log(i), "naks_sent=").unwrap_or_else(|| "?".into()))
                .collect();
            notes.push(format!("NAKs sent by the sites: {}", naks.join(", ")));
        }
        row.detail = notes.join("; ");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(row)
    }
}

/// A wrapper giving a node a mount namespace of its own whose inbox (`$INBOX`) is a
/// tmpfs of `bytes`; an error says why the machine cannot (not root, no `unshare`).
fn small_disk_wrapper(bytes: u64) -> std::result::Result<Vec<String>, String> {
    let probe = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "no mount namespace for the full site: unshare: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => {
            return Err(format!(
                "no mount namespace for the full site: unshare: {e}"
            ))
        }
    }
    let kib = (bytes / 1024).max(64);
    Ok(vec![
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        // The node follows the script: $0 is its program, $@ its arguments.
        format!(
            "mkdir -p \"$INBOX\" && mount -t tmpfs -o size={kib}k tickwire-full-disk \"$INBOX\" && exec \"$0\" \"$@\""
        ),
    ])
}

/// The reason `files status` gives for the full site's failure, once it does.
fn full_site_failed(rig: &FilesRig) -> Result<Option<String>> {
    Ok(rig.status()?.into_iter().find_map(|r| {
        (r["site"] == "site2" && r["state"] == "failed")
            .then(|| r["reason"].as_str().unwrap_or("").to_string())
    }))
}

/// Waits until a site holds part of a file (its saved chunk map is there).
fn wait_for_partial(inbox: &Path, limit: Duration) -> Result<()> {
    let partial = inbox.join(".tickwire-partial");
    let deadline = Instant::now() + limit;
    loop {
        let has_map = std::fs::read_dir(&partial).is_ok_and(|r| {
            r.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "map"))
        });
        if has_map {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{} held no partial file within {limit:?}", inbox.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The phrase of `log` that says `what` (its last line saying it, cut at commas and
/// semicolons), or that it never said it.
fn said(log: &str, what: &str) -> String {
    log.lines()
        .rev()
        .find(|l| l.contains(what))
        .and_then(|l| l.split([',', ';']).find(|part| part.contains(what)))
        .map_or_else(
            || format!("never said \"{what}\""),
            |p| p.trim().to_string(),
        )
}

/// The value of the last `key=VALUE` in `log`.
fn figure(log: &str, key: &str) -> Option<String> {
    log.split_whitespace()
        .rev()
        .find_map(|word| word.strip_prefix(key))
        .map(str::to_string)
}

/// Whether two files hold the same bytes.
fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return Ok(false);
    };
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ra, mut rb) = (
        std::io::BufReader::with_capacity(1 << 20, fa),
        std::io::BufReader::with_capacity(1 << 20, fb),
    );
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = ra.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}
