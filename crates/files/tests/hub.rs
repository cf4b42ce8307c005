//! A node's hub with a real spool: uploads and their refusals, who may send, see and
//! receive, and where sites are routed.

use sha2::{Digest, Sha256};
use std::time::Instant;
use tickwire_files::spool::Spool;
use tickwire_files::wire::{FilesMessage, Put, PutState, SiteState, Status};
use tickwire_files::{Hub, HubConfig, Output, Peer, Rights, Sender, SenderConfig};

const CLIENT: usize = 7;

/// The right to receive FILES (the first service of the hubs here), and nothing else.
const MAY_RECEIVE_FILES: Rights = Rights {
    publish: 0,
    subscribe: 1,
};

fn hub(dir: &std::path::Path, services: &[&str]) -> Hub {
    hub_at(dir, services, 1_790_000_000_000)
}

/// As [`hub`], its wall clock at `wall_ms` now.
fn hub_at(dir: &std::path::Path, services: &[&str], wall_ms: u64) -> Hub {
    let now = Instant::now();
    let spool = Spool::new(&dir.join("spool")).unwrap();
    let sender = Sender::new(SenderConfig::new("src"), now);
    let cfg = HubConfig::new("src", services.iter().map(|s| s.to_string()).collect());
    Hub::new(cfg, Some((sender, spool)), None, now, wall_ms, 42)
}

/// A hub that sends ("src"), with `cfg`, its sender's `sender` and its spool `spool`,
/// started at `now`.
fn sending_hub(cfg: HubConfig, sender: SenderConfig, spool: Spool, now: Instant) -> Hub {
    let sender = Sender::new(sender, now);
    Hub::new(cfg, Some((sender, spool)), None, now, 1_790_000_000_000, 42)
}

/// The config of a hub that sends ("src") FILES.
fn files_config() -> HubConfig {
    HubConfig::new("src", vec!["FILES".into()])
}

fn ms(millis: u64) -> std::time::Duration {
    std::time::Duration::from_millis(millis)
}

fn encode(m: &FilesMessage) -> Vec<u8> {
    let mut b = Vec::new();
    m.encode(&mut b).unwrap();
    b
}

/// `site`'s status of `transfer`: in `state`, having `have` chunks (none missing), for
/// `reason`.
fn site_status<'a>(
    transfer: u64,
    site: &'a str,
    state: SiteState,
    have: u32,
    reason: &'a str,
) -> FilesMessage<'a> {
    FilesMessage::Status(Status {
        transfer,
        site,
        state,
        have,
        missing: vec![],
        reason,
    })
}

/// `site` says it takes `service`.
fn present_msg<'a>(site: &'a str, service: &'a str) -> FilesMessage<'a> {
    FilesMessage::Present { site, service }
}

/// Bytes `data` of upload `request`, from `offset` on.
fn put_data(request: u32, offset: u64, data: &[u8]) -> FilesMessage<'_> {
    FilesMessage::PutData {
        request,
        offset,
        data,
    }
}

/// A Put of `data` named `name` in FILES, for `to` (none: every site), with its true
/// size and hash.
fn put_of<'a>(request: u32, name: &'a str, data: &[u8], to: Vec<&'a str>) -> Put<'a> {
    Put {
        request,
        service: "FILES",
        name,
        size: data.len() as u64,
        sha256: Sha256::digest(data).into(),
        to,
    }
}

/// A connection to the hub: its number, its user and the user's rights.
#[derive(Clone, Copy)]
struct Client<'a> {
    conn: usize,
    user: &'a str,
    rights: Rights,
}

/// alice, on the client connection, allowed everything.
const ALICE: Client<'static> = Client {
    conn: CLIENT,
    user: "alice",
    rights: Rights::ALL,
};

/// A connection below (4), of user edge, allowed to receive FILES.
const EDGE: Client<'static> = Client {
    conn: 4,
    user: "edge",
    rights: MAY_RECEIVE_FILES,
};

impl Client<'_> {
    fn send(&self, h: &mut Hub, m: &FilesMessage<'_>, now: Instant) {
        self.send_encoded(h, &encode(m), now);
    }

    fn send_encoded(&self, h: &mut Hub, body: &[u8], now: Instant) {
        h.handle(Peer::Conn(self.conn), self.user, self.rights, body, now);
    }

    /// `put`, then all of `data` in one message.
    fn upload_whole(&self, h: &mut Hub, put: Put<'_>, data: &[u8], now: Instant) {
        let request = put.request;
        self.send(h, &FilesMessage::Put(put), now);
        self.send(h, &put_data(request, 0, data), now);
    }
}

/// The messages the hub sends (not the end of a gone connection's: see below).
fn outputs(h: &mut Hub) -> Vec<Output> {
    let mut v = Vec::new();
    while let Some(o) = h.poll_output() {
        if !o.body.is_empty() {
            v.push(o);
        }
    }
    v
}

#[test]
fn a_gone_connections_messages_end_with_an_empty_one_after_all_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let q = encode(&FilesMessage::Query { request: 3 });
    h.handle(Peer::Conn(CLIENT), "bob", Rights::ALL, &q, Instant::now());
    h.handle_gone(CLIENT);
    let mut to_client = Vec::new();
    while let Some(o) = h.poll_output() {
        if o.to == Peer::Conn(CLIENT) {
            to_client.push(o.body);
        }
    }
    assert!(to_client.len() >= 2, "its report, then the end");
    assert!(to_client.last().unwrap().is_empty(), "the end comes last");
    assert!(to_client[..to_client.len() - 1]
        .iter()
        .all(|b| !b.is_empty()));
}

/// The upload answers sent to the client: (state, reason).
fn answers(h: &mut Hub) -> Vec<(PutState, String)> {
    outputs(h)
        .into_iter()
        .filter(|o| o.to == Peer::Conn(CLIENT))
        .filter_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::PutAnswer(a) => Some((a.state, a.reason.to_string())),
            _ => None,
        })
        .collect()
}

/// `f` of each entry of the reports among the hub's outputs.
fn reported<T>(h: &mut Hub, f: impl Fn(&tickwire_files::wire::ReportEntry<'_>) -> T) -> Vec<T> {
    outputs(h)
        .into_iter()
        .flat_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::Report { entries, .. } => entries.iter().map(&f).collect::<Vec<_>>(),
            _ => vec![],
        })
        .collect()
}

/// What a user who may see everything gets from a query: (transfer, name, site, state).
fn report(h: &mut Hub) -> Vec<(u64, String, String, String)> {
    query(h, Instant::now(), |e| {
        (
            e.transfer,
            e.name.to_string(),
            e.site.to_string(),
            e.state.to_string(),
        )
    })
}

/// alice's upload `request` of `data`, as `f{request}.csv` in `service` for edge1, with
/// its true hash.
fn put(h: &mut Hub, rights: Rights, request: u32, service: &str, data: &[u8]) {
    put_claiming(
        h,
        rights,
        request,
        service,
        data,
        Sha256::digest(data).into(),
    );
}

/// As [`put`], said to hash to `sha`.
fn put_claiming(
    h: &mut Hub,
    rights: Rights,
    request: u32,
    service: &str,
    data: &[u8],
    sha: [u8; 32],
) {
    let now = Instant::now();
    // A name of its own: a file of the same name replaces the one before.
    let name = format!("f{request}.csv");
    let put = Put {
        service,
        sha256: sha,
        ..put_of(request, &name, data, vec!["edge1"])
    };
    Client { rights, ..ALICE }.upload_whole(h, put, data, now);
}

fn publish(bit: u64) -> Rights {
    Rights {
        publish: bit,
        subscribe: 0,
    }
}

#[test]
fn uploads_need_the_right_to_publish_and_whole_checked_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES", "REF"]);
    let data = b"a,b,c\n1,2,3\n".to_vec();
    // May publish REF (bit 1) but not FILES (bit 0).
    put(&mut h, publish(0b10), 1, "FILES", &data);
    assert_eq!(
        answers(&mut h),
        vec![(
            PutState::Refused,
            "user \"alice\" may not publish service \"FILES\"".into()
        )]
    );
    // A hash that does not match what arrived.
    put_claiming(&mut h, publish(0b10), 2, "REF", &data, [0; 32]);
    let a = answers(&mut h);
    assert_eq!(a[0].0, PutState::Go);
    assert_eq!(
        a[1],
        (
            PutState::Refused,
            "the bytes received do not match the SHA-256 announced".into()
        )
    );
    // Bytes from the wrong offset (some were lost on the way).
    let now = Instant::now();
    let p = FilesMessage::Put(Put {
        request: 3,
        service: "REF",
        name: "g.csv",
        size: 10,
        sha256: [0; 32],
        to: vec![],
    });
    let alice_of_ref = Client {
        rights: publish(0b10),
        ..ALICE
    };
    alice_of_ref.send(&mut h, &p, now);
    alice_of_ref.send(&mut h, &put_data(3, 4, b"xyz"), now);
    let a = answers(&mut h);
    assert!(
        a[1].1
            .starts_with("bytes missing: the node has 0 and was sent bytes from 4"),
        "{a:?}"
    );
    // Nothing of the refused uploads stays in the spool.
    let spool = dir.path().join("spool");
    assert_eq!(
        spool_entries(&spool),
        vec![
            ("00000001.segment".to_string(), 0),
            ("queue.log".to_string(), 0)
        ]
    );
    // A good one is queued, with its manifest in the spool.
    put(&mut h, publish(0b10), 4, "REF", &data);
    let a = answers(&mut h);
    assert_eq!(a.last().unwrap().0, PutState::Queued, "{a:?}");
    let entries = spool_entries(&spool);
    assert_eq!(
        entries[0],
        ("00000001.segment".to_string(), data.len() as u64)
    );
    let log = std::fs::read_to_string(spool.join("queue.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("\"queued\":"), "{log}");
    assert!(log.contains("\"segment\":1"), "{log}");
}

