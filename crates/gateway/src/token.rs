//! `POST /getToken` and the `AuthToken` cookie, without I/O: what LSEG's published
//! "authentication" examples of the WebSocket API do before they open their WebSocket.
//! They post a form (`username`, `password`), expect a JSON answer with `"success"`
//! and the token in a `Set-Cookie: AuthToken=...`, then upgrade with
//! `Cookie: AuthToken=...; AuthPosition=...; applicationId=...` and send no Login of
//! their own: the server logs them in from the cookie and sends the login Refresh
//! (on ID -1, as a login the server made).
//!
//! This module reads the request (its body length, the form, the cookies) and writes
//! the answers; the node checks the password (off its event loop) and keeps the tokens.

use crate::ws::{http_response_with, Request};
use serde_json::json;

/// Where a user's password is exchanged for a session token.
pub const TOKEN_PATH: &str = "/getToken";

/// Largest body read for a token request: a user name and a password fit many times
/// over. A larger one is refused (413) from its `Content-Length`, before it is read.
pub const MAX_BODY: usize = 4 * 1024;

/// The cookie that carries the token, as the published examples name it.
pub const TOKEN_COOKIE: &str = "AuthToken";

/// A refused token request: the HTTP status line's code and reason, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The status line's code and reason (`401 Unauthorized`).
    pub status: &'static str,
    /// Why, for the body.
    pub text: String,
}

fn refusal(status: &'static str, text: impl Into<String>) -> Refusal {
    Refusal {
        status,
        text: text.into(),
    }
}

/// The value of cookie `name` in the request's `Cookie` headers (`a=1; b=2`), quotes
/// around it removed. Cookie names are case-sensitive (RFC 6265).
pub fn cookie<'r>(req: &'r Request, name: &str) -> Option<&'r str> {
    req.headers
        .iter()
        .filter(|(n, _)| n == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| n.trim() == name)
        .map(|(_, v)| {
            let v = v.trim();
            v.strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v)
        })
}

/// The length of a token request's body, from its head: a `Content-Length` of at most
/// [`MAX_BODY`], for a form (`application/x-www-form-urlencoded`, or no type given).
pub fn body_length(req: &Request) -> Result<usize, Refusal> {
    if req.header("transfer-encoding").is_some() {
        return Err(refusal(
            "411 Length Required",
            "send the form with a Content-Length (chunked bodies are not accepted)",
        ));
    }
    if let Some(ty) = req.header("content-type") {
        let essence = ty.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            return Err(refusal(
                "415 Unsupported Media Type",
                format!(
                    "a token request is a form (application/x-www-form-urlencoded) with \
                     username and password, not {essence}"
                ),
            ));
        }
    }
    let lengths: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    let Some(&first) = lengths.first() else {
        return Err(refusal(
            "411 Length Required",
            "a token request needs a Content-Length",
        ));
    };
    let len: usize = match first.parse() {
        Ok(n) if lengths.iter().all(|l| *l == first) => n,
        _ => {
            return Err(refusal(
                "400 Bad Request",
                format!("invalid Content-Length {first:?}"),
            ))
        }
    };
    if len > MAX_BODY {
        return Err(refusal(
            "413 Content Too Large",
            format!("a token request's body is at most {MAX_BODY} bytes (this one: {len})"),
        ));
    }
    Ok(len)
}

/// The user name and password of a token request's form (`username=...&password=...`,
/// percent-encoded, `+` for a space).
pub fn credentials(body: &[u8]) -> Result<(String, String), Refusal> {
    let mut user = None;
    let mut password = None;
    for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let slot = match decode(name)?.as_str() {
            "username" => &mut user,
            "password" => &mut password,
            _ => continue,
        };
        *slot = Some(decode(value)?);
    }
    match (user, password) {
        (Some(u), Some(p)) if !u.is_empty() => Ok((u, p)),
        _ => Err(refusal(
            "400 Bad Request",
            "the form needs a username and a password",
        )),
    }
}

/// One percent-encoded form field, as UTF-8.
fn decode(bytes: &[u8]) -> Result<String, Refusal> {
    let bad = || refusal("400 Bad Request", "malformed form encoding");
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| refusal("400 Bad Request", "the form is not UTF-8"))
}

