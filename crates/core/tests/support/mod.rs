//! A `Node` driven in process, without sockets: what the allocation test and the
//! last-value cache benchmark (`benches/lvc.rs`, which includes this file) share.

use std::time::Instant;
use tickwire_core::{CoreConfig, Node};
use tickwire_proto::{Directory, FieldList, Login, Message, Refresh, Role};

/// A node with the default configuration, its cache on or off.
pub(crate) fn node(cache: bool, now: Instant) -> Node {
    Node::new(
        CoreConfig {
            cache,
            ..CoreConfig::default()
        },
        now,
    )
}

/// `msgs` encoded back to back: the payload of one frame.
pub(crate) fn encode(msgs: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        m.encode(&mut out).expect("encodes");
    }
    out
}

/// Connects a peer and logs it in as `role`.
pub(crate) fn login(node: &mut Node, role: Role, now: Instant) -> usize {
    let c = node.connect("in-process", now);
    let f = encode(&[Message::Login(Login::new(role, "in-process", "u", ""))]);
    node.on_frame(c, &f, now);
    c
}

/// Has publisher `p` announce FEED, up, with `item_count` items.
pub(crate) fn announce_feed(node: &mut Node, p: usize, item_count: u32, now: Instant) {
    let f = encode(&[Message::Directory(Directory::one_service(
        "FEED", item_count,
    ))]);
    node.on_frame(p, &f, now);
}

/// Has publisher `p` send the whole image of FEED's `name` (seq 0, open and ok) on its
/// stream `sid`.
pub(crate) fn send_image(
    node: &mut Node,
    p: usize,
    sid: u32,
    name: &str,
    fields: &[u8],
    solicited: bool,
    now: Instant,
) {
    let f = encode(&[Message::Refresh(Refresh {
        solicited,
        ..Refresh::whole(
            sid,
            0,
            "FEED",
            name,
            FieldList::decode(fields).expect("image"),
        )
    })]);
    node.on_frame(p, &f, now);
}
