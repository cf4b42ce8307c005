//! The types of `results.json` (docs/BENCHMARKS.md names every key), one module per
//! part of a run. Their serde attributes are the file format: results written by
//! earlier versions of the lab must still read, so new fields come with a default.

mod backbone;
mod files;
mod journal;
mod latency;
mod machine;
mod memory;
mod peers;
mod rssl;
mod run;
mod settings;
mod single_node;
mod stall;
mod step;
mod tree;
mod usage;
mod wait;
mod websocket;

pub use backbone::*;
pub use files::*;
pub use journal::*;
pub use latency::*;
pub use machine::*;
pub use memory::*;
pub use peers::*;
pub use rssl::*;
pub use run::*;
pub use settings::*;
pub use single_node::*;
pub use stall::*;
pub use step::*;
pub use tree::*;
pub use usage::*;
pub use wait::*;
pub use websocket::*;
