//! The dashboard served by `tickwire node --ws`, in a real headless browser: Debian's
//! chromium driven through chromedriver (WebDriver over HTTP on 127.0.0.1; .ci/test
//! installs both). The page connects to the node's WebSocket API, shows an item's
//! refresh, then its updates.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// chromedriver on a free port, killed on drop.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver is needed for this test (.ci/test installs Debian's chromium-driver)",
            );
        let d = Driver { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// A new headless chromium session, showing `url`.
    fn open(&self, url: &str) -> Session<'_> {
        let session = self.call(
            "POST",
            "/session",
            Some(
                json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
                    "binary": chromium_binary(),
                    "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
                }}}}),
            ),
        );
        let id = session["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        self.call(
            "POST",
            &format!("/session/{id}/url"),
            Some(json!({"url": url})),
        );
        Session { driver: self, id }
    }

    /// One WebDriver call (HTTP/1.1, Connection: close); the response's `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect chromedriver");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        s.write_all(req.as_bytes()).expect("send");
        // Read the head, then exactly Content-Length bytes (the driver may keep the
        // connection open).
        let mut resp = Vec::new();
        let mut buf = [0u8; 8192];
        let (head_end, length) = loop {
            let n = s.read(&mut buf).expect("read from chromedriver");
            assert!(n > 0, "chromedriver closed the connection");
            resp.extend_from_slice(&buf[..n]);
            if let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&resp[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .expect("a Content-Length");
                break (end + 4, length);
            }
        };
        while resp.len() < head_end + length {
            let n = s.read(&mut buf).expect("read from chromedriver");
            assert!(n > 0, "chromedriver closed the connection");
            resp.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&resp);
        let json = &text[head_end..];
        let v: Value = serde_json::from_str(json)
            .unwrap_or_else(|e| panic!("chromedriver answered {text:?} ({e})"));
        assert!(
            v["value"]["error"].is_null(),
            "WebDriver {method} {path} failed: {v}"
        );
        v["value"].clone()
    }
}

/// A chromium session of a [`Driver`], on a page.
struct Session<'d> {
    driver: &'d Driver,
    id: String,
}

impl Session<'_> {
    /// What `script` returns, run in the page.
    fn script(&self, script: &str) -> Value {
        self.driver.call(
            "POST",
            &format!("/session/{}/execute/sync", self.id),
            Some(json!({"script": script, "args": []})),
        )
    }

    /// `GET /session/ID/WHAT`'s value.
    fn get(&self, what: &str) -> Value {
        self.driver
            .call("GET", &format!("/session/{}/{what}", self.id), None)
    }

    /// The id of the element `css` selects.
    fn element(&self, css: &str) -> String {
        let el = self.driver.call(
            "POST",
            &format!("/session/{}/element", self.id),
            Some(json!({"using": "css selector", "value": css})),
        );
        el.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {el}"))
            .to_string()
    }

    /// Types `text` into the element `css` selects, key by key, as a user would.
    fn type_into(&self, css: &str, text: &str) {
        let eid = self.element(css);
        self.driver.call(
            "POST",
            &format!("/session/{}/element/{eid}/value", self.id),
            Some(json!({"text": text})),
        );
    }

    /// Ends the session (the browser goes).
    fn close(self) {
        self.driver
            .call("DELETE", &format!("/session/{}", self.id), None);
    }
}

/// Debian's chromium binary.
fn chromium_binary() -> String {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("chromium is needed for this test (.ci/test installs Debian's chromium)")
        .to_string()
}

