//! Contributions (posts) and their acknowledgements (docs/PROTOCOL.md, 6.14).
//!
//! A subscriber's Post is checked here (the stream or the names, the user's right to
//! post, the node's list of services that take posts, a publisher to take it, the
//! poster's count of unanswered posts) and forwarded to the service's publisher under a
//! number of the node's own; the publisher's Ack comes back under that number and goes
//! to the poster with the poster's. A post the publisher leaves unanswered is refused
//! with `NoResponse` after `Limits::post_timeout`, and one whose publisher leaves first
//! with `SourceDown`: a poster that asked for an answer always gets exactly one.
//!
//! Posts to a journaled service (`CoreConfig::journal`) go through the node's journal
//! (docs/JOURNAL.md), which the core never touches itself: it asks for a "received"
//! record ([`Node::take_journal_requests`]) and forwards the post only once the journal
//! says it is kept ([`Node::on_journaled`]); every answer to it, the publisher's or the
//! node's own, is recorded as "completed" before it reaches the poster. Posts the
//! journal held as received and not completed when the node stopped are delivered again
//! ([`Node::redeliver_posts`]), marked as such, once their service has a publisher.

use crate::{ConnId, ConnRole, Node};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::time::Instant;
use tickwire_auth::Action;
use tickwire_proto::{Ack, FieldList, Message, NakCode, Post};
use tracing::{info, warn};

/// Which services a node setting applies to (`[posts] services`, `[journal] services`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PostServices {
    /// None.
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

    /// Whether the setting applies to `service`.
    pub fn takes(&self, service: &str) -> bool {
        match self {
            PostServices::None => false,
            PostServices::All => true,
            PostServices::Only(list) => list.iter().any(|s| s == service),
        }
    }
}

/// What the node's journal is asked to record (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRequest {
    /// Pass it back to [`Node::on_journaled`].
    pub ticket: u64,
    /// What to write.
    pub write: JournalWrite,
}

/// A record for the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalWrite {
    /// A post received.
    Received {
        /// Its item's service.
        service: String,
        /// Its item.
        item: String,
        /// Who posted it.
        user: String,
        /// The poster's number for it.
        post_id: u32,
        /// A whole image, not an update.
        image: bool,
        /// The encoded fields.
        fields: Vec<u8>,
    },
    /// A post answered.
    Completed {
        /// The seq of the received record.
        received: u64,
        /// `None`: accepted.
        nak: Option<NakCode>,
        /// The publisher's text.
        text: String,
    },
    /// Refreshes and updates of journaled items (`[journal] updates`), each as a u32
    /// length then its part ([`tickwire_journal::ItemMessage::encode_part`]). Nobody
    /// waits for these: the answer only counts failures.
    ItemMessages {
        /// The messages, each a u32 length then its part.
        parts: Vec<u8>,
        /// How many.
        count: u64,
    },
    /// The history of an item, for a replay: answered with
    /// [`Node::on_history`].
    History(tickwire_journal::HistoryQuery),
}

/// A post the journal held as received and not completed when the node last stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redelivery {
    /// Its received record's seq.
    pub seq: u64,
    /// Its item's service.
    pub service: String,
    /// Its item.
    pub item: String,
    /// A whole image, not an update.
    pub image: bool,
    /// The encoded fields.
    pub fields: Vec<u8>,
}

/// Who waits for a post's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Poster {
    conn: ConnId,
    stream: u32,
    post_id: u32,
    /// It asked for an answer (the node's own refusals go to it in any case).
    wants_answer: bool,
}

/// A forwarded post waiting for its publisher's answer.
struct Pending {
    /// `None`: a post delivered again from the journal; nobody waits for it.
    poster: Option<Poster>,
    /// Its received record, when its service is journaled.
    journal_seq: Option<u64>,
    deadline: Instant,
}

/// A post (or its answer) waiting for the journal.
enum Journaling {
    Received {
        /// `None` once the poster has gone.
        poster: Option<Poster>,
        service: String,
        item: String,
        image: bool,
        fields: Vec<u8>,
    },
    Completed {
        poster: Option<Poster>,
        nak: Option<NakCode>,
        text: String,
    },
}

