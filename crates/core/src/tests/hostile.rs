//! One peer must not be able to freeze, bloat or empty the node: directory floods,
//! huge directories, services that never go, connections that never log in, peers
//! that send and never read, thousands of streams on one item.

use super::*;

fn announce(h: &mut Harness, p: ConnId, names: &[String], up: bool) {
    h.send(p, &[directory(names.iter().map(|n| (n.as_str(), up)))]);
}

/// Logs in and returns what followed the Welcome (the directory).
fn login_seeing(h: &mut Harness, role: Role) -> (ConnId, Vec<Got>) {
    let c = h.connect_with(client_login(role, "u", ""));
    let mut got = h.recv(c);
    assert!(matches!(got.first(), Some(Got::Welcome { .. })), "{got:?}");
    got.remove(0);
    (c, got)
}

fn directory_entries(got: &[Got]) -> Vec<(String, bool)> {
    got.iter()
        .flat_map(|g| match g {
            Got::Directory(d) => d.clone(),
            _ => vec![],
        })
        .collect()
}

#[test]
fn directory_changes_go_out_as_deltas_and_repeats_send_nothing() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let (sub, got) = login_seeing(&mut h, Role::Subscriber);
    assert_eq!(got, vec![dir(&[("FEED", true)])]);
    // The same announcement again and again changes nothing: nothing is sent.
    for _ in 0..1000 {
        announce(&mut h, p, &[s("FEED")], true);
    }
    assert_eq!(h.recv(sub), vec![]);
    // A second service: only it is sent.
    let p2 = h.publisher("NEWS", false);
    assert_eq!(h.recv(sub), vec![dir(&[("NEWS", true)])]);
    // Its publisher leaves: only its entry, now down.
    h.node.on_disconnect(p2, h.now);
    assert_eq!(h.recv(sub), vec![dir(&[("NEWS", false)])]);
    assert_eq!(h.recv(p), vec![]);
}

#[test]
fn a_directory_flood_cannot_fill_a_subscribers_queue() {
    let mut h = slow_harness(true, SlowConsumerPolicy::Conflate);
    let p = h.publisher("FEED", false);
    let others: Vec<String> = (0..50).map(|i| format!("SVC{i:04}")).collect();
    announce(&mut h, p, &others, true);
    let idle = h.login(Role::Subscriber); // never reads
    let max = h.node.config().limits.max_output_bytes;
    let mut most = 0;
    // Every announcement flips every service: each one is a real change.
    for round in 0..2_000 {
        announce(&mut h, p, &others, round % 2 == 1);
        most = most.max(h.node.pending_output(idle));
    }
    assert!(
        most < max / 2,
        "{most} bytes queued for an idle subscriber (hard bound {max})"
    );
    assert_eq!(h.node.stats().slow_consumer_disconnects, 0);
    // Once it reads, it gets the directory as it is now (the last round: all up).
    let got = h.read_all(idle);
    let mut last: std::collections::BTreeMap<String, bool> = Default::default();
    for (name, up) in directory_entries(&got) {
        last.insert(name, up);
    }
    assert_eq!(last.len(), 51);
    assert!(last.values().all(|up| *up), "{last:?}");
}

#[test]
fn a_directory_larger_than_one_message_is_sent_in_several() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    // 6,000 services of 40-byte names: about 290 KB of entries, over four times what
    // one message can carry.
    let names: Vec<String> = (0..6_000).map(|i| format!("{i:040}")).collect();
    for chunk in names.chunks(1_000) {
        announce(&mut h, p, chunk, true);
    }
    let (_, got) = login_seeing(&mut h, Role::Subscriber);
    let messages = got
        .iter()
        .filter(|g| matches!(g, Got::Directory(_)))
        .count();
    let entries = directory_entries(&got);
    assert!(messages >= 5, "{messages} directory messages");
    assert_eq!(entries.len(), 6_001);
    assert!(entries.iter().all(|(_, up)| *up));
}

#[test]
fn services_past_the_limit_and_overlong_names_are_refused_with_a_reason() {
    let mut h = Harness::with_limits(Limits {
        max_services: 3,
        ..Limits::default()
    });
    let p = h.publisher("A", false);
    announce(&mut h, p, &[s("B"), s("C")], true);
    announce(&mut h, p, &[s("D")], true);
    let got = h.recv(p);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::TOO_MANY_SERVICES, text, .. })
            if text.contains("3 services") && text.contains("limits.max_services")),
        "{got:?}"
    );
    let p = h.login(Role::Publisher);
    announce(&mut h, p, &["N".repeat(MAX_SERVICE_NAME + 1)], true);
    let got = h.recv(p);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::PROTOCOL, text, .. })
            if text.contains("257 bytes")),
        "{got:?}"
    );
}

