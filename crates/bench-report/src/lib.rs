//! Tickwire's performance lab results: what a run of `tickwire-bench` writes and how it
//! is read back.
//!
//! * [`schema`]: the types of `results.json`, plain data (the lab measures and fills
//!   them; this crate only holds and renders them);
//! * [`report`]: a run's `report.md` and its SVG plots;
//! * [`plot`]: the dependency-free SVG charts those plots are drawn with;
//! * [`summary`]: the current table of a scenario from several runs of it;
//! * [`compare`]: the headline figures of several runs side by side (base 100);
//! * [`stats`]: figures computed from the results (medians, node CPU per update).
//!
//! Nothing here starts a process, opens a socket or reads /proc: that is the lab's
//! (`tickwire-bench`), so anything that reads results needs only this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod compare;
pub mod plot;
pub mod report;
pub mod schema;
pub mod stats;
pub mod summary;

pub use schema::*;
