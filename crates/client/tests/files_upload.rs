//! An upload against a node played here: it welcomes the login, reads the request and
//! closes. Real sockets on 127.0.0.1.

mod fake_node;

use std::net::TcpListener;
use std::time::{Duration, Instant};
use tickwire_client::files::{send_files, Upload};
use tickwire_client::{ClientError, ConnectOptions, Subscriber};

/// A time-out of `Duration::MAX` (wait as long as it takes) is taken as the other
/// waits of the library take it: the upload ends with the connection, not in a panic.
#[test]
fn an_upload_that_waits_without_end_ends_with_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let node = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        fake_node::welcome_the_login(&mut s, Duration::from_millis(200), 30_000, 1 << 20, "n");
        // Reads the request, then closes without an answer.
        let _ = std::io::Read::read(&mut s, &mut [0u8; 4096]);
    });
    let mut opts = ConnectOptions::new(addr);
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("connects");
    let dir = std::env::temp_dir().join(format!("tickwire-upload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.dat");
    std::fs::write(&path, b"some bytes").unwrap();
    let files = [Upload {
        name: "f.dat",
        path: &path,
    }];
    let got = send_files(&mut sub, "FILES", &files, &[], Duration::MAX, |_, _| {});
    node.join().unwrap();
    assert!(matches!(got, Err(ClientError::Disconnected(_))), "{got:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node that keeps saying "progress" without taking any more of an upload does not
/// hold the call past its time-out: only an answer that moves the upload on restarts
/// the wait.
#[test]
fn a_node_repeating_progress_without_taking_more_times_out() {
    use tickwire_files::wire::{FilesMessage, PutAnswer, PutState};
    use tickwire_proto::{FrameWriter, Message};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let node = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        fake_node::welcome_the_login(&mut s, Duration::from_millis(200), 30_000, 1 << 20, "n");
        let mut body = Vec::new();
        FilesMessage::PutAnswer(PutAnswer {
            request: 1,
            state: PutState::Progress,
            transfer: 7,
            received: 0,
            window: 0,
            reason: "",
        })
        .encode(&mut body)
        .unwrap();
        let mut w = FrameWriter::new(1 << 20);
        w.push(&Message::Files(&body)).unwrap();
        let frame = w.sealed_bytes().to_vec();
        // The same answer every 50 ms, for 20 s at most, until the client goes.
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if std::io::Write::write_all(&mut s, &frame).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let mut opts = ConnectOptions::new(addr);
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("connects");
    let dir = std::env::temp_dir().join(format!("tickwire-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.dat");
    std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
    let files = [Upload {
        name: "f.dat",
        path: &path,
    }];
    let timeout = Duration::from_millis(500);
    let got = send_files(&mut sub, "FILES", &files, &[], timeout, |_, _| {});
    assert!(matches!(got, Err(ClientError::Timeout(_))), "{got:?}");
    drop(sub);
    node.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
