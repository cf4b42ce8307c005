//! File transfer over Tickwire's infrastructure: reference data, end-of-day files and
//! dictionaries pushed from one site to every site, each file complete or not at all,
//! with a record of who has what (docs/FILES.md).
//!
//! Sans-IO, like the rest of the node's parts: a [`Sender`] (a site's bounded queue of
//! outgoing files) and a [`Receiver`] (a site's inbox) exchange the messages of
//! [`wire`] and are driven with `handle_*(…, now)`, `handle_timeout(now)`,
//! `poll_timeout()`, `poll_transmit` and `poll_event`. They read and write file bytes
//! only through the [`ChunkSource`] and [`Store`] traits, implemented over the spool
//! and inbox directories ([`spool`], [`inbox`]), and over memory in tests. They never touch a
//! socket or the clock: the node carries their messages over the backbone (one
//! stream to every edge at once) and down node-tree links.
//!
//! On disk (the only code here that touches files): [`inbox::Inbox`], a site's inbox
//! (partial files, their maps, commits under an fsync policy), and [`spool::Spool`], a
//! sender's queue of files kept until every site has them.
//!
//! - [`audit`]: the audit log's lines, and the history a node reads back from it.
//! - [`wire`]: the messages (offers, chunks with their CRC-32, statuses, presences,
//!   cancels); [`name`]: which file names a site accepts; [`ChunkMap`]: which chunks a
//!   site holds; [`Manifest`]: what a file is; [`pace`]: the files' share of bandwidth;
//!   [`congestion`]: the rate below it while the backbone loses.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod audit;
mod chunk_map;
pub mod congestion;
pub mod hub;
pub mod inbox;
mod manifest;
pub mod name;
mod open_files;
pub mod pace;
mod query_pace;
mod receiver;
mod sender;
pub mod spool;
pub mod wire;

pub use audit::HubEvent;
pub use chunk_map::ChunkMap;
pub use hub::{Hub, HubConfig, HubStats, Output, Peer, Rights};
pub use manifest::Manifest;
pub use query_pace::{QUERY_GAP, WAITING_MAX as QUERIES_WAITING_MAX};
pub use receiver::{Receiver, ReceiverConfig, ReceiverEvent, ReceiverStats, Store, HASH_READ_BACK};
pub use sender::{
    ChunkSource, Delivery, NewFile, QueueError, Sender, SenderConfig, SenderEvent, SenderStats,
    SiteRecord,
};

#[cfg(test)]
mod tests;
