//! The sender and its sites over real directories: a spool, inboxes under each fsync
//! policy, restarts that find their files again, and names or links that would lead
//! out of an inbox. Messages go through the wire in memory, on a fake clock.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tickwire_files::inbox::{Fsync, Inbox, PARTIAL_DIR};
use tickwire_files::spool::{PendingCancel, Spool, SpooledSite};
use tickwire_files::wire::FilesMessage;
use tickwire_files::{
    ChunkSource, Delivery, Manifest, NewFile, Receiver, ReceiverConfig, ReceiverEvent, Sender,
    SenderConfig, SenderEvent,
};

const SERVICE: &str = "FILES";

struct Site {
    rx: Receiver,
    inbox: Inbox,
    events: Vec<ReceiverEvent>,
}

struct Net {
    now: Instant,
    tx: Sender,
    spool: Spool,
    sites: Vec<Site>,
    events: Vec<SenderEvent>,
}

fn site_config(i: usize) -> ReceiverConfig {
    ReceiverConfig::new(format!("site-{i}"), vec![SERVICE.into()])
}

impl Net {
    fn new(root: &Path, sites: usize, fsync: Fsync) -> Self {
        let now = Instant::now();
        let mut cfg = SenderConfig::new("src");
        cfg.chunk_size = 4096;
        Net {
            now,
            tx: Sender::new(cfg, now),
            spool: Spool::new(&root.join("spool")).unwrap(),
            sites: (0..sites)
                .map(|i| Site {
                    rx: Receiver::new(site_config(i), now),
                    inbox: Inbox::new(&root.join(format!("inbox-{i}")), fsync).unwrap(),
                    events: Vec::new(),
                })
                .collect(),
            events: Vec::new(),
        }
    }

    /// Copies `path` into the spool and queues it for every site.
    fn send(&mut self, id: u64, name: &str, path: &Path) -> u64 {
        let (size, sha256) = self.spool.copy_in(id, path).unwrap();
        let to = Some((0..self.sites.len()).map(|i| format!("site-{i}")).collect());
        let file = NewFile {
            transfer: id,
            service: SERVICE.into(),
            name: name.into(),
            size,
            sha256,
            to,
            expires_ms: 0,
        };
        let id = self.tx.enqueue(file, self.now).unwrap();
        let (m, _) = self.tx.transfer(id).unwrap();
        let m = m.clone();
        self.spool.save(&m).unwrap();
        id
    }

    fn turn(&mut self) {
        self.tx.handle_timeout(self.now);
        let mut out = Vec::new();
        while self.tx.poll_transmit(self.now, &mut self.spool, &mut out) {
            let msg = FilesMessage::decode(&out).unwrap();
            for s in &mut self.sites {
                s.rx.handle(&msg, self.now, &mut s.inbox);
            }
        }
        for s in &mut self.sites {
            for (t, r) in s.inbox.flush() {
                s.rx.handle_committed(t, r, self.now, &mut s.inbox);
            }
            s.rx.handle_timeout(self.now, &mut s.inbox);
            while s.rx.poll_transmit(self.now, &mut out) {
                match FilesMessage::decode(&out).unwrap() {
                    FilesMessage::Status(st) => self.tx.handle_status(&st, self.now),
                    FilesMessage::Present { site, service } => {
                        self.tx.handle_present(site, service, self.now)
                    }
                    _ => {}
                }
            }
            while let Some(e) = s.rx.poll_event() {
                s.events.push(e);
            }
        }
        while let Some(e) = self.tx.poll_event() {
            if let SenderEvent::Site {
                transfer,
                site,
                state,
                reason,
            } = &e
            {
                self.spool
                    .record(*transfer, site, *state, reason, None)
                    .unwrap();
            }
            if let SenderEvent::Finished { transfer, .. } = e {
                self.spool.remove(transfer);
            }
            self.events.push(e);
        }
    }

    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Net) -> bool) {
        let end = self.now + limit;
        loop {
            self.turn();
            if done(self) {
                return;
            }
            assert!(self.now < end, "not done after {limit:?} of simulated time");
            self.now += Duration::from_millis(5);
        }
    }

    fn finished(&self, id: u64) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, SenderEvent::Finished { transfer, .. } if *transfer == id))
    }
}

