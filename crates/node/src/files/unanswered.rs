//! Uploads and status queries the files thread has not answered yet, followed by the
//! event loop: a thread that stops answers none of them, so the loop refuses them at
//! once rather than leave their clients to their time-outs. An upload is refused with a
//! Put's answer (`refused`), a query with a QueryRefused: each kind under its own
//! numbers, so that a refusal can never be taken for another's.

use super::{PUT, PUT_ANSWER, QUERY};
use std::collections::{HashMap, VecDeque};
use tickwire_core::ConnId;
use tickwire_files::wire::{report_head, FilesMessage, PutAnswer, PutState};
use tickwire_files::QUERIES_WAITING_MAX;

/// What a client asked of the files thread that waits for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// An upload's start (a Put), by its request number.
    Upload(u32),
    /// A status query, by its request number.
    Query(u32),
}

/// Uploads (a client's Put) and queries the files thread has not answered for good
/// yet. A thread that stops answers none of them: the loop refuses them, so that no
/// client waits for its time-out.
#[derive(Default)]
pub(super) struct Unanswered {
    /// Uploads under each (connection, request), and how many: a client may repeat a
    /// number, and the thread answers each Put (the repeat refused) once.
    uploads: HashMap<(ConnId, u32), u32>,
    /// Each connection's queries not answered yet, oldest first: at most the newest
    /// [`QUERIES_WAITING_MAX`], as the thread keeps them.
    queries: HashMap<ConnId, VecDeque<u32>>,
    /// Uploads and queries followed, for the bound.
    followed: usize,
}

/// Uploads and queries followed at most (a node takes 64 uploads and 8 queries at once
/// per connection).
const UNANSWERED_MAX: usize = 100_000;

/// Why an upload or a query that comes while the thread is stopped is refused.
pub(super) const THREAD_DOWN: &str =
    "the node's files thread is not running (it starts again shortly): try again";

/// Why an upload or a query whose start the thread had no room for is refused.
pub(super) const THREAD_BEHIND: &str = "the node's files thread is behind: try again";

/// Why the uploads and queries the stopped thread had not answered are refused.
const THREAD_STOPPED: &str =
    "the node's files thread stopped before it answered: an upload may be queued all the same (see files status)";

impl Unanswered {
    /// What a client's message asks of the thread, when it is an upload's start or a
    /// query (a Put too malformed to read is refused by the thread under number 0).
    pub(super) fn asked(body: &[u8]) -> Option<Asked> {
        match body.get(2) {
            Some(&PUT) => match FilesMessage::decode(body) {
                Ok(FilesMessage::Put(p)) => Some(Asked::Upload(p.request)),
                Ok(_) => None,
                Err(_) => Some(Asked::Upload(0)),
            },
            Some(&QUERY) => match FilesMessage::decode(body) {
                Ok(FilesMessage::Query { request }) => Some(Asked::Query(request)),
                _ => None,
            },
            _ => None,
        }
    }

    /// `asked` was handed to the thread: followed until it is answered.
    pub(super) fn follow(&mut self, conn: ConnId, asked: Asked) {
        if self.followed >= UNANSWERED_MAX {
            return;
        }
        match asked {
            Asked::Upload(request) => {
                *self.uploads.entry((conn, request)).or_default() += 1;
                self.followed += 1;
            }
            Asked::Query(request) => {
                let waiting = self.queries.entry(conn).or_default();
                if waiting.len() == QUERIES_WAITING_MAX {
                    // The thread drops the oldest too: it will never be answered.
                    waiting.pop_front();
                } else {
                    self.followed += 1;
                }
                waiting.push_back(request);
            }
        }
    }

    /// One of `asked` is answered (or refused): no longer followed.
    fn forget(&mut self, conn: ConnId, asked: Asked) {
        let removed = match asked {
            Asked::Upload(request) => match self.uploads.get_mut(&(conn, request)) {
                Some(1) => self.uploads.remove(&(conn, request)).is_some(),
                Some(n) => {
                    *n -= 1;
                    true
                }
                None => false,
            },
            Asked::Query(request) => {
                let Some(waiting) = self.queries.get_mut(&conn) else {
                    return;
                };
                let at = waiting.iter().position(|&r| r == request);
                let removed = at.and_then(|i| waiting.remove(i)).is_some();
                if waiting.is_empty() {
                    self.queries.remove(&conn);
                }
                removed
            }
        };
        if removed {
            self.followed -= 1;
        }
    }

