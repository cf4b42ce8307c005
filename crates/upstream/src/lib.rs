//! The upstream link: a node fed over TCP by another node (its upstream), serving its
//! own subscribers. Node trees are built from these links: A -> B -> C.
//!
//! The link is two things joined without I/O of its own ([`Relay`]):
//! - toward its node's core, one internal, interactive publisher announcing the
//!   upstream's services: the core asks it for an item once, however many local
//!   subscribers want it, and closes it when the last one leaves;
//! - toward the upstream, a subscriber ([`tickwire_client::SubscriberSession`], the
//!   client library's own protocol code) whose watchlist is what the core asked for.
//!
//! What the upstream sends is forwarded as encoded, with the stream id rewritten: the
//! core caches, conflates and fans out as for any publisher, and conflation counts and
//! statuses pass through. The socket is the node's ([`Relay::connection`] is fed by
//! its event loop).
//!
//! Posts to an upstream-fed service go up the same link (the link posts them as a
//! subscriber of its upstream) and their answers come back down.
//!
//! Loops are refused: every node has an id, logs in to its upstream as
//! `tickwire-node/<id>/<name>`, and learns from its upstream's `TICKWIRE/NODE` item the
//! chain of nodes above it ([`NodePath`]). A node refuses the login of any node in its
//! own chain, and a link that finds its own node in the chain above drops itself.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod path;
mod posts;
mod relay;

pub use path::{parse_node_login, NodePath, NODE_LOGIN_PREFIX};
pub use relay::{Relay, RelayConfig, RelayStats, MAX_FILES_IN_BYTES, TW_PATH};

#[cfg(test)]
mod tests;
