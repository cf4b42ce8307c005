//! Posts: routed to the service's publisher under the node's own number, answered to
//! the poster under the poster's, and always answered once when an answer was asked for.

use super::*;
use tickwire_proto::{Ack, Post};

fn harness(posts: PostServices) -> Harness {
    Harness::with_config(CoreConfig {
        posts,
        limits: Limits {
            heartbeat: Duration::from_secs(1),
            max_pending_posts: 2,
            post_timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..CoreConfig::default()
    })
}

/// `h` with a publisher of FEED with SYM0 on its stream 7, and a subscriber watching SYM0 on
/// its stream 42.
fn feed_and_watcher(mut h: Harness) -> (Harness, ConnId, ConnId) {
    let p = h.publisher_of(7, "SYM0", &bid_ask(10000, 10010));
    let sub = h.watcher_of(42, "SYM0");
    h.recv(p);
    (h, p, sub)
}

fn post<'a>(sid: u32, post_id: u32, service: &'a str, name: &'a str, f: &'a [u8]) -> Message<'a> {
    Message::Post(Post {
        stream_id: sid,
        post_id,
        ack: true,
        image: false,
        redelivered: false,
        service,
        name,
        fields: FieldList::decode(f).unwrap(),
    })
}

/// A post on the subscriber's stream 42 that asks for no answer.
fn post_without_ack(post_id: u32, f: &[u8]) -> Message<'_> {
    let Message::Post(p) = post(42, post_id, "", "", f) else {
        unreachable!()
    };
    Message::Post(Post { ack: false, ..p })
}

fn ack(post_id: u32, nak: Option<NakCode>, text: &str) -> Message<'_> {
    Message::Ack(Ack {
        stream_id: 7,
        post_id,
        nak,
        text,
    })
}

/// The node's number for the post the publisher just got.
fn forwarded(got: &[Got]) -> u32 {
    match got {
        [Got::Post { post_id, .. }] => *post_id,
        other => panic!("expected one post at the publisher, got {other:?}"),
    }
}

/// The one answer among what a subscriber got (directory changes may come with it).
fn nak_of(got: &[Got]) -> (NakCode, String) {
    let acks: Vec<&Got> = got
        .iter()
        .filter(|g| matches!(g, Got::Ack { .. }))
        .collect();
    match acks[..] {
        [Got::Ack {
            nak: Some(code),
            text,
            ..
        }] => (*code, text.clone()),
        _ => panic!("expected one nak, got {got:?}"),
    }
}

#[test]
fn an_on_stream_post_reaches_the_publisher_on_its_stream_and_its_ack_comes_back() {
    let (mut h, p, sub) = feed_and_watcher(harness(PostServices::from_list(&[s("FEED")])));
    let f = bid_ask(9990, 10000);
    h.send(sub, &[post(42, 1001, "", "", &f)]);
    let got = h.recv(p);
    let id = forwarded(&got);
    assert_eq!(
        got,
        vec![Got::Post {
            sid: 7,
            post_id: id,
            ack: true,
            redelivered: false,
            service: s("FEED"),
            name: s("SYM0"),
            fields: vec![(22, s("99.90")), (25, s("100.00"))],
        }]
    );
    assert!(h.recv(sub).is_empty(), "no answer before the publisher's");
    h.send(p, &[ack(id, None, "")]);
    assert_eq!(
        h.recv(sub),
        vec![Got::Ack {
            sid: 42,
            post_id: 1001,
            nak: None,
            text: s(""),
        }]
    );
    assert_eq!(h.node.stats().posts.acks_out, 1);
    // A second answer to the same post has nowhere to go.
    h.send(p, &[ack(id, None, "")]);
    assert!(h.recv(sub).is_empty());
    assert_eq!(h.node.stats().posts.acks_unmatched, 1);
}

#[test]
fn an_off_stream_post_names_its_item_and_the_publishers_nak_passes_through() {
    let (mut h, p, _) = feed_and_watcher(harness(PostServices::All));
    let poster = h.login(Role::Subscriber);
    h.recv(poster);
    let f = bid_ask(1, 2);
    h.send(poster, &[post(0, 5, "FEED", "NEW.ITEM", &f)]);
    let got = h.recv(p);
    let id = forwarded(&got);
    // Not an item the node knows: the publisher gets stream 0 and the names.
    assert!(
        matches!(&got[0], Got::Post { sid: 0, name, .. } if name == "NEW.ITEM"),
        "{got:?}"
    );
    h.send(p, &[ack(id, Some(NakCode::SymbolUnknown), "no such item")]);
    assert_eq!(
        h.recv(poster),
        vec![Got::Ack {
            sid: 0,
            post_id: 5,
            nak: Some(NakCode::SymbolUnknown),
            text: s("no such item"),
        }]
    );
}

