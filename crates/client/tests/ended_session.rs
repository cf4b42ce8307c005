//! A session that an error ended (its connection lost, `reconnect` off) never sends
//! again: every call that needs the node says so at once, rather than taking a
//! request that can never go (a subscribe whose refresh never comes). Real sockets on
//! 127.0.0.1; the "node" welcomes the login and hangs up.

mod fake_node;

use std::net::TcpListener;
use std::time::{Duration, Instant};
use tickwire_client::{
    ClientError, ConnectOptions, PublishError, Publisher, PublisherOptions, RequestOptions,
    Subscriber,
};
use tickwire_proto::{encode_field_list, FieldList, UpdateType, Value};

/// A node that welcomes one login and closes the connection.
fn welcome_and_hang_up() -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let node = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        fake_node::welcome_the_login(&mut s, Duration::from_secs(2), 30_000, 64 << 20, "brief");
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    (addr, node)
}

/// Calls `step` until it says the session ended, for 10 s at most.
fn until_ended(mut step: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !step() && Instant::now() < end {}
}

fn is_disconnected(e: &ClientError) -> bool {
    matches!(e, ClientError::Disconnected(_))
}

#[test]
fn an_ended_subscriber_refuses_what_needs_the_node() {
    let (addr, node) = welcome_and_hang_up();
    let mut opts = ConnectOptions::new(addr);
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("subscriber connects");
    node.join().unwrap();
    until_ended(|| {
        let _ = sub.next_event(Duration::from_millis(100));
        sub.is_ended()
    });
    assert!(sub.is_ended(), "the hang-up did not end the session");

    let got = sub.subscribe("FEED", "X", RequestOptions::default());
    assert!(
        got.as_ref().is_err_and(is_disconnected),
        "subscribe on an ended session: {got:?}"
    );
    assert_eq!(sub.open_streams(), 0, "the refused request was kept");
    let got = sub.flush(Duration::from_millis(100));
    assert!(
        got.as_ref().is_err_and(is_disconnected),
        "flush on an ended session: {got:?}"
    );
}

#[test]
fn an_ended_publisher_refuses_what_needs_the_node() {
    let (addr, node) = welcome_and_hang_up();
    let mut opts = PublisherOptions::new(ConnectOptions::new(addr), "FEED");
    opts.connect.reconnect = false;
    let mut p = Publisher::connect(opts).expect("publisher connects");
    node.join().unwrap();
    until_ended(|| {
        let _ = p.dispatch(Duration::from_millis(100));
        p.is_ended()
    });
    assert!(p.is_ended(), "the hang-up did not end the session");

    let ended = |r: Result<(), PublishError>| {
        matches!(r, Err(PublishError::Client(ClientError::Disconnected(_))))
    };
    let image = encode_field_list([(22, Value::Int(1))]);
    let refresh = p.publish_refresh("X", FieldList::from_trusted(&image));
    assert!(ended(refresh.map(|_| ())), "a refresh was taken");
    assert_eq!(p.item_count(), 0, "the refused refresh made an item");
    assert!(ended(p.set_service_up(false)), "a service state was taken");
    assert!(ended(p.write_pending()), "a write was taken");
    assert!(
        ended(p.publish_update(0, UpdateType::Quote, FieldList::from_trusted(&image), false)),
        "an update was taken"
    );
}

/// What the node sent before it closed the connection reaches `next_event` before the
/// error that ended the session: its last update and its reason, then the error.
#[test]
fn next_event_delivers_what_came_before_the_end_then_the_error() {
    use std::io::{Read, Write};
    use tickwire_proto::{FrameWriter, Message, State, Status, Update};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let node = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        fake_node::welcome_the_login(&mut s, Duration::from_secs(2), 30_000, 64 << 20, "brief");
        // Once the subscriber asked for its item: an update, then the end.
        rx.recv().unwrap();
        let _ = s.read(&mut [0u8; 4096]);
        let fields = encode_field_list([(22, Value::Int(1))]);
        let mut w = FrameWriter::new(1 << 20);
        w.push(&Message::Update(Update::new(
            1,
            7,
            UpdateType::Quote,
            FieldList::from_trusted(&fields),
        )))
        .unwrap();
        w.push(&Message::Status(Status {
            stream_id: 0,
            state: State::closed(tickwire_proto::code::SHUTDOWN, "going away"),
        }))
        .unwrap();
        s.write_all(w.sealed_bytes()).unwrap();
        let _ = s.shutdown(std::net::Shutdown::Both);
    });
    let mut opts = ConnectOptions::new(addr);
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("subscriber connects");
    sub.subscribe("FEED", "X", RequestOptions::default())
        .unwrap();
    sub.flush(Duration::from_secs(2)).unwrap();
    tx.send(()).unwrap();
    node.join().unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    let err = loop {
        assert!(Instant::now() < end, "no end: {got:?}");
        match sub.next_event(Duration::from_millis(100)) {
            Ok(Some(e)) => got.push(e),
            Ok(None) => {}
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            got.first(),
            Some(tickwire_client::Event::Update { seq: 7, .. })
        ),
        "{got:?}"
    );
    assert!(
        got.iter().any(|e| matches!(e, tickwire_client::Event::Status { stream: 0, state, .. } if state.text == "going away")),
        "{got:?}"
    );
    assert!(err.to_string().contains("going away"), "{err}");
}
