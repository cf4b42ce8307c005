//! The WebSocket JSON API (tr_json2) of a real `tickwire node --ws`, driven by a real
//! WebSocket client (tungstenite) over 127.0.0.1, with `tickwire publish` as the feed.
//! Every read has a timeout; children are killed on drop.

mod common;

use common::*;
use serde_json::{json, Value};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

/// A client and the messages it has received but not looked at yet.
struct Ws {
    ws: WebSocket<TcpStream>,
    queue: std::collections::VecDeque<Value>,
}

fn connect(url: &str, protocol: &str) -> Ws {
    let (ws, resp) = ws_connect(url, protocol);
    let ws = Ws {
        ws,
        queue: Default::default(),
    };
    assert_eq!(
        resp.headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok()),
        Some(protocol),
        "the server echoes the subprotocol"
    );
    ws
}

fn send(ws: &mut Ws, v: Value) {
    ws.ws.send(Message::text(v.to_string())).expect("send");
}

/// The next JSON array the server sends (every frame must be one), within `timeout`.
fn next_frame(ws: &mut Ws, timeout: Duration) -> Option<Vec<Value>> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match ws.ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(&t).expect("valid JSON");
                let Value::Array(msgs) = v else {
                    panic!("every frame is a JSON array, got {t}");
                };
                return Some(msgs);
            }
            Ok(Message::Close(_)) => return None,
            Ok(_) => {}
            Err(e) if ws_read_timed_out(&e) => {}
            Err(e) => panic!("WebSocket read failed: {e}"),
        }
    }
    None
}

/// Messages until one matches `pred` (returned; those before it are dropped),
/// panicking after 10 s.
fn expect(ws: &mut Ws, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if ws.queue.is_empty() {
            if let Some(msgs) = next_frame(ws, Duration::from_millis(500)) {
                ws.queue.extend(msgs);
            }
        }
        while let Some(m) = ws.queue.pop_front() {
            if pred(&m) {
                return m;
            }
            if seen.len() < 10 {
                seen.push(m.to_string());
            }
        }
    }
    panic!("no {what} within 10 s; seen: {seen:#?}");
}

/// Collects every message for `d`.
fn collect(ws: &mut Ws, d: Duration) -> Vec<Value> {
    let deadline = Instant::now() + d;
    let mut out: Vec<Value> = ws.queue.drain(..).collect();
    while Instant::now() < deadline {
        if let Some(msgs) = next_frame(ws, Duration::from_millis(100)) {
            out.extend(msgs);
        }
    }
    out
}

fn login(ws: &mut Ws) -> Value {
    send(
        ws,
        json!({"ID": 1, "Domain": "Login", "Key": {"Name": "alice",
            "Elements": {"ApplicationId": "256", "Position": "127.0.0.1/net"}}}),
    );
    // The login Refresh comes alone in its frame.
    let frame = next_frame(ws, Duration::from_secs(10)).expect("a login answer");
    assert_eq!(frame.len(), 1, "{frame:?}");
    frame[0].clone()
}

