//! The journal on real files in a temporary directory: what it keeps, what a torn last
//! record looks like after recovery, and what corruption it refuses.

use super::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use tickwire_proto::{encode_field_list, FieldList, NakCode, Real, ReplayFrom, Value};

/// A directory removed at the end of the test.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "tickwire-journal-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bid(v: i64) -> Vec<u8> {
    encode_field_list([(22, Value::Real(Real::new(v, -2)))])
}

fn post<'a>(item: &'a str, post_id: u32, fields: &'a [u8]) -> Received<'a> {
    Received {
        service: "FEED",
        item,
        user: "alice",
        post_id,
        image: false,
        fields: FieldList::decode(fields).unwrap(),
    }
}

fn opts(sync: SyncPolicy) -> JournalOptions {
    JournalOptions {
        sync,
        ..JournalOptions::default()
    }
}

/// Options of a journal that never syncs, with segments of `segment_bytes` (and every
/// segment kept).
fn small_segments(segment_bytes: u64) -> JournalOptions {
    JournalOptions {
        sync: SyncPolicy::Never,
        segment_bytes,
        ..JournalOptions::default()
    }
}

/// Whether the journal commits after every record, or once after them all.
#[derive(Clone, Copy)]
enum Commit {
    EachRecord,
    Once,
}

/// Opens the journal in `dir`, receives FEED's posts `post_ids` of `SYM0` (bid 0.01),
/// commits them and closes it.
fn write_posts(
    dir: &Path,
    options: JournalOptions,
    post_ids: std::ops::Range<u32>,
    commit: Commit,
) {
    let f = bid(1);
    let (mut j, _) = Journal::open(dir, options).unwrap();
    for i in post_ids {
        j.received(&post("SYM0", i, &f), 0).unwrap();
        if let Commit::EachRecord = commit {
            j.commit().unwrap();
        }
    }
    if let Commit::Once = commit {
        j.commit().unwrap();
    }
}

/// Why opening the journal in `dir` is refused (it is expected to be, for `why`).
fn refusal(dir: &Path, policy: SyncPolicy, why: &str) -> String {
    Journal::open(dir, opts(policy))
        .err()
        .expect(why)
        .to_string()
}

/// Changes the bytes of the first segment in `dir` with `damage`, on disk: its path and
/// its damaged bytes.
fn damage_first_segment(dir: &Path, damage: impl FnOnce(&mut [u8])) -> (PathBuf, Vec<u8>) {
    let path = segments(dir)[0].clone();
    let mut bytes = std::fs::read(&path).unwrap();
    damage(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    files::list_segments(dir)
        .unwrap()
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

#[test]
fn a_restart_finds_exactly_the_posts_received_and_not_completed() {
    let dir = TempDir::new("pending");
    let f = bid(10125);
    {
        let (mut j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Always)).unwrap();
        assert_eq!(rec.records, 0);
        let a = j.received(&post("SYM0", 1, &f), 100).unwrap();
        let b = j.received(&post("SYM1", 2, &f), 101).unwrap();
        let c = j.received(&post("SYM2", 3, &f), 102).unwrap();
        j.commit().unwrap();
        j.completed(b, None, "", 103).unwrap();
        j.completed(a, Some(NakCode::SymbolUnknown), "no such item", 104)
            .unwrap();
        j.commit().unwrap();
        assert_eq!((a, b, c), (1, 2, 3));
        assert_eq!(j.pending_count(), 1);
        // Appended but not committed: not in the journal.
        j.received(&post("SYM3", 4, &f), 105).unwrap();
    }
    let (j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Always)).unwrap();
    assert_eq!(rec.records, 5);
    assert_eq!(rec.cut, None);
    let pending: Vec<_> = j.pending().collect();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].seq, pending[0].item.as_str(), pending[0].post_id),
        (3, "SYM2", 3)
    );
    assert_eq!(pending[0].fields, f);
    assert_eq!(pending[0].user, "alice");
}

