//! Identities and entitlements end to end: a node with a users file, `tickwire publish`
//! and `subscribe` logging in with `--user` and a secret from `TICKWIRE_PASSWORD` or
//! `--password-file`, an impostor refused, permissions shrunk by a reload (SIGHUP).
//! Everything on 127.0.0.1, every wait bounded.

mod common;

use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

/// Files in a directory of their own, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tickwire-sec-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
    fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write file");
        p.to_str().expect("utf-8 path").to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn users_file(alice_services: &str, alice: &str, feed: &str) -> String {
    format!(
        "[users.alice]\n{alice}\nsubscribe = [{alice_services}]\n\n\
         [users.feed]\n{feed}\npublish = [\"FEED\"]\n"
    )
}

struct Secured {
    dir: TempDir,
    node: Node,
    users: String,
    alice_pw: String,
    feed_token: String,
}

fn secured(name: &str) -> Secured {
    let dir = TempDir::new(name);
    let alice_pw = hash_line("alice pass", false);
    assert!(
        alice_pw.starts_with("password_hash = \"$argon2id$"),
        "{alice_pw}"
    );
    let feed_token = hash_line("feed-token-0123456789", true);
    assert!(
        feed_token.starts_with("token_hash = \"sha256:"),
        "{feed_token}"
    );
    let users = dir.write(
        "users.toml",
        &users_file("\"FEED\"", &alice_pw, &feed_token),
    );
    let cfg = dir.write(
        "node.toml",
        &format!("[security]\nusers_file = \"{users}\"\nlogin_token = \"old-shared\"\n"),
    );
    let node = Node::start(&["--config", &cfg]);
    Secured {
        dir,
        node,
        users,
        alice_pw,
        feed_token,
    }
}

/// `tickwire publish` as user feed, its token from TICKWIRE_PASSWORD; waits until its
/// items can be had.
fn start_feed(s: &Secured) -> Proc {
    let addr = s.node.addr_str();
    let p = publish_as(
        "feed",
        "feed-token-0123456789",
        &addr,
        &["--service", "FEED", "--items", "5", "--rate", "50"],
    );
    let pw = s.dir.write("alice.pw", "alice pass\n");
    let refreshed = |out: &Output| out.code() == Some(0) && out.stdout.contains("\"refresh\"");
    let out = poll_until(
        T,
        Duration::from_millis(200),
        || snapshot_as(s, "alice", &pw, "SYM4"),
        refreshed,
    );
    assert!(
        refreshed(&out),
        "the feed never became available: {}\n{}",
        out.stderr,
        s.node.proc.log()
    );
    p
}

fn snapshot_as(s: &Secured, user: &str, password_file: &str, item: &str) -> Output {
    run(
        &[
            "subscribe",
            "--node",
            &s.node.addr_str(),
            "--json",
            "--snapshot",
            "--user",
            user,
            "--password-file",
            password_file,
            item,
        ],
        T,
    )
}

#[test]
fn users_log_in_with_their_secret_and_get_only_what_they_are_entitled_to() {
    let mut s = secured("entitled");
    let _feed = start_feed(&s);
    let good = s.dir.write("good.pw", "alice pass\n");
    let bad = s.dir.write("bad.pw", "alice guess\n");

    let out = snapshot_as(&s, "alice", &good, "SYM0");
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("\"refresh\""), "{}", out.stdout);

    let out = snapshot_as(&s, "alice", &bad, "SYM0");
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("unknown user or wrong secret"),
        "{}",
        out.stderr
    );
    // The shared token of old no longer opens the node once users exist.
    let shared = s.dir.write("shared.pw", "old-shared\n");
    let out = snapshot_as(&s, "mallory", &shared, "SYM0");
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("login rejected"), "{}", out.stderr);

    // alice may not read the node's own service.
    let out = run(
        &[
            "subscribe",
            "--node",
            &s.node.addr_str(),
            "--json",
            "--snapshot",
            "--service",
            "TICKWIRE",
            "--user",
            "alice",
            "--password-file",
            &good,
            "NODE",
        ],
        T,
    );
    assert!(
        out.stdout
            .contains("may not subscribe to service \\\"TICKWIRE\\\""),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    // The node's stderr is read by a thread: wait for the lines (in their order).
    s.node.proc.wait_for_line("login accepted user=alice ", T);
    s.node.proc.wait_for_line("login refused user=alice ", T);
    assert!(
        !s.node.proc.log().contains("alice pass"),
        "a secret reached the log"
    );
}

