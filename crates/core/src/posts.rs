//! Contributions (posts) and their acknowledgements (docs/PROTOCOL.md, 6.14).
//!
//! A subscriber's Post is checked here (the stream or the names, the user's right to
//! post, the node's list of services that take posts, a publisher to take it, the
//! poster's count of unanswered posts) and forwarded to the service's publisher under a
//! number of the node's own; the publisher's Ack comes back under that number and goes
//! to the poster with the poster's. A post the publisher leaves unanswered is refused
//! with `NoResponse` after `Limits::post_timeout`, and one whose publisher leaves first
//! with `SourceDown`: a poster that asked for an answer always gets exactly one.

use crate::{ConnId, ConnRole, Node};
use log::info;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::time::Instant;
use tickwire_auth::Action;
use tickwire_proto::{Ack, Message, NakCode, Post};

/// Which services take posts on this node (`[posts] services`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PostServices {
    /// None: every post is refused (`DeniedBySrc`).
    #[default]
    None,
    /// Every service.
    All,
    /// These services.
    Only(Vec<String>),
}

impl PostServices {
    /// From the config's list: `["*"]` is every service, `[]` none.
    pub fn from_list(list: &[String]) -> Self {
        if list.iter().any(|s| s == "*") {
            PostServices::All
        } else if list.is_empty() {
            PostServices::None
        } else {
            PostServices::Only(list.to_vec())
        }
    }

    pub fn takes(&self, service: &str) -> bool {
        match self {
            PostServices::None => false,
            PostServices::All => true,
            PostServices::Only(list) => list.iter().any(|s| s == service),
        }
    }
}

/// A forwarded post waiting for its publisher's answer.
struct Pending {
    poster: ConnId,
    poster_stream: u32,
    poster_post_id: u32,
    deadline: Instant,
}

/// The posts in flight.
#[derive(Default)]
pub(crate) struct Posts {
    /// (publisher, the node's post id) -> who asked.
    pending: FxHashMap<(ConnId, u32), Pending>,
    /// In the order they were forwarded, which is deadline order (one timeout for all).
    deadlines: VecDeque<(Instant, ConnId, u32)>,
    /// Unanswered posts per poster (bounded by `Limits::max_pending_posts`).
    per_poster: FxHashMap<ConnId, usize>,
    next_id: u32,
}

/// What happened to posts, for the node's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostStats {
    pub posts_in: u64,
    pub posts_forwarded: u64,
    pub acks_out: u64,
    pub naks_out: u64,
    /// Posts refused because the publisher did not answer in time.
    pub post_timeouts: u64,
    /// Acks from a publisher for no post in flight (late, or never asked for).
    pub acks_unmatched: u64,
}

impl Node {
    /// A subscriber's Post.
    pub(crate) fn on_subscriber_post(&mut self, conn: ConnId, p: &Post<'_>) {
        self.stats.posts.posts_in += 1;
        match self.route_post(conn, p) {
            Ok(()) => {}
            Err((code, text)) => {
                info!(target: "audit", "post refused: {text}");
                self.answer_post(conn, p.stream_id, p.post_id, Some(code), &text);
            }
        }
    }

    fn route_post(&mut self, conn: ConnId, p: &Post<'_>) -> Result<(), (NakCode, String)> {
        // The item: the poster's open stream, or the names of an off-stream post.
        let (svc, item_name, pub_stream) = if p.stream_id != 0 {
            let c = self.conns[conn].as_ref().expect("the poster is live");
            let Some(r) = c.sub_streams.get(&p.stream_id) else {
                return Err((
                    NakCode::NotOpen,
                    format!("stream {} is not open", p.stream_id),
                ));
            };
            let item = self.items.get(r.item).expect("an open stream's item");
            let stream = item.publisher.map_or(0, |(_, sid)| sid);
            (item.service, item.name.to_string(), stream)
        } else {
            if p.service.is_empty() || p.name.is_empty() {
                return Err((
                    NakCode::InvalidContent,
                    "an off-stream post (stream 0) must name its service and item".into(),
                ));
            }
            let Some(&svc) = self.service_by_name.get(p.service) else {
                if !self.may(conn, Action::Post, p.service) {
                    return Err((
                        NakCode::AccessDenied,
                        self.not_entitled(conn, Action::Post, p.service),
                    ));
                }
                return Err((
                    NakCode::SourceUnknown,
                    format!("unknown service {:?}", p.service),
                ));
            };
            let stream = self.services[svc]
                .items
                .get(p.name)
                .and_then(|&h| self.items.get(h))
                .and_then(|i| i.publisher)
                .map_or(0, |(_, sid)| sid);
            (svc, p.name.to_string(), stream)
        };
        let service = self.services[svc].name.clone();
        if !self.may(conn, Action::Post, &service) {
            return Err((
                NakCode::AccessDenied,
                self.not_entitled(conn, Action::Post, &service),
            ));
        }
        if !self.cfg.posts.takes(&service) {
            return Err((
                NakCode::DeniedBySrc,
                format!("service {service:?} does not take posts on this node ([posts] services)"),
            ));
        }
        let Some(publisher) = self.services[svc]
            .publisher
            .filter(|_| self.services[svc].up)
        else {
            return Err((NakCode::SourceDown, format!("service {service:?} is down")));
        };
        let max = self.cfg.limits.max_pending_posts;
        let waiting = self.posts.per_poster.get(&conn).copied().unwrap_or(0);
        if p.ack && waiting >= max {
            return Err((
                NakCode::NoResources,
                format!("{max} posts from this connection are already waiting for an answer (posts.max_pending)"),
            ));
        }
        self.posts.next_id = self.posts.next_id.wrapping_add(1);
        let id = self.posts.next_id;
        self.send(
            publisher,
            &Message::Post(Post {
                stream_id: pub_stream,
                post_id: id,
                ack: p.ack,
                image: p.image,
                service: &service,
                name: &item_name,
                fields: p.fields,
            }),
        );
        self.stats.posts.posts_forwarded += 1;
        if p.ack {
            let deadline = self.now + self.cfg.limits.post_timeout;
            self.posts.pending.insert(
                (publisher, id),
                Pending {
                    poster: conn,
                    poster_stream: p.stream_id,
                    poster_post_id: p.post_id,
                    deadline,
                },
            );
            self.posts.deadlines.push_back((deadline, publisher, id));
            *self.posts.per_poster.entry(conn).or_default() += 1;
            self.tick_by(deadline);
        }
        Ok(())
    }