/// A journal opened in a directory that does not exist yet makes it, and each parent
/// it lacks, durable in its parent (a sync of the parent per directory made): a crash of
/// the machine must not lose the directory, and the synced segments in it.
#[test]
fn the_directories_a_new_journal_makes_are_synced_into_their_parents() {
    let base = TempDir::new("new-dirs");
    std::fs::create_dir_all(&base.0).unwrap();
    let syncs = |dir: &Path| {
        let (j, _) = Journal::open(dir, opts(SyncPolicy::Batch)).unwrap();
        j.stats().syscalls.syncs
    };
    let there = base.0.join("there");
    std::fs::create_dir_all(&there).unwrap();
    let in_existing = syncs(&there);
    let made = syncs(&base.0.join("a/b/journal"));
    assert_eq!(made, in_existing + 3, "a, b and journal each synced in");
    // Opened again, as an existing journal is: no directory is made.
    let again = syncs(&base.0.join("a/b/journal"));
    assert_eq!(again, syncs(&there), "opened again");
}

/// A second writer would append at its own idea of the end of the last segment, over
/// the first one's records: while a journal is open, opening it again (another node on
/// the same directory) is refused, and nothing of the first is touched.
#[test]
fn a_journal_open_elsewhere_is_not_opened_again() {
    let dir = TempDir::new("in-use");
    let f = bid(1);
    let (mut j, _) = Journal::open(&dir.0, opts(SyncPolicy::Batch)).unwrap();
    j.received(&post("SYM0", 1, &f), 0).unwrap();
    j.commit().unwrap();
    let text = refusal(&dir.0, SyncPolicy::Batch, "a journal in use is refused");
    assert!(text.contains("in use by another process"), "{text}");
    assert!(text.contains(&dir.0.display().to_string()), "{text}");
    j.received(&post("SYM0", 2, &f), 0).unwrap();
    j.commit().unwrap();
    drop(j);
    // Closed: it opens, with both records.
    let (j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Batch)).unwrap();
    assert_eq!((rec.records, j.pending_count()), (2, 2));
}

#[test]
fn each_policy_makes_the_system_calls_it_says() {
    for (policy, syncs) in [
        (SyncPolicy::Always, 1),
        (SyncPolicy::Batch, 1),
        (SyncPolicy::Never, 0),
    ] {
        let dir = TempDir::new("syscalls");
        let (mut j, _) = Journal::open(&dir.0, opts(policy)).unwrap();
        let before = j.stats().syscalls;
        let f = bid(1);
        for i in 0..10 {
            j.received(&post("SYM0", i, &f), 0).unwrap();
        }
        j.commit().unwrap();
        let after = j.stats().syscalls;
        assert_eq!(
            after.writes - before.writes,
            1,
            "{policy:?}: one write for 10 records"
        );
        assert_eq!(after.syncs - before.syncs, syncs, "{policy:?}");
        assert_eq!(j.stats().records, 10);
    }
}

/// With `never`, a segment is synced once, when it is full and the next one starts:
/// the next one's header is synced, and a machine crash must not keep it while this
/// one's last records are lost (segments that do not follow each other, which a restart
/// refuses).
#[test]
fn with_never_a_full_segment_is_synced_before_the_next_starts() {
    let dir = TempDir::new("never-roll");
    let (mut j, _) = Journal::open(&dir.0, small_segments(300)).unwrap();
    let f = bid(1);
    let mut rolls = 0;
    for i in 0..20 {
        let (before, segs) = (j.stats().syscalls.syncs, j.stats().segments);
        j.received(&post("SYM0", i, &f), 0).unwrap();
        j.commit().unwrap();
        let syncs = j.stats().syscalls.syncs - before;
        if j.stats().segments > segs {
            rolls += 1;
            // The full segment, the new one's header, the directory.
            assert_eq!(syncs, 3, "record {i}");
        } else {
            assert_eq!(syncs, 0, "record {i}");
        }
    }
    assert!(rolls >= 3, "{rolls}");
}

