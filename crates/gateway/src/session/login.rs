//! The Login domain over the WebSocket API: a client's login (and a cookie login the
//! upgrade carried), its reissues, and the login Refresh the node's Welcome becomes.

use super::json::{escape, write_error, write_refusal, write_state, Bytes};
use super::{JsonOut, LoginState, Session, COOKIE_LOGIN_ID};
use serde_json::Value as Json;
use std::fmt::Write as _;
use tickwire_proto::{code, DataState, Login, Message, Role, StreamState};

/// The login's `Key.Elements` answer: the client's ApplicationId and Position echoed,
/// and what this server supports.
pub(super) fn login_echo(_user: &str, elements: Option<&Json>) -> Json {
    let get = |k: &str| elements.and_then(|e| e.get(k)).cloned();
    serde_json::json!({
        "AllowSuspectData": 1,
        "ApplicationId": get("ApplicationId").unwrap_or(Json::String("256".into())),
        "ApplicationName": "Tickwire",
        "Position": get("Position").unwrap_or(Json::String("".into())),
        "ProvidePermissionExpressions": 0,
        "ProvidePermissionProfile": 0,
        "SingleOpen": 0,
        "SupportBatchRequests": 5,
        "SupportEnhancedSymbolList": 0,
        "SupportOMMPost": 1,
        "SupportOptimizedPauseResume": 0,
        "SupportPauseResume": 0,
        "SupportStandby": 0,
        "SupportViewRequests": 1
    })
}

impl Session {
    /// Logs the connection in as `user` without a Login from the client: its upgrade
    /// carried a session token (cookie `AuthToken`) that the node took for `user` (or
    /// will refuse: then `user` is empty and the node's refusal comes back as the
    /// login's Status). The login has ID -1 ([`COOKIE_LOGIN_ID`]); its Refresh comes
    /// unasked, which is what the published authenticating examples wait for before
    /// they request anything. `application_id` and `position` are the upgrade's
    /// `applicationId` and `AuthPosition` cookies, echoed like a Login's elements.
    pub fn cookie_login(
        &mut self,
        user: &str,
        application_id: Option<&str>,
        position: Option<&str>,
        to_node: &mut Vec<u8>,
    ) {
        let mut elements = serde_json::Map::new();
        if let Some(a) = application_id {
            elements.insert("ApplicationId".into(), Json::String(a.into()));
        }
        if let Some(p) = position {
            elements.insert("Position".into(), Json::String(p.into()));
        }
        let elements = Json::Object(elements);
        let application = format!("ws:{}", application_id.unwrap_or("256"));
        let msg = Message::Login(Login::new(Role::Subscriber, &application, user, ""));
        // A name too long to encode leaves the login to fail at the node's deadline;
        // user names come from the node's own users file, so this does not happen.
        if msg.encode(to_node).is_ok() {
            self.user = user.to_string();
            self.cookie_login = true;
            self.login = LoginState::Pending {
                id: COOKIE_LOGIN_ID,
                echo: login_echo(user, Some(&elements)),
            };
        }
    }

    /// A login reissue naming a user other than the connection's (`as_user`: "logged
    /// in" or "logging in"): told so, with an error; true if it was.
    pub(super) fn reissue_names_another(
        &self,
        named: Option<&str>,
        as_user: &str,
        id: i64,
        out: &mut JsonOut,
    ) -> bool {
        if named.is_none_or(|n| n == self.user) {
            return false;
        }
        let why = format!(
            "a login reissue may not change the user: {as_user} as {:?}",
            self.user
        );
        write_error(out, id, &why, "");
        true
    }

