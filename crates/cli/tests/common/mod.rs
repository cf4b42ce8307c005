//! Helpers shared by the process-level tests: run the real `tickwire` binary as child
//! processes on 127.0.0.1 (port 0), bounded in time, and speak the wire protocol raw.
//!
//! Every child is killed (SIGKILL) when its handle is dropped, so a failing test never
//! leaves a node or a publisher behind.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, Event, OwnedState, RequestOptions, Subscriber};
use tickwire_proto::frame::{FrameReader, FrameWriter};
use tickwire_proto::{
    DataState, DecodeError, Login, Message, MessageIter, MessageType, Request, Role, StreamState,
    DEFAULT_MAX_FRAME,
};

/// The node's program under test. Cargo names it to the tests of its own package; the
/// lab's tests (crates/bench/tests, which include this file) find it in the folder of
/// their own program, where `cargo test --workspace` builds both.
pub(crate) fn node_program() -> &'static str {
    static FOUND: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(named) = option_env!("CARGO_BIN_EXE_tickwire") {
        return named;
    }
    FOUND.get_or_init(|| {
        // target/debug/deps/TEST-HASH -> target/debug/tickwire
        let exe = std::env::current_exe().expect("the test's own path");
        let path = exe
            .parent()
            .and_then(|deps| deps.parent())
            .map(|d| d.join("tickwire"));
        match path {
            Some(p) if p.is_file() => p.display().to_string(),
            _ => panic!(
                "the node's program is not built beside {}: `cargo build -p tickwire-cli` \
                 (`cargo test --workspace` builds it)",
                exe.display()
            ),
        }
    })
}

/// How long a node may take to log its address.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A `tickwire` command with a quiet-enough environment.
pub(crate) fn tickwire() -> Command {
    let mut c = Command::new(node_program());
    c.env_remove("TICKWIRE_LOG").stdin(Stdio::null());
    c
}

// ---------------------------------------------------------------------------------------
// One-shot commands
// ---------------------------------------------------------------------------------------

/// What a finished command left behind.
#[derive(Debug)]
pub(crate) struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

fn collect<R: Read + Send + 'static>(r: R) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut bytes = Vec::new();
        let _ = r.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs `tickwire ARGS` to completion; kills it and panics if it takes longer than
/// `timeout`.
pub(crate) fn run(args: &[&str], timeout: Duration) -> Output {
    let mut child = tickwire()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tickwire");
    let out = collect(child.stdout.take().expect("stdout"));
    let err = collect(child.stderr.take().expect("stderr"));
    let status = wait_timeout(&mut child, timeout);
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        panic!(
            "`tickwire {}` did not finish within {timeout:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            args.join(" ")
        );
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// `tickwire subscribe --node ADDR --tls --ca CA ARGS...` run to its end within
/// `timeout`: the one way the tests subscribe at a TLS node, trusting its certificate.
pub(crate) fn subscribe_over_tls(addr: &str, ca: &str, args: &[&str], timeout: Duration) -> Output {
    let mut all = vec!["subscribe", "--node", addr, "--tls", "--ca", ca];
    all.extend_from_slice(args);
    run(&all, timeout)
}

/// Takes a reading every `pause` until `done` holds of one or `timeout` has passed; the
/// last reading either way, for the caller to assert on.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    pause: Duration,
    mut read: impl FnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let reading = read();
        if done(&reading) || Instant::now() > deadline {
            return reading;
        }
        std::thread::sleep(pause);
    }
}

/// Polls a child until it exits or `timeout` passes.
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(e) => panic!("waiting for a child: {e}"),
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------
// Long-running processes
// ---------------------------------------------------------------------------------------

/// A long-running `tickwire` process whose stderr is drained into a buffer by a thread
/// (so it can never block on a full pipe). Killed with SIGKILL on drop unless it has
/// already been waited on.
pub(crate) struct Proc {
    child: Child,
    exited: Option<ExitStatus>,
    log: Arc<Mutex<String>>,
    lines: Option<mpsc::Receiver<String>>,
    what: String,
}

impl Proc {
    /// Spawns `tickwire ARGS` with stdout discarded and stderr captured.
    pub(crate) fn spawn(args: &[&str]) -> Proc {
        Proc::spawn_with(args, |_| {})
    }

