//! What the node's unit tests share: a publisher of FEED in a core, and the messages a
//! connection of the core was sent.

use std::time::Instant;
use tickwire_core::{ConnId, Node};
use tickwire_proto::{
    Directory, FieldList, FrameReader, Login, Message, MessageIter, Refresh, Role, State,
};

/// A publisher of FEED in `core`, its item A's image (no fields) sent on stream 1.
pub(crate) fn feed_publisher(core: &mut Node, now: Instant) -> ConnId {
    let conn = core.connect("127.0.0.1:4001", now);
    let login = Login::new(Role::Publisher, "feed", "", "");
    core.on_message(conn, &Message::Login(login), now);
    let directory = Directory::one_service("FEED", 1);
    core.on_message(conn, &Message::Directory(directory), now);
    let refresh = Refresh {
        stream_id: 1,
        seq: 0,
        complete: true,
        solicited: false,
        clear_cache: true,
        state: State::OPEN_OK,
        service: "FEED",
        name: "A",
        fields: FieldList::from_trusted(&[]),
    };
    core.on_message(conn, &Message::Refresh(refresh), now);
    conn
}

/// Each message `core` has for `conn`, in order (taken from its output).
pub(crate) fn each_message_to(core: &mut Node, conn: ConnId, mut f: impl FnMut(Message<'_>)) {
    let mut bytes = Vec::new();
    if let Some(out) = core.output(conn) {
        out.take_all(&mut bytes);
    }
    let mut frames = FrameReader::new(1 << 20);
    frames.extend(&bytes);
    while let Some(frame) = frames.next_frame().unwrap() {
        for m in MessageIter::new(frame) {
            f(m.unwrap().message);
        }
    }
}
