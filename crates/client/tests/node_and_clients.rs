//! The client library against a real node over TCP on 127.0.0.1: cache on and off,
//! interactive and non-interactive publishers, snapshot, view, close, publisher loss and
//! return, subscriber reconnect. Every wait is bounded.

use std::time::{Duration, Instant};
use tickwire_client::{
    ConnectOptions, Event, OwnedState, Publisher, PublisherEvent, PublisherOptions, RequestOptions,
    Subscriber,
};
use tickwire_node::{CacheMode, NodeConfig, NodeServer, RunningNode};
use tickwire_proto::{
    code, encode_field_list, DataState, FieldList, Real, StreamState, UpdateType, Value,
};

const WAIT: Duration = Duration::from_secs(10);

fn start_node(cache: CacheMode) -> RunningNode {
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.node.cache = cache;
    cfg.node.stats_interval_s = 0;
    NodeServer::spawn(cfg).expect("node starts")
}

fn opts(node: &RunningNode) -> ConnectOptions {
    let mut o = ConnectOptions::new(node.addr.to_string());
    o.backoff_min = Duration::from_millis(20);
    o.backoff_max = Duration::from_millis(200);
    o
}

fn publisher(node: &RunningNode, interactive: bool) -> Publisher {
    Publisher::connect(PublisherOptions {
        interactive,
        ..PublisherOptions::new(opts(node), "FEED")
    })
    .expect("publisher connects")
}

fn quote(bid: i64) -> Vec<u8> {
    encode_field_list([
        (22, Value::Real(Real::new(bid, -2))),
        (25, Value::Real(Real::new(bid + 1, -2))),
    ])
}

/// Waits for the first event matching `pred`, driving `publisher` meanwhile.
fn wait_for(
    sub: &mut Subscriber,
    mut publisher: Option<&mut Publisher>,
    mut pred: impl FnMut(&Event) -> bool,
) -> Event {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if let Some(p) = publisher.as_deref_mut() {
            p.dispatch(Duration::ZERO).unwrap();
            p.flush(Duration::from_secs(1)).unwrap();
        }
        if let Some(e) = sub.next_event(Duration::from_millis(20)).unwrap() {
            if pred(&e) {
                return e;
            }
        }
    }
    panic!("no matching event within {WAIT:?}");
}

fn bid_of(e: &Event) -> Option<String> {
    match e {
        Event::Refresh { fields, .. } | Event::Update { fields, .. } => {
            fields.get(22).map(|v| v.to_string())
        }
        _ => None,
    }
}

/// Publishes one item and waits until the node has it (a snapshot answers).
fn publish_and_wait(node: &RunningNode, p: &mut Publisher, name: &str, bid: i64) {
    let img = quote(bid);
    p.publish_refresh(name, FieldList::decode(&img).unwrap())
        .unwrap();
    p.flush(WAIT).unwrap();
    let mut probe = Subscriber::connect(opts(node)).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "node never got {name}");
        probe
            .subscribe(
                "FEED",
                name,
                RequestOptions {
                    snapshot: true,
                    view: None,
                    ..Default::default()
                },
            )
            .unwrap();
        let e = wait_for(&mut probe, Some(p), |e| {
            matches!(e, Event::Refresh { .. } | Event::Status { .. })
        });
        if matches!(e, Event::Refresh { .. }) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn updates_flow(cache: CacheMode) {
    let node = start_node(cache);
    let mut p = publisher(&node, false);
    publish_and_wait(&node, &mut p, "SYM0", 10000);
    let id = p.item("SYM0").unwrap();
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    let sid = sub
        .subscribe("FEED", "SYM0", RequestOptions::default())
        .unwrap();
    let refresh = wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    let Event::Refresh {
        stream,
        seq: base,
        state,
        ..
    } = &refresh
    else {
        unreachable!()
    };
    assert_eq!(*stream, sid);
    assert_eq!(state.stream, StreamState::Open);
    assert_eq!(bid_of(&refresh).as_deref(), Some("100.00"));
    for i in 1..=50 {
        let u = quote(10000 + i);
        p.publish_update(id, UpdateType::Quote, FieldList::decode(&u).unwrap(), false)
            .unwrap();
    }
    p.flush(WAIT).unwrap();
    // Every update arrives, in order, with consecutive sequence numbers.
    for i in 1..=50 {
        let e = wait_for(&mut sub, Some(&mut p), |e| {
            matches!(e, Event::Update { .. })
        });
        let Event::Update { seq, .. } = &e else {
            unreachable!()
        };
        assert_eq!(*seq, base + i as u32, "update {i}");
        assert_eq!(bid_of(&e), Some(Real::new(10000 + i, -2).to_string()));
    }
    drop(sub);
    node.stop().unwrap();
}