    /// As [`Proc::spawn`], with the command adjusted first (limits, environment).
    pub(crate) fn spawn_with(args: &[&str], prepare: impl FnOnce(&mut Command)) -> Proc {
        let mut cmd = tickwire();
        prepare(&mut cmd);
        cmd.args(args);
        Proc::spawn_command(cmd, format!("tickwire {}", args.join(" ")))
    }

    /// Spawns any command (e.g. `tickwire` inside `unshare`), stdout discarded and
    /// stderr captured.
    pub(crate) fn spawn_command(mut cmd: Command, what: String) -> Proc {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tickwire");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stderr);
                let mut line = String::new();
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            log.lock().unwrap().push_str(&line);
                            // Nobody listens any more once the caller found its line.
                            let _ = tx.send(line.trim_end().to_string());
                        }
                    }
                }
            });
        }
        Proc {
            child,
            exited: None,
            log,
            lines: Some(rx),
            what,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stderr so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for a stderr line containing `needle`; panics (with the log) after `timeout`
    /// or if the process exits first.
    pub(crate) fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let rx = self.lines.as_ref().expect("line receiver");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    panic!(
                        "`{}` closed stderr (exit {status:?}) before logging {needle:?}\n--- stderr\n{}",
                        self.what,
                        self.log()
                    );
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "`{}` did not log {needle:?} within {timeout:?}\n--- stderr\n{}",
                    self.what,
                    self.log()
                );
            }
        }
    }

    /// True while the process has not exited.
    pub(crate) fn is_running(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(s)) => {
                self.exited = Some(s);
                false
            }
            Ok(None) => true,
            Err(e) => panic!("try_wait: {e}"),
        }
    }

    pub(crate) fn signal(&self, sig: i32) {
        if self.exited.is_some() {
            return;
        }
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.child.id());
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill(&mut self) -> ExitStatus {
        if let Some(s) = self.exited {
            return s;
        }
        let _ = self.child.kill();
        let s = self.child.wait().expect("wait after kill");
        self.exited = Some(s);
        s
    }

    /// Waits up to `timeout` for the process to exit on its own.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exited {
            return Some(s);
        }
        let s = wait_timeout(&mut self.child, timeout);
        self.exited = s;
        s
    }

    /// SIGINT, then waits up to `timeout`; `None` (and SIGKILL) if it did not exit.
    pub(crate) fn interrupt_and_wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.signal(libc::SIGINT);
        let s = self.wait_exit(timeout);
        if s.is_none() {
            self.kill();
        }
        s
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A running `tickwire node` and the address it logged.
pub(crate) struct Node {
    pub proc: Proc,
    pub addr: SocketAddr,
    /// The `listening on` log line.
    pub line: String,
}

impl Node {
    /// `tickwire node --listen 127.0.0.1:0 EXTRA...` (EXTRA may say `--listen` itself),
    /// once it has logged its address.
    pub(crate) fn start(extra: &[&str]) -> Node {
        Node::start_with(extra, |_| {})
    }

    /// As [`Node::start`], with the command adjusted first (see [`Proc::spawn_with`]).
    pub(crate) fn start_with(extra: &[&str], prepare: impl FnOnce(&mut Command)) -> Node {
        let mut args = vec!["node"];
        if !extra.contains(&"--listen") {
            args.extend_from_slice(&["--listen", "127.0.0.1:0"]);
        }
        args.extend_from_slice(extra);
        Node::from_proc(Proc::spawn_with(&args, prepare))
    }

    /// A node process already started, once it has logged its address.
    pub(crate) fn from_proc(mut proc: Proc) -> Node {
        let line = proc.wait_for_line("listening on ", START_TIMEOUT);
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Node { proc, addr, line }
    }

    pub(crate) fn addr_str(&self) -> String {
        self.addr.to_string()
    }

    /// `tickwire node --listen 127.0.0.1:0 --ws 127.0.0.1:0 EXTRA...`, and its WebSocket
    /// address (host:port), once it has logged it.
    pub(crate) fn start_ws(extra: &[&str]) -> (Node, String) {
        let (node, url) = Node::start_ws_url(extra);
        let addr = host_port(&url).to_string();
        (node, addr)
    }

