//! The last-value cache hot path, measured in process (no sockets): a publisher's frame
//! of reference Level 1 updates handed to `Node::on_frame`, the image merge on its own,
//! and field-list validation. docs/BENCHMARKS.md ("Last-value cache hot path") has the
//! figures and the command: `cargo bench -p tickwire-core --bench lvc`.
//!
//! The node holds 100,000 cached items (14-field images, as `tickwire publish` sends).
//! Each iteration hands it one frame of 1,000 updates to items drawn at random (fixed
//! seed); 128 such frames are cycled, so the updates touch the whole item table the way
//! a live feed does, rather than a thousand items that stay in the CPU cache.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::{Duration, Instant};
use support::{announce_feed, encode, login};
use tickwire_core::Node;
use tickwire_proto::reference::{
    random_walk, typical, write_level1, write_level1_image, FeedRng, Level1,
};
use tickwire_proto::{FieldImage, FieldList, Message, Request, Role, Update, UpdateType};

#[path = "../tests/support/mod.rs"]
mod support;

const ITEMS: u32 = 100_000;
const UPDATES_PER_FRAME: usize = 1_000;
const FRAMES: usize = 128;
const WATCHED: u32 = 1_000;

fn drain(node: &mut Node, dirty: &mut Vec<usize>) {
    node.take_dirty(dirty);
    for &c in dirty.iter() {
        if let Some(out) = node.output(c) {
            let n = out.sealed_bytes().len();
            out.consume(n);
        }
    }
    node.settle();
}

/// A node with one publisher that has pushed 100,000 images, optionally one subscriber
/// watching `WATCHED` of them (spread over the table), and the update frames to replay.
struct Setup {
    node: Node,
    publisher: usize,
    frames: Vec<Vec<u8>>,
    now: Instant,
}

fn setup(cache: bool, subscriber: bool, watched: u32) -> Setup {
    let now = Instant::now();
    let mut node = support::node(cache, now);
    let mut dirty = Vec::new();
    let p = login(&mut node, Role::Publisher, now);
    announce_feed(&mut node, p, ITEMS, now);
    let mut rng = FeedRng::new(0x9e37_79b9_7f4a_7c15);
    let mut quotes = vec![typical(); ITEMS as usize];
    let refresh = |node: &mut Node, sid: u32, q: &Level1, solicited: bool| {
        let name = format!("SYM{}", sid - 1);
        let mut img = Vec::new();
        write_level1_image(&mut img, &name, q.last, q);
        support::send_image(node, p, sid, &name, &img, solicited, now);
    };
    for (i, q) in quotes.iter().enumerate() {
        refresh(&mut node, i as u32 + 1, q, false);
    }
    assert_eq!(node.item_count(), ITEMS as usize);
    if subscriber {
        let s = login(&mut node, Role::Subscriber, now);
        let step_by = ITEMS / watched;
        for k in 0..watched {
            let name = format!("SYM{}", k * step_by);
            let f = encode(&[Message::Request(Request::streaming(k + 1, "FEED", &name))]);
            node.on_frame(s, &f, now);
            // Read as it goes: 100,000 images at once would pass the output bound.
            drain(&mut node, &mut dirty);
        }
        if !cache {
            // The node forwarded the requests; the publisher answers from its images.
            for k in 0..watched {
                let sid = k * step_by + 1;
                refresh(&mut node, sid, &quotes[sid as usize - 1], true);
                drain(&mut node, &mut dirty);
            }
        }
        drain(&mut node, &mut dirty);
    }
    let mut frames = Vec::with_capacity(FRAMES);
    let mut fields = Vec::with_capacity(128);
    let mut seq = 0u32;
    for _ in 0..FRAMES {
        let mut frame = Vec::with_capacity(UPDATES_PER_FRAME * 90);
        for _ in 0..UPDATES_PER_FRAME {
            let i = rng.below(ITEMS as u64) as usize;
            quotes[i].random_step(&mut rng);
            fields.clear();
            write_level1(&mut fields, &quotes[i]);
            seq = seq.wrapping_add(1);
            Message::Update(Update::new(
                i as u32 + 1,
                seq,
                UpdateType::Quote,
                FieldList::decode(&fields).expect("update"),
            ))
            .encode(&mut frame)
            .expect("encodes");
        }
        frames.push(frame);
    }
    Setup {
        node,
        publisher: p,
        frames,
        now,
    }
}

