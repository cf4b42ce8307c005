//! `tickwire bench tree`: the classic procedure through two nodes over an upstream
//! link (the report's "p2ps POP" rows): publisher -> top node -> TCP -> POP node (fed
//! by `--upstream`) -> subscriber, with the single-node figures of the same run beside
//! it.

use super::*;

impl Lab {
    fn tree_spec(label: &str, cache: &'static str, items: usize) -> RigSpec {
        RigSpec {
            upstream: true,
            ..RigSpec::new(label, cache, items)
        }
    }

    pub(super) fn tree(&mut self) -> Result<()> {
        let items = if self.quick {
            self.args.items.min(10_000)
        } else {
            self.args.items
        };
        let (secs, bisect) = (self.seconds(), self.bisections());
        let mut r = TreeResult::default();

        let single = RigSpec::new("tree single-node cache=off", "off", items);
        let first = (self.args.max_rate / 4).clamp(1_000, 250_000);
        let (max, _) = self.search_one_rig("tree", &single, first, secs, bisect)?;
        r.single_node_updates_per_s = max;
        // The POP's searches start at half the single node's rate.
        let start = (max / 2).clamp(1_000, self.args.max_rate);
        for cache in ["off", "on"] {
            let spec = Self::tree_spec(&format!("tree cache={cache}"), cache, items);
            let (max, steps) = self.search_one_rig("tree", &spec, start, secs, bisect)?;
            r.throughput.push(Throughput {
                cache: cache.into(),
                items,
                max_sustainable_updates_per_s: max,
                limited_by: limit_reason(&steps, max),
                steps,
            });
        }
        // `bench quick` keeps it short: no fan-out row.
        if !self.quick {
            r.fanout = Some(self.tree_fanout()?);
        }
        let ladder = self.ladder();
        let single = RigSpec::new("tree single-node latency cache=off", "off", items);
        r.single_node_latency = self.latency_ladder(&single, "tree", &ladder)?;
        let spec = Self::tree_spec("tree latency cache=off", "off", items);
        r.latency = self.latency_ladder(&spec, "tree", &ladder)?;
        self.results.tree = Some(r);
        Ok(())
    }

    /// The POP with many subscriber connections, producer 50/50 ("100 mounts").
    fn tree_fanout(&mut self) -> Result<Fanout> {
        let (secs, bisect) = (self.seconds(), self.bisections());
        let conns = self.args.connections.max(1);
        let f_items = self.args.fanout_items;
        let fanout = crate::perf_sub::Commonality::Producer5050.fanout(conns);
        let spec = RigSpec {
            connections: conns,
            commonality: "producer-50-50",
            fanout,
            ..Self::tree_spec(&format!("tree fanout {conns} connections"), "on", f_items)
        };
        let (max, steps) = self.search_one_rig("tree", &spec, 10_000, secs, bisect)?;
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
            cache: "on".into(),
            input_updates_per_s: max,
            output_updates_per_s: best.round() as u64,
            steps,
        })
    }
}