    /// As [`Node::start_ws`], with the whole URL it logged (`ws://HOST:PORT/WebSocket`).
    pub(crate) fn start_ws_url(extra: &[&str]) -> (Node, String) {
        let mut args = vec!["--ws", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut node = Node::start(&args);
        let url = node.logged_ws_url("ws://");
        (node, url)
    }

    /// The URL of the node's `WebSocket API on URL` log line, whose scheme starts with
    /// `scheme`, once it has logged it.
    pub(crate) fn logged_ws_url(&mut self, scheme: &str) -> String {
        let line = self
            .proc
            .wait_for_line(&format!("WebSocket API on {scheme}"), START_TIMEOUT);
        line.split("WebSocket API on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .expect("url in the log line")
            .to_string()
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.proc.is_running()
    }

    /// Resident memory of the node process, in KiB (Linux /proc).
    pub(crate) fn rss_kib(&self) -> u64 {
        rss_kib(self.proc.pid())
    }

    /// Graceful stop: SIGINT, then wait up to `timeout`.
    pub(crate) fn stop(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.proc.interrupt_and_wait(timeout)
    }
}

/// VmRSS of a process, in KiB.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Starts `tickwire publish --node ADDR --service SERVICE --items N --rate R
/// [--interactive]` and waits until its items can be had from the node (a snapshot of
/// the first and the last item answers with a refresh).
pub(crate) fn start_publisher(
    node_proc: &Node,
    service: &str,
    items: usize,
    rate: u64,
    interactive: bool,
) -> Proc {
    let node = node_proc.addr;
    let addr = node.to_string();
    let items_s = items.to_string();
    let rate_s = rate.to_string();
    let mut args = vec![
        "publish",
        "--node",
        &addr,
        "--service",
        service,
        "--items",
        &items_s,
        "--rate",
        &rate_s,
    ];
    if interactive {
        args.push("--interactive");
    }
    let mut p = Proc::spawn(&args);
    let last = format!("SYM{}", items.max(1) - 1);
    for item in ["SYM0", last.as_str()] {
        if let Err(why) = wait_for_image(node, service, item, Duration::from_secs(10)) {
            let running = p.is_running();
            panic!(
                "publisher never made {service}/{item} available: {why} (publisher running: {running})\n--- publisher stderr\n{}\n--- node stderr\n{}",
                p.log(),
                node_proc.proc.log()
            );
        }
    }
    p
}

/// `tickwire publish --accept-posts` of SYM0..SYM{items-1} on service FEED, once its
/// last item can be had from the node.
pub(crate) fn accepting_feed(node: &Node, items: usize, rate: u64) -> Proc {
    let (addr, items_s, rate_s) = (node.addr_str(), items.to_string(), rate.to_string());
    let p = Proc::spawn(&[
        "publish",
        "--node",
        &addr,
        "--items",
        &items_s,
        "--rate",
        &rate_s,
        "--accept-posts",
    ]);
    let last = format!("SYM{}", items.max(1) - 1);
    wait_for_image(node.addr, "FEED", &last, Duration::from_secs(20)).expect("the feed");
    p
}

/// Asks the node for a snapshot of `service/item` until a refresh arrives (the item is
/// published) or `timeout` passes.
pub(crate) fn wait_for_image(
    node: SocketAddr,
    service: &str,
    item: &str,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("nothing tried");
    while Instant::now() < deadline {
        let mut opts = ConnectOptions::new(node.to_string());
        opts.application = "tickwire-cli-tests".into();
        opts.reconnect = false;
        opts.connect_timeout = Duration::from_secs(2);
        let mut sub = match Subscriber::connect(opts) {
            Ok(s) => s,
            Err(e) => {
                last = format!("connect: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Retry on this connection until the stream answers with a refresh.
        while Instant::now() < deadline {
            let snapshot = RequestOptions {
                snapshot: true,
                view: None,
                ..Default::default()
            };
            if let Err(e) = sub.subscribe(service, item, snapshot) {
                last = format!("subscribe: {e}");
                break;
            }
            let answer_by = (Instant::now() + Duration::from_secs(3)).min(deadline);
            let mut answered = false;
            while !answered && Instant::now() < answer_by {
                match sub.next_event(Duration::from_millis(100)) {
                    Ok(Some(Event::Refresh { name, .. })) if name == item => return Ok(()),
                    Ok(Some(Event::Status { name, state, .. })) if name == item => {
                        last = format!("status {state:?}");
                        answered = state.stream != StreamState::Open;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        last = format!("dispatch: {e}");
                        break;
                    }
                }
            }
            if !answered {
                break; // reconnect and try again
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Err(last)
}

/// A client-library subscriber to `node`, panicking if it cannot connect.
pub(crate) fn subscriber(node: SocketAddr) -> Subscriber {
    let mut opts = ConnectOptions::new(node.to_string());
    opts.application = "tickwire-cli-tests".into();
    opts.connect_timeout = Duration::from_secs(5);
    Subscriber::connect(opts).expect("subscriber connects")
}

/// Next event matching `pred`, within `timeout`; panics with what was seen otherwise.
pub(crate) fn expect_event(
    sub: &mut Subscriber,
    timeout: Duration,
    what: &str,
    mut pred: impl FnMut(&Event) -> bool,
) -> Event {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        match sub.next_event(left.min(Duration::from_millis(100))) {
            Ok(Some(e)) => {
                if pred(&e) {
                    return e;
                }
                if seen.len() < 20 {
                    seen.push(format!("{e:?}"));
                }
            }
            Ok(None) => {}
            Err(e) => panic!("waiting for {what}: subscriber failed: {e}; seen {seen:#?}"),
        }
    }
    panic!("no {what} within {timeout:?}; seen (first 20): {seen:#?}");
}

/// A clean subscriber gets a refresh of `service/item` and then `updates` updates.
pub(crate) fn assert_serves(node: SocketAddr, service: &str, item: &str, updates: usize) {
    let mut sub = subscriber(node);
    sub.subscribe(service, item, RequestOptions::default())
        .expect("subscribe");
    expect_event(
        &mut sub,
        Duration::from_secs(5),
        "a refresh",
        |e| matches!(e, Event::Refresh { name, .. } if name == item),
    );
    for i in 0..updates {
        expect_event(
            &mut sub,
            Duration::from_secs(5),
            &format!("update {}", i + 1),
            |e| matches!(e, Event::Update { name, .. } if name == item),
        );
    }
}

/// `tickwire publish --node NODE ARGS... --user USER`, logging in with `token` (given in
/// TICKWIRE_PASSWORD, so that it stays off the command line).
pub(crate) fn publish_as(user: &str, token: &str, node: &str, args: &[&str]) -> Proc {
    let mut all = vec!["publish", "--node", node];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--user", user]);
    Proc::spawn_with(&all, |cmd| {
        cmd.env("TICKWIRE_PASSWORD", token);
    })
}

/// Waits (20 s at most) until FEED's `item` can be had from `node`, a node fed from
/// elsewhere (an upstream, the backbone); panics with its log, headed `who`, if not.
pub(crate) fn wait_for_feed_image(node: &Node, who: &str, item: &str) {
    wait_for_image(node.addr, "FEED", item, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}\n--- {who}\n{}", node.proc.log()));
}

/// A subscriber to FEED's SYM0..SYM{items-1} at `node`.
pub(crate) fn subscribed_to_feed(node: SocketAddr, items: usize) -> Subscriber {
    let mut sub = subscriber(node);
    for i in 0..items {
        sub.subscribe("FEED", &format!("SYM{i}"), RequestOptions::default())
            .expect("subscribe");
    }
    sub
}

/// A subscriber of FEED/SYM0 at `node`, once its refresh and an update have come.
pub(crate) fn watching_sym0(node: &Node) -> Subscriber {
    let t = Duration::from_secs(20);
    let mut sub = subscribed_to_feed(node.addr, 1);
    expect_event(&mut sub, t, "the refresh", |e| {
        matches!(e, Event::Refresh { .. })
    });
    expect_event(&mut sub, t, "an update", |e| {
        matches!(e, Event::Update { .. })
    });
    sub
}

/// Waits for the next refresh and checks that its data is ok (a stream recovered).
pub(crate) fn expect_ok_refresh(sub: &mut Subscriber, timeout: Duration, what: &str) {
    let refresh = expect_event(sub, timeout, what, |e| matches!(e, Event::Refresh { .. }));
    let Event::Refresh { state, .. } = refresh else {
        unreachable!()
    };
    assert_eq!(state.data, DataState::Ok);
}

/// A subscriber to FEED's items and the last sequence number of each.
pub(crate) struct SequenceWatcher {
    pub sub: Subscriber,
    pub seq: HashMap<String, u32>,
    /// Updates that stood for several (conflated on the way).
    pub conflated: u64,
}

impl SequenceWatcher {
    /// Watches SYM0..SYM{items-1} of FEED at `node`.
    pub(crate) fn new(node: SocketAddr, items: usize) -> SequenceWatcher {
        SequenceWatcher::of(subscribed_to_feed(node, items), HashMap::new())
    }

    /// Watches what `sub` has asked for, its items' sequence numbers so far in `seq`.
    pub(crate) fn of(sub: Subscriber, seq: HashMap<String, u32>) -> SequenceWatcher {
        SequenceWatcher {
            sub,
            seq,
            conflated: 0,
        }
    }

    /// Follows the sequence numbers of every item for `for_how_long`: returns (updates,
    /// gaps). A conflated update stands for its count; a status panics, as nothing
    /// should interrupt the streams meanwhile.
    pub(crate) fn follow(&mut self, for_how_long: Duration) -> (u64, u64) {
        let (mut updates, mut gaps) = (0u64, 0u64);
        let end = Instant::now() + for_how_long;
        while Instant::now() < end {
            match self.sub.next_event(Duration::from_millis(100)) {
                Ok(Some(Event::Refresh { name, seq: s, .. })) => {
                    self.seq.insert(name, s);
                }
                Ok(Some(Event::Update {
                    name,
                    seq: s,
                    conflation_count: k,
                    ..
                })) => {
                    updates += 1;
                    self.conflated += u64::from(k > 1);
                    match self.seq.get(&name) {
                        Some(&prev) if k != u16::MAX && k != 0 => {
                            if s != prev.wrapping_add(u32::from(k.max(1))) {
                                if gaps < 3 {
                                    eprintln!("gap: {name} seq {prev} then {s} (count {k})");
                                }
                                gaps += 1;
                            }
                        }
                        Some(_) => {}
                        None => gaps += 1, // an update before any image
                    }
                    self.seq.insert(name, s);
                }
                Ok(Some(Event::Status { name, state, .. })) => {
                    panic!("status for {name} while everything runs: {state:?}")
                }
                Ok(_) => {}
                Err(e) => panic!("subscriber failed: {e}"),
            }
        }
        (updates, gaps)
    }
}

// ---------------------------------------------------------------------------------------
// The raw wire protocol
// ---------------------------------------------------------------------------------------

/// Bytes of one frame around `payload` (length prefix taken from the payload).
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Messages encoded into frames, as a peer would send them.
pub(crate) fn encode(msgs: &[Message<'_>]) -> Vec<u8> {
    let mut w = FrameWriter::new(DEFAULT_MAX_FRAME);
    for m in msgs {
        w.push(m).expect("encode");
    }
    let mut out = Vec::new();
    w.take_all(&mut out);
    out
}

pub(crate) fn login(role: Role) -> Message<'static> {
    Message::Login(Login::new(role, "tickwire-cli-tests", "tests", ""))
}

pub(crate) fn request<'a>(stream_id: u32, service: &'a str, name: &'a str) -> Message<'a> {
    Message::Request(Request::streaming(stream_id, service, name))
}

/// One message received, owned: its type, stream id (0 if none) and state (if any).
#[derive(Debug, Clone)]
pub(crate) struct Got {
    pub ty: MessageType,
    pub stream_id: u32,
    pub state: Option<OwnedState>,
}

impl Got {
    fn of(m: &Message<'_>) -> Got {
        let (stream_id, state) = match m {
            Message::Refresh(r) => (r.stream_id, Some((&r.state).into())),
            Message::Update(u) => (u.stream_id, None),
            Message::Status(s) => (s.stream_id, Some((&s.state).into())),
            Message::Request(r) => (r.stream_id, None),
            Message::Close { stream_id } => (*stream_id, None),
            _ => (0, None),
        };
        Got {
            ty: m.message_type(),
            stream_id,
            state,
        }
    }

    /// A connection-level status (stream 0).
    pub(crate) fn is_conn_status(&self) -> bool {
        self.ty == MessageType::Status && self.stream_id == 0
    }
}

/// How a raw read ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// The node closed the connection (read returned 0).
    Eof,
    /// The connection was reset.
    Reset,
}

/// A raw TCP connection to a node that decodes what the node sends.
pub(crate) struct RawConn {
    pub stream: TcpStream,
    reader: FrameReader,
    pub received: Vec<Got>,
}

impl RawConn {
    pub(crate) fn connect(addr: SocketAddr) -> RawConn {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to node");
        stream.set_nodelay(true).expect("nodelay");
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        RawConn {
            stream,
            reader: FrameReader::new(tickwire_proto::frame::MIN_MAX_FRAME.max(DEFAULT_MAX_FRAME)),
            received: Vec::new(),
        }
    }

    /// Writes bytes; an error (the node may already have closed) is returned, not fatal.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    fn decode_available(&mut self) -> Result<(), DecodeError> {
        while let Some(payload) = self.reader.next_frame()? {
            for raw in MessageIter::new(payload) {
                self.received.push(Got::of(&raw?.message));
            }
        }
        Ok(())
    }

    /// Reads one chunk (up to `timeout`); `Ok(None)` on timeout, `Ok(Some(end))` at the end.
    fn read_chunk(&mut self, timeout: Duration) -> Option<Option<End>> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .expect("read timeout");
        let buf = self.reader.spare(64 * 1024);
        match self.stream.read(buf) {
            Ok(0) => Some(Some(End::Eof)),
            Ok(n) => {
                self.reader.filled(n);
                if let Err(e) = self.decode_available() {
                    panic!(
                        "the node sent undecodable bytes: {e}; decoded so far: {:?}",
                        self.received
                    );
                }
                Some(None)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) if e.kind() == ErrorKind::Interrupted => Some(None),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Some(Some(End::Reset)),
            Err(e) => panic!("reading from the node: {e}"),
        }
    }

    /// Reads and decodes until the node closes the connection; panics after `timeout`.
    pub(crate) fn read_until_end(&mut self, timeout: Duration) -> End {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "the node did not close the connection within {timeout:?}; received {:?}",
                    self.received
                );
            }
            if let Some(Some(end)) = self.read_chunk(left) {
                return end;
            }
        }
    }

    /// Reads until a message matching `pred` has arrived; panics after `timeout` or at EOF.
    pub(crate) fn read_until(
        &mut self,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&Got) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.received.iter().any(&pred) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("no {what} within {timeout:?}; received {:?}", self.received);
            }
            if let Some(Some(end)) = self.read_chunk(left) {
                panic!(
                    "connection ended ({end:?}) before {what}; received {:?}",
                    self.received
                );
            }
        }
    }
}