#[test]
fn login_items_batch_view_snapshot_and_close_work_like_the_published_api() {
    let (node, url) = Node::start_ws_url(&[]);
    let _feed = start_publisher(&node, "FEED", 20, 2_000, false);
    let mut ws = connect(&url, "tr_json2");

    // A ping before the login is answered.
    send(&mut ws, json!({"Type": "Ping"}));
    expect(&mut ws, "a pong", |m| m["Type"] == "Pong");
    // A request before the login gets a status saying why.
    send(&mut ws, json!({"ID": 2, "Key": {"Name": "SYM0"}}));
    let st = expect(&mut ws, "a status", |m| m["ID"] == 2);
    assert_eq!(st["Type"], "Status");
    assert_eq!(st["State"]["Stream"], "Closed");
    assert!(st["State"]["Text"].as_str().unwrap().contains("login"));

    let refresh = login(&mut ws);
    assert_eq!(refresh["Type"], "Refresh");
    assert_eq!(refresh["Domain"], "Login");
    assert_eq!(refresh["ID"], 1);
    assert_eq!(refresh["Key"]["Name"], "alice");
    assert_eq!(refresh["Key"]["Elements"]["Position"], "127.0.0.1/net");
    assert_eq!(refresh["Key"]["Elements"]["SupportViewRequests"], 1);
    assert!(
        refresh["Key"]["Elements"]["SupportBatchRequests"]
            .as_u64()
            .unwrap()
            & 1
            == 1
    );
    assert_eq!(refresh["State"]["Stream"], "Open");
    assert_eq!(refresh["State"]["Data"], "Ok");
    assert!(refresh["Elements"]["PingTimeout"].as_u64().unwrap() > 0);
    assert!(refresh["Elements"]["MaxMsgSize"].as_u64().unwrap() >= 1024);

    // One item, the service left to the node's default.
    send(&mut ws, json!({"ID": 2, "Key": {"Name": "SYM0"}}));
    let r = expect(&mut ws, "the SYM0 refresh", |m| {
        m["ID"] == 2 && m["Type"] == "Refresh"
    });
    assert_eq!(r["Key"], json!({"Service": "FEED", "Name": "SYM0"}));
    assert_eq!(r["State"]["Stream"], "Open");
    assert_eq!(r["Qos"]["Timeliness"], "Realtime");
    assert!(r["SeqNumber"].is_u64());
    assert!(r["Fields"]["BID"].is_number() && r["Fields"]["ASK"].is_number());
    assert!(r["Fields"]["DSPLY_NAME"].is_string());
    let timact = r["Fields"]["TIMACT"].as_str().expect("a time string");
    assert_eq!(timact.len(), "HH:MM:SS.nnnnnnnnn".len(), "{timact}");
    let u = expect(&mut ws, "an SYM0 update", |m| {
        m["ID"] == 2 && m["Type"] == "Update"
    });
    assert!(["Quote", "Trade"].contains(&u["UpdateType"].as_str().unwrap()));
    assert!(u["SeqNumber"].is_u64());
    assert_eq!(u["Key"]["Name"], "SYM0");
    assert!(u["Fields"].is_object());

    // A batch with a view: a closed/ok status on the batch ID, items on ID+1, ID+2.
    send(
        &mut ws,
        json!({"ID": 10, "Key": {"Name": ["SYM1", "SYM2"], "Service": "FEED"},
               "View": ["BID", "ASK"]}),
    );
    let st = expect(&mut ws, "the batch status", |m| m["ID"] == 10);
    assert_eq!(st["Type"], "Status");
    assert_eq!(st["State"]["Stream"], "Closed");
    assert_eq!(st["State"]["Data"], "Ok");
    for (id, name) in [(11, "SYM1"), (12, "SYM2")] {
        let r = expect(&mut ws, "a batch refresh", |m| {
            m["ID"] == id && m["Type"] == "Refresh"
        });
        assert_eq!(r["Key"]["Name"], name);
        let fields: Vec<&String> = r["Fields"].as_object().unwrap().keys().collect();
        assert_eq!(fields.len(), 2, "view BID, ASK: {fields:?}");
    }
    let u = expect(&mut ws, "a viewed update", |m| {
        (m["ID"] == 11 || m["ID"] == 12) && m["Type"] == "Update"
    });
    for k in u["Fields"].as_object().unwrap().keys() {
        assert!(k == "BID" || k == "ASK", "{k} is outside the view");
    }

    // The node's own figures, as an item.
    send(
        &mut ws,
        json!({"ID": 30, "Key": {"Name": "NODE", "Service": "TICKWIRE"}}),
    );
    let r = expect(&mut ws, "the node item", |m| {
        m["ID"] == 30 && m["Type"] == "Refresh"
    });
    for f in ["TW_CONNS", "TW_SUBS", "TW_PUBS", "TW_UPD_IN", "TW_SERVICES"] {
        assert!(!r["Fields"][f].is_null(), "{f} missing: {r}");
    }
    // The image is at most a second old; the next update counts this client.
    let u = expect(&mut ws, "a node item update", |m| {
        m["ID"] == 30 && m["Type"] == "Update" && m["Fields"]["TW_SUBS"].as_u64().unwrap_or(0) >= 1
    });
    assert!(u["Fields"]["TW_PUBS"].as_u64().unwrap() >= 1, "{u}");
    assert!(
        u["Fields"]["TW_SERVICES"]
            .as_str()
            .unwrap()
            .contains("FEED up"),
        "{u}"
    );
    send(&mut ws, json!({"ID": 30, "Type": "Close"}));

    // A snapshot: one NonStreaming refresh, then nothing on that ID.
    send(
        &mut ws,
        json!({"ID": 20, "Key": {"Name": "SYM3"}, "Streaming": false}),
    );
    let r = expect(&mut ws, "the snapshot", |m| m["ID"] == 20);
    assert_eq!(r["Type"], "Refresh");
    assert_eq!(r["State"]["Stream"], "NonStreaming");

    // Close ID 2 and the batch items together: no more updates on them.
    send(&mut ws, json!({"ID": [2, 11, 12], "Type": "Close"}));
    let st = expect(&mut ws, "the batch close status", |m| {
        m["ID"] == 2 && m["Type"] == "Status"
    });
    assert_eq!(st["State"]["Stream"], "Closed");
    std::thread::sleep(Duration::from_millis(300));
    let after = collect(&mut ws, Duration::from_secs(1));
    assert!(
        !after
            .iter()
            .any(|m| [2, 11, 12, 20].contains(&m["ID"].as_i64().unwrap_or(-1))),
        "closed streams still sent: {after:?}"
    );
}