    /// A message from the thread on its way to a client.
    pub(super) fn answered(&mut self, conn: ConnId, body: &[u8]) {
        if body.get(2) == Some(&PUT_ANSWER) {
            if let Ok(FilesMessage::PutAnswer(a)) = FilesMessage::decode(body) {
                if matches!(a.state, PutState::Queued | PutState::Refused) {
                    self.forget(conn, Asked::Upload(a.request));
                }
            }
        } else if let Some((request, true)) = report_head(body) {
            self.forget(conn, Asked::Query(request));
        }
    }

    pub(super) fn gone(&mut self, conn: ConnId) {
        let mut dropped = 0;
        self.uploads.retain(|(c, _), n| {
            if *c == conn {
                dropped += *n as usize;
            }
            *c != conn
        });
        dropped += self.queries.remove(&conn).map_or(0, |q| q.len());
        self.followed -= dropped;
    }

    /// The refusals of every upload and query still unanswered, for their connections.
    pub(super) fn refuse_all(&mut self) -> Vec<(ConnId, Vec<u8>)> {
        let mut out = Vec::with_capacity(self.followed);
        for ((conn, request), n) in self.uploads.drain() {
            for _ in 0..n {
                out.push((conn, refusal(Asked::Upload(request), THREAD_STOPPED)));
            }
        }
        for (conn, waiting) in self.queries.drain() {
            for request in waiting {
                out.push((conn, refusal(Asked::Query(request), THREAD_STOPPED)));
            }
        }
        self.followed = 0;
        out
    }
}

/// The answer that refuses `asked`, with `reason`.
pub(super) fn refusal(asked: Asked, reason: &str) -> Vec<u8> {
    let msg = match asked {
        Asked::Upload(request) => FilesMessage::PutAnswer(PutAnswer::refused(request, reason)),
        Asked::Query(request) => FilesMessage::QueryRefused { request, reason },
    };
    let mut body = Vec::new();
    // A reason of this length always encodes.
    let _ = msg.encode(&mut body);
    body
}

#[cfg(test)]
mod unanswered_tests {
    use super::{refusal, Asked, Unanswered, THREAD_STOPPED};
    use tickwire_core::ConnId;
    use tickwire_files::wire::{FilesMessage, Put, PutAnswer, PutState};
    use tickwire_files::QUERIES_WAITING_MAX;

    fn encoded(m: FilesMessage<'_>) -> Vec<u8> {
        let mut b = Vec::new();
        m.encode(&mut b).unwrap();
        b
    }

    fn put(request: u32) -> Vec<u8> {
        encoded(FilesMessage::Put(Put {
            request,
            service: "FILES",
            name: "f.csv",
            size: 10,
            sha256: [0; 32],
            to: vec![],
        }))
    }

    fn answer(request: u32, state: PutState) -> Vec<u8> {
        encoded(FilesMessage::PutAnswer(PutAnswer {
            request,
            state,
            transfer: 1,
            received: 0,
            window: 0,
            reason: "",
        }))
    }

    fn query(request: u32) -> Vec<u8> {
        encoded(FilesMessage::Query { request })
    }

    fn report(request: u32, last: bool) -> Vec<u8> {
        encoded(FilesMessage::Report {
            request,
            last,
            entries: vec![],
        })
    }