/// The names and sizes of what is in a spool directory, sorted.
fn spool_entries(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut names: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    names.sort();
    names
}

#[test]
fn a_report_shows_only_the_services_a_user_may_see() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES", "REF"]);
    let data = b"x".to_vec();
    put(&mut h, Rights::ALL, 1, "FILES", &data);
    put(&mut h, Rights::ALL, 2, "REF", &data);
    outputs(&mut h);
    let query = encode(&FilesMessage::Query { request: 9 });
    // Each user on a connection of its own (one connection is answered once a gap).
    let seen = |h: &mut Hub, rights: Rights| -> Vec<String> {
        let conn = CLIENT + rights.subscribe.count_ones() as usize;
        h.handle(Peer::Conn(conn), "bob", rights, &query, Instant::now());
        reported(h, |e| e.service.to_string())
    };
    assert_eq!(seen(&mut h, Rights::ALL), vec!["FILES", "REF"]);
    let only_ref = Rights {
        publish: 0,
        subscribe: 0b10,
    };
    assert_eq!(seen(&mut h, only_ref), vec!["REF"]);
    assert!(seen(&mut h, Rights::default()).is_empty());
}

#[test]
fn with_an_fsync_policy_a_file_is_said_queued_only_once_the_spool_is_synced() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let spool = Spool::open(
        &dir.path().join("spool"),
        tickwire_files::inbox::Fsync::Batch,
    )
    .unwrap();
    let mut h = sending_hub(files_config(), SenderConfig::new("src"), spool, now);
    let data = b"a,b\n1,2\n".to_vec();
    put(&mut h, Rights::ALL, 1, "FILES", &data);
    let put_at = Instant::now();
    // Whole and checked, not yet on the disk: go, and no queued yet.
    let states = |a: Vec<(PutState, String)>| a.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    assert_eq!(states(answers(&mut h)), vec![PutState::Go]);
    let due = put_at + tickwire_files::inbox::BATCH_DELAY;
    assert!(h.poll_timeout().is_some_and(|at| at <= due));
    assert_eq!(h.stats().spool_syncs, 0);
    // Another file whole meanwhile shares the sync.
    put(&mut h, Rights::ALL, 2, "FILES", &data);
    assert_eq!(states(answers(&mut h)), vec![PutState::Go]);
    // Not in the log before their bytes are on the disk.
    let log = dir.path().join("spool/queue.log");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0);
    h.handle_timeout(due);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.lines().count(), 2, "{logged}");
    assert_eq!(
        states(answers(&mut h)),
        vec![PutState::Queued, PutState::Queued]
    );
    // The segment's bytes, the log, the segment's name: once for both files.
    assert_eq!(h.stats().spool_syncs, 3);
}

/// The reports sent: (connection, request, last).
fn reports(h: &mut Hub) -> Vec<(Peer, u32, bool)> {
    outputs(h)
        .into_iter()
        .filter_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::Report { request, last, .. } => Some((o.to, request, last)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_connection_flooding_status_queries_is_answered_once_a_gap_and_never_left_unanswered() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let data = b"x".to_vec();
    put(&mut h, Rights::ALL, 1, "FILES", &data);
    outputs(&mut h);
    let t0 = Instant::now();
    let ask = |h: &mut Hub, request: u32, now: Instant| {
        let q = encode(&FilesMessage::Query { request });
        h.handle(Peer::Conn(CLIENT), "bob", Rights::ALL, &q, now);
    };
    ask(&mut h, 0, t0);
    assert_eq!(reports(&mut h), vec![(Peer::Conn(CLIENT), 0, true)]);
    for r in 1..=10_000 {
        ask(&mut h, r, t0);
    }
    // None answered before the gap; the loop is told when to come back.
    assert!(reports(&mut h).is_empty());
    let due = t0 + tickwire_files::QUERY_GAP;
    assert!(h.poll_timeout().is_some_and(|at| at <= due));
    h.handle_timeout(due - ms(1));
    assert!(reports(&mut h).is_empty());
    // At the gap, the newest few, one walk of the record for all of them.
    h.handle_timeout(due);
    let answered: Vec<u32> = reports(&mut h).into_iter().map(|(_, r, _)| r).collect();
    assert_eq!(answered, (9_993..=10_000).collect::<Vec<_>>());
    // A connection that goes takes its waiting queries with it.
    ask(&mut h, 20_000, due);
    h.handle_gone(CLIENT);
    h.handle_timeout(due + tickwire_files::QUERY_GAP);
    assert!(reports(&mut h).is_empty());
}

#[test]
fn a_site_is_routed_only_where_its_user_may_receive_and_presence_goes_up_every_way_but_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let present = encode(&present_msg("edge1", "FILES"));
    // Not entitled to receive FILES: not a route, not told upward.
    h.handle(
        Peer::Conn(3),
        "eve",
        Rights::default(),
        &present,
        Instant::now(),
    );
    assert!(outputs(&mut h).is_empty());
    assert_eq!(h.stats().ignored, 1);
    EDGE.send_encoded(&mut h, &present, Instant::now());
    let ups: Vec<Peer> = outputs(&mut h).into_iter().map(|o| o.to).collect();
    assert_eq!(ups, vec![Peer::Upstream, Peer::Backbone]);
    // From the backbone: up the tree only, not back onto the backbone.
    h.handle(
        Peer::Backbone,
        "",
        Rights::default(),
        &present,
        Instant::now(),
    );
    let ups: Vec<Peer> = outputs(&mut h).into_iter().map(|o| o.to).collect();
    assert_eq!(ups, vec![Peer::Upstream]);
}

/// A small file of FILES queued by alice, its sending begun: its transfer, as her query
/// reports it.
fn one_file_queued(h: &mut Hub) -> u64 {
    let data = b"a,b\n".to_vec();
    put(h, Rights::ALL, 1, "FILES", &data);
    query_as(h, "alice", Instant::now(), |e| e.transfer)[0]
}

/// A connection whose right to receive a service was taken (the users file reloaded)
/// is no route for it from its next presence on, rather than until the route is
/// forgotten a minute later: what it says for the site is believed no longer.
#[test]
fn a_site_that_lost_its_right_to_receive_is_no_route_from_its_next_presence() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let transfer = one_file_queued(&mut h);
    let present = encode(&present_msg("edge1", "FILES"));
    let status = encode(&site_status(transfer, "edge1", SiteState::Receiving, 0, ""));
    let now = Instant::now();
    EDGE.send_encoded(&mut h, &present, now);
    let ignored = h.stats().ignored;
    EDGE.send_encoded(&mut h, &status, now);
    assert_eq!(h.stats().ignored, ignored, "routed: its status is taken");
    // Its next presence comes without the right.
    h.handle(Peer::Conn(4), "edge", Rights::default(), &present, now);
    let ignored = h.stats().ignored;
    h.handle(Peer::Conn(4), "edge", Rights::default(), &status, now);
    assert_eq!(h.stats().ignored, ignored + 1, "no longer routed");
}

/// Offers and chunks the hub sends down to `conn`.
fn sent_down(h: &mut Hub, conn: usize, now: Instant) -> usize {
    h.handle_timeout(now);
    while h.pump(now) {}
    outputs(h)
        .into_iter()
        .filter(|o| o.to == Peer::Conn(conn))
        .filter(|o| {
            matches!(
                FilesMessage::decode(&o.body),
                Ok(FilesMessage::Offer(_) | FilesMessage::Chunk { .. })
            )
        })
        .count()
}

