//! One contract for what the node's event loop runs beside its client connections:
//! the upstream link, interactive RSSL providers, the backbone, the login checker and
//! the journal. Each is a part the loop drives the same way, as quinn-proto's
//! `Connection` is driven: readiness of its own socket in, what arrived since the last
//! turn in, its deadlines handled, what the core wrote for it out, and when it needs
//! the next turn. The loop is then a loop over parts (`server/parts.rs`), and a new
//! protocol adds a part, not a dialect.

use mio::Registry;
use std::time::Instant;
use tickwire_core::Node;

/// What a part gets each time the loop calls it: the node's core (every part is an
/// in-process peer of it), the poll its sockets are registered with, and the turn's
/// time.
pub(crate) struct Cx<'a> {
    pub core: &'a mut Node,
    pub registry: &'a Registry,
    pub now: Instant,
}

/// What a readiness event said of a socket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Readiness {
    /// Something to read (data, the peer's close, an error).
    pub readable: bool,
    /// Room to write.
    pub writable: bool,
    /// The peer closed its side or the socket failed: a read goes on to the end of the
    /// stream, never stopping at a short read (no later event would come for the rest).
    pub hung_up: bool,
}

pub(crate) trait Part {
    /// When the part next needs a turn with nothing to read: `None` while it waits for
    /// input only; a time already past when it has more to do at once.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Readiness of the part's own socket (an event with its token). What is readable
    /// is read in [`Part::handle_input`], in the same turn.
    fn handle_io(&mut self, _cx: &mut Cx<'_>, _readiness: Readiness) {}

    /// What arrived for the part since the last turn (from its socket, from its thread)
    /// goes into the core; a due connection attempt is made.
    fn handle_input(&mut self, cx: &mut Cx<'_>);

    /// The deadlines passed by `cx.now` (heartbeats, timeouts). Called every turn; a
    /// part with nothing due does nothing.
    fn handle_timeout(&mut self, _cx: &mut Cx<'_>) {}

    /// What the core wrote for the part this turn goes out.
    fn pump(&mut self, _cx: &mut Cx<'_>) {}
}
