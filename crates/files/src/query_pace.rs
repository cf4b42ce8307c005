//! How often each connection's status queries are answered. A query is a few bytes to
//! send and a walk of every file and site to answer: one connection asking without
//! pause would keep the files thread from the transfers. Each connection is answered
//! at most once per [`QUERY_GAP`]; a query that comes sooner waits for the gap, and the
//! queries that wait together (the newest [`WAITING_MAX`] of a connection; a client
//! that asked more often meanwhile loses the older answers) share one walk of the
//! record.

use crate::hub::Rights;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The least time between two answers to one connection.
pub const QUERY_GAP: Duration = Duration::from_millis(250);

/// Queries of one connection waiting at most; an older one beyond is dropped (its
/// client asked again).
pub const WAITING_MAX: usize = 8;

#[derive(Default)]
pub(crate) struct QueryPace {
    conns: HashMap<usize, Pace>,
}

struct Pace {
    answered: Instant,
    rights: Rights,
    /// Request ids waiting for the gap, oldest first.
    waiting: Vec<u32>,
}

impl QueryPace {
    /// A query from `conn`: the requests to answer now (this one), or none (it waits).
    pub(crate) fn ask(
        &mut self,
        conn: usize,
        request: u32,
        rights: Rights,
        now: Instant,
    ) -> Option<u32> {
        match self.conns.get_mut(&conn) {
            Some(p) if now < p.answered + QUERY_GAP || !p.waiting.is_empty() => {
                if p.waiting.len() == WAITING_MAX {
                    p.waiting.remove(0);
                }
                p.waiting.push(request);
                p.rights = rights;
                None
            }
            _ => {
                self.conns.insert(
                    conn,
                    Pace {
                        answered: now,
                        rights,
                        waiting: Vec::new(),
                    },
                );
                Some(request)
            }
        }
    }

    /// The waiting queries whose gap is over, by connection (each connection's answered
    /// together), and forgets connections quiet for a gap.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<(usize, Rights, Vec<u32>)> {
        let mut due = Vec::new();
        self.conns.retain(|&conn, p| {
            if now < p.answered + QUERY_GAP {
                return true;
            }
            if p.waiting.is_empty() {
                return false;
            }
            due.push((conn, p.rights, std::mem::take(&mut p.waiting)));
            p.answered = now;
            true
        });
        due
    }

    /// When a waiting query is due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter(|p| !p.waiting.is_empty())
            .map(|p| p.answered + QUERY_GAP)
            .min()
    }

    /// The connection's rights changed (the users file was reloaded): its waiting
    /// queries are answered with what it may see now.
    pub(crate) fn restrict(&mut self, conn: usize, rights: Rights) {
        if let Some(p) = self.conns.get_mut(&conn) {
            p.rights = Rights {
                publish: p.rights.publish & rights.publish,
                subscribe: p.rights.subscribe & rights.subscribe,
            };
        }
    }

    /// The connection went: its waiting queries have no one to answer.
    pub(crate) fn forget(&mut self, conn: usize) {
        self.conns.remove(&conn);
    }
}

#[cfg(test)]
mod tests {
    use super::{QueryPace, QUERY_GAP, WAITING_MAX};
    use crate::hub::Rights;
    use std::time::{Duration, Instant};

    #[test]
    fn a_connection_is_answered_once_a_gap_and_every_query_gets_its_answer() {
        let t0 = Instant::now();
        let mut q = QueryPace::default();
        assert_eq!(q.ask(1, 10, Rights::ALL, t0), Some(10));
        // Another connection is not held by the first.
        assert_eq!(q.ask(2, 20, Rights::ALL, t0), Some(20));
        // Sooner than the gap: it waits, with the ones after it.
        assert_eq!(
            q.ask(1, 11, Rights::ALL, t0 + Duration::from_millis(1)),
            None
        );
        assert_eq!(
            q.ask(1, 12, Rights::ALL, t0 + Duration::from_millis(2)),
            None
        );
        assert_eq!(q.poll_timeout(), Some(t0 + QUERY_GAP));
        assert!(q.due(t0 + QUERY_GAP - Duration::from_millis(1)).is_empty());
        let due = q.due(t0 + QUERY_GAP);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].0, due[0].2.clone()), (1, vec![11, 12]));
        assert_eq!(q.poll_timeout(), None);
        // Answered at the gap: the next one waits for the gap after it.
        assert_eq!(q.ask(1, 13, Rights::ALL, t0 + QUERY_GAP), None);
        assert_eq!(q.poll_timeout(), Some(t0 + 2 * QUERY_GAP));
        // After a quiet gap, a query is answered at once.
        let later = t0 + 5 * QUERY_GAP;
        q.due(later);
        assert_eq!(q.ask(1, 14, Rights::ALL, later + QUERY_GAP), Some(14));
    }

    #[test]
    fn a_flood_keeps_a_few_queries_waiting_and_a_gone_connection_none() {
        let t0 = Instant::now();
        let mut q = QueryPace::default();
        assert_eq!(q.ask(1, 0, Rights::ALL, t0), Some(0));
        for r in 1..=1000 {
            assert_eq!(q.ask(1, r, Rights::ALL, t0), None);
        }
        let due = q.due(t0 + QUERY_GAP);
        let newest: Vec<u32> = (1001 - WAITING_MAX as u32..=1000).collect();
        assert_eq!(due[0].2, newest);
        assert_eq!(q.ask(1, 2000, Rights::ALL, t0 + QUERY_GAP), None);
        q.forget(1);
        assert_eq!(q.poll_timeout(), None);
        assert!(q.due(t0 + 10 * QUERY_GAP).is_empty());
    }
}