/// A reload that takes rights away ends what they allowed at once, as it closes a
/// subscriber's streams and disconnects a publisher: a connection that may no longer
/// receive a service is no route for it though it never says it is there again (a
/// peer need not), and an upload whose user may no longer send its service is
/// withdrawn, its remaining bytes not taken.
#[test]
fn rights_taken_by_a_reload_end_routes_and_uploads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let t0 = Instant::now();
    let present = encode(&present_msg("edge1", "FILES"));
    EDGE.send_encoded(&mut h, &present, t0);
    // alice uploads 200 KB; half has come.
    let data = vec![7u8; 200_000];
    upload_to_edge1(&mut h, "big.bin", &data, 0..100_000, t0);
    let t1 = t0 + ms(200);
    assert!(sent_down(&mut h, 4, t1) > 0, "edge1 is routed down conn 4");
    // The users file is reloaded: edge may no longer receive FILES, alice no longer
    // send it.
    h.handle_rights(4, Rights::default(), &|_| true);
    h.handle_rights(CLIENT, MAY_RECEIVE_FILES, &|_| true);
    let a = answers(&mut h);
    assert_eq!(
        a,
        [(
            PutState::Refused,
            "user \"alice\" may no longer publish service \"FILES\" (the users file was reloaded)"
                .to_string()
        )]
    );
    upload(&mut h, &data, 100_000..200_000, t1);
    assert!(answers(&mut h).is_empty(), "the rest is not taken");
    // A file queued since (by a user who may) goes to edge1's other routes, not down
    // conn 4, which never said it was there again.
    put_whole(&mut h, 2, "next.csv", vec!["edge1"], b"x,y\n", t1);
    let t2 = t1 + ms(200);
    assert_eq!(sent_down(&mut h, 4, t2), 0);
}

/// A reload that takes a site from a user's `sites` ends its connection's route to
/// that site at once: the node passes on no Present for a site its peer may not speak
/// for, so without this the hub would believe what the peer says of that site (done,
/// failed) until the route was forgotten a minute later.
#[test]
fn a_site_a_reload_takes_from_a_user_is_no_route_of_its_connection_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let transfer = one_file_queued(&mut h);
    let now = Instant::now();
    let status = |site: &str| encode(&site_status(transfer, site, SiteState::Receiving, 0, ""));
    for site in ["edge1", "edge2"] {
        let present = encode(&present_msg(site, "FILES"));
        EDGE.send_encoded(&mut h, &present, now);
    }
    let ignored = h.stats().ignored;
    EDGE.send_encoded(&mut h, &status("edge2"), now);
    assert_eq!(h.stats().ignored, ignored, "routed: its status is taken");
    // The users file no longer lets edge speak for edge2.
    h.handle_rights(4, MAY_RECEIVE_FILES, &|site| site == "edge1");
    EDGE.send_encoded(&mut h, &status("edge2"), now);
    assert_eq!(h.stats().ignored, ignored + 1, "edge2 is no longer routed");
    EDGE.send_encoded(&mut h, &status("edge1"), now);
    assert_eq!(h.stats().ignored, ignored + 1, "edge1 still is");
}

#[test]
fn after_a_restart_the_report_lists_the_audit_logs_past_files_and_the_spools_queue_once() {
    use tickwire_files::audit::{PastFile, PastSite};
    use tickwire_files::{Delivery, Manifest};
    let dir = tempfile::tempdir().unwrap();
    let data = b"queued before the restart".to_vec();
    let queued = {
        let mut before = hub(dir.path(), &["FILES"]);
        put(&mut before, Rights::ALL, 1, "FILES", &data);
        queued_transfer(&mut before, "queued")
    };
    let past = |transfer: u64, name: &str, state: Delivery| PastFile {
        manifest: Manifest {
            transfer,
            sender: "src".into(),
            service: "FILES".into(),
            name: name.into(),
            size: 3,
            chunk_size: 0,
            sha256: [1; 32],
            expires_ms: 0,
            open: false,
            targets: vec![],
        },
        sites: vec![PastSite {
            site: "edge1".into(),
            state,
            since_ms: 1_700_000_000_000,
            reason: String::new(),
        }],
    };
    let mut after = hub(dir.path(), &["FILES"]);
    // The log also names the queued transfer (a crash before the spool forgot it): the
    // spool's queue wins.
    after.restore_history(vec![
        past(0x51, "old.csv", Delivery::Done),
        past(queued, "f1.csv", Delivery::Done),
    ]);
    assert_eq!(after.restore(Instant::now()).unwrap(), 1);
    let rows = report(&mut after);
    assert_eq!(
        rows,
        vec![
            (0x51, "old.csv".into(), "edge1".into(), "done".into()),
            // Not offered yet since the restart: its site, queued (as before it).
            (queued, "f1.csv".into(), "edge1".into(), "queued".into()),
        ]
    );
}

/// A hub that only receives (site `edge1` of FILES), its inbox syncing by `fsync`.
fn receiving_hub(
    dir: &std::path::Path,
    fsync: tickwire_files::inbox::Fsync,
    keep_records: usize,
    now: Instant,
) -> Hub {
    receiving_hub_of(dir, &["FILES"], fsync, keep_records, now)
}

/// As [`receiving_hub`], taking `services`.
fn receiving_hub_of(
    dir: &std::path::Path,
    services: &[&str],
    fsync: tickwire_files::inbox::Fsync,
    keep_records: usize,
    now: Instant,
) -> Hub {
    use tickwire_files::inbox::Inbox;
    use tickwire_files::{Receiver, ReceiverConfig};
    let services: Vec<String> = services.iter().map(|s| s.to_string()).collect();
    let inbox = Inbox::new(&dir.join("inbox"), fsync).unwrap();
    let receiver = Receiver::new(ReceiverConfig::new("edge1", services.clone()), now);
    let mut cfg = HubConfig::new("edge1", services);
    cfg.keep_records = keep_records;
    Hub::new(
        cfg,
        None,
        Some((receiver, inbox)),
        now,
        1_790_000_000_000,
        7,
    )
}

/// Transfer `t`, a file of one chunk named `name`, offered and sent whole to `h`.
fn send_whole(h: &mut Hub, t: u64, name: &str, now: Instant) {
    let data = format!("file {t}").into_bytes();
    offer_files(h, t, name, &data, now);
}

#[test]
fn a_site_that_only_receives_keeps_no_more_records_than_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut h = receiving_hub(dir.path(), tickwire_files::inbox::Fsync::Never, 3, now);
    for t in 1..=10u64 {
        send_whole(&mut h, t, &format!("f{t}.txt"), now);
    }
    assert_eq!(
        std::fs::read_dir(dir.path().join("inbox/FILES"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != ".tickwire-partial")
            .count(),
        10
    );
    let names: Vec<String> = report(&mut h).into_iter().map(|r| r.1).collect();
    assert_eq!(names, ["f8.txt", "f9.txt", "f10.txt"]);
}

/// A client that keeps to its windows (32 KiB here) brings a 512 KiB file whole; one
/// that sends beyond its window is refused.
#[test]
fn uploads_keep_to_their_window() {
    const WINDOW: u64 = 32 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let spool = Spool::new(&dir.path().join("spool")).unwrap();
    let mut cfg = files_config();
    cfg.upload_window = WINDOW;
    let mut h = sending_hub(cfg, SenderConfig::new("src"), spool, now);
    let data: Vec<u8> = (0..512 * 1024u32).map(|i| (i % 251) as u8).collect();
    let put_all = |request, name| FilesMessage::Put(put_of(request, name, &data, vec![]));
    ALICE.send(&mut h, &put_all(1, "windowed.bin"), now);
    let (mut sent, mut allowed, mut queued, mut answers_seen) = (0u64, 0u64, false, 0);
    while !queued && sent <= data.len() as u64 {
        for o in outputs(&mut h) {
            if let FilesMessage::PutAnswer(a) = FilesMessage::decode(&o.body).unwrap() {
                answers_seen += 1;
                match a.state {
                    PutState::Go | PutState::Progress => {
                        allowed = allowed.max(a.received + a.window)
                    }
                    PutState::Queued => queued = true,
                    other => panic!("{other:?}: {}", a.reason),
                }
            }
        }
        if queued {
            break;
        }
        assert!(sent < allowed, "no window left at {sent} bytes");
        let end = allowed.min(data.len() as u64).min(sent + 10_000);
        let d = put_data(1, sent, &data[sent as usize..end as usize]);
        ALICE.send(&mut h, &d, now);
        sent = end;
    }
    assert!(queued, "the upload was not queued ({sent} bytes sent)");
    // Go, a new window at least every window's bytes, Queued.
    assert!(
        answers_seen >= 2 + data.len() as u64 / WINDOW,
        "{answers_seen} answers"
    );

    // A client that does not keep to its window.
    ALICE.send(&mut h, &put_all(2, "greedy.bin"), now);
    let d = put_data(2, 0, &data[..WINDOW as usize + 1]);
    ALICE.send(&mut h, &d, now);
    let a = answers(&mut h);
    assert_eq!(a[0].0, PutState::Go, "{a:?}");
    assert_eq!(a[1].0, PutState::Refused, "{a:?}");
    assert!(a[1].1.starts_with("bytes beyond the window"), "{a:?}");
}

