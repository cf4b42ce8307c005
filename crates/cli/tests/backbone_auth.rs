//! An authenticated backbone (`[backbone] key_file`) with real processes: only nodes
//! holding the key are heard; forged, replayed and recorded messages are dropped and
//! counted; keys rotate without a restart. Forged messages are sent only inside a
//! network namespace the test makes.

mod common;

use common::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tickwire_backbone::auth::{Key, Keys, Lane, Mac, Sealer, TRAILER_LEN};
use tickwire_backbone::wire::{self, BackboneMessage};
use tickwire_backbone::{DriverPlacement, Link, LinkConfig, Outbox, Received};
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{
    encode_field_list, DataState, FieldList, Message, Real, Update, UpdateType, Value,
};

const T: Duration = Duration::from_secs(20);

/// A new key file's one key line, from `tickwire backbone keygen`.
fn keygen() -> String {
    keygen_with(&[])
}

/// The same, with `extra` arguments (`--mac hmac-sha256`).
fn keygen_with(extra: &[&str]) -> String {
    let args: Vec<&str> = ["backbone", "keygen"]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    let out = run(&args, T);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let keys: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(keys.len(), 1, "{}", out.stdout);
    Keys::parse(&out.stdout).expect("keygen writes a file that reads");
    keys[0].to_string()
}

/// A key file, rewritten atomically (a node never reads half of it).
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(name: &str, lines: &[&str]) -> KeyFile {
        let f = KeyFile(
            std::env::temp_dir().join(format!("tickwire-{}-{name}.keys", std::process::id())),
        );
        f.write(lines);
        f
    }

    fn write(&self, lines: &[&str]) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = self.0.with_extension("new");
        std::fs::write(&tmp, lines.join("\n") + "\n").unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, &self.0).unwrap();
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A node on the backbone with `key` (None: no key file), serving /metrics; once it has
/// joined.
fn node(ch: &str, role: &str, name: &str, key: Option<&KeyFile>) -> (Node, String, TempConfig) {
    let text = match key {
        Some(k) => format!("[backbone]\nkey_file = {:?}\n", k.path()),
        None => String::new(),
    };
    // Tests run side by side: the file is named after the channel's port too.
    let port = ch.rsplit(':').next().unwrap_or_default();
    let cfg = TempConfig::new(&format!("auth-{name}-{port}"), &text);
    let (mut node, http) = Node::start_ws(&[
        "--config",
        cfg.path(),
        "--backbone",
        ch,
        "--role",
        role,
        "--name",
        name,
    ]);
    node.proc.wait_for_line(&format!("backbone: {role} on"), T);
    (node, http, cfg)
}

/// Waits until the node at `http` has dropped messages for `reason` and `pred` holds.
fn wait_rejected(http: &str, reason: &str, pred: impl Fn(f64) -> bool) -> f64 {
    let sample = format!("tickwire_backbone_rejected_by_reason_total{{reason=\"{reason}\"}}");
    wait_for_metric(http, &sample, T, pred)
}

#[test]
fn nodes_without_the_key_are_not_heard_and_what_they_send_is_counted() {
    let ch = channel(71);
    let (a, b) = (keygen(), keygen());
    let (key_a, key_b) = (
        KeyFile::new("strangers-a", &[&a]),
        KeyFile::new("strangers-b", &[&b]),
    );
    let (source, _, _c1) = node(&ch, "source", "src", Some(&key_a));
    let (mut edge, edge_http, _c2) = node(&ch, "edge", "edge", Some(&key_a));
    let (other, other_http, _c3) = node(&ch, "source", "other-key", Some(&key_b));
    let (open, open_http, _c4) = node(&ch, "source", "no-key", None);
    let _feed = start_publisher(&source, "FEED", 3, 100, false);
    let _feed2 = start_publisher(&other, "FEED2", 3, 100, false);
    let _feed3 = start_publisher(&open, "FEED3", 3, 100, false);
    wait_for_feed_image(&edge, "edge", "SYM2");
    // The backbone's figures are taken once a second.
    wait_for_metric(&edge_http, "tickwire_backbone_authenticated", T, |v| {
        v == 1.0
    });
    wait_for_metric(&open_http, "tickwire_backbone_authenticated", T, |v| {
        v == 0.0
    });
    // The edge hears both strangers' heartbeats and data, and drops them.
    wait_rejected(&edge_http, "unknown_key", |v| v > 10.0);
    wait_rejected(&edge_http, "unsealed", |v| v > 10.0);
    // The strangers hear the edge's sealed requests and drop them too.
    wait_rejected(&other_http, "unknown_key", |v| v > 0.0);
    wait_rejected(&open_http, "no_key_file", |v| v > 0.0);
    let total = metric(&edge_http, "tickwire_backbone_rejected_total").unwrap();
    assert!(total >= 20.0, "{total}");
    let log = edge.proc.log();
    assert!(log.contains("source \"src\""), "{log}");
    for stranger in ["other-key", "no-key"] {
        assert!(
            !log.contains(&format!("source \"{stranger}\"")),
            "the edge took {stranger} as a source:\n{log}"
        );
    }
    assert!(
        wait_for_image(edge.addr, "FEED2", "SYM0", Duration::from_secs(2)).is_err(),
        "the edge serves a stranger's service"
    );
    assert_serves(edge.addr, "FEED", "SYM1", 3);
    assert!(edge.is_running());
}

