//! The WebSocket JSON API of a Tickwire node (`tr_json2`, also called `rssl.json.v2`),
//! without I/O.
//!
//! [`connection`] is one connection on the WebSocket port, from its HTTP request on; [`ws`]
//! handles the HTTP upgrade and WebSocket frames; [`token`] the token request
//! (`POST /getToken`) and the cookie that logs an upgrade in; [`session`] translates
//! one connection's JSON messages to and from the node's own messages, so a WebSocket
//! subscriber is, to the node's core, a subscriber like any other (same limits, same
//! slow-consumer policy). The `tickwire-node` crate owns the sockets. This crate must
//! not do I/O, hold a clock, or know the node's state beyond what it is told.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod connection;
pub mod session;
pub mod token;
pub mod ws;

pub use connection::{Connection, Host, TokenAnswer};
pub use session::{Session, SessionConfig, UpdateCache};
/// Subprotocols accepted, in order of preference.
pub const SUBPROTOCOLS: [&str; 2] = ["tr_json2", "rssl.json.v2"];
/// The path of the WebSocket endpoint.
pub const WS_PATH: &str = "/WebSocket";