/// Files in a spool holding bytes, besides its log.
fn spooled_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "queue.log" && e.metadata().unwrap().len() > 0)
        .count()
}

/// A spool in a fresh temporary folder: the folder (the test's files go there too), the
/// spool's directory (to open it again, as after a restart) and the spool. The spool
/// tests start so.
fn fresh_spool() -> (tempfile::TempDir, PathBuf, Spool) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("spool");
    let spool = Spool::new(&dir).unwrap();
    (root, dir, spool)
}

fn write_file(dir: &Path, name: &str, len: usize, seed: u8) -> (PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect();
    let path = dir.join(name);
    fs::write(&path, &data).unwrap();
    (path, data)
}

#[test]
fn files_arrive_whole_in_every_inbox_under_each_fsync_policy() {
    for fsync in [Fsync::Always, Fsync::Batch, Fsync::Never] {
        let root = tempfile::tempdir().unwrap();
        let mut net = Net::new(root.path(), 2, fsync);
        let (a, a_bytes) = write_file(root.path(), "a.src", 100_000, 1);
        let (b, b_bytes) = write_file(root.path(), "b.src", 0, 2);
        let ia = net.send(1, "ref/2026/eod.csv", &a);
        let ib = net.send(2, "empty.dat", &b);
        net.run_until(Duration::from_secs(10), |n| {
            n.finished(ia) && n.finished(ib)
        });
        for s in &net.sites {
            let dir = s.inbox.dir().join(SERVICE);
            assert_eq!(
                fs::read(dir.join("ref/2026/eod.csv")).unwrap(),
                a_bytes,
                "{fsync:?}"
            );
            assert_eq!(
                fs::read(dir.join("empty.dat")).unwrap(),
                b_bytes,
                "{fsync:?}"
            );
            assert_eq!(
                fs::read_dir(s.inbox.dir().join(PARTIAL_DIR))
                    .unwrap()
                    .count(),
                0,
                "{fsync:?}: partial files left"
            );
            let c = s.inbox.counts();
            assert_eq!(c.renames, 2);
            match fsync {
                // Each file and its directory, and each of the three directories
                // made for them (the service's, ref, 2026) into its parent.
                Fsync::Always => assert_eq!(c.syncs, 7),
                // Each file, each directory once per flush, the three made.
                Fsync::Batch => assert!((6..=7).contains(&c.syncs), "{c:?}"),
                Fsync::Never => assert_eq!(c.syncs, 0),
            }
        }
        // Delivered: the spool is empty.
        assert_eq!(spooled_files(&root.path().join("spool")), 0);
    }
}

/// A symbolic link on a name's way is refused; a name that looks like the inbox's own
/// partial directory stays in its service's directory, never in the inbox's own.
#[test]
fn a_symbolic_link_in_a_name_is_refused_and_no_name_reaches_the_partial_directory() {
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let mut net = Net::new(root.path(), 1, Fsync::Never);
    let service_dir = net.sites[0].inbox.dir().join(SERVICE);
    fs::create_dir(&service_dir).unwrap();
    std::os::unix::fs::symlink(&outside, service_dir.join("evil")).unwrap();
    let (src, _) = write_file(root.path(), "x.src", 5_000, 3);
    let via_link = net.send(1, "evil/x.csv", &src);
    let like_partial = format!("{PARTIAL_DIR}/0000000000000001.part");
    let into_partial = net.send(2, &like_partial, &src);
    net.run_until(Duration::from_secs(5), |n| {
        n.finished(into_partial)
            && n.tx
                .transfer(via_link)
                .is_some_and(|(_, s)| s["site-0"].state == Delivery::Failed)
    });
    let reason = net.tx.transfer(via_link).unwrap().1["site-0"]
        .reason
        .clone();
    assert!(
        reason.contains("is a symbolic link (not followed)"),
        "{reason}"
    );
    assert_eq!(
        fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written through the link"
    );
    assert_eq!(
        fs::read(service_dir.join(&like_partial)).unwrap(),
        fs::read(&src).unwrap()
    );
    let partial = net.sites[0].inbox.dir().join(PARTIAL_DIR);
    assert_eq!(fs::read_dir(partial).unwrap().count(), 0);
}

