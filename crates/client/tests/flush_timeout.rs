//! A publisher's flush against a node that takes its login and then reads nothing:
//! the flush ends at its time-out with `Timeout`, and the connection stays (what was
//! not written stays queued). Real sockets on 127.0.0.1; the "node" is a listener here.

mod fake_node;

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ClientError, ConnectOptions, PublishError, Publisher, PublisherOptions};
use tickwire_proto::{encode_field_list, FieldList, Value};

#[test]
fn a_flush_the_node_does_not_read_ends_at_its_time_out_and_keeps_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // A small receive buffer for what it accepts: little of what is queued fits.
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