#[test]
fn cache_on_refresh_then_every_update_in_sequence() {
    updates_flow(CacheMode::On);
}

#[test]
fn cache_off_refresh_comes_from_the_publisher_then_every_update() {
    updates_flow(CacheMode::Off);
}

#[test]
fn interactive_publisher_answers_requests_and_hears_closes() {
    let node = start_node(CacheMode::On);
    let mut p = publisher(&node, true);
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    // Wait for the service to be announced before asking for items.
    let deadline = Instant::now() + WAIT;
    while !sub.directory().contains_key("FEED") {
        assert!(Instant::now() < deadline);
        p.dispatch(Duration::ZERO).unwrap();
        sub.dispatch(Duration::from_millis(20), |_| {}).unwrap();
    }
    let sid = sub
        .subscribe("FEED", "ON.DEMAND", RequestOptions::default())
        .unwrap();
    sub.flush(WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    let name = loop {
        assert!(Instant::now() < deadline, "publisher never asked");
        let evs = p.dispatch(Duration::from_millis(20)).unwrap();
        if let Some(PublisherEvent::Request { name }) = evs.into_iter().next() {
            break name;
        }
    };
    assert_eq!(name, "ON.DEMAND");
    let img = quote(777);
    let id = p
        .publish_refresh(&name, FieldList::decode(&img).unwrap())
        .unwrap();
    p.flush(WAIT).unwrap();
    let e = wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    assert_eq!(bid_of(&e).as_deref(), Some("7.77"));
    assert!(p.is_open(id));
    sub.unsubscribe(sid).unwrap();
    sub.flush(WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(
            Instant::now() < deadline,
            "publisher never told of the close"
        );
        let evs = p.dispatch(Duration::from_millis(20)).unwrap();
        if evs.contains(&PublisherEvent::Closed { item: id }) {
            break;
        }
    }
    assert!(!p.is_open(id));
    // An item the publisher does not know is refused with a reason.
    sub.subscribe("FEED", "NOPE", RequestOptions::default())
        .unwrap();
    sub.flush(WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline);
        for ev in p.dispatch(Duration::from_millis(20)).unwrap() {
            if let PublisherEvent::Request { name } = ev {
                p.reject_request(&name, "no such instrument").unwrap();
                p.flush(WAIT).unwrap();
            }
        }
        if let Some(Event::Status { state, name, .. }) =
            sub.next_event(Duration::from_millis(20)).unwrap()
        {
            assert_eq!(name, "NOPE");
            assert_eq!(state.stream, StreamState::Closed);
            assert_eq!(state.text, "no such instrument");
            break;
        }
    }
    node.stop().unwrap();
}

#[test]
fn snapshot_and_view() {
    let node = start_node(CacheMode::On);
    let mut p = publisher(&node, false);
    publish_and_wait(&node, &mut p, "SYM1", 5000);
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    sub.subscribe(
        "FEED",
        "SYM1",
        RequestOptions {
            snapshot: true,
            view: None,
            ..Default::default()
        },
    )
    .unwrap();
    let e = wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    let Event::Refresh { state, .. } = e else {
        unreachable!()
    };
    assert_eq!(state.stream, StreamState::NonStreaming);
    assert_eq!(
        sub.open_streams(),
        0,
        "a snapshot stream ends with its refresh"
    );

    sub.subscribe(
        "FEED",
        "SYM1",
        RequestOptions {
            snapshot: false,
            view: Some(vec![25]),
            ..Default::default()
        },
    )
    .unwrap();
    let e = wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    let Event::Refresh { fields, .. } = e else {
        unreachable!()
    };
    assert_eq!(fields.iter().map(|(f, _)| f).collect::<Vec<_>>(), vec![25]);
    let id = p.item("SYM1").unwrap();
    let u = quote(5001);
    p.publish_update(id, UpdateType::Quote, FieldList::decode(&u).unwrap(), false)
        .unwrap();
    p.flush(WAIT).unwrap();
    let e = wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Update { .. })
    });
    let Event::Update { fields, .. } = e else {
        unreachable!()
    };
    assert_eq!(
        fields
            .iter()
            .map(|(f, v)| (f, v.to_string()))
            .collect::<Vec<_>>(),
        vec![(25, "50.02".to_string())]
    );
    node.stop().unwrap();
}

