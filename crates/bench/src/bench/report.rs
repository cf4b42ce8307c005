//! The run's `report.md` (tables per scenario) and its SVG plots.

use super::*;

/// A multi-node latency ladder beside the single node's of the same run (report.md):
/// `path` says how the updates went ("across the backbone"), `what` heads its columns.
pub(super) fn latency_beside_single(
    md: &mut String,
    path: &str,
    what: &str,
    single: &[LatencyStep],
    ladder: &[LatencyStep],
) -> Result<()> {
    if ladder.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "### End-to-end latency, single node and {path} (cache off; µs)\n"
    )?;
    writeln!(md, "| rate/s | single p50 | {what} p50 | added p50 | single p99 | {what} p99 | {what} mean | {what} max | sustained |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for l in ladder {
        let s = single.iter().find(|x| x.rate == l.rate);
        let opt = |f: &dyn Fn(&LatencyStep) -> f64| s.map_or("-".to_string(), |x| us(f(x)));
        let added = s.map_or("-".to_string(), |x| us(l.p50_ns as f64 - x.p50_ns as f64));
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_rate(l.rate as f64),
            opt(&|x| x.p50_ns as f64),
            us(l.p50_ns as f64),
            added,
            opt(&|x| x.p99_ns as f64),
            us(l.p99_ns as f64),
            us(l.mean_ns),
            us(l.max_ns as f64),
            if l.sustained { "yes" } else { "no" }
        )?;
    }
    writeln!(md)?;
    ladder_cpu_table(md, ladder)
}

/// CPU % of the first process whose name starts with `prefix`, at the highest rate the
/// throughput search sustained ("-" if none).
pub(super) fn cpu_at_max(t: &Throughput, prefix: &str) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .and_then(|s| s.processes.iter().find(|p| p.name.starts_with(prefix)))
        .map_or("-".to_string(), |p| format!("{:.0}%", p.cpu_percent))
}

/// The CPU of the first process of `step` whose name starts with `prefix`: its share
/// of one CPU and per update sent ("12.5% / 850 ns"); "-" if there is none.
pub(super) fn process_cpu(step: &Step, prefix: &str) -> String {
    step.processes
        .iter()
        .find(|p| p.name.starts_with(prefix))
        .map_or("-".to_string(), |p| {
            format!("{:.1}% / {}", p.cpu_percent, ns(cpu_ns_per_update(step, p)))
        })
}

/// Every process's CPU at each rung of a latency ladder (report.md): what the rung's
/// latency cost, waiting included.
pub(super) fn ladder_cpu_table(md: &mut String, ladder: &[LatencyStep]) -> Result<()> {
    if ladder.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "CPU of every process at each rung (share of one CPU; CPU time per update sent):\n"
    )?;
    writeln!(
        md,
        "| rate/s | process | CPU | per update |\n|---|---|---|---|"
    )?;
    for l in ladder {
        for p in &l.step.processes {
            writeln!(
                md,
                "| {} | {} | {:.1}% | {} |",
                fmt_rate(l.rate as f64),
                p.name,
                p.cpu_percent,
                ns(cpu_ns_per_update(&l.step, p))
            )?;
        }
    }
    writeln!(md)?;
    Ok(())
}

/// The node's CPU per update at the highest sustained rate.
pub(super) fn node_ns_at_max(t: &Throughput) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .map_or("-".to_string(), |s| ns(s.node_cpu_ns_per_update))
}

/// A per-update CPU time: "-" where there was none to measure.
pub(super) fn ns(v: f64) -> String {
    if v > 0.0 {
        format!("{v:.0} ns")
    } else {
        "-".to_string()
    }
}

pub(super) fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

pub(super) fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The report's sentence on how idle CPUs wait and what waking one costs, if known.
pub(super) fn idle_sentence(m: &Machine) -> Option<String> {
    let idle = &m.cpu_idle;
    let mut parts = Vec::new();
    if let Some(d) = &idle.driver {
        parts.push(format!(
            "idle CPUs: cpuidle driver {d}, governor {}",
            idle.governor.as_deref().unwrap_or("unknown")
        ));
    }
    if let Some(ns) = idle.guest_halt_poll_ns {
        parts.push(if ns == 0 {
            "guest halt polling off (an idle virtual CPU halts at once)".to_string()
        } else {
            format!("guest halt polling up to {} µs", ns / 1000)
        });
    }
    if let Some(w) = &m.wake_round_trip {
        parts.push(format!(
            "a thread on an idle CPU woken and answering (loopback TCP round trip, CPUs {} and {}, {} µs idle before each): p50 {} µs, p90 {} µs",
            w.cpus[0],
            w.cpus[1],
            w.idle_us,
            us(w.p50_ns as f64),
            us(w.p90_ns as f64)
        ));
    }
    (!parts.is_empty()).then(|| {
        let mut s = parts.join("; ");
        s[..1].make_ascii_uppercase();
        s + "."
    })
}