/// The posts in flight.
#[derive(Default)]
pub(crate) struct Posts {
    /// (publisher, the node's post id) -> who asked.
    pending: FxHashMap<(ConnId, u32), Pending>,
    /// In the order they were forwarded, which is deadline order (one timeout for all).
    deadlines: VecDeque<(Instant, ConnId, u32)>,
    /// Posts of each poster not answered yet (bounded by `Limits::max_pending_posts`).
    per_poster: FxHashMap<ConnId, usize>,
    next_id: u32,
    /// Records the journal has been asked for, by ticket.
    journaling: FxHashMap<u64, Journaling>,
    journal_requests: Vec<JournalRequest>,
    next_ticket: u64,
    /// Posts from the journal waiting for a publisher of their service.
    redeliver: Vec<Redelivery>,
    /// Journaled refreshes and updates since the last request (see
    /// [`JournalWrite::ItemMessages`]).
    item_messages: Vec<u8>,
    item_message_count: u64,
    /// When the last "not journaled" warning was logged (at most one a second).
    item_warning_at: Option<Instant>,
}

impl Posts {
    /// Deadlines kept (of posts waiting, and of answered ones not yet passed).
    #[cfg(test)]
    pub(crate) fn deadlines_kept(&self) -> usize {
        self.deadlines.len()
    }

    /// Queues one refresh or update of a journaled item (on the update's path: one
    /// copy into a buffer handed over once per turn of the event loop).
    pub(crate) fn journal_item_message(&mut self, m: &tickwire_journal::ItemMessage<'_>) {
        let at = self.item_messages.len();
        self.item_messages.extend_from_slice(&[0; 4]);
        if m.encode_part(&mut self.item_messages).is_err() {
            self.item_messages.truncate(at);
            return;
        }
        let len = (self.item_messages.len() - at - 4) as u32;
        self.item_messages[at..at + 4].copy_from_slice(&len.to_be_bytes());
        self.item_message_count += 1;
    }

    /// The journaled messages so far become a request (before any request that must
    /// see them, such as a history).
    pub(crate) fn flush_item_messages(&mut self) {
        if self.item_messages.is_empty() {
            return;
        }
        let parts = std::mem::take(&mut self.item_messages);
        let count = std::mem::take(&mut self.item_message_count);
        self.journal_requests.push(JournalRequest {
            ticket: 0,
            write: JournalWrite::ItemMessages { parts, count },
        });
    }

    pub(crate) fn new_ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    pub(crate) fn push_request(&mut self, r: JournalRequest) {
        self.journal_requests.push(r);
    }
}

/// What happened to posts, for the node's figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostStats {
    /// Posts received.
    pub posts_in: u64,
    /// Posts forwarded to their publisher.
    pub posts_forwarded: u64,
    /// Acks sent to posters.
    pub acks_out: u64,
    /// Naks sent to posters.
    pub naks_out: u64,
    /// Posts refused because the publisher did not answer in time.
    pub post_timeouts: u64,
    /// Acks from a publisher for no post in flight (late, or never asked for).
    pub acks_unmatched: u64,
    /// Posts delivered again from the journal after a restart.
    pub redelivered: u64,
    /// Journal records asked for, and those the journal could not keep.
    pub journal_writes: u64,
    /// Journal records that could not be kept.
    pub journal_failures: u64,
}

/// A post on its way to a publisher.
struct Outgoing<'a> {
    service: &'a str,
    item: &'a str,
    image: bool,
    redelivered: bool,
    fields: FieldList<'a>,
    poster: Option<Poster>,
    journal_seq: Option<u64>,
}

impl Node {
    /// A subscriber's Post.
    pub(crate) fn on_subscriber_post(&mut self, conn: ConnId, p: &Post<'_>) {
        self.stats.posts.posts_in += 1;
        if let Err((code, text)) = self.route_post(conn, p) {
            info!(target: "audit", "post refused: {text}");
            self.answer(
                Poster {
                    conn,
                    stream: p.stream_id,
                    post_id: p.post_id,
                    wants_answer: true,
                },
                Some(code),
                &text,
            );
        }
    }