    /// What `refuse_all` refuses: (connection, what, reason), sorted.
    fn refused(u: &mut Unanswered) -> Vec<(ConnId, Asked, String)> {
        let mut all: Vec<(ConnId, Asked, String)> = u
            .refuse_all()
            .into_iter()
            .map(|(conn, body)| match FilesMessage::decode(&body).unwrap() {
                FilesMessage::PutAnswer(a) => {
                    assert_eq!(a.state, PutState::Refused);
                    (conn, Asked::Upload(a.request), a.reason.to_string())
                }
                FilesMessage::QueryRefused { request, reason } => {
                    (conn, Asked::Query(request), reason.to_string())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        all.sort_by_key(|(c, a, _)| (*c, format!("{a:?}")));
        all
    }

    /// A client's message handed to the thread: what it asks, now followed.
    fn sent(u: &mut Unanswered, conn: ConnId, body: &[u8]) -> Option<Asked> {
        let asked = Unanswered::asked(body);
        if let Some(a) = asked {
            u.follow(conn, a);
        }
        asked
    }

    fn stopped(conn: ConnId, asked: Asked) -> (ConnId, Asked, String) {
        (conn, asked, THREAD_STOPPED.to_string())
    }

    #[test]
    fn uploads_the_thread_has_not_answered_are_refused_when_it_stops() {
        let (a, b): (ConnId, ConnId) = (1, 2);
        let mut u = Unanswered::default();
        assert_eq!(sent(&mut u, a, &put(7)), Some(Asked::Upload(7)));
        assert_eq!(sent(&mut u, a, &put(8)), Some(Asked::Upload(8)));
        assert_eq!(sent(&mut u, b, &put(7)), Some(Asked::Upload(7)));
        assert_eq!(
            sent(&mut u, a, &answer(9, PutState::Go)),
            None,
            "not an upload's start"
        );
        // Go and progress leave them unanswered; queued and refused answer them.
        u.answered(a, &answer(7, PutState::Go));
        u.answered(a, &answer(7, PutState::Progress));
        u.answered(a, &answer(8, PutState::Queued));
        // A connection gone takes its uploads with it.
        assert_eq!(sent(&mut u, 3, &put(1)), Some(Asked::Upload(1)));
        u.gone(3);
        assert_eq!(
            refused(&mut u),
            [stopped(a, Asked::Upload(7)), stopped(b, Asked::Upload(7))]
        );
        assert!(u.refuse_all().is_empty(), "each refused once");
        assert_eq!(u.followed, 0);
    }

    #[test]
    fn a_malformed_put_is_followed_as_the_thread_answers_it_under_number_0() {
        let mut u = Unanswered::default();
        sent(&mut u, 1, &put(0));
        let mut junk = put(5);
        junk.truncate(8);
        assert_eq!(sent(&mut u, 1, &junk), Some(Asked::Upload(0)));
        // The thread refuses the junk under 0: the real upload 0 is still followed.
        u.answered(1, &answer(0, PutState::Refused));
        assert_eq!(refused(&mut u), [stopped(1, Asked::Upload(0))]);
    }

    #[test]
    fn a_repeated_upload_number_refused_by_the_thread_leaves_the_first_followed() {
        let mut u = Unanswered::default();
        sent(&mut u, 1, &put(7));
        sent(&mut u, 1, &put(7));
        // The thread refuses the repeat ("in progress"); the first is still under way.
        u.answered(1, &answer(7, PutState::Refused));
        assert_eq!(refused(&mut u), [stopped(1, Asked::Upload(7))]);
    }

    #[test]
    fn queries_are_followed_until_their_last_report_and_refused_under_their_own_kind() {
        let mut u = Unanswered::default();
        assert_eq!(sent(&mut u, 1, &query(7)), Some(Asked::Query(7)));
        sent(&mut u, 1, &put(7));
        sent(&mut u, 1, &query(8));
        sent(&mut u, 2, &query(8));
        // A report's first part leaves the query waiting; its last answers it.
        u.answered(1, &report(8, false));
        u.answered(2, &report(8, true));
        assert_eq!(
            refused(&mut u),
            [
                stopped(1, Asked::Query(7)),
                stopped(1, Asked::Query(8)),
                stopped(1, Asked::Upload(7)),
            ]
        );
        // A query refused at once (the thread had no room) is never followed, and
        // pushes out none that is.
        let body = refusal(Asked::Query(1), "behind");
        assert!(matches!(
            FilesMessage::decode(&body).unwrap(),
            FilesMessage::QueryRefused {
                request: 1,
                reason: "behind"
            }
        ));
        assert!(u.refuse_all().is_empty());
    }

    #[test]
    fn a_connection_is_followed_for_as_many_queries_as_the_thread_keeps() {
        let mut u = Unanswered::default();
        let asked = QUERIES_WAITING_MAX as u32 + 3;
        for r in 0..asked {
            sent(&mut u, 1, &query(r));
        }
        sent(&mut u, 2, &query(0));
        u.gone(2);
        let left: Vec<_> = refused(&mut u).into_iter().map(|(_, a, _)| a).collect();
        let mut newest: Vec<Asked> = (3..asked).map(Asked::Query).collect();
        newest.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(left, newest, "the thread drops the oldest too");
        assert_eq!(u.followed, 0);
    }
}
