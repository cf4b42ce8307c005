//! The backbone with real processes: source and edge nodes, each with its own embedded
//! Aeron media driver, on UDP multicast over loopback (a group and port of their own
//! per test, so tests run side by side).

mod common;

use common::*;
use std::time::Duration;
use tickwire_client::Event;
use tickwire_proto::{DataState, StreamState};

/// A node on the backbone, once it has joined it.
fn backbone_node(channel: &str, role: &str, name: &str) -> Node {
    let mut node = Node::start(&["--backbone", channel, "--role", role, "--name", name]);
    node.proc.wait_for_line(&format!("backbone: {role} on"), T);
    node
}

/// A backbone node whose media driver runs in a thread of its own (`[backbone]
/// driver = "thread"`), not in its event loop (the default).
fn backbone_node_with_a_driver_thread(channel: &str, role: &str, name: &str) -> (Node, TempConfig) {
    let config = TempConfig::new(
        &format!("driver-thread-{name}"),
        "[backbone]\ndriver = \"thread\"\n",
    );
    let mut node = Node::start(&[
        "--config",
        config.path(),
        "--backbone",
        channel,
        "--role",
        role,
        "--name",
        name,
    ]);
    node.proc.wait_for_line("run by the driver's own thread", T);
    node.proc.wait_for_line(&format!("backbone: {role} on"), T);
    (node, config)
}

const T: Duration = Duration::from_secs(20);

/// The config files of a source and of an edge (`TAG-source`, `TAG-edge`) that share the
/// `[backbone]` lines `section`.
fn source_and_edge_configs(tag: &str, section: &str) -> (TempConfig, TempConfig) {
    let config = |role: &str| {
        TempConfig::new(
            &format!("{tag}-{role}"),
            &format!("[backbone]\nrole = \"{role}\"\n{section}"),
        )
    };
    (config("source"), config("edge"))
}

/// A node started with `config`, whose `[backbone]` makes it a `role`, once it has
/// joined the backbone.
fn configured_backbone_node(config: &TempConfig, role: &str, name: &str) -> Node {
    let mut node = Node::start(&["--config", config.path(), "--name", name]);
    node.proc.wait_for_line(&format!("backbone: {role} on"), T);
    node
}

/// Waits (up to T) for an update on `sub`, which is waiting for `what`.
fn expect_an_update(sub: &mut tickwire_client::Subscriber, what: &str) {
    expect_event(sub, T, what, |e| matches!(e, Event::Update { .. }));
}

