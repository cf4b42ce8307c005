//! LSEG's own Real-Time SDK applications against real nodes over RSSL: the ETA
//! Consumer example (streaming, batch with a view, snapshot), run unchanged from the
//! SDK's jars (`../shared/interop/rtsdk`, or `TICKWIRE_RTSDK`), its third-party jars
//! fetched by `.ci/test` into `target/rtsdk-lib`.

mod common;

use common::{start_publisher, Node};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The SDK's tools: jars, dictionaries and the scripts that find their dependencies.
fn rtsdk() -> PathBuf {
    let dir = std::env::var_os("TICKWIRE_RTSDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/interop/rtsdk")
        });
    assert!(
        dir.join("jars/eta-examples.jar").exists(),
        "LSEG's RTSDK tools are not at {} (set TICKWIRE_RTSDK to their folder: jars/, etc/, classpath.sh)",
        dir.display()
    );
    dir
}

/// The class path: the SDK's jars and their dependencies in target/rtsdk-lib.
fn classpath() -> String {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/rtsdk-lib");
    assert!(
        lib.join(".complete").exists(),
        "the RTSDK tools' dependencies are not in {} (.ci/test fetches them: bash {}/fetch-deps.sh {})",
        lib.display(),
        rtsdk().display(),
        lib.display()
    );
    let out = Command::new("bash")
        .arg(rtsdk().join("classpath.sh"))
        .arg(&lib)
        .output()
        .expect("run classpath.sh");
    assert!(out.status.success(), "classpath.sh failed");
    String::from_utf8(out.stdout)
        .expect("class path")
        .trim()
        .to_string()
}

/// A working directory with the SDK's dictionaries (the tools read them from there).
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for f in std::fs::read_dir(rtsdk().join("etc")).expect("etc") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, dir.path().join(f.file_name().expect("name"))).expect("copy");
    }
    dir
}

/// `java -cp <the class path> main args` started in `dir`, its standard output piped
/// and its standard error to `stderr`: how every SDK tool here is started, whether run
/// to its end ([`java`]) or beside the test ([`JavaProc`]).
fn spawn_java(main: &str, args: &[&str], dir: &Path, stderr: Stdio) -> std::process::Child {
    Command::new("java")
        .arg("-cp")
        .arg(classpath())
        .arg(main)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start java (is a JRE installed? .ci/test installs one)")
}

/// Runs a Java main class to its end (its own `-runtime`), killed after `timeout`.
fn java(main: &str, args: &[&str], dir: &Path, timeout: Duration) -> (Option<i32>, String) {
    let mut child = spawn_java(main, args, dir, Stdio::piped());
    let status = common::wait_timeout(&mut child, timeout);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (status.and_then(|s| s.code()), text)
}

/// Runs a Java main class until its output holds `until` (or `timeout` passes), then
/// stops it: for tools that run for a fixed time of their own.
fn java_until(main: &str, dir: &Path, until: &str, timeout: Duration) -> String {
    let proc = JavaProc::start(main, &[], dir);
    let _ = proc.wait_for(until, 0, timeout);
    proc.output()
}

const CONSUMER: &str = "com.refinitiv.eta.examples.consumer.Consumer";

/// LSEG's `main` pointed at 127.0.0.1:`port` (`-h`, `-p`), with `args` after them: its
/// exit code (none if it was killed at `timeout`) and what it printed.
fn java_on_loopback(
    main: &str,
    port: &str,
    args: &[&str],
    dir: &Path,
    timeout: Duration,
) -> (Option<i32>, String) {
    let mut all = vec!["-h", "127.0.0.1", "-p", port];
    all.extend_from_slice(args);
    java(main, &all, dir, timeout)
}

/// LSEG's ETA Consumer example pointed at 127.0.0.1:`port` with `args`, given a minute:
/// its exit code (none if it was killed) and what it printed.
fn eta_consumer(port: &str, args: &[&str], dir: &Path) -> (Option<i32>, String) {
    java_on_loopback(CONSUMER, port, args, dir, Duration::from_secs(60))
}

/// How long a consumer is given to print what a test waits for: its JVM's start and
/// the dictionaries' download on a busy machine, with room. A bound, not a pause.
const CONSUMER_DEADLINE: Duration = Duration::from_secs(90);

/// LSEG's ETA Consumer example pointed at 127.0.0.1:`port` with `args` (without
/// `-runtime`: it is given 120 s, a bound), stopped once what it printed holds every
/// one of `expected`, then `linger` later (room for what must not come): what it
/// printed. Its own `-runtime` would be a fixed window from its start, which a cold
/// JVM on a busy machine can use up before the data comes.
fn eta_consumer_until(
    port: &str,
    args: &[&str],
    expected: &[&str],
    linger: Duration,
    dir: &Path,
) -> String {
    let mut all = args.to_vec();
    all.extend_from_slice(&["-runtime", "120"]);
    let consumer = JavaProc::start_on_loopback(CONSUMER, port, &all, dir);
    let deadline = std::time::Instant::now() + CONSUMER_DEADLINE;
    for needle in expected {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if let Err(out) = consumer.wait_for(needle, 0, left) {
            panic!("no {needle:?} from the consumer within {CONSUMER_DEADLINE:?}:\n{out}");
        }
    }
    std::thread::sleep(linger);
    consumer.output()
}

