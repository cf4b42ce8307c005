//! Bytes the node read from and wrote to its connections (TCP and WebSocket, the
//! plaintext under TLS), counted where every byte passes ([`crate::tls::Transport`]).
//!
//! Per-thread plain integers, never a lock or an atomic: all connection I/O runs on
//! the event-loop thread, and `/metrics` is answered on that same thread.

use std::cell::Cell;

thread_local! {
    static BYTES_IN: Cell<u64> = const { Cell::new(0) };
    static BYTES_OUT: Cell<u64> = const { Cell::new(0) };
}

#[inline]
pub(crate) fn read(n: usize) {
    BYTES_IN.with(|c| c.set(c.get() + n as u64));
}

#[inline]
pub(crate) fn written(n: usize) {
    BYTES_OUT.with(|c| c.set(c.get() + n as u64));
}

/// (read, written) on this thread so far.
pub(crate) fn totals() -> (u64, u64) {
    (BYTES_IN.with(Cell::get), BYTES_OUT.with(Cell::get))
}
