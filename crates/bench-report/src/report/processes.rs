//! report.md's table of every process in every step.

use super::format::fmt_rate;
use crate::schema::StepProcess;
use anyhow::Result;
use std::fmt::Write as _;

/// One row per process and step: CPU, memory, context switches, waits, system calls.
pub(crate) fn report(md: &mut String, processes: &[StepProcess]) -> Result<()> {
    writeln!(md, "## Processes per step\n")?;
    writeln!(md, "\"waited to run\": time the process was runnable but not running (woken and queued for a CPU, mostly behind another process), per run on a CPU.\n")?;
    writeln!(md, "| scenario | step | rate | process | CPU % | user s | sys s | peak RSS MiB | vol. cs | invol. cs | migrations | waited to run (µs per run) | syscalls |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for p in processes {
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
    Ok(())
}