#[test]
fn the_node_refuses_what_no_publisher_could_take_and_says_why() {
    let (mut h, p, sub) =
        feed_and_watcher(harness(PostServices::from_list(&[s("FEED"), s("GONE")])));
    let f = bid_ask(1, 2);
    let cases: Vec<(Message<'_>, NakCode, &str)> = vec![
        (
            post(43, 1, "", "", &f),
            NakCode::NotOpen,
            "stream 43 is not open",
        ),
        (
            post(0, 2, "", "SYM0", &f),
            NakCode::InvalidContent,
            "must name its service and item",
        ),
        (
            post(0, 3, "NOPE", "SYM0", &f),
            NakCode::SourceUnknown,
            "unknown service \"NOPE\"",
        ),
    ];
    for (msg, code, why) in cases {
        h.send(sub, &[msg]);
        let (got_code, text) = nak_of(&h.recv(sub));
        assert_eq!(got_code, code, "{text}");
        assert!(text.contains(why), "{text}");
    }
    // A service the node does not take posts for.
    let other = h.publisher("OTHER", false);
    h.send(sub, &[post(0, 4, "OTHER", "X", &f)]);
    let (code, text) = nak_of(&h.recv(sub));
    assert_eq!(code, NakCode::DeniedBySrc);
    assert!(text.contains("[posts] services"), "{text}");
    // A service whose publisher left.
    h.node.on_disconnect(other, h.now);
    let gone = h.publisher("GONE", false);
    h.node.on_disconnect(gone, h.now);
    h.send(sub, &[post(0, 5, "GONE", "X", &f)]);
    let (code, text) = nak_of(&h.recv(sub));
    assert_eq!(code, NakCode::SourceDown, "{text}");
    assert!(h.recv(p).is_empty(), "nothing reached the publisher");
    assert_eq!(h.node.stats().posts.naks_out, 5);
}

#[test]
fn an_unanswered_post_is_refused_at_its_deadline_and_the_core_asks_to_be_woken_for_it() {
    let (mut h, p, sub) = feed_and_watcher(harness(PostServices::All));
    let f = bid_ask(1, 2);
    h.node.handle_timeout(h.now);
    h.send(sub, &[post(42, 9, "", "", &f)]);
    forwarded(&h.recv(p));
    let deadline = h.now + Duration::from_millis(500);
    assert_eq!(h.node.poll_timeout(), Some(deadline));
    h.now = deadline - Duration::from_millis(1);
    h.node.handle_timeout(h.now);
    assert!(h.recv(sub).iter().all(|g| !matches!(g, Got::Ack { .. })));
    h.now = deadline;
    h.node.handle_timeout(h.now);
    let (code, text) = nak_of(&h.recv(sub));
    assert_eq!(code, NakCode::NoResponse);
    assert!(text.contains("500 ms"), "{text}");
    assert_eq!(h.node.stats().posts.post_timeouts, 1);
}

#[test]
fn posts_waiting_when_their_publisher_leaves_are_refused_in_order() {
    let (mut h, p, sub) = feed_and_watcher(harness(PostServices::All));
    let f = bid_ask(1, 2);
    h.send(
        sub,
        &[post(42, 1, "", "", &f), post(0, 2, "FEED", "SYM0", &f)],
    );
    assert_eq!(h.recv(p).len(), 2);
    h.node.on_disconnect(p, h.now);
    let acks: Vec<(u32, Option<NakCode>)> = h
        .recv(sub)
        .into_iter()
        .filter_map(|g| match g {
            Got::Ack { post_id, nak, .. } => Some((post_id, nak)),
            _ => None,
        })
        .collect();
    assert_eq!(
        acks,
        vec![
            (1, Some(NakCode::SourceDown)),
            (2, Some(NakCode::SourceDown))
        ]
    );
}

