//! A subscriber or publisher connected before a `fork` (`os.fork`, multiprocessing's
//! default start method on Linux) is the parent's: its socket is shared with the parent,
//! so a child that used it would read the parent's messages and write into the parent's
//! session, and its lock may have been held by a thread the child does not have. Each
//! object notes the process generation it was made in; in a child, every call that
//! needs the connection raises instead, and closing it does nothing.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Once;

/// Forks since the module was loaded, as seen by this process.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn in_child() {
    FORKS.fetch_add(1, Relaxed);
}

/// Counts forks from now on (once per process; the handler is inherited by children).
pub(crate) fn watch() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic, which is
        // async-signal-safe as a fork's child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// The process an object was made in.
pub(crate) struct Born(u64);

impl Born {
    pub(crate) fn now() -> Self {
        watch();
        Born(FORKS.load(Relaxed))
    }

    /// Still in the process that made it.
    pub(crate) fn here(&self) -> bool {
        FORKS.load(Relaxed) == self.0
    }

    /// `Err` in a child process (see the module doc); `what` is "subscriber" or
    /// "publisher".
    pub(crate) fn check(&self, what: &str) -> PyResult<()> {
        if self.here() {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this {what} was connected before the process forked: its connection is the \
             parent's; make a new {what} in this process"
        )))
    }
}
