//! The client library's own cost per update, in process (no sockets): what a feed
//! handler pays to publish and an application to take one reference Level 1 update.
//! docs/BENCHMARKS.md ("The client library") has the figures and the command:
//! `cargo bench -p tickwire-client --bench client`.
//!
//! - `publisher/update`: `PublisherSession::publish_update` of the reference update (10
//!   fields, built beforehand with `write_level1` as a feed handler builds it) to one of
//!   100,000 items drawn at random (fixed seed): the merge into the publisher's image of
//!   the item, the message's encoding, and the write amortised (the output taken every
//!   1,000 updates, as a socket would take it).
//! - `publisher/build`: building that update with the library's field list writer
//!   (`write_level1`), the feed handler's part.
//! - `subscriber/update`: a `SubscriberSession` handed the node's bytes for 1,000
//!   updates of 1,000 items (as the node encoded them) and dispatching them, the
//!   callback reading every field's value.
//!
//! Both sessions logged in to a real `tickwire_core::Node` in process.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tickwire_client::publishing::{PublisherSession, ServiceOptions};
use tickwire_client::{EventRef, LoginOptions, ReconnectPolicy, RequestOptions, SubscriberSession};
use tickwire_core::{ConnId, CoreConfig, Node};
use tickwire_proto::frame::FrameReader;
use tickwire_proto::reference::{typical, write_level1, FeedRng, Level1};
use tickwire_proto::{FieldList, Role, UpdateType, Value};

const ITEMS: usize = 100_000;
const BATCH: usize = 1_000;
const WATCHED: usize = 1_000;

/// A quote moved at random, as the demo feed does.
fn step(q: &mut Level1, rng: &mut FeedRng) {
    let mid = (q.bid + q.ask) / 2 + (rng.below(3) as i64 - 1) * 100;
    let spread = 100 * (1 + rng.below(3) as i64);
    q.bid = mid - spread / 2;
    q.ask = q.bid + spread;
    q.bid_size = 100 * (1 + rng.below(50));
    q.ask_size = 100 * (1 + rng.below(50));
    q.time_of_day.nanos_since_midnight += 1_000;
    q.send_time_ns += 1_000;
}

fn login(role: Role) -> LoginOptions {
    LoginOptions {
        role,
        application: "bench".into(),
        user: "bench".into(),
        token: String::new(),
        slow_consumer: None,
        welcome_timeout: Duration::from_secs(5),
    }
}

fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        reconnect: false,
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(1),
        retry_rejected: false,
    }
}

/// Moves bytes between a session's connection and its node connection until quiet.
fn pump(
    core: &mut Node,
    conn: ConnId,
    to_core: &mut FrameReader,
    c: &mut tickwire_client::Connection,
    now: Instant,
) {
    for _ in 0..100 {
        let out = c.transmit().to_vec();
        c.sent(out.len(), now);
        to_core.extend(&out);
        while let Some(frame) = to_core.next_frame().expect("frames") {
            let frame = frame.to_vec();
            core.on_frame(conn, &frame, now);
        }
        let back = core.output(conn).map_or_else(Vec::new, |w| {
            let b = w.sealed_bytes().to_vec();
            w.consume(b.len());
            b
        });
        if out.is_empty() && back.is_empty() {
            return;
        }
        c.receive(&back, now);
    }
}

/// A publisher session of service FEED logged in to `core`, with `items` imaged.
fn publisher(core: &mut Node, items: usize, now: Instant) -> (PublisherSession, ConnId) {
    let service = ServiceOptions {
        service: "FEED".into(),
        interactive: false,
        start_down: false,
        accept_posts: false,
    };
    let mut s = PublisherSession::new(login(Role::Publisher), policy(), service, now);
    s.connecting(now).unwrap();
    let conn = core.connect("publisher", now);
    let mut to_core = FrameReader::new(1 << 24);
    pump(core, conn, &mut to_core, s.connection().unwrap(), now);
    s.poll(now).unwrap();
    let mut fields = Vec::new();
    for i in 0..items {
        fields.clear();
        write_level1(&mut fields, &typical());
        s.publish_refresh(&format!("SYM{i}"), FieldList::from_trusted(&fields))
            .unwrap();
        if i % 1000 == 999 {
            pump(core, conn, &mut to_core, s.connection().unwrap(), now);
        }
    }
    pump(core, conn, &mut to_core, s.connection().unwrap(), now);
    s.poll(now).unwrap();
    (s, conn)
}

/// The reference updates a publisher sends: field lists built from a quote moved at
/// random, and the sequence of items they go to (random over all items).
struct Workload {
    lists: Vec<Vec<u8>>,
    targets: Vec<usize>,
}

