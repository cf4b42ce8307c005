//! Tickwire's performance lab.
//!
//! Load tools built on the client library (`perf_pub`, `perf_sub`; for the NATS peer
//! `perf_pub --system nats` and `perf_nats_sub` over `nats`), process and system
//! sampling from /proc (`sysinfo`), what waking an idle CPU costs here (`wakeup`),
//! latency statistics (`stats`) and the scenarios of `tickwire bench` (`bench`, `lab`;
//! the stalled subscriber and paused node scenario in `stall`). It measures the node
//! from outside, as separate processes, like a user would; it holds no node logic. What
//! it measured is `tickwire-bench-report`'s types, which write the results, the report
//! and its plots.

#![warn(missing_docs)]

pub mod bench;
pub mod byte_relay;
pub mod lab;
pub mod load_flags;
pub mod memory;
pub mod nats;
pub mod perf_nats_sub;
pub mod perf_post;
pub mod perf_pub;
pub mod perf_sub;
pub mod perf_ws_sub;
pub mod scraper;
pub mod stall;
pub mod stats;
pub mod sysinfo;
pub mod wakeup;
