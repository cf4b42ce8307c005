//! `bench memory`: what a node's memory costs per subscriber connection and per stream.

use serde::{Deserialize, Serialize};

/// The memory scenario's results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Subscriber connections of the `full` and `narrow` rigs.
    pub connections: usize,
    /// Items each connection watches in the `small` and `full` rigs.
    pub items: usize,
    /// Updates per second per item set while the rigs ran.
    pub update_rate: u64,
    /// Seconds updates flowed before the reading.
    pub settle_s: f64,
    /// 10 connections x `items`: the node's fixed cost.
    pub small: MemoryRig,
    /// `connections` x `items`.
    pub full: MemoryRig,
    /// `connections` x `items` / 10.
    pub narrow: MemoryRig,
    /// Node memory per connection with its `items` streams: (full - small) / (connections -
    /// 10), bytes.
    pub per_connection_with_streams_bytes: f64,
    /// Node memory per stream (one item on one connection): (full - narrow) / streams
    /// between them, bytes.
    pub per_stream_bytes: f64,
    /// Node memory per connection alone: per connection with streams - items x per stream,
    /// bytes.
    pub per_connection_bytes: f64,
}

/// One rig's reading.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryRig {
    /// Subscriber connections.
    pub connections: usize,
    /// Items each connection watches.
    pub items: usize,
    /// connections x items.
    pub streams: usize,
    /// The node's resident set (VmRSS) at the reading, bytes.
    pub node_rss_bytes: u64,
    /// The node's peak resident set (VmHWM) at the reading, bytes.
    pub node_peak_rss_bytes: u64,
}