/// A receiving hub whose inbox syncs by `fsync`, and three one-chunk files for
/// `eod/` offered and sent to it (not yet committed: no turn has ended).
fn three_files_whole(
    dir: &std::path::Path,
    fsync: tickwire_files::inbox::Fsync,
    now: Instant,
) -> Hub {
    let mut h = receiving_hub(dir, fsync, 100, now);
    for t in 1..=3u64 {
        send_whole(&mut h, t, &format!("eod/f{t}.txt"), now);
    }
    h
}

fn in_eod(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("inbox/FILES/eod")).map_or(0, |d| d.count())
}

/// `always`: the files whole in one turn are each synced, renamed, and share one sync
/// of their directory when the turn ends (before, a directory sync each); nothing is
/// visible before.
#[test]
fn always_commits_the_files_of_a_turn_with_one_directory_sync() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut h = three_files_whole(dir.path(), tickwire_files::inbox::Fsync::Always, now);
    assert_eq!(in_eod(dir.path()), 0);
    assert_eq!(h.poll_timeout().map(|at| at <= now), Some(true));
    h.handle_timeout(now);
    assert_eq!(in_eod(dir.path()), 3);
    let c = h.inbox_counts().unwrap();
    // Three files, their directory, and the two directories made for them (FILES,
    // eod) each once into its parent.
    assert_eq!((c.syncs, c.renames), (6, 3), "{c:?}");
    assert_eq!(h.receiver_stats().unwrap().files, 3);
}

/// `batch`: the files wait up to 10 ms for others, then commit as `always` does.
#[test]
fn batch_commits_what_became_whole_within_its_delay() {
    use tickwire_files::inbox::{Fsync, BATCH_DELAY};
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let mut h = three_files_whole(dir.path(), Fsync::Batch, now);
    h.handle_timeout(now);
    assert_eq!(in_eod(dir.path()), 0, "committed before its delay");
    // The hub asks for a turn by then (its receiver may want one sooner).
    assert!(h.poll_timeout().is_some_and(|at| at <= now + BATCH_DELAY));
    h.handle_timeout(now + BATCH_DELAY - ms(1));
    assert_eq!(in_eod(dir.path()), 0);
    h.handle_timeout(now + BATCH_DELAY);
    assert_eq!(in_eod(dir.path()), 3);
    assert_eq!(h.inbox_counts().unwrap().syncs, 6);
}

/// The hub's messages to the backbone, decoded: (offers, chunks, cancels' reasons).
fn to_backbone(h: &mut Hub, now: Instant) -> (usize, usize, Vec<String>) {
    let (mut offers, mut chunks, mut cancels) = (0, 0, Vec::new());
    h.handle_timeout(now);
    while h.pump(now) {}
    for o in outputs(h).into_iter().filter(|o| o.to == Peer::Backbone) {
        match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::Offer(_) => offers += 1,
            FilesMessage::Chunk { .. } => chunks += 1,
            FilesMessage::Cancel { reason, .. } => cancels.push(reason.to_string()),
            _ => {}
        }
    }
    (offers, chunks, cancels)
}

/// Request 1: a Put of `size` bytes named `name` in FILES, for edge1.
fn put_to_edge1(h: &mut Hub, name: &str, size: usize, sha256: [u8; 32], now: Instant) {
    let put = Put {
        size: size as u64,
        sha256,
        ..put_of(1, name, &[], vec!["edge1"])
    };
    ALICE.send(h, &FilesMessage::Put(put), now);
}

/// Request 1: all of `data` named `name` in FILES, for edge1, with its true hash; and
/// its bytes `range`, as `upload` sends them.
fn upload_to_edge1(
    h: &mut Hub,
    name: &str,
    data: &[u8],
    range: std::ops::Range<usize>,
    now: Instant,
) {
    put_to_edge1(h, name, data.len(), Sha256::digest(data).into(), now);
    upload(h, data, range, now);
}

/// `range` of request 1's bytes, in messages of 50,000.
fn upload(h: &mut Hub, data: &[u8], range: std::ops::Range<usize>, now: Instant) {
    for at in range.clone().step_by(50_000) {
        let d = put_data(1, at as u64, &data[at..(at + 50_000).min(range.end)]);
        h.handle(Peer::Conn(CLIENT), "alice", Rights::ALL, &encode(&d), now);
    }
}

#[test]
fn an_upload_goes_to_its_sites_as_it_arrives_and_one_whose_hash_is_wrong_is_withdrawn() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let t0 = Instant::now();
    let present = present_msg("edge1", "FILES");
    h.handle(Peer::Backbone, "", Rights::default(), &encode(&present), t0);
    // 800 KB (50 chunks of 16 KiB) announced with a hash it does not have.
    let data = vec![7u8; 800_000];
    put_to_edge1(&mut h, "big.bin", data.len(), [0; 32], t0);
    upload(&mut h, &data, 0..400_000, t0);
    let t1 = t0 + ms(200);
    let (offers, chunks, cancels) = to_backbone(&mut h, t1);
    // Offered, and the 24 whole chunks it has go out before the rest is uploaded.
    assert!(offers >= 1);
    assert_eq!((chunks, cancels.len()), (24, 0));
    upload(&mut h, &data, 400_000..800_000, t1);
    let a = answers(&mut h);
    assert!(
        a.contains(&(
            PutState::Refused,
            "the bytes received do not match the SHA-256 announced".into()
        )),
        "{a:?}"
    );
    // The sites are told to drop it, and never got its last chunk.
    let (_, chunks, cancels) = to_backbone(&mut h, t1 + ms(200));
    assert_eq!(chunks, 0);
    assert_eq!(
        cancels,
        ["the upload failed: the bytes received do not match the SHA-256 announced"]
    );
    let r = report(&mut h);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].2.as_str(), r[0].3.as_str()), ("edge1", "failed"));
    // edge1 missed the Cancel (it was restarting): asking about the transfer, it is
    // told again.
    let t2 = t1 + std::time::Duration::from_secs(1);
    assert_edge1_asking_is_told_of_the_bad_hash(&mut h, r[0].0, 24, t2);
}

/// edge1, asking the hub about `transfer` (having `have` chunks of it) at `now`, is
/// told to drop it: its upload failed on its hash.
fn assert_edge1_asking_is_told_of_the_bad_hash(
    h: &mut Hub,
    transfer: u64,
    have: u32,
    now: Instant,
) {
    let asking = site_status(transfer, "edge1", SiteState::Receiving, have, "");
    h.handle(Peer::Backbone, "", Rights::default(), &encode(&asking), now);
    let (_, _, cancels) = to_backbone(h, now);
    assert_eq!(
        cancels,
        ["the upload failed: the bytes received do not match the SHA-256 announced"]
    );
}

#[test]
fn an_upload_whose_file_expires_at_the_sender_first_is_ended_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let spool = Spool::new(&dir.path().join("spool")).unwrap();
    let mut sc = SenderConfig::new("src");
    sc.expire_after = std::time::Duration::from_secs(1);
    let mut h = sending_hub(files_config(), sc, spool, t0);
    let data = vec![1u8; 200_000];
    upload_to_edge1(&mut h, "slow.bin", &data, 0..100_000, t0);
    assert_eq!(answers(&mut h), [(PutState::Go, String::new())]);
    // Its upload outlives the file's time at the sender.
    let t1 = t0 + std::time::Duration::from_secs(2);
    h.handle_timeout(t1);
    while h.pump(t1) {}
    assert_eq!(
        answers(&mut h),
        [(
            PutState::Refused,
            "the sender gave the file up before its upload ended (tickwire files status says why)"
                .to_string()
        )]
    );
    // The rest of it is ignored, and nothing of it stays in the spool.
    upload(&mut h, &data, 100_000..200_000, t1);
    assert!(answers(&mut h).is_empty());
    let log = std::fs::read_to_string(dir.path().join("spool/queue.log")).unwrap();
    assert!(!log.contains("\"queued\""), "{log}");
    let r = report(&mut h);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].2.as_str(), r[0].3.as_str()), ("edge1", "failed"));
}

/// A hub of FILES that heard edge1 say it takes FILES at `now`.
fn hub_hearing_edge1(dir: &std::path::Path, now: Instant) -> Hub {
    let mut h = hub(dir, &["FILES"]);
    edge1_present(&mut h, now);
    h
}

/// edge1 says it takes FILES.
fn edge1_present(h: &mut Hub, now: Instant) {
    let present = present_msg("edge1", "FILES");
    h.handle(
        Peer::Backbone,
        "",
        Rights::default(),
        &encode(&present),
        now,
    );
}