#[test]
fn keys_rotate_without_a_restart_and_no_update_is_lost() {
    let ch = channel(72);
    // From an HMAC-SHA256 line (no MAC word, as key files written before BLAKE3 and
    // `keygen --mac hmac-sha256` have) to a BLAKE3 one: a rotation moves a backbone to
    // the other MAC too.
    let (old, new) = (keygen_with(&["--mac", "hmac-sha256"]), keygen());
    assert!(new.ends_with(" blake3") && old.split_whitespace().count() == 2);
    let (key_s, key_e) = (
        KeyFile::new("rotate-source", &[&old]),
        KeyFile::new("rotate-edge", &[&old]),
    );
    let (mut source, source_http, _c1) = node(&ch, "source", "src", Some(&key_s));
    let (mut edge, edge_http, _c2) = node(&ch, "edge", "edge", Some(&key_e));
    let old_id = &old[..8];
    // The start says which key signs and with which MAC (logged before it listens).
    let start = format!(
        "authenticated with the keys of {} (signing with key {old_id}, hmac-sha256)",
        key_s.0.display()
    );
    assert!(source.proc.log().contains(&start), "{}", source.proc.log());
    let _feed = start_publisher(&source, "FEED", 1, 200, false);
    wait_for_feed_image(&edge, "edge", "SYM0");
    let mut sub = subscriber(edge.addr);
    sub.subscribe("FEED", "SYM0", RequestOptions::default())
        .unwrap();
    let mut last_seq = match expect_event(&mut sub, T, "the refresh", |e| {
        matches!(e, Event::Refresh { .. })
    }) {
        Event::Refresh { seq, .. } => seq,
        _ => unreachable!(),
    };
    let new_id = &new[..8];
    // 1: the new key second everywhere; 2: first, the source before the edge (the
    // edge, still signing with the old key, is heard meanwhile); 3: the old one gone.
    let both = format!("signing with key {old_id} (hmac-sha256), accepting {old_id}, {new_id}");
    let steps = [
        (true, vec![old.as_str(), &new], both.clone()),
        (false, vec![old.as_str(), &new], both),
        (
            true,
            vec![new.as_str(), &old],
            format!("signing with key {new_id} (blake3)"),
        ),
        (
            false,
            vec![new.as_str(), &old],
            format!("signing with key {new_id} (blake3)"),
        ),
        (true, vec![new.as_str()], format!("accepting {new_id}")),
    ];
    for (at_source, lines, line) in steps {
        let (file, node) = if at_source {
            (&key_s, &mut source)
        } else {
            (&key_e, &mut edge)
        };
        file.write(&lines);
        node.proc.wait_for_line(&line, T);
        // Updates keep coming, in sequence, after each step.
        last_seq = updates_in_sequence(&mut sub, last_seq, 20);
    }
    key_e.write(&[&new]);
    edge.proc.wait_for_line(&format!("accepting {new_id}"), T);
    last_seq = updates_in_sequence(&mut sub, last_seq, 50);
    assert!(last_seq > 0);
    for http in [&source_http, &edge_http] {
        assert_eq!(
            metric(http, "tickwire_backbone_rejected_total"),
            Some(0.0),
            "{http}"
        );
    }
    // A file that no longer reads keeps the keys in use.
    key_e.write(&["not a key"]);
    edge.proc
        .wait_for_line("the key file changed but cannot be used", T);
    updates_in_sequence(&mut sub, last_seq, 20);
}

/// `n` more updates, each the next sequence number after `last`, no status between.
fn updates_in_sequence(sub: &mut tickwire_client::Subscriber, mut last: u32, n: usize) -> u32 {
    for _ in 0..n {
        match expect_event(sub, T, "an update", |_| true) {
            Event::Update { seq, .. } => {
                assert_eq!(seq, last.wrapping_add(1), "an update was lost or repeated");
                last = seq;
            }
            other => panic!("not an update: {other:?}"),
        }
    }
    last
}

