//! A sync that fails: an ext4 file system on a loop device whose backing file sits on a
//! full tmpfs, so writes reach the page cache and `fdatasync` fails (as a failing or
//! thinly provisioned disk does). Each test runs itself again inside a mount namespace
//! (`unshare -m`, root, loop devices, mkfs.ext4), where it mounts them.

mod common;

use common::post;
use std::path::Path;
use tickwire_journal::{Journal, JournalOptions, SyncPolicy};
use tickwire_proto::{encode_field_list, Value};

fn opts() -> JournalOptions {
    JournalOptions {
        sync: SyncPolicy::Batch,
        ..JournalOptions::default()
    }
}

/// Fills the tmpfs under the file system: from now on its syncs fail.
fn fill(dir: &Path) {
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
}

/// Large posts: each needs blocks of the file system the full tmpfs cannot back.
fn large() -> Vec<u8> {
    let text = "x".repeat(60_000);
    encode_field_list([(25, Value::Ascii(&text))])
}

/// Inside the namespace: `dir` is the tmpfs, `dir/fs` the ext4 file system on it.
fn refused_posts_stay_refused(dir: &Path) {
    let journal = dir.join("fs/journal");
    let small = encode_field_list([(22, Value::Int(1))]);
    let large = large();
    let (mut j, _) = Journal::open(&journal, opts()).unwrap();
    let mut kept = Vec::new();
    for post_id in 0..4 {
        j.received(&post(post_id, &small), 0).unwrap();
        j.commit().unwrap();
        kept.push(post_id);
    }
    fill(dir);
    let mut refused = None;
    for post_id in 4..64 {
        j.received(&post(post_id, &large), 0).unwrap();
        match j.commit() {
            Ok(()) => kept.push(post_id),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("cannot sync"), "{text}");
                refused = Some(post_id);
                break;
            }
        }
    }
    let refused = refused.expect("a sync failed");
    // The poster of `refused` is told it is not kept; the node stops (or restarts).
    drop(j);
    let (j, _) = Journal::open(&journal, opts()).expect("the journal opens again");
    let pending: Vec<u32> = j.pending().map(|p| p.post_id).collect();
    assert!(
        !pending.contains(&refused),
        "post {refused}, refused, would be delivered to its publisher after the restart"
    );
    assert_eq!(
        pending, kept,
        "every post committed before the failed sync is kept"
    );
}

/// With `never`, the one sync a segment gets (as the next one starts) fails: the
/// journal is out of service, as after a commit's failed sync. It was counted as a roll
/// that could not be made, and tried again, while the posts went on being acknowledged.
fn a_failed_sync_at_a_segments_end(dir: &Path) {
    let opts = JournalOptions {
        sync: SyncPolicy::Never,
        segment_bytes: 256 * 1024,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(&dir.join("fs/journal"), opts).unwrap();
    fill(dir);
    let large = large();
    let mut refused = None;
    for post_id in 0..400 {
        // (Out of service, the journal takes no record either.)
        let kept = j
            .received(&post(post_id, &large), 0)
            .and_then(|_| j.commit());
        if let Err(e) = kept {
            refused = Some(e.to_string());
            break;
        }
    }
    let refused = refused.expect("the journal went on after its sync failed");
    assert!(refused.contains("cannot sync"), "{refused}");
}

#[test]
fn posts_a_failed_sync_refused_are_not_delivered_again_after_a_restart() {
    in_a_namespace_with_a_failing_sync(
        "posts_a_failed_sync_refused_are_not_delivered_again_after_a_restart",
        refused_posts_stay_refused,
    );
}

#[test]
fn a_failed_sync_at_a_segments_end_puts_a_never_syncing_journal_out_of_service() {
    in_a_namespace_with_a_failing_sync(
        "a_failed_sync_at_a_segments_end_puts_a_never_syncing_journal_out_of_service",
        a_failed_sync_at_a_segments_end,
    );
}

/// Runs this file's test `test` again inside a mount namespace with a failing sync
/// under `DIR/fs`, where `inside(DIR)` is its body.
fn in_a_namespace_with_a_failing_sync(test: &str, inside: fn(&Path)) {
    // The loop device is let go when the namespace's mount goes (`-o loop` autoclear).
    let mount = "mount -t tmpfs -o size=4m tmpfs '{dir}' && truncate -s 32M '{dir}/img' \
         && mkfs.ext4 -q -F -O ^has_journal -b 1024 '{dir}/img' && mkdir '{dir}/fs' \
         && mount -o loop,errors=continue '{dir}/img' '{dir}/fs'";
    common::in_a_mount_namespace(test, mount, "tmpfs and loop mounts, mkfs.ext4", inside);
}
