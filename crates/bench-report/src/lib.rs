//! Tickwire's performance lab results: what a run of `tickwire-bench` writes and how it
//! is read back.
//!
//! * [`schema`]: the types of `results.json`, plain data (the lab measures and fills
//!   them; this crate only holds them);
//! * [`stats`]: figures computed from the results (medians, node CPU per update).
//!
//! Nothing here starts a process, opens a socket or reads /proc: that is the lab's
//! (`tickwire-bench`), so anything that reads results needs only this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod schema;
pub mod stats;

pub use schema::*;