/// A name in a login is the peer's: a newline in it (here with a made-up record
/// behind it, a terminal escape and an 8-bit CSI), or a `key=value` in it, stays inside
/// its record, quoted and escaped, and makes no log line or field of the peer's making.
#[test]
fn a_login_name_cannot_write_log_lines_or_fields_of_its_own() {
    let mut s = secured("log-forging");
    let forged = "x\n2026-11-30T21:14:00.2Z  INFO audit: login accepted user=root\x1b[2J\u{9b}31m";
    for name in [forged, "bob role=Publisher peer=10.9.9.9:1"] {
        let out = Proc::spawn_with(
            &[
                "subscribe",
                "--node",
                &s.node.addr_str(),
                "--user",
                name,
                "--service",
                "FEED",
                "SYM0",
            ],
            |cmd| {
                cmd.env("TICKWIRE_PASSWORD", "wrong");
            },
        );
        // Quoted as Rust quotes (a long one cut at 64 characters).
        let quoted = format!("{:?}", name.chars().take(20).collect::<String>());
        let start = quoted.trim_end_matches('"');
        s.node
            .proc
            .wait_for_line(&format!("login refused user={start}"), T);
        drop(out);
    }
    let log = s.node.proc.log();
    assert!(
        log.lines()
            .all(|l| !l.starts_with("2026-11-30T21:14:00.2Z")),
        "{log}"
    );
    assert!(!log.contains('\x1b') && !log.contains('\u{9b}'), "{log}");
    assert!(!log.contains("user=bob "), "{log}");
}