/// `items.xml` in `dir`: the perf tools' item list, MarketPrice items RDT`i` for each `i`.
fn write_item_list(dir: &Path, numbers: impl Iterator<Item = u32>) {
    let items: String = numbers
        .map(|i| format!("<item domain=\"MarketPrice\" name=\"RDT{i}\" />"))
        .collect();
    std::fs::write(
        dir.join("items.xml"),
        format!("<itemList>{items}</itemList>"),
    )
    .expect("item file");
}

/// ConsPerf's steady state, seconds. It is also ConsPerf's deadline for every image,
/// counted from its start (its login, the dictionary's download and the JIT's warm-up
/// come first): with other test binaries and JVMs sharing two CPUs, 5 s was too short
/// for that in about one run in four, and ConsPerf then gives up ("Failed to receive
/// all images within 5 seconds").
const CONSPERF_STEADY_SECS: &str = "12";

/// LSEG's ConsPerf pointed at 127.0.0.1:`port` (over `connection`, e.g. WebSocket, if
/// not RSSL), reading the 10 items of `items.xml` with statistics every second and a
/// steady state of [`CONSPERF_STEADY_SECS`]: what it printed (it must end with exit
/// code 0).
fn consperf(port: &str, connection: &[&str], dir: &Path) -> String {
    let mut args = connection.to_vec();
    args.extend_from_slice(&[
        "-itemFile",
        "items.xml",
        "-itemCount",
        "10",
        "-writeStatsInterval",
        "1",
        "-steadyStateTime",
        CONSPERF_STEADY_SECS,
        "-msgFile",
        "MsgData.xml",
    ]);
    let (code, out) = java_on_loopback(
        "com.refinitiv.eta.perftools.consperf.ConsPerf",
        port,
        &args,
        dir,
        Duration::from_secs(90),
    );
    assert_eq!(code, Some(0), "ConsPerf failed:\n{out}");
    out
}

/// A config file giving a node the SDK's field dictionary (the perf tools' fields),
/// then `extra`.
fn rdm_config(extra: &str) -> tempfile::NamedTempFile {
    let cfg = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(
        cfg.path(),
        format!(
            "[rssl]\nfield_dictionary = {:?}\n{extra}",
            rtsdk().join("etc").join("RDMFieldDictionary")
        ),
    )
    .expect("write config");
    cfg
}

/// `tickwire publish` of `names` as service DIRECT_FEED (from an item file in `dir`) at
/// `rate` updates a second, once the last name can be had from `node`.
fn direct_feed(node: &Node, names: &[String], rate: &str, dir: &Path) -> common::Proc {
    let file = dir.join("names.txt");
    let lines: String = names.iter().map(|n| format!("{n}\n")).collect();
    std::fs::write(&file, lines).expect("names");
    let addr = node.addr_str();
    let feed = common::Proc::spawn(&[
        "publish",
        "--node",
        &addr,
        "--service",
        "DIRECT_FEED",
        "--item-file",
        file.to_str().expect("utf-8 path"),
        "--rate",
        rate,
    ]);
    let last = names.last().expect("a name");
    common::wait_for_image(node.addr, "DIRECT_FEED", last, Duration::from_secs(10))
        .expect("the feed");
    feed
}

/// A node started with `args`, publishing FEED's three items at `rate` updates a second,
/// and the folder LSEG's ETA Consumer runs in: the set-up of the tests that read FEED
/// with the consumer, alike but for these three.
struct FeedNode {
    node: Node,
    _feed: common::Proc,
    dir: tempfile::TempDir,
}

impl FeedNode {
    fn start(args: &[&str], rate: u64, dir: tempfile::TempDir) -> FeedNode {
        let node = Node::start(args);
        let _feed = start_publisher(&node, "FEED", 3, rate, false);
        FeedNode { node, _feed, dir }
    }

    /// The ETA Consumer run against the node with `args` until it has printed every one
    /// of `expected`, then `linger` more, as [`eta_consumer_until`].
    fn consumer(&self, args: &[&str], expected: &[&str], linger: Duration) -> String {
        let port = self.node.addr.port().to_string();
        eta_consumer_until(&port, args, expected, linger, self.dir.path())
    }
}

