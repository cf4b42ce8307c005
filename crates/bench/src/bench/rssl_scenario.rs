//! `tickwire bench rssl`: LSEG's own perf tools through Tickwire over RSSL, beside the
//! same tools connected to each other directly.
//!
//! - direct: ProvPerf (an interactive provider) -> ConsPerf, no infrastructure: the
//!   tools' own floor on this machine;
//! - relayed: ProvPerf -> a byte relay (`crate::byte_relay`) -> ConsPerf: what one more
//!   hop costs, the floor of anything between them;
//! - through a node: NIProvPerf (a non-interactive provider) -> `tickwire node` ->
//!   ConsPerf.
//!
//! At each rate of the ladder (--rates, default 1,000, 10,000 and 100,000 updates/s),
//! then doubling while ConsPerf keeps up directly, a fresh provider (and node) and a
//! ConsPerf run of --step-seconds of steady state over --rssl-items items. ConsPerf's
//! own figures are recorded (its mean latency, from the providers' latency-stamped
//! updates; its update rate; refreshes), with the node's CPU per update delivered. The
//! native path's ladder (perf-pub -> node -> perf-sub, cache on, same items, and items
//! of the perf tools' shape: `perf-pub --shape wide`, 83-field images and 23-field
//! updates) runs in the same session for the node's CPU per update beside the RSSL
//! path's: what the translation costs, the work on the items being the same.

use super::*;
use std::process::{Command, Stdio};
use tickwire_bench_report::report::us_or_dash;

/// The rungs when `--rates` is not given.
const DEFAULT_RUNGS: [u64; 3] = [1_000, 10_000, 100_000];
/// Doublings tried past the last rung while ConsPerf keeps up directly.
const MAX_DOUBLINGS: usize = 4;
/// Time after ConsPerf starts by which its images are in (a JVM, a login, and at
/// most a few thousand images, on loopback).
const WARM_UP: Duration = Duration::from_secs(3);
/// The shortest steady state with latency figures (ProvPerf stamps none before).
const MIN_STEADY_SECONDS: f64 = 5.0;
/// The service both providers publish (the tools' default).
const SERVICE: &str = "DIRECT_FEED";

/// LSEG's tools, ready to run.
struct Tools {
    classpath: String,
    /// Their working folder: dictionaries, MsgData.xml, the item list.
    work: PathBuf,
    version: String,
}

