//! Uploads the files thread has not answered yet, followed by the event loop: a thread
//! that stops answers none of them, so the loop refuses them at once rather than leave
//! their clients to their time-outs.

use super::{PUT, PUT_ANSWER};
use tickwire_core::ConnId;

/// Uploads (a client's Put) the files thread has not answered for good yet. A thread
/// that stops answers none of them: the loop refuses them, so that no client waits for
/// its time-out.
#[derive(Default)]
pub(super) struct Unanswered {
    uploads: std::collections::HashSet<(ConnId, u32)>,
}

/// Uploads followed at most (a node takes 64 at once per connection).
const UNANSWERED_MAX: usize = 100_000;

/// Why an upload that comes while the thread is stopped is refused.
pub(super) const THREAD_DOWN: &str =
    "the node's files thread is not running (it starts again shortly): send the file again";

/// Why an upload whose start the thread had no room for is refused.
pub(super) const THREAD_BEHIND: &str = "the node's files thread is behind: send the file again";

/// Why the uploads the stopped thread had not answered are refused.
const THREAD_STOPPED: &str =
    "the node's files thread stopped before it answered: the file may be queued all the same (see files status)";

impl Unanswered {
    /// A message from a client on its way to the thread: its request when it is an
    /// upload's start.
    pub(super) fn sent(&mut self, conn: ConnId, body: &[u8]) -> Option<u32> {
        if body.get(2) != Some(&PUT) {
            return None;
        }
        let Ok(tickwire_files::wire::FilesMessage::Put(p)) =
            tickwire_files::wire::FilesMessage::decode(body)
        else {
            return None;
        };
        if self.uploads.len() < UNANSWERED_MAX {
            self.uploads.insert((conn, p.request));
        }
        Some(p.request)
    }

    /// An upload the thread will not answer (its start was not handed over): the
    /// client's refusal, at once.
    pub(super) fn refuse(&mut self, conn: ConnId, request: u32, reason: &str) -> Vec<u8> {
        use tickwire_files::wire::{FilesMessage, PutAnswer};
        self.uploads.remove(&(conn, request));
        let mut body = Vec::new();
        // A reason of this length always encodes.
        let _ = FilesMessage::PutAnswer(PutAnswer::refused(request, reason)).encode(&mut body);
        body
    }

    /// A message from the thread on its way to a client.
    pub(super) fn answered(&mut self, conn: ConnId, body: &[u8]) {
        use tickwire_files::wire::{FilesMessage, PutState};
        if body.get(2) != Some(&PUT_ANSWER) {
            return;
        }
        if let Ok(FilesMessage::PutAnswer(a)) = FilesMessage::decode(body) {
            if matches!(a.state, PutState::Queued | PutState::Refused) {
                self.uploads.remove(&(conn, a.request));
            }
        }
    }

    pub(super) fn gone(&mut self, conn: ConnId) {
        self.uploads.retain(|(c, _)| *c != conn);
    }

    /// The refusals of every upload still unanswered, for their connections.
    pub(super) fn refuse_all(&mut self) -> Vec<(ConnId, Vec<u8>)> {
        let all: Vec<(ConnId, u32)> = self.uploads.drain().collect();
        all.into_iter()
            .map(|(conn, request)| (conn, self.refuse(conn, request, THREAD_STOPPED)))
            .collect()
    }
}

#[cfg(test)]
mod unanswered_tests {
    use super::{Unanswered, THREAD_STOPPED};
    use tickwire_core::ConnId;
    use tickwire_files::wire::{FilesMessage, Put, PutAnswer, PutState};

    fn put(request: u32) -> Vec<u8> {
        let mut b = Vec::new();
        FilesMessage::Put(Put {
            request,
            service: "FILES",
            name: "f.csv",
            size: 10,
            sha256: [0; 32],
            to: vec![],
        })
        .encode(&mut b)
        .unwrap();
        b
    }

    fn answer(request: u32, state: PutState) -> Vec<u8> {
        let mut b = Vec::new();
        let a = PutAnswer {
            request,
            state,
            transfer: 1,
            received: 0,
            window: 0,
            reason: "",
        };
        FilesMessage::PutAnswer(a).encode(&mut b).unwrap();
        b
    }

    #[test]
    fn uploads_the_thread_has_not_answered_are_refused_when_it_stops() {
        let (a, b): (ConnId, ConnId) = (1, 2);
        let mut u = Unanswered::default();
        assert_eq!(u.sent(a, &put(7)), Some(7));
        assert_eq!(u.sent(a, &put(8)), Some(8));
        assert_eq!(u.sent(b, &put(7)), Some(7));
        assert_eq!(
            u.sent(a, &answer(9, PutState::Go)),
            None,
            "not an upload's start"
        );
        // Go and progress leave them unanswered; queued and refused answer them.
        u.answered(a, &answer(7, PutState::Go));
        u.answered(a, &answer(7, PutState::Progress));
        u.answered(a, &answer(8, PutState::Queued));
        // A connection gone takes its uploads with it.
        assert_eq!(u.sent(3, &put(1)), Some(1));
        u.gone(3);
        let mut refused: Vec<(ConnId, u32, String)> = u
            .refuse_all()
            .into_iter()
            .map(|(conn, body)| match FilesMessage::decode(&body).unwrap() {
                FilesMessage::PutAnswer(a) => {
                    assert_eq!(a.state, PutState::Refused);
                    (conn, a.request, a.reason.to_string())
                }
                other => panic!("{other:?}"),
            })
            .collect();
        refused.sort();
        assert_eq!(
            refused,
            [(a, 7, THREAD_STOPPED.into()), (b, 7, THREAD_STOPPED.into())]
        );
        assert!(u.refuse_all().is_empty(), "each refused once");
    }
}
