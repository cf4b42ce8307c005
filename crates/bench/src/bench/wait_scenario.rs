//! `tickwire bench wait`: what each way of waiting costs. The backbone's latency ladder
//! (publisher -> source node -> Aeron multicast on loopback -> edge node -> subscriber)
//! once per idle strategy of the nodes' media drivers (`[backbone] idle`), in one run:
//! each rung's latency beside every process's CPU, as a share of a CPU and per update.

use super::*;

/// The rungs when `--rates` is not given.
const DEFAULT_RUNGS: [u64; 3] = [1_000, 10_000, 100_000];
/// The watchlist at most: the price of waiting does not depend on it, the set-up of
/// every strategy's rig does.
const MAX_ITEMS: usize = 10_000;

impl Lab {
    pub(super) fn wait(&mut self) -> Result<()> {
        let strategies = self.args.wait.wait_strategies.clone();
        for s in &strategies {
            if tickwire_backbone::IdleStrategy::parse(s).is_none() {
                bail!(
                    "--wait-strategies: {s:?} is not an idle strategy; allowed: {}",
                    tickwire_backbone::IdleStrategy::NAMES
                );
            }
        }
        let mut rungs = self.rates_or(&DEFAULT_RUNGS);
        // These rungs only: no doubling to saturation after them.
        self.args.limit.max_rate = rungs.last().copied().unwrap_or(0);
        // First the nodes at rest: publisher and subscriber connected, every image
        // out, no update.
        if rungs.first() != Some(&0) {
            rungs.insert(0, 0);
        }
        let items = self.args.watchlist.items.min(MAX_ITEMS);
        let mut r = WaitResult {
            transport: format!(
                "Aeron UDP multicast on loopback, {}-byte datagrams, embedded media drivers run by the {}, {}",
                self.args.backbone.backbone_mtu,
                self.args.backbone.backbone_driver,
                self.backbone_auth_text()
            ),
            ..WaitResult::default()
        };
        for strategy in strategies {
            self.args.backbone.backbone_idle = strategy.clone();
            let spec =
                self.backbone_spec(&format!("wait {strategy} latency cache=off"), "off", items)?;
            let latency = self.latency_ladder(&spec, "wait", &rungs)?;
            r.strategies.push(StrategyLadder { strategy, latency });
        }
        self.results.wait = Some(r);
        Ok(())
    }
}
