//! `tickwire bench backbone`: the classic procedure across the backbone (the report's
//! "src_dist" and "p2ps LAN" rows): publisher -> source node -> Aeron (UDP multicast on
//! loopback) -> edge node -> subscriber, with the single-node figures of the same run
//! beside it, and Aeron's own loss generator at the edge for the loss rows.

use super::*;
use crate::lab::BackboneSpec;
use crate::scraper::counter;
use tickwire_backbone::auth::Mac;

impl Lab {
    pub(super) fn backbone_spec(
        &self,
        label: &str,
        cache: &'static str,
        items: usize,
    ) -> Result<RigSpec> {
        if tickwire_backbone::IdleStrategy::parse(&self.args.backbone.backbone_idle).is_none() {
            bail!(
                "--backbone-idle {:?}: allowed values are {}",
                self.args.backbone.backbone_idle,
                tickwire_backbone::IdleStrategy::NAMES
            );
        }
        let key_file = match self.backbone_mac() {
            Some(mac) => format!("key_file = {:?}\n", self.backbone_key_file(mac)?.display()),
            None => String::new(),
        };
        Ok(RigSpec {
            backbone: Some(BackboneSpec::loopback()?),
            node_config: Some(format!(
                "[backbone]\ndriver = {:?}\nidle = {:?}\nmtu = {}\n{}{key_file}",
                self.args.backbone.backbone_driver,
                self.args.backbone.backbone_idle,
                self.args.backbone.backbone_mtu,
                self.args
                    .backbone
                    .backbone_max_park_us
                    .map_or(String::new(), |us| format!("max_park_us = {us}\n"))
            )),
            ..RigSpec::new(label, cache, items)
        })
    }

    /// The MAC of the rigs' backbone key (`--backbone-auth`), none without one.
    pub(super) fn backbone_mac(&self) -> Option<Mac> {
        match self.args.backbone.backbone_auth.as_str() {
            "on" => Some(Mac::Blake3),
            "hmac-sha256" => Some(Mac::HmacSha256),
            _ => None,
        }
    }

    /// The run's backbone key file (`--backbone-auth`), made once in --out's logs
    /// (with the processes' logs, not with the results that are kept).
    pub(super) fn backbone_key_file(&self, mac: Mac) -> Result<std::path::PathBuf> {
        run_key_file(&self.logs.join("backbone.keys"), mac)
    }

    /// How the transport is described in the reports.
    pub(super) fn backbone_transport(&self) -> String {
        format!(
            "Aeron UDP multicast on loopback, {}-byte datagrams, embedded media drivers (shared threading, run by the {}, {} idle), {}",
            self.args.backbone.backbone_mtu,
            self.args.backbone.backbone_driver,
            self.args.backbone.backbone_idle,
            self.backbone_auth_text()
        )
    }