impl Tools {
    fn find(args: &BenchArgs, logs: &Path, items: usize) -> Result<Tools> {
        let dir = &args.rssl.rtsdk;
        if !dir.join("jars/eta-perftools.jar").is_file() {
            bail!(
                "LSEG's Real-Time SDK tools are not in {} (--rtsdk DIR): the folder needs jars/ \
                 (eta-perftools.jar and the other ETA jars, built from Real-Time SDK 2.1 or later), \
                 etc/ (RDMFieldDictionary, enumtype.def, MsgData.xml), fetch-deps.sh and \
                 classpath.sh, laid out as ../shared/interop/rtsdk is",
                dir.display()
            );
        }
        let java = Command::new("java").arg("-version").output();
        if !java.is_ok_and(|o| o.status.success()) {
            bail!("no Java runtime (java): the tools need Java 11 or later (Debian: apt-get install openjdk-17-jre-headless)");
        }
        let lib = std::path::absolute(&args.rssl.rtsdk_lib)?;
        if !lib.join(".complete").is_file() {
            eprintln!(
                "bench rssl: fetching the tools' third-party jars into {}",
                lib.display()
            );
            let ok = Command::new("bash")
                .arg(dir.join("fetch-deps.sh"))
                .arg(&lib)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                bail!(
                    "cannot fetch the tools' third-party jars: run `bash {}/fetch-deps.sh {}` (it needs Maven and Maven Central)",
                    dir.display(),
                    lib.display()
                );
            }
        }
        let out = Command::new("bash")
            .arg(dir.join("classpath.sh"))
            .arg(&lib)
            .output()
            .context("cannot run classpath.sh")?;
        if !out.status.success() {
            bail!("{}/classpath.sh failed", dir.display());
        }
        let classpath = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let work = logs.join("rssl-work");
        std::fs::create_dir_all(&work)?;
        for f in ["RDMFieldDictionary", "enumtype.def", "MsgData.xml"] {
            std::fs::copy(dir.join("etc").join(f), work.join(f))
                .with_context(|| format!("{}/etc/{f}", dir.display()))?;
        }
        let list: String = (0..items)
            .map(|i| format!("<item domain=\"MarketPrice\" name=\"RDT{i}\" />\n"))
            .collect();
        std::fs::write(
            work.join("items.xml"),
            format!("<itemList>\n{list}</itemList>\n"),
        )?;
        // "Real-Time SDK 2.1.2.L1" somewhere in the folder's README.
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap_or_default();
        let words: Vec<&str> = readme.split_whitespace().collect();
        let version = words
            .windows(2)
            .find(|w| w[0] == "SDK" && w[1].starts_with(|c: char| c.is_ascii_digit()))
            .map(|w| w[1].trim_end_matches([',', '.', ')']));
        let version = match version {
            Some(v) => format!("Real-Time SDK {v} ({})", dir.display()),
            None => dir.display().to_string(),
        };
        Ok(Tools {
            classpath,
            work,
            version,
        })
    }

    fn command(&self, main: &str, args: &[String]) -> Command {
        let mut c = Command::new("java");
        crate::lab::ends_with_lab(&mut c);
        c.arg("-cp")
            .arg(&self.classpath)
            .arg(main)
            .args(args)
            .current_dir(&self.work)
            .stdin(Stdio::null());
        c
    }
}

/// A provider left running for a step, stopped when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What ConsPerf printed of a run.
#[derive(Debug, Default)]
struct ConsPerf {
    update_rate: f64,
    latency_avg_us: Option<f64>,
    latency_max_us: Option<f64>,
    latency_median_of_seconds_us: Option<f64>,
    refreshes: u64,
    updates: u64,
    steady_seconds: f64,
    /// The node's CPU per update it sent, over the window (without a node: none).
    node_cpu_ns_per_update: Option<f64>,
}

impl ConsPerf {
    /// The steady state's figures and the test's totals.
    fn parse(out: &str) -> Result<ConsPerf> {
        // A key's value within its section (which ends at the first blank line: a
        // steady state without latency must not borrow the overall figure).
        let num = |section: &str, key: &str| -> Option<f64> {
            let start = out.find(section)?;
            out[start..]
                .lines()
                .skip(1)
                .take_while(|l| !l.trim().is_empty())
                .find_map(|l| l.trim().strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
        };
        let c = ConsPerf {
            update_rate: num("Steady State Statistics:", "Avg update rate:").unwrap_or(0.0),
            latency_avg_us: num("Steady State Statistics:", "Latency avg (usec):"),
            latency_max_us: num("Steady State Statistics:", "Latency max (usec):"),
            latency_median_of_seconds_us: median_of_seconds(out),
            refreshes: num("Test Statistics:", "Refreshes received:").unwrap_or(0.0) as u64,
            updates: num("Test Statistics:", "Updates received:").unwrap_or(0.0) as u64,
            steady_seconds: num("Steady State Statistics:", "Sampling duration (sec):")
                .unwrap_or(0.0),
            node_cpu_ns_per_update: None,
        };
        if !out.contains("Test Statistics:") {
            bail!("ConsPerf printed no summary");
        }
        Ok(c)
    }
}

/// The median of the one-second latency means ConsPerf prints (`NNN: Images: N, ...`
/// then `Latency(usec): Avg: X ...`) for the seconds after its images have come (the
/// first second with no image after one with some): its steady state.
fn median_of_seconds(out: &str) -> Option<f64> {
    let (mut imaged, mut steady, mut means) = (false, false, Vec::new());
    for line in out.lines() {
        let line = line.trim();
        if let Some(images) = line
            .split_once(": Images:")
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(_, rest)| rest.split(',').next())
            .and_then(|n| n.trim().parse::<u64>().ok())
        {
            steady = imaged && images == 0;
            imaged |= images > 0;
        } else if let Some(avg) = line.strip_prefix("Latency(usec): Avg:") {
            if steady {
                means.extend(
                    avg.split_whitespace()
                        .next()
                        .and_then(|v| v.parse::<f64>().ok()),
                );
            }
        }
    }
    (!means.is_empty()).then(|| super::median(means))
}

