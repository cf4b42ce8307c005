//! The peers scenario's section of report.md.

use super::format::{fmt_rate, ns, us};
use crate::schema::{PeerResult, PeersResult};
use anyhow::Result;

/// report.md's section: the two systems side by side.
pub(crate) fn report(md: &mut String, p: &PeersResult) -> Result<()> {
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
                        us(l.latency.p50_ns as f64),
                        us(l.latency.p99_ns as f64),
                        us(l.latency.max_ns as f64),
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
