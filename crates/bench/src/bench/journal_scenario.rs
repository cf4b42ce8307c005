//! `tickwire bench journal`: posts acknowledged per second and Ack latency with each
//! sync policy of the node's journal (and without a journal), the journal's system
//! calls per post, and the node's sustained update rate with the journal on and off,
//! shaped like the reference's persistence comparison (`always` as base 100).
//!
//! One rig per policy: a node with `[posts]` and `[journal]` (its journal in the
//! output directory, on the disk the user runs the lab on), `tickwire publish
//! --accept-posts` as the publisher that answers, and `tickwire perf-post` keeping a
//! window of posts in flight.

use super::*;
use crate::perf_post::PostResult;

/// The node's CPU per update in the passing step at `rate` (0 if none).
fn node_cpu_at(steps: &[Step], rate: u64) -> f64 {
    steps
        .iter()
        .find(|s| s.pass && s.target_rate == rate)
        .map_or(0.0, |s| s.node_cpu_ns_per_update)
}

impl Lab {
    pub(super) fn journal(&mut self) -> Result<()> {
        let secs = if self.quick { 3.0 } else { self.seconds() };
        let mut steps = Vec::new();
        for sync in ["always", "batch", "never", "off"] {
            self.progress.line(&format!("journal sync={sync}"), 0.25);
            steps.push(self.journal_step(sync, secs)?);
        }
        self.results.journal = steps;
        if !self.args.journal.journal_posts_only {
            self.results.journal_updates = Some(self.journal_update_cost()?);
        }
        Ok(())
    }

    /// The highest sustained update rate (cache on) with and without every update of the
    /// service journaled.
    fn journal_update_cost(&mut self) -> Result<JournalUpdateCost> {
        let items = self.args.watchlist.items.min(10_000);
        let (secs, bisect) = (self.seconds(), self.bisections());
        let first = (self.args.limit.max_rate / 4).clamp(1_000, 250_000);
        let plain = RigSpec::new("journal updates off cache=on", "on", items);
        let (without, steps_without) =
            self.search_one_rig("journal", &plain, first, secs, bisect)?;
        let dir = self.logs.join("journal-updates");
        let _ = std::fs::remove_dir_all(&dir);
        let spec = RigSpec {
            node_config: Some(format!(
                "[journal]\ndir = {:?}\nservices = [\"*\"]\nsync = \"batch\"\nupdates = true\n",
                dir.display().to_string()
            )),
            ..RigSpec::new("journal updates on cache=on", "on", items)
        };
        let start = (without / 2).max(1_000);
        let (with, steps_with) = self.search_one_rig("journal", &spec, start, secs, bisect)?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(JournalUpdateCost {
            items,
            without_journal_updates_per_s: without,
            with_journal_updates_per_s: with,
            cost_percent: if without > 0 {
                100.0 * (1.0 - with as f64 / without as f64)
            } else {
                0.0
            },
            without_limited_by: limit_reason(&steps_without, without),
            with_limited_by: limit_reason(&steps_with, with),
            without_node_cpu_ns_per_update: node_cpu_at(&steps_without, without),
            with_node_cpu_ns_per_update: node_cpu_at(&steps_with, with),
        })
    }

    fn journal_step(&mut self, sync: &str, secs: f64) -> Result<JournalStep> {
        let dir = self.logs.join(format!("journal-{sync}"));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cfg = "[posts]\nservices = [\"FEED\"]\n".to_string();
        if sync != "off" {
            cfg.push_str(&format!(
                "[journal]\ndir = {:?}\nservices = [\"FEED\"]\nsync = \"{sync}\"\n",
                dir.display().to_string()
            ));
        }
        let cfg_path = self.logs.join(format!("node-journal-{sync}.toml"));
        std::fs::write(&cfg_path, cfg)?;
        let name = format!("node-journal-{sync}");
        let (node, addr) = lab::start_node(
            &self.programs.node,
            &name,
            &["--config".into(), cfg_path.display().to_string()],
            &self.logs,
        )?;
        let items = 1000usize;
        let feed = lab::Proc::spawn(
            &self.programs.node,
            &format!("publish-journal-{sync}"),
            &[
                "publish".into(),
                "--node".into(),
                addr.clone(),
                "--items".into(),
                items.to_string(),
                "--rate".into(),
                "0".into(),
                "--accept-posts".into(),
            ],
            &self.logs,
        )?;
        lab::wait_for_service(&addr, "FEED", Duration::from_secs(20))?;
        let window = 256usize;
        let before = crate::sysinfo::process_cpu_seconds(node.pid());
        let mut poster = lab::Proc::spawn(
            &self.programs.lab,
            &format!("perf-post-{sync}"),
            &[
                "perf-post".into(),
                "--node".into(),
                addr.clone(),
                "--items".into(),
                items.to_string(),
                "--window".into(),
                window.to_string(),
                "--duration".into(),
                secs.to_string(),
            ],
            &self.logs,
        )?;
        let line = poster.expect("result", Duration::from_secs_f64(secs + 60.0))?;
        let after = crate::sysinfo::process_cpu_seconds(node.pid());
        let r: PostResult =
            serde_json::from_value(line["result"].clone()).context("perf-post's result line")?;
        let bytes = dir_bytes(&dir);
        let answered = (r.acked + r.nakked).max(1);
        let step = JournalStep {
            sync: sync.into(),
            posts_per_s: r.posts_per_s,
            ack_p50_ns: r.ack_latency.p50_ns,
            ack_p99_ns: r.ack_latency.p99_ns,
            ack_max_ns: r.ack_latency.max_ns,
            syscalls_per_post: r.journal_syscalls as f64 / answered as f64,
            journal_mb_per_s: bytes as f64 / r.seconds / 1e6,
            posts: r.posts,
            nakked: r.nakked,
            first_nak: r.first_nak.clone(),
            window,
            seconds: r.seconds,
            node_cpu_us_per_post: match (before, after) {
                (Some(b), Some(a)) => Some((a - b) * 1e6 / answered as f64),
                _ => None,
            },
        };
        self.results.commands.extend([
            node.command.clone(),
            feed.command.clone(),
            poster.command.clone(),
        ]);
        poster.stop()?;
        feed.stop()?;
        node.stop()?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(step)
    }
}

/// Bytes in the segments of a journal directory.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