#[test]
fn segments_roll_and_a_missing_one_is_refused_by_name() {
    let dir = TempDir::new("roll");
    write_posts(&dir.0, small_segments(300), 0..20, Commit::EachRecord);
    let segs = segments(&dir.0);
    assert!(segs.len() >= 4, "{segs:?}");
    let (j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    assert_eq!((rec.records, j.pending_count()), (20, 20));
    drop(j);
    std::fs::remove_file(&segs[1]).unwrap();
    let text = refusal(&dir.0, SyncPolicy::Never, "a gap is an error");
    assert!(text.contains("do not follow each other"), "{text}");
    assert!(text.contains(&segment::file_name(0)[..10]), "{text}");
}

/// An empty segment (a header and no record) before another: the node never leaves one
/// (only its last segment is ever empty), so it is refused by name with the journal
/// left as it was. Seq 0, which no record has, included.
#[test]
fn an_empty_segment_before_another_is_refused_by_name() {
    let dir = TempDir::new("empty-before");
    write_posts(&dir.0, opts(SyncPolicy::Always), 1..2, Commit::Once);
    let kept = segments(&dir.0);
    let empty = dir.0.join(segment::file_name(0));
    std::fs::write(&empty, segment::encode_header(0, 0)).unwrap();
    let sizes = |paths: &[PathBuf]| -> Vec<u64> {
        paths
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .collect()
    };
    let before = sizes(&segments(&dir.0));
    let text = refusal(
        &dir.0,
        SyncPolicy::Always,
        "an empty segment before another is an error",
    );
    assert!(text.contains(&segment::file_name(0)), "{text}");
    assert!(text.contains("holds no records"), "{text}");
    assert!(text.contains(&segment::file_name(1)), "{text}");
    assert_eq!(sizes(&segments(&dir.0)), before, "nothing changed on disk");
    // Removed, the journal opens with its record.
    std::fs::remove_file(&empty).unwrap();
    assert_eq!(segments(&dir.0), kept);
    let (j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Always)).unwrap();
    assert_eq!((rec.records, j.pending_count()), (1, 1));
}