#[test]
fn a_restart_mid_upload_cancels_the_file_at_each_site_heard_and_a_finished_one_stays_queued() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let whole = vec![5u8; 700_000];
    let half = vec![3u8; 800_000];
    let queued = {
        let mut before = hub_hearing_edge1(dir.path(), t0);
        upload_to_edge1(&mut before, "whole.bin", &whole, 0..whole.len(), t0);
        let queued = queued_transfer(&mut before, "the first file queued");
        // The second is half uploaded, and its first chunks are out, when the node
        // stops (dropped without a word, as kill -9 leaves it).
        let p = FilesMessage::Put(put_of(2, "half.bin", &half, vec!["edge1"]));
        ALICE.send(&mut before, &p, t0);
        for at in (0..400_000).step_by(50_000) {
            let d = put_data(2, at as u64, &half[at..at + 50_000]);
            ALICE.send(&mut before, &d, t0);
        }
        let (offers, chunks, cancels) = to_backbone(&mut before, t0 + ms(200));
        assert!(offers >= 2 && chunks > 0 && cancels.is_empty());
        queued
    };
    let t1 = t0 + ms(1000);
    let mut after = hub(dir.path(), &["FILES"]);
    assert_eq!(
        after.restore(t1).unwrap(),
        1,
        "the whole file is queued again"
    );
    // No site is known yet: edge1 is told as it is heard, a few times (the first may
    // go before the way to it is up), and no more.
    let unfinished = "the sending node stopped before the file was uploaded whole: send it again";
    assert!(to_backbone(&mut after, t1).2.is_empty());
    for n in 0..5 {
        let t = t1 + ms(1000 * n);
        edge1_present(&mut after, t);
        let (_, _, cancels) = to_backbone(&mut after, t);
        let want: &[&str] = if n < 3 { &[unfinished] } else { &[] };
        assert_eq!(cancels, want, "present {n}");
    }
    let rows = report(&mut after);
    assert!(
        rows.iter()
            .any(|r| r.1 == "half.bin" && r.2 == "edge1" && r.3 == "failed"),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r.0 == queued && r.1 == "whole.bin"),
        "{rows:?}"
    );
    drop(after);
    // Said once: the run after that has nothing to cancel, and still the whole file.
    let mut third = hub(dir.path(), &["FILES"]);
    assert_eq!(third.restore(t1).unwrap(), 1);
    edge1_present(&mut third, t1);
    let (_, _, cancels) = to_backbone(&mut third, t1);
    assert!(cancels.is_empty(), "{cancels:?}");
    let log = std::fs::read_to_string(dir.path().join("spool").join("queue.log")).unwrap();
    assert!(!log.contains("arriving"), "{log}");
}

#[test]
fn an_upload_that_failed_or_finished_is_not_cancelled_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let data = vec![9u8; 300_000];
    {
        let mut before = hub_hearing_edge1(dir.path(), t0);
        // Its hash is wrong: withdrawn (and cancelled at the sites) at its end.
        put_to_edge1(&mut before, "bad.bin", data.len(), [0; 32], t0);
        upload(&mut before, &data, 0..data.len(), t0);
        let (_, _, cancels) = to_backbone(&mut before, t0);
        assert_eq!(cancels.len(), 1, "{cancels:?}");
    }
    let mut after = hub(dir.path(), &["FILES"]);
    assert_eq!(after.restore(t0).unwrap(), 0);
    edge1_present(&mut after, t0);
    let (_, _, cancels) = to_backbone(&mut after, t0);
    assert!(cancels.is_empty(), "{cancels:?}");
}

/// `site` on the backbone says it takes FILES.
fn present(h: &mut Hub, site: &str, now: Instant) {
    let p = present_msg(site, "FILES");
    h.handle(Peer::Backbone, "", Rights::ALL, &encode(&p), now);
}

/// Runs the hub at `now` until it has nothing more to send.
fn run(h: &mut Hub, now: Instant) {
    h.handle_timeout(now);
    while h.pump(now) {}
    outputs(h);
}

#[test]
fn a_file_for_every_site_keeps_the_sites_it_was_given_through_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let t0 = Instant::now();
    present(&mut h, "a", t0);
    present(&mut h, "b", t0);
    let data = b"every site\n".to_vec();
    ALICE.upload_whole(&mut h, put_of(1, "all.csv", &data, vec![]), &data, t0);
    assert_eq!(answers(&mut h).last().unwrap().0, PutState::Queued);
    // Past the sender's first listening: the file is for a and b.
    let t1 = t0 + std::time::Duration::from_secs(4);
    present(&mut h, "a", t1);
    present(&mut h, "b", t1);
    run(&mut h, t1);
    let transfer = report(&mut h)[0].0;
    let done = site_status(transfer, "a", SiteState::Done, 1, "");
    h.handle(Peer::Backbone, "", Rights::ALL, &encode(&done), t1);
    run(&mut h, t1);
    drop(h);

    // Restarted while b is away for a moment: a is there, b is still owed the file.
    let mut h = hub(dir.path(), &["FILES"]);
    let t2 = Instant::now() + std::time::Duration::from_secs(4);
    assert_eq!(h.restore(t2).unwrap(), 1);
    present(&mut h, "a", t2);
    run(&mut h, t2);
    let mut sites: Vec<(String, String)> = report(&mut h)
        .into_iter()
        .map(|(_, _, site, state)| (site, state))
        .collect();
    sites.sort();
    assert_eq!(sites.len(), 2, "{sites:?}");
    assert_eq!(sites[0], ("a".into(), "done".into()));
    assert!(sites[1].0 == "b" && sites[1].1 != "done", "{sites:?}");
    assert_eq!(h.sender_figures().unwrap().1, 1, "still queued for b");
}

#[test]
fn a_full_table_of_routes_makes_room_for_a_new_site_once_an_old_one_is_silent() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let t0 = Instant::now();
    let names: Vec<String> = (0..256).map(|i| format!("site{i}")).collect();
    for n in &names {
        present(&mut h, n, t0);
    }
    let ignored = h.stats().ignored;
    // Every route is live: a flood of new names pushes none out.
    present(&mut h, "late", t0);
    assert_eq!(h.stats().ignored, ignored + 1);
    // A minute on, all but one have gone silent: the new site takes a silent one's room.
    let t1 = t0 + std::time::Duration::from_secs(61);
    present(&mut h, "site0", t1);
    present(&mut h, "late", t1);
    assert_eq!(h.stats().ignored, ignored + 1, "late is routed now");
    // And the silent ones are forgotten at the next timeout.
    h.handle_timeout(t1);
    let status = site_status(1, "site9", SiteState::Done, 1, "");
    h.handle(Peer::Backbone, "", Rights::ALL, &encode(&status), t1);
    assert_eq!(h.stats().ignored, ignored + 2, "site9's route is gone");
}

/// A site below (a downstream node's connection, allowed to speak for "edge1") fails a
/// file with a reason holding terminal escapes and a newline: `files status` gets it
/// without its control characters (it would write on the operator's terminal and forge
/// lines of the listing).
/// A hub taking `services`, a connection below (5) present for edge1 in the one of
/// them whose bit is `present_in`, and a FILES file queued: edge1's status failing it
/// for `reason`, sent over that connection (the hub, and its count of ignored
/// messages before).
fn edge1_fails_a_file_from_below(
    dir: &std::path::Path,
    services: &[&str],
    present_in: u64,
    reason: &str,
) -> (Hub, u64) {
    let mut h = hub(dir, services);
    let now = Instant::now();
    let below = Rights {
        publish: 0,
        subscribe: present_in,
    };
    let present = present_msg("edge1", services[present_in.trailing_zeros() as usize]);
    h.handle(Peer::Conn(5), "edge1", below, &encode(&present), now);
    let data = b"eod\n".to_vec();
    put(&mut h, Rights::ALL, 1, "FILES", &data);
    let transfer = report(&mut h)[0].0;
    let status = site_status(transfer, "edge1", SiteState::Failed, 0, reason);
    let ignored = h.stats().ignored;
    h.handle(
        Peer::Conn(5),
        "edge1",
        Rights::default(),
        &encode(&status),
        now,
    );
    (h, ignored)
}

#[test]
fn a_sites_reason_reaches_files_status_without_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "\u{1b}]0;owned\u{7}\u{1b}[2J\ndone     edge2            eod.csv 4 bytes";
    let (mut h, _) = edge1_fails_a_file_from_below(dir.path(), &["FILES"], 1, evil);
    let now = Instant::now();
    h.pump(now);
    let later = now + std::time::Duration::from_secs(1);
    let reasons = query(&mut h, later, |e| e.reason.to_string());
    assert!(!reasons.is_empty());
    for r in &reasons {
        assert!(
            !r.chars().any(char::is_control),
            "a reason with control characters: {r:?}"
        );
    }
}

