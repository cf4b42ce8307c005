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
//!
//! The WebSocket/HTTP port adds session tokens: `POST /getToken` with a user's password
//! ([`Node::request_session_token`], checked off the loop like a login's secret) gets a
//! random token, which a WebSocket upgrade presents as a cookie
//! ([`Node::present_session_token`]) to log in without the password.

use crate::admission::LogName;
use crate::directory::{encode_directory, Encoded};
use crate::{ConnId, ConnRole, Node};
use rustc_hash::FxHashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_auth::{Action, Entitlements, Users};
use tickwire_proto::{
    code, Message, Role, ServiceEntry, ServiceState, SlowConsumerPolicy, State, Status,
    FRAME_HEADER_LEN,
};
use tracing::{info, warn};

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
    /// The connection logging in.
    pub conn: ConnId,
    /// Matches the answer to this login (the connection id may be reused meanwhile).
    pub ticket: u64,
    /// The user it names.
    pub user: String,
    /// Its password or token.
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
    /// Frames the peer sent after its login, replayed once it is accepted: one buffer,
    /// each frame with its length prefix (counted against the bound, so that frames of
    /// a byte each cannot cost many times it).
    pub held: Vec<u8>,
    /// The users file the secret is checked against: a reload since that changed or
    /// removed the user must win over the check's answer.
    pub checked_against: Option<Arc<Users>>,
}

/// What a peer may send after its login before the login is verified (a client may
/// send its requests at once).
pub const MAX_HELD_BEFORE_LOGIN: usize = 64 * 1024;

/// Session tokens: how long one is valid and how many the node holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTokenConfig {
    /// Zero: the node issues none (`POST /getToken` is refused, cookies are ignored).
    pub lifetime: Duration,
    /// Past it, issuing a token drops the oldest.
    pub max_tokens: usize,
}

impl Default for SessionTokenConfig {
    fn default() -> Self {
        SessionTokenConfig {
            lifetime: Duration::from_secs(3600),
            max_tokens: 10_000,
        }
    }
}

/// Why a token request got no token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// Unknown user or wrong password (the same for both).
    BadCredentials,
    /// The node issues no tokens: it has no users file, or a lifetime of zero.
    NotIssued,
    /// Asked over plain HTTP from another host: tokens go over TLS, or to the node's
    /// own host.
    NeedsTls,
    /// The verification queue is full, or the users file changed during the check:
    /// try again.
    Unavailable,
}

/// The answer to a token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenAnswer {
    /// A session token.
    Issued {
        /// The token.
        token: String,
        /// Whose it is.
        user: String,
        /// How long it is valid.
        lifetime: Duration,
    },
    /// Refused.
    Refused {
        /// Why, in kind.
        why: TokenRefusal,
        /// Why, for the client.
        text: String,
    },
}

/// What the HTTP side of a WebSocket/HTTP connection asked of the login machinery.
#[derive(Default)]
pub(crate) struct HttpAuth {
    /// A token request whose password is being checked: its ticket, its user, and the
    /// users file it is checked against (a reload meanwhile may have changed the user).
    pending: Option<(u64, String, Option<Arc<Users>>)>,
    /// The answer, until the connection's driver takes it.
    answer: Option<TokenAnswer>,
    /// The session token presented at the upgrade: the user it stands for, or why it
    /// is refused. Taken by the login that follows.
    cookie: Option<Result<String, String>>,
}

impl HttpAuth {
    /// Whether a token request's password is being checked.
    pub(crate) fn is_checking(&self) -> bool {
        self.pending.is_some()
    }
}