#[test]
fn the_eta_consumer_streams_an_item_from_a_plain_node() {
    let mut feed = FeedNode::start(&[], 50, workdir());
    let out = feed.consumer(
        &["-s", "FEED", "-mp", "SYM1"],
        &[
            "State: Open/Ok/None - text: \"Login accepted by",
            "serviceName: FEED",
            "SYM1",
            "22/BID:",
            "UPDATE TYPE:",
        ],
        Duration::ZERO,
    );
    assert!(!out.contains("Exception"), "{out}");
    // Sizes are reals to the SDK's dictionary: sent as such, not as raw integers.
    let size = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("30/BIDSIZE: "))
        .unwrap_or_else(|| panic!("no BIDSIZE in:\n{out}"));
    assert!(
        size.ends_with(".0"),
        "BIDSIZE {size:?} is not a whole real:\n{out}"
    );
    feed.node
        .proc
        .wait_for_line("RSSL connection (RIPC 14", Duration::from_secs(5));
    feed.node.stop(Duration::from_secs(10));
}

#[test]
fn a_batch_with_a_view_and_a_snapshot_from_the_eta_consumer() {
    let mut feed = FeedNode::start(&[], 20, workdir());
    // Two items in one batch request, with the example's view (BID, ASK, TRDPRC_1, ...).
    let out = feed.consumer(
        &["-s", "FEED", "-mp", "SYM1", "-mp", "SYM2", "-view"],
        &["hasView: true", "itemNames: [SYM1, SYM2]", "UPDATE TYPE:"],
        // Both refreshes come before the first update; a second's room all the same.
        Duration::from_secs(1),
    );
    for item in ["SYM1", "SYM2"] {
        assert!(
            out.lines().any(|l| l.trim() == item),
            "no refresh of {item}:\n{out}"
        );
    }
    assert!(out.contains("22/BID:"), "{out}");
    assert!(
        !out.contains("30/BIDSIZE"),
        "BIDSIZE is outside the view, yet came:\n{out}"
    );
    // A snapshot: one refresh, non-streaming, and no update in the next 2 s of the
    // feed's 20 a second.
    let out = feed.consumer(
        &["-s", "FEED", "-mp", "SYM0", "-snapshot"],
        &["Non-streaming/Ok"],
        Duration::from_secs(2),
    );
    assert!(
        !out.contains("UPDATE TYPE:"),
        "updates after a snapshot:\n{out}"
    );
    feed.node.stop(Duration::from_secs(10));
}

#[test]
fn rssl_can_be_moved_to_a_port_of_its_own_or_turned_off() {
    // Off: a RIPC ConnectReq on the node's port is not a native login: refused.
    let mut node = Node::start(&["--rssl", "off"]);
    let dir = workdir();
    let port = node.addr.port().to_string();
    let (_, out) = eta_consumer(
        &port,
        &["-s", "FEED", "-mp", "SYM1", "-runtime", "3"],
        dir.path(),
    );
    assert!(!out.contains("Received Login Response"), "{out}");
    node.stop(Duration::from_secs(10));
    // A port of its own: the consumer logs in there.
    let rssl_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("addr").port()
    };
    let at = format!("127.0.0.1:{rssl_port}");
    let mut node = Node::start(&["--rssl", &at]);
    // Logged before the node's address, which Node::start waited for.
    let said = format!("RSSL (LSEG Real-Time SDK applications) on {at}");
    assert!(node.proc.log().contains(&said), "{}", node.proc.log());
    eta_consumer_until(
        &rssl_port.to_string(),
        &["-s", "TICKWIRE", "-mp", "NODE"],
        &["Received Login Response"],
        Duration::ZERO,
        dir.path(),
    );
    node.stop(Duration::from_secs(10));
}

/// A working directory without dictionaries: the tools download them.
fn empty_workdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn the_eta_consumer_downloads_the_dictionaries_a_node_is_given() {
    let cfg = rdm_config(&format!(
        "enum_dictionary = {:?}\n",
        rtsdk().join("etc").join("enumtype.def")
    ));
    let config = ["--config", cfg.path().to_str().expect("utf-8 path")];
    let mut feed = FeedNode::start(&config, 20, empty_workdir());
    let out = feed.consumer(
        &["-s", "FEED", "-mp", "SYM1"],
        &[
            "Will attempt to download from provider",
            "Field Dictionary complete",
            // The enumeration tables decode the currency.
            "15/CURRENCY: USD(840)",
        ],
        Duration::ZERO,
    );
    // Thousands of fields: many parts, the last one complete.
    let parts = out.matches("dictionaryName: RWFFld").count();
    assert!(parts > 10, "{parts} parts of the field dictionary:\n{out}");
    feed.node.stop(Duration::from_secs(10));
}

