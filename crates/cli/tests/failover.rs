//! A client given a list of nodes: it connects to the first that answers (a node that
//! is down is skipped), and when its node is lost it reconnects to the next one, where
//! its streams are served again.

mod common;

use common::*;
use std::time::Duration;
use tickwire_client::proto::{DataState, StreamState};
use tickwire_client::{ConnectOptions, Event, RequestOptions, Subscriber};

const T: Duration = Duration::from_secs(30);

fn is_ok_refresh(e: &Event) -> bool {
    matches!(e, Event::Refresh { name, state, .. }
        if name == "SYM1" && state.stream == StreamState::Open && state.data == DataState::Ok)
}

#[test]
fn a_list_of_nodes_skips_one_that_is_down_and_fails_over_to_the_next() {
    let mut first = Node::start(&["--name", "first"]);
    let second = Node::start(&["--name", "second"]);
    let _feed1 = start_publisher(&first, "FEED", 3, 50, false);
    let _feed2 = start_publisher(&second, "FEED", 3, 50, false);
    let down = format!("127.0.0.1:{}", free_port_for_tests());
    let list = format!("{down}, tcp://{}, {}", first.addr, second.addr);
    let mut opts = ConnectOptions::new(list);
    opts.application = "failover-test".into();
    opts.connect_timeout = Duration::from_secs(5);
    opts.backoff_min = Duration::from_millis(50);
    opts.backoff_max = Duration::from_millis(500);
    let mut sub = Subscriber::connect(opts).expect("the list's second node answers");
    assert_eq!(
        sub.session().map(|s| s.node_name.as_str()),
        Some("first"),
        "the first node that answered"
    );
    sub.subscribe("FEED", "SYM1", RequestOptions::default())
        .unwrap();
    expect_event(
        &mut sub,
        T,
        "SYM1's image from the first node",
        is_ok_refresh,
    );

    // The first node goes: the stream turns suspect, then is served by the second.
    first.proc.kill();
    expect_event(&mut sub, T, "SYM1 suspect", |e| {
        matches!(e, Event::Status { name, state, .. }
            if name == "SYM1" && state.data == DataState::Suspect)
    });
    expect_event(
        &mut sub,
        T,
        "SYM1's image from the second node",
        is_ok_refresh,
    );
    assert_eq!(sub.session().map(|s| s.node_name.as_str()), Some("second"));
    expect_event(
        &mut sub,
        T,
        "an update from the second node",
        |e| matches!(e, Event::Update { name, .. } if name == "SYM1"),
    );
}

#[test]
fn when_no_node_of_the_list_answers_each_ones_reason_is_given() {
    let a = format!("127.0.0.1:{}", free_port_for_tests());
    let b = format!("127.0.0.1:{}", free_port_for_tests());
    let mut opts = ConnectOptions::new(format!("{a},{b}"));
    opts.connect_timeout = Duration::from_secs(2);
    let err = Subscriber::connect(opts)
        .err()
        .expect("nothing listens")
        .to_string();
    assert!(err.contains("no node of the list answered"), "{err}");
    assert!(err.contains(&a) && err.contains(&b), "{err}");
    // The command line takes lists too, and names a wrong scheme.
    let out = run(
        &[
            "subscribe",
            "--node",
            "ws://127.0.0.1:15000/WebSocket",
            "SYM1",
        ],
        Duration::from_secs(20),
    );
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("ws:// is not this client's protocol"),
        "{}",
        out.stderr
    );
}