/// A source's Opened, Heartbeat or Data message in `msg` (a sealed one's trailer taken
/// off).
fn unseal(msg: &[u8]) -> Option<BackboneMessage<'_>> {
    let body = msg.get(..msg.len().checked_sub(TRAILER_LEN)?)?;
    BackboneMessage::decode(body).ok()
}

/// What the attacker hears of the real source: its id, the stream carrying SYM1, and
/// every sealed message it sent (to replay).
#[derive(Default)]
struct Heard {
    source: Option<u64>,
    sym1: Option<u32>,
    sealed: Vec<Vec<u8>>,
}

fn listen(rogue: &mut Link, heard: &mut Heard) {
    rogue.drain(|kind, _session, msg| {
        if kind != Received::Data || msg.len() < 2 || msg[1] & wire::SEALED == 0 {
            return;
        }
        match unseal(msg) {
            Some(BackboneMessage::Heartbeat { source, .. }) => heard.source = Some(source),
            Some(BackboneMessage::Opened {
                stream,
                item: "SYM1",
                ..
            }) => heard.sym1 = Some(stream),
            _ => {}
        }
        if heard.sealed.len() < 2000 {
            heard.sealed.push(msg.to_vec());
        }
    });
}

/// The attacker's Data message: an update of `stream` that, on an unauthenticated
/// backbone, skipped the sequence check (conflation count 65,535) and reached every
/// subscriber with data state ok.
fn spoofed_update(source: u64, stream: u32) -> Vec<u8> {
    let fields = encode_field_list([
        (22, Value::Real(Real::new(1, -2))),
        (3, Value::Ascii("SPOOFED")),
    ]);
    let mut msg = Vec::new();
    wire::data_header(&mut msg, source);
    Message::Update(Update {
        stream_id: stream,
        seq: 7,
        update_type: UpdateType::Quote,
        do_not_conflate: false,
        conflation_count: u16::MAX,
        fields: FieldList::from_trusted(&fields),
    })
    .encode(&mut msg)
    .unwrap();
    msg
}