pub(super) fn write_outputs(dir: &Path, r: &Results) -> Result<()> {
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let mut md = String::new();
    match &r.machine {
        Some(m) => writeln!(
            md,
            "Machine: {} ({} CPUs, {:.1} GiB), kernel {}, {}, socket buffers at most {} / {} bytes (net.core.rmem_max / wmem_max). Tickwire {} (commit {}). Run took {:.0} s.\n",
            m.cpu_model,
            m.cpus,
            m.memory_bytes as f64 / (1u64 << 30) as f64,
            m.kernel,
            m.os.as_deref().unwrap_or("unknown OS"),
            m.socket_receive_buffer_max_bytes
                .map_or("unknown".to_string(), |b| b.to_string()),
            m.socket_send_buffer_max_bytes
                .map_or("unknown".to_string(), |b| b.to_string()),
            r.tickwire_version,
            r.git_commit,
            r.duration_s
        )?,
        None => writeln!(md, "Tickwire {} (commit {}).\n", r.tickwire_version, r.git_commit)?,
    }
    if let Some(line) = r.machine.as_ref().and_then(idle_sentence) {
        writeln!(md, "{line}\n")?;
    }
    writeln!(md, "Node, publisher and subscriber run on this one machine as separate processes. A rate is sustained when the subscribers received at least 99.5% of what was offered (times the fan-out) over the step, with zero sequence gaps, and the publisher kept its schedule.\n")?;
    if !r.throughput.is_empty() {
        writeln!(
            md,
            "## Throughput (no fan-out, {} items)\n",
            r.throughput[0].items
        )?;
        writeln!(md, "| configuration | max sustainable updates/s | node CPU per update | node CPU at that rate | publisher CPU | subscriber CPU | next step failed |")?;
        writeln!(md, "|---|---|---|---|---|---|---|")?;
        for t in &r.throughput {
            let cpu = |prefix: &str| cpu_at_max(t, prefix);
            writeln!(
                md,
                "| node, cache {} | {} | {} | {} | {} | {} | {} |",
                t.cache,
                fmt_rate(t.max_sustainable_updates_per_s as f64),
                node_ns_at_max(t),
                cpu("node"),
                cpu("perf-pub"),
                cpu("perf-sub"),
                t.limited_by.as_deref().unwrap_or("-")
            )?;
        }
        writeln!(md, "\nReference (RMDS 6 src_dist, 2009, one core, tools on other hosts): cache disabled 1,480,000; cache enabled 650,000.\n")?;
        for t in &r.throughput {
            steps_table(&mut md, &format!("Steps, cache {}", t.cache), &t.steps)?;
        }
    }
    if let Some(f) = &r.fanout {
        writeln!(
            md,
            "## Fan-out ({} connections, producer 50/50, fan-out {:.1}, {} items, cache {})\n",
            f.connections, f.fanout, f.items, f.cache
        )?;
        writeln!(
            md,
            "| input updates/s | output updates/s | next step failed |\n|---|---|---|"
        )?;
        writeln!(
            md,
            "| {} | {} | {} |\n",
            fmt_rate(f.input_updates_per_s as f64),
            fmt_rate(f.output_updates_per_s as f64),
            f.limited_by.as_deref().unwrap_or("-")
        )?;
        writeln!(
            md,
            "Reference (RMDS 6 p2ps, 100 mounts 50/50, one instance): 70,000 in / 3,535,000 out.\n"
        )?;
        steps_table(&mut md, "Steps", &f.steps)?;
    }
    if !r.latency.is_empty() {
        writeln!(md, "## End-to-end latency (cache off; µs)\n")?;
        writeln!(md, "| rate/s | mean | std dev | max | min | p50 | p90 | p99 | p99.9 | p99.99 | count | node CPU per update | node waited to run (µs per run) | sustained |")?;
        writeln!(
            md,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        )?;
        for l in &r.latency {
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_rate(l.rate as f64),
                us(l.mean_ns),
                us(l.stddev_ns),
                us(l.max_ns as f64),
                us(l.min_ns as f64),
                us(l.p50_ns as f64),
                us(l.p90_ns as f64),
                us(l.p99_ns as f64),
                us(l.p999_ns as f64),
                us(l.p9999_ns as f64),
                l.count,
                ns(l.node_cpu_ns_per_update),
                node_run_delay_us_per_run(&l.step).map_or("n/a".into(), |w| format!("{w:.1}")),
                if l.sustained { "yes" } else { "no" }
            )?;
        }
        if let Some(w) = r.machine.as_ref().and_then(|m| m.wake_round_trip.as_ref()) {
            writeln!(
                md,
                "\nEvery sample crosses at least two wake-ups (the publisher's write wakes the node, the node's write wakes the subscriber), each of a CPU that may have gone idle since the last burst. On this machine two wake-ups of idle CPUs take {} µs (the wake-up probe's p50, above): that is the scale of this table's floor, and figures from two machines compare only with it in view.",
                us(w.p50_ns as f64)
            )?;
        }
        writeln!(md, "\nReference (RMDS 6, ms): 1,000/s mean 0.139; 100,000/s mean 0.396 max 1.104; 1,000,000/s mean 1.140.\n")?;
        ladder_cpu_table(&mut md, &r.latency)?;
        writeln!(md, "![latency](latency.svg)\n")?;
    }
    if !r.instances.is_empty() {
        writeln!(md, "## Instances\n")?;
        writeln!(md, "| instances | pinned | per instance updates/s | aggregate updates/s |\n|---|---|---|---|")?;
        for i in &r.instances {
            writeln!(
                md,
                "| {} | {} | {} | {} |",
                i.instances,
                if i.pinned { "yes" } else { "no" },
                fmt_rate(i.per_instance_updates_per_s as f64),
                fmt_rate(i.aggregate_updates_per_s as f64)
            )?;
        }
        writeln!(md)?;
    }
    if let Some(st) = &r.stall {
        stall_report(&mut md, st)?;
    }
    if let Some(b) = &r.backbone {
        backbone_scenario::report(&mut md, b)?;
    }
    if let Some(w) = &r.wait {
        wait_scenario::report(&mut md, w)?;
    }
    if !r.journal.is_empty() {
        journal_scenario::report(&mut md, &r.journal)?;
    }
    if let Some(c) = &r.journal_updates {
        journal_scenario::report_updates(&mut md, c)?;
    }
    if let Some(t) = &r.tree {
        tree_scenario::report(&mut md, t)?;
    }
    if let Some(p) = r.peers.as_ref().filter(|p| !p.nats.is_unset()) {
        peers_scenario::report(&mut md, p)?;
    }
    if !r.files.is_empty() {
        let (uftp, rsync) = r
            .peers
            .as_ref()
            .map_or((&[][..], &[][..]), |p| (&p.uftp[..], &p.rsync[..]));
        files_scenario::report(&mut md, &r.files, uftp, rsync)?;
        files_market_data::report(&mut md, &r.files_market_data)?;
        files_faults::report(&mut md, &r.files_faults)?;
    }
    if let Some(r) = &r.rssl {
        rssl_scenario::report(&mut md, r)?;
    }
    if let Some(w) = &r.websocket {
        writeln!(
            md,
            "## WebSocket subscriber\n\nOne tr_json2 connection watching {} items (one batch request), cache on: highest sustained rate **{} updates/s**.\n",
            w.items,
            fmt_rate(w.max_sustainable_updates_per_s as f64)
        )?;
        steps_table(&mut md, "WebSocket search", &w.steps)?;
        steps_table(&mut md, "WebSocket latency at fixed rates", &w.latency)?;
        if let Some(f) = &w.fanout {
            writeln!(
                md,
                "### WebSocket fan-out: shared encoding\n\n{} connections each watching the same {} items, {} updates/s in ({} out), cache on. Node CPU per update delivered (median of {} runs each): **{:.2} µs shared, {:.2} µs per client**, {:.2}x; of which user mode (the encoding; the rest is writing to the sockets) {:.2} and {:.2} µs.\n",
                f.connections,
                f.items,
                fmt_rate(f.input_updates_per_s as f64),
                fmt_rate((f.input_updates_per_s * f.connections as u64) as f64),
                f.shared.len(),
                f.shared_node_cpu_us_per_update,
                f.unshared_node_cpu_us_per_update,
                f.unshared_over_shared,
                f.shared_node_user_us_per_update,
                f.unshared_node_user_us_per_update
            )?;
            writeln!(
                md,
                "Update encodings (nodes' whole lives, from their /metrics): shared {} made, {} reused; per client {} made, {} reused.\n",
                f.shared_encoded, f.shared_reused, f.unshared_encoded, f.unshared_reused
            )?;
            writeln!(md, "| encoding | delivered/s | node CPU % | node µs/update | of which user | p50 µs | p99 µs | result |")?;
            writeln!(md, "|---|---|---|---|---|---|---|---|")?;
            for (name, steps) in [("shared", &f.shared), ("per client", &f.unshared)] {
                for st in steps.iter() {
                    let node_cpu = node_usage(st).map_or(f64::NAN, |p| p.cpu_percent);
                    writeln!(
                        md,
                        "| {name} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} |",
                        fmt_rate(st.delivered_per_s),
                        node_cpu,
                        node_cpu_us_per_update(st).unwrap_or(f64::NAN),
                        node_user_us_per_update(st).unwrap_or(f64::NAN),
                        us(st.latency.p50_ns as f64),
                        us(st.latency.p99_ns as f64),
                        st.reason
                    )?;
                }
            }
            writeln!(md)?;
        }
    }
    if let Some(m) = &r.memory {
        writeln!(md, "## Memory per connection and per stream\n")?;
        writeln!(
            md,
            "Node VmRSS after every image arrived and {:.0} s of updates at {}/s per item set (cache on).\n",
            m.settle_s, m.update_rate
        )?;
        writeln!(
            md,
            "| rig | connections | items each | streams | node RSS MiB | peak RSS MiB |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|")?;
        for (name, g) in [
            ("small", &m.small),
            ("full", &m.full),
            ("narrow", &m.narrow),
        ] {
            writeln!(
                md,
                "| {name} | {} | {} | {} | {:.1} | {:.1} |",
                g.connections,
                g.items,
                g.streams,
                g.node_rss_bytes as f64 / 1048576.0,
                g.node_peak_rss_bytes as f64 / 1048576.0
            )?;
        }
        writeln!(
            md,
            "\nPer connection with its {} streams: {:.0} bytes; per stream: {:.0} bytes; per connection alone: {:.0} bytes.\n",
            m.items, m.per_connection_with_streams_bytes, m.per_stream_bytes, m.per_connection_bytes
        )?;
    }
    if !r.processes.is_empty() {
        writeln!(md, "## Processes per step\n")?;
        writeln!(md, "\"waited to run\": time the process was runnable but not running (woken and queued for a CPU, mostly behind another process), per run on a CPU.\n")?;
        writeln!(md, "| scenario | step | rate | process | CPU % | user s | sys s | peak RSS MiB | vol. cs | invol. cs | migrations | waited to run (µs per run) | syscalls |")?;
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
        for p in &r.processes {
            let u = &p.usage;
            writeln!(
                md,
                "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} |",
                p.scenario,
                p.step,
                fmt_rate(p.rate as f64),
                u.name,
                u.cpu_percent,
                u.cpu_user_s,
                u.cpu_sys_s,
                u.peak_rss_bytes as f64 / 1048576.0,
                u.voluntary_ctx_switches,
                u.involuntary_ctx_switches,
                u.migrations.map_or("n/a".into(), |m| m.to_string()),
                u.run_delay_us_per_run
                    .map_or("n/a".into(), |w| format!("{w:.1}")),
                u.syscalls.map_or("n/a".into(), |m| m.to_string()),
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "## Commands\n\n```")?;
    for c in &r.commands {
        writeln!(md, "{c}")?;
    }
    writeln!(md, "```")?;
    std::fs::write(dir.join("report.md"), md)?;
    plots(dir, r)?;
    Ok(())
}

pub(super) fn stall_report(md: &mut String, st: &Stall) -> Result<()> {
    writeln!(
        md,
        "## Stall: one subscriber stopped, then the node ({} subscribers, {} items each, cache {})\n",
        st.subscribers, st.items, st.cache
    )?;
    writeln!(
        md,
        "Publisher at {} updates/s ({}{}). Subscriber 0 stopped (SIGSTOP) for {:.0} ms, later the node for {:.0} ms. \"Healthy\" figures are the highest among the {} other subscribers.\n",
        fmt_rate(st.rate as f64),
        st.rate_source,
        st.max_sustainable_updates_per_s
            .map_or(String::new(), |m| format!(": max {}/s", fmt_rate(m as f64))),
        st.subscriber_stopped_ms,
        st.node_stopped_ms,
        st.healthy_subscribers
    )?;
    writeln!(md, "| phase | seconds | publisher sent/s | publisher lag max ms | healthy updates | gaps | conflated | healthy p99 µs | healthy max µs | node max RSS MiB | node CPU % |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for p in &st.phases {
        writeln!(
            md,
            "| {} | {:.2} | {} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {:.0} |",
            p.name,
            p.seconds,
            fmt_rate(p.publisher_per_s),
            p.publisher_max_lag_ms,
            p.healthy_updates,
            p.healthy_gaps,
            p.healthy_conflated,
            us(p.healthy_p99_ns as f64),
            us(p.healthy_max_ns as f64),
            p.node_max_rss_bytes as f64 / 1048576.0,
            p.node_cpu_percent
        )?;
    }
    let ms = |v: Option<f64>| v.map_or("not recovered".to_string(), |v| format!("{v:.0}"));
    let s = &st.stopped_subscriber;
    writeln!(md, "\n| figure | value |\n|---|---|")?;
    writeln!(
        md,
        "| healthy p99 µs: baseline / subscriber stopped / after / node paused / after | {} / {} / {} / {} / {} |",
        us(st.baseline_p99_ns as f64),
        us(st.stall_p99_ns as f64),
        us(st.after_subscriber_p99_ns as f64),
        us(st.node_pause_p99_ns as f64),
        us(st.after_node_p99_ns as f64)
    )?;
    writeln!(
        md,
        "| recovery after the node's SIGCONT (healthy), ms | {} |",
        ms(st.recovery_ms)
    )?;
    writeln!(
        md,
        "| recovery of the stopped subscriber after its SIGCONT, ms | {} |",
        ms(st.subscriber_recovery_ms)
    )?;
    writeln!(
        md,
        "| healthy subscribers: gaps / lost / reconnects / conflated | {} / {} / {} / {} |",
        st.healthy_gaps, st.healthy_lost, st.healthy_reconnects, st.healthy_conflated
    )?;
    writeln!(
        md,
        "| stopped subscriber: updates / gaps / conflated / reconnects (dropped by the node) | {} / {} / {} / {} ({}) |",
        s.updates,
        s.gaps,
        s.conflated,
        s.reconnects,
        if st.stopped_subscriber_disconnected { "yes" } else { "no" }
    )?;
    writeln!(
        md,
        "| conflated updates, all subscribers | {} |",
        st.conflated_updates
    )?;
    writeln!(
        md,
        "| node peak RSS, MiB | {:.1} |",
        st.node_peak_rss_bytes as f64 / 1048576.0
    )?;
    writeln!(
        md,
        "| publisher sent/s: baseline / subscriber stopped | {} / {} |",
        fmt_rate(st.publisher_baseline_per_s),
        fmt_rate(st.publisher_stall_per_s)
    )?;
    writeln!(
        md,
        "\n| target | required | measured | result |\n|---|---|---|---|"
    )?;
    for t in &st.targets {
        writeln!(
            md,
            "| {} | {} | {} | {} |",
            t.name,
            t.target,
            t.value,
            if t.pass { "met" } else { "NOT met" }
        )?;
    }
    writeln!(md, "\nRecovery: {}.\n", st.recovery_rule)?;
    writeln!(md, "![stall](stall.svg)\n")?;
    Ok(())
}

pub(super) fn steps_table(md: &mut String, title: &str, steps: &[Step]) -> Result<()> {
    writeln!(md, "{title}:\n")?;
    writeln!(md, "| asked/s | offered/s | delivered/s | delivered % | node CPU per update | gaps | pub lag max ms | latency mean µs | p99 µs | CPU busy % (per CPU) | result |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for s in steps {
        let cpus = s.system.as_ref().map_or("-".to_string(), |sys| {
            sys.cpus
                .iter()
                .map(|c| format!("{:.0}", c.busy_percent))
                .collect::<Vec<_>>()
                .join("/")
        });
        writeln!(
            md,
            "| {} | {} | {} | {:.2} | {} | {} | {:.1} | {} | {} | {} | {} |",
            fmt_rate(s.target_rate as f64),
            fmt_rate(s.offered_per_s),
            fmt_rate(s.delivered_per_s),
            s.delivered_ratio * 100.0,
            ns(s.node_cpu_ns_per_update),
            s.gaps,
            s.publisher_max_lag_ms,
            us(s.latency.mean_ns),
            us(s.latency.p99_ns as f64),
            cpus,
            if s.pass {
                "pass".to_string()
            } else {
                s.reason.clone()
            }
        )?;
    }
    writeln!(md)?;
    Ok(())
}

pub(super) fn plots(dir: &Path, r: &Results) -> Result<()> {
    if !r.latency.is_empty() {
        let pts = |f: &dyn Fn(&LatencyStep) -> f64| -> Vec<(f64, f64)> {
            r.latency
                .iter()
                .map(|l| (l.rate as f64, f(l) / 1e3))
                .collect()
        };
        LineChart::new(
            "End-to-end latency by update rate (cache off)",
            "updates/s",
            "latency (µs)",
        )
        .with_log(true, true)
        .with_series("mean", pts(&|l| l.mean_ns))
        .with_series("p50", pts(&|l| l.p50_ns as f64))
        .with_series("p90", pts(&|l| l.p90_ns as f64))
        .with_series("p99", pts(&|l| l.p99_ns as f64))
        .with_series("p99.9", pts(&|l| l.p999_ns as f64))
        .save(dir.join("latency.svg"))?;
    }
    if !r.throughput.is_empty() {
        let mut chart = LineChart::new(
            "Throughput steps: delivered vs asked",
            "asked updates/s",
            "delivered updates/s",
        )
        .with_log(true, true);
        for t in &r.throughput {
            let mut pts: Vec<(f64, f64)> = t
                .steps
                .iter()
                .map(|s| (s.target_rate as f64, s.delivered_per_s))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart = chart.with_series(format!("cache {}", t.cache), pts);
        }
        chart.save(dir.join("throughput.svg"))?;
    }
    if let Some(f) = &r.fanout {
        let mut pts: Vec<(f64, f64)> = f
            .steps
            .iter()
            .map(|s| (s.target_rate as f64, s.delivered_per_s))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        LineChart::new(
            "Fan-out: output vs input",
            "input updates/s",
            "output updates/s",
        )
        .with_log(true, true)
        .with_series(
            format!("{} connections, fan-out {:.1}", f.connections, f.fanout),
            pts,
        )
        .save(dir.join("fanout.svg"))?;
    }
    if let Some(st) = &r.stall {
        stall_plot(st).save(dir.join("stall.svg"))?;
    }
    if !r.instances.is_empty() {
        BarChart::new("Aggregate sustainable updates/s", "updates/s")
            .with_categories(
                r.instances
                    .iter()
                    .map(|i| {
                        format!(
                            "{} {}",
                            i.instances,
                            if i.pinned { "pinned" } else { "unpinned" }
                        )
                    })
                    .collect(),
            )
            .with_series(
                "aggregate",
                r.instances
                    .iter()
                    .map(|i| i.aggregate_updates_per_s as f64)
                    .collect(),
            )
            .save(dir.join("instances.svg"))?;
    }
    Ok(())
}

/// The healthy (and the stopped) subscribers' p99 per interval, with brackets over the
/// windows in which the subscriber and the node were stopped.
pub(super) fn stall_plot(st: &Stall) -> LineChart {
    let pts = |f: &dyn Fn(&StallPoint) -> Option<u64>| -> Vec<(f64, f64)> {
        st.series
            .iter()
            .filter_map(|p| f(p).map(|v| (p.t_ms / 1e3, v as f64 / 1e3)))
            .collect()
    };
    let healthy = pts(&|p| (p.healthy_count > 0).then_some(p.healthy_p99_ns));
    let stopped = pts(&|p| (p.stopped_count > 0).then_some(p.stopped_p99_ns));
    let ys = healthy.iter().chain(&stopped).map(|p| p.1);
    let lo = ys.clone().fold(f64::INFINITY, f64::min);
    let hi = ys.fold(0.0, f64::max);
    let event = |name: &str| {
        st.events
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.t_ms / 1e3)
    };
    let bracket = |from: Option<f64>, to: Option<f64>| match (from, to) {
        (Some(a), Some(b)) if lo.is_finite() => vec![(a, lo), (a, hi), (b, hi), (b, lo)],
        _ => Vec::new(),
    };
    LineChart::new(
        format!(
            "Stall: p99 per {} ms interval ({} updates/s)",
            st.interval_ms,
            fmt_rate(st.rate as f64)
        ),
        "seconds from the baseline's start",
        "latency p99 (µs)",
    )
    .with_log(false, true)
    // The healthy subscribers last, drawn over the stopped one: they are the point.
    .with_series("stopped subscriber", stopped)
    .with_series("healthy (highest)", healthy)
    .with_series(
        "subscriber stopped",
        bracket(event("subscriber SIGSTOP"), event("subscriber SIGCONT")),
    )
    .with_series(
        "node stopped",
        bracket(event("node SIGSTOP"), event("node SIGCONT")),
    )
}