#[test]
fn a_flipped_byte_before_the_end_is_corruption_not_a_torn_write() {
    let dir = TempDir::new("corrupt");
    write_posts(&dir.0, opts(SyncPolicy::Never), 0..5, Commit::Once);
    let at = segment::HEADER_LEN + 20; // inside the first record's body
    let (path, bytes) = damage_first_segment(&dir.0, |bytes| bytes[at] ^= 0x40);
    let text = refusal(&dir.0, SyncPolicy::Never, "corruption is an error");
    assert!(text.contains("corrupt at byte 32"), "{text}");
    assert!(text.contains("checksum mismatch"), "{text}");
    // Left as it was for an operator to look at.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// A record's length is outside its checksum: one flipped bit there makes the record
/// look longer than the file, as a torn last write does. The whole records after it say
/// it is not: the journal is refused and left as it was, not cut (which would drop
/// every record after it, acknowledged posts among them).
#[test]
fn a_length_made_longer_than_the_file_by_a_flipped_bit_is_corruption_not_a_torn_write() {
    let dir = TempDir::new("length");
    write_posts(&dir.0, opts(SyncPolicy::Never), 0..20, Commit::Once);
    let mut at = 0;
    let (path, bytes) = damage_first_segment(&dir.0, |bytes| {
        let (_, one) = record::decode(&bytes[segment::HEADER_LEN..]).unwrap();
        // The 11th record's length, bit 16: longer than the 9 records left after it.
        at = segment::HEADER_LEN + 10 * one;
        bytes[at + 1] ^= 0x01;
    });
    let text = refusal(&dir.0, SyncPolicy::Never, "corruption is an error");
    assert!(text.contains(&format!("corrupt at byte {at}")), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_segment_whose_header_never_reached_the_disk_is_removed() {
    let dir = TempDir::new("header");
    write_posts(&dir.0, opts(SyncPolicy::Never), 1..2, Commit::Once);
    let next = dir.0.join(segment::file_name(2));
    std::fs::write(&next, &segment::MAGIC[..5]).unwrap();
    let (mut j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    assert_eq!(rec.records, 1);
    assert!(rec.cut.is_some());
    assert!(!next.exists());
    let f = bid(2);
    assert_eq!(j.received(&post("SYM0", 2, &f), 0).unwrap(), 2);
    j.commit().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A crash can cut the last write anywhere, or leave zeros after it: recovery keeps
    /// every record written whole before it, cuts the rest, and the journal goes on from
    /// the next seq.
    #[test]
    fn a_torn_last_write_is_cut_and_everything_before_it_kept(
        n in 1usize..12,
        cut_into_last in any::<prop::sample::Index>(),
        zeros in 0usize..64,
    ) {
        let dir = TempDir::new("torn");
        let f = bid(7);
        {
            let (mut j, _) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
            for i in 0..n {
                j.received(&post("SYM0", i as u32, &f), 0).unwrap();
                j.commit().unwrap();
            }
        }
        let path = segments(&dir.0)[0].clone();
        let bytes = std::fs::read(&path).unwrap();
        // Where the last record starts: after n - 1 whole ones.
        let (_, one) = record::decode(&bytes[segment::HEADER_LEN..]).unwrap();
        let last_start = segment::HEADER_LEN + (n - 1) * one;
        let keep = last_start + cut_into_last.index(one); // 0..one bytes of the last record
        let mut torn = bytes[..keep].to_vec();
        torn.extend(std::iter::repeat_n(0u8, zeros));
        std::fs::write(&path, &torn).unwrap();

        let (mut j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
        prop_assert_eq!(rec.records, n as u64 - 1);
        prop_assert_eq!(j.pending_count(), n - 1);
        if torn.len() > last_start {
            let (p, at, len, _) = rec.cut.clone().expect("the torn write is reported");
            prop_assert_eq!(p, path.clone());
            prop_assert_eq!(at as usize, last_start);
            prop_assert_eq!(len as usize, torn.len() - last_start);
        }
        prop_assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, last_start);
        let seq = j.received(&post("SYM0", 99, &f), 0).unwrap();
        prop_assert_eq!(seq, n as u64);
        j.commit().unwrap();
        drop(j);
        let (_, rec) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
        prop_assert_eq!(rec.records, n as u64);
        prop_assert_eq!(rec.cut, None);
    }

    /// Whatever bytes a segment holds, reading it never panics, and what it calls valid
    /// decodes again record by record.
    #[test]
    fn scanning_any_bytes_never_panics(tail in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = segment::encode_header(1, 0).to_vec();
        bytes.extend_from_slice(&tail);
        let scan = segment::scan(&bytes, 1).unwrap();
        let mut at = segment::HEADER_LEN;
        for r in &scan.records {
            let (again, len) = record::decode(&bytes[at..]).unwrap();
            prop_assert_eq!(&again, r);
            at += len;
        }
        prop_assert_eq!(at, scan.valid_len);
    }
}

fn item_part(item: &str, seq: u32, refresh: bool, fields: &[u8]) -> Vec<u8> {
    let mut part = Vec::new();
    ItemMessage {
        service: "FEED",
        item,
        seq,
        refresh,
        update_type: if refresh { 0 } else { 1 },
        fields: FieldList::decode(fields).unwrap(),
    }
    .encode_part(&mut part)
    .unwrap();
    part
}

#[test]
fn a_history_across_a_damaged_segment_is_refused_not_given_with_a_hole() {
    let dir = TempDir::new("history-damaged");
    let (mut j, _) = Journal::open(&dir.0, small_segments(400)).unwrap();
    updates(&mut j, 1..=30);
    let all = segments(&dir.0);
    assert!(all.len() > 3);
    // A byte of a record in the second segment flips while the node runs.
    let mut bytes = std::fs::read(&all[1]).unwrap();
    bytes[segment::HEADER_LEN + 20] ^= 0x40;
    std::fs::write(&all[1], &bytes).unwrap();
    let Err(err) = j.history(&sym0_from_seq_1_until(30)) else {
        panic!("a history with a hole is refused");
    };
    let text = err.to_string();
    assert!(text.contains("corrupt at byte"), "{text}");
    assert!(text.contains(&all[1].display().to_string()), "{text}");
}

#[test]
fn the_history_of_an_item_is_its_journaled_messages_in_order_from_a_seq_or_a_time() {
    let dir = TempDir::new("history");
    let (mut j, _) = Journal::open(&dir.0, small_segments(400)).unwrap();
    // SYM0 and SYM1 interleaved, over several segments; a post in between.
    for seq in 1..=30u32 {
        for item in ["SYM0", "SYM1"] {
            let f = bid(seq as i64);
            j.item_message(&item_part(item, seq, seq == 1, &f), 1_000 * seq as u64)
                .unwrap();
        }
        if seq == 10 {
            let f = bid(0);
            j.received(&post("SYM0", 1, &f), 10_500).unwrap();
        }
        j.commit().unwrap();
    }
    assert!(segments(&dir.0).len() > 3);
    // Appended, not committed: history commits first.
    let f = bid(31);
    j.item_message(&item_part("SYM0", 31, false, &f), 31_000)
        .unwrap();
    let h = history_of(&mut j, "SYM0", ReplayFrom::Seq(25), 31, 100, usize::MAX);
    let seqs = seqs_of(&h);
    assert_eq!(seqs, (25..=31).collect::<Vec<_>>());
    assert_eq!(h.messages[0].fields, bid(25));
    assert!(!h.truncated);
    // From a time, up to a seq, at most a few (the latest).
    let h = history_of(&mut j, "SYM1", ReplayFrom::Time(5_000), 20, 100, usize::MAX);
    assert_eq!(h.messages.first().map(|m| m.seq), Some(5));
    assert_eq!(h.messages.last().map(|m| m.seq), Some(20));
    let h = history_of(&mut j, "SYM1", ReplayFrom::Seq(1), 30, 4, usize::MAX);
    assert_eq!(seqs_of(&h), [27, 28, 29, 30]);
    assert!(h.truncated);
    assert!(h.messages.iter().all(|m| !m.refresh));
    let h = history_of(&mut j, "SYM1", ReplayFrom::Seq(1), 1, 10, usize::MAX);
    assert!(h.messages[0].refresh);
    // Item messages are not posts: nothing pending but the one post.
    drop(j);
    let (j, rec) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    assert_eq!(rec.records, 62);
    assert_eq!(j.pending_count(), 1);
}

/// A history of large messages is cut to what fits its bytes, not only its count: a
/// subscriber's queue is bounded in bytes, and a replay of a few thousand large images
/// must not pass it (nor the node hold them all).
#[test]
fn a_history_of_large_messages_is_cut_to_its_bytes_keeping_the_latest() {
    let dir = TempDir::new("history-bytes");
    let (mut j, _) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    let text = "x".repeat(10_000);
    let big = encode_field_list([(25, Value::Ascii(&text))]);
    for seq in 1..=50u32 {
        j.item_message(&item_part("SYM0", seq, seq == 1, &big), 1_000 * seq as u64)
            .unwrap();
    }
    let h = history_of(&mut j, "SYM0", ReplayFrom::Seq(1), 50, 1_000, 100_000);
    let bytes: usize = h.messages.iter().map(|m| m.fields.len()).sum();
    assert!(bytes <= 100_000, "{bytes} bytes of fields");
    assert!(h.truncated);
    let seqs = seqs_of(&h);
    assert_eq!(seqs, (50 - seqs.len() as u32 + 1..=50).collect::<Vec<_>>());
    assert!(seqs.len() >= 9, "{seqs:?}");
}

/// An item's seqs start again when its publisher restarts: a history from a time before
/// that restart has the messages before it, whatever their seqs, then those after it.
#[test]
fn a_history_across_a_publisher_restart_keeps_the_messages_before_it() {
    let dir = TempDir::new("history-restart");
    let (mut j, _) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    let mut t = 0u64;
    for seq in (1..=30u32).chain(1..=5) {
        t += 1_000;
        let f = bid(seq as i64);
        j.item_message(&item_part("SYM0", seq, seq == 1, &f), t)
            .unwrap();
    }
    let h = history_of(&mut j, "SYM0", ReplayFrom::Time(20_000), 5, 100, usize::MAX);
    let seqs = seqs_of(&h);
    assert_eq!(seqs, (20..=30).chain(1..=5).collect::<Vec<_>>());
    assert!(!h.truncated);
    // The latest few; and up to a seq the restart has not reached, the messages before it.
    let h = history_of(&mut j, "SYM0", ReplayFrom::Seq(1), 5, 3, usize::MAX);
    assert_eq!(seqs_of(&h), [3, 4, 5]);
    assert!(h.truncated);
    let h = history_of(&mut j, "SYM0", ReplayFrom::Seq(1), 3, 2, usize::MAX);
    assert_eq!(seqs_of(&h), [2, 3]);
}

/// FEED's `item` from `from`, up to seq `until`, at most `max` messages and `max_bytes`
/// of fields.
fn history_of(
    j: &mut Journal,
    item: &str,
    from: tickwire_proto::ReplayFrom,
    until: u32,
    max: usize,
    max_bytes: usize,
) -> crate::History {
    j.history(&crate::HistoryQuery {
        service: "FEED".into(),
        item: item.into(),
        from,
        until,
        max,
        max_bytes,
    })
    .unwrap()
}

/// FEED's SYM0 from seq 1 up to `until`: at most 100 messages, of any size.
fn sym0_from_seq_1_until(until: u32) -> crate::HistoryQuery {
    crate::HistoryQuery {
        service: "FEED".into(),
        item: "SYM0".into(),
        from: ReplayFrom::Seq(1),
        until,
        max: 100,
        max_bytes: usize::MAX,
    }
}

/// The history is its item's seqs from some seq past 1 up to `last`, one after another:
/// the oldest ones were removed, and nothing after them is missing.
fn assert_seqs_past_1_up_to(h: &crate::History, last: u32) {
    let seqs = seqs_of(h);
    let first = *seqs.first().expect("some are left");
    assert!(first > 1, "{seqs:?}");
    assert_eq!(seqs, (first..=last).collect::<Vec<_>>());
}

/// The seqs of a history's messages, in order.
fn seqs_of(h: &crate::History) -> Vec<u32> {
    h.messages.iter().map(|m| m.seq).collect()
}

/// A journal of `segment_bytes` segments that removes its oldest past `retain_bytes`.
fn retaining(dir: &Path, segment_bytes: u64, retain_bytes: u64) -> (Journal, Recovery) {
    let opts = JournalOptions {
        retain_bytes,
        ..small_segments(segment_bytes)
    };
    Journal::open(dir, opts).unwrap()
}

/// Appends SYM0's updates `seqs`, each committed on its own.
fn updates(j: &mut Journal, seqs: std::ops::RangeInclusive<u32>) {
    for seq in seqs {
        let f = bid(seq as i64);
        j.item_message(&item_part("SYM0", seq, seq == 1, &f), 1_000 * seq as u64)
            .unwrap();
        j.commit().unwrap();
    }
}

/// Appends SYM0's updates `seqs` as `updates` does, stopping once `segment` is gone
/// (removed by retention).
fn updates_until_gone(j: &mut Journal, seqs: std::ops::RangeInclusive<u32>, segment: &Path) {
    for seq in seqs {
        updates(j, seq..=seq);
        if !segment.exists() {
            break;
        }
    }
}

fn bytes_on_disk(dir: &Path) -> u64 {
    segments(dir)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// Past `retain_bytes` the oldest segments go, whole and oldest first, as new ones
/// start; never the one holding a post not yet answered (a restart delivers it), nor
/// any after it. What is left opens again, and an item's history starts at its oldest
/// message left.
#[test]
fn old_segments_go_past_the_retained_size_but_not_one_with_an_unanswered_post() {
    let dir = TempDir::new("retain");
    let (segment, retain) = (400, 1_200);
    let (mut j, _) = retaining(&dir.0, segment, retain);
    let f = bid(1);
    let waiting = j.received(&post("SYM1", 7, &f), 0).unwrap();
    j.commit().unwrap();
    updates(&mut j, 1..=40);
    assert!(segments(&dir.0).len() > 4);
    assert_eq!(j.stats().segments_removed, 0, "held by the post");
    assert_eq!(j.stats().retention_held_by, Some(waiting));
    assert!(bytes_on_disk(&dir.0) > retain);

    // Answered: the next segment's start removes what is past the size.
    j.completed(waiting, None, "", 0).unwrap();
    j.commit().unwrap();
    updates(&mut j, 41..=60);
    assert!(j.stats().segments_removed > 0);
    assert_eq!(j.stats().retention_held_by, None);
    assert_eq!(j.stats().removal_failures, 0);
    // Within the size, but for the segment being written (it may pass it a little).
    assert!(
        bytes_on_disk(&dir.0) <= retain + segment,
        "{}",
        bytes_on_disk(&dir.0)
    );
    let left = files::list_segments(&dir.0).unwrap();
    let oldest_left = left[0].0;
    assert!(oldest_left > 1);
    drop(j);

    let (mut j, rec) = retaining(&dir.0, segment, retain);
    assert_eq!(j.pending_count(), 0);
    assert_eq!(rec.segments, left.len());
    let h = history_of(&mut j, "SYM0", ReplayFrom::Seq(1), 60, 100, usize::MAX);
    assert_eq!(seqs_of(&h).last(), Some(&60));
    assert_seqs_past_1_up_to(&h, 60);
}

/// A size lowered since the last run applies when the journal opens.
#[test]
fn a_lowered_retained_size_applies_at_open() {
    let dir = TempDir::new("retain-open");
    {
        let (mut j, _) = retaining(&dir.0, 400, 0);
        updates(&mut j, 1..=40);
        assert_eq!(j.stats().segments_removed, 0, "0 keeps every segment");
    }
    let before = segments(&dir.0).len();
    let (j, _) = retaining(&dir.0, 400, 800);
    assert!(j.stats().segments_removed > 0);
    assert_eq!(
        segments(&dir.0).len() as u64,
        before as u64 - j.stats().segments_removed
    );
    assert!(bytes_on_disk(&dir.0) <= 800 + 400);
}

/// A replay's source is taken, then old segments go before it is read (the replay
/// thread reads beside the journal's): the history starts at the oldest message left,
/// rather than failing on a segment that is gone.
#[test]
fn a_history_read_after_old_segments_went_starts_at_the_oldest_left() {
    let (dir, mut j, source) = a_replay_source_of_20_updates("retain-replay");
    let removed = j.stats().segments_removed;
    let oldest = files::list_segments(&dir.0).unwrap()[0].1.clone();
    // Until the oldest segment the source lists goes (the next roll or two).
    updates_until_gone(&mut j, 21..=40, &oldest);
    assert!(!oldest.exists() && j.stats().segments_removed > removed);
    let h = source.read(&sym0_from_seq_1_until(20)).unwrap();
    assert_seqs_past_1_up_to(&h, 20);
}

/// A journal of 400-byte segments keeping 1,200 bytes, holding SYM0's updates 1 to 20,
/// and a replay's source taken from it then.
fn a_replay_source_of_20_updates(tag: &str) -> (TempDir, Journal, crate::HistorySource) {
    let dir = TempDir::new(tag);
    let (mut j, _) = retaining(&dir.0, 400, 1_200);
    updates(&mut j, 1..=20);
    let source = j.history_source().unwrap();
    (dir, j, source)
}

/// A segment of each kind of record, as the journal writes it: its bytes (first seq 1).
fn a_segment_of_each_kind() -> Vec<u8> {
    let dir = TempDir::new("reader");
    let f = bid(7);
    let (mut j, _) = Journal::open(&dir.0, opts(SyncPolicy::Never)).unwrap();
    let a = j.received(&post("SYM0", 1, &f), 10).unwrap();
    j.item_message(&item_part("SYM0", 1, true, &f), 11).unwrap();
    let b = j.received(&post("SYM1", 2, &f), 12).unwrap();
    j.completed(a, None, "", 13).unwrap();
    j.completed(b, Some(NakCode::SymbolUnknown), "no such item", 14)
        .unwrap();
    j.commit().unwrap();
    drop(j);
    std::fs::read(&segments(&dir.0)[0]).unwrap()
}

/// Seqs read, bytes up to the last record, where and why reading stopped.
type Found = Result<(Vec<u64>, u64, Option<segment::Stop>), segment::HeaderError>;

fn found_by_scan(bytes: &[u8]) -> Found {
    let s = segment::scan(bytes, 1)?;
    let seqs = s.records.iter().map(|r| r.seq).collect();
    Ok((seqs, s.valid_len as u64, s.stopped))
}

fn found_by_reader(bytes: &[u8]) -> Found {
    let mut r = segment::Reader::new(bytes, 1).unwrap()?;
    let mut seqs = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        seqs.push(rec.seq);
    }
    Ok((seqs, r.valid_len(), r.stopped().cloned()))
}

/// Read record by record, a segment is judged as a scan of it whole judges it: cut
/// anywhere, a byte flipped anywhere, zeros from anywhere or after its end.
#[test]
fn a_segment_read_record_by_record_is_what_a_scan_finds() {
    let whole = a_segment_of_each_kind();
    let mut cases = vec![whole.clone(), [&whole[..], &[0; 100]].concat()];
    for at in 0..whole.len() {
        cases.push(whole[..at].to_vec());
        let mut flipped = whole.clone();
        flipped[at] ^= 0x5a;
        cases.push(flipped);
        let mut zeroed = whole.clone();
        zeroed[at..].fill(0);
        cases.push(zeroed);
    }
    let mut torn = 0;
    for (i, bytes) in cases.iter().enumerate() {
        let found = found_by_reader(bytes);
        assert_eq!(found, found_by_scan(bytes), "case {i}");
        torn += matches!(found, Ok((_, _, Some(ref s))) if s.torn) as usize;
    }
    assert!(torn > 0, "torn tails are among the cases");
}

/// The reader reads no further than the record it yields: a segment of any size is
/// read in the memory of one record.
#[test]
fn a_segment_reader_yields_each_record_having_read_only_it() {
    use std::cell::Cell;
    use std::rc::Rc;
    /// Counts the bytes read through it.
    struct Counting<'a>(&'a [u8], Rc<Cell<usize>>);
    impl std::io::Read for Counting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n);
            Ok(n)
        }
    }
    let bytes = a_segment_of_each_kind();
    let read = Rc::new(Cell::new(0));
    let mut r = segment::Reader::new(Counting(&bytes, read.clone()), 1)
        .unwrap()
        .unwrap();
    assert_eq!(read.get(), segment::HEADER_LEN);
    let mut end = segment::HEADER_LEN;
    let mut seqs = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        seqs.push(rec.seq);
        end += record::decode(&bytes[end..]).unwrap().1;
        assert_eq!(read.get(), end, "record {}", rec.seq);
    }
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    assert_eq!((end, r.stopped()), (bytes.len(), None));
}

