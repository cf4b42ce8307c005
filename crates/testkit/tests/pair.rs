//! A publisher session, a node's core and a subscriber session on one fake clock.

use std::time::Duration;
use tickwire_client::{Event, RequestOptions};
use tickwire_core::CoreConfig;
use tickwire_proto::{encode_field_list, DataState, FieldList, Real, UpdateType, Value};
use tickwire_testkit::{service, Net, PeerId};

fn bid(b: i64) -> Vec<u8> {
    encode_field_list([(22, Value::Real(Real::new(b, -2)))])
}

/// A node with FEED/TRI.N published and a subscriber watching it (its refresh taken).
fn watched(cfg: CoreConfig) -> (Net, PeerId, PeerId) {
    let mut net = Net::new(cfg);
    let feed = net.publisher(service("FEED"));
    let image = bid(10_000);
    net.publishing(feed)
        .publish_refresh("TRI.N", FieldList::decode(&image).unwrap())
        .unwrap();
    let sub = net.subscriber();
    net.drive();
    net.subscribing(sub)
        .subscribe("FEED", "TRI.N", RequestOptions::default())
        .unwrap();
    net.drive();
    let got = net.events(sub);
    assert!(
        got.iter()
            .any(|e| matches!(e, Event::Refresh { name, .. } if name == "TRI.N")),
        "{got:?}"
    );
    (net, feed, sub)
}

#[test]
fn a_publishers_updates_reach_a_subscriber_in_sequence_through_the_core() {
    let (mut net, feed, sub) = watched(CoreConfig::default());
    let id = net.publishing(feed).item("TRI.N").unwrap();
    for b in 1..=100 {
        let u = bid(10_000 + b);
        net.publishing(feed)
            .publish_update(id, UpdateType::Quote, FieldList::decode(&u).unwrap(), false)
            .unwrap();
    }
    net.drive();
    let seqs: Vec<u32> = net
        .events(sub)
        .into_iter()
        .filter_map(|e| match e {
            Event::Update { seq, fields, .. } => {
                assert!(fields.get(22).is_some());
                Some(seq)
            }
            _ => None,
        })
        .collect();
    assert_eq!(seqs.len(), 100, "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
}

#[test]
fn a_hung_publisher_is_dropped_after_three_heartbeats_and_its_item_turns_suspect() {
    let mut cfg = CoreConfig::default();
    cfg.limits.heartbeat = Duration::from_secs(1);
    let (mut net, feed, sub) = watched(cfg);
    net.mute(feed, true);
    let hung_at = net.now();
    // Step from deadline to deadline until the subscriber is told.
    let told = loop {
        net.step();
        let suspect = net
            .events(sub)
            .into_iter()
            .any(|e| matches!(&e, Event::Status { state, .. } if state.data == DataState::Suspect));
        if suspect {
            break net.now() - hung_at;
        }
        assert!(net.now() - hung_at < Duration::from_secs(60), "never told");
    };
    // Three heartbeat intervals of silence, checked at the node's next tick.
    assert!(
        told >= Duration::from_secs(3) && told <= Duration::from_secs(4),
        "told after {told:?}"
    );
    // The node closed the hung publisher's connection; the publisher was told.
    let told_feed = net.publisher_events(feed);
    assert!(
        told_feed
            .iter()
            .any(|e| matches!(e, tickwire_client::PublisherEvent::Disconnected { .. })),
        "{told_feed:?}"
    );
}

#[test]
fn a_cut_subscriber_reconnects_after_its_back_off_and_gets_its_item_again() {
    let (mut net, _feed, sub) = watched(CoreConfig::default());
    net.disconnect(sub);
    let cut_at = net.now();
    let lost = net.events(sub);
    assert!(
        lost.iter().any(|e| matches!(e, Event::Status { .. })),
        "the stream is told of the lost connection: {lost:?}"
    );
    let again = loop {
        net.step();
        if net
            .events(sub)
            .iter()
            .any(|e| matches!(e, Event::Refresh { name, .. } if name == "TRI.N"))
        {
            break net.now() - cut_at;
        }
        assert!(
            net.now() - cut_at < Duration::from_secs(60),
            "never re-imaged"
        );
    };
    // The first retry waits the back-off's minimum (100 ms, give or take its jitter).
    assert!(
        again >= Duration::from_millis(50) && again <= Duration::from_secs(1),
        "{again:?}"
    );
    assert_eq!(net.subscribing(sub).reconnects(), 1);
}

#[test]
fn a_publisher_refused_for_a_taken_service_retries_with_doubling_delays() {
    let mut net = Net::new(CoreConfig::default());
    let _first = net.publisher(service("FEED"));
    net.drive();
    let second = net.publisher(service("FEED"));
    net.drive();
    // When each refusal reached the second publisher, over 5 s of fake time.
    let start = net.now();
    let mut refused_at = Vec::new();
    while net.now() - start < Duration::from_secs(5) && net.ended(second).is_none() {
        for e in net.publisher_events(second) {
            if let tickwire_client::PublisherEvent::Disconnected { reason } = e {
                assert!(reason.contains("already published"), "{reason}");
                refused_at.push(net.now() - start);
            }
        }
        net.step();
    }
    assert!(
        net.ended(second).is_none(),
        "a refused publisher keeps trying"
    );
    // Delays doubling from 100 ms (with jitter): about 6 tries in 5 s, not 50.
    assert!(
        (4..=10).contains(&refused_at.len()),
        "refused at {refused_at:?}"
    );
    let gaps: Vec<Duration> = refused_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0]),
        "the delays grow: {gaps:?}"
    );
}
