//! A publisher's flush against a node that takes its login and then reads nothing:
//! the flush ends at its time-out with `Timeout`, and the connection stays (what was
//! not written stays queued); waits for room past the high-water mark, made in short
//! slices, give the node 10 s in all. Real sockets on 127.0.0.1; the "node" is a
//! listener here.

mod fake_node;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ClientError, ConnectOptions, PublishError, Publisher, PublisherOptions};
use tickwire_proto::{encode_field_list, FieldList, Value};

/// A node that welcomes one login, then reads nothing (for 30 s at most, or until
/// `stop`), with a small receive buffer: little of what is queued fits.
fn deaf_node() -> (String, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let small: libc::c_int = 4096;
    // SAFETY: a valid socket and a c_int option of its size.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&listener),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &small as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let node = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let patience = Duration::from_millis(200);
            fake_node::welcome_the_login(&mut s, patience, 30_000, 64 << 20, "deaf");
            // Reads nothing more, for 30 s at most.
            let end = Instant::now() + Duration::from_secs(30);
            while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    (addr, stop, node)
}

#[test]
fn a_flush_the_node_does_not_read_ends_at_its_time_out_and_keeps_the_connection() {
    let (addr, stop, node) = deaf_node();
    let mut opts = PublisherOptions::new(ConnectOptions::new(addr.to_string()), "FEED");
    opts.connect.reconnect = false;
    let mut p = Publisher::connect(opts).expect("publisher connects");
    // 3 MB of images: more than the sockets hold, less than the publisher's high-water
    // mark (4 MiB, past which publishing itself waits).
    let text = "x".repeat(60_000);
    let image = encode_field_list([(3, Value::Ascii(&text))]);
    for i in 0..50 {
        p.publish_refresh(&format!("I{i}"), FieldList::from_trusted(&image))
            .unwrap();
    }
    let start = Instant::now();
    let got = p.flush(Duration::from_millis(500));
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(
        matches!(got, Err(PublishError::Client(ClientError::Timeout(_)))),
        "{got:?}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(p.is_connected(), "the connection was dropped");
    drop(p);
    node.join().unwrap();
}

/// A caller that waits for room itself, in slices (to look at signals between them),
/// gives a node that takes nothing the same 10 s in all as one wait would: the slices
/// say "no room yet" until then, and the node is then taken as lost.
#[test]
fn waits_for_room_in_slices_give_the_node_ten_seconds_in_all() {
    let (addr, stop, node) = deaf_node();
    let mut opts = PublisherOptions::new(ConnectOptions::new(addr), "FEED");
    opts.connect.reconnect = false;
    let mut p = Publisher::connect(opts).expect("publisher connects");
    p.set_wait_in_publish(false);
    // 15 MB of images: past the high-water mark (4 MiB) and what the sockets hold.
    let text = "x".repeat(60_000);
    let image = encode_field_list([(3, Value::Ascii(&text))]);
    for i in 0..250 {
        p.publish_refresh(&format!("I{i}"), FieldList::from_trusted(&image))
            .unwrap();
    }
    let start = Instant::now();
    let mut slices = 0;
    let end = loop {
        match p.wait_for_room(Duration::from_millis(200)) {
            Ok(false) if start.elapsed() < Duration::from_secs(20) => slices += 1,
            other => break other,
        }
    };
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(
        matches!(end, Err(ClientError::Timeout(_))),
        "after {slices} slices in {took:?}: {end:?}"
    );
    assert!(
        took >= Duration::from_millis(9_900) && took < Duration::from_secs(15),
        "the node was given {took:?} ({slices} slices)"
    );
    assert!(
        p.is_ended(),
        "a node taken as lost without reconnect ends the session"
    );
    drop(p);
    node.join().unwrap();
}
