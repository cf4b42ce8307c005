//! Posts through an upstream link: the core forwards a post for an upstream-fed service
//! to the link (its publisher), which posts it upstream under a number of its own and
//! passes the upstream's answer back under the core's. A post the link cannot send, or
//! whose answer the lost connection took with it, is refused with `GatewayDown`.

use rustc_hash::FxHashMap;
use tickwire_proto::{Ack, Message, NakCode};

/// Posts waiting for their upstream's answer at most; more are refused (`NoResources`).
/// The upstream answers every post within its own post timeout, so this bounds only an
/// upstream that does not.
pub(crate) const MAX_PENDING: usize = 100_000;

/// The core's post: its stream and its number, to answer under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CorePost {
    pub stream: u32,
    pub post_id: u32,
}

#[derive(Default)]
pub(crate) struct UpstreamPosts {
    /// The link's number upstream -> the core's post.
    pending: FxHashMap<u32, CorePost>,
    next_id: u32,
}

impl UpstreamPosts {
    /// A number for a post that is to be sent upstream, or `None` when too many wait.
    pub(crate) fn begin(&mut self, post: CorePost, ack: bool) -> Result<u32, (NakCode, String)> {
        if ack && self.pending.len() >= MAX_PENDING {
            return Err((
                NakCode::NoResources,
                format!("{MAX_PENDING} posts already wait for the upstream's answer"),
            ));
        }
        self.next_id = self.next_id.wrapping_add(1);
        if ack {
            self.pending.insert(self.next_id, post);
        }
        Ok(self.next_id)
    }

    /// It could not be sent after all.
    pub(crate) fn cancel(&mut self, id: u32) {
        self.pending.remove(&id);
    }

    /// The upstream's answer, for the core (`None`: not one of ours, or already
    /// answered).
    pub(crate) fn answer(&mut self, a: &Ack<'_>) -> Option<CorePost> {
        self.pending.remove(&a.post_id)
    }

    /// The connection is gone, and the answers with it.
    pub(crate) fn take_all(&mut self) -> Vec<CorePost> {
        let mut all: Vec<(u32, CorePost)> = self.pending.drain().collect();
        all.sort_unstable_by_key(|(id, _)| *id);
        all.into_iter().map(|(_, p)| p).collect()
    }
}

/// Encodes the answer to the core's post onto `out`.
pub(crate) fn answer_to_core(out: &mut Vec<u8>, p: CorePost, nak: Option<NakCode>, text: &str) {
    let _ = Message::Ack(Ack {
        stream_id: p.stream,
        post_id: p.post_id,
        nak,
        text,
    })
    .encode(out);
}