/// The transfer of the upload the hub answers Queued now (`what`: which one).
fn queued_transfer(h: &mut Hub, what: &str) -> u64 {
    outputs(h)
        .into_iter()
        .find_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::PutAnswer(a) if a.state == PutState::Queued => Some(a.transfer),
            _ => None,
        })
        .expect(what)
}

/// The Go answer's transfer id for `request` among `outs`.
fn transfer_of_go(outs: &[Output], request: u32) -> u64 {
    outs.iter()
        .find_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::PutAnswer(a) if a.request == request && a.state == PutState::Go => {
                Some(a.transfer)
            }
            _ => None,
        })
        .expect("a Go")
}

/// A target site that says `done` for a file still being uploaded (broken or lying: it
/// cannot have the last chunk, which waits for the whole upload) is not believed. Were
/// it, the transfer would finish, its spool space be given back and reused by the next
/// upload, and the first upload's later bytes written over that one.
#[test]
fn a_site_saying_done_mid_upload_is_not_believed_and_no_upload_is_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let now = Instant::now();
    edge1_present(&mut h, now);
    outputs(&mut h);
    // Alice's upload of 200,000 bytes: its first 64,000 arrive.
    let a = vec![0xaau8; 200_000];
    let put_a = FilesMessage::Put(put_of(1, "a.bin", &a, vec!["edge1"]));
    ALICE.send(&mut h, &put_a, now);
    let first = put_data(1, 0, &a[..64_000]);
    ALICE.send(&mut h, &first, now);
    let ta = transfer_of_go(&outputs(&mut h), 1);
    // edge1 says it has it.
    let done = site_status(ta, "edge1", SiteState::Done, 0, "");
    h.handle(Peer::Backbone, "", Rights::ALL, &encode(&done), now);
    h.pump(now);
    outputs(&mut h);
    // Bob's file, whole.
    let b: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let bob = Client {
        conn: 8,
        user: "bob",
        rights: Rights::ALL,
    };
    bob.send(
        &mut h,
        &FilesMessage::Put(put_of(2, "b.bin", &b, vec!["edge1"])),
        now,
    );
    for (i, piece) in b.chunks(50_000).enumerate() {
        bob.send(&mut h, &put_data(2, i as u64 * 50_000, piece), now);
    }
    let outs = outputs(&mut h);
    let tb = transfer_of_go(&outs, 2);
    // Alice goes on with her upload.
    let second = put_data(1, 64_000, &a[64_000..128_000]);
    ALICE.send(&mut h, &second, now);
    // What the node sends of Bob's file.
    let mut got = vec![None; 7];
    let mut t = now;
    for _ in 0..50 {
        h.handle_timeout(t);
        while h.pump(t) {}
        for o in outputs(&mut h) {
            if let Ok(FilesMessage::Chunk {
                transfer,
                index,
                data,
            }) = FilesMessage::decode(&o.body)
            {
                if transfer == tb {
                    got[index as usize] = Some(data.to_vec());
                }
            }
        }
        t += ms(100);
    }
    let sent: Vec<u8> = got.into_iter().flatten().flatten().collect();
    assert_eq!(sent.len(), b.len(), "all of bob's chunks went out");
    let differ = sent.iter().zip(&b).filter(|(x, y)| x != y).count();
    assert_eq!(
        differ, 0,
        "{differ} bytes of bob's file were overwritten by alice's upload"
    );
}

/// Answers to the client connection `conn`: (request, state, reason).
fn answers_to(h: &mut Hub, conn: usize) -> Vec<(u32, PutState, String)> {
    outputs(h)
        .into_iter()
        .filter(|o| o.to == Peer::Conn(conn))
        .filter_map(|o| match FilesMessage::decode(&o.body).unwrap() {
            FilesMessage::PutAnswer(a) => Some((a.request, a.state, a.reason.to_string())),
            _ => None,
        })
        .collect()
}

/// One user who opens uploads and brings their bytes slowly (or not at all) holds at
/// most half of the node's uploads and half of its queue: refused beyond, with the
/// reason, while another user's file still goes. Empty data messages do not keep an
/// upload alive.
#[test]
fn one_slow_user_never_holds_every_upload_nor_the_whole_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES", "SCRATCH"]);
    let t0 = Instant::now();
    let scratch_only = publish(0b10);
    let max_bytes = SenderConfig::new("src").max_bytes;
    let upload = |h: &mut Hub, user: &str, request: u32, size: u64| {
        let name = format!("never-{request}.bin");
        let put = FilesMessage::Put(Put {
            request,
            service: "SCRATCH",
            name: &name,
            size,
            sha256: [0; 32],
            to: vec!["edge1"],
        });
        h.handle(Peer::Conn(CLIENT), user, scratch_only, &encode(&put), t0);
        answers_to(h, CLIENT).pop().expect("an answer")
    };
    // Trudy: the whole queue at once, then half of it, then a third of it.
    let (_, state, reason) = upload(&mut h, "trudy", 1, max_bytes);
    assert_eq!(state, PutState::Refused);
    assert!(reason.contains("more than half the send queue"), "{reason}");
    assert_eq!(upload(&mut h, "trudy", 2, max_bytes / 2).1, PutState::Go);
    assert_eq!(
        upload(&mut h, "trudy", 3, max_bytes / 3).1,
        PutState::Refused
    );
    // Mallory: small ones, up to half the node's uploads (trudy has one).
    let max_uploads = HubConfig::new("src", vec![]).max_uploads as u32;
    let answers: Vec<_> = (10..10 + max_uploads)
        .map(|r| upload(&mut h, "mallory", r, 10))
        .collect();
    let went = answers.iter().filter(|a| a.1 == PutState::Go).count() as u32;
    assert_eq!(went, max_uploads / 2);
    let last = &answers.last().expect("answers").2;
    assert!(last.contains("the most one user may have"), "{last}");
    // Alice's file goes all the same.
    let data = b"eod\n";
    let alice = Client {
        conn: 8,
        user: "alice",
        rights: publish(0b01),
    };
    alice.upload_whole(&mut h, put_of(9, "eod.csv", data, vec!["edge1"]), data, t0);
    let states: Vec<PutState> = answers_to(&mut h, 8).into_iter().map(|a| a.1).collect();
    assert_eq!(states, vec![PutState::Go, PutState::Queued]);
    // Trudy's big upload, kept "alive" by empty messages, times out.
    let timeout = HubConfig::new("src", vec![]).upload_timeout;
    let mut now = t0;
    while now < t0 + timeout * 2 {
        now += std::time::Duration::from_secs(1);
        let empty = put_data(2, 0, b"");
        h.handle(
            Peer::Conn(CLIENT),
            "trudy",
            scratch_only,
            &encode(&empty),
            now,
        );
        h.handle_timeout(now);
    }
    let ended = answers_to(&mut h, CLIENT);
    assert!(
        ended
            .iter()
            .any(|(r, state, _)| *r == 2 && *state == PutState::Refused),
        "{ended:?}"
    );
}

/// As [`offer_whole`], of FILES from "src".
fn offer_files(h: &mut Hub, t: u64, name: &str, data: &[u8], now: Instant) {
    offer_whole(h, t, "src", "FILES", name, data, now);
}

/// Transfer `t` of `service`, one chunk named `name` holding `data`, offered by
/// `sender` and sent whole to `h` over the backbone.
fn offer_whole(
    h: &mut Hub,
    t: u64,
    sender: &str,
    service: &str,
    name: &str,
    data: &[u8],
    now: Instant,
) {
    let offer = FilesMessage::Offer(tickwire_files::wire::Offer {
        transfer: t,
        sender,
        service,
        name,
        size: data.len() as u64,
        chunk_size: 1024,
        sha256: Sha256::digest(data).into(),
        sent_through: 1,
        expires_ms: u64::MAX,
        open: true,
        targets: vec![],
    });
    let chunk = FilesMessage::Chunk {
        transfer: t,
        index: 0,
        data,
    };
    for m in [offer, chunk] {
        h.handle(Peer::Backbone, "", Rights::default(), &encode(&m), now);
        h.pump(now);
    }
}