fn offer_all(rogue: &mut Link, msgs: &[Vec<u8>]) -> usize {
    let mut sent = 0;
    let deadline = Instant::now() + T;
    for m in msgs {
        while Instant::now() < deadline {
            let out = rogue.data_out().expect("the rogue publishes data");
            if out.offer(m) {
                sent += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    sent
}

fn is_spoofed(e: &Event) -> bool {
    let fields = match e {
        Event::Update { fields, .. } | Event::Refresh { fields, .. } => fields,
        _ => return false,
    };
    fields.get(3) == Some(Value::Ascii("SPOOFED"))
}

#[test]
fn forged_and_replayed_messages_are_dropped_and_a_dead_source_is_not_kept_alive() {
    in_network_namespace(forgeries);
}

fn forgeries() {
    let ch = channel(73);
    let key = keygen();
    let key_file = KeyFile::new("forgeries", &[&key]);
    let (source, source_http, _c1) = node(&ch, "source", "src", Some(&key_file));
    let (mut edge, edge_http, _c2) = node(&ch, "edge", "edge", Some(&key_file));
    let mut feed = start_publisher(&source, "FEED", 3, 200, false);
    wait_for_feed_image(&edge, "edge", "SYM0");

    // The attacker: an Aeron client on the channel, hearing the source's data and
    // sending its own, with no key.
    let mut cfg = LinkConfig::new(&ch);
    cfg.source = true;
    cfg.edge = true;
    cfg.placement = DriverPlacement::Thread;
    let mut rogue = Link::start(&cfg, Box::new(|| {})).expect("the rogue's link");
    let mut heard = Heard::default();
    // Once the attacker hears the source (its image of the source's data is up: what
    // was sent before is not heard), SYM1 is asked for: it hears which stream carries
    // it.
    let deadline = Instant::now() + T;
    while heard.source.is_none() && Instant::now() < deadline {
        listen(&mut rogue, &mut heard);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(heard.source.is_some(), "the rogue never heard the source");
    let mut sub = subscriber(edge.addr);
    sub.subscribe("FEED", "SYM1", RequestOptions::default())
        .unwrap();
    while (heard.sym1.is_none() || heard.source.is_none() || heard.sealed.len() < 50)
        && Instant::now() < deadline
    {
        listen(&mut rogue, &mut heard);
        std::thread::sleep(Duration::from_millis(10));
    }
    let (Some(source_id), Some(stream)) = (heard.source, heard.sym1) else {
        panic!("the rogue did not hear the source's Opened for SYM1");
    };

    // Forgeries: unsealed; sealed with a key of the same id but other bytes (a guess);
    // and every sealed message of the real source, replayed.
    let forged = spoofed_update(source_id, stream);
    let key_id = u32::from_str_radix(&key[..8], 16).unwrap();
    let mut guess = Sealer::new(1, tickwire_backbone::auth::wall_clock_ns());
    let wrong_key = Key::new(key_id, [0x5a; 32], Mac::Blake3);
    let mut msgs = vec![forged.clone(); 200];
    for _ in 0..200 {
        msgs.push(
            guess
                .seal(
                    &wrong_key,
                    Lane::Data,
                    &forged,
                    tickwire_backbone::auth::wall_clock_ns(),
                )
                .to_vec(),
        );
    }
    msgs.extend(heard.sealed.iter().cloned());
    let replays = heard.sealed.len() as f64;
    assert_eq!(offer_all(&mut rogue, &msgs), msgs.len());
    wait_rejected(&edge_http, "unsealed", |v| v >= 200.0);
    wait_rejected(&edge_http, "bad_mac", |v| v >= 200.0);
    wait_rejected(&edge_http, "replayed", |v| v >= replays);
    // The source's own messages put on the request stream, which the source reads: that
    // stream never heard their origin, so only the seal's lane refuses them.
    let mut up = 0;
    let deadline = Instant::now() + T;
    for m in &heard.sealed {
        while Instant::now() < deadline {
            if rogue.request_out().expect("the rogue asks").offer(m) {
                up += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(up, heard.sealed.len());
    wait_rejected(&source_http, "bad_mac", |v| v >= replays);
    // The subscriber of SYM1 saw none of it: what it has had since, and its next
    // updates (5 of them, however long a busy machine takes, within 20 s), stay in
    // sequence and none is the attacker's.
    let mut last = None;
    let mut updates = 0;
    let until = Instant::now() + Duration::from_secs(20);
    while updates < 5 && Instant::now() < until {
        let Ok(Some(e)) = sub.next_event(Duration::from_millis(50)) else {
            continue;
        };
        assert!(
            !is_spoofed(&e),
            "the forged update reached a subscriber: {e:?}"
        );
        if let Event::Update { seq, .. } = e {
            if let Some(l) = last {
                assert_eq!(seq, u32::wrapping_add(l, 1), "a replayed or lost update");
            }
            last = Some(seq);
            updates += 1;
        }
    }
    assert_eq!(
        updates, 5,
        "only {updates} updates reached the subscriber in 20 s"
    );

    // The source dies; the attacker keeps it "alive" with its replayed and forged
    // heartbeats. The edge's subscriber is told within the liveness time all the same.
    let heartbeats: Vec<Vec<u8>> = heard
        .sealed
        .iter()
        .filter(|m| matches!(unseal(m), Some(BackboneMessage::Heartbeat { .. })))
        .cloned()
        .collect();
    assert!(!heartbeats.is_empty());
    let mut forged_heartbeat = Vec::new();
    BackboneMessage::Heartbeat {
        source: source_id,
        name: "src",
        directory_version: 1,
    }
    .encode(&mut forged_heartbeat)
    .unwrap();
    let mut source = source;
    let _ = feed.kill();
    source.proc.kill();
    let killed = Instant::now();
    let mut suspect = None;
    while suspect.is_none() && killed.elapsed() < T {
        offer_all(&mut rogue, &heartbeats);
        offer_all(&mut rogue, std::slice::from_ref(&forged_heartbeat));
        if let Ok(Some(Event::Status { state, .. })) = sub.next_event(Duration::from_millis(50)) {
            if state.data == DataState::Suspect {
                suspect = Some(killed.elapsed());
            }
        }
    }
    let suspect = suspect.unwrap_or_else(|| {
        panic!(
            "the subscriber was never told its source died\n--- edge\n{}",
            edge.proc.log()
        )
    });
    // Liveness 1 s; the rest is the scheduler of a loaded 2-CPU machine.
    assert!(suspect < Duration::from_secs(5), "told after {suspect:?}");

    // 300 forged source ids: none is taken, and a new real source is used at once.
    let mut strangers = Vec::new();
    for id in 0..300u64 {
        let mut hb = Vec::new();
        BackboneMessage::Heartbeat {
            source: 0xbad0_0000 + id,
            name: "stranger",
            directory_version: 1,
        }
        .encode(&mut hb)
        .unwrap();
        strangers.push(hb);
    }
    assert_eq!(offer_all(&mut rogue, &strangers), 300);
    let (source2, _, _c3) = node(&ch, "source", "src2", Some(&key_file));
    let _feed2 = start_publisher(&source2, "FEED", 3, 200, false);
    expect_event(
        &mut sub,
        T,
        "SYM1 recovered from the new source",
        |e| matches!(e, Event::Refresh { state, .. } if state.data == DataState::Ok),
    );
    let log = edge.proc.log();
    assert!(!log.contains("\"stranger\""), "{log}");
    assert!(edge.is_running());
}
