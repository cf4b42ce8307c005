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
    users_file(&text)
}

fn users_file(text: &str) -> Arc<Users> {
    Arc::new(Users::parse(text, "users.toml").unwrap())
}

/// A users file where alice, with `secret`, is the only user and may do nothing.
fn only_alice(secret: &str) -> Arc<Users> {
    users_file(&format!(
        "[users.alice]\ntoken_hash = \"{}\"\n",
        hash_token(secret)
    ))
}

fn secured(anonymous: Anonymous) -> Harness {
    Harness::with_config(CoreConfig {
        users: Some(users("")),
        anonymous,
        ..CoreConfig::default()
    })
}

/// A [`secured`] node where the feed user publishes FEED, with SYM0.
fn secured_feed(anonymous: Anonymous) -> Harness {
    let mut h = secured(anonymous);
    publish_feed(&mut h);
    h
}

/// Logs in with a secret; the harness plays the verification thread.
fn login_as(h: &mut Harness, role: Role, user: &str, secret: &str) -> (ConnId, Vec<Got>) {
    let c = h.connect_with(client_login(role, user, secret));
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
    h.send(p, &[directory([("FEED", true)])]);
    let img = bid_ask(1, 2);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    p
}

#[test]
fn a_login_waits_for_its_secret_and_keeps_what_came_meanwhile() {
    let mut h = secured_feed(Anonymous::None);
    let c = h.node.connect("test", h.now);
    // Login and a request in one frame, as a client that does not wait may send them.
    h.send(
        c,
        &[
            Message::Login(client_login(Role::Subscriber, "alice", "alice-secret")),
            Message::Request(Request::streaming(1, "FEED", "SYM0")),
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

/// What a connection sends while its login is checked is held within its bound with
/// each frame's framing counted: frames of a byte each, 20,000 of them (100,000 bytes
/// on the wire), pass it; counted by their payloads alone they took 20 KB of the bound
/// and about 60 bytes of memory each, a connection's bound many times over.
#[test]
fn frames_held_before_the_login_is_verified_count_their_framing() {
    let mut h = secured_feed(Anonymous::None);
    let c = h.connect_with(client_login(Role::Subscriber, "alice", "alice-secret"));
    assert_eq!(h.recv(c), vec![], "nothing before the secret is checked");
    for _ in 0..20_000 {
        h.node.on_frame(c, &[0], h.now);
    }
    let got = h.recv(c);
    assert!(
        matches!(&got[..], [Got::Status { sid: 0, code: code::PROTOCOL, text, .. }]
            if text.contains("bytes sent before the login was verified")),
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

/// A login with a token and no user name (an RSSL login by authentication token) is
/// the user whose token it is, with that user's rights; a token no user has is refused
/// as a wrong secret is, and so is one two users share.
#[test]
fn a_token_without_a_user_name_logs_in_as_the_user_whose_token_it_is() {
    let mut h = secured_feed(Anonymous::None);
    let (alice, got) = login_as(&mut h, Role::Subscriber, "", "alice-secret");
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    assert_eq!(h.node.user_of(alice), Some("alice"));
    h.request(alice, 1, "FEED", "SYM0", true, None);
    assert!(matches!(h.recv(alice)[..], [Got::Refresh { sid: 1, .. }]));
    let (feed, got) = login_as(&mut h, Role::Publisher, "", "feed-secret");
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    assert_eq!(h.node.user_of(feed), Some("feed"));
    let (_, got) = login_as(&mut h, Role::Subscriber, "", "nobody's");
    assert!(
        only_status(&got, code::LOGIN_REJECTED, "unknown user or wrong secret"),
        "{got:?}"
    );
    // Two users with one token: neither is chosen.
    let twice = users_file(&format!(
        "[users.a]\ntoken_hash = \"{0}\"\n[users.b]\ntoken_hash = \"{0}\"\n",
        hash_token("shared")
    ));
    assert_eq!(twice.user_of_token("shared"), None);
    assert_eq!(users("").user_of_token("alice-secret"), Some("alice"));
}

#[test]
fn anonymous_logins_may_subscribe_when_allowed_and_never_publish() {
    let mut h = secured_feed(Anonymous::Subscribe);
    let (sub, got) = login_as(&mut h, Role::Subscriber, "", "");
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
    h.request(sub, 1, "FEED", "SYM0", true, None);
    assert!(matches!(h.recv(sub)[..], [Got::Refresh { sid: 1, .. }]));
    let (_, got) = login_as(&mut h, Role::Publisher, "", "");
    assert!(
        only_status(&got, code::LOGIN_REJECTED, "may only subscribe"),
        "{got:?}"
    );
}

#[test]
fn entitlements_decide_who_subscribes_and_who_publishes_which_service() {
    let mut h = secured_feed(Anonymous::None);
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
        h.send(p, &[directory([(service, true)])]);
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
    let mut h = secured_feed(Anonymous::None);
    let (sub, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    h.request(sub, 1, "FEED", "SYM0", true, None);
    h.recv(sub);
    // alice loses FEED; the publisher keeps it.
    let fewer = alice_without_feed();
    h.node.set_users(Some(fewer), h.now);
    let got = h.recv(sub);
    // The stream is closed, and FEED leaves alice's directory.
    assert!(
        matches!(
            &got[..],
            [Got::Status {
                sid: 1,
                stream: StreamState::Closed,
                code: code::NOT_ENTITLED,
                ..
            }, Got::Removed(gone)] if gone == &["FEED"]
        ),
        "{got:?}"
    );
    // The stream is gone: updates no longer reach it.
    let upd = bid_ask(3, 4);
    let p = 0; // the publisher logged in first
    h.send(p, &[update(1, 2, &upd)]);
    assert_eq!(h.recv(sub), vec![]);
    // The feed user removed: its connection goes.
    h.node.set_users(Some(only_alice("alice-secret")), h.now);
    let got = h.recv(p);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::NOT_ENTITLED, text, .. }) if text.contains("removed")),
        "{got:?}"
    );
}

#[test]
fn an_answer_for_a_connection_that_went_away_reaches_no_one_else() {
    let mut h = secured(Anonymous::None);
    let c = h.connect_with(client_login(Role::Subscriber, "alice", "alice-secret"));
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

// ---------------------------------------------------------------------------------------
// Session tokens: POST /getToken, then a WebSocket upgrade with the token as a cookie
// ---------------------------------------------------------------------------------------

fn token_harness(tls: bool, tokens: SessionTokenConfig) -> Harness {
    Harness::with_config(CoreConfig {
        users: Some(users("")),
        tls,
        session_tokens: tokens,
        ..CoreConfig::default()
    })
}

/// Asks for a token on a new connection from `peer`; plays the verification thread.
fn get_token(h: &mut Harness, peer: &str, user: &str, password: &str) -> TokenAnswer {
    let c = h.node.connect(peer, h.now);
    if let Some(answer) = h.node.request_session_token(c, user, password, h.now) {
        let mut reqs = Vec::new();
        h.node.take_auth_requests(&mut reqs);
        assert!(reqs.is_empty(), "refused at once: nothing to check");
        return answer;
    }
    assert_eq!(
        h.node.take_token_answer(c),
        None,
        "no answer before the check"
    );
    let mut dirty = Vec::new();
    h.node.take_dirty(&mut dirty);
    verify_pending(h);
    h.node.take_dirty(&mut dirty);
    assert!(dirty.contains(&c), "the connection is woken for its answer");
    h.node.take_token_answer(c).expect("an answer once checked")
}

fn issued(a: TokenAnswer) -> String {
    match a {
        TokenAnswer::Issued { token, .. } => token,
        other => panic!("no token: {other:?}"),
    }
}

/// A WebSocket connection whose upgrade presents `token`, then logs in without a
/// secret as `user` (what the gateway sends for it).
fn cookie_login(
    h: &mut Harness,
    token: &str,
    user: &str,
) -> (ConnId, Option<Result<String, String>>, Vec<Got>) {
    let c = h.node.connect("10.0.0.7:50000", h.now);
    let seen = h.node.present_session_token(c, token, h.now);
    h.send(
        c,
        &[Message::Login(Login {
            application: "ws:555",
            ..client_login(Role::Subscriber, user, "")
        })],
    );
    let got = h.recv(c);
    (c, seen, got)
}

fn refused_login(got: &[Got], want: &str) -> bool {
    matches!(got, [Got::Status { sid: 0, stream: StreamState::Closed, code: code::LOGIN_REJECTED, text, .. }] if text.contains(want))
}

#[test]
fn a_password_checked_off_the_loop_gets_a_token_that_logs_a_connection_in() {
    let mut h = token_harness(true, SessionTokenConfig::default());
    publish_feed(&mut h);
    let answer = get_token(&mut h, "10.0.0.9:4000", "alice", "alice-secret");
    let TokenAnswer::Issued {
        token,
        user,
        lifetime,
    } = answer
    else {
        panic!("{answer:?}");
    };
    assert_eq!(
        (user.as_str(), lifetime),
        ("alice", Duration::from_secs(3600))
    );
    assert_eq!(token.len(), 64);
    assert_eq!(h.node.session_token_count(), 1);
    // The upgrade's cookie: the login that follows, without a secret, is alice's.
    let (c, seen, got) = cookie_login(&mut h, &token, "alice");
    assert_eq!(seen, Some(Ok("alice".to_string())));
    assert!(
        matches!(&got[..], [Got::Welcome { .. }, Got::Directory(d)] if d == &[(s("FEED"), true)]),
        "{got:?}"
    );
    // alice's rights, nothing more.
    h.request(c, 1, "FEED", "SYM0", true, None);
    h.request(c, 2, "TICKWIRE", "NODE", true, None);
    let got = h.recv(c);
    assert!(matches!(got[0], Got::Refresh { sid: 1, .. }), "{got:?}");
    assert!(
        matches!(
            &got[1],
            Got::Status {
                sid: 2,
                code: code::NOT_ENTITLED,
                ..
            }
        ),
        "{got:?}"
    );
    // A token serves until it expires, on as many connections as need it.
    let (_, _, got) = cookie_login(&mut h, &token, "alice");
    assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
}

#[test]
fn wrong_passwords_get_no_token_and_forged_expired_or_misused_tokens_log_no_one_in() {
    let mut h = token_harness(true, SessionTokenConfig::default());
    for (user, password) in [("alice", "guess"), ("mallory", "x"), ("alice", "")] {
        let a = get_token(&mut h, "10.0.0.9:4000", user, password);
        assert!(
            matches!(&a, TokenAnswer::Refused { why: TokenRefusal::BadCredentials, text }
                if text.contains("unknown user or wrong secret")),
            "{user}: {a:?}"
        );
    }
    assert_eq!(h.node.session_token_count(), 0);
    let forged = "0123456789abcdef".repeat(4);
    let (_, seen, got) = cookie_login(&mut h, &forged, "");
    assert!(matches!(seen, Some(Err(_))), "{seen:?}");
    assert!(
        refused_login(&got, "unknown or expired session token"),
        "{got:?}"
    );
    // A real token names its user: a login on its connection may not name another.
    let token = issued(get_token(&mut h, "10.0.0.9:4000", "alice", "alice-secret"));
    let (_, _, got) = cookie_login(&mut h, &token, "feed");
    assert!(refused_login(&got, "may not name another user"), "{got:?}");
    // Expired: refused like a forged one.
    h.now += Duration::from_secs(3600);
    let (_, seen, got) = cookie_login(&mut h, &token, "");
    assert!(matches!(seen, Some(Err(_))), "{seen:?}");
    assert!(
        refused_login(&got, "unknown or expired session token"),
        "{got:?}"
    );
    assert_eq!(
        h.node.session_token_count(),
        0,
        "expired tokens are dropped"
    );
}

#[test]
fn tokens_go_with_their_user_when_the_users_file_changes_it() {
    let mut h = token_harness(true, SessionTokenConfig::default());
    let alice = issued(get_token(&mut h, "10.0.0.9:4000", "alice", "alice-secret"));
    let feed = issued(get_token(&mut h, "10.0.0.9:4000", "feed", "feed-secret"));
    let reload = |h: &mut Harness, text: &str| {
        h.node.set_users(Some(users_file(text)), h.now);
    };
    // alice's secret changed, feed unchanged.
    let feed_line = format!(
        "[users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n",
        hash_token("feed-secret")
    );
    let alice_line = |secret: &str, rights: &str| {
        format!(
            "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [{rights}]\n",
            hash_token(secret)
        )
    };
    reload(
        &mut h,
        &format!("{}{feed_line}", alice_line("alice-new", "\"FEED\"")),
    );
    assert!(refused_login(
        &cookie_login(&mut h, &alice, "alice").2,
        "expired"
    ));
    assert_eq!(cookie_login(&mut h, &feed, "feed").1, Some(Ok(s("feed"))));
    // alice's rights changed: a new token of hers goes too.
    let alice = issued(get_token(&mut h, "10.0.0.9:4000", "alice", "alice-new"));
    reload(
        &mut h,
        &format!("{}{feed_line}", alice_line("alice-new", "\"*\"")),
    );
    assert!(refused_login(
        &cookie_login(&mut h, &alice, "alice").2,
        "expired"
    ));
    // feed removed.
    reload(&mut h, &alice_line("alice-new", ""));
    assert!(refused_login(
        &cookie_login(&mut h, &feed, "feed").2,
        "expired"
    ));
    assert_eq!(h.node.session_token_count(), 0);
}

#[test]
fn a_change_to_the_user_during_the_check_refuses_the_token() {
    let mut h = token_harness(true, SessionTokenConfig::default());
    let c = h.node.connect("10.0.0.9:4000", h.now);
    assert_eq!(
        h.node
            .request_session_token(c, "alice", "alice-secret", h.now),
        None
    );
    let mut reqs = Vec::new();
    h.node.take_auth_requests(&mut reqs);
    // The users file is reloaded with alice's secret changed while hers is checked
    // (against the old file, which says yes).
    h.node
        .set_users(Some(only_alice("stolen-and-changed")), h.now);
    h.node.on_auth_result(c, reqs[0].ticket, Ok(()), h.now);
    let a = h.node.take_token_answer(c);
    assert!(
        matches!(&a, Some(TokenAnswer::Refused { why: TokenRefusal::Unavailable, text }) if text.contains("changed")),
        "{a:?}"
    );
    assert_eq!(h.node.session_token_count(), 0);
}

#[test]
fn tokens_are_issued_over_tls_or_on_the_nodes_own_host_only_and_not_on_an_open_node() {
    let mut h = token_harness(false, SessionTokenConfig::default());
    let a = get_token(&mut h, "10.0.0.9:4000", "alice", "alice-secret");
    assert!(
        matches!(&a, TokenAnswer::Refused { why: TokenRefusal::NeedsTls, text } if text.contains("[tls]")),
        "{a:?}"
    );
    for local in ["127.0.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"] {
        issued(get_token(&mut h, local, "alice", "alice-secret"));
    }
    // A node without users needs no tokens: it issues none and ignores cookies.
    let mut open = Harness::new(true);
    let a = get_token(&mut open, "127.0.0.1:4000", "alice", "alice-secret");
    assert!(
        matches!(&a, TokenAnswer::Refused { why: TokenRefusal::NotIssued, text } if text.contains("users file")),
        "{a:?}"
    );
    let c = open.node.connect("127.0.0.1:4000", open.now);
    assert_eq!(open.node.present_session_token(c, "x", open.now), None);
    // Nor does a node whose token lifetime is zero.
    let mut off = token_harness(
        true,
        SessionTokenConfig {
            lifetime: Duration::ZERO,
            ..SessionTokenConfig::default()
        },
    );
    let a = get_token(&mut off, "127.0.0.1:4000", "alice", "alice-secret");
    assert!(
        matches!(
            &a,
            TokenAnswer::Refused {
                why: TokenRefusal::NotIssued,
                ..
            }
        ),
        "{a:?}"
    );
}

#[test]
fn the_node_holds_a_bounded_number_of_tokens_and_drops_the_oldest() {
    let mut h = token_harness(
        true,
        SessionTokenConfig {
            max_tokens: 2,
            ..SessionTokenConfig::default()
        },
    );
    let tokens: Vec<String> = (0..3)
        .map(|_| issued(get_token(&mut h, "10.0.0.9:4000", "alice", "alice-secret")))
        .collect();
    assert_eq!(h.node.session_token_count(), 2);
    assert!(refused_login(
        &cookie_login(&mut h, &tokens[0], "alice").2,
        "expired"
    ));
    for t in &tokens[1..] {
        assert_eq!(cookie_login(&mut h, t, "alice").1, Some(Ok(s("alice"))));
    }
}

// ---------------------------------------------------------------------------------------
// The directory a subscriber sees: only the services it may subscribe to
// ---------------------------------------------------------------------------------------

/// alice may read FEED, carol too (through a group), bob everything; feed publishes
/// anything.
fn directory_users(alice_rights: &str) -> Arc<Users> {
    let text = format!(
        "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [{alice_rights}]\n\
         [users.carol]\ntoken_hash = \"{}\"\ngroups = [\"feed-readers\"]\n\
         [users.bob]\ntoken_hash = \"{}\"\nsubscribe = [\"*\"]\n\
         [users.feed]\ntoken_hash = \"{}\"\npublish = [\"*\"]\n\
         [groups.feed-readers]\nsubscribe = [\"FEED\"]\n",
        hash_token("alice-secret"),
        hash_token("carol-secret"),
        hash_token("bob-secret"),
        hash_token("feed-secret"),
    );
    users_file(&text)
}

fn announce(h: &mut Harness, p: ConnId, services: &[(&str, bool)]) {
    h.send(p, &[directory(services.iter().copied())]);
}

/// What `c` received of the directory since the last call (pings left out).
fn directory_seen(h: &mut Harness, c: ConnId) -> Vec<Got> {
    h.recv(c)
        .into_iter()
        .filter(|g| matches!(g, Got::Directory(_) | Got::Removed(_)))
        .collect()
}

#[test]
fn the_directory_shows_each_subscriber_only_the_services_it_may_subscribe_to() {
    let mut h = Harness::with_config(CoreConfig {
        users: Some(directory_users("\"FEED\"")),
        limits: Limits {
            service_retention: Duration::from_secs(10),
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let (p, _) = login_as(&mut h, Role::Publisher, "feed", "feed-secret");
    announce(&mut h, p, &[("FEED", true), ("NEWS", true)]);
    let logged_in = |h: &mut Harness, user: &str| {
        let (c, got) = login_as(h, Role::Subscriber, user, &format!("{user}-secret"));
        let dirs: Vec<Got> = got
            .into_iter()
            .filter(|g| matches!(g, Got::Directory(_)))
            .collect();
        (c, dirs)
    };
    // The whole directory at login: filtered.
    let (alice, got) = logged_in(&mut h, "alice");
    assert_eq!(got, [dir(&[("FEED", true)])]);
    let (carol, got) = logged_in(&mut h, "carol");
    assert_eq!(got, [dir(&[("FEED", true)])]);
    let (bob, got) = logged_in(&mut h, "bob");
    assert_eq!(got, [dir(&[("FEED", true), ("NEWS", true)])]);
    // A new service: only those who may read it hear of it.
    announce(&mut h, p, &[("RATES", true)]);
    assert_eq!(directory_seen(&mut h, alice), []);
    assert_eq!(directory_seen(&mut h, carol), []);
    assert_eq!(directory_seen(&mut h, bob), [dir(&[("RATES", true)])]);
    // Changes: each sees its part of the delta.
    announce(&mut h, p, &[("FEED", false), ("NEWS", false)]);
    assert_eq!(directory_seen(&mut h, alice), [dir(&[("FEED", false)])]);
    assert_eq!(directory_seen(&mut h, carol), [dir(&[("FEED", false)])]);
    assert_eq!(
        directory_seen(&mut h, bob),
        [dir(&[("FEED", false), ("NEWS", false)])]
    );
    // The publisher goes, then its services, nobody watching them.
    h.node.on_disconnect(p, h.now);
    assert_eq!(directory_seen(&mut h, alice), [dir(&[("FEED", false)])]);
    assert_eq!(directory_seen(&mut h, carol), [dir(&[("FEED", false)])]);
    assert_eq!(
        directory_seen(&mut h, bob),
        [dir(&[("FEED", false), ("NEWS", false), ("RATES", false)])]
    );
    for c in [alice, carol, bob] {
        h.send(c, &[Message::Ping(1)]); // alive
    }
    h.now += Duration::from_secs(11);
    h.node.handle_timeout(h.now);
    assert_eq!(
        directory_seen(&mut h, alice),
        [Got::Removed(vec![s("FEED")])]
    );
    assert_eq!(
        directory_seen(&mut h, carol),
        [Got::Removed(vec![s("FEED")])]
    );
    let got = directory_seen(&mut h, bob);
    let [Got::Removed(gone)] = &got[..] else {
        panic!("{got:?}")
    };
    let mut gone = gone.clone();
    gone.sort();
    assert_eq!(gone, ["FEED", "NEWS", "RATES"]);
}

#[test]
fn a_reload_shows_a_subscriber_the_services_it_gained_and_removes_those_it_lost() {
    let mut h = Harness::with_config(CoreConfig {
        users: Some(directory_users("\"FEED\"")),
        ..CoreConfig::default()
    });
    let (p, _) = login_as(&mut h, Role::Publisher, "feed", "feed-secret");
    announce(&mut h, p, &[("FEED", true), ("NEWS", true)]);
    let img = bid_ask(1, 2);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let (alice, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    let (bob, _) = login_as(&mut h, Role::Subscriber, "bob", "bob-secret");
    h.request(alice, 1, "FEED", "SYM0", true, None);
    h.recv(alice);
    // alice now reads NEWS instead of FEED; bob's rights are the same.
    h.node.set_users(Some(directory_users("\"NEWS\"")), h.now);
    let got = h.recv(alice);
    assert!(
        matches!(
            &got[..],
            [
                Got::Status {
                    sid: 1,
                    code: code::NOT_ENTITLED,
                    ..
                },
                _,
                _
            ]
        ),
        "{got:?}"
    );
    assert_eq!(
        got[1..],
        [dir(&[("NEWS", true)]), Got::Removed(vec![s("FEED")])]
    );
    assert_eq!(h.recv(bob), []);
    // Later changes follow the new rights.
    announce(&mut h, p, &[("FEED", false), ("NEWS", false)]);
    assert_eq!(directory_seen(&mut h, alice), [dir(&[("NEWS", false)])]);
}

#[test]
fn only_users_entitled_to_post_to_a_service_have_their_posts_forwarded() {
    let mut h = Harness::with_config(CoreConfig {
        users: Some(users(&format!(
            "[users.trader]\ntoken_hash = \"{}\"\nsubscribe = [\"FEED\"]\npost = [\"FEED\"]\n",
            hash_token("trader-secret")
        ))),
        posts: PostServices::All,
        ..CoreConfig::default()
    });
    let p = publish_feed(&mut h);
    h.recv(p);
    let f = bid_ask(1, 2);
    let post = Message::Post(tickwire_proto::Post {
        stream_id: 0,
        post_id: 3,
        ack: true,
        image: false,
        redelivered: false,
        service: "FEED",
        name: "SYM0",
        fields: FieldList::decode(&f).unwrap(),
    });
    // alice may read FEED, not post to it.
    let (alice, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    h.recv(alice);
    h.send(alice, std::slice::from_ref(&post));
    let got = h.recv(alice);
    assert!(
        matches!(&got[..], [Got::Ack { post_id: 3, nak: Some(NakCode::AccessDenied), text, .. }]
            if text == "user \"alice\" may not post to service \"FEED\""),
        "{got:?}"
    );
    assert!(h.recv(p).is_empty());
    let (trader, _) = login_as(&mut h, Role::Subscriber, "trader", "trader-secret");
    h.recv(trader);
    h.send(trader, &[post]);
    assert!(
        matches!(&h.recv(p)[..], [Got::Post { name, .. }] if name == "SYM0"),
        "the entitled poster's post is forwarded"
    );
}

/// Without a users file, a shared login token is the whole of the secret: only the
/// token itself logs in, not a part of it nor more than it.
#[test]
fn a_shared_login_token_takes_that_token_only() {
    let mut h = Harness::with_config(CoreConfig {
        login_token: Some("shared-token-1234".into()),
        ..CoreConfig::default()
    });
    for (token, ok) in [
        ("shared-token-1234", true),
        ("shared-token-123", false),
        ("shared-token-12345", false),
        ("shared-token-1235", false),
        ("", false),
    ] {
        let c = h.connect_with(client_login(Role::Subscriber, "u", token));
        let got = h.recv(c);
        assert_eq!(
            matches!(got[..], [Got::Welcome { .. }, ..]),
            ok,
            "{token:?}: {got:?}"
        );
    }
}

/// A right shared login token clears the failures before it, from its address and for
/// its user, as a right secret does: else a client that mistyped a few times an hour
/// ago and logged in since is held off at its next single mistake.
#[test]
fn a_right_shared_login_token_clears_the_failures_before_it() {
    let mut h = Harness::with_config(CoreConfig {
        login_token: Some("shared-token-1234".into()),
        ..CoreConfig::default()
    });
    let attempt = |h: &mut Harness, token: &str| {
        let c = h.node.connect("10.0.0.7:40000", h.now);
        h.send(
            c,
            &[Message::Login(client_login(Role::Subscriber, "u", token))],
        );
        h.recv(c)
    };
    for _ in 0..4 {
        let got = attempt(&mut h, "wrong");
        assert!(refused_login(&got, "bad token"), "{got:?}");
    }
    h.now += Duration::from_secs(1);
    let got = attempt(&mut h, "shared-token-1234");
    assert!(matches!(got[..], [Got::Welcome { .. }, ..]), "{got:?}");
    // One mistake after the success is the first of a new count: no hold-off.
    let got = attempt(&mut h, "wrong");
    assert!(refused_login(&got, "bad token"), "{got:?}");
    let got = attempt(&mut h, "shared-token-1234");
    assert!(matches!(got[..], [Got::Welcome { .. }, ..]), "{got:?}");
}

/// Anyone may fail in a user's name, from addresses of their own: the user's hold-off
/// that follows does not keep the user out where it logged in from before (else one
/// wrong secret each 5 s, from anywhere, kept it out for good), while a stranger's
/// address is held off all the same.
#[test]
fn failures_in_a_users_name_do_not_hold_it_off_where_it_logged_in_before() {
    let mut h = secured(Anonymous::None);
    let attempt = |h: &mut Harness, peer: &str, secret: &str| {
        let c = h.node.connect(peer, h.now);
        h.send(
            c,
            &[Message::Login(client_login(
                Role::Subscriber,
                "alice",
                secret,
            ))],
        );
        verify_pending(h);
        h.recv(c)
    };
    let got = attempt(&mut h, "10.0.0.1:40000", "alice-secret");
    assert!(matches!(got[..], [Got::Welcome { .. }, ..]), "{got:?}");
    // Four wrong secrets, each from an address of its own: the user is held off.
    for i in 0..4 {
        let got = attempt(&mut h, &format!("10.9.9.{i}:40000"), "guess");
        assert!(refused_login(&got, "wrong secret"), "{got:?}");
    }
    let got = attempt(&mut h, "10.0.0.2:40000", "alice-secret");
    assert!(
        refused_login(&got, "failed logins for user \"alice\""),
        "{got:?}"
    );
    let got = attempt(&mut h, "10.0.0.1:40001", "alice-secret");
    assert!(matches!(got[..], [Got::Welcome { .. }, ..]), "{got:?}");
}

/// A user may speak for the files site of its own name, a checked user: not an
/// anonymous login that gives that name (it could say the site had files it never
/// got, and their senders would stop sending them).
#[test]
fn an_anonymous_login_speaks_for_no_files_site_whatever_name_it_gives() {
    let mut h = secured(Anonymous::Subscribe);
    let c = h.connect_with(client_login(Role::Subscriber, "ldn-1", ""));
    assert!(matches!(h.recv(c)[..], [Got::Welcome { .. }, ..]));
    assert!(!h.node.may_be_site(c, "ldn-1"));
    let (alice, got) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    assert!(matches!(got[..], [Got::Welcome { .. }, ..]), "{got:?}");
    assert!(h.node.may_be_site(alice, "alice"));
    assert!(!h.node.may_be_site(alice, "ldn-1"));
}

/// The files thread keeps `sites_of`'s test after a reload: it says what
/// `may_be_site` says at that time, for users, anonymous logins and the rest.
#[test]
fn the_sites_a_connection_may_speak_for_are_taken_as_they_stand() {
    let mut h = secured(Anonymous::Subscribe);
    let anon = h.connect_with(client_login(Role::Subscriber, "ldn-1", ""));
    h.recv(anon);
    let (alice, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    // Before: alice speaks for herself only.
    let test = h.node.sites_of(alice);
    for site in ["alice", "ldn-1", "ldn-2"] {
        assert_eq!(test(site), h.node.may_be_site(alice, site), "{site}");
    }
    assert!(test("alice") && !test("ldn-2"));
    assert!(
        !h.node.sites_of(anon)("ldn-1"),
        "an anonymous login names itself"
    );
    // Given ldn-2 by a reload; then the test taken before it still says no.
    let text = format!(
        "[users.alice]\ntoken_hash = \"{}\"\nsites = [\"ldn-2\"]\n",
        tickwire_auth::hash_token("alice-secret")
    );
    h.node.set_users(Some(users_file(&text)), h.now);
    let now_test = h.node.sites_of(alice);
    assert!(now_test("ldn-2") && now_test("alice") && !now_test("ldn-1"));
    assert!(!test("ldn-2"));
    assert!(!h.node.sites_of(12_345)("alice"), "no such connection");
}

/// A replay whose history is still being read when a reload takes its service away:
/// when the history comes, the stream is refused, not given the history and joined
/// to the live item.
#[test]
fn a_replay_waiting_for_its_history_is_refused_once_a_reload_takes_its_service_away() {
    let mut h = Harness::with_config(CoreConfig {
        users: Some(users("")),
        journal: PostServices::All,
        journal_updates: true,
        ..CoreConfig::default()
    });
    let p = publish_feed(&mut h);
    h.send(p, &[update(1, 2, &bid_ask(2, 3))]);
    let (sub, _) = login_as(&mut h, Role::Subscriber, "alice", "alice-secret");
    h.send(
        sub,
        &[Message::Replay(tickwire_proto::Replay {
            stream_id: 3,
            from: tickwire_proto::ReplayFrom::Seq(1),
            service: "FEED",
            name: "SYM0",
        })],
    );
    let mut reqs = Vec::new();
    h.node.take_journal_requests(&mut reqs);
    let ticket = reqs
        .iter()
        .find_map(|r| match r.write {
            crate::posts::JournalWrite::History(_) => Some(r.ticket),
            _ => None,
        })
        .expect("a history question");
    // alice loses FEED while the journal reads.
    let fewer = alice_without_feed();
    h.node.set_users(Some(fewer), h.now);
    h.recv(sub);
    let history = tickwire_journal::History {
        messages: vec![tickwire_journal::PastMessage {
            time_ns: 1,
            ..past(2)
        }],
        truncated: false,
    };
    let now = h.now;
    h.node.on_history(ticket, Ok(history), now);
    let got = h.recv(sub);
    assert_eq!(only_closed(&got, 3), Some(code::NOT_ENTITLED), "{got:?}");
    // Nor is it live.
    h.send(p, &[update(1, 3, &bid_ask(3, 4))]);
    assert_eq!(h.recv(sub), vec![]);
}

/// A login whose secret was being checked when a reload changed the user's secret (a
/// leaked password replaced) is refused: it was checked against a secret that no
/// longer holds. One whose user was left as it was goes on.
#[test]
fn a_login_checked_against_a_secret_a_reload_replaced_is_refused() {
    let mut h = secured_feed(Anonymous::None);
    let c = h.connect_with(client_login(Role::Subscriber, "alice", "alice-secret"));
    let mut reqs = Vec::new();
    h.node.take_auth_requests(&mut reqs);
    let old = h.node.config().users.clone().unwrap();
    let results: Vec<_> = reqs
        .iter()
        .map(|r| old.verify(&r.user, &r.secret).map_err(|e| e.to_string()))
        .collect();
    // The operator replaces alice's password while it is checked.
    h.node.set_users(
        Some(users_file(&format!(
            "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [\"FEED\"]\n\
             [users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n",
            hash_token("new-alice-secret"),
            hash_token("feed-secret")
        ))),
        h.now,
    );
    for (r, res) in reqs.iter().zip(results) {
        h.node.on_auth_result(r.conn, r.ticket, res, h.now);
    }
    let got = h.recv(c);
    assert!(
        matches!(got.last(), Some(Got::Status { sid: 0, code: code::LOGIN_REJECTED, text, .. })
            if text.contains("users file changed")),
        "{got:?}"
    );
    assert!(
        !got.iter().any(|g| matches!(g, Got::Welcome { .. })),
        "{got:?}"
    );

    // A reload that leaves alice as she was does not disturb her login.
    let mut h = secured_feed(Anonymous::None);
    let c = h.connect_with(client_login(Role::Subscriber, "alice", "alice-secret"));
    h.node.set_users(Some(users("")), h.now);
    verify_pending(&mut h);
    assert!(matches!(h.recv(c)[..], [Got::Welcome { .. }, ..]));
}

/// The users file again with alice's FEED taken away (she keeps OTHER); the publisher
/// `feed` keeps FEED.
fn alice_without_feed() -> Arc<Users> {
    users_file(&format!(
        "[users.alice]\ntoken_hash = \"{}\"\nsubscribe = [\"OTHER\"]\n\
         [users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n",
        hash_token("alice-secret"),
        hash_token("feed-secret")
    ))
}