/// One site, 250 chunks of 4 KiB into a file of 2,000,000 bytes (transfer 9): the net,
/// the transfer and the file's bytes.
fn partway_through_a_big_file(root: &Path) -> (Net, u64, Vec<u8>) {
    let mut net = Net::new(root, 1, Fsync::Never);
    let (src, data) = write_file(root, "big.src", 2_000_000, 4);
    let mut cfg = SenderConfig::new("src");
    cfg.chunk_size = 4096;
    cfg.rate = 1_000_000;
    cfg.burst = 64 * 1024;
    net.tx = Sender::new(cfg, net.now);
    let id = net.send(9, "big.bin", &src);
    net.run_until(Duration::from_secs(10), |n| {
        n.sites[0].rx.stats().chunks >= 250
    });
    (net, id, data)
}

#[test]
fn a_restarted_site_resumes_from_the_partial_files_it_left() {
    let root = tempfile::tempdir().unwrap();
    let (mut net, id, data) = partway_through_a_big_file(root.path());
    // The site stops (its receiver and open files gone) and starts again.
    let inbox_dir = net.sites[0].inbox.dir().to_path_buf();
    let mut inbox = Inbox::new(&inbox_dir, Fsync::Never).unwrap();
    let mut rx = Receiver::new(site_config(0), net.now);
    let partials = inbox.partial_manifests().unwrap();
    assert_eq!(
        partials
            .iter()
            .map(|m: &Manifest| m.transfer)
            .collect::<Vec<_>>(),
        vec![id]
    );
    for m in partials {
        rx.resume(m, net.now, &mut inbox);
    }
    net.sites[0].rx = rx;
    net.sites[0].inbox = inbox;
    net.run_until(Duration::from_secs(10), |n| n.finished(id));
    assert_eq!(
        fs::read(inbox_dir.join(SERVICE).join("big.bin")).unwrap(),
        data
    );
    // It took at most the chunks it had not saved: never the file again.
    let after = net.sites[0].rx.stats().chunks;
    assert!(after <= 489 - 192, "{after} chunks taken after the restart");
}