#[test]
fn publisher_lost_turns_suspect_and_its_return_makes_streams_ok() {
    let node = start_node(CacheMode::On);
    let mut p = publisher(&node, false);
    publish_and_wait(&node, &mut p, "SYM2", 100);
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    sub.subscribe("FEED", "SYM2", RequestOptions::default())
        .unwrap();
    wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    drop(p);
    let e = wait_for(&mut sub, None, |e| matches!(e, Event::Status { .. }));
    let Event::Status { state, .. } = e else {
        unreachable!()
    };
    assert_eq!(
        (state.stream, state.data, state.code),
        (StreamState::Open, DataState::Suspect, code::PUBLISHER_GONE)
    );
    let mut p2 = publisher(&node, false);
    let img = quote(200);
    p2.publish_refresh("SYM2", FieldList::decode(&img).unwrap())
        .unwrap();
    p2.flush(WAIT).unwrap();
    let e = wait_for(&mut sub, Some(&mut p2), |e| {
        matches!(e, Event::Refresh { .. })
    });
    let Event::Refresh {
        state, solicited, ..
    } = &e
    else {
        unreachable!()
    };
    assert_eq!(state.data, DataState::Ok);
    assert!(!solicited);
    assert_eq!(bid_of(&e).as_deref(), Some("2.00"));
    node.stop().unwrap();
}

/// A publisher and a subscriber of `item` (its BID `bid` / 100) whose node went away
/// and came back on the same address, before either was polled again: the subscriber
/// saw its stream go suspect.
fn node_lost_and_back(item: &str, bid: i64) -> (Publisher, Subscriber, RunningNode) {
    let node = start_node(CacheMode::On);
    let addr = node.addr;
    let mut p = publisher(&node, false);
    publish_and_wait(&node, &mut p, item, bid);
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    sub.subscribe("FEED", item, RequestOptions::default())
        .unwrap();
    wait_for(&mut sub, Some(&mut p), |e| {
        matches!(e, Event::Refresh { .. })
    });
    // The node goes away: the stream is told (closed-recover from the shutdown, or
    // suspect from the client when the socket drops).
    node.stop().unwrap();
    let e = wait_for(&mut sub, None, |e| matches!(e, Event::Status { .. }));
    let Event::Status {
        state: OwnedState { data, .. },
        ..
    } = e
    else {
        unreachable!()
    };
    assert_eq!(data, DataState::Suspect);
    let mut cfg = NodeConfig::default();
    cfg.node.listen = addr;
    cfg.node.stats_interval_s = 0;
    let back = NodeServer::spawn(cfg).expect("rebind the same port");
    (p, sub, back)
}

