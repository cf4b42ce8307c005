//! A signal handled while a call waits for the node ends the wait, so that a program
//! whose handler only sets a flag (`tickwire publish` on Ctrl-C) sees it at once
//! however long the wait it asked for: an idle feed can then wait for the node
//! without waking up every few milliseconds to look at its flag. Every wait is bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, Publisher, PublisherOptions};
use tickwire_node::{NodeConfig, NodeServer};

static HANDLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    HANDLED.store(true, Ordering::SeqCst);
}

#[test]
fn a_signal_ends_a_dispatch_long_before_its_time_out() {
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.node.stats_interval_s = 0;
    let node = NodeServer::spawn(cfg).expect("node starts");
    let opts = ConnectOptions::new(node.addr.to_string());
    let mut publisher =
        Publisher::connect(PublisherOptions::new(opts, "FEED")).expect("publisher connects");
    publisher.flush(Duration::from_secs(10)).unwrap();

    // A handler that only sets a flag, as signal-hook's does (no SA_RESTART: poll(2)
    // is never restarted anyway).
    // SAFETY: a zeroed sigaction with a handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() };
    let returned = Arc::new(AtomicBool::new(false));
    let r = returned.clone();
    // Signals this thread until its dispatch returns (10 ms apart, 20 s at most: the
    // first may come before the wait starts).
    let signaller = std::thread::spawn(move || {
        for _ in 0..2000 {
            std::thread::sleep(Duration::from_millis(10));
            if r.load(Ordering::SeqCst) {
                return;
            }
            // SAFETY: the test thread outlives this one (it joins it below).
            unsafe { libc::pthread_kill(me, libc::SIGUSR1) };
        }
    });
    let asked = Duration::from_secs(60);
    let t0 = Instant::now();
    let events = publisher.dispatch(asked).unwrap();
    let waited = t0.elapsed();
    returned.store(true, Ordering::SeqCst);
    signaller.join().unwrap();
    assert!(HANDLED.load(Ordering::SeqCst));
    assert!(events.is_empty(), "{events:?}");
    assert!(
        waited < asked / 2,
        "the dispatch waited {waited:?} of its {asked:?} despite the signals"
    );
    // The connection is still good.
    publisher.flush(Duration::from_secs(10)).unwrap();
}
