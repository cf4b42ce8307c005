//! Posts (contributions) from RSSL consumers: a PostMsg on an item's stream
//! (on-stream) or on the login stream with a key naming the item (off-stream), its
//! payload a field list or a nested Update or Refresh holding one. The fields are read
//! by the RWF dictionary into the node's own values; the node's answer comes back as
//! an AckMsg on the stream the post came on, in the post's domain, with a Nak code and
//! text when refused (an off-stream post may come on any stream with a key: its Ack
//! goes back on that stream).

use super::{Outbox, Session};
use crate::rwf::container::FieldIter;
use crate::rwf::msg::{self, post, Msg};
use crate::rwf::primitive::dt;
use rustc_hash::FxHashMap;
use tickwire_proto::{Ack, FieldList, FieldListWriter, Message, NakCode, Post};

/// A post waiting for the node's answer: where its Ack goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingPost {
    /// The consumer's stream it came on.
    stream: i32,
    domain: u8,
    seq: Option<u32>,
}

/// Posts remembered for their Acks; beyond this many, an Ack goes without the post's
/// sequence number (its stream and domain are still right for on-stream posts).
const MAX_PENDING_POSTS: usize = 65_536;

/// Posts waiting for the node's answer, by the node's stream they went on (0: off-stream)
/// and their id: the node's Ack names that stream. An item stream's posts go with it.
#[derive(Debug, Default)]
pub(super) struct PendingPosts {
    by_stream: FxHashMap<u32, FxHashMap<u32, PendingPost>>,
    count: usize,
}

impl PendingPosts {
    fn insert(&mut self, native: u32, post_id: u32, p: PendingPost) {
        if self.is_full() {
            return;
        }
        if self
            .by_stream
            .entry(native)
            .or_default()
            .insert(post_id, p)
            .is_none()
        {
            self.count += 1;
        }
    }

    fn take(&mut self, native: u32, post_id: u32) -> Option<PendingPost> {
        let posts = self.by_stream.get_mut(&native)?;
        let p = posts.remove(&post_id)?;
        self.count -= 1;
        if posts.is_empty() {
            self.by_stream.remove(&native);
        }
        Some(p)
    }

    /// Whether no more posts are remembered.
    fn is_full(&self) -> bool {
        self.count >= MAX_PENDING_POSTS
    }

    /// Whether a post `post_id` on the node's stream `native` waits for its answer.
    fn waits(&self, native: u32, post_id: u32) -> bool {
        self.by_stream
            .get(&native)
            .is_some_and(|p| p.contains_key(&post_id))
    }

    /// Whether posts on the node's stream `native` wait for their answers.
    pub(super) fn has_stream(&self, native: u32) -> bool {
        self.by_stream.contains_key(&native)
    }

    /// The node's stream `native` is closed: its posts will not be answered on it.
    pub(super) fn forget_stream(&mut self, native: u32) {
        if let Some(posts) = self.by_stream.remove(&native) {
            self.count -= posts.len();
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.count
    }
}

impl Session {
    pub(super) fn on_post(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let wants_ack = m.flags & post::ACK != 0;
        let post_id = m.post_id.unwrap_or(0);
        match self.send_post(m, wants_ack, post_id, to_node) {
            Err((code, text)) => {
                if wants_ack {
                    self.buf.clear();
                    msg::put_ack(
                        &mut self.buf,
                        m.domain,
                        m.stream_id,
                        post_id,
                        Some(code.to_u8()),
                        text.as_bytes(),
                        m.seq,
                    );
                    out.send(&self.buf);
                }
            }
            Ok(native) if wants_ack => self.pending_posts.insert(
                native,
                post_id,
                PendingPost {
                    stream: m.stream_id,
                    domain: m.domain,
                    seq: m.seq,
                },
            ),
            Ok(_) => {}
        }
    }

