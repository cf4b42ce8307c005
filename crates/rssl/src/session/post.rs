//! Posts (contributions) from RSSL consumers: a PostMsg on an item's stream
//! (on-stream) or on the login stream with a key naming the item (off-stream), its
//! payload a field list or a nested Update or Refresh holding one. The fields are read
//! by the RWF dictionary into the node's own values; the node's answer comes back as
//! an AckMsg on the stream the post came on, in the post's domain, with a Nak code and
//! text when refused.

use super::{Outbox, Session};
use crate::rwf::container::FieldIter;
use crate::rwf::msg::{self, post, Msg};
use crate::rwf::primitive::dt;
use tickwire_proto::{Ack, FieldList, FieldListWriter, Message, NakCode, Post};

/// A post waiting for the node's answer: where its Ack goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingPost {
    stream: i32,
    domain: u8,
    seq: Option<u32>,
}

/// Posts remembered for their Acks; beyond this many, an Ack goes without the post's
/// sequence number (its stream and domain are still right for on-stream posts).
const MAX_PENDING_POSTS: usize = 65_536;

impl Session {
    pub(super) fn on_post(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let wants_ack = m.flags & post::ACK != 0;
        let post_id = m.post_id.unwrap_or(0);
        if let Err((code, text)) = self.send_post(m, wants_ack, post_id, to_node) {
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
            return;
        }
        if wants_ack && self.pending_posts.len() < MAX_PENDING_POSTS {
            self.pending_posts.insert(
                (m.stream_id, post_id),
                PendingPost {
                    stream: m.stream_id,
                    domain: m.domain,
                    seq: m.seq,
                },
            );
        }
    }

    fn send_post(
        &mut self,
        m: &Msg<'_>,
        ack: bool,
        post_id: u32,
        to_node: &mut Vec<u8>,
    ) -> Result<(), (NakCode, String)> {
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
                let Some(s) = self.services.iter().find(|s| s.id == service_id) else {
                    return refuse(
                        NakCode::SourceUnknown,
                        &format!("service id {service_id} is not in the source directory"),
                    );
                };
                let Some(name) = key.name else {
                    return refuse(NakCode::SymbolUnknown, "an off-stream post names no item");
                };
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
        })
    }

    /// The node's answer to a post.
    pub(super) fn on_node_ack(&mut self, a: &Ack<'_>, out: &mut impl Outbox) {
        // On-stream posts are answered on the consumer's stream of the item, off-stream
        // ones on its login stream.
        let stream = if a.stream_id == 0 {
            self.login_stream().unwrap_or(1)
        } else {
            match self.streams.get(&a.stream_id) {
                Some(s) => s.rssl,
                None => return,
            }
        };
        let pending = self.pending_posts.remove(&(stream, a.post_id));
        let (domain, seq) = pending.map_or((super::domain::MARKET_PRICE, None), |p| {
            debug_assert_eq!(p.stream, stream);
            (p.domain, p.seq)
        });
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
