//! Releasing the GIL while a call waits, in a way that survives the interpreter's exit.
//!
//! A thread that releases the GIL takes it back with `PyEval_RestoreThread`. Before
//! CPython 3.14, a thread that does so once the interpreter is finalizing (the main
//! thread has returned, or called `sys.exit`, while this one waited: a daemon thread in
//! `next()`, a `LiveView`'s thread) is ended there with `pthread_exit`, which unwinds its
//! stack. Unwinding through the extension's frames back to Python's aborts the process
//! (glibc's "FATAL: exception not rethrown", SIGABRT), whatever exit code the program
//! meant. pyo3's `Python::detach` (0.27) takes the GIL back that way; `detach` here does
//! what CPython 3.14 does itself: a thread that would be ended is parked for good
//! instead (the process is exiting: it ends with it), as pyo3's own `Python::attach`
//! already does for `PyGILState_Ensure`.

use pyo3::ffi;
use pyo3::marker::Ungil;
use pyo3::Python;

mod raw {
    // The same function as pyo3's declaration, which may unwind: `pthread_exit`'s forced
    // unwind leaves it, and runs the destructors of the frame that called it.
    extern "C-unwind" {
        pub(super) fn PyEval_RestoreThread(tstate: *mut pyo3::ffi::PyThreadState);
    }
}

/// Parks the thread for good when dropped: reached only while `pthread_exit` unwinds
/// the thread out of `PyEval_RestoreThread`.
struct ParkForGood;

impl Drop for ParkForGood {
    fn drop(&mut self) {
        loop {
            std::thread::park();
        }
    }
}

/// Takes the GIL back for the thread state `PyEval_SaveThread` gave.
struct Reattach(*mut ffi::PyThreadState);

impl Drop for Reattach {
    fn drop(&mut self) {
        let park = ParkForGood;
        // SAFETY: this thread's own state, saved by `detach` with the GIL it held.
        unsafe { raw::PyEval_RestoreThread(self.0) };
        std::mem::forget(park);
    }
}

/// Runs `f` with the GIL released, as `Python::detach` does; a thread that finds the
/// interpreter finalizing when `f` returns never comes back into Python (see the module
/// doc). `f` must not touch Python objects, nor drop any (pyo3 still counts the thread
/// as attached meanwhile): it works on the Rust side alone, as every caller's does.
pub(crate) fn detach<T, F>(_py: Python<'_>, f: F) -> T
where
    F: Ungil + FnOnce() -> T,
    T: Ungil,
{
    // SAFETY: the GIL is held (`_py`); it is taken back by `Reattach`, also if `f`
    // panics (the panic then reaches pyo3's trampoline with the GIL, as a
    // PanicException).
    let _reattach = Reattach(unsafe { ffi::PyEval_SaveThread() });
    f()
}