/// A site takes two services; a publisher allowed only SCRATCH sends a file under the
/// name of one that came in FILES. Each service has a directory of its own in the
/// inbox: the right to publish one service is not the right to replace the files of
/// another.
#[test]
fn a_file_of_one_service_does_not_replace_a_file_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let never = tickwire_files::inbox::Fsync::Never;
    let mut h = receiving_hub_of(dir.path(), &["FILES", "SCRATCH"], never, 100, now);
    offer_files(&mut h, 1, "eod/prices.csv", b"real prices\n", now);
    let path = dir.path().join("inbox/FILES/eod/prices.csv");
    assert_eq!(std::fs::read(&path).unwrap(), b"real prices\n");
    offer_whole(
        &mut h,
        2,
        "other-src",
        "SCRATCH",
        "eod/prices.csv",
        b"forged\n",
        now,
    );
    assert_eq!(
        String::from_utf8(std::fs::read(&path).unwrap()).unwrap(),
        "real prices\n",
        "a SCRATCH file replaced the FILES one"
    );
    let scratch = dir.path().join("inbox/SCRATCH/eod/prices.csv");
    assert_eq!(std::fs::read(scratch).unwrap(), b"forged\n");
}

/// A peer speaks for a site only in the services it was heard present for: a
/// connection present for edge1 in REF cannot say edge1 failed (or has) a FILES file.
#[test]
fn a_site_is_spoken_for_only_in_the_services_it_is_present_for() {
    let dir = tempfile::tempdir().unwrap();
    let reason = "not from edge1's FILES route";
    let (mut h, ignored) =
        edge1_fails_a_file_from_below(dir.path(), &["FILES", "REF"], 0b10, reason);
    assert_eq!(h.stats().ignored, ignored + 1);
    let states: Vec<String> = report(&mut h).into_iter().map(|r| r.3).collect();
    assert!(!states.iter().any(|s| s == "failed"), "{states:?}");
}

#[test]
fn a_file_for_every_site_that_fails_before_it_has_sites_is_reported_failed_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let data = b"a,b\n".to_vec();
    let now = Instant::now();
    // For every site (no --to), with a hash that does not match its bytes.
    let put = Put {
        sha256: [0; 32],
        ..put_of(1, "eod.csv", &data, vec![])
    };
    ALICE.upload_whole(&mut h, put, &data, now);
    while h.pump(now) {}
    let r = query(&mut h, now, |e| {
        (
            e.site.to_string(),
            e.state.to_string(),
            e.reason.to_string(),
        )
    });
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].1, "failed", "{r:?}");
    assert!(r[0].2.contains("SHA-256"), "{r:?}");
}

/// A site restarted with a partial file takes its sender's Cancel of it (the sender
/// gave the file up meanwhile, and tells the site when it asks): the part goes at
/// once, though no offer of it came in this run.
#[test]
fn a_restarted_site_drops_a_resumed_partial_file_its_sender_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let never = tickwire_files::inbox::Fsync::Never;
    let data = vec![9u8; 200 * 1024];
    let t = 0x5eed;
    {
        let mut h = receiving_hub(dir.path(), never, 100, now);
        let offer = FilesMessage::Offer(tickwire_files::wire::Offer {
            transfer: t,
            sender: "src",
            service: "FILES",
            name: "big.bin",
            size: data.len() as u64,
            chunk_size: 1024,
            sha256: Sha256::digest(&data).into(),
            sent_through: 0,
            expires_ms: u64::MAX,
            open: true,
            targets: vec![],
        });
        h.handle(Peer::Backbone, "", Rights::default(), &encode(&offer), now);
        for index in 0..100u32 {
            let chunk = FilesMessage::Chunk {
                transfer: t,
                index,
                data: &data[index as usize * 1024..(index as usize + 1) * 1024],
            };
            h.handle(Peer::Backbone, "", Rights::default(), &encode(&chunk), now);
        }
        h.pump(now);
    }
    let partial = dir.path().join("inbox/.tickwire-partial");
    let held = || std::fs::read_dir(&partial).unwrap().count();
    assert!(held() > 0, "a map was saved");
    // Started again: the partial file is reopened; then its sender cancels it.
    let mut h = receiving_hub(dir.path(), never, 100, now);
    assert_eq!(h.resume_receiver([], now).unwrap(), 1);
    let cancel = FilesMessage::Cancel {
        transfer: t,
        reason: "the upload failed: the client went away",
    };
    h.handle(Peer::Backbone, "", Rights::default(), &encode(&cancel), now);
    h.pump(now);
    assert_eq!(held(), 0, "the partial file and its map are gone");
}

/// A site still receiving a transfer that ended is told again to drop it, though the
/// record (which keeps `keep_records` files) no longer lists the transfer.
#[test]
fn a_site_is_told_of_an_ended_transfer_the_record_no_longer_lists() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let spool = Spool::new(&dir.path().join("spool")).unwrap();
    let mut cfg = files_config();
    cfg.keep_records = 1;
    let mut h = sending_hub(cfg, SenderConfig::new("src"), spool, t0);
    edge1_present(&mut h, t0);
    // Two uploads whose bytes do not match their hash: each withdrawn.
    let data = vec![7u8; 200_000];
    let mut ended = Vec::new();
    for name in ["a.bin", "b.bin"] {
        put_to_edge1(&mut h, name, data.len(), [0; 32], t0);
        upload(&mut h, &data, 0..200_000, t0);
        let go = outputs(&mut h);
        ended.push(transfer_of_go(&go, 1));
        to_backbone(&mut h, t0);
    }
    let listed: Vec<u64> = report(&mut h).into_iter().map(|r| r.0).collect();
    assert_eq!(listed, [ended[1]], "the record keeps one file");
    let t1 = t0 + std::time::Duration::from_secs(1);
    assert_edge1_asking_is_told_of_the_bad_hash(&mut h, ended[0], 3, t1);
}

/// A site's record lists a file it could not take, with why, as the audit log it reads
/// back after a restart does; taken when tried again, the file is listed done.
#[test]
fn a_site_lists_a_file_it_could_not_take_and_then_took() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let never = tickwire_files::inbox::Fsync::Never;
    let mut h = receiving_hub(dir.path(), never, 100, now);
    // "eod" is a file where the name needs a directory.
    std::fs::create_dir_all(dir.path().join("inbox/FILES")).unwrap();
    std::fs::write(dir.path().join("inbox/FILES/eod"), b"x").unwrap();
    offer_files(&mut h, 5, "eod/prices.csv", b"prices\n", now);
    let lines = |h: &mut Hub| {
        outputs(h);
        let query = encode(&FilesMessage::Query { request: 9 });
        h.handle(Peer::Conn(CLIENT), "bob", Rights::ALL, &query, now);
        h.handle_gone(CLIENT);
        reported(h, |e| {
            (
                e.transfer,
                e.site.to_string(),
                e.state.to_string(),
                e.reason.to_string(),
            )
        })
    };
    let r = lines(&mut h);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0].0, r[0].1.as_str(), r[0].2.as_str()),
        (5, "edge1", "failed")
    );
    assert!(r[0].3.contains("not a directory"), "{r:?}");
    // Tried again once the way is clear: done.
    std::fs::remove_file(dir.path().join("inbox/FILES/eod")).unwrap();
    let later = now + std::time::Duration::from_secs(31);
    offer_files(&mut h, 5, "eod/prices.csv", b"prices\n", later);
    let r = lines(&mut h);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(
        (r[0].1.as_str(), r[0].2.as_str()),
        ("edge1", "done"),
        "{r:?}"
    );
}

/// After a restart, a file queued for sites that have said nothing yet is listed for
/// those sites, queued, as before: not as a file for every site.
#[test]
fn after_a_restart_a_queued_file_is_listed_for_its_sites() {
    let dir = tempfile::tempdir().unwrap();
    let now = Instant::now();
    let data = b"a,b\n".to_vec();
    let before_rows = {
        let mut h = hub(dir.path(), &["FILES"]);
        put(&mut h, Rights::ALL, 1, "FILES", &data);
        while h.pump(now) {}
        report(&mut h)
    };
    let rows = |r: Vec<(u64, String, String, String)>| -> Vec<(String, String, String)> {
        r.into_iter()
            .map(|(_, name, site, state)| (name, site, state))
            .collect()
    };
    let before_rows = rows(before_rows);
    assert_eq!(
        before_rows,
        [(
            "f1.csv".to_string(),
            "edge1".to_string(),
            "queued".to_string()
        )]
    );
    let mut h = hub(dir.path(), &["FILES"]);
    assert_eq!(h.restore(now).unwrap(), 1);
    assert_eq!(rows(report(&mut h)), before_rows);
}

