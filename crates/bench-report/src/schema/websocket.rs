//! `bench ws`: the WebSocket JSON subscriber.

use super::Step;
use serde::{Deserialize, Serialize};

/// `bench ws`: one WebSocket JSON subscriber.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WebSocketResult {
    /// Items the WebSocket subscriber watches.
    pub items: usize,
    /// Highest rate delivered with zero loss to the WebSocket subscriber.
    pub max_sustainable_updates_per_s: u64,
    /// The search's steps.
    pub steps: Vec<Step>,
    /// Steps held at fixed rates (1,000 and 10,000 updates/s) for latency.
    pub latency: Vec<Step>,
    /// Many connections watching the same items, with the node's shared JSON encoding
    /// on and off (absent in results written before it existed).
    #[serde(default)]
    pub fanout: Option<WsFanout>,
}

/// `bench ws`, fan-out part: what encoding an update's JSON once for every WebSocket
/// client watching it saves, in node CPU per update delivered, at one fixed rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WsFanout {
    /// WebSocket connections, each watching every item.
    pub connections: usize,
    /// Items each connection watches.
    pub items: usize,
    /// The publisher's rate; the node delivers this times `connections`.
    pub input_updates_per_s: u64,
    /// Node CPU (user + system) per update delivered, median of the runs, in µs.
    pub shared_node_cpu_us_per_update: f64,
    /// The same with an encoding per client (µs).
    pub unshared_node_cpu_us_per_update: f64,
    /// unshared / shared: how many times more CPU the node spends without sharing.
    pub unshared_over_shared: f64,
    /// The user-mode part of the above (the encoding itself; the system part, writing
    /// to the sockets, is the same either way), median of the runs, in µs.
    #[serde(default)]
    pub shared_node_user_us_per_update: f64,
    /// The same with an encoding per client (µs).
    #[serde(default)]
    pub unshared_node_user_us_per_update: f64,
    /// Update encodings the nodes made, and the times one was reused for another
    /// client, over the whole life of the shared and of the per-client nodes, from
    /// their /metrics (they show that sharing happened, and only where it was on).
    #[serde(default)]
    pub shared_encoded: u64,
    /// Times a shared node reused an encoding.
    #[serde(default)]
    pub shared_reused: u64,
    /// Encodings the per-client node made.
    #[serde(default)]
    pub unshared_encoded: u64,
    /// Times the per-client node reused an encoding (0 expected).
    #[serde(default)]
    pub unshared_reused: u64,
    /// One step per run, alternating shared and unshared rigs (each run a fresh rig).
    pub shared: Vec<Step>,
    /// The per-client rigs' steps.
    pub unshared: Vec<Step>,
}
