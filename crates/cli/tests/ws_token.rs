//! `POST /getToken` and the `AuthToken` cookie, end to end, with a client that behaves
//! on the wire as the published authenticating tr_json2 examples do
//! (`tests/clients/token_login.py`, Python's requests and websocket-client from
//! target/pyenv): a TLS node with a users file, a publisher of TRI.N, the client getting
//! its token with a password, opening its WebSocket with the cookie and no Login of its
//! own, and receiving the login Refresh and TRI.N's Refresh. Then what must be refused: a wrong password, a forged
//! token, a body over the limit. Loopback only; every wait is bounded; children are
//! killed on drop.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);
const ALICE_PASSWORD: &str = "alice's pass phrase";
const FEED_TOKEN: &str = "feed-token-0123456789";

/// A TLS node whose users are alice (a password; may read FEED) and feed (a token;
/// publishes FEED), with `tickwire publish` of TRI.N as feed, once TRI.N can be had.
struct Setup {
    certs: Certs,
    node: Node,
    /// host:port of the WebSocket/HTTP port.
    hostport: String,
    _feed: Proc,
}

fn setup(tag: &str) -> Setup {
    let certs = Certs::new(&format!("token-{tag}"));
    let users = certs.write(
        "users.toml",
        &format!(
            "[users.alice]\n{}\nsubscribe = [\"FEED\"]\n\n[users.feed]\n{}\npublish = [\"FEED\"]\n",
            hash_line(ALICE_PASSWORD, false),
            hash_line(FEED_TOKEN, true)
        ),
    );
    let (node, url) = certs.start_node(&format!("[security]\nusers_file = {users:?}\n"));
    let hostport = host_port(&url).to_string();
    let items = certs.write("items.txt", "TRI.N\n");
    let (addr, ca) = (node.addr_str(), certs.cert_str());
    let feed = publish_as(
        "feed",
        FEED_TOKEN,
        &addr,
        &[
            "--tls",
            "--ca",
            &ca,
            "--service",
            "FEED",
            "--item-file",
            &items,
            "--rate",
            "20",
        ],
    );
    // TRI.N can be had once a snapshot of it, as alice, answers with a refresh.
    let pw = certs.write("alice.pw", &format!("{ALICE_PASSWORD}\n"));
    let snapshot = || {
        subscribe_over_tls(
            &addr,
            &ca,
            &[
                "--user",
                "alice",
                "--password-file",
                &pw,
                "--snapshot",
                "--json",
                "--timeout",
                "5",
                "TRI.N",
            ],
            T,
        )
    };
    let refreshed = |out: &Output| out.code() == Some(0) && out.stdout.contains("\"refresh\"");
    let out = poll_until(T, Duration::from_millis(200), snapshot, refreshed);
    assert!(
        refreshed(&out),
        "TRI.N never became available: {}\n--- publisher\n{}\n--- node\n{}",
        out.stderr,
        feed.log(),
        node.proc.log()
    );
    Setup {
        certs,
        node,
        hostport,
        _feed: feed,
    }
}