    /// Sends the post to the node; returns the node's stream it went on (0: off-stream).
    fn send_post(
        &mut self,
        m: &Msg<'_>,
        ack: bool,
        post_id: u32,
        to_node: &mut Vec<u8>,
    ) -> Result<u32, (NakCode, String)> {
        let refuse = |code, text: &str| Err((code, text.to_string()));
        if m.domain != super::domain::MARKET_PRICE {
            return refuse(NakCode::DeniedBySrc, "only MarketPrice items take posts");
        }
        // The fields: the payload itself, or an Update or Refresh inside it.
        let (fields, image) = match m.container {
            dt::FIELD_LIST => (m.payload, false),
            dt::MSG => match Msg::decode(m.payload) {
                Ok(inner) if inner.container == dt::FIELD_LIST => {
                    (inner.payload, inner.class == msg::class::REFRESH)
                }
                Ok(_) => {
                    return refuse(
                        NakCode::InvalidContent,
                        "the posted message holds no field list",
                    )
                }
                Err(e) => {
                    return refuse(
                        NakCode::InvalidContent,
                        &format!("the posted message is malformed: {e}"),
                    )
                }
            },
            _ => {
                return refuse(
                    NakCode::InvalidContent,
                    "a post carries a field list or a message holding one",
                )
            }
        };
        let mut native = Vec::with_capacity(fields.len() * 2);
        let mut w = FieldListWriter::new(&mut native);
        let iter = FieldIter::new(fields).map_err(|e| (NakCode::InvalidContent, e.to_string()))?;
        for entry in iter {
            let (fid, body) = entry.map_err(|e| (NakCode::InvalidContent, e.to_string()))?;
            match self.cfg.dictionary.value(fid, body) {
                Ok(Some(v)) => {
                    if !w.push(fid, v) {
                        return refuse(NakCode::InvalidContent, "too many fields");
                    }
                }
                Ok(None) => {
                    return refuse(NakCode::InvalidContent,
                        &format!("field {fid} is not in the node's dictionary, or of a type it does not carry"))
                }
                Err(e) => return refuse(NakCode::InvalidContent, &format!("field {fid}: {e}")),
            }
        }
        w.finish();
        let fields =
            FieldList::decode(&native).map_err(|e| (NakCode::InvalidContent, e.to_string()))?;
        // On-stream: the item's stream; off-stream (the login stream, or any other with
        // a key): the key names service and item.
        let (stream_id, service, name) = match self.by_rssl.get(&m.stream_id) {
            Some(&native_id) => (native_id, String::new(), String::new()),
            None => {
                let key = m.key.clone().unwrap_or_default();
                let Some(service_id) = key.service_id else {
                    return refuse(
                        NakCode::SourceUnknown,
                        "an off-stream post names no service id",
                    );
                };
                let Some(s) = self.service(service_id) else {
                    return refuse(
                        NakCode::SourceUnknown,
                        &format!("service id {service_id} is not in the source directory"),
                    );
                };
                let Some(name) = key.name else {
                    return refuse(NakCode::SymbolUnknown, "an off-stream post names no item");
                };
                // The node answers an off-stream post by its post id alone: two waiting
                // at once with one id could not be told apart (as on the WebSocket API).
                if ack && self.pending_posts.waits(0, post_id) {
                    return refuse(
                        NakCode::InvalidContent,
                        &format!("post id {post_id} is already waiting for its Ack: give each post its own"),
                    );
                }
                // Nor could one be told from another once none is remembered.
                if ack && self.pending_posts.is_full() {
                    return refuse(
                        NakCode::NoResources,
                        &format!("{MAX_PENDING_POSTS} posts wait for their Acks: wait for some"),
                    );
                }
                (
                    0,
                    s.name.clone(),
                    String::from_utf8_lossy(name).into_owned(),
                )
            }
        };
        let msg = Message::Post(Post {
            stream_id,
            post_id,
            ack,
            image,
            redelivered: false,
            service: &service,
            name: &name,
            fields,
        });
        msg.encode(to_node).map_err(|e| {
            (
                NakCode::InvalidContent,
                format!("the post is too large: {e}"),
            )
        })?;
        Ok(stream_id)
    }

    /// The node's answer to a post: on the consumer's stream the post came on, in its
    /// domain, with its sequence number. One not remembered (over the limit) goes on the
    /// item's stream, or the login stream for an off-stream post.
    pub(super) fn on_node_ack(&mut self, a: &Ack<'_>, out: &mut impl Outbox) {
        let (stream, domain, seq) = match self.pending_posts.take(a.stream_id, a.post_id) {
            Some(p) => (p.stream, p.domain, p.seq),
            None if a.stream_id == 0 => (
                self.login_stream().unwrap_or(1),
                super::domain::MARKET_PRICE,
                None,
            ),
            None => match self.streams.get(&a.stream_id) {
                Some(s) => (s.rssl, super::domain::MARKET_PRICE, None),
                None => return,
            },
        };
        self.buf.clear();
        msg::put_ack(
            &mut self.buf,
            domain,
            stream,
            a.post_id,
            a.nak.map(NakCode::to_u8),
            a.text.as_bytes(),
            seq,
        );
        out.send(&self.buf);
    }
}