/// Polls both with a zero timeout, as a busy application would, until the
/// subscriber's refresh comes again; its BID.
fn bid_on_the_new_connection(p: &mut Publisher, sub: &mut Subscriber) -> Option<String> {
    let deadline = Instant::now() + WAIT;
    let mut bid = None;
    while bid.is_none() {
        assert!(
            Instant::now() < deadline,
            "no refresh after the node came back"
        );
        p.dispatch(Duration::ZERO).unwrap();
        p.flush(Duration::from_secs(1)).unwrap();
        sub.dispatch(Duration::ZERO, |e| {
            if let tickwire_client::EventRef::Refresh(_, r) = e {
                bid = r
                    .fields
                    .iter()
                    .find(|(id, _)| *id == 22)
                    .map(|(_, v)| v.to_string());
            }
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    bid
}

#[test]
fn subscriber_reconnects_and_requests_its_watchlist_again() {
    let (mut p, mut sub, node2) = node_lost_and_back("SYM3", 300);
    // Both clients reconnect by themselves.
    let bid = bid_on_the_new_connection(&mut p, &mut sub);
    assert_eq!(bid.as_deref(), Some("3.00"));
    assert!(sub.reconnects() >= 1);
    assert!(p.reconnects() >= 1);
    node2.stop().unwrap();
}

/// A reconnect taken out of the subscriber (made by a caller that must not hold it
/// meanwhile, as the Python binding's lock) is made by its taker alone: the
/// subscriber's own calls neither reconnect nor hand out a second one until its
/// outcome comes back; then the new connection serves the watchlist again.
#[test]
fn a_reconnect_taken_out_is_made_by_its_taker_alone() {
    let (mut p, mut sub, node2) = node_lost_and_back("SYM4", 400);
    let deadline = Instant::now() + WAIT;
    let reconnect = loop {
        assert!(Instant::now() < deadline, "no reconnect became due");
        if let Some(r) = sub.take_reconnect() {
            break r;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // Out with its taker: the subscriber waits, it does not connect by itself.
    assert!(sub.take_reconnect().is_none());
    sub.dispatch(Duration::from_millis(200), |_| {}).unwrap();
    assert!(!sub.is_connected());
    sub.finish_reconnect(reconnect.connect()).unwrap();
    assert!(sub.is_connected());
    // The watchlist is asked again on the new connection; the publisher reconnects too.
    let bid = bid_on_the_new_connection(&mut p, &mut sub);
    assert_eq!(bid.as_deref(), Some("4.00"));
    assert_eq!(sub.reconnects(), 1);
    node2.stop().unwrap();
}

/// A subscriber told to leave its reconnects to its caller never makes one in a call
/// (one that came due returns the call early), however long it is driven with the node
/// back: the caller takes it, and it is made there.
#[test]
fn a_subscriber_leaving_reconnects_to_its_caller_never_makes_one_itself() {
    let (_p, mut sub, node2) = node_lost_and_back("SYM5", 500);
    sub.reconnect_when_taken_only();
    let deadline = Instant::now() + WAIT;
    let reconnect = loop {
        assert!(Instant::now() < deadline, "no reconnect became due");
        sub.dispatch(Duration::from_millis(50), |_| {}).unwrap();
        assert!(!sub.is_connected(), "it reconnected by itself");
        if let Some(r) = sub.take_reconnect() {
            break r;
        }
    };
    sub.finish_reconnect(reconnect.connect()).unwrap();
    assert!(sub.is_connected());
    node2.stop().unwrap();
}

/// A node that stops while a snapshot waits for its image ends the stream
/// (closed-recover), then the connection (a status on stream 0), then closes the
/// socket. A dispatch waiting with a long time-out meanwhile returns those statuses
/// as soon as they are read, not at its time-out after trying to reconnect to the
/// stopped node all along (the reconnects go on in the next calls).
#[test]
fn a_stopping_nodes_last_statuses_end_a_long_dispatch_at_once() {
    let node = start_node(CacheMode::On);
    // Interactive, and it never answers: the snapshot waits at the node.
    let mut p = publisher(&node, true);
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    let deadline = Instant::now() + WAIT;
    while !sub.directory().contains_key("FEED") {
        assert!(Instant::now() < deadline, "FEED never announced");
        p.dispatch(Duration::ZERO).unwrap();
        sub.dispatch(Duration::from_millis(20), |_| {}).unwrap();
    }
    let snapshot = RequestOptions {
        snapshot: true,
        ..Default::default()
    };
    let sid = sub.subscribe("FEED", "NEVER.ANSWERED", snapshot).unwrap();
    sub.flush(WAIT).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "the publisher was never asked");
        let evs = p.dispatch(Duration::from_millis(20)).unwrap();
        if evs
            .iter()
            .any(|e| matches!(e, PublisherEvent::Request { .. }))
        {
            break;
        }
    }
    assert_eq!(sub.open_streams(), 1);

    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        node.stop()
    });
    let long = Duration::from_secs(60);
    let start = Instant::now();
    let mut got = Vec::new();
    // A few calls at most: anything else the node sent first ends one early.
    for _ in 0..10 {
        sub.dispatch(long, |e| got.push(Event::from(&e))).unwrap();
        if sub.open_streams() == 0 || start.elapsed() >= long {
            break;
        }
    }
    let took = start.elapsed();
    stopper.join().unwrap().unwrap();
    assert!(
        took < Duration::from_secs(20),
        "the node's last statuses came after {took:?} (time-out {long:?}): {got:?}"
    );
    // The last status of the stream (its publisher's leaving may come first).
    let ended = got.iter().rev().find_map(|e| match e {
        Event::Status { stream, state, .. } if *stream == sid => Some(state),
        _ => None,
    });
    let ended = ended.unwrap_or_else(|| panic!("no status for the snapshot: {got:?}"));
    assert_eq!(
        (ended.stream, ended.code),
        (StreamState::ClosedRecover, code::SHUTDOWN),
        "{got:?}"
    );
    assert_eq!(sub.open_streams(), 0);
    drop(p);
}

/// 100,000 images (about 5 MB) pushed in one burst while the service is down, then the
/// service goes up: every image is taken in and the last one is served. (A node that
/// stopped reading a connection after one loop turn's share once made this slow, not
/// wrong; the performance lab, not this test, is the guard against slowness.)
#[test]
fn a_burst_of_100k_images_is_fully_served() {
    let node = start_node(CacheMode::On);
    let mut p = Publisher::connect(PublisherOptions {
        start_down: true,
        ..PublisherOptions::new(opts(&node), "FEED")
    })
    .unwrap();
    let mut buf = Vec::new();
    for i in 0..100_000i64 {
        buf.clear();
        buf.extend_from_slice(&quote(i));
        p.publish_refresh(&format!("SYM{i}"), FieldList::decode(&buf).unwrap())
            .unwrap();
    }
    p.set_service_up(true).unwrap();
    p.flush(WAIT).expect("the node reads everything");
    let mut sub = Subscriber::connect(opts(&node)).unwrap();
    for name in ["SYM0", "SYM50000", "SYM99999"] {
        sub.subscribe("FEED", name, RequestOptions::default())
            .unwrap();
    }
    let mut bids = Vec::new();
    while bids.len() < 3 {
        // Held requests show open/suspect ("service down") first; closed would be wrong.
        let e = wait_for(&mut sub, Some(&mut p), |e| match e {
            Event::Refresh { .. } => true,
            Event::Status { state, .. } => state.stream != StreamState::Open,
            _ => false,
        });
        assert!(matches!(e, Event::Refresh { .. }), "{e:?}");
        bids.push(bid_of(&e).unwrap());
    }
    assert_eq!(bids, vec!["0.00", "500.00", "999.99"]);
    node.stop().unwrap();
}

/// An application that processes each event slowly, and asked for conflation: the
/// library reads only as fast as the application, so the backlog waits at the node,
/// which merges it; the application sees conflated updates, loses no update (each
/// one's sequence number follows the previous by its conflation count) and ends on
/// the publisher's last values.
#[test]
fn a_slow_application_sees_conflated_updates_and_ends_on_the_latest_values() {
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.node.stats_interval_s = 0;
    cfg.limits.socket_send_buffer_bytes = 65536;
    cfg.slow_consumer.conflate_above_bytes = 16 * 1024;
    let node = NodeServer::spawn(cfg).expect("node starts");
    const ITEMS: i64 = 10;
    const UPDATES: i64 = 20_000;
    let mut p = publisher(&node, false);
    for i in 0..ITEMS {
        publish_and_wait(&node, &mut p, &format!("SYM{i}"), 100);
    }
    let mut o = opts(&node);
    o.slow_consumer = Some(tickwire_proto::SlowConsumerPolicy::Conflate);
    o.receive_buffer_bytes = Some(32 * 1024);
    let mut sub = Subscriber::connect(o).unwrap();
    for i in 0..ITEMS {
        sub.subscribe("FEED", &format!("SYM{i}"), RequestOptions::default())
            .unwrap();
    }
    let mut refreshes = 0;
    while refreshes < ITEMS {
        if let Event::Refresh { .. } = wait_for(&mut sub, Some(&mut p), |_| true) {
            refreshes += 1;
        }
    }
    let feed = std::thread::spawn(move || {
        for k in 0..UPDATES {
            let name = format!("SYM{}", k % ITEMS);
            let id = p.item(&name).expect("published");
            let q = quote(1_000 + k);
            p.publish_update(id, UpdateType::Quote, FieldList::decode(&q).unwrap(), false)
                .unwrap();
            if k % 100 == 0 {
                p.flush(WAIT).unwrap();
            }
        }
        p.flush(WAIT).unwrap();
        p
    });
    let last_bid = |i: i64| Real::new(1_000 + UPDATES - ITEMS + i, -2).to_string();
    let mut seq = std::collections::HashMap::new();
    let mut done = std::collections::HashSet::new();
    let (mut events, mut conflated, mut represented) = (0u64, 0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.len() < ITEMS as usize {
        assert!(
            Instant::now() < deadline,
            "the slow application never caught up"
        );
        let Some(e) = sub.next_event(Duration::from_millis(100)).unwrap() else {
            continue;
        };
        if let Event::Update {
            name,
            seq: s,
            conflation_count,
            fields,
            ..
        } = &e
        {
            events += 1;
            represented += u64::from(*conflation_count);
            if *conflation_count > 1 {
                conflated += 1;
            }
            if let Some(prev) = seq.insert(name.clone(), *s) {
                assert_eq!(*s, prev + u32::from(*conflation_count), "{name}: a gap");
            }
            let i: i64 = name[3..].parse().unwrap();
            if fields.get(22).map(|v| v.to_string()) == Some(last_bid(i)) {
                done.insert(i);
            }
            // The application's own work: slow.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    let _p = feed.join().unwrap();
    assert!(conflated > 0, "no conflated update in {events} events");
    assert_eq!(represented, UPDATES as u64, "every update accounted for");
    assert!(
        events < UPDATES as u64,
        "{events} events for {UPDATES} updates"
    );
}
