//! Logins: the consumer's (or provider's) Login request as the node's Login, the login
//! Refresh once the node welcomes it, and the connection-level statuses on its stream.

use super::{rwf_code, rwf_data_state, LoginState, Outbox, Session};
use crate::rwf::container::{ElementIter, ElementListWriter};
use crate::rwf::msg::{
    begin_refresh, code, data, domain, put_status, refresh, request, stream, Msg, MsgKey, RwfState,
};
use crate::rwf::primitive::dt;
use tickwire_proto::{
    code as ncode, Login, Message, Role, State, StreamState, PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
};

/// Login element names.
const EL_PASSWORD: &[u8] = b"Password";
const EL_AUTHN_TOKEN: &[u8] = b"AuthenticationToken";
const EL_APPLICATION_ID: &[u8] = b"ApplicationId";
const EL_APPLICATION_NAME: &[u8] = b"ApplicationName";
const EL_POSITION: &[u8] = b"Position";
const EL_ROLE: &[u8] = b"Role";
/// The login's `Role` of a (non-interactive) provider; consumers say 0.
const ROLE_PROVIDER: u64 = 1;
/// The login name type of an authentication token.
const NAME_TYPE_AUTHN_TOKEN: u8 = 5;

impl Session {
    pub(super) fn on_login(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        if !matches!(self.login, LoginState::None) {
            // A reissue of the open login (a new token, a pause): nothing changes. It
            // is answered as a request is, with a solicited refresh (the SDK's
            // watchlist takes no other as its answer, and asks again), unless it asks
            // for none.
            if let LoginState::Open { stream, user } = &self.login {
                if *stream == m.stream_id {
                    if m.flags & request::NO_REFRESH == 0 {
                        let (stream, user) = (*stream, user.clone());
                        self.login_refresh(stream, &user, out);
                    }
                    return;
                }
            }
            // Before the node accepted the login: its refresh answers this one too.
            if matches!(self.login, LoginState::Pending { stream, .. } if stream == m.stream_id) {
                return;
            }
            self.refuse(
                out,
                to_node,
                m,
                code::USAGE_ERROR,
                "a login is already open on this connection",
            );
            return;
        }
        let key = m.key.clone().unwrap_or_default();
        let name = String::from_utf8_lossy(key.name.unwrap_or(b"")).into_owned();
        let mut secret = String::new();
        let mut token = None;
        let mut app = String::from("rssl");
        let mut provider = false;
        if let Some((dt::ELEMENT_LIST, attrib)) = key.attrib {
            if let Ok(els) = ElementIter::new(attrib) {
                for e in els.flatten() {
                    let text = e.text().map(|t| String::from_utf8_lossy(t).into_owned());
                    match (e.name, text) {
                        (EL_PASSWORD, Some(t)) => secret = t,
                        (EL_AUTHN_TOKEN, Some(t)) => token = Some(t),
                        (EL_APPLICATION_NAME, Some(t)) => app = format!("rssl:{t}"),
                        (EL_ROLE, _) => provider = e.uint() == Some(ROLE_PROVIDER),
                        (EL_APPLICATION_ID | EL_POSITION, _) => {}
                        _ => {}
                    }
                }
            }
        }
        // A token login names no user: the token is the secret. The RDM puts it in
        // the AuthenticationToken element, with a name of one NUL byte (as the ETA
        // Consumer's `-at` sends it); a name that is the token is taken too.
        let user = if key.name_type == Some(NAME_TYPE_AUTHN_TOKEN) {
            secret = token.unwrap_or(name);
            String::new()
        } else {
            name
        };
        let login = Message::Login(Login {
            version_min: PROTOCOL_VERSION_MIN,
            version_max: PROTOCOL_VERSION_MAX,
            role: if provider {
                Role::Publisher
            } else {
                Role::Subscriber
            },
            application: &app,
            user: &user,
            token: &secret,
            slow_consumer: None,
        });
        if login.encode(to_node).is_err() {
            self.refuse(
                out,
                to_node,
                m,
                code::INVALID_ARGUMENT,
                "login fields too long",
            );
            self.finished = true;
            return;
        }
        self.login = LoginState::Pending {
            stream: m.stream_id,
            user,
        };
        if provider {
            self.provider = Some(Box::default());
        }
    }

    /// The login Refresh: the answer to a Login request, the first or a reissue.
    pub(super) fn login_refresh(&mut self, stream_id: i32, user: &str, out: &mut impl Outbox) {
        self.buf.clear();
        let text = format!("Login accepted by {}", self.cfg.node_name);
        let mut attrib = Vec::new();
        let mut el = ElementListWriter::begin(&mut attrib);
        el.uint(&mut attrib, "SingleOpen", 0);
        el.uint(&mut attrib, "AllowSuspectData", 1);
        el.uint(&mut attrib, "SupportBatchRequests", 1);
        el.uint(&mut attrib, "SupportViewRequests", 1);
        el.uint(&mut attrib, "SupportOMMPost", 1);
        el.uint(&mut attrib, "SupportOptimizedPauseResume", 0);
        el.uint(&mut attrib, "SupportStandby", 0);
        if self.provider.is_some() {
            // Providers without dictionary files of their own may download the node's.
            el.uint(&mut attrib, "SupportProviderDictionaryDownload", 1);
        }
        el.end(&mut attrib);
        let key = MsgKey {
            name: Some(user.as_bytes()),
            name_type: Some(1),
            attrib: Some((dt::ELEMENT_LIST, &attrib)),
            ..MsgKey::default()
        };
        let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
        begin_refresh(
            &mut self.buf,
            domain::LOGIN,
            stream_id,
            flags,
            dt::NO_DATA,
            None,
            &RwfState::new(stream::OPEN, data::OK, code::NONE, &text),
            Some(&key),
            None,
            false,
        );
        out.send(&self.buf);
    }

    /// A connection-level status: a refused login, or the node closing the connection.
    pub(super) fn on_connection_status(&mut self, state: &State<'_>, out: &mut impl Outbox) {
        let stream_id = match &self.login {
            LoginState::Pending { stream, .. } | LoginState::Open { stream, .. } => *stream,
            LoginState::None => 1,
        };
        let code = match state.code {
            ncode::LOGIN_REJECTED | ncode::NOT_ENTITLED => code::NOT_ENTITLED,
            other => rwf_code(other),
        };
        let st = RwfState {
            stream: if state.stream == StreamState::Open {
                stream::OPEN
            } else {
                stream::CLOSED
            },
            data: rwf_data_state(state.data),
            code,
            text: state.text.as_bytes(),
        };
        self.buf.clear();
        put_status(&mut self.buf, domain::LOGIN, stream_id, &st, None, false);
        out.send(&self.buf);
        if st.stream != stream::OPEN {
            self.finished = true;
        }
    }
}