#[test]
fn ema_with_its_default_configuration_reads_a_plain_node() {
    // EMA's defaults: localhost:14002, service DIRECT_FEED, item IBM.N, and the
    // dictionaries downloaded from the provider.
    if std::net::TcpListener::bind("127.0.0.1:14002").is_err() {
        panic!("port 14002 is taken: EMA's default configuration needs it free for this test");
    }
    let mut node = Node::start(&["--listen", "127.0.0.1:14002"]);
    let dir = empty_workdir();
    let mut feed = direct_feed(&node, &["IBM.N".to_string()], "20", dir.path());
    // ex100 prints what it gets for 60 s: stopped once an update is in.
    let out = java_until(
        "com.refinitiv.ema.examples.training.consumer.series100.ex100_MP_Streaming.Consumer",
        dir.path(),
        "UpdateMsgEnd",
        Duration::from_secs(60),
    );
    assert!(out.contains("RefreshMsg"), "no refresh:\n{out}");
    assert!(out.contains("name=\"IBM.N\""), "{out}");
    assert!(out.contains("serviceName=\"DIRECT_FEED\""), "{out}");
    assert!(out.contains("name=\"BID\" dataType=\"Real\""), "{out}");
    assert!(out.contains("UpdateMsg"), "no update:\n{out}");
    assert!(!out.contains("Exception"), "{out}");
    feed.kill();
    node.stop(Duration::from_secs(10));
}

#[test]
fn posts_from_the_eta_consumer_reach_the_publisher_and_its_answer_comes_back() {
    let cfg = rdm_config("[posts]\nservices = [\"FEED\"]\n");
    let mut node = Node::start(&["--config", cfg.path().to_str().expect("utf-8 path")]);
    // The feed applies posted BID and ASK and refuses other fields, with its reason:
    // the example posts more fields, so its Acks carry the feed's refusal.
    let _feed = common::accepting_feed(&node, 3, 20);
    let dir = workdir();
    // Off-stream, on the login stream, it names an item the feed does not have.
    let answers = [
        "ackId=1\tseqNum=1\tnakCode=12\ttext=only BID and ASK may be posted",
        "ackId=1\tseqNum=1\tnakCode=10",
    ];
    assert_posts_answered(&node, "FEED", "SYM1", answers, dir.path());
    node.stop(Duration::from_secs(10));
}

/// LSEG's ETA Consumer posts every 5 s to `item` of `service` at `node`: on the item's
/// stream (`-post`, stream 5), then, in another run, on its login stream naming an item
/// of its own (`-offpost`, stream 1). Each post's answer comes back on the stream it
/// came on: an Ack holding `answers[0]`, then one holding `answers[1]`.
fn assert_posts_answered(node: &Node, service: &str, item: &str, answers: [&str; 2], dir: &Path) {
    let port = node.addr.port().to_string();
    for (flag, stream, answer) in [("-post", 5, answers[0]), ("-offpost", 1, answers[1])] {
        // Its first post goes 5 s after the item's refresh.
        let acked = format!("Received AckMsg for stream {stream}");
        eta_consumer_until(
            &port,
            &["-s", service, "-mp", item, flag],
            &[&acked, answer],
            Duration::ZERO,
            dir,
        );
    }
}

/// How long a test waits for a Java provider's items to reach the node: its JVM's start,
/// which on a busy machine running several of these tests at once takes tens of seconds,
/// plus the node's retries meanwhile. A bound, not a pause: the waits end at the item.
const JVM_START: u64 = 90;

/// LSEG's ETA Provider example listening on `port`, ending by itself after `seconds` (a
/// bound: the test kills it when done).
fn eta_provider(port: u16, seconds: u32, dir: &Path) -> JavaProc {
    JavaProc::start(
        "com.refinitiv.eta.examples.provider.Provider",
        &["-p", &port.to_string(), "-runtime", &seconds.to_string()],
        dir,
    )
}

/// LSEG's ETA Provider example on a free port, and a node started with `args` taking its
/// service, DIRECT_FEED (`--rssl-provider`), once the provider's TRI.N can be had through
/// the node (it connects, retrying while the provider's JVM starts): the node, the
/// provider and its port. The set-up of the tests with an interactive provider.
fn node_on_an_eta_provider(args: &[&str], dir: &Path) -> (Node, JavaProc, u16) {
    let port = common::free_port_for_tests();
    let provider = eta_provider(port, 300, dir);
    let at = format!("127.0.0.1:{port}");
    let mut all = args.to_vec();
    all.extend_from_slice(&["--rssl-provider", &at]);
    let node = Node::start(&all);
    common::wait_for_image(
        node.addr,
        "DIRECT_FEED",
        "TRI.N",
        Duration::from_secs(JVM_START),
    )
    .expect("the provider's item through the node");
    (node, provider, port)
}

/// A Java tool running beside the test, its standard output gathered as it comes;
/// killed when dropped.
struct JavaProc {
    child: std::process::Child,
    stdout: std::sync::Arc<std::sync::Mutex<String>>,
}