/// Transfer 7, "q.csv" of `size` bytes with `sha256`, to `targets`, as the spool keeps it.
fn q_csv(size: u64, sha256: [u8; 32], targets: &[&str]) -> Manifest {
    Manifest {
        transfer: 7,
        sender: "src".into(),
        service: SERVICE.into(),
        name: "q.csv".into(),
        size,
        chunk_size: 4096,
        sha256,
        expires_ms: 1,
        open: false,
        targets: targets.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn the_spool_keeps_a_queue_through_a_restart() {
    let (root, dir, mut spool) = fresh_spool();
    let (src, data) = write_file(root.path(), "q.src", 10_000, 5);
    let (size, sha) = spool.copy_in(7, &src).unwrap();
    assert_eq!(size, 10_000);
    let m = q_csv(size, sha, &["site-0", "site-1"]);
    spool.save(&m).unwrap();
    spool
        .record(7, "site-0", Delivery::Sending, "", Some(1_000))
        .unwrap();
    spool
        .record(7, "site-0", Delivery::Done, "", Some(2_000))
        .unwrap();
    let append = |line: &[u8]| {
        fs::OpenOptions::new()
            .append(true)
            .open(dir.join("queue.log"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, line))
            .unwrap()
    };
    // A site's line as earlier versions wrote it: no time.
    append(b"{\"transfer\":\"0000000000000007\",\"site\":\"site-1\",\"state\":\"failed\",\"reason\":\"No space left on device (os error 28)\"}\n");
    // A crash mid-append leaves a torn line; a crash mid-queue leaves data alone.
    append(b"{\"site\":\"si");
    spool.copy_in(8, &src).unwrap();
    drop(spool);

    let mut spool = Spool::new(&dir).unwrap();
    let loaded = spool.load().unwrap();
    assert_eq!(loaded.len(), 1);
    let (lm, sites) = (&loaded[0].manifest, &loaded[0].sites);
    assert_eq!(lm, &m);
    assert_eq!(
        sites,
        &vec![
            SpooledSite {
                site: "site-0".into(),
                state: Delivery::Done,
                reason: String::new(),
                since_ms: Some(2_000),
            },
            SpooledSite {
                site: "site-1".into(),
                state: Delivery::Failed,
                reason: "No space left on device (os error 28)".into(),
                since_ms: None,
            },
        ]
    );
    assert!(
        !dir.join("0000000000000008.data").exists(),
        "data without a manifest is removed"
    );
    let mut buf = vec![0; 4096];
    spool.read_chunk(7, 4096, &mut buf).unwrap();
    assert_eq!(buf, data[4096..8192]);
    spool.remove(7);
    let left: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("queue.log")]);
    drop(spool);
    let mut spool = Spool::new(&dir).unwrap();
    assert!(spool.load().unwrap().is_empty());
    assert_eq!(fs::metadata(dir.join("queue.log")).unwrap().len(), 0);
}

#[test]
fn the_spool_log_keeps_only_what_is_live() {
    let (root, dir, mut spool) = fresh_spool();
    let (src, _) = write_file(root.path(), "s.src", 100, 9);
    let manifest = |transfer: u64| Manifest {
        transfer,
        sender: "src".into(),
        service: SERVICE.into(),
        name: format!("f{transfer}"),
        size: 100,
        chunk_size: 4096,
        sha256: [0; 32],
        expires_ms: 1,
        open: false,
        targets: vec!["site-0".into()],
    };
    // Thousands of transfers through, one kept: the log does not grow with the ones
    // gone, and the one kept comes back after them in queue order.
    let keep = manifest(1);
    spool.copy_in(1, &src).unwrap();
    spool.save(&keep).unwrap();
    // An upload under way all along (its note survives the rewrites), never finished.
    let _arriving = spool.begin(7000, 100).unwrap();
    spool.note_arriving(&manifest(7000)).unwrap();
    for t in 2..6000u64 {
        spool.copy_in(t, &src).unwrap();
        spool.save(&manifest(t)).unwrap();
        spool
            .record(t, "site-0", Delivery::Sending, "", None)
            .unwrap();
        spool.record(t, "site-0", Delivery::Done, "", None).unwrap();
        spool.remove(t);
    }
    let last = manifest(6000);
    spool.copy_in(6000, &src).unwrap();
    spool.save(&last).unwrap();
    let size = fs::metadata(dir.join("queue.log")).unwrap().len();
    assert!(size < 4096 * 300, "the log was not rewritten: {size} bytes");
    drop(spool);
    let mut spool = Spool::new(&dir).unwrap();
    let loaded: Vec<Manifest> = spool
        .load()
        .unwrap()
        .into_iter()
        .map(|s| s.manifest)
        .collect();
    assert_eq!(loaded, vec![keep, last]);
    // The unfinished upload is given once, to the run after the one that began it,
    // whose cancel of it at the sites takes its place in the log until it is over.
    assert_eq!(spool.take_unfinished(), vec![manifest(7000)]);
    assert!(spool.take_unfinished().is_empty());
    let cancel = PendingCancel {
        transfer: 7000,
        service: SERVICE.into(),
        until_ms: 1_790_000_600_000,
        told: vec!["site-0".into()],
    };
    spool.keep_cancel(&cancel).unwrap();
    drop(spool);
    let mut spool = Spool::new(&dir).unwrap();
    assert!(spool.take_unfinished().is_empty());
    assert_eq!(spool.cancels(), [cancel]);
    spool.cancel_over(7000).unwrap();
    drop(spool);
    assert!(Spool::new(&dir).unwrap().cancels().is_empty());
}