#[test]
fn a_service_without_publisher_or_watcher_is_removed_after_its_retention() {
    let mut h = Harness::with_limits(Limits {
        service_retention: Duration::from_secs(60),
        heartbeat: Duration::from_secs(1000),
        ..Limits::default()
    });
    let img = bid_ask(1, 2);
    let image = |service: &'static str, name: &'static str, seq: u32| {
        let mut m = refresh(1, seq, name, &img, false);
        if let Message::Refresh(r) = &mut m {
            r.service = service;
        }
        m
    };
    let gone = h.publisher("GONE", false);
    let m = image("GONE", "X", 1);
    h.send(gone, &[m]);
    let kept = h.publisher("KEPT", false);
    let m = image("KEPT", "Y", 1);
    h.send(kept, &[m]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 1, "KEPT", "Y", true, None);
    h.recv(sub);
    h.node.on_disconnect(gone, h.now);
    h.node.on_disconnect(kept, h.now);
    h.recv(sub);
    h.now += Duration::from_secs(59);
    h.node.handle_timeout(h.now);
    assert!(!h.recv(sub).iter().any(|g| matches!(g, Got::Removed(_))));
    h.now += Duration::from_secs(2);
    h.node.handle_timeout(h.now);
    // KEPT has a stream open on it: it stays, suspect, waiting for its publisher.
    let got = h.recv(sub);
    assert!(got.contains(&Got::Removed(vec![s("GONE")])), "{got:?}");
    assert_eq!(h.node.item_count(), 1);
    let services: Vec<String> = h.node.services().into_iter().map(|s| s.0).collect();
    assert_eq!(services, vec![s("KEPT")]);
    // The service that moved into the removed one's place still works.
    let back = h.publisher("KEPT", false);
    let m = image("KEPT", "Y", 2);
    h.send(back, &[m]);
    let got = h.recv(sub);
    assert!(
        got.iter()
            .any(|g| matches!(g, Got::Refresh { sid: 1, seq: 2, .. })),
        "{got:?}"
    );
    let (_, got) = login_seeing(&mut h, Role::Subscriber);
    assert_eq!(got, vec![dir(&[("KEPT", true)])]);
}

#[test]
fn a_connection_that_never_logs_in_is_dropped_at_the_login_deadline() {
    let mut h = Harness::with_limits(Limits {
        login_timeout: Duration::from_secs(2),
        heartbeat: Duration::from_secs(1),
        ..Limits::default()
    });
    let c = h.node.connect("dribbler", h.now);
    assert_eq!(h.node.awaiting_login_count(), 1);
    // One byte every half second keeps it from being silent, never a login.
    for _ in 0..3 {
        h.now += Duration::from_millis(500);
        h.node.on_bytes_received(c, h.now);
        h.node.handle_timeout(h.now);
    }
    assert_eq!(h.recv(c), vec![]);
    h.now += Duration::from_millis(600);
    h.node.on_bytes_received(c, h.now);
    h.node.handle_timeout(h.now);
    let got = h.recv(c);
    assert!(
        matches!(&got[..], [Got::Status { sid: 0, code: code::TIMEOUT, text, .. }] if text.contains("no login within 2000 ms")),
        "{got:?}"
    );
    assert_eq!(h.node.awaiting_login_count(), 0);
    let ok = h.login(Role::Subscriber);
    assert_eq!(h.node.awaiting_login_count(), 0);
    h.node.on_disconnect(ok, h.now);
    assert_eq!(h.node.awaiting_login_count(), 0);
}

#[test]
fn pings_before_login_are_refused() {
    let mut h = Harness::new(true);
    let c = h.node.connect("pinger", h.now);
    h.send(c, &[Message::Ping(1), Message::Ping(2)]);
    let got = h.recv(c);
    assert!(
        matches!(&got[..], [Got::Status { sid: 0, code: code::PROTOCOL, text, .. }] if text.contains("login required")),
        "{got:?}"
    );
}

#[test]
fn a_publisher_that_pings_and_never_reads_is_dropped_at_the_hard_bound() {
    let mut h = Harness::with_limits(Limits {
        max_output_bytes: 64 * 1024,
        ..Limits::default()
    });
    let p = h.publisher("FEED", false);
    let pings: Vec<Message<'_>> = (0..1000).map(Message::Ping).collect();
    let mut most = 0;
    for _ in 0..20 {
        h.send(p, &pings);
        most = most.max(h.node.pending_output(p));
    }
    assert!(most <= 64 * 1024 + 16 * 1024, "{most} bytes queued");
    let got = h.recv(p);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::SLOW_CONSUMER, text, .. }) if text.contains("not reading")),
        "{:?}",
        got.last()
    );
}