    /// Whether the rigs' backbone is authenticated, as the reports say it.
    pub(super) fn backbone_auth_text(&self) -> &'static str {
        match self.backbone_mac() {
            Some(Mac::Blake3) => "authenticated (keyed BLAKE3 per message)",
            Some(Mac::HmacSha256) => "authenticated (HMAC-SHA256 per message)",
            None => "not authenticated",
        }
    }

    pub(super) fn backbone(&mut self) -> Result<()> {
        let items = if self.quick {
            self.args.watchlist.items.min(10_000)
        } else {
            self.args.watchlist.items
        };
        let two = self.two_nodes("backbone", items, "off", &|lab, label, cache, items| {
            lab.backbone_spec(label, cache, items)
        })?;
        let mut r = BackboneResult {
            transport: self.backbone_transport(),
            single_node_updates_per_s: two.single_node_updates_per_s,
            throughput: two.throughput,
            fanout: two.fanout,
            latency: two.latency,
            single_node_latency: two.single_node_latency,
            loss: Vec::new(),
        };
        let losses: &[f64] = if self.quick { &[0.01] } else { &[0.001, 0.01] };
        for &loss in losses {
            r.loss.push(self.backbone_loss(loss, items, two.start)?);
        }
        self.results.backbone = Some(r);
        Ok(())
    }

    /// One rig with `loss` at the edge: latency at 10,000 updates/s, then the highest
    /// rate it sustains; the drivers' NAK and retransmit counts from the nodes' /metrics.
    fn backbone_loss(&mut self, loss: f64, items: usize, start: u64) -> Result<LossResult> {
        let label = format!("backbone loss={loss}");
        let mut spec = self.backbone_spec(&label, "off", items)?;
        if let Some(bb) = spec.backbone.as_mut() {
            bb.loss = Some(loss);
        }
        let mut rigs = vec![self.start_rig(&spec)?];
        self.results.commands.extend(rigs[0].commands());
        let monitor = self.monitor(&rigs);
        let latency_rate = 10_000;
        let secs = self.seconds();
        let held = hold(&mut rigs, latency_rate, secs, 1.0, &monitor)?;
        let at = held.into_iter().next().expect("one rig");
        self.progress.line(&step_text(&at), 1.0);
        let bisect = self.bisections();
        let (max, steps) = self.find_max_rate(&mut rigs, start, bisect, secs, &monitor, |s| {
            step_text(&s[0])
        })?;
        let mut steps: Vec<Step> = steps.into_iter().flatten().collect();
        steps.insert(0, at.clone());
        self.record_processes("backbone", &steps);
        let rig = &rigs[0];
        let edge_http = rig.edge.as_ref().and_then(|e| e.ws_addr.as_deref());
        let naks = counter(
            edge_http,
            "tickwire_backbone_naks_total{direction=\"sent\"}",
        )?;
        let retransmits = counter(
            rig.node.ws_addr.as_deref(),
            "tickwire_backbone_retransmits_total",
        )?;
        stop_rigs(rigs)?;
        Ok(LossResult {
            loss_rate: loss,
            sustained_updates_per_s: max,
            latency_rate,
            p50_ns: at.latency.p50_ns,
            p99_ns: at.latency.p99_ns,
            gaps: steps.iter().map(|s| s.gaps).sum(),
            naks,
            retransmits,
            steps,
        })
    }
}

/// A key file of `mac` at `path`: the one there if its signing key is of `mac` (a run
/// goes on with the key its earlier rigs had), else a new one in its place. An --out
/// used before keeps its logs: a key file of another run, of the other MAC or from a
/// build before BLAKE3, would otherwise seal this run's rigs with a MAC the reports do
/// not name.
fn run_key_file(path: &std::path::Path, mac: Mac) -> Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let reusable = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| tickwire_backbone::auth::Keys::parse(&text).ok())
        .is_some_and(|keys| keys.signing().mac() == mac);
    if !reusable {
        let text = tickwire_backbone::auth::new_key_file(mac)
            .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
        std::fs::write(path, text)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    // The rigs' nodes run from the lab's own directory: the path must not depend on it.
    Ok(std::fs::canonicalize(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac_of(path: &std::path::Path) -> Mac {
        let text = std::fs::read_to_string(path).unwrap();
        tickwire_backbone::auth::Keys::parse(&text)
            .unwrap()
            .signing()
            .mac()
    }

    #[test]
    fn the_run_key_file_has_the_mac_asked_for_even_in_a_reused_out() {
        let dir = std::env::temp_dir().join(format!("tw-run-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("backbone.keys");
        let _ = std::fs::remove_file(&path);
        // A run with --backbone-auth on, then one with hmac-sha256 in the same --out.
        run_key_file(&path, Mac::Blake3).unwrap();
        assert_eq!(mac_of(&path), Mac::Blake3);
        let first = std::fs::read_to_string(&path).unwrap();
        // The same MAC again: the same key (a run's rigs share it).
        run_key_file(&path, Mac::Blake3).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
        run_key_file(&path, Mac::HmacSha256).unwrap();
        assert_eq!(mac_of(&path), Mac::HmacSha256);
        // A key file a build before BLAKE3 left (no MAC word: HMAC-SHA256), then `on`.
        run_key_file(&path, Mac::Blake3).unwrap();
        assert_eq!(mac_of(&path), Mac::Blake3);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
