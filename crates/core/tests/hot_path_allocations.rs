//! The hot path does not allocate: once buffers have grown to their working size, a
//! publisher's updates fanned out to subscribers (with and without a view, cache on and
//! off) cause zero heap allocations. Counted with a global allocator, not timed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;
use support::{announce_feed, encode, login, send_image};
use tickwire_core::Node;
use tickwire_proto::{
    encode_field_list, FieldList, Message, Real, Request, Role, Update, UpdateType, Value, View,
};

mod support;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(|a| a.get())
}

fn drain(node: &mut Node, dirty: &mut Vec<usize>) {
    node.take_dirty(dirty);
    for &c in dirty.iter() {
        let out = node.output(c).unwrap();
        let n = out.sealed_bytes().len();
        out.consume(n);
    }
    node.settle();
}

/// Has publisher `p` send `img` as the image of each of `names`, on its streams 1, 2, ...
fn image_each(
    node: &mut Node,
    p: usize,
    names: &[&str],
    img: &[u8],
    solicited: bool,
    now: Instant,
) {
    for (i, name) in names.iter().enumerate() {
        send_image(node, p, i as u32 + 1, name, img, solicited, now);
    }
}

fn allocations_per_update(cache: bool) -> (u64, u64) {
    let now = Instant::now();
    let mut node = support::node(cache, now);
    let p = login(&mut node, Role::Publisher, now);
    announce_feed(&mut node, p, 0, now);
    let img = encode_field_list([
        (22, Value::Real(Real::new(100, 0))),
        (25, Value::Real(Real::new(101, 0))),
    ]);
    let names = ["A", "B", "C", "D"];
    image_each(&mut node, p, &names, &img, false, now);
    let view = [25i16];
    let mut subs = Vec::new();
    for k in 0..3 {
        let s = login(&mut node, Role::Subscriber, now);
        for (i, name) in names.iter().enumerate() {
            let f = encode(&[Message::Request(Request {
                stream_id: i as u32 + 1,
                streaming: true,
                service: "FEED",
                name,
                view: (k == 2).then_some(View::Fids(&view)),
                refresh: true,
            })]);
            node.on_frame(s, &f, now);
        }
        subs.push(s);
    }
    // With the cache off, the publisher answers the forwarded requests.
    image_each(&mut node, p, &names, &img, true, now);
    // A frame of 400 updates spread over the items, encoded once up front.
    let mut updates = Vec::new();
    for seq in 1..=400u32 {
        let fields = encode_field_list([
            (22, Value::Real(Real::new(100 + seq as i64 % 7, 0))),
            (25, Value::Real(Real::new(101 + seq as i64 % 5, 0))),
        ]);
        Message::Update(Update::new(
            seq % 4 + 1,
            seq,
            UpdateType::Quote,
            FieldList::decode(&fields).unwrap(),
        ))
        .encode(&mut updates)
        .unwrap();
    }
    let mut dirty = Vec::with_capacity(16);
    // Warm up: buffers grow to their working size.
    for _ in 0..5 {
        node.on_frame(p, &updates, now);
        drain(&mut node, &mut dirty);
    }
    let before_out = node.stats().updates_out;
    let before = allocations();
    for _ in 0..50 {
        node.on_frame(p, &updates, now);
        drain(&mut node, &mut dirty);
    }
    let allocs = allocations() - before;
    let out = node.stats().updates_out - before_out;
    (allocs, out)
}

#[test]
fn fan_out_allocates_nothing_per_update_with_the_cache_on() {
    let (allocs, out) = allocations_per_update(true);
    // 20,000 updates in, 3 subscribers x 4 items: every update reaches 3 streams.
    assert_eq!(out, 60_000, "every update fanned out");
    assert_eq!(allocs, 0, "{allocs} allocations for {out} updates out");
}

#[test]
fn fan_out_allocates_nothing_per_update_with_the_cache_off() {
    let (allocs, out) = allocations_per_update(false);
    assert_eq!(out, 60_000, "every update fanned out");
    assert_eq!(allocs, 0, "{allocs} allocations for {out} updates out");
}