#[test]
fn bad_input_gets_an_error_or_a_status_and_the_session_goes_on() {
    let (node, url) = Node::start_ws_url(&["--heartbeat-ms", "1000"]);
    let _feed = start_publisher(&node, "FEED", 5, 500, false);
    let mut ws = connect(&url, "rssl.json.v2");
    login(&mut ws);
    let mut other = connect(&url, "tr_json2");
    login(&mut other);
    send(&mut other, json!({"ID": 5, "Key": {"Name": "SYM1"}}));
    expect(&mut other, "the other client's refresh", |m| m["ID"] == 5);

    ws.ws.send(Message::text("{not json")).unwrap();
    let e = expect(&mut ws, "an error", |m| m["Type"] == "Error");
    assert_eq!(e["ID"], 0);
    assert!(e["Text"].as_str().unwrap().contains("JSON"), "{e}");
    assert_eq!(e["Debug"]["Message"], "{not json");

    send(&mut ws, json!({"ID": 3, "Type": "Frobnicate"}));
    let e = expect(&mut ws, "an error", |m| m["Type"] == "Error");
    assert_eq!(e["ID"], 3);
    assert!(e["Text"].as_str().unwrap().contains("Frobnicate"), "{e}");

    send(&mut ws, json!({"Key": {"Name": "SYM0"}}));
    let e = expect(&mut ws, "an error", |m| m["Type"] == "Error");
    assert!(e["Text"].as_str().unwrap().contains("'ID'"), "{e}");

    send(&mut ws, json!({"ID": 4, "Key": {"Name": "NOSUCH"}}));
    let st = expect(&mut ws, "a not-found status", |m| m["ID"] == 4);
    assert_eq!(st["Type"], "Status");
    assert_eq!(st["State"]["Stream"], "Closed");
    assert_eq!(st["State"]["Data"], "Suspect");
    assert_eq!(st["State"]["Code"], "NotFound");

    send(
        &mut ws,
        json!({"ID": 6, "Key": {"Name": "SYM0"}, "View": ["BID", "NO_SUCH_FIELD"]}),
    );
    let e = expect(&mut ws, "an error", |m| m["Type"] == "Error");
    assert_eq!(e["ID"], 6);
    assert!(e["Text"].as_str().unwrap().contains("NO_SUCH_FIELD"), "{e}");

    send(
        &mut ws,
        json!({"ID": 7, "Key": {"Name": "SYM0"}, "Domain": "MarketByOrder"}),
    );
    let st = expect(&mut ws, "a status", |m| m["ID"] == 7);
    assert_eq!(st["State"]["Stream"], "Closed");

    // Larger than MaxMsgSize: refused, the connection continues.
    let big = format!(
        "{{\"ID\":8,\"Key\":{{\"Name\":\"{}\"}}}}",
        "x".repeat(70_000)
    );
    ws.ws.send(Message::text(big)).unwrap();
    let e = expect(&mut ws, "an error", |m| m["Type"] == "Error");
    assert!(e["Text"].as_str().unwrap().contains("MaxMsgSize"), "{e}");

    // An array of requests is accepted; the session still works, and so does the other.
    send(
        &mut ws,
        json!([{"ID": 9, "Key": {"Name": "SYM2"}}, {"Type": "Ping"}]),
    );
    expect(&mut ws, "the SYM2 refresh", |m| {
        m["ID"] == 9 && m["Type"] == "Refresh"
    });
    expect(&mut other, "an update for the other client", |m| {
        m["ID"] == 5 && m["Type"] == "Update"
    });
    // The node pings an idle client within its PingTimeout; answering keeps it open.
    expect(&mut ws, "a ping from the node", |m| m["Type"] == "Ping");
    send(&mut ws, json!({"Type": "Pong"}));

    // A WebSocket request on another path, or without the subprotocol, is refused.
    let host = host_port(&url);
    let wrong = format!("ws://{host}/other");
    let stream = TcpStream::connect(host).unwrap();
    assert!(tungstenite::client(wrong.as_str(), stream).is_err());
    let stream = TcpStream::connect(host).unwrap();
    assert!(tungstenite::client(url.as_str(), stream).is_err());
}

