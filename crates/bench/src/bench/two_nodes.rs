//! The procedure the backbone and tree scenarios share, through two nodes with one
//! node's figures of the same run beside them: one node's highest rate; through the two,
//! the highest rate with the cache off and on, the fan-out to many connections, and the
//! latency ladders of one node and of two.

use super::*;

/// What [`Lab::two_nodes`] measured.
pub(super) struct TwoNodes {
    pub(super) single_node_updates_per_s: u64,
    pub(super) throughput: Vec<Throughput>,
    pub(super) fanout: Option<Fanout>,
    pub(super) single_node_latency: Vec<LatencyStep>,
    pub(super) latency: Vec<LatencyStep>,
    /// Where the two-node searches started: half the single node's rate.
    pub(super) start: u64,
}

/// A scenario's two-node rig: (lab, label, cache, items).
pub(super) type TwoNodeRig<'a> = &'a dyn Fn(&Lab, &str, &'static str, usize) -> Result<RigSpec>;

impl Lab {
    /// Runs the shared procedure for `scenario` (its name starts every rig's label);
    /// the fan-out row runs with the cache `fanout_cache`.
    pub(super) fn two_nodes(
        &mut self,
        scenario: &str,
        items: usize,
        fanout_cache: &'static str,
        rig: TwoNodeRig<'_>,
    ) -> Result<TwoNodes> {
        let (secs, bisect) = (self.seconds(), self.bisections());
        let single = RigSpec::new(format!("{scenario} single-node cache=off"), "off", items);
        let first = (self.args.limit.max_rate / 4).clamp(1_000, 250_000);
        let (single_max, _) = self.search_one_rig(scenario, &single, first, secs, bisect)?;
        let start = two_node_start(single_max, self.args.limit.max_rate);

        let mut throughput = Vec::new();
        for cache in ["off", "on"] {
            let spec = rig(self, &format!("{scenario} cache={cache}"), cache, items)?;
            let (max, steps) = self.search_one_rig(scenario, &spec, start, secs, bisect)?;
            throughput.push(Throughput {
                cache: cache.into(),
                items,
                max_sustainable_updates_per_s: max,
                limited_by: limit_reason(&steps, max),
                steps,
            });
        }
        // `bench quick` keeps it short: no fan-out row.
        let fanout = if self.quick {
            None
        } else {
            Some(self.two_node_fanout(scenario, fanout_cache, rig)?)
        };
        let ladder = self.ladder();
        let single = RigSpec::new(
            format!("{scenario} single-node latency cache=off"),
            "off",
            items,
        );
        let single_node_latency = self.latency_ladder(&single, scenario, &ladder)?;
        let spec = rig(self, &format!("{scenario} latency cache=off"), "off", items)?;
        let latency = self.latency_ladder(&spec, scenario, &ladder)?;
        Ok(TwoNodes {
            single_node_updates_per_s: single_max,
            throughput,
            fanout,
            single_node_latency,
            latency,
            start,
        })
    }

    /// The far node with many subscriber connections, producer 50/50 ("100 mounts").
    fn two_node_fanout(
        &mut self,
        scenario: &str,
        cache: &'static str,
        rig: TwoNodeRig<'_>,
    ) -> Result<Fanout> {
        let (secs, bisect) = (self.seconds(), self.bisections());
        let conns = self.args.fanout.connections.max(1);
        let f_items = self.args.fanout.fanout_items;
        let fanout = crate::perf_sub::Commonality::Producer5050.fanout(conns, f_items);
        let label = format!("{scenario} fanout {conns} connections");
        let spec = RigSpec {
            connections: conns,
            commonality: "producer-50-50",
            fanout,
            ..rig(self, &label, cache, f_items)?
        };
        let (max, steps) = self.search_one_rig(scenario, &spec, 10_000, secs, bisect)?;
        let best = steps
            .iter()
            .filter(|s| s.pass && s.target_rate == max)
            .map(|s| s.delivered_per_s)
            .fold(0.0, f64::max);
        Ok(Fanout {
            limited_by: limit_reason(&steps, max),
            connections: conns,
            items: f_items,
            commonality: "producer-50-50".into(),
            fanout,
            cache: cache.into(),
            input_updates_per_s: max,
            output_updates_per_s: best.round() as u64,
            steps,
        })
    }
}

/// Where the two-node searches start: half the single node's highest rate, at least
/// 1,000 updates/s, never above `max_rate` (`--max-rate` may be below 1,000).
fn two_node_start(single_max: u64, max_rate: u64) -> u64 {
    (single_max / 2).max(1_000).min(max_rate)
}

#[cfg(test)]
mod tests {
    use super::two_node_start;

    #[test]
    fn the_two_node_search_starts_within_max_rate_however_low() {
        assert_eq!(two_node_start(800_000, 16_000_000), 400_000);
        assert_eq!(two_node_start(500, 16_000_000), 1_000);
        assert_eq!(two_node_start(800_000, 300_000), 300_000);
        // Below 1,000 (a clamp with its bounds the wrong way round panicked).
        assert_eq!(two_node_start(800, 500), 500);
    }
}
