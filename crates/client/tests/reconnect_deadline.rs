//! A subscriber whose node is gone, with a next node on its list that takes the TCP
//! connection but never answers the TLS handshake: each try waits out the connect
//! time-out, longer than the back-off. A call with a time-out still returns after one
//! try at most (the back-off counts from the try's end, not its start, when the next
//! try would already be due). Real sockets on 127.0.0.1, a node in this process.

mod fake_node;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, Subscriber};
use tickwire_node::{NodeConfig, NodeServer};

#[test]
fn a_call_returns_near_its_time_out_while_the_next_node_never_answers() {
    let dir = std::env::temp_dir().join(format!("tickwire-reconnect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.tls.cert = cert.display().to_string();
    cfg.tls.key = key.display().to_string();
    let node = NodeServer::spawn(cfg).expect("node starts");

    // Takes connections and holds them, silent, for 20 s at most.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    silent.set_nonblocking(true).unwrap();
    let (taken, stop) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let holder = {
        let (taken, stop) = (taken.clone(), stop.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(20);
            let mut held = Vec::new();
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                match silent.accept() {
                    Ok((s, _)) => {
                        taken.fetch_add(1, Ordering::Relaxed);
                        held.push(s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })
    };

    let mut opts = ConnectOptions::new(format!("{},{silent_addr}", node.addr));
    opts.tls = Some(tickwire_client::tls::client_config_from_ca_file(&cert).unwrap());
    opts.connect_timeout = Duration::from_millis(300);
    // Shorter than a try: the back-off must count from the try's end.
    opts.backoff_min = Duration::from_millis(100);
    opts.backoff_max = Duration::from_millis(200);
    let mut sub = Subscriber::connect(opts).expect("subscriber connects");
    node.stop().unwrap();

    let start = Instant::now();
    let mut longest = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(4) {
        let call = Instant::now();
        let _ = sub.next_event(Duration::from_millis(200));
        longest = longest.max(call.elapsed());
    }
    let tries = taken.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    holder.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // One try (300 ms) and the call's own 200 ms at most, with room for a busy machine;
    // a call that kept trying with no back-off returned only when the silent node went.
    assert!(
        longest < Duration::from_secs(3),
        "a 200 ms call took {longest:?} ({tries} tries of the silent node)"
    );
    assert!(tries >= 1, "the silent node was never tried");
}

/// A node that keeps sending what delivers nothing (Pings, answered by the session)
/// cannot hold a call past its time-out: the call reads once more after it, then
/// returns.
#[test]
fn a_call_returns_at_its_time_out_while_bytes_keep_coming() {
    use std::io::{Read, Write};
    use tickwire_proto::{FrameWriter, Message};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let patience = Duration::from_millis(50);
            fake_node::welcome_the_login(&mut s, patience, 5_000, 1 << 20, "flood");
            let mut pings = FrameWriter::new(1 << 20);
            for i in 0..2_000 {
                pings.push(&Message::Ping(i)).unwrap();
            }
            let pings = pings.sealed_bytes().to_vec();
            // What the client answers is read and dropped, beside.
            let mut answers = s.try_clone().unwrap();
            let drain = std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let end = Instant::now() + Duration::from_secs(16);
                while Instant::now() < end {
                    match answers.read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => break,
                    }
                }
            });
            let end = Instant::now() + Duration::from_secs(15);
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                if s.write_all(&pings).is_err() {
                    break;
                }
            }
            let _ = s.shutdown(std::net::Shutdown::Both);
            let _ = drain.join();
        })
    };
    let mut opts = ConnectOptions::new(addr.to_string());
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("subscriber connects");
    let call = Instant::now();
    let _ = sub.next_event(Duration::from_millis(200));
    let took = call.elapsed();
    stop.store(true, Ordering::Relaxed);
    drop(sub);
    let _ = flood.join();
    assert!(
        took < Duration::from_secs(5),
        "a 200 ms call took {took:?} while Pings kept coming"
    );
}
