//! RSSL for a Tickwire node, without I/O.
//!
//! Applications written against LSEG's Real-Time SDK (ETA, EMA and the vendor's perf
//! tools) speak RSSL: the RIPC connection layer ([`ripc`]: handshake, pings, packed and
//! fragmented messages) carrying RWF messages ([`rwf`]: the binary message and data
//! encoding). This crate must not do I/O, hold a clock, or know the node's state beyond
//! what it is told; the `tickwire-node` crate owns the sockets.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dictionary;
pub mod directory;
mod item_groups;
mod provided_items;
pub mod provider_link;
pub mod ripc;
pub mod rwf;
pub mod sequence;
pub mod session;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