/// A replay reads its oldest segment while retention removes it and the next one (the
/// replay thread reads beside the journal's): the history starts at the oldest message
/// it can still read, rather than failing on the next segment, gone. The oldest segment
/// is made a pipe holding its bytes, so that it is read at a chosen moment.
#[test]
fn a_history_whose_next_segment_goes_while_it_reads_one_starts_at_the_oldest_left() {
    use std::io::Write;
    let (dir, mut j, source) = a_replay_source_of_20_updates("retain-race");
    let listed = files::list_segments(&dir.0).unwrap();
    assert!(listed.len() >= 3, "{listed:?}");
    let (oldest, next) = (listed[0].1.clone(), listed[1].1.clone());
    let bytes = std::fs::read(&oldest).unwrap();
    std::fs::remove_file(&oldest).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&oldest)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = std::thread::spawn(move || source.read(&sym0_from_seq_1_until(20)));
    // Opens once the reader has opened the oldest segment.
    let mut pipe = std::fs::OpenOptions::new()
        .write(true)
        .open(&oldest)
        .unwrap();
    pipe.write_all(&bytes).unwrap();
    // Retention removes the oldest two while it is being read.
    updates_until_gone(&mut j, 21..=60, &next);
    assert!(!next.exists() && !oldest.exists());
    drop(pipe);
    let h = reader.join().unwrap().unwrap();
    assert_seqs_past_1_up_to(&h, 20);
}
