//! A disk that fills when the journal starts its next segment, on a tmpfs of its own:
//! this test runs itself again inside a mount namespace (`unshare -m`, root), where it
//! mounts one.

mod common;

use common::post;
use std::path::Path;
use tickwire_journal::{segment, Journal, JournalOptions, SyncPolicy};
use tickwire_proto::{encode_field_list, FieldList, Real, Value};

fn opts() -> JournalOptions {
    // Every commit starts a new segment: each is a roll on a full disk.
    JournalOptions {
        sync: SyncPolicy::Always,
        segment_bytes: 1,
        ..JournalOptions::default()
    }
}

/// The segment files in `dir`, with their sizes.
fn segment_sizes(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".twj"))
        .map(|e| {
            let len = e.metadata().unwrap().len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    v.sort();
    v
}

/// Inside the namespace, the journal in `dir` on a tmpfs: the disk is filled, commits
/// go on in the current segment as far as its last page holds them while every new
/// segment fails; none of those is left behind, and the journal opens again with every
/// record it committed.
fn on_a_full_disk(dir: &Path) {
    let journal = dir.join("journal");
    let fields = encode_field_list([(22, Value::Real(Real::new(1, -2)))]);
    let (mut j, _) = Journal::open(&journal, opts()).unwrap();
    let mut committed = 0u64;
    for i in 0..4 {
        j.received(&post(i, &fields), 0).unwrap();
        j.commit().unwrap();
        committed += 1;
    }
    // Fill the disk.
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    let mut roll_failed = 0;
    for i in 4..10_000 {
        j.received(&post(i, &fields), 0).unwrap();
        if j.commit().is_err() {
            break;
        }
        committed += 1;
        roll_failed = j.stats().roll_failures;
    }
    assert!(roll_failed > 0, "no segment failed to start");
    for (name, len) in segment_sizes(&journal) {
        assert!(
            len >= segment::HEADER_LEN as u64,
            "{name} left behind with {len} bytes (roll failures: {roll_failed})"
        );
    }
    drop(j);
    std::fs::remove_file(dir.join("filler")).unwrap();
    let (_, recovery) = Journal::open(&journal, opts()).expect("the journal opens again");
    assert_eq!(recovery.records, committed);
}

#[test]
fn a_segment_a_full_disk_cannot_start_is_not_left_behind() {
    in_a_namespace(
        "a_segment_a_full_disk_cannot_start_is_not_left_behind",
        on_a_full_disk,
    );
}

/// Inside the namespace: a journal of updates past its retained size on a disk that is
/// full. The old segments it removes are the room its next segment needs: they go
/// before the next one is made, so every roll still works and no commit fails.
fn retention_on_a_full_disk(dir: &Path) {
    let journal = dir.join("journal");
    let opts = JournalOptions {
        sync: SyncPolicy::Always,
        segment_bytes: 1,
        retain_bytes: 300,
    };
    let (mut j, _) = Journal::open(&journal, opts).unwrap();
    let fields = encode_field_list([(22, Value::Real(Real::new(1, -2)))]);
    let update = |j: &mut Journal, seq: u32| {
        let mut part = Vec::new();
        tickwire_journal::ItemMessage {
            service: "FEED",
            item: "SYM0",
            seq,
            refresh: false,
            update_type: 1,
            fields: FieldList::decode(&fields).unwrap(),
        }
        .encode_part(&mut part)
        .unwrap();
        j.item_message(&part, 0).unwrap();
        j.commit()
    };
    for seq in 1..=8 {
        update(&mut j, seq).unwrap();
    }
    let removed = j.stats().segments_removed;
    assert!(removed > 0, "past its size before the disk fills");
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
    for seq in 9..=100 {
        update(&mut j, seq).unwrap_or_else(|e| panic!("update {seq}: {e}"));
    }
    let s = j.stats();
    assert_eq!(s.roll_failures, 0, "{s:?}");
    assert!(s.segments_removed >= removed + 90, "{s:?}");
}

#[test]
fn old_segments_past_the_retained_size_make_room_on_a_full_disk() {
    in_a_namespace(
        "old_segments_past_the_retained_size_make_room_on_a_full_disk",
        retention_on_a_full_disk,
    );
}

/// Runs `inside` in a mount namespace of its own (this test binary again, as `test`),
/// on a tmpfs of 64 KiB mounted there.
fn in_a_namespace(test: &str, inside: fn(&Path)) {
    let mount = "mount -t tmpfs -o size=64k tmpfs '{dir}'";
    common::in_a_mount_namespace(test, mount, "tmpfs mounts", inside);
}
