//! Logins and entitlements: who a connection is, and what it may do to which service.
//!
//! Without a users file the node is open (anyone may log in, publish and subscribe,
//! or, with `login_token`, anyone who knows the shared token). With one, a login names a
//! user and carries a secret; the secret is checked off the event loop (argon2 is slow
//! on purpose): the core hands out an [`AuthRequest`] and waits for
//! [`Node::on_auth_result`], holding (bounded) whatever the peer sent meanwhile. Every
//! request for a stream and every service a publisher announces is checked against the
//! user's entitlements; a reload ([`Node::set_users`]) closes what a user may no longer
//! have.

use crate::{closed, ConnId, ConnRole, Node};
use log::{info, warn};
use std::sync::Arc;
use std::time::Instant;
use tickwire_auth::{Action, Users};
use tickwire_proto::{code, Message, Role, SlowConsumerPolicy, Status};

/// Who a logged-in connection is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Identity {
    /// No users file: everyone may do everything.
    #[default]
    Open,
    /// The node's own in-process peers.
    Internal,
    /// Logged in without a secret (`anonymous = "subscribe"`).
    Anonymous,
    /// A user of the users file.
    User,
}

/// A secret to check, off the event loop: answer with [`Node::on_auth_result`].
#[derive(Debug, Clone)]
pub struct AuthRequest {
    pub conn: ConnId,
    /// Matches the answer to this login (the connection id may be reused meanwhile).
    pub ticket: u64,
    pub user: String,
    pub secret: String,
}

/// A login waiting for its secret to be checked.
pub(crate) struct PendingLogin {
    pub ticket: u64,
    pub version: u16,
    pub role: Role,
    pub user: String,
    pub application: String,
    pub slow_consumer: Option<SlowConsumerPolicy>,
    /// Frames the peer sent after its login, replayed once it is accepted.
    pub held: Vec<Vec<u8>>,
    pub held_bytes: usize,
}

/// What a peer may send after its login before the login is verified (a client may
/// send its requests at once).
pub const MAX_HELD_BEFORE_LOGIN: usize = 64 * 1024;

impl Node {
    /// Logins whose secret must be checked, moved into `into` (cleared first).
    pub fn take_auth_requests(&mut self, into: &mut Vec<AuthRequest>) {
        into.clear();
        std::mem::swap(into, &mut self.auth_requests);
    }

    /// The answer to an [`AuthRequest`]: the login is accepted (and what the peer sent
    /// meanwhile is processed) or rejected with the reason.
    pub fn on_auth_result(
        &mut self,
        conn: ConnId,
        ticket: u64,
        result: Result<(), String>,
        now: Instant,
    ) {
        self.now = now;
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.pending_login.as_ref().is_none_or(|p| p.ticket != ticket) {
            return; // a connection that went away; the id may be someone else's now
        }
        let p = c.pending_login.take().expect("checked");
        let peer = c.peer.clone();
        match result {
            Ok(()) => {
                info!(
                    target: "audit",
                    "login accepted: user={:?} role={:?} peer={peer} application={:?}",
                    p.user, p.role, p.application
                );
                self.finish_login(
                    conn,
                    p.version,
                    p.role,
                    &p.user,
                    &p.application,
                    p.slow_consumer,
                    Identity::User,
                );
                for frame in p.held {
                    self.on_frame(conn, &frame, now);
                }
            }
            Err(text) => {
                warn!(
                    target: "audit",
                    "login refused: user={:?} role={:?} peer={peer}: {text}",
                    p.user, p.role
                );
                self.reject(conn, code::LOGIN_REJECTED, &text);
            }
        }
        self.handle_overflows();
    }