#[test]
fn the_dashboard_shows_refreshes_then_updates_in_a_real_browser() {
    let (node, host) = Node::start_ws(&[]);
    let _feed = start_publisher(&node, "FEED", 2, 400, false);
    let driver = Driver::start();
    let page = driver.open(&format!("http://{host}/?items=SYM0,SYM1"));
    // The page's rows, as the browser shows them.
    let read_rows = || {
        page.script("return [...document.querySelectorAll('#board tr')].map(tr => ({item: tr.dataset.item, refreshed: tr.dataset.refreshed || null, firstBid: tr.dataset.firstBid || null, bid: tr.dataset.bid || null, updates: Number(tr.dataset.updates), bidCell: tr.querySelector('[data-field=bid]').textContent, prices: ['bid','ask','last'].map(f => tr.querySelector('[data-field=' + f + ']').textContent), spark: [...tr.querySelectorAll('svg.spark polyline')].map(l => (l.getAttribute('points') || '').split(' ').filter(Boolean).length)}))")
    };
    // The node panel: the node's own item (updated once a second), over the same API.
    let read_node_panel = || {
        page.script("return {services: document.getElementById('n_services').dataset.value || '', subs: Number(document.getElementById('n_conns').dataset.subs || 0), latency: document.getElementById('lat').textContent, chart: [...document.querySelectorAll('#nodechart polyline')].map(l => (l.getAttribute('points') || '').split(' ').filter(Boolean).length), icon: (document.querySelector('link[rel=icon]') || {}).href || '', yaxis: document.getElementById('n_yrates').children[0].textContent, slowWho: document.getElementById('n_slow_who').textContent, serviceOptions: [...document.querySelectorAll('#service-list option')].map(o => o.value)}")
    };
    let read = || (read_rows(), read_node_panel());
    let done = |(rows, node_panel): &(Value, Value)| {
        let node_done = node_panel["services"]
            .as_str()
            .is_some_and(|s| s.contains("FEED up"))
            && node_panel["subs"].as_u64().unwrap_or(0) >= 1
            && node_panel["latency"]
                .as_str()
                .is_some_and(|l| l.ends_with(" ms"))
            // Three figures (three seconds) make the node chart's lines.
            && node_panel["chart"][0].as_u64().unwrap_or(0) >= 3;
        let done = rows.as_array().is_some_and(|r| {
            r.len() == 2
                && r.iter().all(|row| {
                    row["refreshed"] == "1"
                        && row["updates"].as_u64().unwrap_or(0) > 20
                        && row["bid"].is_string()
                        && row["bid"] != row["firstBid"]
                        && row["spark"][0].as_u64().unwrap_or(0) >= 3
                })
        });
        done && node_done
    };
    let (rows, node_panel) = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(250),
        read,
        done,
    );
    let title = page.get("title");
    // The charts as the browser drew them: the first row's (bid green, ask red) and
    // the node's (updates in, blue).
    let shot = |css: &str| -> Vec<[u8; 3]> {
        let eid = page.element(css);
        let b64 = page.get(&format!("element/{eid}/screenshot"));
        png_pixels(b64.as_str().expect("a base64 PNG"))
    };
    let spark = shot("#board tr svg.spark");
    let node_chart = shot("#nodechart");
    // The item picker: typing offers the node's items (GET /items) to pick from.
    page.type_into("#items", "SYM");
    let offered = poll_until(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            page.script(
                "return [...document.querySelectorAll('#item-list option')].map(o => o.value)",
            )
        },
        |offered| offered.as_array().is_some_and(|o| o.len() >= 2),
    );
    page.close();
    assert_eq!(offered, json!(["SYM0", "SYM1"]), "the item picker's names");
    // The node chart's axis is labelled (updates/s flow, so its top is above 0); the
    // subscribers behind are named (none here); the services are offered to pick.
    let yaxis = node_panel["yaxis"].as_str().unwrap_or("");
    assert!(!yaxis.is_empty() && yaxis != "0", "{node_panel}");
    assert_eq!(node_panel["slowWho"], "none", "{node_panel}");
    assert_eq!(
        node_panel["serviceOptions"],
        json!(["FEED"]),
        "{node_panel}"
    );
    // --up #2ecc71, --down #ff5c5c, --accent #4aa3ff (antialiased edges aside).
    let near = |px: &[[u8; 3]], c: [u8; 3]| {
        px.iter()
            .filter(|p| (0..3).all(|i| p[i].abs_diff(c[i]) <= 40))
            .count()
    };
    assert!(
        near(&spark, [0x2e, 0xcc, 0x71]) >= 10,
        "no bid line in the row's chart"
    );
    assert!(
        near(&spark, [0xff, 0x5c, 0x5c]) >= 10,
        "no ask line in the row's chart"
    );
    assert!(
        near(&node_chart, [0x4a, 0xa3, 0xff]) >= 10,
        "no updates-in line in the node chart"
    );
    assert!(
        node_panel["icon"]
            .as_str()
            .is_some_and(|h| h.starts_with("data:image/svg+xml")),
        "{node_panel}"
    );
    assert_eq!(title, "Tickwire");
    assert!(
        node_panel["services"]
            .as_str()
            .unwrap_or("")
            .contains("FEED up"),
        "the node panel lists the services: {node_panel}"
    );
    assert!(
        node_panel["subs"].as_u64().unwrap_or(0) >= 1,
        "{node_panel}"
    );
    // The publisher's send time reaches the page: the latency panel fills.
    assert!(
        node_panel["latency"]
            .as_str()
            .is_some_and(|l| l.ends_with(" ms")),
        "the latency panel never filled: {node_panel}"
    );
    let rows = rows.as_array().expect("rows").clone();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["refreshed"], "1", "no refresh shown: {row}");
        let first: f64 = row["firstBid"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("a bid in the refresh");
        assert!(first > 0.0);
        assert!(
            row["updates"].as_u64().unwrap() > 20,
            "updates not shown: {row}"
        );
        // The random walk moved the bid, and the cell shows the latest value, with
        // as many decimals as the item's other prices (126.970 beside 126.975).
        assert_ne!(row["bid"], row["firstBid"], "the bid never changed: {row}");
        let bid: f64 = row["bid"].as_str().unwrap().parse().unwrap();
        let cell: f64 = row["bidCell"].as_str().unwrap().parse().unwrap();
        assert_eq!(bid, cell, "{row}");
        let decimals: Vec<usize> = row["prices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().split('.').nth(1).map_or(0, str::len))
            .collect();
        assert!(
            decimals.windows(2).all(|w| w[0] == w[1]),
            "prices not aligned: {row}"
        );
    }
}