/// How a two-node rig's part of report.md names its nodes and path.
pub(super) struct TwoNodes<'a> {
    /// The section's heading line.
    pub heading: &'a str,
    /// The throughput table's path column ("backbone").
    pub path: &'a str,
    /// Each node's CPU column and process-name prefix ("source CPU", "node-source").
    pub first: (&'a str, &'a str),
    pub second: (&'a str, &'a str),
    /// The reference report's figures, one line.
    pub reference: &'a str,
    /// Where fan-out is measured ("the edge"), and what the sentence adds (", cache on").
    pub fanout_at: &'a str,
    pub fanout_note: &'a str,
    /// How the updates went, for the latency table ("across the backbone"), and the
    /// name of its columns ("backbone").
    pub through: &'a str,
    pub short: &'a str,
}

/// The figures every two-node rig reports (the backbone's, the node tree's): its
/// throughput beside the single node's of the same run, fan-out at the second node, and
/// the latency ladder beside the single node's.
pub(super) fn two_node_figures(
    md: &mut String,
    names: &TwoNodes<'_>,
    single_node_updates_per_s: u64,
    throughput: &[Throughput],
    fanout: Option<&Fanout>,
    single_node_latency: &[LatencyStep],
    latency: &[LatencyStep],
) -> Result<()> {
    writeln!(md, "{}\n", names.heading)?;
    writeln!(
        md,
        "Single node, cache off, same run: {} updates/s.\n",
        fmt_rate(single_node_updates_per_s as f64)
    )?;
    writeln!(md, "| path | max sustainable updates/s | of single node | {} | {} | publisher CPU | subscriber CPU | next step failed |", names.first.0, names.second.0)?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for t in throughput {
        let cpu = |prefix: &str| cpu_at_max(t, prefix);
        let share = if single_node_updates_per_s > 0 {
            format!(
                "{:.0}%",
                100.0 * t.max_sustainable_updates_per_s as f64 / single_node_updates_per_s as f64
            )
        } else {
            "-".into()
        };
        writeln!(
            md,
            "| {}, cache {} | {} | {} | {} | {} | {} | {} | {} |",
            names.path,
            t.cache,
            fmt_rate(t.max_sustainable_updates_per_s as f64),
            share,
            cpu(names.first.1),
            cpu(names.second.1),
            cpu("perf-pub"),
            cpu("perf-sub"),
            t.limited_by.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(md, "\n{}\n", names.reference)?;
    if let Some(f) = fanout {
        writeln!(
            md,
            "Fan-out at {} ({} connections, producer 50/50, fan-out {:.1}, {} items{}): {} in, {} out per second; next step failed: {}.\n",
            names.fanout_at,
            f.connections,
            f.fanout,
            f.items,
            names.fanout_note,
            fmt_rate(f.input_updates_per_s as f64),
            fmt_rate(f.output_updates_per_s as f64),
            f.limited_by.as_deref().unwrap_or("-")
        )?;
    }
    latency_beside_single(md, names.through, names.short, single_node_latency, latency)
}
