//! What a provider's item-group news costs the node: a Source Directory update whose
//! GROUP filter gives a group a state or merges groups, read by the same
//! `ProviderLink` the node runs for an interactive provider, with 200,000 items open,
//! all in one group but one.
//!
//! `cargo bench -p tickwire-rssl --bench groups`. The groups are indexed
//! (crates/rssl/src/item_groups.rs): an entry costs the items it changes, and a merge
//! moves the smaller group's items, so the "merges" case stays small however many
//! items the large group holds; "state" writes one status per item of the group.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::sync::Arc;
use tickwire_proto::{Dictionary, Message, Request};
use tickwire_rssl::dictionary::RwfDictionary;
use tickwire_rssl::provider_link::ProviderLink;
use tickwire_rssl::rwf::msg::{data, stream};
use tickwire_rssl::testing::{self, group_update, DirectoryMsg, GroupNews};

const ITEMS: i32 = 200_000;

/// A link serving service 7 with `ITEMS` items open: all in group 0 but the last,
/// in group 1.
fn link_with_items() -> ProviderLink {
    let dict = Arc::new(RwfDictionary::from_native(&Dictionary::market_price()));
    let mut link = ProviderLink::new(dict, "bench");
    let (mut to_node, mut out) = (Vec::new(), Vec::<Vec<u8>>::new());
    link.on_connected(&mut out);
    let login = testing::login_accepted(1);
    link.on_provider_message(&login, &mut to_node, &mut out)
        .unwrap();
    let dir = testing::source_directory(2, DirectoryMsg::Solicited, 7, |o, fl| {
        testing::info(o, fl, b"PROV")
    });
    link.on_provider_message(&dir, &mut to_node, &mut out)
        .unwrap();
    for i in 0..ITEMS {
        let name = format!("I{i}");
        let req = Message::Request(Request::streaming(i as u32 + 1, "PROV", &name));
        link.on_node_message(&req, &mut to_node, &mut out, std::time::Instant::now());
        // The provider's refresh on its stream (5 on): the item's group.
        let group = [0, u8::from(i == ITEMS - 1)];
        let rf = testing::refresh_in_group(i + 5, true, &group, None, |_, _| {});
        link.on_provider_message(&rf, &mut to_node, &mut out)
            .unwrap();
        to_node.clear();
        out.clear();
    }
    link
}

fn bench_groups(c: &mut Criterion) {
    let mut link = link_with_items();
    let mut to_node = Vec::new();
    let mut out = Vec::<Vec<u8>>::new();
    let mut g = c.benchmark_group("groups");
    g.sample_size(20);

    // 64 merges back and forth between the large group and the small one, then a
    // state for the small one (one item): what a message of many entries costs.
    let suspect = Some((stream::OPEN, data::SUSPECT));
    let mut news: Vec<GroupNews<'_>> = Vec::new();
    for _ in 0..32 {
        news.push((&[0, 0], Some(&[0, 1]), None));
        news.push((&[0, 1], Some(&[0, 0]), None));
    }
    news.push((&[0, 2], None, suspect));
    let merges = group_update(2, 7, &news);
    g.bench_function("merges_64_of_200k_items", |b| {
        b.iter(|| {
            to_node.clear();
            link.on_provider_message(black_box(&merges), &mut to_node, &mut out)
                .unwrap();
        })
    });

    // A state for the group of every item: a status for each (200,000).
    let state = group_update(2, 7, &[(&[0, 0], None, suspect)]);
    link.on_provider_message(&state, &mut to_node, &mut out)
        .unwrap();
    assert!(to_node.len() > ITEMS as usize, "a status for each item");
    g.bench_function("state_of_200k_items", |b| {
        b.iter(|| {
            to_node.clear();
            link.on_provider_message(black_box(&state), &mut to_node, &mut out)
                .unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, bench_groups);
criterion_main!(benches);