/// A Cancel goes to a site below even when its link is busy (sent once, it is not
/// repaired as a chunk or repeated as an offer is): offers and chunks give way.
#[test]
fn a_cancel_to_a_site_below_is_not_dropped_for_a_busy_link() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = hub(dir.path(), &["FILES"]);
    let t0 = Instant::now();
    const BELOW: usize = 3;
    let present = present_msg("edge1", "FILES");
    h.handle(
        Peer::Conn(BELOW),
        "edge1",
        Rights::ALL,
        &encode(&present),
        t0,
    );
    let data = vec![7u8; 200_000];
    put_to_edge1(&mut h, "big.bin", data.len(), [0; 32], t0);
    // Half, sent on to the site; then the rest, whose hash is wrong.
    upload(&mut h, &data, 0..100_000, t0);
    let t1 = t0 + ms(200);
    h.handle_timeout(t1);
    while h.pump(t1) {}
    upload(&mut h, &data, 100_000..200_000, t1);
    h.handle_timeout(t1);
    while h.pump(t1) {}
    // (droppable, kind): 1 an offer, 2 a chunk, 5 a cancel.
    let below: Vec<(bool, u8)> = outputs(&mut h)
        .into_iter()
        .filter(|o| o.to == Peer::Conn(BELOW))
        .map(|o| {
            FilesMessage::decode(&o.body).unwrap();
            (o.droppable, o.body[2])
        })
        .collect();
    assert!(below.iter().any(|(_, kind)| *kind == 1), "offered below");
    assert!(below.iter().any(|(_, kind)| *kind == 5), "cancelled below");
    for (droppable, kind) in &below {
        assert_eq!(*droppable, *kind != 5, "kind {kind}");
    }
}

/// Request `request`: the whole of `data` as `name` in FILES, for `to` (none: every site).
fn put_whole(h: &mut Hub, request: u32, name: &str, to: Vec<&str>, data: &[u8], now: Instant) {
    ALICE.upload_whole(h, put_of(request, name, data, to), data, now);
}

/// `f` of each entry of the report a user who may see everything gets at `now`.
fn query<T>(
    h: &mut Hub,
    now: Instant,
    f: impl Fn(&tickwire_files::wire::ReportEntry<'_>) -> T,
) -> Vec<T> {
    query_as(h, "bob", now, f)
}

/// As [`query`], asked by `user` (on the client connection).
fn query_as<T>(
    h: &mut Hub,
    user: &str,
    now: Instant,
    f: impl Fn(&tickwire_files::wire::ReportEntry<'_>) -> T,
) -> Vec<T> {
    outputs(h);
    let q = encode(&FilesMessage::Query { request: 9 });
    h.handle(Peer::Conn(CLIENT), user, Rights::ALL, &q, now);
    reported(h, f)
}

/// `site` on the backbone says it has `transfer`.
fn done_at(h: &mut Hub, transfer: u64, site: &str, now: Instant) {
    let done = site_status(transfer, site, SiteState::Done, 1, "");
    h.handle(Peer::Backbone, "", Rights::ALL, &encode(&done), now);
}

/// A file for every site queued before any site is known, then a newer one of its name
/// for edge1, delivered before the older has its sites: the older remembers where the
/// newer went, through a restart too, and once it has its sites it is replaced there
/// rather than sent over the newer.
#[test]
fn an_older_file_for_every_site_remembers_a_newer_delivered_one_through_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let older = {
        let mut h = hub(dir.path(), &["FILES"]);
        put_whole(&mut h, 1, "eod.csv", vec![], b"old\n", t0);
        let older = transfer_of_go(&outputs(&mut h), 1);
        present(&mut h, "edge1", t0);
        put_whole(&mut h, 2, "eod.csv", vec!["edge1"], b"new\n", t0);
        let newer = transfer_of_go(&outputs(&mut h), 2);
        run(&mut h, t0);
        done_at(&mut h, newer, "edge1", t0);
        run(&mut h, t0);
        assert_eq!(h.sender_figures().unwrap().1, 1, "the newer is over");
        older
    };
    let mut h = hub(dir.path(), &["FILES"]);
    // Past the restarted sender's first listening, edge1 there.
    let t1 = Instant::now() + std::time::Duration::from_secs(4);
    assert_eq!(h.restore(t1).unwrap(), 1);
    present(&mut h, "edge1", t1);
    run(&mut h, t1);
    let rows = query(&mut h, t1, |e| {
        (
            e.transfer,
            e.site.to_string(),
            e.state.to_string(),
            e.reason.to_string(),
        )
    });
    let row = rows.iter().find(|r| r.0 == older && r.1 == "edge1");
    assert!(
        row.is_some_and(|r| r.2 == "failed" && r.3.starts_with("replaced by a newer file")),
        "{rows:?}"
    );
    assert_eq!(h.sender_figures().unwrap().1, 0, "nothing left to send");
}

/// A node restarted mid-upload tells each site heard to drop the part it got, for ten
/// minutes: stopped again within them, it goes on telling the sites it had not told
/// yet for the rest of them, and no longer.
#[test]
fn a_restart_cancel_outlives_another_restart_within_its_ten_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let half = vec![3u8; 800_000];
    {
        let mut before = hub_hearing_edge1(dir.path(), t0);
        upload_to_edge1(&mut before, "half.bin", &half, 0..400_000, t0);
        let (_, chunks, _) = to_backbone(&mut before, t0 + ms(200));
        assert!(chunks > 0);
    }
    // Restarted, and stopped again before any site was heard.
    let wall = 1_790_000_000_000;
    let mut second = hub_at(dir.path(), &["FILES"], wall);
    assert_eq!(second.restore(Instant::now()).unwrap(), 0);
    assert_eq!(second.interrupted_uploads(), 1);
    drop(second);
    // Five minutes later: edge1 is told as it is heard, a few times.
    let unfinished = "the sending node stopped before the file was uploaded whole: send it again";
    let mut third = hub_at(dir.path(), &["FILES"], wall + 300_000);
    let t1 = Instant::now();
    assert_eq!(third.restore(t1).unwrap(), 0);
    let mut told = 0;
    for n in 0..5 {
        let t = t1 + ms(1000 * n);
        edge1_present(&mut third, t);
        told += to_backbone(&mut third, t)
            .2
            .iter()
            .filter(|c| *c == unfinished)
            .count();
    }
    assert_eq!(told, 3);
    drop(third);
    // Told already, edge1 is not told again after another restart; edge2, heard for
    // the first time, is.
    let mut fourth = hub_at(dir.path(), &["FILES"], wall + 400_000);
    let t2 = Instant::now();
    fourth.restore(t2).unwrap();
    edge1_present(&mut fourth, t2);
    assert!(to_backbone(&mut fourth, t2).2.is_empty());
    present(&mut fourth, "edge2", t2);
    assert_eq!(to_backbone(&mut fourth, t2).2, [unfinished]);
    drop(fourth);
    // Past the ten minutes: no site is told, and the spool forgets it.
    let mut fifth = hub_at(dir.path(), &["FILES"], wall + 601_000);
    let t3 = Instant::now();
    fifth.restore(t3).unwrap();
    assert_eq!(fifth.interrupted_uploads(), 0);
    present(&mut fifth, "edge3", t3);
    assert!(to_backbone(&mut fifth, t3).2.is_empty());
    drop(fifth);
    assert!(Spool::new(&dir.path().join("spool"))
        .unwrap()
        .cancels()
        .is_empty());
    let log = std::fs::read_to_string(dir.path().join("spool/queue.log")).unwrap();
    assert!(!log.contains("cancel"), "{log}");
}

/// `files status` says since when each site stands where it does; a restart of the
/// sender changes none of it (it said the restart's time).
#[test]
fn after_a_restart_each_site_is_listed_since_when_it_was_before() {
    let dir = tempfile::tempdir().unwrap();
    let wall = 1_790_000_000_000;
    let secs = std::time::Duration::from_secs;
    let row = |e: &tickwire_files::wire::ReportEntry<'_>| {
        (e.site.to_string(), e.state.to_string(), e.since_ms)
    };
    let before = {
        let mut h = hub_at(dir.path(), &["FILES"], wall);
        let t0 = Instant::now();
        put_whole(
            &mut h,
            1,
            "eod.csv",
            vec!["edge1", "edge2", "edge3"],
            b"a\n",
            t0,
        );
        let transfer = transfer_of_go(&outputs(&mut h), 1);
        let t1 = t0 + secs(2);
        present(&mut h, "edge1", t1);
        present(&mut h, "edge2", t1);
        run(&mut h, t1);
        let t2 = t1 + secs(2);
        done_at(&mut h, transfer, "edge1", t2);
        let failed = site_status(
            transfer,
            "edge2",
            SiteState::Failed,
            0,
            "No space left on device (os error 28)",
        );
        h.handle(Peer::Backbone, "", Rights::ALL, &encode(&failed), t2);
        run(&mut h, t2);
        query(&mut h, t2, row)
    };
    let states: Vec<&str> = before.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(states, ["done", "failed", "queued"], "{before:?}");
    assert!(before[0].2 > before[2].2, "{before:?}");
    // Restarted an hour later.
    let mut h = hub_at(dir.path(), &["FILES"], wall + 3_600_000);
    let t3 = Instant::now();
    assert_eq!(h.restore(t3).unwrap(), 1);
    assert_eq!(query(&mut h, t3, row), before);
}