    /// A publisher's Ack: to the poster, under the poster's post id.
    pub(crate) fn on_publisher_ack(&mut self, conn: ConnId, a: &Ack<'_>) {
        let Some(p) = self.take_pending(conn, a.post_id) else {
            self.stats.posts.acks_unmatched += 1;
            return;
        };
        self.answer_post(p.poster, p.poster_stream, p.poster_post_id, a.nak, a.text);
    }

    /// Posts whose publisher did not answer in time are refused.
    pub(crate) fn expire_posts(&mut self, now: Instant) {
        while let Some(&(deadline, publisher, id)) = self.posts.deadlines.front() {
            if deadline > now {
                self.tick_by(deadline);
                break;
            }
            self.posts.deadlines.pop_front();
            // Answered meanwhile (or its id is in use again by a later post): nothing to do.
            if self.posts.pending.get(&(publisher, id)).map(|p| p.deadline) != Some(deadline) {
                continue;
            }
            let p = self.take_pending(publisher, id).expect("checked above");
            self.stats.posts.post_timeouts += 1;
            let text = format!(
                "the publisher did not answer within {} ms (posts.timeout_ms)",
                self.cfg.limits.post_timeout.as_millis()
            );
            self.answer_post(
                p.poster,
                p.poster_stream,
                p.poster_post_id,
                Some(NakCode::NoResponse),
                &text,
            );
        }
    }

    /// A publisher left: every post it had not answered is refused.
    pub(crate) fn posts_publisher_gone(&mut self, publisher: ConnId) {
        if self.posts.pending.is_empty() {
            return;
        }
        let mut ids: Vec<u32> = self
            .posts
            .pending
            .keys()
            .filter(|k| k.0 == publisher)
            .map(|k| k.1)
            .collect();
        ids.sort_unstable(); // answered in the order they were numbered
        for id in ids {
            let p = self.take_pending(publisher, id).expect("listed above");
            self.answer_post(
                p.poster,
                p.poster_stream,
                p.poster_post_id,
                Some(NakCode::SourceDown),
                "the publisher left before answering",
            );
        }
    }

    /// A poster left: answers to its posts have nowhere to go (and its id will be
    /// someone else's).
    pub(crate) fn posts_poster_gone(&mut self, poster: ConnId) {
        if self.posts.per_poster.remove(&poster).is_some() {
            self.posts.pending.retain(|_, p| p.poster != poster);
        }
    }

    fn take_pending(&mut self, publisher: ConnId, id: u32) -> Option<Pending> {
        let p = self.posts.pending.remove(&(publisher, id))?;
        if let Some(n) = self.posts.per_poster.get_mut(&p.poster) {
            *n -= 1;
            if *n == 0 {
                self.posts.per_poster.remove(&p.poster);
            }
        }
        Some(p)
    }

    fn answer_post(
        &mut self,
        poster: ConnId,
        stream_id: u32,
        post_id: u32,
        nak: Option<NakCode>,
        text: &str,
    ) {
        if self.role(poster) != Some(ConnRole::Subscriber) {
            return;
        }
        if nak.is_some() {
            self.stats.posts.naks_out += 1;
        } else {
            self.stats.posts.acks_out += 1;
        }
        self.send(
            poster,
            &Message::Ack(Ack {
                stream_id,
                post_id,
                nak,
                text,
            }),
        );
    }
}