#[test]
fn a_source_that_is_not_a_stable_regular_file_is_refused() {
    let (root, dir, mut spool) = fresh_spool();
    let err = spool.copy_in(1, root.path()).unwrap_err();
    assert!(err.to_string().contains("is not a regular file"), "{err}");
    // /proc says 0 bytes and gives more: the bytes read do not match the size.
    let err = spool
        .copy_in(2, Path::new("/proc/self/status"))
        .unwrap_err();
    assert!(
        err.to_string().contains("changed while it was copied"),
        "{err}"
    );
    assert_eq!(spooled_files(&dir), 0);
}

#[test]
fn small_files_share_segments_that_are_emptied_and_removed() {
    for fsync in [Fsync::Never, Fsync::Always] {
        small_files_share_segments(fsync);
    }
}

/// With a policy, each sync covers what was written since the last one: the files'
/// bytes, the log, and the directory when a name was made.
#[test]
fn a_syncing_spool_syncs_bytes_log_and_directory_once_for_what_they_hold() {
    let (root, dir, spool) = fresh_spool();
    drop(spool);
    let mut spool = Spool::open(&dir, Fsync::Batch).unwrap();
    assert!(!spool.needs_sync());
    let manifest = |transfer: u64, size: u64| Manifest {
        size,
        ..outbox_manifest(transfer, size, [0; 32])
    };
    // The first small file opens a segment: its bytes, the log, the new name.
    let (src, _) = write_file(root.path(), "a", 10_000, 1);
    spool.copy_in(1, &src).unwrap();
    spool.save(&manifest(1, 10_000)).unwrap();
    assert!(spool.needs_sync());
    assert_eq!(spool.sync().unwrap(), 3);
    assert!(!spool.needs_sync());
    // Two more in the same segment: its bytes once, the log once.
    for t in [2, 3] {
        spool.copy_in(t, &src).unwrap();
        spool.save(&manifest(t, 10_000)).unwrap();
    }
    assert_eq!(spool.sync().unwrap(), 2);
    // A large file has a file of its own: its bytes, the log, its name.
    let (big, _) = write_file(root.path(), "b", 2 << 20, 2);
    spool.copy_in(4, &big).unwrap();
    spool.save(&manifest(4, 2 << 20)).unwrap();
    assert_eq!(spool.sync().unwrap(), 3);
    // An outbox file is synced when it is hashed; its log line and its new name then.
    let (out, _) = write_file(root.path(), "c", 100, 3);
    spool.hash_in_place(5, &out).unwrap();
    spool.save(&manifest(5, 100)).unwrap();
    spool.move_in(5, &out, 100).unwrap();
    assert_eq!(spool.sync().unwrap(), 2);
    // Bytes written after a sync took the file are synced again once the upload is
    // whole (`written`).
    let mut w = spool.begin(7, 2 << 20).unwrap();
    w.write(&[1; 1000]).unwrap();
    assert_eq!(spool.sync_data().unwrap(), 2, "its bytes so far, its name");
    w.write(&[2; 1000]).unwrap();
    assert_eq!(spool.sync_data().unwrap(), 0);
    spool.written(7, &w);
    assert_eq!(spool.sync_data().unwrap(), 1);
    drop(w);
    spool.remove(7);
    spool.sync().unwrap();
    // An upload given up: its own file is not held open (nor synced) for nothing.
    let mut w = spool.begin(6, 2 << 20).unwrap();
    w.write(&[1; 1000]).unwrap();
    drop(w);
    spool.remove(6);
    assert_eq!(spool.sync_data().unwrap(), 1, "its name's removal only");
    assert_eq!(spool.sync().unwrap(), 0);
    // Without a policy nothing waits for a sync.
    let (root, _dir, mut spool) = fresh_spool();
    let (src, _) = write_file(root.path(), "a", 10_000, 1);
    spool.copy_in(1, &src).unwrap();
    spool.save(&manifest(1, 10_000)).unwrap();
    assert!(!spool.needs_sync());
}

