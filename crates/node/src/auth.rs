//! Checks login secrets on a thread of its own: argon2 takes tens of milliseconds on
//! purpose, and the event loop must never wait that long (a flood of logins with wrong
//! passwords would freeze every stream). The passwords of `POST /getToken` requests
//! take the same way. Requests are bounded by `limits.max_pending_logins`; past it a
//! login is refused as "busy" rather than queued.

use log::warn;
use mio::Waker;
use std::io;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{AuthRequest, ConnId, Node, Users};

type Answer = (ConnId, u64, Result<(), String>);

pub(crate) struct Verifier {
    requests: SyncSender<(AuthRequest, Arc<Users>)>,
    answers: Receiver<Answer>,
}

impl Verifier {
    /// Starts the checking thread; `waker` wakes the event loop when an answer is ready.
    pub(crate) fn start(waker: Arc<Waker>, max_pending: usize) -> io::Result<Verifier> {
        let (requests, inbox) = mpsc::sync_channel::<(AuthRequest, Arc<Users>)>(max_pending.max(1));
        let (outbox, answers) = mpsc::channel::<Answer>();
        std::thread::Builder::new()
            .name("tickwire-auth".into())
            .spawn(move || {
                // Ends when the event loop drops its sender.
                for (req, users) in inbox {
                    let result = users
                        .verify(&req.user, &req.secret)
                        .map_err(|e| e.to_string());
                    if outbox.send((req.conn, req.ticket, result)).is_err() {
                        break;
                    }
                    let _ = waker.wake();
                }
            })?;
        Ok(Verifier { requests, answers })
    }

    /// Queues a secret to check against `users`; refuses the login (or token request)
    /// at once if the queue is full or there are no users to check against.
    pub(crate) fn submit(
        &self,
        core: &mut Node,
        req: AuthRequest,
        users: Option<Arc<Users>>,
        now: Instant,
    ) {
        let (conn, ticket) = (req.conn, req.ticket);
        let Some(users) = users else {
            core.on_auth_result(conn, ticket, Err("no users file is loaded".into()), now);
            return;
        };
        match self.requests.try_send((req, users)) {
            Ok(()) => {}
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

    /// Hands the answers that are ready to the core.
    pub(crate) fn deliver(&self, core: &mut Node, now: Instant) {
        while let Ok((conn, ticket, result)) = self.answers.try_recv() {
            core.on_auth_result(conn, ticket, result, now);
        }
    }
}
