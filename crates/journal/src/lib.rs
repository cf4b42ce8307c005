//! Tickwire's durable journal (docs/JOURNAL.md): an append-only, segmented, checksummed
//! log with two streams, as a persistence server keeps them: **received** (a post taken
//! in, before it goes on) and **completed** (its publisher's answer). A restart finds
//! exactly the posts received and not completed ([`Journal::pending`]), to deliver
//! again.
//!
//! - [`record`]: a record's bytes (length, CRC-32, body), pure.
//! - [`segment`]: a segment file's header and reading one back, pure.
//! - [`files`]: the thin layer that touches the file system (and counts its system
//!   calls).
//! - [`Journal`]: recovery, appends, commits under a [`SyncPolicy`].
//!
//! The journal does no I/O of its own accord and has no thread: the node runs it on a
//! thread of its own, so a sync never stalls the event loop.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod files;
mod journal;
pub mod record;
pub mod segment;

pub use journal::{
    now_ns, History, HistoryQuery, HistorySource, Journal, JournalError, JournalOptions,
    JournalStats, PastMessage, PendingPost, Recovery, SyncPolicy,
};
pub use record::{Body, Completed, ItemMessage, Received, Record, Stream};

#[cfg(test)]
mod tests;
