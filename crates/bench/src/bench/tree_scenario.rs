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
            self.args.watchlist.items.min(10_000)
        } else {
            self.args.watchlist.items
        };
        let two = self.two_nodes("tree", items, "on", &|_, label, cache, items| {
            Ok(Self::tree_spec(label, cache, items))
        })?;
        self.results.tree = Some(TreeResult {
            single_node_updates_per_s: two.single_node_updates_per_s,
            throughput: two.throughput,
            fanout: two.fanout,
            latency: two.latency,
            single_node_latency: two.single_node_latency,
        });
        Ok(())
    }
}