impl JavaProc {
    /// `main` pointed at 127.0.0.1:`port` (`-h`, `-p`), with `args` after them.
    fn start_on_loopback(main: &str, port: &str, args: &[&str], dir: &Path) -> JavaProc {
        let mut all = vec!["-h", "127.0.0.1", "-p", port];
        all.extend_from_slice(args);
        JavaProc::start(main, &all, dir)
    }

    fn start(main: &str, args: &[&str], dir: &Path) -> JavaProc {
        use std::io::Read;
        let mut child = spawn_java(main, args, dir, Stdio::null());
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut pipe = child.stdout.take().expect("stdout");
        let gathered = stdout.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]);
                gathered.lock().expect("output lock").push_str(&text);
            }
        });
        JavaProc { child, stdout }
    }

    /// Everything it has printed so far.
    fn output(&self) -> String {
        self.stdout.lock().expect("output lock").clone()
    }

    /// Waits until its output after byte `from` holds `needle`, and returns where the
    /// needle ends (to wait for what comes after it); or the whole output on timeout.
    fn wait_for(&self, needle: &str, from: usize, timeout: Duration) -> Result<usize, String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let out = self.output();
            if let Some(at) = out.get(from..).and_then(|rest| rest.find(needle)) {
                return Ok(from + at + needle.len());
            }
            if std::time::Instant::now() > deadline {
                return Err(out);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for JavaProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_eta_niprovider_publishes_to_native_subscribers() {
    let cfg = common::TempConfig::new("nip-posts", "[posts]\nservices = [\"NI_PUB\"]\n");
    let mut node = Node::start(&["--config", cfg.path()]);
    let dir = workdir();
    let port = node.addr.port().to_string();
    let _nip = JavaProc::start_on_loopback(
        "com.refinitiv.eta.examples.niprovider.NIProvider",
        &port,
        &["-mp", "TRI.N", "-runtime", "300"],
        dir.path(),
    );
    common::wait_for_image(node.addr, "NI_PUB", "TRI.N", Duration::from_secs(JVM_START))
        .expect("the NIProvider's item");
    // Its values as a native subscriber sees them, then its updates (one a second).
    let addr = node.addr_str();
    let out = common::run(
        &[
            "subscribe",
            "--node",
            &addr,
            "--service",
            "NI_PUB",
            "TRI.N",
            "--count",
            "3",
        ],
        Duration::from_secs(30),
    );
    let text = &out.stdout;
    assert!(text.contains("REFRESH NI_PUB/TRI.N"), "{text}");
    assert!(
        text.contains("BID=0.99") && text.contains("DIVPAYDATE=2010-10-22"),
        "{text}"
    );
    assert!(text.contains("UPDATE  NI_PUB/TRI.N"), "{text}");
    // A post to its service is refused at once: it has no stream to take one on.
    let out = common::run(
        &[
            "post",
            "--node",
            &addr,
            "--service",
            "NI_PUB",
            "TRI.N",
            "BID=1.5",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(1), "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("a non-interactive RSSL provider takes no posts"),
        "{said}"
    );
    node.stop(Duration::from_secs(10));
}

/// NIProvPerf publishes 10 items at 1,000 updates/s to `source`; ConsPerf reads them
/// from `reader` in its steady state: every refresh, the updates, and a latency. (Every ConsPerf
/// here writes its statistics each second: its steady state starts when they first
/// find every image, and with the default 5 s a steady state of 5 s or less often
/// never starts.)
fn niprovperf_to_consperf(source: &Node, reader: &Node) {
    let dir = workdir();
    write_item_list(dir.path(), 1..=10);
    let _nip = JavaProc::start_on_loopback(
        "com.refinitiv.eta.perftools.niprovperf.NIProvPerf",
        &source.addr.port().to_string(),
        &[
            "-itemFile",
            "items.xml",
            "-itemCount",
            "10",
            "-updateRate",
            "1000",
            "-runTime",
            "120",
        ],
        dir.path(),
    );
    common::wait_for_image(
        reader.addr,
        "DIRECT_FEED",
        "RDT10",
        Duration::from_secs(JVM_START),
    )
    .expect("NIProvPerf's items where ConsPerf reads");
    let out = consperf(&reader.addr.port().to_string(), &[], dir.path());
    let count = |what: &str| -> u64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(what))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in:\n{out}"))
    };
    // One image per item: none taken again (as after a gap), then the updates.
    assert_eq!(count("Refreshes received: "), 10, "{out}");
    let updates = count("Updates received: ");
    assert!(
        updates > 1000,
        "{updates} updates in a steady state of {CONSPERF_STEADY_SECS} s at 1,000/s:\n{out}"
    );
    assert!(
        out.contains("Latency avg (usec):"),
        "no latency measured:\n{out}"
    );
}

