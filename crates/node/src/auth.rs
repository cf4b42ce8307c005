//! Checks login secrets on a thread of its own: argon2 takes tens of milliseconds on
//! purpose, and the event loop must never wait that long (a flood of logins with wrong
//! passwords would freeze every stream). The passwords of `POST /getToken` requests
//! take the same way. Requests are bounded by `limits.max_pending_logins`; past it a
//! login is refused as "busy" rather than queued.

use log::warn;
use mio::Waker;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{AuthRequest, ConnId, Node, Users};

type Answer = (ConnId, u64, Result<(), String>);

/// A secret to check against `users`; `gone` is set when its connection goes away
/// before the thread comes to it.
struct Check {
    req: AuthRequest,
    users: Arc<Users>,
    gone: Arc<AtomicBool>,
}

impl Check {
    fn answer(self) -> Answer {
        // A check for no one is not made: a peer that logs in and hangs up, again and
        // again, would keep the thread hashing for it, and live logins refused as busy.
        let result = if self.gone.load(Ordering::Relaxed) {
            Err("the connection went away".into())
        } else {
            (self.users)
                .verify(&self.req.user, &self.req.secret)
                .map_err(|e| e.to_string())
        };
        (self.req.conn, self.req.ticket, result)
    }
}

pub(crate) struct Verifier {
    requests: SyncSender<Check>,
    answers: Receiver<Answer>,
    /// The checks queued and not answered yet: their connection, ticket and flag.
    waiting: Vec<(ConnId, u64, Arc<AtomicBool>)>,
}

impl Verifier {
    /// Starts the checking thread; `waker` wakes the event loop when an answer is ready.
    pub(crate) fn start(waker: Arc<Waker>, max_pending: usize) -> io::Result<Verifier> {
        let (requests, inbox) = mpsc::sync_channel::<Check>(max_pending.max(1));
        let (outbox, answers) = mpsc::channel::<Answer>();
        std::thread::Builder::new()
            .name("tickwire-auth".into())
            .spawn(move || {
                // Ends when the event loop drops its sender.
                for check in inbox {
                    if outbox.send(check.answer()).is_err() {
                        break;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(Verifier {
            requests,
            answers,
            waiting: Vec::new(),
        })
    }

    /// Queues a secret to check against `users`; refuses the login (or token request)
    /// at once if the queue is full or there are no users to check against.
    pub(crate) fn submit(
        &mut self,
        core: &mut Node,
        req: AuthRequest,
        users: Option<Arc<Users>>,
        now: Instant,
    ) {
        let (conn, ticket) = (req.conn, req.ticket);
        if !core.awaits_check(conn, ticket) {
            return; // gone in the turn it logged in: no one to answer
        }
        let Some(users) = users else {
            core.on_auth_result(conn, ticket, Err("no users file is loaded".into()), now);
            return;
        };
        let gone = Arc::new(AtomicBool::new(false));
        let check = Check {
            req,
            users,
            gone: gone.clone(),
        };
        match self.requests.try_send(check) {
            Ok(()) => self.waiting.push((conn, ticket, gone)),
            Err(TrySendError::Full(_)) => {
                warn!("login verification queue full: refusing a login");
                let text =
                    "login refused: the node is busy verifying other logins; try again".into();
                core.on_auth_unavailable(conn, ticket, text, now);
            }
            Err(TrySendError::Disconnected(_)) => {
                let text = "login refused: the node cannot verify logins".into();
                core.on_auth_unavailable(conn, ticket, text, now);
            }
        }
    }

    /// Hands the answers that are ready to the core; the checks still queued for
    /// connections gone since are not to be made.
    pub(crate) fn deliver(&mut self, core: &mut Node, now: Instant) {
        while let Ok((conn, ticket, result)) = self.answers.try_recv() {
            if let Some(i) = self.waiting.iter().position(|w| w.1 == ticket) {
                self.waiting.swap_remove(i);
            }
            core.on_auth_result(conn, ticket, result, now);
        }
        for (conn, ticket, gone) in &self.waiting {
            if !core.awaits_check(*conn, *ticket) {
                gone.store(true, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_proto::{Login, Message, Role};

    /// A core whose users file has alice (a token), and a verifier with no thread: the
    /// test takes its checks itself.
    fn setup() -> (Node, Arc<Users>, Verifier, Receiver<Check>, Instant) {
        let now = Instant::now();
        let users = Arc::new(
            Users::parse(
                &format!(
                    "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [\"*\"]\n",
                    tickwire_auth::hash_token("alice-secret")
                ),
                "users.toml",
            )
            .unwrap(),
        );
        let core = Node::new(
            tickwire_core::CoreConfig {
                users: Some(users.clone()),
                ..Default::default()
            },
            now,
        );
        let (requests, inbox) = mpsc::sync_channel(4);
        let (_, answers) = mpsc::channel();
        let v = Verifier {
            requests,
            answers,
            waiting: Vec::new(),
        };
        (core, users, v, inbox, now)
    }

    fn log_in(core: &mut Node, peer: &str, now: Instant) -> (ConnId, Vec<AuthRequest>) {
        let conn = core.connect(peer, now);
        let login = Login::new(Role::Subscriber, "test", "alice", "alice-secret");
        core.on_message(conn, &Message::Login(login), now);
        let mut reqs = Vec::new();
        core.take_auth_requests(&mut reqs);
        assert_eq!(reqs.len(), 1);
        (conn, reqs)
    }

    /// A login whose connection hangs up before its secret is checked costs the
    /// checking thread nothing: a peer doing so again and again cannot keep it busy
    /// (and live logins refused as busy).
    #[test]
    fn a_login_gone_before_its_check_is_not_checked() {
        let (mut core, users, mut v, inbox, now) = setup();
        // Gone while queued.
        let (gone, reqs) = log_in(&mut core, "10.0.0.1:4000", now);
        for r in reqs {
            v.submit(&mut core, r, Some(users.clone()), now);
        }
        let (live, reqs) = log_in(&mut core, "10.0.0.2:4000", now);
        for r in reqs {
            v.submit(&mut core, r, Some(users.clone()), now);
        }
        core.on_disconnect(gone, now);
        // Its id is the next connection's (a peer doing this again and again).
        let next = core.connect("10.0.0.1:4001", now);
        assert_eq!(next, gone);
        v.deliver(&mut core, now);
        let first = inbox.try_recv().unwrap().answer();
        assert_eq!(first.0, gone);
        assert!(first.2.is_err(), "checked for a connection gone: {first:?}");
        let second = inbox.try_recv().unwrap().answer();
        assert_eq!((second.0, second.2), (live, Ok(())));
        // Gone in the turn it logged in: not queued at all.
        let (gone, reqs) = log_in(&mut core, "10.0.0.3:4000", now);
        core.on_disconnect(gone, now);
        for r in reqs {
            v.submit(&mut core, r, Some(users.clone()), now);
        }
        assert!(inbox.try_recv().is_err());
    }
}