fn small_files_share_segments(fsync: Fsync) {
    let (root, dir, spool) = fresh_spool();
    drop(spool);
    let mut spool = Spool::open(&dir, fsync).unwrap();
    let manifest = |transfer: u64, size: u64| Manifest {
        transfer,
        sender: "src".into(),
        service: SERVICE.into(),
        name: format!("f{transfer}"),
        size,
        chunk_size: 4096,
        sha256: [0; 32],
        expires_ms: 1,
        open: false,
        targets: vec!["site-0".into()],
    };
    // 2,000 files of 10,000 bytes: two segments (16 MiB each at most), no file each.
    let mut contents = Vec::new();
    for t in 1..=2000u64 {
        let (src, data) = write_file(root.path(), "s.src", 10_000, t as u8);
        spool.copy_in(t, &src).unwrap();
        spool.save(&manifest(t, 10_000)).unwrap();
        contents.push(data);
    }
    let segments = |dir: &Path| {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".segment"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(segments(&dir), vec!["00000001.segment", "00000002.segment"]);
    // All of the first segment's files but one gone: the one left is moved to the
    // current segment and the first removed; its bytes read the same.
    for t in 2..=1600u64 {
        spool.remove(t);
    }
    assert_eq!(segments(&dir), vec!["00000002.segment"]);
    let mut buf = vec![0u8; 4096];
    spool.read_chunk(1, 4096, &mut buf).unwrap();
    assert_eq!(buf, contents[0][4096..8192]);
    // A restart finds them where they are.
    drop(spool);
    let mut spool = Spool::new(&dir).unwrap();
    let loaded: Vec<u64> = spool
        .load()
        .unwrap()
        .into_iter()
        .map(|s| s.manifest.transfer)
        .collect();
    // In the order they were queued, the moved one too.
    let expected: Vec<u64> = std::iter::once(1).chain(1601..=2000).collect();
    assert_eq!(loaded, expected);
    for t in [1u64, 1700, 2000] {
        spool.read_chunk(t, 8192, &mut buf[..1808]).unwrap();
        assert_eq!(buf[..1808], contents[t as usize - 1][8192..]);
    }
    // Everything delivered: the segments give their space back.
    for t in loaded {
        spool.remove(t);
    }
    assert_eq!(spool.segment_bytes(), 0);
    assert_eq!(spooled_files(&dir), 0);
}

/// The manifest the outbox gives a file of `size` bytes queued as `transfer`.
fn outbox_manifest(transfer: u64, size: u64, sha256: [u8; 32]) -> Manifest {
    Manifest {
        transfer,
        sender: "src".into(),
        service: SERVICE.into(),
        name: "eod.csv".into(),
        size,
        chunk_size: 4096,
        sha256,
        expires_ms: 1,
        open: false,
        targets: vec!["site-0".into()],
    }
}

#[test]
fn an_outbox_file_is_in_the_outbox_or_queued_whichever_step_the_node_stops_at() {
    let (root, dir, mut spool) = fresh_spool();
    let (src, data) = write_file(root.path(), "eod.csv", 10_000, 3);
    let reopen = |spool: Spool| {
        drop(spool); // as kill -9 leaves it: nothing of the spool is only in memory
        let mut spool = Spool::new(&dir).unwrap();
        let queued: Vec<u64> = spool
            .load()
            .unwrap()
            .iter()
            .map(|s| s.manifest.transfer)
            .collect();
        (spool, queued)
    };
    // Stopped after the hash.
    spool.hash_in_place(1, &src).unwrap();
    let (mut spool, queued) = reopen(spool);
    assert!(queued.is_empty());
    assert_eq!(fs::read(&src).unwrap(), data, "still in the outbox");
    // Stopped after the manifest was saved, before the file moved in.
    let (size, sha256) = spool.hash_in_place(2, &src).unwrap();
    spool.save(&outbox_manifest(2, size, sha256)).unwrap();
    let (mut spool, queued) = reopen(spool);
    assert!(queued.is_empty(), "a manifest without its bytes is dropped");
    assert_eq!(fs::read(&src).unwrap(), data, "still in the outbox");
    // Every step done.
    let (size, sha256) = spool.hash_in_place(3, &src).unwrap();
    spool.save(&outbox_manifest(3, size, sha256)).unwrap();
    spool.move_in(3, &src, size).unwrap();
    let (mut spool, queued) = reopen(spool);
    assert_eq!(queued, [3]);
    assert!(!src.exists(), "it left the outbox");
    let mut buf = vec![0; 4096];
    spool.read_chunk(3, 4096, &mut buf).unwrap();
    assert_eq!(buf, data[4096..8192]);
    // A file that grew after its hash stays in the outbox, grown.
    let (src, _) = write_file(root.path(), "late.csv", 5_000, 9);
    let (size, sha256) = spool.hash_in_place(4, &src).unwrap();
    spool.save(&outbox_manifest(4, size, sha256)).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&src)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"more"))
        .unwrap();
    let e = spool.move_in(4, &src, size).unwrap_err();
    assert!(e.to_string().contains("changed since it was hashed"), "{e}");
    assert_eq!(fs::metadata(&src).unwrap().len(), 5_004);
}