#[test]
fn niprovperf_through_a_node_to_consperf() {
    let cfg = rdm_config("");
    let mut node = Node::start(&["--config", cfg.path().to_str().expect("utf-8 path")]);
    niprovperf_to_consperf(&node, &node);
    node.stop(Duration::from_secs(10));
}

#[test]
fn niprovperf_on_a_source_node_to_consperf_on_an_edge_across_the_backbone() {
    let cfg = rdm_config("");
    let cfg = cfg.path().to_str().expect("utf-8 path");
    let ch = common::channel(80);
    let start = |role: &str, name: &str| {
        let mut node = Node::start(&[
            "--config",
            cfg,
            "--backbone",
            &ch,
            "--role",
            role,
            "--name",
            name,
        ]);
        node.proc
            .wait_for_line(&format!("backbone: {role} on"), Duration::from_secs(20));
        node
    };
    let mut source = start("source", "src");
    let mut edge = start("edge", "edge");
    niprovperf_to_consperf(&source, &edge);
    edge.stop(Duration::from_secs(10));
    source.stop(Duration::from_secs(10));
}

#[test]
fn niprovperf_on_an_upstream_node_to_consperf_on_a_node_it_feeds() {
    let cfg = rdm_config("");
    let cfg = cfg.path().to_str().expect("utf-8 path");
    let mut top = Node::start(&["--config", cfg, "--name", "top"]);
    let upstream = top.addr_str();
    let mut below = Node::start(&["--config", cfg, "--upstream", &upstream, "--name", "below"]);
    niprovperf_to_consperf(&top, &below);
    below.stop(Duration::from_secs(10));
    top.stop(Duration::from_secs(10));
}

#[test]
fn an_interactive_provider_restarts_and_its_items_recover() {
    use tickwire_client::{Event, RequestOptions};
    use tickwire_proto::{DataState, StreamState};
    let dir = workdir();
    // The node serves the provider's service: a subscriber's request goes to it.
    let (mut node, provider, port) = node_on_an_eta_provider(&[], dir.path());
    let mut sub = common::subscriber(node.addr);
    sub.subscribe("DIRECT_FEED", "TRI.N", RequestOptions::default())
        .expect("subscribe");
    let ok = |e: &Event| matches!(e, Event::Refresh { name, state, .. } if name == "TRI.N" && state.data == DataState::Ok);
    common::expect_event(&mut sub, Duration::from_secs(10), "a refresh", ok);
    common::expect_event(
        &mut sub,
        Duration::from_secs(10),
        "an update",
        |e| matches!(e, Event::Update { name, .. } if name == "TRI.N"),
    );
    // The provider goes: the item goes suspect, its stream stays open.
    drop(provider);
    common::expect_event(
        &mut sub,
        Duration::from_secs(20),
        "a suspect status",
        |e| matches!(e, Event::Status { state, .. } if state.data == DataState::Suspect && state.stream == StreamState::Open),
    );
    // It comes back on the same port: a new image, ok again, and updates.
    let _provider = eta_provider(port, 300, dir.path());
    common::expect_event(
        &mut sub,
        Duration::from_secs(JVM_START),
        "a refresh after the restart",
        ok,
    );
    common::expect_event(
        &mut sub,
        Duration::from_secs(10),
        "an update after the restart",
        |e| matches!(e, Event::Update { name, .. } if name == "TRI.N"),
    );
    node.stop(Duration::from_secs(10));
}

#[test]
fn an_interactive_provider_started_long_after_the_node_is_served() {
    let port = common::free_port_for_tests();
    let dir = workdir();
    // Three heartbeats pass while the node retries a provider that is not there.
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, "[limits]\nheartbeat_ms = 100\n").unwrap();
    let at = format!("127.0.0.1:{port}");
    let mut node = Node::start(&["--config", cfg.to_str().unwrap(), "--rssl-provider", &at]);
    // Retries after 200, 400 and 800 ms: 1.4 s, fourteen heartbeats, have passed.
    node.proc
        .wait_for_line("again in 1600 ms", Duration::from_secs(30));
    let _provider = eta_provider(port, 300, dir.path());
    common::wait_for_image(
        node.addr,
        "DIRECT_FEED",
        "TRI.N",
        Duration::from_secs(JVM_START),
    )
    .expect("the late provider's item through the node");
    let log = node.proc.log();
    assert!(!log.contains("nothing received"), "{log}");
    node.stop(Duration::from_secs(10));
}