/// Waits until `edge`'s figures list the source `name` among those it hears.
fn wait_until_the_edge_hears(edge: &Node, name: &str) {
    let listed = format!("{name} (");
    let deadline = std::time::Instant::now() + T;
    while !node_figures(edge)["TW_BB_SOURCES"]
        .as_str()
        .is_some_and(|s| s.contains(&listed))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the edge never saw {name}\n--- edge\n{}",
            edge.proc.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The source `sub` is served from was killed: its stream goes suspect, then the
/// standby's image brings data ok again.
fn expect_suspect_then_the_standbys_image(sub: &mut tickwire_client::Subscriber) {
    expect_event(
        sub,
        T,
        "open/suspect",
        |e| matches!(e, Event::Status { state, .. } if state.data == DataState::Suspect),
    );
    expect_ok_refresh(sub, T, "a refresh from the standby");
}

#[test]
fn a_publisher_on_the_source_reaches_subscribers_on_two_edges() {
    let ch = channel(40);
    let source = backbone_node(&ch, "source", "src");
    // Both placements of the media driver: edge-a's in a thread of its own.
    let (edge_a, _config) = backbone_node_with_a_driver_thread(&ch, "edge", "edge-a");
    let edge_b = backbone_node(&ch, "edge", "edge-b");
    assert!(
        edge_b.proc.log().contains("run by the event loop"),
        "{}",
        edge_b.proc.log()
    );
    let _feed = start_publisher(&source, "FEED", 20, 200, false);
    for edge in [&edge_a, &edge_b] {
        wait_for_feed_image(edge, "edge", "SYM3");
    }
    // The command-line subscriber on an edge: a refresh, then updates.
    let out = run(
        &[
            "subscribe",
            "--node",
            &edge_b.addr_str(),
            "--json",
            "--count",
            "10",
            "--timeout",
            "15",
            "SYM7",
        ],
        T,
    );
    assert_eq!(out.code(), Some(0), "{out:?}");
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["type"], "refresh", "{}", out.stdout);
    assert_eq!(lines[0]["state"]["data"], "ok", "{}", out.stdout);
    assert!(
        lines[1..].iter().all(|l| l["type"] == "update"),
        "{}",
        out.stdout
    );
    // Sequence numbers pass through from the publisher, in order, none missing.
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "sequence gap or disorder: {seqs:?}"
    );
    assert_serves(edge_a.addr, "FEED", "SYM11", 5);
    // Each node's figures show its part in the backbone.
    let f = node_figures(&edge_a);
    assert_eq!(f["TW_BB_ROLE"], "edge", "{f}");
    assert!(
        f["TW_BB_SOURCES"]
            .as_str()
            .unwrap_or("")
            .starts_with("src ("),
        "{f}"
    );
    assert!(f["TW_BB_BYTES_IN"].as_u64().unwrap_or(0) > 0, "{f}");
    let f = node_figures(&source);
    assert_eq!(f["TW_BB_ROLE"], "source", "{f}");
    assert_eq!(f["TW_BB_EDGES"], 2, "{f}");

    // An edge joining late is imaged from the source's cache.
    let late = backbone_node(&ch, "edge", "edge-late");
    wait_for_feed_image(&late, "late edge", "SYM7");
    assert_serves(late.addr, "FEED", "SYM7", 3);

    // An edge killed with SIGKILL says nothing: the source forgets it once it has
    // been silent for three liveness times, and releases what only it wanted.
    let mut edge_b = edge_b;
    edge_b.proc.signal(libc::SIGKILL);
    edge_b.proc.wait_exit(T);
    let deadline = std::time::Instant::now() + T;
    loop {
        let f = node_figures(&source);
        if f["TW_BB_EDGES"] == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the killed edge is still known: {f}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_killed_source_makes_edge_streams_suspect_within_the_liveness_time_and_its_return_recovers_them(
) {
    let ch = channel(41);
    let source = backbone_node(&ch, "source", "src");
    let edge = backbone_node(&ch, "edge", "edge");
    let mut feed = start_publisher(&source, "FEED", 5, 100, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = watching_sym0(&edge);

    source.proc.signal(libc::SIGKILL);
    feed.kill();
    let killed = std::time::Instant::now();
    expect_event(&mut sub, Duration::from_secs(10), "open/suspect", |e| {
        matches!(e, Event::Status { state, .. }
            if state.stream == StreamState::Open && state.data == DataState::Suspect)
    });
    let took = killed.elapsed();
    // The liveness time is 1 s; the rest is slack for a loaded machine, and the
    // figure measured is in the log of this test.
    eprintln!("suspect {took:?} after the source was killed");
    assert!(took < Duration::from_secs(5), "suspect only after {took:?}");

    let source = backbone_node(&ch, "source", "src-again");
    let _feed = start_publisher(&source, "FEED", 5, 100, false);
    expect_ok_refresh(&mut sub, T, "a refresh from the new source");
    expect_an_update(&mut sub, "an update after recovery");
}

#[test]
fn bad_backbone_settings_are_refused_with_the_key_and_the_allowed_values() {
    let out = run(
        &[
            "node",
            "--backbone",
            "udp://239.1.1.1:4000",
            "--role",
            "edge",
        ],
        T,
    );
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("backbone.channel"), "{}", out.stderr);
    let ch = "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1";
    let out = run(&["node", "--backbone", ch, "--role", "middle"], T);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("backbone.role") && out.stderr.contains("source, edge, both"),
        "{}",
        out.stderr
    );
    let out = run(&["node", "--backbone", ch], T);
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("--role"), "{}", out.stderr);
    // Each node runs its own media driver: shared memory reaches no other node.
    let out = run(&["node", "--backbone", "aeron:ipc", "--role", "edge"], T);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("backbone.channel") && out.stderr.contains("reaches no other node"),
        "{}",
        out.stderr
    );
}

