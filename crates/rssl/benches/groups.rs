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
use tickwire_rssl::rwf::container::{
    filter_action, map_action, ElementListWriter, FieldListWriter, FilterListWriter, MapWriter,
};
use tickwire_rssl::rwf::msg::{
    self, begin_refresh, class, data, domain, refresh, stream, RwfState,
};
use tickwire_rssl::rwf::primitive::dt;

const ITEMS: i32 = 200_000;

/// A directory message (refresh or update) for service 7 whose filter entries `put`
/// writes.
fn directory(update: bool, put: impl FnOnce(&mut Vec<u8>, &mut FilterListWriter)) -> Vec<u8> {
    let mut out = Vec::new();
    let ok = RwfState::new(stream::OPEN, data::OK, msg::code::NONE, "");
    if update {
        let w = msg::MsgWriter::begin(&mut out, class::UPDATE, domain::SOURCE, 2, 0, dt::MAP);
        out.push(0);
        w.end_header(&mut out);
    } else {
        let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE;
        begin_refresh(
            &mut out,
            domain::SOURCE,
            2,
            flags,
            dt::MAP,
            None,
            &ok,
            None,
            None,
            false,
        );
    }
    let mut map = MapWriter::begin(&mut out, dt::UINT, dt::FILTER_LIST);
    map.entry(&mut out, map_action::ADD, &[7], |o| {
        let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
        put(o, &mut fl);
        fl.end(o);
    });
    map.end(&mut out);
    out
}

/// One GROUP entry: the group, where it merges, its state (data state).
fn group(o: &mut Vec<u8>, fl: &mut FilterListWriter, g: u8, to: Option<u8>, state: Option<u8>) {
    fl.entry(o, filter_action::SET, 3, |o| {
        let mut el = ElementListWriter::begin(o);
        el.element(o, "Group", dt::BUFFER, |o| o.extend_from_slice(&[0, g]));
        if let Some(t) = to {
            el.element(o, "MergedToGroup", dt::BUFFER, |o| {
                o.extend_from_slice(&[0, t])
            });
        }
        if let Some(d) = state {
            el.element(o, "Status", dt::STATE, |o| {
                RwfState::new(stream::OPEN, d, msg::code::NONE, "group").encode(o)
            });
        }
        el.end(o);
    });
}

/// A link serving service 7 with `ITEMS` items open: all in group 0 but the last,
/// in group 1.
fn link_with_items() -> ProviderLink {
    let dict = Arc::new(RwfDictionary::from_native(&Dictionary::market_price()));
    let mut link = ProviderLink::new(dict, "bench");
    let (mut to_node, mut out) = (Vec::new(), Vec::<Vec<u8>>::new());
    link.on_connected(&mut out);
    let mut login = Vec::new();
    let ok = RwfState::new(stream::OPEN, data::OK, msg::code::NONE, "");
    let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE;
    begin_refresh(
        &mut login,
        domain::LOGIN,
        1,
        flags,
        dt::NO_DATA,
        None,
        &ok,
        None,
        None,
        false,
    );
    link.on_provider_message(&login, &mut to_node, &mut out)
        .unwrap();
    let dir = directory(false, |o, fl| {
        fl.entry(o, filter_action::SET, 1, |o| {
            let mut el = ElementListWriter::begin(o);
            el.ascii(o, "Name", b"PROV");
            el.end(o);
        })
    });
    link.on_provider_message(&dir, &mut to_node, &mut out)
        .unwrap();
    for i in 0..ITEMS {
        let name = format!("I{i}");
        let req = Message::Request(Request {
            stream_id: i as u32 + 1,
            streaming: true,
            service: "PROV",
            name: &name,
            view: None,
            refresh: true,
        });
        link.on_node_message(&req, &mut to_node, &mut out);
        // The provider's refresh on its stream (5 on): the item's group.
        let mut rf = Vec::new();
        let w = msg::MsgWriter::begin(
            &mut rf,
            class::REFRESH,
            domain::MARKET_PRICE,
            i + 5,
            flags,
            dt::FIELD_LIST,
        );
        ok.encode(&mut rf);
        rf.extend_from_slice(&[2, 0, u8::from(i == ITEMS - 1)]);
        w.end_header(&mut rf);
        FieldListWriter::begin(&mut rf).end(&mut rf);
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
    let merges = directory(true, |o, fl| {
        for _ in 0..32 {
            group(o, fl, 0, Some(1), None);
            group(o, fl, 1, Some(0), None);
        }
        group(o, fl, 2, None, Some(data::SUSPECT));
    });
    g.bench_function("merges_64_of_200k_items", |b| {
        b.iter(|| {
            to_node.clear();
            link.on_provider_message(black_box(&merges), &mut to_node, &mut out)
                .unwrap();
        })
    });

    // A state for the group of every item: a status for each (200,000).
    let state = directory(true, |o, fl| group(o, fl, 0, None, Some(data::SUSPECT)));
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