/// A Python program run with the node's certificate trusted by requests and by
/// websocket-client, and its output unbuffered (the example runs until killed).
fn python(s: &Setup) -> Command {
    let mut cmd = Command::new(python_with_websocket_client());
    cmd.env("PYTHONUNBUFFERED", "1")
        .env("REQUESTS_CA_BUNDLE", s.certs.cert())
        .env("WEBSOCKET_CLIENT_CA_BUNDLE", s.certs.cert())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The token-login client, running: what it prints, a JSON document at a time (it
/// pretty-prints every message it sends and receives, one key per line).
struct Example {
    app: ChildLines,
    /// Everything it printed so far.
    printed: Vec<String>,
}

impl Example {
    fn start(s: &Setup, user: &str, password: &str) -> Example {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/token_login.py");
        let (host, port) = s.hostport.rsplit_once(':').unwrap();
        let app = ChildLines::spawn(
            python(s)
                .arg(script)
                .args(["--hostname", host, "--port", port])
                .args(["--auth_hostname", host, "--auth_port", port])
                .args(["--user", user, "--password", password])
                .args(["--app_id", "555", "--position", "127.0.0.1"]),
            "run the token-login client",
        );
        Example {
            app,
            printed: Vec::new(),
        }
    }

    /// The next JSON object printed (alone, or in a printed array) that satisfies
    /// `pred`; panics with the output after `timeout`.
    fn expect(&mut self, timeout: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + timeout;
        let mut doc: Option<String> = None;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Ok(line) = self.app.lines.recv_timeout(left) else {
                break;
            };
            self.printed.push(line.clone());
            // A document starts with `[` or `{` alone on a line and ends with the
            // matching bracket alone on a line (what is inside is indented).
            match (&mut doc, line.as_str()) {
                (None, "[" | "{") => doc = Some(line),
                (None, _) => {}
                (Some(d), end @ ("]" | "}")) => {
                    d.push_str(end);
                    let v: Value = serde_json::from_str(d).expect("printed JSON");
                    doc = None;
                    let found = match &v {
                        Value::Array(msgs) => msgs.iter().find(|m| pred(m)).cloned(),
                        other => pred(other).then(|| other.clone()),
                    };
                    if let Some(found) = found {
                        return found;
                    }
                }
                (Some(d), l) => d.push_str(l),
            }
        }
        self.fail(&format!("no {what} within {timeout:?}"))
    }

    /// Waits for it to exit by itself; its output.
    fn finish(&mut self, timeout: Duration) -> String {
        let Some(status) = wait_timeout(&mut self.app.child, timeout) else {
            self.fail(&format!("still running after {timeout:?}"))
        };
        while let Ok(line) = self.app.lines.recv_timeout(Duration::from_secs(5)) {
            self.printed.push(line);
        }
        assert!(
            status.success(),
            "exit {status:?}\n{}",
            self.printed.join("\n")
        );
        self.printed.join("\n")
    }

    fn fail(&mut self, why: &str) -> ! {
        let stderr = self.app.kill_for_stderr();
        panic!(
            "the token-login client: {why}\n--- stdout\n{}\n--- stderr\n{stderr}",
            self.printed.join("\n")
        );
    }
}

#[test]
fn a_client_that_authenticates_first_gets_a_token_and_streams_with_its_cookie() {
    let s = setup("example");
    let mut app = Example::start(&s, "alice", ALICE_PASSWORD);
    // POST /getToken: the JSON it checks, and the token in the cookie it reads.
    let auth = app.expect(T, "answer to /getToken", |v| v.get("success").is_some());
    assert_eq!(auth["success"], true, "{auth}");
    assert_eq!(auth["user"], "alice", "{auth}");
    // The WebSocket with the cookie: logged in without a Login of its own, on ID -1.
    let login = app.expect(T, "login Refresh", |m| {
        m["Type"] == "Refresh" && m["Domain"] == "Login"
    });
    assert_eq!(login["ID"], -1, "{login}");
    assert_eq!(login["Key"]["Name"], "alice", "{login}");
    assert_eq!(login["Key"]["Elements"]["ApplicationId"], "555", "{login}");
    assert_eq!(login["Key"]["Elements"]["Position"], "127.0.0.1", "{login}");
    assert_eq!(login["State"]["Stream"], "Open", "{login}");
    // Its request for TRI.N (no service: the default, the first alice may read).
    let refresh = app.expect(T, "TRI.N's Refresh", |m| {
        m["Type"] == "Refresh" && m["Key"]["Name"] == "TRI.N"
    });
    assert_eq!(refresh["ID"], 2, "{refresh}");
    assert_eq!(refresh["Key"]["Service"], "FEED", "{refresh}");
    assert_eq!(refresh["State"]["Data"], "Ok", "{refresh}");
    assert!(refresh["Fields"]["BID"].is_number(), "{refresh}");
    app.expect(T, "an update of TRI.N", |m| {
        m["Type"] == "Update" && m["ID"] == 2
    });
    drop(app);
    // The audit log names the token's issue and its login; never the secrets.
    let mut node = s.node;
    node.proc
        .wait_for_line("session token issued: user=\"alice\"", T);
    node.proc.wait_for_line("session_token=true", T);
    let log = node.proc.log();
    assert!(!log.contains(ALICE_PASSWORD), "a password reached the log");
    assert!(log.contains("login accepted user=alice "), "{log}");
}

/// A short Python program with requests and websocket-client (what the example uses),
/// printing one JSON line; its output.
fn python_json(s: &Setup, code: &str, args: &[&str]) -> Value {
    let out = python(s)
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "no JSON line ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

const POST: &str = r#"
import json, sys, requests
url, user, password, pad = sys.argv[1:5]
r = requests.post(url, data={'username': user, 'password': password, 'pad': 'x' * int(pad)})
print(json.dumps({'status': r.status_code, 'json': r.json(), 'cookies': list(r.cookies.keys())}))
"#;

const UPGRADE: &str = r#"
import json, sys, websocket
url, token = sys.argv[1:3]
ws = websocket.create_connection(url, subprotocols=['tr_json2'], cookie='AuthToken=%s;applicationId=555;' % token, timeout=10)
got = []
try:
    while True:
        frame = ws.recv()
        if not frame:
            break
        got.extend(json.loads(frame))
except websocket.WebSocketConnectionClosedException:
    pass
print(json.dumps(got))
"#;

#[test]
fn wrong_passwords_forged_tokens_and_large_bodies_are_refused() {
    let s = setup("refused");
    // The client with a wrong password: told, in the JSON it reads, and it stops.
    let mut app = Example::start(&s, "alice", "not the password");
    let auth = app.expect(T, "answer to /getToken", |v| v.get("success").is_some());
    assert_eq!(auth["success"], false, "{auth}");
    assert!(
        auth["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown user or wrong secret")),
        "{auth}"
    );
    let printed = app.finish(T);
    assert!(printed.contains("Authentication failed"), "{printed}");
    assert!(!printed.contains("Connecting to WebSocket"), "{printed}");

    let url = format!("https://{}/getToken", s.hostport);
    // The same over HTTP: 401 and no cookie; unknown users get the same answer.
    for user in ["alice", "mallory"] {
        let v = python_json(&s, POST, &[&url, user, "not the password", "0"]);
        assert_eq!(v["status"], 401, "{v}");
        assert_eq!(v["json"]["success"], false, "{v}");
        assert_eq!(v["cookies"], serde_json::json!([]), "{v}");
    }
    // A body over the limit (a few KiB): 413, unread.
    let v = python_json(&s, POST, &[&url, "alice", ALICE_PASSWORD, "8000"]);
    assert_eq!(v["status"], 413, "{v}");
    assert_eq!(v["json"]["success"], false, "{v}");

    // A forged token: the cookie login is refused with the login's Status, and the
    // node ends the connection.
    let ws_url = format!("wss://{}/WebSocket", s.hostport);
    let forged = "00".repeat(32);
    let got = python_json(&s, UPGRADE, &[&ws_url, &forged]);
    let msgs = got.as_array().expect("messages");
    assert_eq!(msgs.len(), 1, "{got}");
    let status = &msgs[0];
    assert_eq!(status["Type"], "Status", "{got}");
    assert_eq!(status["Domain"], "Login", "{got}");
    assert_eq!(status["ID"], -1, "{got}");
    assert_eq!(status["State"]["Stream"], "Closed", "{got}");
    assert_eq!(status["State"]["Code"], "NotEntitled", "{got}");
    assert!(
        status["State"]["Text"]
            .as_str()
            .is_some_and(|t| t.contains("unknown or expired session token")),
        "{got}"
    );
    // The audit log, in order: the refused token requests, then the refused login.
    let mut node = s.node;
    node.proc
        .wait_for_line("session token refused: user=\"mallory\"", T);
    node.proc.wait_for_line("login refused user= role=", T);
}
