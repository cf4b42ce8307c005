//! An interactive RSSL provider's item-group news reaches the node's subscribers: a
//! provider (RIPC and RWF from the node's own rssl crate, over a real socket) puts its
//! item in group 1 and then says, in its Source Directory, that group 1 is suspect; a
//! native subscriber of the item on a real node (`--rssl-provider`) gets the item's
//! refresh, then a suspect status, then ok again when the group recovers.

mod common;

use common::{expect_event, subscriber, Node};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{DataState, StreamState};
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::rwf::msg::{class, data, domain, stream, Msg, MsgKey};
use tickwire_rssl::rwf::primitive::{self, RwfReal};
use tickwire_rssl::testing::{self, DirectoryMsg};

const LIMIT: Duration = Duration::from_secs(60);
const GROUP: [u8; 2] = [0, 1];

/// The item's refresh on the provider's `stream_id`, the item in group 1.
fn item_refresh(stream_id: i32, name: &[u8]) -> Vec<u8> {
    let key = MsgKey {
        service_id: Some(7),
        name: Some(name),
        name_type: Some(1),
        ..MsgKey::default()
    };
    testing::refresh_in_group(stream_id, true, &GROUP, Some(&key), |o, f| {
        f.field(o, 22, |o| {
            primitive::put_real(
                o,
                RwfReal::from_decimal(tickwire_proto::Real::new(10_125, -2)),
            )
        });
    })
}

/// The provider's directory update on `stream_id`: group 1 is `data_state` now.
fn group_news(stream_id: i32, data_state: u8) -> Vec<u8> {
    testing::group_update(
        stream_id,
        7,
        &[(&GROUP, None, Some((stream::OPEN, data_state)))],
    )
}

/// Serves one connection of the node: its login, its directory request, its item
/// requests (each item in group 1); `news` gives the directory updates to send once
/// ITEM is served (given the directory's stream), one each time it returns one (None:
/// nothing now).
fn provide(listener: TcpListener, mut news: impl FnMut(i32) -> Option<Vec<u8>>) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut ch = Channel::new(Settings::default(), Instant::now());
    let (mut msg, mut buf) = (Vec::new(), [0u8; 16 * 1024]);
    let (mut directory_stream, mut served) = (None, false);
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => ch.handle_bytes(&buf[..n], Instant::now()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        while let Ok(Some(input)) = ch.poll(&mut msg) {
            if input != Input::Message {
                continue;
            }
            let m = Msg::decode(&msg).unwrap();
            let answer = match (m.class, m.domain) {
                (class::REQUEST, domain::LOGIN) => testing::login_accepted(m.stream_id),
                (class::REQUEST, domain::SOURCE) => {
                    directory_stream = Some(m.stream_id);
                    testing::service_up(m.stream_id, DirectoryMsg::Solicited, 7, b"PROV")
                }
                (class::REQUEST, domain::MARKET_PRICE) => {
                    let name = m.key.as_ref().and_then(|k| k.name).unwrap_or(b"");
                    served |= name == b"ITEM";
                    item_refresh(m.stream_id, name)
                }
                _ => continue,
            };
            ch.send(&answer);
        }
        if served {
            if let Some(update) = directory_stream.and_then(&mut news) {
                ch.send(&update);
            }
        }
        let _ = ch.handle_timeout(Instant::now());
        ch.end_batch();
        while !ch.transmit().is_empty() {
            match s.write(ch.transmit()) {
                Ok(n) => ch.consume(n),
                Err(_) => return,
            }
        }
    }
}

/// The subscriber's next status of `item`: its stream and data state.
fn next_status(sub: &mut tickwire_client::Subscriber, item: &str) -> (StreamState, DataState) {
    let e = expect_event(
        sub,
        LIMIT,
        "a status",
        |e| matches!(e, Event::Status { name, .. } if name == item),
    );
    let Event::Status { state, .. } = e else {
        unreachable!()
    };
    (state.stream, state.data)
}

#[test]
fn a_providers_group_status_reaches_the_subscribers_of_its_items() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap().to_string();
    // Suspect once the item is served, then ok again when the test says so.
    let (recover_tx, recover) = std::sync::mpsc::channel::<()>();
    let mut said = 0;
    let provider = std::thread::spawn(move || {
        provide(listener, move |stream_id| match said {
            0 => {
                said = 1;
                Some(group_news(stream_id, data::SUSPECT))
            }
            1 if recover.try_recv().is_ok() => {
                said = 2;
                Some(group_news(stream_id, data::OK))
            }
            _ => None,
        })
    });
    let mut node = Node::start(&["--rssl-provider", &at]);
    // The provider's service is up at the node once another item of it can be had.
    common::wait_for_image(node.addr, "PROV", "WARM", LIMIT).expect("PROV at the node");
    let mut sub = subscriber(node.addr);
    sub.subscribe("PROV", "ITEM", RequestOptions::default())
        .unwrap();
    expect_event(
        &mut sub,
        LIMIT,
        "the item's refresh",
        |e| matches!(e, Event::Refresh { name, .. } if name == "ITEM"),
    );
    assert_eq!(
        next_status(&mut sub, "ITEM"),
        (StreamState::Open, DataState::Suspect)
    );
    recover_tx.send(()).unwrap();
    assert_eq!(
        next_status(&mut sub, "ITEM"),
        (StreamState::Open, DataState::Ok)
    );
    node.stop(Duration::from_secs(10));
    let _ = provider.join();
}