/// A WebSocket client that stops reading is a slow consumer like any other: the node
/// conflates its updates (`ConflationInfo`) while another client keeps every update.
#[test]
fn a_websocket_client_that_stops_reading_gets_conflated_updates() {
    let dir = std::env::temp_dir().join(format!("tickwire-ws-slow-{}.toml", std::process::id()));
    std::fs::write(
        &dir,
        "[limits]\nsocket_send_buffer_bytes = 65536\n[slow_consumer]\nconflate_above_bytes = 65536\n",
    )
    .unwrap();
    let (mut node, url) = Node::start_ws_url(&["--config", dir.to_str().unwrap()]);
    let _feed = start_publisher(&node, "FEED", 100, 10_000, false);
    let names: Vec<String> = (0..100).map(|i| format!("SYM{i}")).collect();
    let open_all = |ws: &mut Ws| {
        login(ws);
        send(
            ws,
            json!({"ID": 100, "Key": {"Name": names, "Service": "FEED"}}),
        );
        for id in 101..=200 {
            expect(ws, "a refresh", |m| m["ID"] == id && m["Type"] == "Refresh");
        }
    };
    let mut slow = connect(&url, "tr_json2");
    // A small receive buffer, so the backlog reaches the node rather than this kernel.
    {
        use std::os::fd::AsRawFd;
        let v: libc::c_int = 32 * 1024;
        // SAFETY: a valid socket and a c_int of the given size.
        unsafe {
            libc::setsockopt(
                slow.ws.get_ref().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    open_all(&mut slow);
    let mut healthy = connect(&url, "tr_json2");
    open_all(&mut healthy);

    // The slow one reads nothing for 2 s (it answers no ping either: 2 s is well within
    // the 15 s PingTimeout); the healthy one reads all the while.
    let until = Instant::now() + Duration::from_secs(2);
    let mut last_seq = std::collections::HashMap::new();
    let mut healthy_updates = 0;
    while Instant::now() < until {
        for m in collect(&mut healthy, Duration::from_millis(200)) {
            if m["Type"] != "Update" {
                continue;
            }
            healthy_updates += 1;
            let id = m["ID"].as_i64().unwrap();
            let seq = m["SeqNumber"].as_u64().unwrap();
            let count = m["ConflationInfo"]["Count"].as_u64().unwrap_or(1);
            if let Some(prev) = last_seq.insert(id, seq) {
                assert_eq!(seq, prev + count, "a gap on ID {id} of the healthy client");
            }
        }
    }
    // Held back by the slow one, it would get next to none; a tenth of the feed's rate
    // leaves room for a busy machine (this client decodes JSON in a debug build).
    assert!(healthy_updates > 2_000, "{healthy_updates} updates in 2 s");
    let conflated = expect(&mut slow, "a conflated update", |m| {
        m["ConflationInfo"]["Count"].as_u64().is_some_and(|n| n > 1)
    });
    assert_eq!(conflated["Type"], "Update");
    let line = node
        .proc
        .wait_for_line("conflating", Duration::from_secs(5));
    assert!(line.contains("ws:256"), "the log names the client: {line}");
    let _ = std::fs::remove_file(&dir);
}

/// A client written the way the published example applications are, on another
/// WebSocket implementation (Python's websocket-client): single requests, then a batch
/// with a view.
#[test]
fn a_python_websocket_client_written_like_the_published_examples_works_unchanged() {
    let (node, url) = Node::start_ws_url(&["--heartbeat-ms", "1000"]);
    let _feed = start_publisher(&node, "FEED", 10, 2_000, false);
    let py = python_with_websocket_client();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/market_price.py");
    let run_client = |extra: &[&str]| -> Value {
        let out = std::process::Command::new(&py)
            .arg(&script)
            .args(["--url", &url])
            .args(extra)
            .output()
            .expect("run the Python client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or("");
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "no summary from the Python client ({e}):\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert!(out.status.success(), "the client did not finish: {v}");
        v
    };
    let v = run_client(&["--items", "SYM0,SYM1", "--updates", "20"]);
    assert_eq!(v["login_state"]["Stream"], "Open");
    assert!(v["ping_timeout"].as_u64().unwrap() >= 3);
    assert_eq!(v["seq_ok"], true, "{v}");
    assert!(v["errors"].as_array().unwrap().is_empty(), "{v}");
    for item in ["SYM0", "SYM1"] {
        let fields = v["refreshes"][item].as_array().expect("a refresh");
        assert!(fields.iter().any(|f| f == "BID"), "{v}");
        assert!(v["updates"][item].as_u64().unwrap() >= 20);
    }
    let v = run_client(&[
        "--items",
        "SYM2,SYM3,SYM4",
        "--batch",
        "--service",
        "FEED",
        "--view",
        "BID,ASK",
        "--updates",
        "10",
    ]);
    // Updates without BID or ASK (trades) are not sent to this view (PROTOCOL 6.10).
    assert_eq!(v["seq_increasing"], true, "{v}");
    assert_eq!(v["update_fields"], json!(["ASK", "BID"]), "{v}");
    let statuses = v["statuses"].as_array().unwrap();
    assert!(
        statuses
            .iter()
            .any(|s| s["Stream"] == "Closed" && s["Data"] == "Ok"),
        "the batch's own status: {v}"
    );
    for item in ["SYM2", "SYM3", "SYM4"] {
        assert_eq!(v["refreshes"][item], json!(["ASK", "BID"]), "{v}");
    }
}

/// A Python application of tests/clients, running: its stdout lines as they come.
fn python_app(script: &str, args: &[&str]) -> ChildLines {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    ChildLines::spawn(
        std::process::Command::new(python_with_websocket_client())
            .arg(&script)
            .args(args)
            .stdin(std::process::Stdio::null()),
        "run the Python application",
    )
}

/// The next stdout line of `app` that is a JSON object satisfying `pred`, within
/// `timeout`.
fn expect_line(
    app: &mut ChildLines,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match app.lines.recv_timeout(left) {
            Ok(line) => {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if pred(&v) {
                        return v;
                    }
                }
                seen.push(line);
            }
            Err(_) => break,
        }
    }
    let stderr = app.kill_for_stderr();
    panic!(
        "no {what} from the application within {timeout:?}; stdout: {seen:#?}\nstderr:\n{stderr}"
    );
}

/// LSEG's own Python library (lseg-data, Apache-2.0, from PyPI), unmodified, pointed at the
/// node as at a deployed distribution server: it logs in, streams a field list of several
/// items, makes a snapshot request, is told when the feed goes away, and is refused a
/// contribution. Its last values must equal the node's cache.
#[test]
fn lsegs_own_python_library_streams_from_the_node_unchanged() {
    let (node, url) = Node::start_ws_url(&["--heartbeat-ms", "1000"]);
    let feed = start_publisher(&node, "FEED", 10, 2_000, false);
    let host = host_port(&url);
    let items = ["SYM0", "SYM1", "SYM2"];
    let fields = ["BID", "ASK", "TRDPRC_1", "ACVOL_1"];
    let mut app = python_app(
        "lseg_data_app.py",
        &[
            "--host",
            host,
            "--items",
            &items.join(","),
            "--fields",
            &fields.join(","),
            "--updates",
            "20",
            "--timeout",
            "30",
        ],
    );
    let streaming = expect_line(&mut app, Duration::from_secs(90), "streaming event", |v| {
        v["event"] == "streaming"
    });
    assert_eq!(streaming["ok"], true, "every item had 20 updates");
    // The feed goes away: the node must tell the library's streams their data is stale.
    drop(feed);
    let v = expect_line(&mut app, Duration::from_secs(90), "summary", |v| {
        v.get("session").is_some()
    });
    let status = wait_timeout(&mut app.child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "the application did not exit cleanly within 30 s ({status:?}): {v}"
    );

    assert_eq!(v["session"], "OpenState.Opened", "{v}");
    assert_eq!(v["stale"], true, "{v}");
    let mut wanted: Vec<&str> = fields.to_vec();
    wanted.sort();
    for item in items {
        assert_eq!(v["refreshes"][item], json!(wanted), "{v}");
        assert!(v["updates"][item].as_u64().unwrap() >= 20, "{v}");
        let stale = &v["statuses"][item][0];
        assert_eq!(stale["Stream"], "Open", "{v}");
        assert_eq!(stale["Data"], "Suspect", "{v}");
    }
    // Only the requested fields, in updates as in refreshes.
    for f in v["update_fields"].as_array().unwrap() {
        assert!(fields.contains(&f.as_str().unwrap()), "{v}");
    }
    let missing = &v["statuses"]["NOPE"][0];
    assert_eq!(missing["Stream"], "Closed", "{v}");
    assert_eq!(missing["Code"], "NotFound", "{v}");

    // The snapshot request: one non-streaming refresh with the two fields asked for.
    let snap = v["snapshot"].as_array().unwrap();
    assert_eq!(snap.len(), 1, "{v}");
    assert_eq!(snap[0]["State"]["Stream"], "NonStreaming", "{v}");
    let mut snap_fields: Vec<_> = snap[0]["Fields"].as_object().unwrap().keys().collect();
    snap_fields.sort();
    assert_eq!(snap_fields, ["ASK", "BID"], "{v}");

    // Posting is refused with a negative acknowledgement the library understands.
    assert_eq!(v["contribute"]["success"], false, "{v}");
    assert_eq!(v["contribute"]["nak_code"], "DeniedBySrc", "{v}");

    // The library's last values are the node's: compare with a binary snapshot.
    let addr = node.addr_str();
    let mut args = vec!["subscribe", "--node", &addr, "--snapshot", "--json"];
    args.extend_from_slice(&items);
    let out = run(&args, Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let mut compared = 0;
    for line in out.stdout.lines() {
        let r: Value = serde_json::from_str(line).expect("one JSON object per line");
        let item = r["item"].as_str().unwrap();
        for f in fields {
            let ours = r["fields"][f].as_f64().expect("a number");
            let theirs = v["last"][item][f].as_f64().unwrap_or(f64::NAN);
            assert_eq!(ours, theirs, "{item} {f}: node {ours}, library {theirs}");
            compared += 1;
        }
    }
    assert_eq!(compared, items.len() * fields.len());
    assert!(
        v["last"]["NOPE"]
            .as_object()
            .unwrap()
            .values()
            .all(Value::is_null),
        "{v}"
    );
}

#[test]
fn a_websocket_client_at_the_bottom_of_a_node_tree_streams_and_reads_the_figures_there() {
    let top = Node::start(&["--name", "top"]);
    let _feed = start_publisher(&top, "FEED", 20, 2_000, false);
    let middle = Node::start(&["--upstream", &top.addr_str(), "--name", "middle"]);
    let (leaf, url) = Node::start_ws_url(&["--upstream", &middle.addr_str(), "--name", "leaf"]);
    wait_for_feed_image(&leaf, "leaf", "SYM0");
    let mut ws = connect(&url, "tr_json2");
    login(&mut ws);
    send(
        &mut ws,
        json!({"ID": 2, "Key": {"Name": "SYM0", "Service": "FEED"}}),
    );
    let r = expect(&mut ws, "the SYM0 refresh", |m| {
        m["ID"] == 2 && m["Type"] == "Refresh"
    });
    assert_eq!(r["State"]["Data"], "Ok");
    assert!(r["Fields"]["BID"].is_number());
    expect(&mut ws, "an SYM0 update", |m| {
        m["ID"] == 2 && m["Type"] == "Update"
    });
    // The dashboard's source, the node's own item: the leaf's, saying where it is fed
    // from and the chain above it.
    send(
        &mut ws,
        json!({"ID": 3, "Key": {"Name": "NODE", "Service": "TICKWIRE"}}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = expect(&mut ws, "the node's figures", |m| {
            m["ID"] == 3 && (m["Type"] == "Refresh" || m["Type"] == "Update")
        });
        let path = m["Fields"]["TW_PATH"].as_str().unwrap_or("");
        let fed_by = m["Fields"]["TW_UPSTREAM"].as_str().unwrap_or("");
        if path.starts_with("leaf#") && path.contains(">middle#") && path.contains(">top#") {
            assert!(fed_by.starts_with("middle ("), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "the chain never showed: {m}");
    }
}

/// The published posting example's way of contributing (off-stream on the login stream
/// with a Key, a Refresh then Updates, then on the item's stream), against a feed that
/// takes posts: every post gets a positive Ack on the ID it came on, and the posted
/// quote is what the item's subscribers see.
#[test]
fn a_python_client_posting_like_the_published_example_gets_positive_acks() {
    let (node, url) = Node::start_ws_url(&["--posts", "FEED"]);
    let _feed = accepting_feed(&node, 3, 0);
    let out = std::process::Command::new(python_with_websocket_client())
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/clients/market_price_posting.py"),
        )
        .args(["--url", &url, "--item", "SYM1", "--updates", "2"])
        .output()
        .expect("run the Python posting client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "no summary from the posting client ({e}):\n{stdout}\n{}\n--- node\n{}",
            String::from_utf8_lossy(&out.stderr),
            node.proc.log()
        )
    });
    assert!(out.status.success(), "{v}");
    assert_eq!(
        v["support_post"], 1,
        "the login says posts are supported: {v}"
    );
    assert!(v["errors"].as_array().unwrap().is_empty(), "{v}");
    let posts = v["posts"].as_array().unwrap();
    let acks = v["acks"].as_array().unwrap();
    assert_eq!(posts.len(), 4, "{v}");
    assert_eq!(acks.len(), posts.len(), "{v}");
    for (p, a) in posts.iter().zip(acks) {
        assert_eq!(a["AckID"], p["PostID"], "answers in order: {v}");
        assert!(a.get("NakCode").is_none(), "a positive Ack: {a}");
        let id = if p["on_stream"] == true { 2 } else { 1 };
        assert_eq!(a["ID"], id, "on the ID it came on: {a}");
    }
    // The item's subscribers saw the last off-stream quote (in its image or as an
    // update), then the on-stream post's bid.
    let bid_ask = v["bid_ask"].as_array().unwrap();
    assert!(bid_ask.contains(&json!([50.02, 50.12])), "{v}");
    assert_eq!(bid_ask.last().unwrap()[0], 49.5, "{v}");
}