    /// Who a login is, if that is known at once. `None`: it was refused, or its secret
    /// is being checked (an [`AuthRequest`] is queued and the login finishes in
    /// [`Node::on_auth_result`]).
    pub(crate) fn authenticate(
        &mut self,
        conn: ConnId,
        version: u16,
        login: &tickwire_proto::Login<'_>,
    ) -> Option<Identity> {
        if self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.internal)
        {
            return Some(Identity::Internal);
        }
        if self.cfg.users.is_none() {
            if let Some(token) = &self.cfg.login_token {
                if login.token != token {
                    let text = format!("login rejected for user {:?}: bad token", login.user);
                    self.refuse_login(conn, login, &text);
                    return None;
                }
            }
            return Some(Identity::Open);
        }
        if login.token.is_empty() {
            let allowed = self.cfg.anonymous.entitlements().is_some();
            if allowed && login.role == Role::Subscriber {
                return Some(Identity::Anonymous);
            }
            let text = if allowed {
                "login rejected: an anonymous login may only subscribe".to_string()
            } else {
                format!(
                    "login rejected for user {:?}: a secret is required (anonymous logins are off)",
                    login.user
                )
            };
            self.refuse_login(conn, login, &text);
            return None;
        }
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.auth_requests.push(AuthRequest {
            conn,
            ticket,
            user: login.user.to_string(),
            secret: login.token.to_string(),
        });
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.pending_login = Some(Box::new(PendingLogin {
                ticket,
                version,
                role: login.role,
                user: login.user.to_string(),
                application: login.application.to_string(),
                slow_consumer: login.slow_consumer,
                held: Vec::new(),
                held_bytes: 0,
            }));
        }
        None
    }

    fn refuse_login(&mut self, conn: ConnId, login: &tickwire_proto::Login<'_>, text: &str) {
        let peer = self.conns[conn]
            .as_ref()
            .map_or(String::new(), |c| c.peer.clone());
        warn!(
            target: "audit",
            "login refused: user={:?} role={:?} peer={peer}: {text}",
            login.user, login.role
        );
        self.reject(conn, code::LOGIN_REJECTED, text);
    }

    /// A frame from a connection whose login is being verified: kept for later (true),
    /// or the connection is refused for sending too much meanwhile.
    pub(crate) fn hold_if_authenticating(&mut self, conn: ConnId, frame: &[u8]) -> bool {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return false;
        };
        let Some(p) = c.pending_login.as_deref_mut() else {
            return false;
        };
        if p.held_bytes + frame.len() > MAX_HELD_BEFORE_LOGIN {
            let text = format!(
                "more than {MAX_HELD_BEFORE_LOGIN} bytes sent before the login was verified"
            );
            self.stats.protocol_disconnects += 1;
            self.reject(conn, code::PROTOCOL, &text);
            return true;
        }
        p.held_bytes += frame.len();
        p.held.push(frame.to_vec());
        true
    }

    /// May this connection do `action` to `service`?
    pub(crate) fn may(&self, conn: ConnId, action: Action, service: &str) -> bool {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return false;
        };
        match c.identity {
            Identity::Open | Identity::Internal => true,
            Identity::Anonymous => self
                .cfg
                .anonymous
                .entitlements()
                .is_some_and(|e| e.allows(action, service)),
            Identity::User => self
                .cfg
                .users
                .as_ref()
                .is_some_and(|u| u.may(&c.user, action, service)),
        }
    }

    /// The text a refusal carries.
    pub(crate) fn not_entitled(&self, conn: ConnId, action: Action, service: &str) -> String {
        let user = self.conns[conn].as_ref().map_or("", |c| c.user.as_str());
        format!(
            "user {user:?} may not {} service {service:?}",
            action.as_str()
        )
    }

    /// A new users file (SIGHUP). Users removed are disconnected; streams and services
    /// a user may no longer have are closed, each with a status saying why.
    pub fn set_users(&mut self, users: Option<Arc<Users>>, now: Instant) {
        self.now = now;
        if let (Some(old), Some(new)) = (&self.cfg.users, &users) {
            for change in old.changes(new) {
                info!(target: "audit", "users file reloaded: {change}");
            }
        }
        self.cfg.users = users;
        for conn in 0..self.conns.len() {
            let Some(c) = self.conns[conn].as_ref() else {
                continue;
            };
            if c.identity != Identity::User {
                continue;
            }
            if !self.cfg.users.as_ref().is_some_and(|u| u.contains(&c.user)) {
                let text = format!("user {:?} was removed from the users file", c.user);
                warn!(target: "audit", "disconnecting {}: {text}", c.peer);
                self.reject(conn, code::NOT_ENTITLED, &text);
                continue;
            }
            match c.role {
                ConnRole::Subscriber => self.close_unentitled_streams(conn),
                ConnRole::Publisher => {
                    let services: Vec<String> = c
                        .services
                        .iter()
                        .map(|&s| self.services[s].name.clone())
                        .collect();
                    if let Some(s) = services
                        .iter()
                        .find(|s| !self.may(conn, Action::Publish, s))
                    {
                        let text = self.not_entitled(conn, Action::Publish, s);
                        warn!(target: "audit", "permission withdrawn: {text}");
                        self.reject(conn, code::NOT_ENTITLED, &text);
                    }
                }
                _ => {}
            }
        }
        self.handle_overflows();
    }

    fn close_unentitled_streams(&mut self, conn: ConnId) {
        let Some(c) = self.conns[conn].as_ref() else {
            return;
        };
        let lost: Vec<(u32, String)> = c
            .sub_streams
            .iter()
            .filter_map(|(&sid, at)| {
                let item = self.items.get(at.item)?;
                let service = &self.services[item.service].name;
                (!self.may(conn, Action::Subscribe, service)).then(|| (sid, service.clone()))
            })
            .collect();
        for (sid, service) in lost {
            let text = self.not_entitled(conn, Action::Subscribe, &service);
            info!(target: "audit", "permission withdrawn: {text} (stream {sid} closed)");
            self.write_pending_now(conn, sid);
            self.unsubscribe(conn, sid);
            self.send(
                conn,
                &Message::Status(Status {
                    stream_id: sid,
                    state: closed(code::NOT_ENTITLED, &text),
                }),
            );
        }
    }
}
