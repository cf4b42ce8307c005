//! Node trees with real processes: nodes fed over TCP by upstream nodes
//! (`tickwire node --upstream HOST:PORT[,HOST:PORT...]`), on loopback.

mod common;

use common::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{code, DataState, StreamState};

const T: Duration = Duration::from_secs(20);

/// A node fed by `upstreams` (in order), once it is listening.
fn downstream(upstreams: &[SocketAddr], name: &str, extra: &[&str]) -> Node {
    let list: Vec<String> = upstreams.iter().map(|a| a.to_string()).collect();
    let list = list.join(",");
    let mut args = vec!["--upstream", &list, "--name", name];
    args.extend_from_slice(extra);
    Node::start(&args)
}

/// Waits until the node's figures satisfy `pred`.
fn wait_for_figures(node: &Node, what: &str, pred: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + T;
    let mut last = serde_json::Value::Null;
    while Instant::now() < deadline {
        last = node_figures(node);
        if pred(&last) {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "no {what} in the figures within {T:?}: {last}\n--- node\n{}",
        node.proc.log()
    );
}

fn is_suspect(e: &Event) -> bool {
    matches!(e, Event::Status { state, .. }
        if state.stream == StreamState::Open && state.data == DataState::Suspect)
}

#[test]
fn a_chain_of_three_nodes_serves_every_level_in_order_and_each_knows_its_chain() {
    let a = Node::start(&["--name", "top"]);
    let b = downstream(&[a.addr], "middle", &[]);
    let c = downstream(&[b.addr], "leaf", &[]);
    let _feed = start_publisher(&a, "FEED", 20, 400, false);
    wait_for_image(c.addr, "FEED", "SYM19", T).unwrap_or_else(|e| {
        panic!(
            "{e}\n--- leaf\n{}\n--- middle\n{}",
            c.proc.log(),
            b.proc.log()
        )
    });
    // Every update of every item reaches the leaf, in order.
    let mut at_leaf = SequenceWatcher::new(c.addr, 20);
    let mut at_middle = SequenceWatcher::new(b.addr, 5);
    let (updates, gaps) = at_leaf.follow(Duration::from_secs(3));
    eprintln!("leaf: {updates} updates, {gaps} gaps");
    assert!(updates > 300, "only {updates} updates at the leaf in 3 s");
    assert_eq!(gaps, 0);
    let (updates, gaps) = at_middle.follow(Duration::from_secs(1));
    assert!(updates > 20 && gaps == 0, "{updates} updates, {gaps} gaps");
    // Each node knows the chain above it; the leaf's says where it is fed from.
    wait_for_figures(&c, "the whole chain", |f| {
        let path = f["TW_PATH"].as_str().unwrap_or("");
        let names: Vec<&str> = path
            .split('>')
            .map(|p| p.rsplit_once('#').map_or("", |(n, _)| n))
            .collect();
        names == ["leaf", "middle", "top"]
    });
    let f = node_figures(&c);
    assert!(
        f["TW_UPSTREAM"]
            .as_str()
            .unwrap_or("")
            .starts_with("middle ("),
        "{f}"
    );
    // The upstream's own figures item is its own, not passed down.
    assert_eq!(
        node_figures(&b)["TW_PATH"]
            .as_str()
            .map(|p| p.starts_with("middle#")),
        Some(true)
    );
}

#[test]
fn a_killed_upstream_makes_streams_suspect_and_the_link_moves_to_the_next_one() {
    let first = Node::start(&["--name", "primary"]);
    let second = Node::start(&["--name", "standby"]);
    let mut feed1 = start_publisher(&first, "FEED", 5, 100, false);
    let _feed2 = start_publisher(&second, "FEED", 5, 100, false);
    let edge = downstream(&[first.addr, second.addr], "edge", &[]);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = watching_sym0(&edge);
    wait_for_figures(&edge, "the primary as upstream", |f| {
        f["TW_UPSTREAM"]
            .as_str()
            .unwrap_or("")
            .starts_with("primary (")
    });

    first.proc.signal(libc::SIGKILL);
    feed1.kill();
    let suspect = expect_event(&mut sub, T, "open/suspect", is_suspect);
    let Event::Status { state, .. } = suspect else {
        unreachable!()
    };
    assert_eq!(state.code, code::CONNECTION_LOST, "{state:?}");
    // The standby's image returns the stream to ok, then its updates flow.
    expect_ok_refresh(&mut sub, T, "a refresh from the standby");
    expect_event(&mut sub, T, "an update after the move", |e| {
        matches!(e, Event::Update { .. })
    });
    wait_for_figures(&edge, "the standby as upstream", |f| {
        f["TW_UPSTREAM"]
            .as_str()
            .unwrap_or("")
            .starts_with("standby (")
    });
}

#[test]
fn an_upstream_that_comes_back_gets_the_whole_watchlist_asked_again() {
    let port = free_port_for_tests();
    let listen = format!("127.0.0.1:{port}");
    let upstream_addr: SocketAddr = listen.parse().expect("address");
    let top = Node::start(&["--listen", &listen, "--name", "top"]);
    let mut feed = start_publisher(&top, "FEED", 10, 100, false);
    let edge = downstream(&[upstream_addr], "edge", &[]);
    wait_for_feed_image(&edge, "edge", "SYM9");
    let mut sub = subscribed_to_feed(edge.addr, 10);
    let mut refreshed = 0;
    expect_event(&mut sub, T, "ten refreshes", |e| {
        refreshed += matches!(e, Event::Refresh { .. }) as usize;
        refreshed == 10
    });

    let mut top = top;
    top.proc.signal(libc::SIGKILL);
    top.proc.wait_exit(T);
    feed.kill();
    let mut suspect = 0;
    expect_event(&mut sub, T, "every stream suspect", |e| {
        suspect += is_suspect(e) as usize;
        suspect == 10
    });
    // Back on the same port (a new process): every stream is asked for again and
    // returns to ok with the new image; nothing in between was reported as ok data.
    let top = Node::start(&["--listen", &listen, "--name", "top-again"]);
    let _feed = start_publisher(&top, "FEED", 10, 100, false);
    let mut back: HashMap<String, u32> = HashMap::new();
    expect_event(&mut sub, T, "ten refreshes, ok", |e| {
        if let Event::Refresh {
            name, state, seq, ..
        } = e
        {
            assert_eq!(state.data, DataState::Ok, "{e:?}");
            back.insert(name.clone(), *seq);
        }
        if let Event::Update { name, seq, .. } = e {
            assert!(
                back.contains_key(name),
                "an update of {name} before its new image"
            );
            back.insert(name.clone(), *seq);
        }
        back.len() == 10
    });
    let (updates, gaps) = SequenceWatcher::of(sub, back).follow(Duration::from_secs(2));
    assert!(updates > 20 && gaps == 0, "{updates} updates, {gaps} gaps");
}

#[test]
fn a_node_fed_by_itself_or_by_a_node_it_feeds_is_refused_with_the_reason() {
    // Itself.
    let port = free_port_for_tests();
    let listen = format!("127.0.0.1:{port}");
    let mut alone = Node::start(&["--listen", &listen, "--upstream", &listen, "--name", "self"]);
    alone.proc.wait_for_line("loop refused: node \"self\"", T);
    alone.proc.wait_for_line("logging in to itself", T);

    // Two nodes, each the other's upstream: whichever links second is refused, and
    // its link says why.
    let (p1, p2) = (free_port_for_tests(), free_port_for_tests());
    let (l1, l2) = (format!("127.0.0.1:{p1}"), format!("127.0.0.1:{p2}"));
    let mut one = Node::start(&["--listen", &l1, "--upstream", &l2, "--name", "one"]);
    let mut two = Node::start(&["--listen", &l2, "--upstream", &l1, "--name", "two"]);
    let deadline = Instant::now() + T;
    loop {
        let (log1, log2) = (one.proc.log(), two.proc.log());
        let refused_at = |log: &str| log.contains("loop refused: node");
        let told =
            |log: &str| log.contains("login rejected by the node") && log.contains("loop refused");
        if (refused_at(&log1) && told(&log2)) || (refused_at(&log2) && told(&log1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no loop refused\n--- one\n{log1}\n--- two\n{log2}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        one.is_running() && two.is_running(),
        "both nodes keep serving"
    );
}

#[test]
fn a_stopped_downstream_node_does_not_slow_its_upstream_and_catches_up_when_resumed() {
    // The top node conflates for a peer as soon as 64 KiB wait for it, so the stop
    // below outlasts what the sockets' buffers hold and conflation shows.
    let cfg = TempConfig::new(
        "tree-top",
        "[slow_consumer]\nconflate_above_bytes = 65536\n",
    );
    let top = Node::start(&["--name", "top", "--config", cfg.path()]);
    let _feed = start_publisher(&top, "FEED", 20, 20_000, false);
    let mut stopped = downstream(&[top.addr], "stopped", &[]);
    wait_for_feed_image(&stopped, "downstream", "SYM19");
    let mut behind = SequenceWatcher::new(stopped.addr, 20);
    let (updates, gaps) = behind.follow(Duration::from_secs(1));
    assert!(updates > 100 && gaps == 0, "{updates} updates, {gaps} gaps");

    // Stopped for 3 s (under the 15 s in which three missed heartbeats drop it): the
    // top node conflates for it and its own subscriber keeps the full rate.
    stopped.proc.signal(libc::SIGSTOP);
    let mut direct = SequenceWatcher::new(top.addr, 20);
    let (updates, gaps) = direct.follow(Duration::from_secs(3));
    stopped.proc.signal(libc::SIGCONT);
    eprintln!("direct subscriber while the downstream node was stopped: {updates} updates");
    assert!(
        updates > 5_000 && gaps == 0,
        "{updates} updates, {gaps} gaps"
    );
    // Resumed: its subscriber catches up, conflated updates counting for what they
    // stand for, never a gap.
    let (updates, gaps) = behind.follow(Duration::from_secs(3));
    eprintln!(
        "after resuming: {updates} updates, {gaps} gaps, {} conflated",
        behind.conflated
    );
    assert!(updates > 100 && gaps == 0, "{updates} updates, {gaps} gaps");
    // What the top node conflated for the stopped one reached its subscriber as such.
    assert!(behind.conflated > 0, "no conflated update after the stop");
    assert!(stopped.is_running());
}

/// A service that a local publisher and the upstream link both carry: the link's
/// copy is left out (the local publisher keeps it, the link's other services go on),
/// and no connection slot is lost to it. Before, the node closed the link's
/// in-process connection, gave its id to the next login, and the link took that
/// login's Welcome as its own: the client waited for ever.
#[test]
fn a_service_both_a_local_publisher_and_the_upstream_carry_costs_no_login_its_welcome() {
    let top_port = free_port_for_tests();
    let top_addr: SocketAddr = format!("127.0.0.1:{top_port}").parse().unwrap();
    // The downstream node first, its upstream not up yet, and a local FEED on it.
    let mut pop = downstream(&[top_addr], "pop", &[]);
    let _local = start_publisher(&pop, "FEED", 3, 10, false);
    wait_for_image(pop.addr, "FEED", "SYM2", T).expect("the local FEED");
    // Then the upstream, with FEED and OTHER: the link comes up and announces both.
    let top = Node::start(&["--listen", &top_addr.to_string(), "--name", "top"]);
    let _up_feed = start_publisher(&top, "FEED", 3, 10, false);
    let _up_other = start_publisher(&top, "OTHER", 3, 10, false);
    pop.proc
        .wait_for_line("service \"FEED\" is already published by", T);
    // The logins, before anything else touches the node.

    // ...and every login gets its Welcome (each within the connect timeout).
    for n in 0..30 {
        let mut sub = subscriber(pop.addr);
        sub.subscribe("FEED", "SYM0", RequestOptions::default())
            .unwrap_or_else(|e| panic!("login {n}: {e}\n{}", pop.proc.log()));
        expect_event(&mut sub, T, "the local FEED's refresh", |e| {
            matches!(e, Event::Refresh { .. })
        });
    }
    // The link's copy was left out, not the link: its other service is served.
    assert!(
        pop.proc
            .log()
            .contains("service not taken from an in-process peer"),
        "{}",
        pop.proc.log()
    );
    wait_for_image(pop.addr, "OTHER", "SYM1", T).expect("the upstream's OTHER");
}