#[test]
fn one_percent_loss_at_an_edge_is_recovered_by_aeron_with_no_gap_at_its_subscribers() {
    loss_is_recovered_without_a_gap(43, "0.01");
}

#[test]
fn a_tenth_of_a_percent_loss_at_an_edge_is_recovered_with_no_gap_either() {
    loss_is_recovered_without_a_gap(51, "0.001");
}

fn loss_is_recovered_without_a_gap(group: u8, rate: &str) {
    let ch = channel(group);
    let source = backbone_node(&ch, "source", "src");
    // The edge's media driver drops `rate` of the data frames it receives (Aeron's own
    // loss generator); Aeron's NAKs and retransmissions fill every hole.
    let edge = Node::start_with(
        &["--backbone", &ch, "--role", "edge", "--name", "lossy-edge"],
        |c| {
            c.env("AERON_UDP_CHANNEL_INCOMING_INTERCEPTORS", "loss")
                .env(
                    "AERON_UDP_CHANNEL_TRANSPORT_BINDINGS_LOSS_ARGS",
                    format!("rate={rate}|recv-msg-mask=0x2|seed=42"),
                );
        },
    );
    let _feed = start_publisher(&source, "FEED", 50, 2000, false);
    wait_for_feed_image(&edge, "edge", "SYM49");
    let (updates, gaps) = SequenceWatcher::new(edge.addr, 50).follow(Duration::from_secs(4));
    eprintln!("{updates} updates through loss {rate}, {gaps} gaps");
    assert!(updates > 1000, "only {updates} updates in 4 s");
    assert_eq!(gaps, 0, "{updates} updates");
    // The holes were there, and were filled by NAKs and retransmissions (at 0.1% a
    // few seconds may hold too few frames for a drop to be certain).
    if rate == "0.01" {
        let f = node_figures(&edge);
        assert!(f["TW_BB_NAKS"].as_u64().unwrap_or(0) > 0, "{f}");
        let f = node_figures(&source);
        assert!(f["TW_BB_RETX"].as_u64().unwrap_or(0) > 0, "{f}");
    }
}

#[test]
fn a_stopped_edge_slows_neither_the_source_nor_the_other_edge_and_recovers_when_resumed() {
    let ch = channel(45);
    let source = backbone_node(&ch, "source", "src");
    let healthy = backbone_node(&ch, "edge", "healthy");
    // Aeron's client and driver time each other out after 1-2 s here (10 s by
    // default), so the stop below outlasts them as a long one would.
    let mut stopped = Node::start_with(
        &["--backbone", &ch, "--role", "edge", "--name", "stopped"],
        |c| {
            c.env("AERON_DRIVER_TIMEOUT", "1000")
                .env("AERON_CLIENT_LIVENESS_TIMEOUT", "2000000000");
        },
    );
    stopped.proc.wait_for_line("backbone: edge on", T);
    let _feed = start_publisher(&source, "FEED", 20, 2000, false);
    for e in [&healthy, &stopped] {
        wait_for_feed_image(e, "edge", "SYM19");
    }
    // The stopped edge has every item flowing to it, then stops reading anything.
    let mut watcher = subscribed_to_feed(stopped.addr, 20);
    expect_an_update(&mut watcher, "data at the edge to stop");
    stopped.proc.signal(libc::SIGSTOP);
    let (updates, gaps) = SequenceWatcher::new(healthy.addr, 20).follow(Duration::from_secs(4));
    stopped.proc.signal(libc::SIGCONT);
    eprintln!("healthy edge while the other was stopped: {updates} updates, {gaps} gaps");
    // 20 items at 2,000 updates/s in all: well over half must arrive in 4 s.
    assert!(updates > 4000, "only {updates} updates at the healthy edge");
    assert_eq!(gaps, 0);
    // The stopped edge, resumed: what it missed is gone, so its streams say suspect,
    // then it re-images them and they are ok again (its Aeron link rebuilt if the
    // stop outlasted Aeron's own timeouts).
    expect_event(
        &mut watcher,
        T,
        "open/suspect after the stop",
        |e| matches!(e, Event::Status { state, .. } if state.data == DataState::Suspect),
    );
    expect_event(
        &mut watcher,
        T,
        "a new image",
        |e| matches!(e, Event::Refresh { state, .. } if state.data == DataState::Ok),
    );
    expect_an_update(&mut watcher, "updates again");
}