    fn route_post(&mut self, conn: ConnId, p: &Post<'_>) -> Result<(), (NakCode, String)> {
        // The item: the poster's open stream, or the names of an off-stream post.
        let (svc, item_name) = if p.stream_id != 0 {
            let c = self.conns[conn].as_ref().expect("the poster is live");
            let Some(r) = c.sub_streams.get(&p.stream_id) else {
                return Err((
                    NakCode::NotOpen,
                    format!("stream {} is not open", p.stream_id),
                ));
            };
            let item = self.items.get(r.item).expect("an open stream's item");
            (item.service, item.name.to_string())
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
            (svc, p.name.to_string())
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
        let Some(publisher) = self.up_publisher(&service) else {
            return Err((NakCode::SourceDown, format!("service {service:?} is down")));
        };
        if let Some(why) = self.publisher_behind(publisher, &service) {
            return Err((NakCode::NoResources, why));
        }
        let max = self.cfg.limits.max_pending_posts;
        let waiting = self.posts.per_poster.get(&conn).copied().unwrap_or(0);
        let journaled = self.cfg.journal.takes(&service);
        if (p.ack || journaled) && waiting >= max {
            return Err((
                NakCode::NoResources,
                format!("{max} posts from this connection are already waiting for an answer (posts.max_pending)"),
            ));
        }
        let poster = Poster {
            conn,
            stream: p.stream_id,
            post_id: p.post_id,
            wants_answer: p.ack,
        };
        if journaled {
            // Forwarded once the journal has it.
            let user = self.conns[conn]
                .as_ref()
                .map_or(String::new(), |c| c.user.clone());
            *self.posts.per_poster.entry(conn).or_default() += 1;
            self.journal(
                JournalWrite::Received {
                    service: service.clone(),
                    item: item_name.clone(),
                    user,
                    post_id: p.post_id,
                    image: p.image,
                    fields: p.fields.as_bytes().to_vec(),
                },
                Journaling::Received {
                    poster: Some(poster),
                    service,
                    item: item_name,
                    image: p.image,
                    fields: p.fields.as_bytes().to_vec(),
                },
            );
            return Ok(());
        }
        self.forward(Outgoing {
            service: &service,
            item: &item_name,
            image: p.image,
            redelivered: false,
            fields: p.fields,
            poster: Some(poster),
            journal_seq: None,
        });
        Ok(())
    }

    /// Why `publisher` takes no more posts now, if it does not: it is not reading them.
    /// A publisher that does not read its posts must not make the node queue them
    /// without end (a flood of posts that ask for no answer is counted nowhere else),
    /// nor be disconnected for it as a slow reader.
    fn publisher_behind(&self, publisher: ConnId, service: &str) -> Option<String> {
        let backlog = self.pending_output(publisher);
        (backlog > self.cfg.limits.max_output_bytes / 4).then(|| {
            format!("the publisher of {service:?} is not keeping up: {backlog} bytes wait for it")
        })
    }

    /// The publisher of `service`, if it has one and it is up.
    fn up_publisher(&self, service: &str) -> Option<ConnId> {
        let &svc = self.service_by_name.get(service)?;
        let s = &self.services[svc];
        s.publisher.filter(|_| s.up)
    }

    /// Sends a post to its service's publisher (which must be up) under a number of the
    /// node's own, and waits for the answer when someone needs it.
    fn forward(&mut self, o: Outgoing<'_>) {
        let Some(publisher) = self.up_publisher(o.service) else {
            return self.finish(
                o.poster,
                o.journal_seq,
                Some(NakCode::SourceDown),
                "the service went down",
            );
        };
        // Checked again here: the journal may hand back thousands of posts at once, all
        // checked while the publisher's queue was short. (Posts delivered again after a
        // restart have no poster to tell: `redeliver_ready` holds them back instead.)
        if !o.redelivered {
            if let Some(why) = self.publisher_behind(publisher, o.service) {
                return self.finish(o.poster, o.journal_seq, Some(NakCode::NoResources), &why);
            }
        }
        let pub_stream = self
            .service_by_name
            .get(o.service)
            .and_then(|&svc| self.services[svc].items.get(o.item))
            .and_then(|&h| self.items.get(h))
            .and_then(|i| i.publisher)
            .map_or(0, |(_, sid)| sid);
        self.posts.next_id = self.posts.next_id.wrapping_add(1);
        let id = self.posts.next_id;
        // A journaled post is always answered: its completion is recorded.
        let ack = o.journal_seq.is_some() || o.poster.is_some_and(|p| p.wants_answer);
        self.send(
            publisher,
            &Message::Post(Post {
                stream_id: pub_stream,
                post_id: id,
                ack,
                image: o.image,
                redelivered: o.redelivered,
                service: o.service,
                name: o.item,
                fields: o.fields,
            }),
        );
        self.stats.posts.posts_forwarded += 1;
        if !ack {
            return;
        }
        let deadline = self.now + self.cfg.limits.post_timeout;
        self.posts.pending.insert(
            (publisher, id),
            Pending {
                poster: o.poster,
                journal_seq: o.journal_seq,
                deadline,
            },
        );
        self.posts.deadlines.push_back((deadline, publisher, id));
        // An answered post leaves its deadline here until it passes: once those outnumber
        // the posts waiting they go, so posts answered at once hold no memory for the
        // timeout's length (amortized O(1) a post).
        if self.posts.deadlines.len() > 2 * self.posts.pending.len() + 64 {
            let pending = &self.posts.pending;
            self.posts.deadlines.retain(|&(at, publisher, id)| {
                pending
                    .get(&(publisher, id))
                    .is_some_and(|p| p.deadline == at)
            });
        }
        if let Some(p) = o.poster {
            // Journaled posts were counted when they went to the journal.
            if o.journal_seq.is_none() {
                *self.posts.per_poster.entry(p.conn).or_default() += 1;
            }
        }
        self.tick_by(deadline);
    }

    /// A publisher's Ack: to the poster, under the poster's post id.
    pub(crate) fn on_publisher_ack(&mut self, conn: ConnId, a: &Ack<'_>) {
        let Some(p) = self.posts.pending.remove(&(conn, a.post_id)) else {
            self.stats.posts.acks_unmatched += 1;
            return;
        };
        self.finish(p.poster, p.journal_seq, a.nak, a.text);
    }

    /// A post's answer: recorded as completed first when it was journaled, then to the
    /// poster.
    fn finish(
        &mut self,
        poster: Option<Poster>,
        journal_seq: Option<u64>,
        nak: Option<NakCode>,
        text: &str,
    ) {
        match journal_seq {
            Some(received) => self.journal(
                JournalWrite::Completed {
                    received,
                    nak,
                    text: text.to_string(),
                },
                Journaling::Completed {
                    poster,
                    nak,
                    text: text.to_string(),
                },
            ),
            None => {
                if let Some(p) = poster {
                    self.release(p.conn);
                    self.answer(p, nak, text);
                }
            }
        }
    }

    fn journal(&mut self, write: JournalWrite, then: Journaling) {
        let ticket = self.posts.new_ticket();
        self.posts.journaling.insert(ticket, then);
        self.posts
            .journal_requests
            .push(JournalRequest { ticket, write });
        self.stats.posts.journal_writes += 1;
    }

    /// Moves the records the journal is asked for into `into` (cleared first): write
    /// them, then tell [`Node::on_journaled`] of each.
    pub fn take_journal_requests(&mut self, into: &mut Vec<JournalRequest>) {
        self.posts.flush_item_messages();
        into.clear();
        std::mem::swap(into, &mut self.posts.journal_requests);
    }

    /// The journal wrote (and, by its policy, synced) the record of `ticket`, whose seq
    /// is `Ok`, or could not (`Err`: why).
    pub fn on_journaled(&mut self, ticket: u64, result: Result<u64, String>, now: Instant) {
        self.merge_deferred();
        self.now = now;
        if ticket == 0 {
            // Journaled refreshes and updates: only a failure is news.
            if let Err(why) = result {
                self.stats.posts.journal_failures += 1;
                let quiet = self.posts.item_warning_at.is_some_and(|at| {
                    now.saturating_duration_since(at) < std::time::Duration::from_secs(1)
                });
                if !quiet {
                    warn!("journal: refreshes and updates not kept: {why}");
                    self.posts.item_warning_at = Some(now);
                }
            }
            return;
        }
        let Some(j) = self.posts.journaling.remove(&ticket) else {
            return;
        };
        match (j, result) {
            (
                Journaling::Received {
                    poster,
                    service,
                    item,
                    image,
                    fields,
                },
                Ok(seq),
            ) => self.forward(Outgoing {
                service: &service,
                item: &item,
                image,
                redelivered: false,
                fields: FieldList::from_trusted(&fields),
                poster,
                journal_seq: Some(seq),
            }),
            (Journaling::Received { poster, .. }, Err(why)) => {
                self.stats.posts.journal_failures += 1;
                warn!("post refused: the journal cannot keep it: {why}");
                if let Some(poster) = poster {
                    self.release(poster.conn);
                    let text = format!("the node's journal cannot keep the post: {why}");
                    self.answer(
                        Poster {
                            wants_answer: true,
                            ..poster
                        },
                        Some(NakCode::NoResources),
                        &text,
                    );
                }
            }
            (Journaling::Completed { poster, nak, text }, Ok(_)) => {
                if let Some(p) = poster {
                    self.release(p.conn);
                    self.answer(p, nak, &text);
                }
            }
            (Journaling::Completed { poster, nak, text }, Err(why)) => {
                // The publisher has answered, but the record that completes the post
                // is not kept: a restart delivers the post again (marked as delivered
                // before). An Ack now would promise what the journal does not hold, so
                // the poster is told why it has no Ack.
                self.stats.posts.journal_failures += 1;
                warn!("the journal could not record a post's answer: {why}");
                if let Some(p) = poster {
                    self.release(p.conn);
                    // A refusal keeps the publisher's own code; an acceptance becomes
                    // NoResources, whose text says the post was handled (not to be
                    // posted again).
                    let (code, answered) = match nak {
                        None => (NakCode::NoResources, "accepted it".to_string()),
                        Some(code) => (code, format!("refused it ({text})")),
                    };
                    let text = format!(
                        "the publisher {answered}, but the node's journal cannot record its answer: {why}; the node will deliver the post to the publisher again after a restart (do not post it again)"
                    );
                    self.answer(
                        Poster {
                            wants_answer: true,
                            ..p
                        },
                        Some(code),
                        &text,
                    );
                }
            }
        }
        self.handle_overflows();
    }

    /// Posts the journal held as received and not completed: each goes to its
    /// service's publisher, marked as delivered again, once the service is up.
    pub fn redeliver_posts(&mut self, posts: Vec<Redelivery>) {
        self.merge_deferred();
        self.posts.redeliver.extend(posts);
        self.redeliver_ready();
    }

    /// Sends the redeliveries whose service is up now, as far as its publisher reads
    /// them: the rest wait for a later tick (at least one a second). A restart with
    /// thousands of posts to deliver again must not flood the publisher, which the node
    /// would then drop as a slow reader, refusing every post it had.
    pub(crate) fn redeliver_ready(&mut self) {
        if self.posts.redeliver.is_empty() {
            return;
        }
        let all = std::mem::take(&mut self.posts.redeliver);
        for r in all {
            let ready = self
                .up_publisher(&r.service)
                .is_some_and(|p| self.publisher_behind(p, &r.service).is_none());
            if !ready {
                self.posts.redeliver.push(r);
                continue;
            }
            self.stats.posts.redelivered += 1;
            self.forward(Outgoing {
                service: &r.service,
                item: &r.item,
                image: r.image,
                redelivered: true,
                fields: FieldList::from_trusted(&r.fields),
                poster: None,
                journal_seq: Some(r.seq),
            });
        }
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
            let p = self
                .posts
                .pending
                .remove(&(publisher, id))
                .expect("checked above");
            self.stats.posts.post_timeouts += 1;
            let text = format!(
                "the publisher did not answer within {} ms (posts.timeout_ms)",
                self.cfg.limits.post_timeout.as_millis()
            );
            self.finish(p.poster, p.journal_seq, Some(NakCode::NoResponse), &text);
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
            let p = self
                .posts
                .pending
                .remove(&(publisher, id))
                .expect("listed above");
            self.finish(
                p.poster,
                p.journal_seq,
                Some(NakCode::SourceDown),
                "the publisher left before answering",
            );
        }
    }