#[test]
fn a_poster_may_have_only_so_many_posts_waiting_and_a_gone_poster_gets_nothing() {
    let (mut h, p, sub) = feed_and_watcher(harness(PostServices::All));
    let f = bid_ask(1, 2);
    h.send(
        sub,
        &[
            post(42, 1, "", "", &f),
            post(42, 2, "", "", &f),
            post(42, 3, "", "", &f),
        ],
    );
    let ids: Vec<u32> = h
        .recv(p)
        .iter()
        .map(|g| match g {
            Got::Post { post_id, .. } => *post_id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids.len(), 2, "the third is not forwarded");
    let (code, text) = nak_of(&h.recv(sub));
    assert_eq!(code, NakCode::NoResources);
    assert!(text.contains("posts.max_pending"), "{text}");
    // An answer frees a place.
    h.send(p, &[ack(ids[0], None, "")]);
    h.send(sub, &[post(42, 4, "", "", &f)]);
    assert_eq!(h.recv(p).len(), 1);
    // The poster leaves; a new connection takes its id and must not get its answers.
    h.node.on_disconnect(sub, h.now);
    let next = h.login(Role::Subscriber);
    assert_eq!(next, sub, "the id is reused");
    h.recv(next);
    h.send(p, &[ack(ids[1], None, "")]);
    assert!(h.recv(next).is_empty());
}

// ---------------------------------------------------------------------------------------
// Journaled services: the harness plays the node's journal thread.
// ---------------------------------------------------------------------------------------

fn journaled() -> Harness {
    Harness::with_config(CoreConfig {
        posts: PostServices::All,
        journal: PostServices::from_list(&[s("FEED")]),
        limits: Limits {
            heartbeat: Duration::from_secs(1),
            post_timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..CoreConfig::default()
    })
}

/// The records the core asked the journal for since the last call.
fn journal_requests(h: &mut Harness) -> Vec<JournalRequest> {
    let mut v = Vec::new();
    h.node.take_journal_requests(&mut v);
    v
}

/// The received record's seq and the nak, when `reqs` is one request to record a post's
/// answer.
fn completion(reqs: &[JournalRequest]) -> Option<(u64, Option<NakCode>)> {
    match reqs {
        [JournalRequest {
            write: JournalWrite::Completed { received, nak, .. },
            ..
        }] => Some((*received, *nak)),
        _ => None,
    }
}

#[test]
fn a_journaled_post_goes_on_only_once_kept_and_its_answer_only_once_recorded() {
    let (mut h, p, sub) = feed_and_watcher(journaled());
    let f = bid_ask(9990, 10000);
    h.send(sub, &[post(42, 77, "", "", &f)]);
    assert!(
        h.recv(p).is_empty(),
        "not forwarded before the journal has it"
    );
    let reqs = journal_requests(&mut h);
    let [JournalRequest {
        ticket,
        write:
            JournalWrite::Received {
                service,
                item,
                post_id,
                fields,
                ..
            },
    }] = &reqs[..]
    else {
        panic!("{reqs:?}")
    };
    assert_eq!(
        (service.as_str(), item.as_str(), *post_id),
        ("FEED", "SYM0", 77)
    );
    assert_eq!(fields, &f);
    h.node.on_journaled(*ticket, Ok(41), h.now);
    let id = forwarded(&h.recv(p));
    // The publisher answers; the poster hears of it once the answer is recorded.
    h.send(p, &[ack(id, None, "applied")]);
    assert!(h.recv(sub).is_empty());
    let reqs = journal_requests(&mut h);
    let [JournalRequest {
        ticket,
        write:
            JournalWrite::Completed {
                received: 41,
                nak: None,
                text,
            },
    }] = &reqs[..]
    else {
        panic!("{reqs:?}")
    };
    assert_eq!(text, "applied");
    h.node.on_journaled(*ticket, Ok(42), h.now);
    assert_eq!(
        h.recv(sub),
        vec![Got::Ack {
            sid: 42,
            post_id: 77,
            nak: None,
            text: s("applied"),
        }]
    );
}

#[test]
fn a_post_the_journal_cannot_keep_is_refused_with_the_journals_reason() {
    let (mut h, p, sub) = feed_and_watcher(journaled());
    let f = bid_ask(1, 2);
    h.send(sub, &[post(42, 5, "", "", &f)]);
    let reqs = journal_requests(&mut h);
    h.node.on_journaled(
        reqs[0].ticket,
        Err("journal /j: cannot write: No space left on device (os error 28)".into()),
        h.now,
    );
    let (code, text) = nak_of(&h.recv(sub));
    assert_eq!(code, NakCode::NoResources);
    assert!(
        text.contains("journal cannot keep the post") && text.contains("No space left"),
        "{text}"
    );
    assert!(h.recv(p).is_empty(), "nothing reached the publisher");
    assert_eq!(h.node.stats().posts.journal_failures, 1);
}

#[test]
fn the_nodes_own_answer_to_a_journaled_post_is_recorded_too() {
    let (mut h, p, sub) = feed_and_watcher(journaled());
    let f = bid_ask(1, 2);
    // Without "ack": the publisher is asked for an answer anyway (it is recorded).
    h.send(sub, &[post_without_ack(6, &f)]);
    let reqs = journal_requests(&mut h);
    h.node.on_journaled(reqs[0].ticket, Ok(1), h.now);
    assert!(matches!(&h.recv(p)[..], [Got::Post { ack: true, .. }]));
    h.now += Duration::from_millis(500);
    h.node.handle_timeout(h.now);
    let reqs = journal_requests(&mut h);
    assert_eq!(
        completion(&reqs),
        Some((1, Some(NakCode::NoResponse))),
        "{reqs:?}"
    );
    h.node.on_journaled(reqs[0].ticket, Ok(2), h.now);
    assert!(
        h.recv(sub).iter().all(|g| !matches!(g, Got::Ack { .. })),
        "no answer to a poster that asked for none"
    );
}

#[test]
fn posts_left_in_the_journal_are_delivered_again_marked_once_their_service_is_up() {
    let mut h = journaled();
    h.node.redeliver_posts(vec![Redelivery {
        seq: 9,
        service: s("FEED"),
        item: s("SYM0"),
        image: false,
        fields: bid_ask(5, 6),
    }]);
    h.node.handle_timeout(h.now);
    let (mut h, p, _) = feed_and_watcher(h);
    h.node.handle_timeout(h.now);
    let got = h.recv(p);
    let id = match &got[..] {
        [Got::Post {
            post_id,
            ack: true,
            redelivered: true,
            name,
            ..
        }] if name == "SYM0" => *post_id,
        other => panic!("{other:?}"),
    };
    assert_eq!(h.node.stats().posts.redelivered, 1);
    h.send(p, &[ack(id, None, "")]);
    let reqs = journal_requests(&mut h);
    assert_eq!(completion(&reqs), Some((9, None)), "{reqs:?}");
}

/// Thousands of posts to deliver again after a restart go to the publisher as it reads
/// them, a tick at a time: all at once, they made the node drop it as a slow reader and
/// record every one of them refused.
#[test]
fn posts_delivered_again_after_a_restart_go_as_the_publisher_reads_them() {
    let mut h = Harness::with_config(CoreConfig {
        posts: PostServices::All,
        journal: PostServices::from_list(&[s("FEED")]),
        limits: Limits {
            max_output_bytes: 1 << 20,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let text = "x".repeat(1_000);
    let fields = tickwire_proto::encode_field_list([(3, tickwire_proto::Value::Ascii(&text))]);
    h.node.redeliver_posts(
        (1..=2_000)
            .map(|seq| Redelivery {
                seq,
                service: s("FEED"),
                item: s("SYM0"),
                image: false,
                fields: fields.clone(),
            })
            .collect(),
    );
    let (mut h, p, _) = feed_and_watcher(h);
    let mut delivered = 0;
    for _ in 0..100 {
        h.now += Duration::from_secs(1);
        h.node.handle_timeout(h.now);
        assert!(
            h.node.pending_output(p) <= (1 << 20) / 4 + 2_048,
            "{} bytes queued for the publisher",
            h.node.pending_output(p)
        );
        // The publisher reads and answers what came.
        let answers: Vec<u32> = h
            .recv(p)
            .iter()
            .filter_map(|g| match g {
                Got::Post {
                    post_id,
                    redelivered: true,
                    ..
                } => Some(*post_id),
                _ => None,
            })
            .collect();
        delivered += answers.len();
        for id in answers {
            h.send(p, &[ack(id, None, "")]);
        }
        if delivered == 2_000 {
            break;
        }
    }
    assert_eq!(delivered, 2_000);
    assert_eq!(h.node.stats().protocol_disconnects, 0);
    let refused = journal_requests(&mut h)
        .iter()
        .filter(|r| matches!(r.write, JournalWrite::Completed { nak: Some(_), .. }))
        .count();
    assert_eq!(refused, 0);
}

#[test]
fn a_publisher_that_does_not_read_its_posts_gets_no_more_once_its_queue_is_long() {
    let h = Harness::with_config(CoreConfig {
        posts: PostServices::All,
        limits: Limits {
            max_output_bytes: 64 * 1024,
            max_frame: 16 * 1024,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let (mut h, p, sub) = feed_and_watcher(h);
    let f = bid_ask(1, 2);
    // The publisher never reads: posts that ask for no answer pile up in its queue ...
    let mut refused = None;
    for id in 0..10_000 {
        h.send(sub, &[post_without_ack(id, &f)]);
        let got = h.recv(sub);
        if let Some(g) = got.into_iter().find(|g| matches!(g, Got::Ack { .. })) {
            refused = Some((id, g));
            break;
        }
    }
    // ... until the node refuses them, with a bound far below the flood.
    let (id, g) = refused.expect("posts refused once the publisher's queue is long");
    assert!(
        matches!(&g, Got::Ack { nak: Some(NakCode::NoResources), text, .. } if text.contains("not keeping up")),
        "{g:?}"
    );
    assert!(id < 2_000, "refused after {id} posts");
    assert!(h.node.pending_output(p) <= 64 * 1024 / 4 + 1024);
}

/// Journaled posts are checked against the publisher's queue when they come back from
/// the journal too: a thousand kept at once, all checked while its queue was short, do
/// not land in it together (which made the node drop the publisher as a slow reader and
/// take its service down). Those past the bound are refused, their refusal recorded.
#[test]
fn journaled_posts_kept_together_do_not_flood_a_publisher_that_does_not_read() {
    let h = Harness::with_config(CoreConfig {
        posts: PostServices::All,
        journal: PostServices::from_list(&[s("FEED")]),
        limits: Limits {
            max_output_bytes: 64 * 1024,
            max_frame: 16 * 1024,
            max_pending_posts: 2_000,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let (mut h, p, sub) = feed_and_watcher(h);
    let f = bid_ask(1, 2);
    for id in 0..1_000 {
        h.send(sub, &[post(42, id, "", "", &f)]);
    }
    let reqs = journal_requests(&mut h);
    assert_eq!(reqs.len(), 1_000, "every post went to the journal first");
    for (seq, r) in reqs.iter().enumerate() {
        h.node.on_journaled(r.ticket, Ok(seq as u64 + 1), h.now);
    }
    // The publisher never reads: its queue stays within the bound.
    assert!(
        h.node.pending_output(p) <= 64 * 1024 / 4 + 1024,
        "{} bytes queued for the publisher",
        h.node.pending_output(p)
    );
    assert_eq!(
        h.node.stats().protocol_disconnects,
        0,
        "the publisher was dropped"
    );
    // The others' refusals are recorded before the posters hear of them.
    let refusals: Vec<JournalRequest> = journal_requests(&mut h)
        .into_iter()
        .filter(|r| {
            matches!(&r.write, JournalWrite::Completed { nak: Some(NakCode::NoResources), text, .. }
                if text.contains("not keeping up"))
        })
        .collect();
    assert!(refusals.len() > 500, "{} refused", refusals.len());
    for r in &refusals {
        h.node.on_journaled(r.ticket, Ok(0), h.now);
    }
    let told = h
        .recv(sub)
        .iter()
        .filter(|g| {
            matches!(
                g,
                Got::Ack {
                    nak: Some(NakCode::NoResources),
                    ..
                }
            )
        })
        .count();
    assert_eq!(told, refusals.len());
}

// ---------------------------------------------------------------------------------------
// Replay then join: the harness plays the journal's history.
// ---------------------------------------------------------------------------------------

#[test]
fn a_replay_catches_up_with_an_item_that_moves_on_then_joins_it_live() {
    let (mut h, p, sub, ticket) = replaying();
    // Two more updates before the journal answers.
    h.send(
        p,
        &[update(7, 6, &bid_ask(6, 9)), update(7, 7, &bid_ask(7, 9))],
    );
    let history = tickwire_journal::History {
        messages: vec![past(3), past(4), past(5)],
        truncated: false,
    };
    h.node.on_history(ticket, Ok(history), h.now);
    // The history, then what the item did while it was read (kept by the core, not
    // asked of the journal again), then the join.
    let got = h.recv(sub);
    let seqs: Vec<u32> = got
        .iter()
        .filter_map(|g| match g {
            Got::Update { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [3, 4, 5, 6, 7], "{got:?}");
    assert!(
        matches!(got.last(), Some(Got::Status { text, .. }) if text.contains("replayed 5 messages; live from seq 8")),
        "{got:?}"
    );
    assert!(
        matches!(&got[3], Got::Update { fields, .. } if fields.contains(&(25, "0.09".to_string()))),
        "the live update's own values: {got:?}"
    );
    // Nothing more was asked of the journal.
    let reqs = journal_requests(&mut h);
    assert!(
        reqs.iter()
            .all(|r| !matches!(r.write, JournalWrite::History(_))),
        "{reqs:?}"
    );
    // Live now.
    h.send(p, &[update(7, 8, &bid_ask(8, 9))]);
    assert!(matches!(
        &h.recv(sub)[..],
        [Got::Update { sid: 3, seq: 8, .. }]
    ));
}

/// A journaled SYM0 (published on stream 7, four updates) and a subscriber replaying
/// it from seq 3 on its stream 3: the harness, publisher, subscriber, history ticket.
fn replaying() -> (Harness, ConnId, ConnId, u64) {
    let mut h = Harness::with_config(CoreConfig {
        journal: PostServices::All,
        journal_updates: true,
        ..CoreConfig::default()
    });
    let p = h.publisher_of(7, "SYM0", &bid_ask(1, 2));
    for seq in 2..=5 {
        h.send(p, &[update(7, seq, &bid_ask(seq as i64, 9))]);
    }
    // Every message of the journaled item went to the journal, in one batch.
    let reqs = journal_requests(&mut h);
    assert!(
        matches!(
            &reqs[..],
            [JournalRequest {
                ticket: 0,
                write: JournalWrite::ItemMessages { count: 5, .. }
            }]
        ),
        "{reqs:?}"
    );
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.send(
        sub,
        &[Message::Replay(tickwire_proto::Replay {
            stream_id: 3,
            from: tickwire_proto::ReplayFrom::Seq(3),
            service: "FEED",
            name: "SYM0",
        })],
    );
    let reqs = journal_requests(&mut h);
    let [JournalRequest {
        ticket,
        write: JournalWrite::History(tickwire_journal::HistoryQuery { until: 5, .. }),
    }] = &reqs[..]
    else {
        panic!("{reqs:?}")
    };
    (h, p, sub, *ticket)
}

/// Replays waiting for their history hold their places under the stream limit: a
/// connection at its limit with them is refused a further stream, rather than going
/// past the limit when they join.
#[test]
fn replays_waiting_for_their_history_count_against_the_stream_limit() {
    let mut h = Harness::with_config(CoreConfig {
        journal: PostServices::All,
        journal_updates: true,
        limits: Limits {
            max_streams_per_connection: 3,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let p = h.publisher_of(7, "SYM0", &bid_ask(1, 2));
    h.send(p, &[update(7, 2, &bid_ask(2, 9))]);
    journal_requests(&mut h);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", true, None);
    h.recv(sub);
    for sid in [2, 3] {
        h.send(
            sub,
            &[Message::Replay(tickwire_proto::Replay {
                stream_id: sid,
                from: tickwire_proto::ReplayFrom::Seq(1),
                service: "FEED",
                name: "SYM0",
            })],
        );
    }
    let tickets: Vec<u64> = journal_requests(&mut h)
        .into_iter()
        .filter(|r| matches!(r.write, JournalWrite::History(_)))
        .map(|r| r.ticket)
        .collect();
    assert_eq!(tickets.len(), 2);
    h.request(sub, 4, "FEED", "SYM0", true, None);
    let got = h.recv(sub);
    assert!(
        only_status(&got, code::TOO_MANY_STREAMS, "stream limit"),
        "{got:?}"
    );
    // Answered, both replays join: three streams, the limit.
    for t in tickets {
        let history = tickwire_journal::History {
            messages: vec![past(2)],
            truncated: false,
        };
        let now = h.now;
        h.node.on_history(t, Ok(history), now);
    }
    h.recv(sub);
    let report = h.node.connection_reports();
    let streams = report
        .iter()
        .find(|r| r.id == sub)
        .expect("connected")
        .streams;
    assert_eq!(streams, 3);
}

/// The journal's answer to `ticket`: seqs 3 to 5.
fn history_3_to_5(h: &mut Harness, ticket: u64) {
    let history = tickwire_journal::History {
        messages: vec![past(3), past(4), past(5)],
        truncated: false,
    };
    let now = h.now;
    h.node.on_history(ticket, Ok(history), now);
}

#[test]
fn a_stream_still_reading_its_history_that_is_asked_again_ends_its_replay() {
    // A request: the stream is the request's alone, its history never comes.
    let (mut h, p, sub, ticket) = replaying();
    h.request(sub, 3, "FEED", "SYM0", true, None);
    assert!(matches!(&h.recv(sub)[..], [Got::Refresh { sid: 3, .. }]));
    history_3_to_5(&mut h, ticket);
    assert!(
        h.recv(sub).is_empty(),
        "no history on the re-requested stream"
    );
    h.send(p, &[update(7, 6, &bid_ask(6, 9))]);
    assert_eq!(h.recv(sub).len(), 1, "one stream 3, not two");
    h.send(sub, &[Message::Close { stream_id: 3 }]);
    h.send(p, &[update(7, 7, &bid_ask(7, 9))]);
    assert!(h.recv(sub).is_empty(), "closed, all of it");

    // A view changed in place: not open yet, so it ends, replay and all.
    let (mut h, p, sub, ticket) = replaying();
    h.change_view(sub, 3, "SYM0", Some(&[22]));
    let got = h.recv(sub);
    assert!(only_closed(&got, 3).is_some(), "{got:?}");
    history_3_to_5(&mut h, ticket);
    h.send(p, &[update(7, 6, &bid_ask(6, 9))]);
    assert!(h.recv(sub).is_empty(), "nothing after the close");
}

/// A connection has two histories read at a time at most, closed streams included (the
/// journal reads them all the same): a third is refused at once, and accepted again
/// once an answer has come.
#[test]
fn a_connection_has_two_histories_read_at_a_time_at_most() {
    let (mut h, _p, sub, first) = replaying();
    let replay = |sid: u32| {
        Message::Replay(tickwire_proto::Replay {
            stream_id: sid,
            from: tickwire_proto::ReplayFrom::Seq(3),
            service: "FEED",
            name: "SYM0",
        })
    };
    // Asked, then closed: still read by the journal, still counted.
    h.send(sub, &[replay(4)]);
    h.send(sub, &[Message::Close { stream_id: 4 }]);
    let second = journal_requests(&mut h);
    assert_eq!(second.len(), 1, "{second:?}");
    h.recv(sub);
    h.send(sub, &[replay(5)]);
    assert!(journal_requests(&mut h).is_empty(), "a third is not asked");
    let got = h.recv(sub);
    assert!(
        matches!(&got[..], [Got::Status { sid: 5, stream: StreamState::Closed, code: c, text, .. }]
            if *c == code::TOO_MANY_STREAMS && text.contains("replays of this connection")),
        "{got:?}"
    );
    // The closed stream's answer comes: room for one more.
    let now = h.now;
    h.node.on_history(
        second[0].ticket,
        Ok(tickwire_journal::History {
            messages: vec![],
            truncated: false,
        }),
        now,
    );
    h.send(sub, &[replay(6)]);
    assert_eq!(journal_requests(&mut h).len(), 1);
    history_3_to_5(&mut h, first);
}

#[test]
fn a_replay_whose_item_outruns_the_kept_log_joins_from_the_image_and_says_so() {
    // 64 KiB of output: the log keeps 128 messages (a history's bound) at most.
    let mut h = Harness::with_config(CoreConfig {
        journal: PostServices::All,
        journal_updates: true,
        limits: Limits {
            max_output_bytes: 64 * 1024,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let p = h.publisher_of(7, "SYM0", &bid_ask(1, 2));
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    let replay = |sid| {
        Message::Replay(tickwire_proto::Replay {
            stream_id: sid,
            from: tickwire_proto::ReplayFrom::Seq(1),
            service: "FEED",
            name: "SYM0",
        })
    };
    let history_ticket = |h: &mut Harness| {
        let reqs = journal_requests(h);
        reqs.iter()
            .find_map(|r| matches!(r.write, JournalWrite::History(_)).then_some(r.ticket))
            .unwrap_or_else(|| panic!("{reqs:?}"))
    };
    h.send(sub, &[replay(3)]);
    let first = history_ticket(&mut h);
    // More than the log keeps, before the journal answers.
    for seq in 2..=140 {
        h.send(p, &[update(7, seq, &bid_ask(seq as i64, 9))]);
    }
    // A second replay asked after the overflow keeps what follows it whole.
    h.send(sub, &[replay(4)]);
    let second = history_ticket(&mut h);
    for seq in 141..=143 {
        h.send(p, &[update(7, seq, &bid_ask(seq as i64, 9))]);
    }
    h.node.on_history(
        first,
        Ok(tickwire_journal::History {
            messages: vec![past(1)],
            truncated: false,
        }),
        h.now,
    );
    let got = h.recv(sub);
    assert!(
        matches!(&got[..], [Got::Update { sid: 3, seq: 1, .. }, Got::Refresh { sid: 3, seq: 143, .. }, Got::Status { sid: 3, text, .. }] if text.contains("live from seq 144") && text.contains("an image came first")),
        "{got:?}"
    );
    h.node.on_history(
        second,
        Ok(tickwire_journal::History {
            messages: (1..=140).map(past).collect(),
            truncated: false,
        }),
        h.now,
    );
    let got = h.recv(sub);
    let seqs: Vec<u32> = got
        .iter()
        .filter_map(|g| match g {
            Got::Update { sid: 4, seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, (1..=143).collect::<Vec<_>>(), "{got:?}");
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 4, text, .. }) if text.contains("live from seq 144") && !text.contains("image")),
        "{got:?}"
    );
    // Both live, and the item no longer keeps a log.
    h.send(p, &[update(7, 144, &bid_ask(144, 9))]);
    assert!(matches!(
        &h.recv(sub)[..],
        [Got::Update { seq: 144, .. }, Got::Update { seq: 144, .. }]
    ));
    assert_eq!(h.node.replays.logging(), 0);
}

#[test]
fn a_replay_whose_item_went_does_not_join_an_item_of_the_same_name_in_another_service() {
    let (mut h, p, sub, ticket) = replaying();
    // The publisher ends SYM0 while its history is read; another service's SYM0 is
    // made next (in the slot SYM0 left).
    h.send(
        p,
        &[Message::Status(Status {
            stream_id: 7,
            state: State::closed(code::NOT_FOUND, "gone"),
        })],
    );
    let other = h.publisher("FEED2", false);
    let img = bid_ask(50, 51);
    h.send(
        other,
        &[Message::Refresh(Refresh::whole(
            1,
            1,
            "FEED2",
            "SYM0",
            FieldList::decode(&img).unwrap(),
        ))],
    );
    h.recv(sub);
    history_3_to_5(&mut h, ticket);
    let got = h.recv(sub);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 3, stream: StreamState::Closed, text, .. }) if text.contains("went while its history was read")),
        "{got:?}"
    );
    h.send(other, &[update(1, 2, &img)]);
    assert!(h.recv(sub).is_empty(), "nothing of FEED2's SYM0");
}

#[test]
fn posts_answered_at_once_do_not_pile_up_deadlines() {
    let (mut h, p, sub) = feed_and_watcher(harness(PostServices::All));
    let f = bid_ask(9990, 10000);
    for n in 0..1000 {
        h.send(sub, &[post(42, n, "", "", &f)]);
        let id = forwarded(&h.recv(p));
        h.send(p, &[ack(id, None, "")]);
        assert_eq!(h.recv(sub).len(), 1);
    }
    // One post waits at most: what is kept for deadlines is bounded by that, not by
    // the posts answered within the timeout.
    assert!(
        h.node.posts.deadlines_kept() <= 100,
        "{}",
        h.node.posts.deadlines_kept()
    );
    // A post waiting is still refused at its deadline.
    h.send(sub, &[post(42, 5000, "", "", &f)]);
    h.recv(p);
    h.now += Duration::from_millis(600);
    h.node.handle_timeout(h.now);
    assert_eq!(nak_of(&h.recv(sub)).0, NakCode::NoResponse);
}