    pub(super) fn on_login(
        &mut self,
        id: i64,
        obj: &serde_json::Map<String, Json>,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
    ) {
        let key = obj.get("Key");
        // A login by token (`"NameType":"AuthnToken"`, RDM name type 5) names no user:
        // the node finds whose token it is.
        let by_token = key
            .and_then(|k| k.get("NameType"))
            .is_some_and(|t| t == "AuthnToken" || t == 5);
        let user = match key.and_then(|k| k.get("Name")) {
            _ if by_token => String::new(),
            None | Some(Json::Null) => "user".to_string(),
            Some(Json::String(name)) => name.clone(),
            Some(other) => {
                let why = format!(
                    "JSON Converter Token Type error: expected a string for key 'Name', not {other}"
                );
                write_error(out, id, &why, "");
                return;
            }
        };
        let elements = key.and_then(|k| k.get("Elements"));
        let app = elements
            .and_then(|e| e.get("ApplicationId"))
            .map(|v| match v {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_else(|| "256".into());
        // The secret: a token as the published API sends it, or a password.
        let token = elements
            .and_then(|e| e.get("AuthenticationToken").or_else(|| e.get("Password")))
            .and_then(Json::as_str)
            .unwrap_or("");
        // A Login without credentials, naming no other user, on a connection its
        // cookie logged in (a client that sends its own Login after the upgrade): it
        // is that login, answered and kept on the client's ID from now on.
        let named = key.and_then(|k| k.get("Name")).and_then(Json::as_str);
        let joins_cookie_login =
            self.cookie_login && token.is_empty() && named.is_none_or(|n| n == self.user);
        match &self.login {
            LoginState::Open { id: open } if *open == id => {
                // A reissue: answered again, for the user logged in (it changes nothing
                // at the node, so it may not name another).
                if self.reissue_names_another(named, "logged in", id, out) {
                    return;
                }
                let user = self.user.clone();
                self.write_login_refresh(id, &user, &login_echo(&user, elements), out);
                return;
            }
            LoginState::Open { .. } if joins_cookie_login => {
                let user = self.user.clone();
                self.write_login_refresh(id, &user, &login_echo(&user, elements), out);
                self.login = LoginState::Open { id };
                return;
            }
            LoginState::Pending { .. } if joins_cookie_login => {
                let echo = login_echo(&self.user, elements);
                self.login = LoginState::Pending { id, echo };
                return;
            }
            LoginState::Pending { id: pending, .. } if *pending == id => {
                // A reissue before the node answered the login: the login's refresh
                // answers it (refused, it was no login open), with this one's echo.
                if self.reissue_names_another(named, "logging in", id, out) {
                    return;
                }
                let echo = login_echo(&self.user, elements);
                self.login = LoginState::Pending { id, echo };
                return;
            }
            LoginState::None => {}
            _ => {
                write_refusal(
                    out,
                    id,
                    true,
                    code::PROTOCOL,
                    "a login is already open on this connection",
                );
                return;
            }
        }
        let application = format!("ws:{app}");
        let msg = Message::Login(Login::new(Role::Subscriber, &application, &user, token));
        if msg.encode(to_node).is_err() {
            write_refusal(out, id, true, code::LOGIN_REJECTED, "login fields too long");
            return;
        }
        self.user = user.clone();
        self.login = LoginState::Pending {
            id,
            echo: login_echo(&user, elements),
        };
    }

    pub(super) fn write_login_refresh(&self, id: i64, user: &str, echo: &Json, out: &mut JsonOut) {
        out.end_frame(); // the login Refresh goes alone in its frame
        let o = out.begin();
        let _ = write!(
            Bytes(o),
            "{{\"ID\":{id},\"Type\":\"Refresh\",\"Domain\":\"Login\",\"Key\":{{\"Name\":"
        );
        escape(o, user);
        o.extend_from_slice(b",\"Elements\":");
        o.extend_from_slice(echo.to_string().as_bytes());
        o.extend_from_slice(b"},\"State\":");
        write_state(
            o,
            StreamState::Open,
            DataState::Ok,
            code::NONE,
            "Login accepted by Tickwire",
        );
        let _ = write!(
            Bytes(o),
            ",\"Elements\":{{\"PingTimeout\":{},\"MaxMsgSize\":{}}}}}",
            self.cfg.ping_timeout_s,
            self.cfg.max_msg_size
        );
        out.end_frame();
    }

    /// The login's ID once it was sent to the node: requests that follow it are
    /// passed on in order (a client may send them before the login Refresh arrives; the
    /// node rejects them if the login fails).
    pub(super) fn logged_in(&self) -> Option<i64> {
        match self.login {
            LoginState::Open { id } | LoginState::Pending { id, .. } => Some(id),
            LoginState::None => None,
        }
    }
}