#[test]
fn provperf_through_a_node_to_consperf() {
    let dir = workdir();
    let port = common::free_port_for_tests().to_string();
    let _provperf = JavaProc::start(
        "com.refinitiv.eta.perftools.provperf.ProvPerf",
        &["-p", &port, "-updateRate", "1000", "-runTime", "120"],
        dir.path(),
    );
    let cfg = rdm_config(&format!(
        "[[rssl.providers]]\naddress = \"127.0.0.1:{port}\"\n"
    ));
    let mut node = Node::start(&["--config", cfg.path().to_str().expect("utf-8 path")]);
    common::wait_for_image(
        node.addr,
        "DIRECT_FEED",
        "RDT0",
        Duration::from_secs(JVM_START),
    )
    .expect("ProvPerf's items through the node");
    write_item_list(dir.path(), 0..10);
    let node_port = node.addr.port().to_string();
    let out = consperf(&node_port, &[], dir.path());
    assert!(out.contains("Refreshes received: 10"), "{out}");
    assert!(
        out.contains("Latency avg (usec):"),
        "no latency measured:\n{out}"
    );
    node.stop(Duration::from_secs(10));
}

#[test]
fn consperf_over_websocket_reads_the_source_directory_and_items() {
    let (mut node, ws) = Node::start_ws(&[]);
    let dir = workdir();
    let names: Vec<String> = (1..=10).map(|i| format!("RDT{i}")).collect();
    let mut feed = direct_feed(&node, &names, "200", dir.path());
    write_item_list(dir.path(), 1..=10);
    let port = ws.rsplit(':').next().expect("port").to_string();
    let out = consperf(
        &port,
        &["-connType", "websocket", "-pl", "tr_json2"],
        dir.path(),
    );
    assert!(out.contains("Refreshes received: 10"), "{out}");
    let updates: u64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Updates received: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(updates > 0, "no updates over WebSocket:\n{out}");
    feed.kill();
    node.stop(Duration::from_secs(10));
}

#[test]
fn an_rssl_login_is_held_to_the_users_file() {
    let dir = workdir();
    let feed = common::hash_line("feed-token-0123456789", true);
    let reader = common::hash_line("reader-token-0123456789", true);
    let users = dir.path().join("users.toml");
    std::fs::write(
        &users,
        format!(
            "[users.feed]\n{feed}\npublish = [\"FEED\"]\n\
             [users.reader]\n{reader}\nsubscribe = [\"FEED\"]\n"
        ),
    )
    .expect("users file");
    let cfg = dir.path().join("node.toml");
    let write_cfg = |anonymous: &str| {
        std::fs::write(
            &cfg,
            format!("[security]\nusers_file = {users:?}\nanonymous = \"{anonymous}\"\n"),
        )
        .expect("config")
    };
    // A user the file does not know, with no secret: refused, with the reason.
    write_cfg("none");
    let mut node = Node::start(&["--config", cfg.to_str().expect("utf-8 path")]);
    let port = node.addr.port().to_string();
    let out = eta_consumer_until(
        &port,
        &["-s", "FEED", "-mp", "SYM1", "-uname", "mallory"],
        &["Closed/Suspect"],
        Duration::ZERO,
        dir.path(),
    );
    assert!(
        !out.contains("Received Login Response for Username: mallory\nLoginRefresh"),
        "{out}"
    );
    node.stop(Duration::from_secs(10));
    // Anonymous subscribers allowed: the same login reads the feed.
    write_cfg("subscribe");
    let mut node = Node::start(&["--config", cfg.to_str().expect("utf-8 path")]);
    let addr = node.addr_str();
    let mut feed_proc = common::publish_as(
        "feed",
        "feed-token-0123456789",
        &addr,
        &["--items", "3", "--rate", "20"],
    );
    common::wait_for_image(node.addr, "FEED", "SYM2", Duration::from_secs(10)).expect("the feed");
    let port = node.addr.port().to_string();
    // Data for an anonymous subscriber.
    eta_consumer_until(
        &port,
        &["-s", "FEED", "-mp", "SYM1", "-uname", "mallory"],
        &["22/BID:"],
        Duration::ZERO,
        dir.path(),
    );
    // A login by authentication token (name type 5) is the user whose token it is;
    // a token no user has is refused, not taken for an anonymous login.
    for (token, wanted) in [
        ("reader-token-0123456789", "22/BID:"),
        ("nobody-token-0123456789", "Closed/Suspect"),
    ] {
        let args = ["-s", "FEED", "-mp", "SYM1", "-at", token];
        let out = eta_consumer_until(&port, &args, &[wanted], Duration::ZERO, dir.path());
        assert_eq!(out.contains("22/BID:"), wanted == "22/BID:", "{out}");
    }
    feed_proc.kill();
    node.stop(Duration::from_secs(10));
}