/// Opened without `?items=`, the board shows the first items of the first service up,
/// as the node lists them.
#[test]
fn the_dashboard_opened_bare_shows_the_first_items_of_a_service() {
    let (node, host) = Node::start_ws(&[]);
    let _feed = start_publisher(&node, "FEED", 3, 50, false);
    let driver = Driver::start();
    let page = driver.open(&format!("http://{host}/"));
    let shown = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            page.script("return [...document.querySelectorAll('#board tr')].filter(tr => tr.dataset.refreshed === '1').map(tr => tr.dataset.item)")
        },
        |shown| shown.as_array().is_some_and(|a| a.len() == 3),
    );
    page.close();
    assert_eq!(
        shown,
        json!(["SYM0", "SYM1", "SYM2"]),
        "{}",
        node.proc.log()
    );
}

/// A node with a users file and no anonymous logins: the page asks for credentials, the
/// user types them, and the board fills.
#[test]
fn the_dashboard_logs_in_with_the_credentials_the_user_types() {
    let dir = std::env::temp_dir().join(format!("tickwire-dash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let hash = tickwire_auth::hash_password("trader pw").expect("hash");
    let users = dir.join("users.toml");
    std::fs::write(
        &users,
        format!(
            "[users.trader]\npassword_hash = \"{hash}\"\nsubscribe = [\"FEED\", \"TICKWIRE\"]\n\
             [users.feed]\ntoken_hash = \"{}\"\npublish = [\"FEED\"]\n",
            tickwire_auth::hash_token("feed-token")
        ),
    )
    .expect("users file");
    let cfg = dir.join("node.toml");
    std::fs::write(
        &cfg,
        format!("[security]\nusers_file = \"{}\"\n", users.display()),
    )
    .expect("config");
    let (node, host) = Node::start_ws(&["--config", cfg.to_str().unwrap()]);
    let addr = node.addr_str();
    let _feed = publish_as(
        "feed",
        "feed-token",
        &addr,
        &["--service", "FEED", "--items", "2", "--rate", "200"],
    );
    let driver = Driver::start();
    let page = driver.open(&format!("http://{host}/?items=SYM0,SYM1"));
    // Refused without a secret, the page shows its login form.
    let display = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || page.script("return document.getElementById('loginform').style.display"),
        |display| display == "flex",
    );
    assert!(
        display == "flex",
        "no login form shown\n{}",
        node.proc.log()
    );
    // Typed, key by key, as a user would.
    for (css, text) in [("#user", "trader"), ("#password", "trader pw\u{E007}")] {
        page.type_into(css, text);
    }
    let rows = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            page.script("return [...document.querySelectorAll('#board tr')].map(tr => Number(tr.dataset.updates))")
        },
        |rows| {
            rows.as_array()
                .is_some_and(|r| r.len() == 2 && r.iter().all(|n| n.as_u64().unwrap_or(0) > 5))
        },
    );
    let password_left = page.script("return document.getElementById('password').value");
    page.close();
    let log = node.proc.log();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        rows.as_array()
            .is_some_and(|r| r.len() == 2 && r.iter().all(|n| n.as_u64().unwrap_or(0) > 5)),
        "the board did not fill after the login: {rows}\n{log}"
    );
    assert!(log.contains("login accepted user=trader "), "{log}");
    assert_eq!(password_left, "", "the password stays in the form");
}