#[test]
fn nobody_but_the_entitled_publisher_can_take_a_service_over() {
    let s = secured("impostor");
    let mut feed = start_feed(&s);
    // The real publisher goes away: its service is free.
    feed.kill();
    let addr = s.node.addr_str();
    // alice, a real user, tries to publish FEED with her own password.
    let alice_pw = s.dir.write("alice.pw", "alice pass\n");
    let publish_feed_as = |login: &[&str]| {
        let mut args = vec![
            "publish",
            "--node",
            &addr,
            "--service",
            "FEED",
            "--items",
            "5",
        ];
        args.extend_from_slice(login);
        Proc::spawn(&args)
    };
    let mut impostor = publish_feed_as(&["--user", "alice", "--password-file", &alice_pw]);
    s.node.proc.log(); // (drained by its thread)
    let deadline = Instant::now() + T;
    while !s
        .node
        .proc
        .log()
        .contains("may not publish service \"FEED\"")
    {
        assert!(
            Instant::now() < deadline,
            "the impostor was not refused\n{}\n--- impostor\n{}",
            s.node.proc.log(),
            impostor.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // An anonymous one is refused at login.
    let mut anon = publish_feed_as(&["--user", "x"]);
    // Its stderr is read by a thread: wait for the line, not only for the exit.
    anon.wait_for_line("a secret is required", T);
    let ended = anon.wait_exit(T);
    assert!(ended.is_some_and(|s| !s.success()), "{}", anon.log());
    // The real one comes back and is served.
    let _back = start_feed(&s);
    let _ = impostor.kill();
}

#[test]
fn a_reload_shrinks_permissions_and_closes_what_was_lost() {
    let s = secured("reload");
    let _feed = start_feed(&s);
    // alice watches SYM0 (the client library, with her password).
    let mut opts = tickwire_client::ConnectOptions::new(s.node.addr_str());
    opts.user = "alice".into();
    opts.token = "alice pass".into();
    let mut watcher = tickwire_client::Subscriber::connect(opts).expect("alice logs in");
    watcher
        .subscribe("FEED", "SYM0", tickwire_client::RequestOptions::default())
        .expect("subscribe");
    expect_event(&mut watcher, T, "SYM0's image", |e| {
        matches!(e, tickwire_client::Event::Refresh { .. })
    });
    // FEED taken away from alice, then SIGHUP.
    std::fs::write(
        &s.users,
        users_file("\"OTHER\"", &s.alice_pw, &s.feed_token),
    )
    .unwrap();
    s.node.proc.signal(libc::SIGHUP);
    let mut node = s.node;
    let line = node.proc.wait_for_line("permission withdrawn", T);
    assert!(
        line.contains("user \"alice\" may not subscribe to service \"FEED\""),
        "{line}"
    );
    let log = node.proc.log();
    assert!(
        log.contains("users file reloaded: user \"alice\" entitlements changed"),
        "{log}"
    );
    // alice is told, and her session stays (a stream was closed, not the connection).
    let status = expect_event(&mut watcher, T, "the stream's closing status", |e| {
        matches!(e, tickwire_client::Event::Status { state, .. }
            if state.code == tickwire_proto::code::NOT_ENTITLED)
    });
    assert!(
        format!("{status:?}").contains("may not subscribe"),
        "{status:?}"
    );
    assert!(watcher.is_connected());
    assert!(node.is_running());
    // A users file that does not load leaves the previous one in force.
    std::fs::write(&s.users, "[users.alice]\nnonsense = 1\n").unwrap();
    node.proc.signal(libc::SIGHUP);
    let line = node.proc.wait_for_line("users file not reloaded", T);
    assert!(line.contains("nonsense"), "{line}");
}

/// A node with a login token and no users file says so at start, not that anyone who
/// reaches it may publish and subscribe (which sent operators looking for a hole).
#[test]
fn a_node_with_a_login_token_does_not_say_it_is_open() {
    let dir = TempDir::new("open-log");
    let cfg = dir.write("node.toml", "[security]\nlogin_token = \"hunter2\"\n");
    // Said before the node listens: in its log once it has started.
    let log = Node::start(&["--config", &cfg]).proc.log();
    let line = log
        .lines()
        .find(|l| l.contains("no users file"))
        .unwrap_or("");
    assert!(line.contains("login_token"), "{log}");
    assert!(!line.contains("the node is open"), "{log}");
}

#[test]
fn print_config_never_shows_a_secret() {
    let dir = TempDir::new("print");
    let cfg = dir.write("node.toml", "[security]\nlogin_token = \"hunter2\"\n");
    let out = run(&["node", "--config", &cfg, "--print-config"], T);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    assert!(
        out.stdout.contains("login_token = \"(set, not shown)\""),
        "{}",
        out.stdout
    );
}

type Ws = tungstenite::WebSocket<std::net::TcpStream>;

/// A tr_json2 WebSocket client of the node's WebSocket API at `ws_addr`.
fn ws_client(ws_addr: &str) -> Ws {
    ws_connect(&format!("ws://{ws_addr}/WebSocket"), "tr_json2").0
}

fn ws_send(ws: &mut Ws, v: &serde_json::Value) {
    ws.send(tungstenite::Message::text(v.to_string()))
        .expect("send");
}

/// Reads one frame's messages into `got` (none if the read timed out); an error is the
/// connection's end.
fn ws_read_into(ws: &mut Ws, got: &mut Vec<serde_json::Value>) -> Result<(), tungstenite::Error> {
    match ws.read() {
        Ok(tungstenite::Message::Text(t)) => {
            let v: serde_json::Value = serde_json::from_str(&t).expect("JSON");
            got.extend(v.as_array().cloned().unwrap_or_default());
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) if ws_read_timed_out(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// One WebSocket JSON session: sends `msgs`, then collects what arrives until `done`
/// says so or the node closes (bounded).
fn ws_session(
    ws_addr: &str,
    msgs: &[serde_json::Value],
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut ws = ws_client(ws_addr);
    for m in msgs {
        ws_send(&mut ws, m);
    }
    let deadline = Instant::now() + T;
    let mut got = Vec::new();
    while Instant::now() < deadline && !done(&got) {
        if ws_read_into(&mut ws, &mut got).is_err() {
            break; // closed by the node
        }
    }
    got
}

#[test]
fn websocket_clients_log_in_with_an_authentication_token_as_the_published_api_does() {
    let s = secured("ws-token");
    let cfg = s.dir.write(
        "node-ws.toml",
        &format!("[security]\nusers_file = \"{}\"\n", s.users),
    );
    let (_node, ws_addr) = Node::start_ws(&["--config", &cfg]);
    let login = |name: &str, token: &str| {
        serde_json::json!({"ID": 1, "Domain": "Login", "Key": {"Name": name,
            "Elements": {"ApplicationId": "256", "Position": "127.0.0.1",
                         "AuthenticationToken": token}}})
    };
    let login_answer =
        |got: &[serde_json::Value]| got.iter().any(|m| m["ID"] == 1 && m["Domain"] == "Login");
    // The feed user's token (a token, as the published examples send one).
    let got = ws_session(
        &ws_addr,
        &[login("feed", "feed-token-0123456789")],
        login_answer,
    );
    let answer = got.iter().find(|m| m["ID"] == 1).expect("a login answer");
    assert_eq!(answer["Type"], "Refresh", "{got:?}");
    assert_eq!(answer["State"]["Stream"], "Open", "{got:?}");
    // A wrong token: refused with the reason, the connection closed.
    let got = ws_session(&ws_addr, &[login("feed", "stolen")], login_answer);
    let answer = got.iter().find(|m| m["ID"] == 1).expect("a login answer");
    assert_eq!(answer["Type"], "Status", "{got:?}");
    assert_eq!(answer["State"]["Stream"], "Closed", "{got:?}");
    assert!(
        answer["State"]["Text"]
            .as_str()
            .is_some_and(|t| t.contains("unknown user or wrong secret")),
        "{got:?}"
    );
    // alice's password in the login's Password element.
    let got = ws_session(
        &ws_addr,
        &[
            serde_json::json!({"ID": 1, "Domain": "Login", "Key": {"Name": "alice",
            "Elements": {"Password": "alice pass"}}}),
        ],
        login_answer,
    );
    assert!(
        got.iter().any(|m| m["ID"] == 1 && m["Type"] == "Refresh"),
        "{got:?}"
    );
}

/// The directory shows a user only the services they may read: over the node's
/// protocol (the client library's view of it) and over the WebSocket API, whose
/// request without a service takes the first service in the directory, so the first
/// one the user may read.
#[test]
fn a_user_sees_only_the_services_they_may_read_in_the_directory() {
    use tickwire_client::{ConnectOptions, Event, RequestOptions, Subscriber};
    let dir = TempDir::new("directory");
    let users = dir.write(
        "users.toml",
        &format!(
            "[users.alice]\n{}\nsubscribe = [\"FEED\"]\n\n[users.bob]\n{}\nsubscribe = [\"*\"]\n\n\
             [users.feed]\n{}\npublish = [\"ALPHA\", \"FEED\"]\n",
            hash_line("alice pass", false),
            hash_line("bob pass", false),
            hash_line("feed-token-0123456789", true)
        ),
    );
    let cfg = dir.write(
        "node.toml",
        &format!("[security]\nusers_file = {users:?}\n"),
    );
    let (node, ws_addr) = Node::start_ws(&["--config", &cfg]);
    let login = |user: &str| {
        let mut opts = ConnectOptions::new(node.addr_str());
        opts.user = user.into();
        opts.token = format!("{user} pass");
        opts.reconnect = false;
        Subscriber::connect(opts).expect("log in")
    };
    // ALPHA is published first, so it comes first in the directory; bob, who may read
    // everything, waits for each service's first item.
    let mut bob = login("bob");
    let mut feeds = Vec::new();
    for service in ["ALPHA", "FEED"] {
        feeds.push(publish_as(
            "feed",
            "feed-token-0123456789",
            &node.addr_str(),
            &["--service", service, "--items", "2", "--rate", "20"],
        ));
        let deadline = Instant::now() + T;
        loop {
            bob.subscribe(
                service,
                "SYM0",
                RequestOptions {
                    snapshot: true,
                    view: None,
                    ..Default::default()
                },
            )
            .expect("subscribe");
            let e = expect_event(&mut bob, T, "an answer", |e| {
                matches!(e, Event::Refresh { .. } | Event::Status { .. })
            });
            if matches!(e, Event::Refresh { .. }) {
                break;
            }
            assert!(Instant::now() < deadline, "{service} never came: {e:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let services = |sub: &Subscriber| sub.directory().keys().cloned().collect::<Vec<_>>();
    assert_eq!(services(&bob), ["ALPHA", "FEED", "TICKWIRE"]);

    // alice's directory: FEED only.
    let mut alice = login("alice");
    alice
        .subscribe("FEED", "SYM0", RequestOptions::default())
        .expect("subscribe");
    expect_event(&mut alice, T, "FEED's SYM0", |e| {
        matches!(e, Event::Refresh { .. })
    });
    assert_eq!(services(&alice), ["FEED"]);

    // Over the WebSocket API: a request without a service is FEED's for alice (ALPHA,
    // first in the node's directory, is not in hers). Sent once the login Refresh is
    // in, as applications do: the directory comes with the login.
    let mut ws = ws_client(&ws_addr);
    let read_until = |ws: &mut Ws, id: i64| {
        let deadline = Instant::now() + T;
        let mut got: Vec<serde_json::Value> = Vec::new();
        while !got.iter().any(|m| m["ID"] == id) {
            assert!(Instant::now() < deadline, "no answer on ID {id}: {got:?}");
            if let Err(e) = ws_read_into(ws, &mut got) {
                panic!("WebSocket: {e}; got {got:?}");
            }
        }
        got.into_iter().find(|m| m["ID"] == id).unwrap()
    };
    ws_send(
        &mut ws,
        &serde_json::json!({"ID": 1, "Domain": "Login", "Key": {"Name": "alice",
            "Elements": {"Password": "alice pass"}}}),
    );
    let login = read_until(&mut ws, 1);
    assert_eq!(login["Type"], "Refresh", "{login}");
    ws_send(
        &mut ws,
        &serde_json::json!({"ID": 2, "Key": {"Name": "SYM0"}}),
    );
    let answer = read_until(&mut ws, 2);
    assert_eq!(answer["Type"], "Refresh", "{answer}");
    assert_eq!(answer["Key"]["Service"], "FEED", "{answer}");
}

/// A login as `user` with `secret`, in process (no reconnect): Ok, or the refusal.
fn login_as(addr: std::net::SocketAddr, user: &str, secret: &str) -> Result<(), String> {
    let mut opts = tickwire_client::ConnectOptions::new(addr.to_string());
    opts.application = "security-tests".into();
    opts.user = user.into();
    opts.token = secret.into();
    opts.reconnect = false;
    opts.connect_timeout = Duration::from_secs(10);
    tickwire_client::Subscriber::connect(opts)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Wrong passwords in a row: the first few (three are free) are checked and
/// refused; then each further attempt from the address is refused unchecked, for a
/// delay that grows with each failure, even with the right password; after the delay the right
/// password gets in, and clears the count. (Before, 61 wrong passwords a second were
/// each checked.)
#[test]
fn failed_logins_are_throttled_per_address_with_a_growing_delay() {
    let s = secured("throttle");
    let addr = s.node.addr;
    let mut checked = 0;
    let mut held_off = Vec::new();
    let started = Instant::now();
    while held_off.len() < 3 {
        assert!(
            started.elapsed() < T,
            "never held off: {checked} checked\n{}",
            s.node.proc.log()
        );
        match login_as(addr, "alice", "wrong pass") {
            Ok(()) => panic!("a wrong password got in"),
            Err(e) if e.contains("try again in") => held_off.push(e),
            Err(e) => {
                assert!(e.contains("unknown user or wrong secret"), "{e}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 4, "{checked} checked before {held_off:?}");
    assert!(
        held_off[0].contains("failed logins from 127.0.0.1 lately"),
        "{held_off:?}"
    );
    // The right password is held off too while the delay runs...
    let refused = login_as(addr, "alice", "alice pass");
    let wait_ms: u64 = match &refused {
        Err(e) if e.contains("try again in") => e
            .split("try again in ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .expect("the delay in the refusal"),
        Err(e) => panic!("{e}"),
        // The delay may just have passed.
        Ok(()) => 0,
    };
    // ...and gets in once it has passed (a delay of at most 30 s, said in the
    // refusal; waited for as said, then polled, bounded).
    assert!(wait_ms <= 30_000, "{refused:?}");
    std::thread::sleep(Duration::from_millis(wait_ms));
    let deadline = Instant::now() + T;
    loop {
        match login_as(addr, "alice", "alice pass") {
            Ok(()) => break,
            Err(e) => {
                assert!(e.contains("try again in"), "{e}");
                assert!(Instant::now() < deadline, "{e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    // A success cleared the count: a wrong password is checked again.
    let e = login_as(addr, "alice", "wrong pass").unwrap_err();
    assert!(e.contains("unknown user or wrong secret"), "{e}");
}

/// A 65,000-byte user name is refused with its length, and the refusal logs a line of
/// bounded length (before, each such refusal wrote about 195 KB of log).
#[test]
fn a_huge_user_name_is_refused_and_logged_cut() {
    let s = secured("long-name");
    let before = s.node.proc.log().len();
    let name = "n".repeat(65_000);
    let e = login_as(s.node.addr, &name, "whatever").unwrap_err();
    assert!(
        e.contains("longer than 256 bytes") && e.contains("(65000 bytes)"),
        "{}",
        &e[..e.len().min(500)]
    );
    assert!(e.len() < 1_000, "the refusal is {} bytes", e.len());
    // The node says so in its log, briefly (waited for, bounded).
    let deadline = Instant::now() + T;
    while !s.node.proc.log()[before..].contains("(65000 bytes)") {
        assert!(Instant::now() < deadline, "{}", s.node.proc.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let logged = s.node.proc.log().len() - before;
    assert!(logged < 2_000, "{logged} bytes of log for one refusal");
}

/// A publisher without the right to publish its service is refused, and stops with
/// the reason (exit status 1) rather than connect and send its images again and again.
#[test]
fn a_publisher_refused_its_service_for_lack_of_rights_stops_with_the_reason() {
    let s = secured("no-rights");
    // alice may subscribe to FEED, not publish it.
    let pw = s.dir.write("alice-pub.pw", "alice pass\n");
    let out = run(
        &[
            "publish",
            "--node",
            &s.node.addr_str(),
            "--service",
            "FEED",
            "--items",
            "3",
            "--rate",
            "10",
            "--user",
            "alice",
            "--password-file",
            &pw,
        ],
        T,
    );
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("FEED"), "{}", out.stderr);
    let mut s = s;
    s.node.proc.wait_for_line("publisher refused", T);
    let refusals = s.node.proc.log().matches("publisher refused").count();
    assert_eq!(refusals, 1, "{}", s.node.proc.log());
}

/// A downstream node's link logs in as a user who may read FEED but not the upstream's
/// own TICKWIRE service, where a node says which nodes feed it: the link still serves
/// FEED, and its node says that a loop through this link could not be seen.
#[test]
fn a_node_link_that_may_not_read_tickwire_says_loops_through_it_cannot_be_seen() {
    let s = secured("link-rights");
    let _feed = start_feed(&s);
    let pw = s.dir.write("link.pw", "alice pass\n");
    let cfg = s.dir.write(
        "edge.toml",
        &format!(
            "[upstream]\nnodes = [\"{}\"]\nuser = \"alice\"\npassword_file = \"{pw}\"\n",
            s.node.addr_str()
        ),
    );
    let mut edge = Node::start(&["--config", &cfg, "--name", "edge"]);
    edge.proc
        .wait_for_line("does not let user \"alice\" read its TICKWIRE service", T);
    let out = poll_until(
        T,
        Duration::from_millis(200),
        || {
            run(
                &[
                    "subscribe",
                    "--node",
                    &edge.addr_str(),
                    "--service",
                    "FEED",
                    "--snapshot",
                    "--json",
                    "SYM1",
                ],
                T,
            )
        },
        |out| out.code() == Some(0),
    );
    assert!(
        out.stdout.contains("\"refresh\""),
        "{}\n{}",
        out.stderr,
        edge.proc.log()
    );
}
