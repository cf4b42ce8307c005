//! Threads whose work may wait (the files) run at a lower scheduling priority than the
//! event loop: on a busy machine they wait for a CPU, and market data does not. (Not
//! the TLS handshakes' thread: a client waits for it, `tls/handshakes.rs`.)

use log::warn;

/// Their nice value: below the event loop's and the backbone's threads.
const BACKGROUND_NICE: i32 = 10;

/// Lowers the calling thread's priority to [`BACKGROUND_NICE`] (a thread's nice value
/// is its own on Linux); `what` names it if that fails. Raising it back would need a
/// privilege, lowering never does.
pub(crate) fn yield_to_market_data(what: &str) {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    let r = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE)
    };
    if r != 0 {
        warn!(
            "cannot lower the priority of the {what}: {}",
            std::io::Error::last_os_error()
        );
    }
}
