//! Logins: checking a login (names, protocol versions, loops through node trees) and
//! welcoming the connection with its role.

use crate::admission;
use crate::admission::LogName;
use crate::security::Identity;
use crate::{ConnId, ConnRole, Node, MAX_LOGIN_NAME_BYTES};
use tickwire_proto::{
    code, Login, Message, Role, SlowConsumerPolicy, Welcome, PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
};
use tracing::info;

impl Node {
    pub(crate) fn on_login(&mut self, conn: ConnId, login: &Login<'_>) {
        let lo = login.version_min.max(PROTOCOL_VERSION_MIN);
        let hi = login.version_max.min(PROTOCOL_VERSION_MAX);
        if lo > hi {
            let text = format!(
                "no common protocol version: client speaks {}..={}, node speaks {}..={}",
                login.version_min, login.version_max, PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX
            );
            self.stats.protocol_disconnects += 1;
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        if self.shutting_down {
            self.reject(conn, code::SHUTDOWN, "node shutting down");
            return;
        }
        if let Some(text) = self.loop_refusal(login.application) {
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        for (what, name) in [("user", login.user), ("application", login.application)] {
            if name.len() > MAX_LOGIN_NAME_BYTES {
                let text = format!(
                    "login rejected: the {what} name {} is longer than {MAX_LOGIN_NAME_BYTES} bytes",
                    admission::shown(name)
                );
                self.stats.protocol_disconnects += 1;
                self.reject(conn, code::LOGIN_REJECTED, &text);
                return;
            }
        }
        if let Some(text) = self.login_held_off(conn, login.user) {
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        let Some(identity) = self.authenticate(conn, hi, login) else {
            return; // refused, or its secret is being checked
        };
        if identity == Identity::Anonymous {
            let peer = self.conns[conn].as_ref().map_or("", |c| c.peer.as_str());
            info!(
                target: "audit",
                user = %LogName(login.user), role = ?login.role, %peer, anonymous = true,
                "login accepted"
            );
        }
        self.finish_login(
            conn,
            hi,
            login.role,
            login.user,
            login.application,
            login.slow_consumer,
            identity,
        );
    }

    /// Why a node logging in would close a loop: it is this node, or a node this one
    /// is fed from.
    pub(crate) fn loop_refusal(&self, application: &str) -> Option<String> {
        let id = tickwire_proto::parse_node_login(application)?;
        if id == self.cfg.node_id {
            return Some(format!(
                "loop refused: node {:?} ({id:016x}) is logging in to itself",
                self.cfg.node_name
            ));
        }
        let (_, name) = self.upstream_chain.iter().find(|(i, _)| *i == id)?;
        let chain: Vec<&str> = self
            .upstream_chain
            .iter()
            .map(|(_, n)| n.as_str())
            .collect();
        Some(format!(
            "loop refused: node {name:?} ({id:016x}) feeds this node (upstream chain {}); \
             it cannot also be fed by it",
            chain.join(" -> ")
        ))
    }

    /// The nodes this node is fed from over upstream links, nearest first: a login
    /// from any of them is refused (it would close a loop).
    pub fn set_upstream_chain(&mut self, chain: Vec<(u64, String)>) {
        self.upstream_chain = chain;
    }

    /// A login accepted: the connection takes its role and gets the Welcome (and a
    /// subscriber the directory).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn finish_login(
        &mut self,
        conn: ConnId,
        version: u16,
        role: Role,
        user: &str,
        application: &str,
        slow_consumer: Option<SlowConsumerPolicy>,
        identity: Identity,
    ) {
        if self.role(conn) != Some(ConnRole::AwaitingLogin) {
            return;
        }
        // Connections waiting to log in are not counted at accept (so that they
        // cannot crowd out real users): the limit holds at the login, or as many as
        // were waiting when the node was short of it would all get in.
        let max = self.cfg.limits.max_connections;
        let internal = self.conns[conn].as_ref().is_some_and(|c| c.internal);
        if !internal && self.logged_in_count() >= max {
            self.reject(
                conn,
                code::TOO_MANY_CONNECTIONS,
                &format!("connection limit reached: {max} connections"),
            );
            return;
        }
        self.stats.logins += 1;
        self.awaiting_login -= 1;
        let ip = self.conns[conn].as_ref().and_then(|c| c.ip);
        self.login_no_longer_pending(ip);
        let limits = self.cfg.limits.clone();
        if role == Role::Subscriber {
            let policy = self.policy_for(user, slow_consumer);
            self.apply_policy(conn, policy);
        }
        let Some(c) = self.conn_mut(conn) else { return };
        c.role = match role {
            Role::Subscriber => ConnRole::Subscriber,
            Role::Publisher => ConnRole::Publisher,
        };
        c.logged_in = true;
        c.identity = identity;
        c.user = user.to_string();
        c.application = application.to_string();
        info!(
            peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
            "logged in"
        );
        let welcome = Message::Welcome(Welcome {
            version,
            heartbeat_ms: limits.heartbeat.as_millis() as u32,
            max_frame: limits.max_frame as u32,
            // Past what 32 bits say, the most they say: `as` kept the low bits (2^32
            // streams were said as 0).
            max_streams: u32::try_from(limits.max_streams_per_connection).unwrap_or(u32::MAX),
            max_output_bytes: u32::try_from(limits.max_output_bytes).unwrap_or(u32::MAX),
            node_name: &self.cfg.node_name.clone(),
        });
        self.send(conn, &welcome);
        if role == Role::Subscriber {
            self.send_directory(conn);
        }
    }
}