/// The dashboard of a node fed by an upstream: the board fills from the upstream's
/// feed, and the node panel says where the node is fed from.
#[test]
fn the_dashboard_of_a_node_in_a_tree_shows_its_upstream() {
    let top = Node::start(&["--name", "top"]);
    let _feed = start_publisher(&top, "FEED", 2, 400, false);
    let (pop, host) = Node::start_ws(&["--upstream", &top.addr_str(), "--name", "pop"]);
    wait_for_feed_image(&pop, "pop", "SYM1");
    let driver = Driver::start();
    let page = driver.open(&format!("http://{host}/?items=SYM0,SYM1"));
    let read = || {
        page.script("return {from: document.getElementById('u_from').textContent, chain: document.getElementById('u_chain').textContent, shown: !document.getElementById('upstream').hidden, updates: [...document.querySelectorAll('#board tr')].map(tr => Number(tr.dataset.updates))}")
    };
    let seen = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(250),
        read,
        |v| {
            v["shown"] == true
                && v["from"].as_str().is_some_and(|f| f.starts_with("top ("))
                && v["chain"] == "pop \u{2190} top"
                && v["updates"]
                    .as_array()
                    .is_some_and(|u| u.len() == 2 && u.iter().all(|n| n.as_u64() > Some(10)))
        },
    );
    page.close();
    assert_eq!(seen["shown"], true, "{seen}");
    assert!(
        seen["from"].as_str().unwrap_or("").starts_with("top ("),
        "{seen}"
    );
    assert_eq!(seen["chain"], "pop \u{2190} top", "{seen}");
    let updates = seen["updates"].as_array().expect("rows");
    assert!(
        updates.len() == 2 && updates.iter().all(|n| n.as_u64() > Some(10)),
        "{seen}"
    );
}

/// A node that goes away and comes back: the rows say they may be stale meanwhile, an
/// item added then waits, and the page logs in again and asks for every row again,
/// each of the service it was added for (here one the page was not opened with).
#[test]
fn the_dashboard_asks_a_node_back_for_each_row_of_its_own_service() {
    let (mut node, host) = Node::start_ws(&[]);
    let addr = node.addr_str();
    let feeds = |node: &Node| {
        [
            start_publisher(node, "FEED", 2, 20, false),
            start_publisher(node, "OTHER", 4, 20, false),
        ]
    };
    let mut running = feeds(&node);
    let driver = Driver::start();
    let page = driver.open(&format!("http://{host}/?items=SYM0&service=FEED"));
    let read = || {
        page.script("return {conn: document.getElementById('conn').textContent, rows: [...document.querySelectorAll('#board tr')].map(tr => ({item: tr.dataset.item, refreshed: tr.dataset.refreshed || null, state: tr.querySelector('td.state').textContent}))}")
    };
    let all_shown = |v: &Value, n: usize| {
        v["rows"].as_array().is_some_and(|r| {
            r.len() == n
                && r.iter()
                    .all(|row| row["refreshed"] == "1" && row["state"] == "Open/Ok")
        })
    };
    let both_shown = |v: &Value| all_shown(v, 2);
    poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || page.script("return document.querySelectorAll('#board tr[data-refreshed]').length"),
        |n| n == 1,
    );
    // SYM3 is only OTHER's: added for that service, as a user would.
    page.type_into("#service", "OTHER");
    page.type_into("#items", "SYM3\u{E007}");
    let before = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        read,
        both_shown,
    );
    assert!(both_shown(&before), "{before}");
    // The node goes, and comes back on the same ports with the same services.
    node.proc.kill();
    for p in &mut running {
        p.kill();
    }
    let gone = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        read,
        |v| {
            v["conn"]
                .as_str()
                .is_some_and(|c| c.starts_with("disconnected"))
        },
    );
    assert!(
        gone["conn"]
            .as_str()
            .unwrap_or("")
            .starts_with("disconnected"),
        "{gone}"
    );
    let states: Vec<&str> = (gone["rows"].as_array().unwrap().iter())
        .filter_map(|r| r["state"].as_str())
        .collect();
    assert_eq!(states, ["disconnected", "disconnected"], "{gone}");
    // An item added while the node is away waits for it.
    page.type_into("#items", "SYM1\u{E007}");
    let waiting = read();
    assert_eq!(
        waiting["rows"][2]["state"], "waiting for the node",
        "{waiting}"
    );
    let node = Node::start(&["--listen", &addr, "--ws", &host]);
    let _running = feeds(&node);
    let three_shown = |v: &Value| all_shown(v, 3);
    let after = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(250),
        read,
        |v| three_shown(v) && v["conn"] == "connected",
    );
    page.close();
    assert!(three_shown(&after), "{after}\n{}", node.proc.log());
    let items: Vec<&str> = after["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["item"].as_str())
        .collect();
    assert_eq!(items, ["SYM0", "SYM3", "SYM1"], "{after}");
}

/// The RGB pixels of a base64 PNG (a WebDriver screenshot).
fn png_pixels(b64: &str) -> Vec<[u8; 3]> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let step = info.color_type.samples();
    assert!(step >= 3, "a colour screenshot: {:?}", info.color_type);
    buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}