#[test]
fn a_partial_file_a_restarted_site_refuses_and_a_half_written_map_leave_the_disk() {
    let root = tempfile::tempdir().unwrap();
    let (net, id, _) = partway_through_a_big_file(root.path());
    let inbox_dir = net.sites[0].inbox.dir().to_path_buf();
    let partial = inbox_dir.join(PARTIAL_DIR);
    let left = || -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&partial)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    fs::write(partial.join(format!("{id:016x}.map.tmp")), b"cut").unwrap();
    // It starts again with a limit below the file's size.
    let mut inbox = Inbox::new(&inbox_dir, Fsync::Never).unwrap();
    let mut small = site_config(0);
    small.max_file_bytes = 1_000_000;
    let mut rx = Receiver::new(small, net.now);
    let partials = inbox.partial_manifests().unwrap();
    assert_eq!(partials.len(), 1);
    assert!(!left().iter().any(|f| f.ends_with(".tmp")), "{:?}", left());
    for m in partials {
        rx.resume(m, net.now, &mut inbox);
    }
    assert_eq!(left(), Vec::<String>::new());
}

/// A queue log line torn inside a UTF-8 character (site names and a site's reason come
/// from peers and may be any UTF-8) is skipped like any torn line: the spool opens, with
/// what the whole lines say.
#[test]
fn a_queue_log_line_torn_inside_a_character_does_not_stop_the_spool_opening() {
    let (root, dir, mut spool) = fresh_spool();
    let (src, _) = write_file(root.path(), "q.src", 10_000, 5);
    let (size, sha) = spool.copy_in(7, &src).unwrap();
    let m = q_csv(size, sha, &["site-0"]);
    spool.save(&m).unwrap();
    drop(spool);
    // A site's line cut in "é" (0xc3 0xa9) of its reason.
    fs::OpenOptions::new()
        .append(true)
        .open(dir.join("queue.log"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{\"reason\":\"disque plein: caf\xc3"))
        .unwrap();
    let mut spool = Spool::new(&dir).expect("a torn line is skipped");
    assert_eq!(spool.load().unwrap().len(), 1);
}
