//! Identities and entitlements for a Tickwire node.
//!
//! Owns the users file (who exists, their secret as a salted hash, their groups) and
//! the entitlements (which services a user may subscribe to, publish and post to), and
//! answers two questions: is this secret right for this user ([`Users::verify`]), and
//! may this user do this to that service ([`Users::may`]). It does no I/O beyond
//! reading the file it is asked to load, and it keeps no connection state: the node's
//! core enforces the answers, the node's event loop never waits for a password check
//! (verification is deliberately slow and runs on a worker thread).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod file;
mod secret;
mod sessions;

pub use file::UsersError;
pub use secret::{hash_password, hash_token, same_secret, SecretError};
pub use sessions::SessionTokens;

use rustc_hash::{FxHashMap, FxHashSet};
use secret::Secret;
use sha2::Digest as _;

/// What a user may do to a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read a service's items.
    Subscribe,
    /// Publish a service (be its provider).
    Publish,
    /// Post to a service's items.
    Post,
}

impl Action {
    /// The action as a refusal's text says it ("subscribe to").
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Subscribe => "subscribe to",
            Action::Publish => "publish",
            Action::Post => "post to",
        }
    }
}

/// A set of service names, or every service (`"*"` in the file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Services {
    /// No service.
    #[default]
    None,
    /// Every service.
    All,
    /// These services.
    Some(FxHashSet<String>),
}

impl Services {
    /// Whether `service` is in the set.
    pub fn contains(&self, service: &str) -> bool {
        match self {
            Services::None => false,
            Services::All => true,
            Services::Some(set) => set.contains(service),
        }
    }

    fn add(&mut self, names: &[String]) {
        for n in names {
            match self {
                Services::All => return,
                _ if n == "*" => *self = Services::All,
                Services::None => *self = Services::Some(std::iter::once(n.clone()).collect()),
                Services::Some(set) => {
                    set.insert(n.clone());
                }
            }
        }
    }
}

/// A user's effective rights: their own lists and their groups', joined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entitlements {
    /// Services the user may subscribe to.
    pub subscribe: Services,
    /// Services the user may publish.
    pub publish: Services,
    /// Services the user may post to.
    pub post: Services,
    /// Files sites a connection of the user may speak for (say it is there, say what
    /// it has): the downstream node that logs in as the user and the sites below it.
    /// A user may always speak for the site of its own name.
    pub sites: Services,
}

impl Entitlements {
    /// Whether `user`, with these rights, may speak for the files site `site`.
    pub fn may_be_site(&self, user: &str, site: &str) -> bool {
        user == site || self.sites.contains(site)
    }

    /// Whether the user may do `action` to `service`.
    pub fn allows(&self, action: Action, service: &str) -> bool {
        match action {
            Action::Subscribe => self.subscribe.contains(service),
            Action::Publish => self.publish.contains(service),
            Action::Post => self.post.contains(service),
        }
    }
}

/// Who may log in without a secret.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Anonymous {
    /// Nobody: every login needs a user and a secret.
    #[default]
    None,
    /// A login without a secret may subscribe to every service (never publish or post).
    Subscribe,
}

impl Anonymous {
    /// The rights of an anonymous login, if it is allowed at all.
    pub fn entitlements(self) -> Option<Entitlements> {
        match self {
            Anonymous::None => None,
            Anonymous::Subscribe => Some(Entitlements {
                subscribe: Services::All,
                ..Entitlements::default()
            }),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct User {
    secret: Secret,
    groups: Vec<String>,
    rights: Entitlements,
}

/// The users of a node, as loaded from its users file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    users: FxHashMap<String, User>,
}

/// Why a login was refused (the text the peer and the audit log see).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The same text for an unknown user and a wrong secret: a peer must not learn
    /// which user names exist.
    #[error("login rejected for user {0:?}: unknown user or wrong secret")]
    BadCredentials(String),
}

impl Users {
    /// Whether `user` exists.
    pub fn contains(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// How many users the file has.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// The file has no user.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Checks a login's secret (a password or a token). Slow on purpose for passwords
    /// (argon2), and for every refusal: call it off the event loop.
    pub fn verify(&self, user: &str, secret: &str) -> Result<(), AuthError> {
        match self.users.get(user) {
            Some(u) if u.secret.matches(secret) => Ok(()),
            Some(u) => {
                // A wrong token is seen in microseconds: it pays what an unknown user's
                // refusal does, or the time would tell token users' names apart.
                if matches!(u.secret, Secret::Token(_)) {
                    Secret::burn_time(secret);
                }
                Err(AuthError::BadCredentials(user.to_string()))
            }
            None => {
                // As long as for a known user, so timing tells nothing either.
                Secret::burn_time(secret);
                Err(AuthError::BadCredentials(user.to_string()))
            }
        }
    }

    /// The user whose token `token` is, for a login that names no user (an RSSL login
    /// of name type 5, the authentication token): none if no user, or more than one,
    /// has it. Every user's token is compared, each in constant time.
    pub fn user_of_token(&self, token: &str) -> Option<&str> {
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        let mut matches = 0;
        for (name, u) in &self.users {
            if let Secret::Token(want) = &u.secret {
                if same_secret(&digest, want) {
                    matches += 1;
                    found = Some(name.as_str());
                }
            }
        }
        (matches == 1).then_some(found).flatten()
    }

    /// The user's effective rights, if the user exists.
    pub fn entitlements(&self, user: &str) -> Option<&Entitlements> {
        self.users.get(user).map(|u| &u.rights)
    }

    /// May `user` do `action` to `service`? An unknown user may do nothing.
    pub fn may(&self, user: &str, action: Action, service: &str) -> bool {
        self.entitlements(user)
            .is_some_and(|e| e.allows(action, service))
    }

    /// Whether `user` is in both `self` and `new` with the same secret, groups and
    /// rights: a session token issued under `self` stays valid under `new` only then.
    pub fn unchanged(&self, new: &Users, user: &str) -> bool {
        match (self.users.get(user), new.users.get(user)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    /// What changed from `self` to `new`, for the audit log: users added, removed, and
    /// whose rights or secret changed.
    pub fn changes(&self, new: &Users) -> Vec<String> {
        let mut out = Vec::new();
        let mut names: Vec<&String> = self.users.keys().chain(new.users.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            match (self.users.get(name), new.users.get(name)) {
                (None, Some(_)) => out.push(format!("user {name:?} added")),
                (Some(_), None) => out.push(format!("user {name:?} removed")),
                (Some(a), Some(b)) => {
                    if a.rights != b.rights || a.groups != b.groups {
                        out.push(format!("user {name:?} entitlements changed"));
                    }
                    if a.secret != b.secret {
                        out.push(format!("user {name:?} secret changed"));
                    }
                }
                (None, None) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