/// A deterministic generator for test bytes (the feed's xorshift64*).
pub(crate) struct Rng(tickwire_proto::reference::FeedRng);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(tickwire_proto::reference::FeedRng::new(seed))
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.0.next_u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// A config file in the temp directory (named after the test process and `name`),
/// removed on drop.
pub(crate) struct TempConfig(std::path::PathBuf);

impl TempConfig {
    pub(crate) fn new(name: &str, text: &str) -> TempConfig {
        let p = std::env::temp_dir().join(format!("tickwire-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).expect("write config");
        TempConfig(p)
    }

    pub(crate) fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------
// TLS, users and the Python clients
// ---------------------------------------------------------------------------------------

/// A temp dir with `cert.pem` / `key.pem` (self-signed, for 127.0.0.1 and localhost),
/// removed on drop.
pub(crate) struct Certs {
    pub dir: std::path::PathBuf,
}

impl Certs {
    pub(crate) fn new(tag: &str) -> Certs {
        let dir =
            std::env::temp_dir().join(format!("tickwire-tls-test-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("a certificate");
        std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), ck.key_pair.serialize_pem()).unwrap();
        Certs { dir }
    }

    pub(crate) fn cert(&self) -> std::path::PathBuf {
        self.dir.join("cert.pem")
    }

    pub(crate) fn key(&self) -> std::path::PathBuf {
        self.dir.join("key.pem")
    }

    pub(crate) fn cert_str(&self) -> String {
        self.cert().display().to_string()
    }

    /// Writes `name` in the directory; returns its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write file");
        p.display().to_string()
    }

    /// `node.toml` in the directory: `[tls]` with this certificate, then `extra`; its
    /// path.
    pub(crate) fn tls_config(&self, extra: &str) -> String {
        self.write(
            "node.toml",
            &format!(
                "[tls]\ncert = {:?}\nkey = {:?}\n{extra}",
                self.cert_str(),
                self.key().display().to_string()
            ),
        )
    }

    /// A node with `[tls]` (this certificate), the WebSocket API on, and `extra`
    /// config; the WebSocket URL it logged (`wss://...`).
    pub(crate) fn start_node(&self, extra: &str) -> (Node, String) {
        let config = self.tls_config(extra);
        let mut node = Node::start(&["--config", &config, "--ws", "127.0.0.1:0"]);
        assert!(node.line.contains("TLS only"), "{}", node.line);
        let url = node.logged_ws_url("");
        assert!(url.starts_with("wss://"), "{url}");
        (node, url)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The users file line for a password, made by `tickwire users hash` itself.
pub(crate) fn hash_line(secret: &str, token: bool) -> String {
    let mut cmd = tickwire();
    cmd.args(["users", "hash"]);
    if token {
        cmd.arg("--token");
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn users hash");
    writeln!(child.stdin.take().unwrap(), "{secret}").unwrap();
    let out = child.wait_with_output().expect("users hash");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The Python interpreter that .ci/test sets up (target/pyenv) with the client libraries
/// of tests/clients/requirements.txt.
pub(crate) fn python_with_websocket_client() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let py = root.join("target/pyenv/bin/python");
    assert!(
        py.exists(),
        "{} is missing: .ci/test creates it (python3 -m venv target/pyenv; target/pyenv/bin/pip install -r crates/cli/tests/clients/requirements.txt)",
        py.display()
    );
    py
}

/// A child (a Python client, say) whose stdout lines arrive on a channel as it prints
/// them and whose stderr a thread gathers; killed on drop.
pub(crate) struct ChildLines {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    stderr: Option<JoinHandle<String>>,
}

impl ChildLines {
    /// Spawns `cmd` (`what` names it if it cannot start) with stdout and stderr piped.
    pub(crate) fn spawn(cmd: &mut Command, what: &str) -> ChildLines {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = collect(child.stderr.take().expect("stderr"));
        ChildLines {
            child,
            lines,
            stderr: Some(stderr),
        }
    }

    /// Kills the child; what it wrote to stderr (once: empty after).
    pub(crate) fn kill_for_stderr(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for ChildLines {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node's own figures (service TICKWIRE, item NODE), as `subscribe --json` prints
/// them.
pub(crate) fn node_figures(node: &Node) -> serde_json::Value {
    let out = run(
        &[
            "subscribe",
            "--node",
            &node.addr_str(),
            "--service",
            "TICKWIRE",
            "--snapshot",
            "--json",
            "--timeout",
            "10",
            "NODE",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let v: serde_json::Value =
        serde_json::from_str(out.stdout.lines().next().expect("a line")).expect("json");
    v["fields"].clone()
}

/// Runs `f` on a thread of its own inside a network namespace it makes (loopback up,
/// multicast routed over it): the processes, sockets and threads `f` starts are in it
/// too, so the forged datagrams and floods of a test never leave it. Needs root (or
/// CAP_SYS_ADMIN), as CI has.
pub(crate) fn in_network_namespace<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let thread = std::thread::spawn(move || {
        // SAFETY: unshare(2) with a flag; it changes only this thread's namespaces.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "this test makes a network namespace of its own (root or CAP_SYS_ADMIN needed): {}",
            std::io::Error::last_os_error()
        );
        for args in [
            &["link", "set", "lo", "up"][..],
            &["route", "add", "224.0.0.0/4", "dev", "lo"][..],
        ] {
            let st = Command::new("ip")
                .args(args)
                .status()
                .expect("ip (iproute2; scripts/setup.sh installs it)");
            assert!(st.success(), "ip {args:?} failed in the test's namespace");
        }
        f()
    });
    thread
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

// ---------------------------------------------------------------------------------------
// WebSocket clients
// ---------------------------------------------------------------------------------------

/// HOST:PORT of a URL (`ws://HOST:PORT/WebSocket`, `wss://...`).
pub(crate) fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// A WebSocket client of `url` over `stream` (plain or TLS), asking for the subprotocol
/// `protocol`; with the server's answer to the handshake.
pub(crate) fn ws_handshake<S: Read + Write>(
    url: &str,
    protocol: &str,
    stream: S,
) -> (
    tungstenite::WebSocket<S>,
    tungstenite::handshake::client::Response,
) {
    use tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request().expect("request");
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        tungstenite::http::HeaderValue::from_str(protocol).expect("a header value"),
    );
    tungstenite::client(req, stream).expect("WebSocket handshake")
}

/// A WebSocket client of `url` (`ws://HOST:PORT/...`) over TCP, asking for `protocol`;
/// its reads give up after 200 ms (see [`ws_read_timed_out`]).
pub(crate) fn ws_connect(
    url: &str,
    protocol: &str,
) -> (
    tungstenite::WebSocket<TcpStream>,
    tungstenite::handshake::client::Response,
) {
    let stream = TcpStream::connect(host_port(url)).expect("tcp connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    ws_handshake(url, protocol, stream)
}

/// True for the error of a WebSocket read that found nothing to read within the
/// socket's read timeout: not an end, read again.
pub(crate) fn ws_read_timed_out(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// One sample of the node's `GET /metrics` at `http` (its --ws address), named as
/// printed: `tickwire_backbone_rejected_total`, or with labels
/// `tickwire_backbone_rejected_by_reason_total{reason="bad_mac"}`.
pub(crate) fn metric(http: &str, sample: &str) -> Option<f64> {
    let mut s = TcpStream::connect(http).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {http}\r\n\r\n").ok()?;
    let mut all = String::new();
    s.read_to_string(&mut all).ok()?;
    all.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == sample).then(|| value.parse().ok())?
    })
}

/// Waits until `metric(http, sample)` passes `pred`; panics with the last value after
/// `timeout`.
pub(crate) fn wait_for_metric(
    http: &str,
    sample: &str,
    timeout: Duration,
    pred: impl Fn(f64) -> bool,
) -> f64 {
    let deadline = Instant::now() + timeout;
    loop {
        let v = metric(http, sample);
        if let Some(v) = v.filter(|v| pred(*v)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{sample} at {http} is {v:?} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free UDP port on loopback whose next port is free too (a backbone's files go on
/// its channel's port plus one).
pub(crate) fn free_udp_port() -> u16 {
    // Below the kernel's ephemeral range (see the function): none is taken between this
    // check and the node's own bind.
    tickwire_backbone::loopback::free_port_pair()
        .expect("no two free UDP ports side by side on loopback")
}

/// A backbone channel: multicast on loopback, with a free port and a group of its own
/// (`239.20.30.GROUP`), so that tests run side by side.
pub(crate) fn channel(group: u8) -> String {
    let port = free_udp_port();
    format!("aeron:udp?endpoint=239.20.30.{group}:{port}|interface=127.0.0.1")
}

/// A loopback port free a moment ago, for a program that listens on a port it is
/// told later (an upstream node that comes after the node connecting to it, a node
/// that comes back on its port). It is taken below the kernel's ephemeral range: a port
/// from that range (what binding port 0 gives) can meanwhile become the local port of
/// any test's outgoing connection, or of a connect to itself (TCP's simultaneous open
/// on loopback, when a node keeps connecting to a port where nothing listens yet), and
/// the program then finds it in use.
pub(crate) fn free_port_for_tests() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral_low.max(10_100));
    // Spread over the range so that tests running at once rarely try the same ports.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64)
        ^ (u64::from(std::process::id()) << 20);
    let span = u64::from(high - low);
    let start = seed.wrapping_mul(6364136223846793005);
    // Never the same port twice to one test process (nothing listens on it yet).
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..1000u64 {
        let port = low + (start.wrapping_add(i * 7919) % span) as u16;
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    panic!("no free loopback port between {low} and {high}")
}

/// A TCP connection to `to` from the local address `from` (any of 127.0.0.0/8).
pub(crate) fn connect_from(
    from: std::net::Ipv4Addr,
    to: std::net::SocketAddr,
) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        panic!("an IPv4 node address")
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned at once; the addresses live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        let rc = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let remote = sockaddr(*to.ip(), to.port());
        let rc = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(rc, 0, "connect {to}: {}", std::io::Error::last_os_error());
        stream
    }
}
