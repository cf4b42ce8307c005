//! File-transfer messages (`Message::Files`, docs/FILES.md): the core carries them and
//! nothing more. What a logged-in peer sends is queued for the node's files thread
//! (bounded in bytes: past [`FILES_IN_BYTES`] a message is dropped and counted; the
//! transfer protocol repairs a lost chunk and an upload with a gap is refused), and
//! what the files thread sends goes out through the peer's ordinary bounded queue.
//! The files thread asks [`Node::entitled`] who may send or receive a files service.

use crate::security::Identity;
use crate::{ConnId, ConnRole, Node};
use std::sync::Arc;
use tickwire_auth::Action;
use tickwire_proto::message::code;
use tickwire_proto::Message;

/// Bytes of file-transfer messages waiting for the files thread at most.
pub const FILES_IN_BYTES: usize = 64 << 20;

/// Which files sites a connection may speak for ([`Node::sites_of`]).
pub type SiteTest = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A file-transfer message from a peer.
#[derive(Debug)]
pub struct FilesIn {
    /// Who sent it.
    pub conn: ConnId,
    /// The message.
    pub body: Vec<u8>,
}

impl Node {
    pub(crate) fn on_files_message(&mut self, conn: ConnId, body: &[u8]) {
        if !self.cfg.files {
            self.stats.protocol_disconnects += 1;
            self.reject(
                conn,
                code::PROTOCOL,
                "this node takes no files ([files] is not in its configuration)",
            );
            return;
        }
        if self.files_in_bytes + body.len() > FILES_IN_BYTES {
            self.stats.files_dropped += 1;
            return;
        }
        self.files_in_bytes += body.len();
        self.files_in.push(FilesIn {
            conn,
            body: crate::chunk_buffers::SHARED.copy_of(body, 0),
        });
    }

    /// Drops what a connection that went sent and the files thread has not taken yet:
    /// it would reach the thread after the connection's end, and its answers would go
    /// to the next connection given its id.
    pub(crate) fn forget_files_of(&mut self, conn: ConnId) {
        let mut kept = Vec::with_capacity(self.files_in.len());
        for m in self.files_in.drain(..) {
            if m.conn == conn {
                self.files_in_bytes -= m.body.len();
                crate::chunk_buffers::SHARED.give_back(m.body);
            } else {
                kept.push(m);
            }
        }
        self.files_in = kept;
    }

    /// Takes the file-transfer messages peers sent since the last call, and the
    /// connections gone since (in `gone`; their uploads and routes are over).
    pub fn take_files(&mut self, into: &mut Vec<FilesIn>, gone: &mut Vec<ConnId>) {
        self.files_in_bytes = 0;
        into.append(&mut self.files_in);
        gone.append(&mut self.files_gone);
    }

    /// May this (logged-in) connection do `action` to `service`?
    pub fn entitled(&self, conn: ConnId, action: Action, service: &str) -> bool {
        matches!(
            self.role(conn),
            Some(ConnRole::Subscriber | ConnRole::Publisher)
        ) && self.may(conn, action, service)
    }

    /// Whether a logged-in connection may speak for the files site `site` (say it is
    /// there and what it has): on a node with a users file, the site of its user's
    /// name and the user's `sites`; on an open node, any.
    pub fn may_be_site(&self, conn: ConnId, site: &str) -> bool {
        // The site of its own name is a checked user's only: an anonymous login
        // names itself as it likes.
        let checked_user = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .filter(|c| c.identity == Identity::User)
            .map(|c| c.user.as_str());
        matches!(
            self.role(conn),
            Some(ConnRole::Subscriber | ConnRole::Publisher)
        ) && self.entitlements_pass(conn, |e| match checked_user {
            Some(user) => e.may_be_site(user, site),
            None => e.sites.contains(site),
        })
    }

    /// [`Node::may_be_site`] for `conn` as it stands now, as a test another thread can
    /// keep (the files thread, told after a reload which sites a connection may still
    /// speak for).
    pub fn sites_of(&self, conn: ConnId) -> SiteTest {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return Arc::new(|_| false);
        };
        if !matches!(c.role, ConnRole::Subscriber | ConnRole::Publisher) {
            return Arc::new(|_| false);
        }
        let rights = match c.identity {
            Identity::Open | Identity::Internal => return Arc::new(|_| true),
            Identity::Anonymous => self.cfg.anonymous.entitlements(),
            Identity::User => self
                .cfg
                .users
                .as_ref()
                .and_then(|u| u.entitlements(&c.user))
                .cloned(),
        };
        let Some(rights) = rights else {
            return Arc::new(|_| false);
        };
        // The site of its own name is a checked user's only (as in `may_be_site`).
        let user = (c.identity == Identity::User).then(|| c.user.clone());
        Arc::new(move |site| match &user {
            Some(user) => rights.may_be_site(user, site),
            None => rights.sites.contains(site),
        })
    }

    /// The user a connection logged in as.
    pub fn user_of(&self, conn: ConnId) -> Option<&str> {
        self.conns.get(conn)?.as_ref().map(|c| c.user.as_str())
    }

    /// Sends a file-transfer message to a logged-in peer. With `only_if_room`, it is
    /// not sent (false) when the peer has `room_bytes` or more queued already: chunks
    /// and offers are repaired later, and a busy link keeps room for market data.
    pub fn send_files(&mut self, conn: ConnId, body: &[u8], room_bytes: Option<usize>) -> bool {
        if !matches!(
            self.role(conn),
            Some(ConnRole::Subscriber | ConnRole::Publisher)
        ) {
            return false;
        }
        if room_bytes.is_some_and(|room| self.pending_output(conn) >= room) {
            return false;
        }
        self.send(conn, &Message::Files(body));
        true
    }
}