impl Workload {
    /// Field lists are few (they stay in the CPU's cache, as the one a feed handler has
    /// just built does); targets are many, so the items and their images are reached at
    /// random, as a feed of that many instruments reaches them.
    fn new(ids: &[usize], rng: &mut FeedRng) -> Self {
        let mut quote = typical();
        let lists = (0..1024)
            .map(|_| {
                step(&mut quote, rng);
                let mut fields = Vec::with_capacity(128);
                write_level1(&mut fields, &quote);
                fields
            })
            .collect();
        let targets = (0..1 << 20)
            .map(|_| ids[rng.below(ids.len() as u64) as usize])
            .collect();
        Workload { lists, targets }
    }
}

fn bench_publisher(c: &mut Criterion) {
    let now = Instant::now();
    let mut core = Node::new(CoreConfig::default(), now);
    let (mut s, _) = publisher(&mut core, ITEMS, now);
    let ids: Vec<usize> = (0..ITEMS)
        .map(|i| s.item(&format!("SYM{i}")).unwrap())
        .collect();
    let mut rng = FeedRng::new(0x9e37_79b9_7f4a_7c15);
    let work = Workload::new(&ids, &mut rng);
    let mut k = 0usize;
    let mut g = c.benchmark_group("publisher");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("update", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let fields = &work.lists[k % work.lists.len()];
                let id = work.targets[k % work.targets.len()];
                k += 1;
                s.publish_update(
                    id,
                    UpdateType::Quote,
                    FieldList::from_trusted(fields),
                    false,
                )
                .unwrap();
            }
            // What a socket would take: all of it.
            let conn = s.connection().unwrap();
            let n = conn.transmit().len();
            conn.sent(black_box(n), now);
        })
    });
    // The feed handler's part: building the update with the library's field list
    // writer (`write_level1` pushes the reference update's 10 fields).
    let mut quote = typical();
    let mut fields = Vec::with_capacity(128);
    g.bench_function("build", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                step(&mut quote, &mut rng);
                fields.clear();
                write_level1(&mut fields, &quote);
                black_box(&fields);
            }
        })
    });
    g.finish();
}

fn bench_subscriber(c: &mut Criterion) {
    let now = Instant::now();
    let mut core = Node::new(CoreConfig::default(), now);
    let (mut publ, pub_conn) = publisher(&mut core, WATCHED, now);
    let mut sub = SubscriberSession::new(login(Role::Subscriber), policy(), now);
    sub.connecting(now).unwrap();
    let sub_conn = core.connect("subscriber", now);
    let mut to_core = FrameReader::new(1 << 24);
    // Moves the subscriber's requests to the node and the node's answers back, then
    // hands what arrived to `f`.
    let mut exchange = |sub: &mut SubscriberSession, f: &mut dyn FnMut(EventRef<'_>)| {
        pump(
            &mut core,
            sub_conn,
            &mut to_core,
            sub.connection().unwrap(),
            now,
        );
        sub.poll_events(now, |e, _| f(e)).unwrap();
    };
    exchange(&mut sub, &mut |_| {});
    for i in 0..WATCHED {
        sub.subscribe("FEED", &format!("SYM{i}"), RequestOptions::default())
            .unwrap();
    }
    let mut refreshes = 0;
    exchange(&mut sub, &mut |e| {
        refreshes += matches!(e, EventRef::Refresh(..)) as usize
    });
    assert_eq!(refreshes, WATCHED, "every item's refresh");
    // One batch of updates as the node sends them to this subscriber.
    let mut rng = FeedRng::new(0x1234_5678_9abc_def1);
    let mut quote = typical();
    let mut fields = Vec::new();
    let mut pub_to_core = FrameReader::new(1 << 24);
    for _ in 0..BATCH {
        step(&mut quote, &mut rng);
        fields.clear();
        write_level1(&mut fields, &quote);
        let id = publ
            .item(&format!("SYM{}", rng.below(WATCHED as u64)))
            .unwrap();
        publ.publish_update(
            id,
            UpdateType::Quote,
            FieldList::from_trusted(&fields),
            false,
        )
        .unwrap();
    }
    pump(
        &mut core,
        pub_conn,
        &mut pub_to_core,
        publ.connection().unwrap(),
        now,
    );
    let bytes = core.output(sub_conn).map_or_else(Vec::new, |w| {
        let b = w.sealed_bytes().to_vec();
        w.consume(b.len());
        b
    });
    let mut g = c.benchmark_group("subscriber");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("update", |b| {
        b.iter(|| {
            sub.connection().unwrap().receive(&bytes, now);
            let mut n = 0usize;
            let mut sum = 0i64;
            sub.poll_events(now, |e, _| {
                if let EventRef::Update(_, u) = e {
                    n += 1;
                    for (fid, v) in u.fields.iter() {
                        sum = sum.wrapping_add(fid as i64);
                        if let Value::Real(r) = v {
                            sum = sum.wrapping_add(r.mantissa);
                        }
                    }
                }
            })
            .unwrap();
            assert_eq!(n, BATCH);
            black_box(sum)
        })
    });
    g.finish();
}

criterion_group!(benches, bench_publisher, bench_subscriber);
criterion_main!(benches);