impl Setup {
    /// Hands the node the next update frame (the frames are cycled); with `dirty`, then
    /// takes its output as subscribers that keep up would, else only lets it settle.
    fn replay_next_frame(&mut self, next: &mut usize, dirty: Option<&mut Vec<usize>>) {
        let frame = &self.frames[*next % FRAMES];
        *next += 1;
        self.node
            .on_frame(self.publisher, black_box(frame), self.now);
        match dirty {
            Some(dirty) => drain(&mut self.node, dirty),
            None => self.node.settle(),
        }
    }
}

fn on_frame(c: &mut Criterion) {
    for subscriber in [false, true] {
        let mut group = c.benchmark_group(if subscriber {
            "on_frame_1_subscriber"
        } else {
            "on_frame"
        });
        group.throughput(Throughput::Elements(UPDATES_PER_FRAME as u64));
        for cache in [true, false] {
            // Set up only if this benchmark is selected (a filter may skip it).
            let mut state: Option<(Setup, u64)> = None;
            let mut dirty = Vec::with_capacity(4);
            let mut next = 0usize;
            let name = if cache { "cache_on" } else { "cache_off" };
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                let (s, _) = state.get_or_insert_with(|| {
                    let s = setup(cache, subscriber, WATCHED);
                    let before = s.node.stats().updates_in;
                    (s, before)
                });
                b.iter(|| s.replay_next_frame(&mut next, subscriber.then_some(&mut dirty)))
            });
            if let Some((s, before)) = state {
                let stats = s.node.stats();
                assert_eq!(
                    stats.updates_in - before,
                    next as u64 * UPDATES_PER_FRAME as u64
                );
                assert_eq!(stats.updates_on_unknown_streams, 0);
                if subscriber {
                    assert!(stats.updates_out > 0, "the subscriber got updates");
                }
            }
        }
        group.finish();
    }
}

/// A subscriber watching every item, so each update goes to it: one that reads
/// everything (its output drained each frame) against one that never reads, so the node
/// treats it as slow and merges each update into its pending update for the stream
/// (the slow-consumer `conflate` policy), after the warm-up has passed its threshold.
fn slow_subscriber(c: &mut Criterion) {
    let mut group = c.benchmark_group("on_frame_subscriber_all_items");
    group.throughput(Throughput::Elements(UPDATES_PER_FRAME as u64));
    for reading in [true, false] {
        let mut state: Option<Setup> = None;
        let mut dirty = Vec::with_capacity(4);
        let mut next = 0usize;
        let name = if reading { "reading" } else { "conflating" };
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            let s = state.get_or_insert_with(|| setup(true, true, ITEMS));
            b.iter(|| s.replay_next_frame(&mut next, reading.then_some(&mut dirty)))
        });
        // Checked after a measured run only: criterion's test mode (`cargo test
        // --benches`) makes one iteration, too few to fill a subscriber's output.
        if let Some(s) = state.filter(|_| next >= FRAMES) {
            let behind = s.node.connection_reports().iter().any(|r| r.behind);
            assert_eq!(behind, !reading, "the non-reading subscriber is conflated");
            if !reading {
                assert!(s.node.stats().slow_consumer_disconnects == 0);
            }
        }
    }
    group.finish();
}

fn image_and_field_list(c: &mut Criterion) {
    let q = typical();
    let mut img_bytes = Vec::new();
    write_level1_image(&mut img_bytes, "SYM0", q.last, &q);
    let mut update = Vec::new();
    write_level1(&mut update, &q);
    assert_eq!(update.len(), 74);

    let mut group = c.benchmark_group("field_image_apply");
    group.throughput(Throughput::Elements(1));
    let mut image = FieldImage::new();
    image.apply(FieldList::decode(&img_bytes).expect("image"));
    assert_eq!(image.len(), 14);
    let list = FieldList::decode(&update).expect("update");
    group.bench_function("reference_update", |b| {
        b.iter(|| image.apply(black_box(list)))
    });
    // 1,024 successive quotes of one item: some fields change length (a splice).
    let updates = random_walk(q, &mut FeedRng::new(42), 1024);
    let lists: Vec<FieldList<'_>> = updates
        .iter()
        .map(|u| FieldList::decode(u).expect("update"))
        .collect();
    let mut next = 0usize;
    group.bench_function("random_walk_updates", |b| {
        b.iter(|| {
            image.apply(black_box(lists[next % lists.len()]));
            next += 1;
        })
    });
    group.finish();

    let mut group = c.benchmark_group("field_list_decode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("reference_update", |b| {
        b.iter(|| FieldList::decode(black_box(&update)).expect("valid"))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = on_frame, slow_subscriber, image_and_field_list
}
criterion_main!(benches);
