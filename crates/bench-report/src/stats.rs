//! Figures computed from a run's results: medians, and a step's node CPU per update.

use crate::schema::{ProcessUsage, Step};

/// The node's usage in a step (its process is named `node-...`).
pub fn node_usage(step: &Step) -> Option<&ProcessUsage> {
    step.processes.iter().find(|p| p.name.starts_with("node-"))
}

/// The node's CPU seconds in a step (picked by `cpu`) per update delivered, in µs.
pub fn node_us_per_update(step: &Step, cpu: impl Fn(&ProcessUsage) -> f64) -> Option<f64> {
    let node = node_usage(step)?;
    (step.delivered > 0).then(|| cpu(node) * 1e6 / step.delivered as f64)
}

/// The node's CPU microseconds per update delivered in a step ([`ProcessUsage::cpu_s`]).
pub fn node_cpu_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, ProcessUsage::cpu_s)
}

/// The node's user-mode CPU microseconds per update delivered (from clock ticks).
pub fn node_user_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, |p| p.cpu_user_s)
}

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A process's CPU time per update the publisher sent in `step`, in ns (0: none sent).
pub fn cpu_ns_per_update(step: &Step, p: &ProcessUsage) -> f64 {
    if step.offered == 0 {
        return 0.0;
    }
    p.cpu_s() * 1e9 / step.offered as f64
}

/// The node processes' wait for a CPU per run in a step (their total wait over their
/// total runs), where the kernel exposes it.
pub fn node_run_delay_us_per_run(step: &Step) -> Option<f64> {
    run_delay_us_per_run(
        step.processes
            .iter()
            .filter(|u| u.name.starts_with("node"))
            .map(|u| (u.run_delay_s, u.run_delay_us_per_run)),
    )
}

/// Total wait over total runs, from each process's (wait in s, wait per run in µs);
/// `None` if any process lacks the figures or nothing ran.
pub fn run_delay_us_per_run(
    processes: impl Iterator<Item = (Option<f64>, Option<f64>)>,
) -> Option<f64> {
    let (mut delay_us, mut runs) = (0.0, 0.0);
    for (total_s, per_run_us) in processes {
        let (total_us, per_run_us) = (total_s? * 1e6, per_run_us?);
        if per_run_us > 0.0 {
            delay_us += total_us;
            runs += total_us / per_run_us;
        }
    }
    (runs > 0.0).then(|| delay_us / runs)
}

#[cfg(test)]
mod tests {
    use super::run_delay_us_per_run;

    #[test]
    fn the_nodes_wait_per_run_is_weighted_by_their_runs() {
        // 1 ms over 100 runs (10 µs each) and 3 ms over 100 runs (30 µs each): 20 µs.
        let two = [(Some(0.001), Some(10.0)), (Some(0.003), Some(30.0))];
        assert_eq!(run_delay_us_per_run(two.into_iter()), Some(20.0));
        // A process without schedstat: no figure rather than a partial one.
        let partial = [(Some(0.001), Some(10.0)), (None, None)];
        assert_eq!(run_delay_us_per_run(partial.into_iter()), None);
        // Nothing ran, or no process: no figure.
        assert_eq!(run_delay_us_per_run([(Some(0.0), None)].into_iter()), None);
        assert_eq!(run_delay_us_per_run(std::iter::empty()), None);
    }
}
