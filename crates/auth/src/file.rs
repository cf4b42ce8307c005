//! The users file (TOML):
//!
//! ```toml
//! [users.alice]
//! password_hash = "$argon2id$v=19$m=19456,t=2,p=1$..."   # tickwire users hash
//! groups = ["traders"]
//! subscribe = ["FEED"]
//!
//! [users.feed-handler]
//! token_hash = "sha256:9f86d0..."                        # tickwire users hash --token
//! publish = ["FEED"]
//!
//! [users.edge-ldn]                                       # a downstream node's login
//! token_hash = "sha256:60303a..."
//! subscribe = ["*"]
//! sites = ["ldn-1", "ldn-2"]                             # files sites it speaks for
//!
//! [groups.traders]
//! subscribe = ["*"]
//! post = ["ORDERS"]
//! ```
//!
//! A user's rights are their own lists joined with their groups'.

use crate::secret::{Secret, SecretError};
use crate::{Entitlements, User, Users};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Why a users file was not loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UsersError {
    /// The file cannot be read.
    #[error("cannot read users file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why not.
        reason: String,
    },
    /// The file is not TOML of the expected shape.
    #[error("users file {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A value in it is wrong (a bad hash, an unknown group).
    #[error("users file {path}: {key}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The key whose value is wrong.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    #[serde(default)]
    users: BTreeMap<String, UserModel>,
    #[serde(default)]
    groups: BTreeMap<String, RightsModel>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserModel {
    password_hash: Option<String>,
    token_hash: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
    #[serde(default)]
    post: Vec<String>,
    #[serde(default)]
    sites: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RightsModel {
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
    #[serde(default)]
    post: Vec<String>,
    #[serde(default)]
    sites: Vec<String>,
}

impl RightsModel {
    fn add_to(&self, e: &mut Entitlements) {
        e.subscribe.add(&self.subscribe);
        e.publish.add(&self.publish);
        e.post.add(&self.post);
        e.sites.add(&self.sites);
    }

    fn check(&self, path: &str, key: &str) -> Result<(), UsersError> {
        for (what, list) in [
            ("subscribe", &self.subscribe),
            ("publish", &self.publish),
            ("post", &self.post),
            ("sites", &self.sites),
        ] {
            if let Some(bad) = list.iter().find(|s| s.is_empty()) {
                let named = if what == "sites" { "site" } else { "service" };
                return Err(UsersError::Invalid {
                    path: path.into(),
                    key: format!("{key}.{what}"),
                    reason: format!("{bad:?}: a {named} name or \"*\" for all"),
                });
            }
        }
        Ok(())
    }
}

impl Users {
    /// Reads and checks a users file (docs/SECURITY.md).
    pub fn load(path: &Path) -> Result<Users, UsersError> {
        let text = std::fs::read_to_string(path).map_err(|e| UsersError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Users::parse(&text, &path.display().to_string())
    }

    /// Parses the file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Users, UsersError> {
        let model: FileModel = toml::from_str(text).map_err(|e| UsersError::Parse {
            path: origin.into(),
            message: one_line(text, &e),
        })?;
        for (name, g) in &model.groups {
            g.check(origin, &format!("groups.{name}"))?;
        }
        let mut users = Users::default();
        for (name, u) in model.users {
            let key = format!("users.{name}");
            let invalid = |k: &str, reason: String| UsersError::Invalid {
                path: origin.into(),
                key: format!("{key}{k}"),
                reason,
            };
            if name.is_empty() {
                return Err(invalid("", "a user name may not be empty".into()));
            }
            let secret = match (&u.password_hash, &u.token_hash) {
                (Some(p), None) => Secret::password(p)
                    .map_err(|e: SecretError| invalid(".password_hash", e.to_string()))?,
                (None, Some(t)) => Secret::token(t)
                    .map_err(|e: SecretError| invalid(".token_hash", e.to_string()))?,
                _ => {
                    return Err(invalid(
                        "",
                        "needs exactly one of password_hash or token_hash".into(),
                    ))
                }
            };
            let own = RightsModel {
                subscribe: u.subscribe,
                publish: u.publish,
                post: u.post,
                sites: u.sites,
            };
            own.check(origin, &key)?;
            let mut rights = Entitlements::default();
            own.add_to(&mut rights);
            for g in &u.groups {
                let group = model.groups.get(g).ok_or_else(|| {
                    let known: Vec<&str> = model.groups.keys().map(String::as_str).collect();
                    invalid(
                        ".groups",
                        format!("unknown group {g:?} (groups defined: {known:?})"),
                    )
                })?;
                group.add_to(&mut rights);
            }
            users.users.insert(
                name,
                User {
                    secret,
                    groups: u.groups,
                    rights,
                },
            );
        }
        Ok(users)
    }
}

/// A TOML error as one log line: where, then what.
fn one_line(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().trim_end().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}
