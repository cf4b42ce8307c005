//! Logins checked against a users file, off the loop; entitlements per service;
//! permissions that shrink on reload.

use super::*;
use tickwire_auth::{hash_token, Users};

fn users(text_rights: &str) -> Arc<Users> {
    let text = format!(
        "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [\"FEED\"]\n\
         [users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n{text_rights}",
        hash_token("alice-secret"),
        hash_token("feed-secret"),
    );
    Arc::new(Users::parse(&text, "users.toml").unwrap())
}

fn secured(anonymous: Anonymous) -> Harness {
    Harness::with_config(CoreConfig {
        users: Some(users("")),
        anonymous,
        ..CoreConfig::default()
    })
}

/// Logs in with a secret; the harness plays the verification thread.
fn login_as(h: &mut Harness, role: Role, user: &str, secret: &str) -> (ConnId, Vec<Got>) {
    let c = h.node.connect("test", h.now);
    h.send(
        c,
        &[Message::Login(Login {
            version_min: 1,
            version_max: 1,
            role,
            application: "test",
            user,
            token: secret,
            slow_consumer: None,
        })],
    );
    verify_pending(h);
    let got = h.recv(c);
    (c, got)
}

/// Answers every queued secret check as the node's verifier thread would.
fn verify_pending(h: &mut Harness) {
    let mut reqs = Vec::new();
    h.node.take_auth_requests(&mut reqs);
    for r in reqs {
        let users = h.node.config().users.clone().unwrap();
        let res = users.verify(&r.user, &r.secret).map_err(|e| e.to_string());
        h.node.on_auth_result(r.conn, r.ticket, res, h.now);
    }
}

fn publish_feed(h: &mut Harness) -> ConnId {
    let (p, got) = login_as(h, Role::Publisher, "feed", "feed-secret");
    assert!(matches!(got[..], [Got::Welcome { .. }]), "{got:?}");
    h.send(
        p,
        &[Message::Directory(Directory {
            services: vec![ServiceEntry {
                name: "FEED",
                state: ServiceState::Up,
                interactive: false,
                item_count: 0,
            }],
        })],
    );
    let img = bid_ask(1, 2);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    p
}

#[test]
fn a_login_waits_for_its_secret_and_keeps_what_came_meanwhile() {
    let mut h = secured(Anonymous::None);
    publish_feed(&mut h);
    let c = h.node.connect("test", h.now);
    // Login and a request in one frame, as a client that does not wait may send them.
    h.send(
        c,
        &[
            Message::Login(Login {
                version_min: 1,
                version_max: 1,
                role: Role::Subscriber,
                application: "test",
                user: "alice",
                token: "alice-secret",
                slow_consumer: None,
            }),
            Message::Request(Request {
                stream_id: 1,
                streaming: true,
                service: "FEED",
                name: "SYM0",
                view: None,
            }),
        ],
    );
    assert_eq!(h.recv(c), vec![], "nothing before the secret is checked");
    verify_pending(&mut h);
    let got = h.recv(c);
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    assert!(
        got.iter().any(|g| matches!(g, Got::Refresh { sid: 1, .. })),
        "{got:?}"
    );
}

#[test]
fn wrong_secrets_unknown_users_and_anonymous_logins_are_refused_with_a_reason() {
    let mut h = secured(Anonymous::None);
    for (user, secret, want) in [
        ("alice", "nope", "unknown user or wrong secret"),
        ("mallory", "x", "unknown user or wrong secret"),
        ("alice", "", "a secret is required"),
    ] {
        let (_, got) = login_as(&mut h, Role::Subscriber, user, secret);
        assert!(
            matches!(&got[..], [Got::Status { sid: 0, code: code::LOGIN_REJECTED, text, .. }] if text.contains(want)),
            "{user}: {got:?}"
        );
    }
    assert_eq!(h.node.awaiting_login_count(), 0);
}

#[test]
fn anonymous_logins_may_subscribe_when_allowed_and_never_publish() {
    let mut h = secured(Anonymous::Subscribe);
    publish_feed(&mut h);
    let (sub, got) = login_as(&mut h, Role::Subscriber, "", "");
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    h.request(sub, 1, "FEED", "SYM0", true, None);
    assert!(matches!(h.recv(sub)[..], [Got::Refresh { sid: 1, .. }]));
    let (_, got) = login_as(&mut h, Role::Publisher, "", "");
    assert!(
        matches!(&got[..], [Got::Status { code: code::LOGIN_REJECTED, text, .. }] if text.contains("may only subscribe")),
        "{got:?}"
    );
}