    /// A poster left: answers to its posts have nowhere to go (and its id will be
    /// someone else's). Its journaled posts still go their way; only the answer is
    /// dropped.
    pub(crate) fn posts_poster_gone(&mut self, poster: ConnId) {
        if self.posts.per_poster.remove(&poster).is_none() {
            return;
        }
        let orphan = |p: &mut Option<Poster>| {
            if p.is_some_and(|p| p.conn == poster) {
                *p = None;
            }
        };
        for p in self.posts.pending.values_mut() {
            orphan(&mut p.poster);
        }
        self.posts
            .pending
            .retain(|_, p| p.poster.is_some() || p.journal_seq.is_some());
        for j in self.posts.journaling.values_mut() {
            match j {
                Journaling::Completed { poster: p, .. }
                | Journaling::Received { poster: p, .. } => orphan(p),
            }
        }
    }

    /// One of the poster's posts is answered.
    fn release(&mut self, poster: ConnId) {
        if let Some(n) = self.posts.per_poster.get_mut(&poster) {
            *n -= 1;
            if *n == 0 {
                self.posts.per_poster.remove(&poster);
            }
        }
    }

    fn answer(&mut self, p: Poster, nak: Option<NakCode>, text: &str) {
        if !p.wants_answer || self.role(p.conn) != Some(ConnRole::Subscriber) {
            return;
        }
        if nak.is_some() {
            self.stats.posts.naks_out += 1;
        } else {
            self.stats.posts.acks_out += 1;
        }
        self.send(
            p.conn,
            &Message::Ack(Ack {
                stream_id: p.stream,
                post_id: p.post_id,
                nak,
                text,
            }),
        );
    }
}
