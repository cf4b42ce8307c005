//! Posts (contributions) with real processes on loopback: `tickwire post` to a node
//! whose feed (`tickwire publish --accept-posts`) applies the posted quote, the answer
//! coming back, the refusals saying why, and posts going up an upstream link.

mod common;

use common::*;
use serde_json::Value;
use std::time::Duration;
use tickwire_client::{Event, RequestOptions};

const T: Duration = Duration::from_secs(20);

/// `tickwire publish --accept-posts` of SYM0..SYM2 (no updates of its own), once its
/// items can be had from the node.
fn posting_feed(node: &Node, accept: bool) -> Proc {
    let addr = node.addr_str();
    let mut args = vec!["publish", "--node", &addr, "--items", "3", "--rate", "0"];
    if accept {
        args.push("--accept-posts");
    }
    let p = Proc::spawn(&args);
    wait_for_image(node.addr, "FEED", "SYM2", T).expect("the feed's images");
    p
}

/// `tickwire post ... --json`: its exit code and its answer.
fn post(node: &Node, item: &str, fields: &[&str]) -> (Option<i32>, Value, String) {
    let addr = node.addr_str();
    let mut args = vec!["post", "--node", &addr, "--service", "FEED", "--json", item];
    args.extend_from_slice(fields);
    let out = run(&args, T);
    let answer = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    (out.code(), answer, out.stderr)
}

#[test]
fn a_posted_quote_is_acknowledged_and_reaches_every_subscriber_of_the_item() {
    let node = Node::start(&["--posts", "FEED"]);
    let _feed = posting_feed(&node, true);
    let mut sub = subscriber(node.addr);
    sub.subscribe("FEED", "SYM1", RequestOptions::default())
        .unwrap();
    expect_event(&mut sub, T, "the image", |e| {
        matches!(e, Event::Refresh { .. })
    });

    let (code, answer, stderr) = post(&node, "SYM1", &["BID=99.5", "ASK=99.75"]);
    assert_eq!(code, Some(0), "{answer} {stderr}");
    assert_eq!(answer["type"], "ack");
    assert_eq!(answer["ok"], true, "{answer}");

    // The feed applied it: an update with the posted prices, and the node's cache has them.
    let update = expect_event(&mut sub, T, "the posted quote", |e| {
        matches!(e, Event::Update { .. })
    });
    let Event::Update { fields, .. } = update else {
        unreachable!()
    };
    let price = |fid| fields.get(fid).map(|v| v.to_string());
    assert_eq!(price(22).as_deref(), Some("99.5000"));
    assert_eq!(price(25).as_deref(), Some("99.7500"));
    let addr = node.addr_str();
    let snap = run(
        &["subscribe", "--node", &addr, "--snapshot", "--json", "SYM1"],
        T,
    );
    let image: Value = serde_json::from_str(snap.stdout.trim()).unwrap();
    assert_eq!(image["fields"]["BID"], 99.5, "{image}");
    assert_eq!(image["fields"]["ASK"], 99.75, "{image}");
}

#[test]
fn refused_posts_exit_1_with_the_code_and_the_reason() {
    let node = Node::start(&["--posts", "FEED"]);
    let feed = posting_feed(&node, true);
    // The feed refuses what it cannot apply.
    let cases: [(&str, &[&str], &str, &str); 3] = [
        (
            "SYM1",
            &["BID=100", "ASK=99"],
            "InvalidContent",
            "above the ask",
        ),
        (
            "SYM1",
            &["TRDPRC_1=5"],
            "InvalidContent",
            "only BID and ASK",
        ),
        ("NOPE", &["BID=1"], "SymbolUnknown", "no such item"),
    ];
    for (item, fields, nak, why) in cases {
        let (code, answer, stderr) = post(&node, item, fields);
        assert_eq!(code, Some(1), "{answer} {stderr}");
        assert_eq!(answer["ok"], false, "{answer}");
        assert_eq!(answer["nak_code"], nak, "{answer}");
        assert!(answer["text"].as_str().unwrap().contains(why), "{answer}");
    }
    // A bad value never leaves the command line.
    let (code, _, stderr) = post(&node, "SYM1", &["BID=abc"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("\"abc\" is not a decimal number"),
        "{stderr}"
    );
    drop(feed);

    // A feed that does not take posts, and a node that does not take them for a service.
    let _plain = posting_feed(&node, false);
    // Its images may come from the node's cache before it is connected: until then the
    // service is down.
    let deadline = std::time::Instant::now() + T;
    let (code, answer) = loop {
        let (code, answer, _) = post(&node, "SYM1", &["BID=1"]);
        if answer["nak_code"] != "SourceDown" || std::time::Instant::now() > deadline {
            break (code, answer);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(1));
    assert_eq!(answer["nak_code"], "DeniedBySrc", "{answer}");
    assert!(answer["text"]
        .as_str()
        .unwrap()
        .contains("publisher does not take posts"));
    let closed = Node::start(&[]);
    let _feed = posting_feed(&closed, true);
    let (code, answer, _) = post(&closed, "SYM1", &["BID=1"]);
    assert_eq!(code, Some(1));
    assert_eq!(answer["nak_code"], "DeniedBySrc", "{answer}");
    assert!(
        answer["text"]
            .as_str()
            .unwrap()
            .contains("[posts] services"),
        "{answer}"
    );
}

#[test]
fn a_post_to_a_node_fed_upstream_goes_up_the_link_and_its_answer_comes_back() {
    let top = Node::start(&["--posts", "FEED", "--name", "top"]);
    let _feed = posting_feed(&top, true);
    let top_addr = top.addr_str();
    let edge = Node::start(&["--upstream", &top_addr, "--posts", "FEED", "--name", "edge"]);
    wait_for_image(edge.addr, "FEED", "SYM0", T).expect("the edge serves the feed");
    let mut sub = subscriber(edge.addr);
    sub.subscribe("FEED", "SYM0", RequestOptions::default())
        .unwrap();
    expect_event(&mut sub, T, "the image", |e| {
        matches!(e, Event::Refresh { .. })
    });

    let (code, answer, stderr) = post(&edge, "SYM0", &["BID=42.25"]);
    assert_eq!(
        code,
        Some(0),
        "{answer} {stderr}\n--- edge\n{}",
        edge.proc.log()
    );
    assert_eq!(answer["ok"], true);
    let update = expect_event(&mut sub, T, "the posted bid, through the link", |e| {
        matches!(e, Event::Update { .. })
    });
    let Event::Update { fields, .. } = update else {
        unreachable!()
    };
    assert_eq!(
        fields.get(22).map(|v| v.to_string()).as_deref(),
        Some("42.2500")
    );
    // A refusal from the top comes down with its code.
    let (code, answer, _) = post(&edge, "NOPE", &["BID=1"]);
    assert_eq!(code, Some(1));
    assert_eq!(answer["nak_code"], "SymbolUnknown", "{answer}");
}