#[test]
fn the_watchlist_consumer_recovers_its_item_across_a_node_restart() {
    let port = common::free_port_for_tests();
    let listen = format!("127.0.0.1:{port}");
    let mut node = Node::start(&["--listen", &listen]);
    let mut feed = start_publisher(&node, "DIRECT_FEED", 3, 50, false);
    let dir = workdir();
    let consumer = JavaProc::start_on_loopback(
        "com.refinitiv.eta.valueadd.examples.watchlistconsumer.WatchlistConsumer",
        &port.to_string(),
        &["-s", "DIRECT_FEED", "-mp", "SYM1", "-runTime", "120"],
        dir.path(),
    );
    let wait = |needle: &str, from: usize, secs: u64| {
        consumer
            .wait_for(needle, from, Duration::from_secs(secs))
            .unwrap_or_else(|out| panic!("no {needle:?} after byte {from} in:\n{out}"))
    };
    let at = wait("DefaultMsgCallback Refresh ItemName: SYM1", 0, 60);
    let at = wait("State: Open/Ok", at, 5);
    let at = wait("DefaultMsgCallback Update ItemName: SYM1", at, 10);
    // The node goes: the watchlist tells the item is suspect and reconnects by itself.
    node.proc.kill();
    feed.kill();
    let at = wait("Connection down reconnecting", at, 20);
    let at = wait("DefaultMsgCallback Status -- ItemName: SYM1", at, 10);
    let at = wait("Open/Suspect", at, 5);
    // A new node on the same port and its publisher: the watchlist logs in again,
    // re-requests the item and gets a new image, then updates.
    let mut node = Node::start(&["--listen", &listen]);
    let _feed = start_publisher(&node, "DIRECT_FEED", 3, 50, false);
    let at = wait("DefaultMsgCallback Refresh ItemName: SYM1", at, 60);
    let at = wait("State: Open/Ok", at, 5);
    wait("DefaultMsgCallback Update ItemName: SYM1", at, 10);
    assert!(
        !consumer.output().contains("Exception"),
        "{}",
        consumer.output()
    );
    node.stop(Duration::from_secs(10));
}

#[test]
fn the_eta_consumer_reads_a_tls_node_over_the_sdks_encrypted_connection_type() {
    // The node's certificate, trusted by the consumer through a Java key store (what
    // the SDK's `-keyfile` takes), made by the JRE's keytool.
    let certs = common::Certs::new("rssl-encrypted");
    let (mut node, _ws) = certs.start_node("");
    let dir = empty_workdir();
    let store = dir.path().join("trust.jks");
    let keytool = Command::new("keytool")
        .args(["-importcert", "-noprompt", "-alias", "node", "-storepass"])
        .arg("changeit")
        .arg("-file")
        .arg(certs.cert())
        .arg("-keystore")
        .arg(&store)
        .output()
        .expect("run keytool (part of the JRE .ci/test installs)");
    assert!(keytool.status.success(), "keytool: {keytool:?}");
    let port = node.addr.port().to_string();
    // RIPC inside TLS: the handshake, the login, the dictionaries downloaded (no files
    // in its folder), and the node's own item with every field known (its refresh
    // printed whole within the second after its header).
    let out = eta_consumer_until(
        &port,
        &[
            "-connectionType",
            "encrypted",
            "-encryptedConnectionType",
            "socket",
            "-keyfile",
            store.to_str().expect("utf-8 path"),
            "-keypasswd",
            "changeit",
            "-s",
            "TICKWIRE",
            "-mp",
            "NODE",
        ],
        &[
            "Connected component version: tickwire",
            "State: Open/Ok/None - text: \"Login accepted by",
            "Field Dictionary complete",
            "NODE\nDOMAIN: MARKET_PRICE\nState: Open/Ok",
        ],
        Duration::from_secs(1),
        dir.path(),
    );
    assert!(!out.contains("not found in dictionary"), "{out}");
    assert!(!out.contains("Exception"), "{out}");
    node.stop(Duration::from_secs(10));
}

#[test]
fn posts_reach_an_interactive_provider_and_its_acks_come_back() {
    let dir = workdir();
    let cfg = rdm_config("[posts]\nservices = [\"DIRECT_FEED\"]\n");
    let config = ["--config", cfg.path().to_str().expect("utf-8 path")];
    let (mut node, provider, _) = node_on_an_eta_provider(&config, dir.path());
    // The consumer's posts (the off-stream one for OFFPOST) go through the node to the
    // provider, whose answers come back: an Ack, and a Nak with the provider's code and
    // reason (it takes no posts for items it has not been asked for).
    let answers = [
        "ackId=1\tseqNum=1\n",
        "ackId=1\tseqNum=1\tnakCode=10\ttext=Received an off-stream post message for an unknown item",
    ];
    assert_posts_answered(&node, "DIRECT_FEED", "TRI.N", answers, dir.path());
    let said = provider.output();
    for expected in [
        "Received an on-stream post for item= TRI.N",
        "Received an off-stream item post (item=OFFPOST)",
    ] {
        assert!(
            said.contains(expected),
            "the provider did not say {expected:?}:\n{said}"
        );
    }
    node.stop(Duration::from_secs(10));
}