#[test]
fn entitlements_decide_who_subscribes_and_who_publishes_which_service() {
    let mut h = secured(Anonymous::None);
    publish_feed(&mut h);
    // alice may subscribe to FEED only.
    let (sub, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    h.request(sub, 1, "FEED", "SYM0", true, None);
    h.request(sub, 2, "TICKWIRE", "NODE", true, None);
    let got = h.recv(sub);
    assert!(matches!(got[0], Got::Refresh { sid: 1, .. }), "{got:?}");
    assert!(
        matches!(&got[1], Got::Status { sid: 2, stream: StreamState::Closed, code: code::NOT_ENTITLED, text, .. }
            if text == "user \"alice\" may not subscribe to service \"TICKWIRE\""),
        "{got:?}"
    );
    // alice may not publish; the feed user may not publish NEWS.
    for (user, secret, service) in [
        ("alice", "alice-secret", "FEED"),
        ("feed", "feed-secret", "NEWS"),
    ] {
        let (p, _) = login_as(&mut h, Role::Publisher, user, secret);
        h.send(
            p,
            &[Message::Directory(Directory {
                services: vec![ServiceEntry {
                    name: service,
                    state: ServiceState::Up,
                    interactive: false,
                    item_count: 0,
                }],
            })],
        );
        let got = h.recv(p);
        assert!(
            matches!(got.last(), Some(Got::Status { sid: 0, code: code::NOT_ENTITLED, text, .. })
                if text.contains(&format!("may not publish service \"{service}\""))),
            "{got:?}"
        );
    }
}

#[test]
fn shrunk_permissions_close_what_was_lost_on_reload() {
    let mut h = secured(Anonymous::None);
    publish_feed(&mut h);
    let (sub, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    h.request(sub, 1, "FEED", "SYM0", true, None);
    h.recv(sub);
    // alice loses FEED; the publisher keeps it.
    let fewer = Arc::new(
        Users::parse(
            &format!(
                "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [\"OTHER\"]\n\
                 [users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n",
                hash_token("alice-secret"),
                hash_token("feed-secret")
            ),
            "users.toml",
        )
        .unwrap(),
    );
    h.node.set_users(Some(fewer), h.now);
    let got = h.recv(sub);
    assert!(
        matches!(
            &got[..],
            [Got::Status {
                sid: 1,
                stream: StreamState::Closed,
                code: code::NOT_ENTITLED,
                ..
            }]
        ),
        "{got:?}"
    );
    // The stream is gone: updates no longer reach it.
    let upd = bid_ask(3, 4);
    let p = 0; // the publisher logged in first
    h.send(p, &[update(1, 2, &upd)]);
    assert_eq!(h.recv(sub), vec![]);
    // The feed user removed: its connection goes.
    let none = Arc::new(
        Users::parse(
            &format!(
                "[users.alice]\ntoken_hash = \"{}\"\n",
                hash_token("alice-secret")
            ),
            "users.toml",
        )
        .unwrap(),
    );
    h.node.set_users(Some(none), h.now);
    let got = h.recv(p);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::NOT_ENTITLED, text, .. }) if text.contains("removed")),
        "{got:?}"
    );
}

#[test]
fn an_answer_for_a_connection_that_went_away_reaches_no_one_else() {
    let mut h = secured(Anonymous::None);
    let c = h.node.connect("test", h.now);
    h.send(
        c,
        &[Message::Login(Login {
            version_min: 1,
            version_max: 1,
            role: Role::Subscriber,
            application: "test",
            user: "alice",
            token: "alice-secret",
            slow_consumer: None,
        })],
    );
    let mut reqs = Vec::new();
    h.node.take_auth_requests(&mut reqs);
    h.node.on_disconnect(c, h.now);
    // The id is reused by a connection that has not logged in.
    let other = h.node.connect("other", h.now);
    assert_eq!(other, c);
    h.node
        .on_auth_result(reqs[0].conn, reqs[0].ticket, Ok(()), h.now);
    assert_eq!(h.recv(other), vec![]);
    assert_eq!(h.node.awaiting_login_count(), 1);
}