#[test]
fn thousands_of_streams_on_one_item_open_and_close_in_any_order() {
    // Closing a stream finds it through its slot (O(1)); the stream moved into its
    // place must keep receiving, whichever connection it belongs to.
    let mut h = Harness::with_limits(Limits {
        max_streams_per_connection: 100_000,
        ..Limits::default()
    });
    let p = h.publisher_of(1, "SYM0", &bid_ask(1, 2));
    let a = h.login(Role::Subscriber);
    let b = h.login(Role::Subscriber);
    for sid in 1..=3_000 {
        h.request(a, sid, "FEED", "SYM0", true, None);
        h.request(b, sid, "FEED", "SYM0", true, None);
    }
    h.recv(a);
    h.recv(b);
    // Close a pseudo-random half of a's streams and every third of b's, one at a time.
    let mut x: u32 = 12345;
    let mut open_a: std::collections::BTreeSet<u32> = (1..=3_000).collect();
    for _ in 0..1_500 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let sid = 1 + (x >> 8) % 3_000;
        if open_a.remove(&sid) {
            h.send(a, &[Message::Close { stream_id: sid }]);
        }
    }
    let open_b: std::collections::BTreeSet<u32> = (1..=3_000).filter(|s| s % 3 != 0).collect();
    for sid in (1..=3_000).filter(|s| s % 3 == 0) {
        h.send(b, &[Message::Close { stream_id: sid }]);
    }
    let upd = bid_ask(3, 4);
    h.send(p, &[update(1, 2, &upd)]);
    let sids = |got: Vec<Got>| -> std::collections::BTreeSet<u32> {
        got.into_iter()
            .filter_map(|g| match g {
                Got::Update { sid, .. } => Some(sid),
                _ => None,
            })
            .collect()
    };
    assert_eq!(sids(h.recv(a)), open_a);
    assert_eq!(sids(h.recv(b)), open_b);
    // The whole connection goes: b's streams alone remain.
    h.node.on_disconnect(a, h.now);
    h.send(p, &[update(1, 3, &upd)]);
    assert_eq!(sids(h.recv(b)), open_b);
    h.node.on_disconnect(b, h.now);
    assert_eq!(h.node.item_count(), 1, "the image stays cached");
}

#[test]
fn an_image_larger_than_a_queue_can_hold_is_refused_not_served() {
    // Hard bound 128 KiB: images up to 64 KiB are cached.
    let mut h = Harness::with_limits(Limits {
        max_output_bytes: 128 * 1024,
        ..Limits::default()
    });
    let p = h.publisher("FEED", false);
    let text = "x".repeat(40_000);
    let half = encode_field_list([(1000, Value::Ascii(&text))]);
    h.send(p, &[refresh(1, 1, "BIG", &half, false)]);
    let sub = h.subscriber_to(1, "BIG");
    assert!(h
        .recv(sub)
        .iter()
        .any(|g| matches!(g, Got::Refresh { sid: 1, .. })));
    // An update doubles it past the limit: the item goes, with the reason.
    let more = encode_field_list([(1001, Value::Ascii(&text))]);
    h.send(p, &[update(1, 2, &more)]);
    let got = h.recv(sub);
    assert!(
        matches!(&got[..], [Got::Status { sid: 1, stream: StreamState::Closed, code: code::TOO_LARGE, text, .. }]
            if text.contains("FEED/BIG") && text.contains("at most 65536")),
        "{got:?}"
    );
    assert!(h.recv(p).contains(&Got::Close { sid: 1 }));
    // A too large image pushed again is refused the same way, and nobody is ever
    // dropped as a slow consumer.
    h.send(p, &[refresh(1, 3, "BIG", &half, false)]);
    assert_eq!(h.node.item_count(), 1);
    h.send(p, &[update(1, 4, &more)]);
    assert!(h.recv(p).contains(&Got::Close { sid: 1 }));
    assert_eq!(h.node.item_count(), 0);
    assert_eq!(h.node.stats().slow_consumer_disconnects, 0);
}

/// Connections accepted while the node was short of its connection limit (they are
/// not counted while waiting to log in) are held to it when they log in.
#[test]
fn logins_past_the_connection_limit_are_refused() {
    let mut h = Harness::with_limits(Limits {
        max_connections: 2,
        ..Limits::default()
    });
    let waiting: Vec<ConnId> = (0..3).map(|_| h.node.connect("test", h.now)).collect();
    for &c in &waiting {
        h.send(
            c,
            &[Message::Login(Login {
                version_max: 3,
                ..client_login(Role::Subscriber, "u", "")
            })],
        );
    }
    for &c in &waiting[..2] {
        let got = h.recv(c);
        assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    }
    let got = h.recv(waiting[2]);
    assert!(
        only_status(
            &got,
            code::TOO_MANY_CONNECTIONS,
            "connection limit reached: 2 connections"
        ),
        "{got:?}"
    );
    assert_eq!(h.node.logged_in_count(), 2);
}
