//! A sync that fails: an ext4 file system on a loop device whose backing file sits on a
//! full tmpfs, so writes reach the page cache and `fdatasync` fails (as a failing or
//! thinly provisioned disk does). This test runs itself again inside a mount namespace
//! (`unshare -m`, root, loop devices, mkfs.ext4), where it mounts them.

use std::path::{Path, PathBuf};
use std::process::Command;
use tickwire_journal::{Journal, JournalOptions, Received, SyncPolicy};
use tickwire_proto::{encode_field_list, FieldList, Value};

const INSIDE: &str = "TICKWIRE_JOURNAL_FAILED_SYNC_DIR";
const TEST: &str = "posts_a_failed_sync_refused_are_not_delivered_again_after_a_restart";

fn opts() -> JournalOptions {
    JournalOptions {
        sync: SyncPolicy::Batch,
        ..JournalOptions::default()
    }
}

/// Inside the namespace: `dir` is the tmpfs, `dir/fs` the ext4 file system on it.
fn with_a_failing_sync(dir: &Path) {
    let journal = dir.join("fs/journal");
    let small = encode_field_list([(22, Value::Int(1))]);
    // Large posts: each needs blocks of the file system the full tmpfs cannot back.
    let text = "x".repeat(60_000);
    let large = encode_field_list([(25, Value::Ascii(&text))]);
    let post = |post_id, fields| Received {
        service: "FEED",
        item: "SYM0",
        user: "alice",
        post_id,
        image: false,
        fields: FieldList::decode(fields).unwrap(),
    };
    let (mut j, _) = Journal::open(&journal, opts()).unwrap();
    let mut kept = Vec::new();
    for post_id in 0..4 {
        j.received(&post(post_id, &small), 0).unwrap();
        j.commit().unwrap();
        kept.push(post_id);
    }
    // Fill the tmpfs under the file system.
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    let chunk = vec![7u8; 4096];
    while std::io::Write::write_all(&mut filler, &chunk).is_ok() {}
    drop(filler);
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

#[test]
fn posts_a_failed_sync_refused_are_not_delivered_again_after_a_restart() {
    if let Ok(dir) = std::env::var(INSIDE) {
        with_a_failing_sync(Path::new(&dir));
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tickwire-journal-sync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    // The loop device is let go when the namespace's mount goes (`-o loop` autoclear).
    let script = format!(
        "mount -t tmpfs -o size=4m tmpfs '{d}' && truncate -s 32M '{d}/img' \
         && mkfs.ext4 -q -F -O ^has_journal -b 1024 '{d}/img' && mkdir '{d}/fs' \
         && mount -o loop,errors=continue '{d}/img' '{d}/fs' \
         && exec '{}' --exact {TEST} --nocapture",
        exe.display(),
        d = dir.display(),
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env(INSIDE, &dir)
        .output()
        .expect("this test needs `unshare -m`, tmpfs and loop mounts, mkfs.ext4 (root)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