/// An edge watching SYM0 from src-1 (the only source yet), then src-2 up with the same
/// service (a hot standby with its own publisher), each source with its publisher.
struct WithAStandby {
    first: Node,
    feed_1: Proc,
    edge: Node,
    sub: tickwire_client::Subscriber,
    _second: (Node, Proc),
}

fn with_a_standby(group: u8) -> WithAStandby {
    let ch = channel(group);
    let first = backbone_node(&ch, "source", "src-1");
    let edge = backbone_node(&ch, "edge", "edge");
    let feed_1 = start_publisher(&first, "FEED", 5, 100, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let sub = watching_sym0(&edge);
    let second = backbone_node(&ch, "source", "src-2");
    let feed_2 = start_publisher(&second, "FEED", 5, 100, false);
    wait_until_the_edge_hears(&edge, "src-2");
    WithAStandby {
        first,
        feed_1,
        edge,
        sub,
        _second: (second, feed_2),
    }
}

#[test]
fn an_edge_moves_to_the_standby_source_when_the_one_it_uses_is_killed() {
    // Every field bound: those left to `..` would be dropped (the nodes stopped) here.
    let WithAStandby {
        first,
        mut feed_1,
        mut sub,
        edge: _edge,
        _second: _standby,
    } = with_a_standby(47);
    first.proc.signal(libc::SIGKILL);
    feed_1.kill();
    let killed = std::time::Instant::now();
    expect_suspect_then_the_standbys_image(&mut sub);
    let took = killed.elapsed();
    eprintln!("back to ok {took:?} after the source was killed");
    expect_an_update(&mut sub, "updates from the standby");
}

/// A hot standby whose node stays up takes over when the first source's publisher
/// leaves: the items move to the source that still has the service up (they stayed
/// suspect until the publisher came back).
#[test]
fn an_edge_moves_to_the_standby_source_when_the_service_goes_down_at_the_one_it_uses() {
    let WithAStandby {
        first: _first,
        mut feed_1,
        mut sub,
        edge: _edge,
        _second: _standby,
    } = with_a_standby(75);
    feed_1.kill();
    expect_suspect_then_the_standbys_image(&mut sub);
    expect_an_update(&mut sub, "updates from the standby");
}

/// How many updates a second `node` sends its subscribers (the source role's stream of
/// an item among them), from its figures.
fn updates_out_per_s(node: &Node) -> u64 {
    node_figures(node)["TW_UPD_OUT"].as_u64().unwrap_or(0)
}

/// A source that was only paused, long enough for the edge to move its items to the
/// standby, is told the edge no longer takes them when it is heard again: it stops
/// taking them from its core and offering them (it went on for as long as the edge ran).
#[test]
fn a_paused_source_stops_sending_the_items_the_edge_moved_away_when_it_is_heard_again() {
    let ch = channel(76);
    let first = backbone_node(&ch, "source", "src-1");
    let edge = backbone_node(&ch, "edge", "edge");
    let _feed_1 = start_publisher(&first, "FEED", 5, 500, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = subscribed_to_feed(edge.addr, 5);
    expect_an_update(&mut sub, "an update");
    let deadline = std::time::Instant::now() + T;
    let busy = loop {
        // The figure is a rate over the node's last second: it comes once one has passed.
        let busy = updates_out_per_s(&first);
        if busy > 100 {
            break busy;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "src-1 sends {busy} updates/s to the edge"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let second = backbone_node(&ch, "source", "src-2");
    let _feed_2 = start_publisher(&second, "FEED", 5, 100, false);
    wait_until_the_edge_hears(&edge, "src-2");
    // Paused past the edge's liveness time (1 s): the items move to src-2.
    first.proc.signal(libc::SIGSTOP);
    expect_suspect_then_the_standbys_image(&mut sub);
    first.proc.signal(libc::SIGCONT);
    let deadline = std::time::Instant::now() + T;
    loop {
        let now = updates_out_per_s(&first);
        if now < busy / 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            std::time::Instant::now() < deadline,
            "src-1 still sends {now} updates/s (it sent {busy} to the edge)\n--- src-1\n{}\n--- edge\n{}",
            first.proc.log(),
            edge.proc.log()
        );
    }
}

/// A node that is both puts its own publishers' services on the backbone (it hears its
/// own source on the channel: once it took that source for another, the core refused
/// the services back from it and the source stopped putting them out) and serves the
/// other sources' services to its own subscribers.
#[test]
fn a_node_that_is_both_serves_its_own_services_to_the_edges_and_the_others_to_its_subscribers() {
    let ch = channel(74);
    let both = backbone_node(&ch, "both", "both");
    let _feed = start_publisher(&both, "FEED", 2, 200, false);
    let other = backbone_node(&ch, "source", "other");
    let _feed_2 = start_publisher(&other, "FEED2", 2, 200, false);
    let edge = backbone_node(&ch, "edge", "edge");
    wait_until_the_edge_hears(&edge, "both");
    wait_for_feed_image(&edge, "edge", "SYM1");
    // Updates for a second and more: the service stays up at the edge.
    assert_serves(edge.addr, "FEED", "SYM1", 150);
    assert_serves(edge.addr, "FEED2", "SYM1", 5);
    assert_serves(both.addr, "FEED2", "SYM1", 5);
    assert_serves(both.addr, "FEED", "SYM1", 5);
    let f = node_figures(&both);
    assert!(
        !f["TW_BB_SOURCES"].as_str().unwrap_or("").contains("both ("),
        "the node took its own source for one of its edge's: {f}"
    );
    assert!(
        !both.proc.log().contains("already published"),
        "{}",
        both.proc.log()
    );
}

/// The media driver's directories of this node process (in /dev/shm).
fn driver_dirs(pid: u32) -> Vec<std::path::PathBuf> {
    let prefix = format!("tickwire-aeron-{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_media_driver_directory_goes_with_a_clean_stop_and_a_killed_nodes_is_removed_by_the_next() {
    if !std::path::Path::new("/dev/shm").is_dir() {
        eprintln!("no /dev/shm: the driver directory is elsewhere; nothing to check");
        return;
    }
    let ch = channel(49);
    let mut stopped = backbone_node(&ch, "source", "stopped");
    let pid = stopped.proc.pid();
    assert_eq!(
        driver_dirs(pid).len(),
        1,
        "the running node's driver directory"
    );
    assert!(stopped.stop(T).is_some_and(|s| s.success()));
    assert!(driver_dirs(pid).is_empty(), "left behind by a clean stop");

    let mut killed = backbone_node(&ch, "source", "killed");
    let pid = killed.proc.pid();
    killed.proc.signal(libc::SIGKILL);
    killed.proc.wait_exit(T);
    assert_eq!(driver_dirs(pid).len(), 1, "SIGKILL leaves it");
    // The next node to start on this machine removes it (in a parallel test run that
    // may be another test's node: any of them does).
    let _next = backbone_node(&ch, "edge", "next");
    let deadline = std::time::Instant::now() + T;
    while !driver_dirs(pid).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(driver_dirs(pid).is_empty(), "the next node removed it");
}

#[test]
fn junk_on_the_backbone_channel_is_ignored_and_the_edge_keeps_serving() {
    // Forged messages stay inside a network namespace of the test's own.
    in_network_namespace(junk_is_ignored);
}

fn junk_is_ignored() {
    let ch = channel(53);
    let source = backbone_node(&ch, "source", "src");
    let mut edge = backbone_node(&ch, "edge", "edge");
    let _feed = start_publisher(&source, "FEED", 5, 200, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    // A rogue Aeron publisher on the data stream: random bytes, and random bytes behind
    // a valid data header, as messages of every size.
    let mut cfg = tickwire_backbone::LinkConfig::new(&ch);
    cfg.source = true;
    // Its own thread runs its driver: this loop only offers.
    cfg.placement = tickwire_backbone::DriverPlacement::Thread;
    let mut rogue = tickwire_backbone::Link::start(&cfg, Box::new(|| {})).expect("rogue link");
    let mut rng = Rng::new(7);
    let mut sent = 0;
    let deadline = std::time::Instant::now() + T;
    while sent < 2000 && std::time::Instant::now() < deadline {
        let len = (rng.next_u64() % 300) as usize;
        let mut msg = rng.bytes(len);
        if sent % 2 == 1 {
            let mut framed = Vec::new();
            tickwire_backbone::wire::data_header(&mut framed, rng.next_u64());
            framed.append(&mut msg);
            msg = framed;
        }
        let out = rogue.data_out().expect("a source link publishes");
        if tickwire_backbone::Outbox::offer(out, &msg) {
            sent += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(sent, 2000, "the rogue publisher could not send");
    edge.proc
        .wait_for_line("backbone: ignored a malformed message", T);
    assert!(edge.is_running(), "the edge died\n{}", edge.proc.log());
    assert_serves(edge.addr, "FEED", "SYM3", 5);
}

#[test]
fn where_there_is_no_multicast_a_source_and_an_edge_work_over_unicast() {
    // Data to the edge's address, requests to the source's: the same two lines in
    // both nodes' files.
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port());
    feed_reaches_edges_with_unicast_requests("unicast", &channel, &["edge"], "SYM2");
}

/// Without multicast, one source serves several edges by multi-destination-cast: each
/// edge's driver joins the source's control address with a port of its own, and both
/// edges' subscribers get the data; the requests go to the source over unicast.
#[test]
fn where_there_is_no_multicast_several_edges_join_a_source_by_multi_destination_cast() {
    let channel = format!(
        "aeron:udp?control=127.0.0.1:{}|control-mode=dynamic",
        free_udp_port()
    );
    feed_reaches_edges_with_unicast_requests("mdc", &channel, &["edge-a", "edge-b"], "SYM3");
}

/// A source node and edges named `edges` on a backbone whose data goes on `channel` and
/// whose requests go to the source over unicast (the same lines in every node's file):
/// once the source publishes FEED, each edge has the image of `name` and serves it.
fn feed_reaches_edges_with_unicast_requests(tag: &str, channel: &str, edges: &[&str], name: &str) {
    let section = format!(
        "channel = \"{channel}\"\nrequest_channel = \"aeron:udp?endpoint=127.0.0.1:{}\"\n",
        free_udp_port()
    );
    let (src_cfg, edge_cfg) = source_and_edge_configs(tag, &section);
    let source = configured_backbone_node(&src_cfg, "source", "src");
    let edges: Vec<Node> = edges
        .iter()
        .map(|edge| configured_backbone_node(&edge_cfg, "edge", edge))
        .collect();
    let _feed = start_publisher(&source, "FEED", 5, 200, false);
    for edge in &edges {
        wait_for_feed_image(edge, "edge", name);
        assert_serves(edge.addr, "FEED", name, 5);
    }
}

/// What an edge whose `[backbone]` section ends with `section` says when it refuses to
/// start, as it must.
fn refused_edge(tag: &str, section: &str) -> String {
    let cfg = TempConfig::new(tag, &format!("[backbone]\nrole = \"edge\"\n{section}"));
    let out = run(
        &["node", "--config", cfg.path(), "--listen", "127.0.0.1:0"],
        T,
    );
    assert_ne!(out.code(), Some(0));
    out.stderr
}

/// A multi-destination-cast channel without a unicast request channel is refused with
/// what to write.
#[test]
fn a_multi_destination_cast_channel_needs_a_request_channel() {
    let err = refused_edge(
        "mdc-no-requests",
        "channel = \"aeron:udp?control=127.0.0.1:40999|control-mode=dynamic\"\n",
    );
    assert!(err.contains("backbone.request_channel"), "{err}");
    assert!(err.contains("aeron:udp?endpoint=SOURCE_HOST"), "{err}");
}

/// Without multicast, an edge with a standby source (`standby_channel`,
/// `standby_request_channel`) receives both sources' multi-destination-cast and sends
/// its requests to both; when the source it uses is killed it moves to the standby, and
/// its subscriber sees suspect, then a refresh with data ok, then updates.
#[test]
fn without_multicast_an_edge_moves_to_its_standby_source_when_the_one_it_uses_is_killed() {
    let data = |p: u16| format!("aeron:udp?control=127.0.0.1:{p}|control-mode=dynamic");
    let requests = |p: u16| format!("aeron:udp?endpoint=127.0.0.1:{p}");
    let (a_data, a_req, b_data, b_req) = (
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
        free_udp_port(),
    );
    let source_cfg = |name: &str, d: u16, r: u16| {
        TempConfig::new(
            name,
            &format!(
                "[backbone]\nrole = \"source\"\nchannel = \"{}\"\nrequest_channel = \"{}\"\n",
                data(d),
                requests(r)
            ),
        )
    };
    let a_cfg = source_cfg("standby-src-a", a_data, a_req);
    let b_cfg = source_cfg("standby-src-b", b_data, b_req);
    let edge_cfg = TempConfig::new(
        "standby-edge",
        &format!(
            "[backbone]\nrole = \"edge\"\nchannel = \"{}\"\nrequest_channel = \"{}\"\nstandby_channel = \"{}\"\nstandby_request_channel = \"{}\"\n",
            data(a_data),
            requests(a_req),
            data(b_data),
            requests(b_req)
        ),
    );
    let first = configured_backbone_node(&a_cfg, "source", "src-1");
    let edge = configured_backbone_node(&edge_cfg, "edge", "edge");
    let mut feed_1 = start_publisher(&first, "FEED", 5, 100, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = watching_sym0(&edge);
    let second = configured_backbone_node(&b_cfg, "source", "src-2");
    let _feed_2 = start_publisher(&second, "FEED", 5, 100, false);
    wait_until_the_edge_hears(&edge, "src-2");
    first.proc.signal(libc::SIGKILL);
    feed_1.kill();
    expect_suspect_then_the_standbys_image(&mut sub);
    expect_an_update(&mut sub, "updates from the standby");
}

#[test]
fn a_standby_source_needs_both_of_its_channels() {
    let err = refused_edge(
        "standby-half",
        "channel = \"aeron:udp?control=127.0.0.1:40998|control-mode=dynamic\"\nrequest_channel = \"aeron:udp?endpoint=127.0.0.1:40997\"\nstandby_channel = \"aeron:udp?control=127.0.0.1:40996|control-mode=dynamic\"\n",
    );
    assert!(err.contains("backbone.standby_request_channel"), "{err}");
}

/// CPU time (user + system, every thread) of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // Fields after the command name (which may hold spaces), from field 3 on.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf with a constant name.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Share of one CPU a process uses over `window`.
fn cpu_share(pid: u32, window: Duration) -> f64 {
    let (t0, c0) = (std::time::Instant::now(), cpu_seconds(pid));
    std::thread::sleep(window);
    (cpu_seconds(pid) - c0) / t0.elapsed().as_secs_f64()
}

/// A node with nothing to do parks (the default `[backbone] idle = "adaptive"`): a
/// source alone, and a source and an edge that only exchange heartbeats, each well
/// under a tenth of a CPU (with `yield` each takes a whole one). The threshold is
/// generous, for a busy machine and a debug build: at rest a release build uses
/// about 0.5% (docs/BENCHMARKS.md, "What waiting costs").
#[test]
fn a_backbone_node_at_rest_uses_almost_no_cpu() {
    let ch = channel(55);
    let source = backbone_node(&ch, "source", "src");
    assert!(
        source.proc.log().contains("adaptive idle"),
        "{}",
        source.proc.log()
    );
    let (mut edge, _config) = backbone_node_with_a_driver_thread(&ch, "edge", "edge-t");
    // Past the start: the edge has heard the source (their heartbeats flow).
    edge.proc.wait_for_line("\"src\"", T);
    for (what, node) in [("source", &source), ("edge (driver thread)", &edge)] {
        let share = cpu_share(node.proc.pid(), Duration::from_secs(3));
        assert!(
            share < 0.10,
            "{what} at rest used {:.1}% of a CPU\n{}",
            share * 100.0,
            node.proc.log()
        );
    }
}