/// The answer that hands out a token: JSON `{"success":true,...}` and the token in a
/// cookie for the node's whole origin, `HttpOnly` (no script reads it) and
/// `SameSite=Strict` (no other site's page sends it), `Secure` when the port speaks
/// TLS, expiring with the token.
pub fn issued_response(token: &str, user: &str, lifetime_s: u64, secure: bool) -> Vec<u8> {
    let cookie = format!(
        "{TOKEN_COOKIE}={token}; Path=/; Max-Age={lifetime_s}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    let body = json!({"success": true, "user": user, "expires_in": lifetime_s});
    http_response_with(
        "200 OK",
        "application/json",
        &[("Set-Cookie", &cookie)],
        body.to_string().as_bytes(),
    )
}

/// The answer refusing a token request: JSON `{"success":false,"message":...}` (the
/// published examples read the JSON whatever the status).
pub fn refused_response(r: &Refusal) -> Vec<u8> {
    let body = json!({"success": false, "message": r.text});
    let allow: &[(&str, &str)] = if r.status.starts_with("405") {
        &[("Allow", "POST")]
    } else {
        &[]
    };
    http_response_with(
        r.status,
        "application/json",
        allow,
        body.to_string().as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::parse_request;

    fn req(head: &str) -> Request {
        parse_request(head.as_bytes()).unwrap().unwrap().0
    }

    /// The cookie header the published examples send.
    #[test]
    fn cookies_are_found_by_name() {
        let r = req("GET /WebSocket HTTP/1.1\r\nCookie: AuthToken=abc;AuthPosition=10.0.0.1;applicationId=555;\r\n\r\n");
        assert_eq!(cookie(&r, "AuthToken"), Some("abc"));
        assert_eq!(cookie(&r, "AuthPosition"), Some("10.0.0.1"));
        assert_eq!(cookie(&r, "applicationId"), Some("555"));
        assert_eq!(cookie(&r, "authtoken"), None, "names are case-sensitive");
        let r = req("GET / HTTP/1.1\r\nCookie: a=1\r\nCookie: AuthToken=\"q\" \r\n\r\n");
        assert_eq!(cookie(&r, "AuthToken"), Some("q"));
        assert_eq!(cookie(&req("GET / HTTP/1.1\r\n\r\n"), "AuthToken"), None);
    }

    #[test]
    fn the_form_is_percent_decoded() {
        let (u, p) = credentials(b"username=alice&password=p%40ss+word%21&x=1").unwrap();
        assert_eq!((u.as_str(), p.as_str()), ("alice", "p@ss word!"));
        let (_, p) = credentials(b"password=&username=bob").unwrap();
        assert_eq!(p, "");
        for bad in [
            &b"username=alice"[..],
            b"password=x",
            b"username=&password=x",
        ] {
            assert_eq!(credentials(bad).unwrap_err().status, "400 Bad Request");
        }
        for bad in [&b"username=%zz&password=x"[..], b"username=a%2&password=x"] {
            assert!(credentials(bad).unwrap_err().text.contains("malformed"));
        }
        assert!(credentials(b"username=%ff&password=x")
            .unwrap_err()
            .text
            .contains("UTF-8"));
    }

    #[test]
    fn the_body_must_be_a_small_form_with_a_length() {
        let post = |headers: &str| req(&format!("POST /getToken HTTP/1.1\r\n{headers}\r\n"));
        let form = "Content-Type: application/x-www-form-urlencoded\r\n";
        assert_eq!(
            body_length(&post(&format!("{form}Content-Length: 30\r\n"))),
            Ok(30)
        );
        assert_eq!(body_length(&post("Content-Length: 4096\r\n")), Ok(MAX_BODY));
        for (headers, status) in [
            ("Content-Length: 4097\r\n".to_string(), "413"),
            ("Content-Length: 99999999999999999999999\r\n".into(), "400"),
            ("Content-Length: 1\r\nContent-Length: 2\r\n".into(), "400"),
            (form.to_string(), "411"),
            ("Transfer-Encoding: chunked\r\n".into(), "411"),
            (
                "Content-Type: application/json\r\nContent-Length: 2\r\n".into(),
                "415",
            ),
        ] {
            let e = body_length(&post(&headers)).unwrap_err();
            assert!(e.status.starts_with(status), "{headers:?}: {e:?}");
        }
    }

    fn split(resp: &[u8]) -> (String, serde_json::Value) {
        let text = String::from_utf8(resp.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        // Every header line ends with CRLF.
        (format!("{head}\r\n"), serde_json::from_str(body).unwrap())
    }

    #[test]
    fn answers_are_json_with_the_token_in_a_cookie() {
        let (head, body) = split(&issued_response("f00d", "alice", 3600, true));
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains(
                "\r\nSet-Cookie: AuthToken=f00d; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure\r\n"
            ),
            "{head}"
        );
        assert_eq!(body["success"], true);
        assert_eq!(body["user"], "alice");
        assert!(
            body.get("token").is_none(),
            "the token is in the cookie only"
        );
        let (head, _) = split(&issued_response("f00d", "alice", 60, false));
        assert!(!head.contains("Secure"), "{head}");
        let (head, body) = split(&refused_response(&refusal(
            "401 Unauthorized",
            "unknown user or wrong secret",
        )));
        assert!(head.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{head}");
        assert!(!head.contains("Set-Cookie"));
        assert_eq!(body["success"], false);
        assert_eq!(body["message"], "unknown user or wrong secret");
        let (head, _) = split(&refused_response(&refusal(
            "405 Method Not Allowed",
            "POST",
        )));
        assert!(head.contains("\r\nAllow: POST\r\n"), "{head}");
    }
}