/// Whether a peer (as `Node::connect` was given it: an address) is on this host.
fn is_loopback(peer: &str) -> bool {
    peer.parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().to_canonical().is_loopback())
}

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
        self.merge_deferred();
        self.auth_result(conn, ticket, result, true, now);
    }

    /// As [`Node::on_auth_result`]; `checked`: the secret was checked (a refusal then
    /// counts as a failed login), not turned away unchecked.
    fn auth_result(
        &mut self,
        conn: ConnId,
        ticket: u64,
        result: Result<(), String>,
        checked: bool,
        now: Instant,
    ) {
        self.now = now;
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let token_request = c
            .http
            .as_ref()
            .and_then(|h| h.pending.as_ref())
            .is_some_and(|p| p.0 == ticket);
        if token_request {
            self.answer_token_request(conn, result.map_err(|e| (TokenRefusal::BadCredentials, e)));
            return;
        }
        if c.pending_login.as_ref().is_none_or(|p| p.ticket != ticket) {
            return; // a connection that went away; the id may be someone else's now
        }
        let p = c.pending_login.take().expect("checked");
        let peer = c.peer.clone();
        // The secret was checked against the users file of the login's time: a reload
        // since then that changed or removed the user must win (as for a token).
        let still_valid = match (&p.checked_against, &self.cfg.users) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.unchanged(b, &p.user),
            _ => false,
        };
        let stale = result.is_ok() && !still_valid;
        let result = match result {
            Ok(()) if stale => Err(format!(
                "login rejected for user {:?}: the users file changed while the login was being checked; try again",
                p.user
            )),
            other => other,
        };
        match result {
            Ok(()) => {
                self.login_succeeded(conn, &p.user);
                info!(
                    target: "audit",
                    user = %LogName(&p.user), role = ?p.role, %peer, application = %LogName(&p.application),
                    "login accepted"
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
                for (frame, _) in tickwire_proto::frame::frames(&p.held) {
                    self.on_frame(conn, frame, now);
                }
            }
            Err(text) => {
                // Not a wrong secret when the file changed under a right one.
                if checked && !stale {
                    self.login_failed(conn, &p.user);
                }
                warn!(
                    target: "audit",
                    user = %LogName(&p.user), role = ?p.role, %peer, reason = %text,
                    "login refused"
                );
                self.reject(conn, code::LOGIN_REJECTED, &text);
            }
        }
        self.handle_overflows();
    }

    /// Whether a connection still waits for the check of `ticket` (an
    /// [`AuthRequest`]'s): not once it went away, though its id may be another's now.
    pub fn awaits_check(&self, conn: ConnId, ticket: u64) -> bool {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| {
                c.pending_login.as_ref().is_some_and(|p| p.ticket == ticket)
                    || (c.http.as_ref())
                        .and_then(|h| h.pending.as_ref())
                        .is_some_and(|p| p.0 == ticket)
            })
    }

    /// A secret could not be checked at all (the verification queue is full, or its
    /// thread is gone): a login is refused with `text`; a token request is answered
    /// "unavailable", so an HTTP client sees a retryable status.
    pub fn on_auth_unavailable(&mut self, conn: ConnId, ticket: u64, text: String, now: Instant) {
        self.merge_deferred();
        self.now = now;
        let token_request = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.http.as_ref())
            .and_then(|h| h.pending.as_ref())
            .is_some_and(|p| p.0 == ticket);
        if token_request {
            self.answer_token_request(conn, Err((TokenRefusal::Unavailable, text)));
        } else {
            self.auth_result(conn, ticket, Err(text), false, now);
        }
    }

    /// Whether this node hands out session tokens (and honours them as cookies): it
    /// has a users file and a token lifetime above zero.
    pub fn issues_session_tokens(&self) -> bool {
        self.cfg.users.is_some() && !self.cfg.session_tokens.lifetime.is_zero()
    }

    /// Session tokens held (issued, not expired or revoked).
    pub fn session_token_count(&self) -> usize {
        self.sessions.len()
    }

    /// `POST /getToken` on `conn` with a user and password. The answer is at once when
    /// the request is refused without a check (`Some`); otherwise the password goes to
    /// the verification thread like a login's secret ([`Node::take_auth_requests`]),
    /// and the answer waits for [`Node::take_token_answer`] (the connection is marked
    /// as having output when it is ready).
    pub fn request_session_token(
        &mut self,
        conn: ConnId,
        user: &str,
        password: &str,
        now: Instant,
    ) -> Option<TokenAnswer> {
        self.now = now;
        let refuse = |why, text: String| Some(TokenAnswer::Refused { why, text });
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return refuse(TokenRefusal::NotIssued, "connection gone".into());
        };
        let peer = c.peer.clone();
        if self.cfg.users.is_none() {
            return refuse(
                TokenRefusal::NotIssued,
                "this node issues no tokens: it has no users file ([security] users_file), \
                 so it needs none (log in without a secret)"
                    .into(),
            );
        }
        if self.cfg.session_tokens.lifetime.is_zero() {
            return refuse(
                TokenRefusal::NotIssued,
                "this node issues no tokens ([security] session_token_lifetime_s = 0)".into(),
            );
        }
        if !self.cfg.tls && !is_loopback(&peer) {
            let text = "tokens are issued over TLS only: this node's port speaks plain HTTP, \
                        which would carry the password in cleartext (configure [tls] on the \
                        node, or ask from the node's own host)"
                .to_string();
            warn!(
                target: "audit",
                "session token refused: user={user:?} peer={peer}: asked over plain HTTP from another host"
            );
            return refuse(TokenRefusal::NeedsTls, text);
        }
        if c.http.as_ref().is_some_and(|h| h.pending.is_some()) || c.role != ConnRole::AwaitingLogin
        {
            return refuse(
                TokenRefusal::Unavailable,
                "one token request per connection".into(),
            );
        }
        // Held off like a login after failures from this address or for this user.
        if let Some(text) = self.login_held_off(conn, user) {
            return refuse(TokenRefusal::Unavailable, text);
        }
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.auth_requests.push(AuthRequest {
            conn,
            ticket,
            user: user.to_string(),
            secret: password.to_string(),
        });
        let users = self.cfg.users.clone();
        if let Some(c) = self.conn_mut(conn) {
            c.http.get_or_insert_default().pending = Some((ticket, user.to_string(), users));
        }
        None
    }

    /// The answer to a token request, once it is there.
    pub fn take_token_answer(&mut self, conn: ConnId) -> Option<TokenAnswer> {
        self.conn_mut(conn)?.http.as_mut()?.answer.take()
    }

    /// A checked token request: a token issued, or the refusal.
    fn answer_token_request(&mut self, conn: ConnId, result: Result<(), (TokenRefusal, String)>) {
        let now = self.now;
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some((_, user, checked_against)) = c.http.as_mut().and_then(|h| h.pending.take())
        else {
            return;
        };
        let peer = c.peer.clone();
        let user_of_request = user.clone();
        // The password was checked against the users file of the request's time: a
        // reload since then that changed or removed the user must win.
        let still_valid = match (&checked_against, &self.cfg.users) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.unchanged(b, &user),
            _ => false,
        };
        let result = match result {
            Ok(()) if !still_valid => Err((
                TokenRefusal::Unavailable,
                format!("the users file changed while user {user:?} was being checked; try again"),
            )),
            other => other,
        };
        let answer = match result {
            Ok(()) => {
                let lifetime = self.cfg.session_tokens.lifetime;
                let token = self.sessions.issue(&user, lifetime, now);
                info!(
                    target: "audit",
                    "session token issued: user={user:?} peer={peer} valid {} s ({} tokens held)",
                    lifetime.as_secs(),
                    self.sessions.len()
                );
                TokenAnswer::Issued {
                    token,
                    user,
                    lifetime,
                }
            }
            Err((why, text)) => {
                warn!(target: "audit", "session token refused: user={user:?} peer={peer}: {text}");
                TokenAnswer::Refused { why, text }
            }
        };
        match &answer {
            TokenAnswer::Issued { user, .. } => {
                let user = user.clone();
                self.login_succeeded(conn, &user);
            }
            TokenAnswer::Refused {
                why: TokenRefusal::BadCredentials,
                ..
            } => self.login_failed(conn, &user_of_request),
            TokenAnswer::Refused { .. } => {}
        }
        if let Some(c) = self.conn_mut(conn) {
            c.http.get_or_insert_default().answer = Some(answer);
        }
        self.mark_dirty(conn);
    }

    /// A WebSocket upgrade carrying a session token (cookie `AuthToken`): the user it
    /// stands for (the login that follows, without a secret, logs in as that user), or
    /// why it is refused (that login is then refused with this text). `None`: the node
    /// issues no tokens, and the cookie is ignored.
    pub fn present_session_token(
        &mut self,
        conn: ConnId,
        token: &str,
        now: Instant,
    ) -> Option<Result<String, String>> {
        self.now = now;
        if !self.issues_session_tokens() {
            return None;
        }
        let user = self.sessions.user_of(token, now).map(str::to_string);
        let result = match user {
            Some(u) if self.cfg.users.as_ref().is_some_and(|us| us.contains(&u)) => Ok(u),
            _ => Err(
                "login rejected: unknown or expired session token (cookie AuthToken); \
                 get a new one with POST /getToken"
                    .to_string(),
            ),
        };
        let c = self.conn_mut(conn)?;
        c.http.get_or_insert_default().cookie = Some(result.clone());
        Some(result)
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
        let cookie = self
            .conn_mut(conn)
            .and_then(|c| c.http.as_mut())
            .and_then(|h| h.cookie.take());
        if let Some(cookie) = cookie {
            // The upgrade presented a session token: the login is that user's, without
            // a secret of its own (the token was issued for a checked password).
            match cookie {
                Ok(user)
                    if user == login.user
                        && login.token.is_empty()
                        && login.role == Role::Subscriber =>
                {
                    let peer = self.conns[conn].as_ref().map_or("", |c| c.peer.as_str());
                    info!(
                        target: "audit",
                        user = %LogName(&user), role = ?login.role, %peer, application = %LogName(login.application),
                        session_token = true, "login accepted"
                    );
                    return Some(Identity::User);
                }
                Ok(user) => {
                    let text = format!(
                        "login rejected: the session token is user {user:?}'s; a login on its \
                         connection may not name another user or carry a secret"
                    );
                    self.refuse_login(conn, login, &text);
                    return None;
                }
                Err(text) => {
                    self.refuse_login(conn, login, &text);
                    return None;
                }
            }
        }
        if self.cfg.users.is_none() {
            if let Some(token) = &self.cfg.login_token {
                // Compared in constant time: a comparison that stops at the first
                // differing byte tells a peer how much of its guess was right.
                if !tickwire_auth::same_secret(login.token.as_bytes(), token.as_bytes()) {
                    self.login_failed(conn, login.user);
                    let text = format!("login rejected for user {:?}: bad token", login.user);
                    self.refuse_login(conn, login, &text);
                    return None;
                }
                // A right token clears the failures before it, as a right secret does.
                self.login_succeeded(conn, login.user);
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
                    "login rejected for user {:?}: a secret is required (anonymous logins are off): log in with a password or a token (tickwire's commands read TICKWIRE_PASSWORD or --password-file)",
                    login.user
                )
            };
            self.refuse_login(conn, login, &text);
            return None;
        }
        // A login with a token and no user name (RSSL's name type 5, the
        // authentication token) is the user whose token it is; no user's, it is
        // checked as an unknown user is, and refused as one.
        let user = match (login.user.is_empty(), &self.cfg.users) {
            (true, Some(users)) => users.user_of_token(login.token).unwrap_or(""),
            _ => login.user,
        }
        .to_string();
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.auth_requests.push(AuthRequest {
            conn,
            ticket,
            user: user.clone(),
            secret: login.token.to_string(),
        });
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.pending_login = Some(Box::new(PendingLogin {
                ticket,
                version,
                role: login.role,
                user,
                application: login.application.to_string(),
                slow_consumer: login.slow_consumer,
                held: Vec::new(),
                checked_against: self.cfg.users.clone(),
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
            user = %LogName(login.user), role = ?login.role, %peer, reason = %text,
            "login refused"
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
        if p.held.len() + FRAME_HEADER_LEN + frame.len() > MAX_HELD_BEFORE_LOGIN {
            let text = format!(
                "more than {MAX_HELD_BEFORE_LOGIN} bytes sent before the login was verified"
            );
            self.stats.protocol_disconnects += 1;
            self.reject(conn, code::PROTOCOL, &text);
            return true;
        }
        p.held
            .extend_from_slice(&(frame.len() as u32).to_be_bytes());
        p.held.extend_from_slice(frame);
        true
    }

    /// May this connection do `action` to `service`?
    pub(crate) fn may(&self, conn: ConnId, action: Action, service: &str) -> bool {
        self.entitlements_pass(conn, |e| e.allows(action, service))
    }

    /// Whether the connection's entitlements pass `test`: one place that knows whose
    /// entitlements a connection has (open and internal ones pass any test; an
    /// anonymous login has the node's anonymous rights, a user theirs, an unknown user
    /// none). A connection that is gone passes nothing.
    #[inline]
    pub(crate) fn entitlements_pass(
        &self,
        conn: ConnId,
        test: impl Fn(&Entitlements) -> bool,
    ) -> bool {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return false;
        };
        match c.identity {
            Identity::Open | Identity::Internal => true,
            Identity::Anonymous => self.cfg.anonymous.entitlements().is_some_and(|e| test(&e)),
            Identity::User => self
                .cfg
                .users
                .as_ref()
                .and_then(|u| u.entitlements(&c.user))
                .is_some_and(test),
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
        self.merge_deferred();
        self.now = now;
        if let (Some(old), Some(new)) = (&self.cfg.users, &users) {
            for change in old.changes(new) {
                info!(target: "audit", "users file reloaded: {change}");
            }
        }
        // A token stands for a password checked against the old file: it goes with
        // its user, or when the user's secret or rights changed.
        let old = std::mem::replace(&mut self.cfg.users, users);
        let revoked = match (&old, &self.cfg.users) {
            (Some(old), Some(new)) => self.sessions.revoke_unless(|u| old.unchanged(new, u)),
            _ => self.sessions.revoke_unless(|_| false),
        };
        for (user, n) in revoked {
            info!(
                target: "audit",
                "session tokens revoked: user={user:?}: {n} (users file reloaded: the user was removed or changed)"
            );
        }
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
        self.send_directory_visibility_changes(old.as_deref());
        self.handle_overflows();
    }

    /// After a reload, each subscriber whose user may now subscribe to other services
    /// than before gets a directory delta: the services it gained, as they are, and the
    /// ones it lost, as removed (the directory shows a subscriber only what it may
    /// subscribe to). Computed once per user. Sent to subscribers that are behind too:
    /// a reload is the operator's doing, not a peer's, and the whole directory they get
    /// when they catch up would not say what they lost.
    fn send_directory_visibility_changes(&mut self, old: Option<&Users>) {
        let mut by_user: FxHashMap<String, Option<Encoded>> = FxHashMap::default();
        let mut plan: Vec<(ConnId, String)> = Vec::new();
        for (id, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.role != ConnRole::Subscriber || c.identity != Identity::User {
                continue;
            }
            if !by_user.contains_key(&c.user) {
                let rights = |users: Option<&Users>| {
                    users
                        .and_then(|u| u.entitlements(&c.user))
                        .map(|e| e.subscribe.clone())
                        .unwrap_or_default()
                };
                let (before, after) = (rights(old), rights(self.cfg.users.as_deref()));
                let mut delta = None;
                if before != after {
                    let (mut gained, mut lost) = (Vec::new(), Vec::new());
                    for svc in 0..self.services.len() {
                        let name = self.services[svc].name.as_str();
                        match (before.contains(name), after.contains(name)) {
                            (false, true) => gained.push(self.service_entry(svc)),
                            (true, false) => lost.push(ServiceEntry {
                                name,
                                state: ServiceState::Removed,
                                interactive: false,
                                item_count: 0,
                            }),
                            _ => {}
                        }
                    }
                    if !gained.is_empty() || !lost.is_empty() {
                        // The services gained, then (in messages of their own) the ones
                        // lost.
                        let (mut buf, mut ends) = (Vec::new(), Vec::new());
                        encode_directory(&gained, &mut buf, &mut ends);
                        encode_directory(&lost, &mut buf, &mut ends);
                        delta = Some((buf, ends));
                    }
                }
                by_user.insert(c.user.clone(), delta);
            }
            plan.push((id, c.user.clone()));
        }
        for (id, user) in plan {
            if let Some(Some((buf, ends))) = by_user.get(&user) {
                self.queue_encoded(id, buf, ends);
            }
        }
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
                    state: State::closed(code::NOT_ENTITLED, &text),
                }),
            );
        }
    }
}