/// The tools' ticks per second: `--rssl-ticks`, or 1,000; never more than the rate
/// (they refuse fewer updates than ticks).
fn tick_rate(rate: u64, ticks: Option<u64>) -> u64 {
    ticks.unwrap_or(1000).min(rate).max(1)
}

/// A free loopback port (taken, then let go for the tool to listen on).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until something listens on `port`.
fn wait_listening(port: u16, what: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{what} did not listen on port {port} within {timeout:?}")
}

/// Waits until the node's log says the service is up.
fn wait_service(log: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let needle = format!("service is up service={SERVICE}");
    while Instant::now() < deadline {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(&needle)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!(
        "NIProvPerf's service never came up on the node; see {}",
        log.display()
    )
}

impl Lab {
    pub(super) fn rssl(&mut self) -> Result<()> {
        let items = self.args.rssl.rssl_items.max(1);
        let tools = Tools::find(&self.args, &self.logs, items)?;
        let mut rungs = self.rates_or(&DEFAULT_RUNGS);
        rungs.dedup();
        // ProvPerf sends no latency-stamped update in a steady state under 5 s.
        let secs = self.seconds().max(MIN_STEADY_SECONDS);
        let mut r = RsslResult {
            tools: tools.version.clone(),
            items,
            ..RsslResult::default()
        };
        // The ladder, then doubling while ConsPerf keeps up directly.
        let mut i = 0;
        let mut doublings = 0;
        while i < rungs.len() {
            let rate = rungs[i];
            let direct = self.rssl_direct(&tools, rate, items, secs, false)?;
            let relayed = self.rssl_direct(&tools, rate, items, secs, true)?;
            let interactive = self.rssl_through_node(&tools, rate, items, secs, true)?;
            let non_interactive = self.rssl_through_node(&tools, rate, items, secs, false)?;
            eprintln!(
                "bench rssl: {rate}/s: direct {:.0}/s {} µs; relayed {:.0}/s {} µs; through the node: ProvPerf {:.0}/s {} µs, NIProvPerf {:.0}/s {} µs",
                direct.update_rate,
                us_or_dash(direct.latency_avg_us),
                relayed.update_rate,
                us_or_dash(relayed.latency_avg_us),
                interactive.update_rate,
                us_or_dash(interactive.latency_avg_us),
                non_interactive.update_rate,
                us_or_dash(non_interactive.latency_avg_us)
            );
            let direct_ok = direct.sustained;
            r.direct.push(direct);
            r.relayed.push(relayed);
            r.through_node.push(interactive);
            r.through_node.push(non_interactive);
            if i + 1 == rungs.len()
                && direct_ok
                && doublings < MAX_DOUBLINGS
                && self.args.ladder.rates.is_none()
            {
                rungs.push(rate * 2);
                doublings += 1;
            }
            i += 1;
        }
        let max = |steps: &[RsslStep], provider: &str| {
            steps
                .iter()
                .filter(|s| s.sustained && s.provider == provider)
                .map(|s| s.rate)
                .max()
                .unwrap_or(0)
        };
        r.max_sustained_updates_per_s = MaxSustained {
            direct: max(&r.direct, PROVPERF),
            through_node: max(&r.through_node, PROVPERF),
            through_node_niprovperf: max(&r.through_node, NIPROVPERF),
        };
        // The native path at the same rates, for the node's CPU per update.
        self.args.limit.max_rate = rungs.last().copied().unwrap_or(0);
        let mut spec = RigSpec::new("rssl native cache=on", "on", items);
        spec.shape = "wide";
        r.native = self.latency_ladder(&spec, "rssl", &rungs)?;
        self.results.rssl = Some(r);
        Ok(())
    }

    /// A provider's (ProvPerf's, NIProvPerf's) flags for `rate` in ticks of
    /// `--rssl-ticks`, running 2 minutes longer than the `secs` measured.
    fn provider_rate_args(&self, rate: u64, secs: f64) -> [String; 6] {
        [
            "-updateRate".into(),
            rate.to_string(),
            "-tickRate".into(),
            tick_rate(rate, self.args.rssl.rssl_ticks).to_string(),
            "-runTime".into(),
            ((secs as u64) + 120).to_string(),
        ]
    }

    /// ProvPerf publishing `items` at `rate` on a free port: its port.
    fn start_provperf(&mut self, tools: &Tools, rate: u64, secs: f64) -> Result<(Running, u16)> {
        let port = free_port()?;
        let mut args = vec!["-p".into(), port.to_string()];
        args.extend(self.provider_rate_args(rate, secs));
        let p = self.start_tool(
            tools,
            "com.refinitiv.eta.perftools.provperf.ProvPerf",
            &args,
            "provperf",
        )?;
        wait_listening(port, "ProvPerf", Duration::from_secs(30))?;
        Ok((p, port))
    }

    /// ProvPerf -> ConsPerf, or with `relayed` ProvPerf -> a byte relay -> ConsPerf.
    fn rssl_direct(
        &mut self,
        tools: &Tools,
        rate: u64,
        items: usize,
        secs: f64,
        relayed: bool,
    ) -> Result<RsslStep> {
        let (_provider, port) = self.start_provperf(tools, rate, secs)?;
        let relay = relayed
            .then(|| crate::byte_relay::ByteRelay::start(([127, 0, 0, 1], port).into()))
            .transpose()
            .context("cannot start the byte relay")?;
        let port = relay.as_ref().map_or(port, |r| r.addr().port());
        let c = self.consperf(tools, port, items, secs, None)?;
        Ok(step(rate, PROVPERF, items, &c, None))
    }

    /// ProvPerf (interactive: the node connects to it) or NIProvPerf (it connects to
    /// the node) -> node -> ConsPerf.
    fn rssl_through_node(
        &mut self,
        tools: &Tools,
        rate: u64,
        items: usize,
        secs: f64,
        interactive: bool,
    ) -> Result<RsslStep> {
        let provperf = if interactive {
            Some(self.start_provperf(tools, rate, secs)?)
        } else {
            None
        };
        let cfg = self.logs.join("rssl-node.toml");
        let mut text = format!(
            "[rssl]\nfield_dictionary = {:?}\nenum_dictionary = {:?}\n",
            tools.work.join("RDMFieldDictionary"),
            tools.work.join("enumtype.def")
        );
        if let Some((_, port)) = &provperf {
            text.push_str(&format!(
                "[[rssl.providers]]\naddress = \"127.0.0.1:{port}\"\n"
            ));
        }
        // `--node-wait` as for the ladders: how the node's event loop waits for the
        // provider's next burst is most of the latency it adds at low rates.
        if self.args.ladder.node_wait != "block" {
            text.push_str(&format!(
                "[node]\nwait = {:?}\n",
                self.args.ladder.node_wait
            ));
        }
        std::fs::write(&cfg, text)?;
        let provider = if interactive { PROVPERF } else { NIPROVPERF };
        let name = format!("node-rssl-{}-{rate}", provider.to_lowercase());
        let (node, addr) = lab::start_node(
            &self.programs.node,
            &name,
            &[
                "--config".into(),
                cfg.display().to_string(),
                "--ws".into(),
                "127.0.0.1:0".into(),
            ],
            &self.logs,
        )?;
        let metrics = node.ws_addr.clone().context("the node's HTTP port")?;
        self.results.commands.push(node.command.clone());
        let port = addr.rsplit(':').next().unwrap_or("0").to_string();
        let _niprovperf = if interactive {
            None
        } else {
            let mut args: Vec<String> = vec![
                "-h".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.clone(),
                "-itemFile".into(),
                "items.xml".into(),
                "-itemCount".into(),
                items.to_string(),
            ];
            args.extend(self.provider_rate_args(rate, secs));
            Some(self.start_tool(
                tools,
                "com.refinitiv.eta.perftools.niprovperf.NIProvPerf",
                &args,
                "niprovperf",
            )?)
        };
        wait_service(
            &self.logs.join(format!("{name}.log")),
            Duration::from_secs(30),
        )?;
        let c = self.consperf(
            tools,
            port.parse().unwrap_or(0),
            items,
            secs,
            Some((node.pid(), metrics)),
        )?;
        let per_update = c.node_cpu_ns_per_update;
        node.stop()?;
        Ok(step(rate, provider, items, &c, per_update))
    }

    fn start_tool(
        &mut self,
        tools: &Tools,
        main: &str,
        args: &[String],
        log: &str,
    ) -> Result<Running> {
        let out = std::fs::File::create(self.logs.join(format!("{log}.log")))?;
        self.results
            .commands
            .push(format!("java -cp $CP {main} {}", args.join(" ")));
        let child = tools
            .command(main, args)
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {main}"))?;
        Ok(Running(child))
    }

    /// One ConsPerf run: its items, --step-seconds of steady state. With a node (its pid
    /// and HTTP address), the node's CPU time per update it sent, over a window inside
    /// the steady state: from [`WARM_UP`] after ConsPerf starts (its JVM, login and
    /// images take less) to a second before the steady state can end.
    fn consperf(
        &mut self,
        tools: &Tools,
        port: u16,
        items: usize,
        secs: f64,
        node: Option<(u32, String)>,
    ) -> Result<ConsPerf> {
        let args: Vec<String> = [
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-serviceName",
            SERVICE,
            "-itemFile",
            "items.xml",
            "-itemCount",
            &items.to_string(),
            "-steadyStateTime",
            &(secs.ceil() as u64).to_string(),
            // ConsPerf starts its steady state when its statistics (every 5 s by
            // default) first find every image, and ends its run at the steady-state
            // time after its start if they have not: with steady states of 5 s or less
            // it would often measure none. Every second, it measures each.
            "-writeStatsInterval",
            "1",
            "-msgFile",
            "MsgData.xml",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let main = "com.refinitiv.eta.perftools.consperf.ConsPerf";
        self.results
            .commands
            .push(format!("java -cp $CP {main} {}", args.join(" ")));
        let mut child = tools
            .command(main, &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start ConsPerf")?;
        // Its progress lines (on either stream) as they come.
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pipes: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("piped")),
            Box::new(child.stderr.take().expect("piped")),
        ];
        for pipe in pipes {
            let tx = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        // Image retrieval, then the steady state: bounded by the run's own length.
        let deadline = Instant::now() + Duration::from_secs_f64(secs + 120.0);
        let sample = || -> Option<(f64, f64)> {
            let (pid, addr) = node.as_ref()?;
            let cpu = crate::sysinfo::process_cpu_ns(*pid)? as f64 / 1e9;
            let out = crate::scraper::metric(addr, "tickwire_updates_out_total").ok()??;
            Some((cpu, out))
        };
        let started = Instant::now();
        let window = [WARM_UP, WARM_UP.max(Duration::from_secs_f64(secs - 1.0))];
        let mut samples: Vec<(f64, f64)> = Vec::new();
        let mut out = String::new();
        loop {
            if samples.len() < 2 && started.elapsed() >= window[samples.len()] {
                samples.extend(sample());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    out.push_str(&line);
                    out.push('\n');
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if Instant::now() >= deadline {
                        let _ = child.kill();
                        let _ = child.wait();
                        bail!("ConsPerf did not finish within {:.0} s", secs + 120.0);
                    }
                }
            }
        }
        let _ = child.wait();
        let n = self.results.commands.len();
        std::fs::write(self.logs.join(format!("consperf-{n}.log")), &out)?;
        let mut c = ConsPerf::parse(&out)?;
        c.node_cpu_ns_per_update = match samples[..] {
            [(cpu0, out0), (cpu1, out1)] if out1 > out0 => {
                Some((cpu1 - cpu0) * 1e9 / (out1 - out0))
            }
            _ => None,
        };
        Ok(c)
    }
}

fn step(rate: u64, provider: &str, items: usize, c: &ConsPerf, node_cpu: Option<f64>) -> RsslStep {
    let expected = rate as f64 * c.steady_seconds;
    let received = c.update_rate * c.steady_seconds;
    RsslStep {
        rate,
        provider: provider.into(),
        update_rate: c.update_rate,
        latency_avg_us: c.latency_avg_us,
        latency_max_us: c.latency_max_us,
        latency_median_of_seconds_us: c.latency_median_of_seconds_us,
        refreshes: c.refreshes,
        updates: c.updates,
        lost: (expected - received).max(0.0).round() as u64,
        sustained: c.refreshes >= items as u64 && c.update_rate >= 0.99 * rate as f64,
        node_cpu_ns_per_update: node_cpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consperfs_summary_is_read() {
        let out = "Steady State Statistics:\n  Sampling duration (sec): 5.661\n  Latency avg (usec): 87.9\n  Latency max (usec): 355.0\n  Avg update rate: 10006\n\nOverall Statistics: \n  Latency avg (usec): 1.0\n\nTest Statistics:\n  Requests sent: 10\n  Refreshes received: 10\n  Updates received: 57100\n  Avg update rate: 10007\n";
        let c = ConsPerf::parse(out).unwrap();
        assert_eq!(c.update_rate, 10006.0);
        assert_eq!(c.latency_avg_us, Some(87.9));
        // A steady state without latency says so; the overall figure is not taken.
        let none = out.replace(
            "  Latency avg (usec): 87.9\n  Latency max (usec): 355.0\n",
            "  No latency information was received during steady-state time.\n",
        );
        assert_eq!(ConsPerf::parse(&none).unwrap().latency_avg_us, None);
        assert_eq!((c.refreshes, c.updates), (10, 57100));
        let s = step(10_000, "ProvPerf", 10, &c, None);
        assert!(s.sustained);
        assert_eq!(s.lost, 0);
        let short = step(20_000, "ProvPerf", 10, &c, None);
        assert!(!short.sustained);
        assert!(short.lost > 50_000);
        assert!(ConsPerf::parse("no summary").is_err());
    }

    #[test]
    fn the_seconds_after_the_images_give_the_median_latency() {
        let out = "001: Images:      0, Posts:      0, UpdRate:        0, CPU:   0.00%\n\
                   002: Images:    600, Posts:      0, UpdRate:    8200, CPU:   0.00%\n  \
                   Latency(usec): Avg:23161.6 StdDev:27601.0 Max:61500.0 Min: 293.0, Msgs: 7\n\
                   003: Images:    400, Posts:      0, UpdRate:    9600, CPU:  15.15%\n  \
                   Latency(usec): Avg: 900.0 StdDev: 147.2 Max: 582.0 Min: 128.0, Msgs: 12\n\
                   004: Images:      0, Posts:      0, UpdRate:   10000, CPU:   9.80%\n  \
                   Latency(usec): Avg: 47.0 StdDev: 231.3 Max: 805.0 Min: 167.0, Msgs: 10\n\
                   005: Images:      0, Posts:      0, UpdRate:    9800, CPU:   7.07%\n  \
                   Latency(usec): Avg: 5200.5 StdDev: 185.0 Max: 698.0 Min: 160.0, Msgs: 9\n\
                   006: Images:      0, Posts:      0, UpdRate:   10000, CPU:   8.04%\n  \
                   Latency(usec): Avg: 41.0 StdDev: 144.2 Max: 636.0 Min: 186.0, Msgs: 9\n";
        assert_eq!(median_of_seconds(out), Some(47.0));
        assert_eq!(median_of_seconds("001: Images: 10, Posts: 0\n"), None);
    }
}
