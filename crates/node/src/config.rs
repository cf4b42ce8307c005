//! Node configuration: a TOML file, every key documented in docs/OPERATIONS.md.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use thiserror::Error;
use tickwire_core::{CoreConfig, Limits};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    On,
    Off,
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(CacheMode::On),
            "off" => Ok(CacheMode::Off),
            other => Err(format!(
                "invalid cache mode {other:?}: allowed values are on, off"
            )),
        }
    }
}

/// How the event loop waits for work: a measured choice (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Sleep in epoll until a socket is ready: no CPU when idle, a wake-up per event.
    Block,
    /// Poll without sleeping, yielding the CPU between empty polls.
    Yield,
    /// Poll without sleeping: lowest latency, one CPU always busy.
    Spin,
    /// Spin for `spin_us` after the last event, then block.
    SpinThenBlock,
}

impl std::str::FromStr for WaitStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(WaitStrategy::Block),
            "yield" => Ok(WaitStrategy::Yield),
            "spin" => Ok(WaitStrategy::Spin),
            "spin-then-block" => Ok(WaitStrategy::SpinThenBlock),
            other => Err(format!(
                "invalid wait strategy {other:?}: allowed values are block, yield, spin, spin-then-block"
            )),
        }
    }
}

/// The whole node configuration, as in the TOML file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    pub node: NodeSection,
    pub limits: LimitsSection,
    pub security: SecuritySection,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSection {
    /// Name announced to peers in the welcome.
    pub name: String,
    /// Address for publishers and subscribers (port 0: any free port).
    pub listen: SocketAddr,
    /// Last-value cache: "on" or "off".
    pub cache: CacheMode,
    /// Seconds between statistics log lines; 0 turns them off.
    pub stats_interval_s: u64,
    /// CPUs to pin the event-loop thread to; empty: no pinning.
    pub cpus: Vec<usize>,
    /// How the event loop waits for work.
    pub wait: WaitStrategy,
    /// With `spin-then-block`: microseconds to keep spinning after the last event.
    pub spin_us: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    pub max_connections: usize,
    /// Connections the kernel queues before the node accepts them (capped by the
    /// kernel's net.core.somaxconn).
    pub listen_backlog: u32,
    pub max_frame_bytes: usize,
    pub max_streams_per_connection: usize,
    pub max_output_bytes: usize,
    pub heartbeat_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecuritySection {
    /// When non-empty, every login must carry this token.
    pub login_token: String,
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:14002";

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            name: "tickwire".into(),
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            cache: CacheMode::On,
            stats_interval_s: 10,
            cpus: Vec::new(),
            wait: WaitStrategy::Block,
            spin_us: 50,
        }
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        let l = Limits::default();
        LimitsSection {
            max_connections: 10_000,
            listen_backlog: 1024,
            max_frame_bytes: l.max_frame,
            max_streams_per_connection: l.max_streams_per_connection,
            max_output_bytes: l.max_output_bytes,
            heartbeat_ms: l.heartbeat.as_millis() as u64,
        }
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config {key} = {value}: {reason}")]
    Invalid {
        key: &'static str,
        value: String,
        reason: String,
    },
}

impl NodeConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses TOML text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: NodeConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        cfg.validate().map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let min_frame = tickwire_proto::frame::MIN_MAX_FRAME;
        let l = &self.limits;
        let check = |ok: bool, key: &'static str, value: String, reason: String| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::Invalid { key, value, reason })
            }
        };
        check(
            l.max_frame_bytes >= min_frame && l.max_frame_bytes <= 16 * 1024 * 1024,
            "limits.max_frame_bytes",
            l.max_frame_bytes.to_string(),
            format!("allowed: {min_frame} to 16777216"),
        )?;
        check(
            l.heartbeat_ms >= 100 && l.heartbeat_ms <= 600_000,
            "limits.heartbeat_ms",
            l.heartbeat_ms.to_string(),
            "allowed: 100 to 600000".into(),
        )?;
        check(
            l.listen_backlog >= 1 && l.listen_backlog <= 65_535,
            "limits.listen_backlog",
            l.listen_backlog.to_string(),
            "allowed: 1 to 65535".into(),
        )?;
        check(
            l.max_connections >= 1,
            "limits.max_connections",
            l.max_connections.to_string(),
            "allowed: 1 or more".into(),
        )?;
        check(
            l.max_streams_per_connection >= 1,
            "limits.max_streams_per_connection",
            l.max_streams_per_connection.to_string(),
            "allowed: 1 or more".into(),
        )?;
        check(
            l.max_output_bytes >= l.max_frame_bytes,
            "limits.max_output_bytes",
            l.max_output_bytes.to_string(),
            format!(
                "must be at least limits.max_frame_bytes ({})",
                l.max_frame_bytes
            ),
        )?;
        let ncpu = available_cpus();
        for &c in &self.node.cpus {
            check(
                c < ncpu,
                "node.cpus",
                format!("{:?}", self.node.cpus),
                format!(
                    "CPU {c} does not exist: this machine has CPUs 0 to {}",
                    ncpu - 1
                ),
            )?;
        }
        Ok(())
    }

    /// The effective configuration as TOML (for `--print-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serialises")
    }

    pub fn core_config(&self) -> CoreConfig {
        CoreConfig {
            node_name: self.node.name.clone(),
            cache: self.node.cache == CacheMode::On,
            limits: Limits {
                max_frame: self.limits.max_frame_bytes,
                max_streams_per_connection: self.limits.max_streams_per_connection,
                max_output_bytes: self.limits.max_output_bytes,
                heartbeat: Duration::from_millis(self.limits.heartbeat_ms),
            },
            login_token: (!self.security.login_token.is_empty())
                .then(|| self.security.login_token.clone()),
        }
    }
}

pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_through_toml() {
        let cfg = NodeConfig::default();
        let text = cfg.to_toml();
        assert_eq!(NodeConfig::parse(&text, "x").unwrap(), cfg);
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_allowed_values() {
        let e = NodeConfig::parse("[node]\ncache = \"maybe\"\n", "node.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("node.toml") && msg.contains("cache") && msg.contains("`on`"),
            "{msg}"
        );
        let e = NodeConfig::parse("[node]\nlisen = \"x\"\n", "node.toml").unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
        let e = NodeConfig::parse("[limits]\nheartbeat_ms = 5\n", "n.toml").unwrap_err();
        assert!(
            e.to_string().contains("n.toml") && e.to_string().contains("limits.heartbeat_ms = 5"),
            "{e}"
        );
        let e = NodeConfig::parse("[node]\ncpus = [4096]\n", "n.toml").unwrap_err();
        assert!(e.to_string().contains("CPU 4096 does not exist"), "{e}");
    }
}
