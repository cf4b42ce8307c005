//! Running a test inside a mount namespace of its own, where it can mount a small or
//! failing file system without touching the machine's.

use std::path::{Path, PathBuf};
use std::process::Command;
use tickwire_journal::Received;
use tickwire_proto::FieldList;

/// Set, to the test's directory, in the test binary run again inside the namespace.
const INSIDE: &str = "TICKWIRE_JOURNAL_TEST_NAMESPACE_DIR";

/// Runs this test binary's test `test` again inside a mount namespace (`unshare -m`,
/// root), where the shell command `mount` first mounts what the test needs under a new
/// directory `DIR` (given as `{dir}` in it), and `inside(DIR)` is the test's body;
/// `needs` says what the test needs when it cannot start. Fails unless the test passed
/// in there.
pub(crate) fn in_a_mount_namespace(test: &str, mount: &str, needs: &str, inside: fn(&Path)) {
    if let Ok(dir) = std::env::var(INSIDE) {
        inside(Path::new(&dir));
        return;
    }
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tickwire-journal-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = format!(
        "{} && exec '{}' --exact {test} --nocapture",
        mount.replace("{dir}", &dir.display().to_string()),
        std::env::current_exe().unwrap().display(),
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env(INSIDE, &dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs `unshare -m` ({e}), {needs} (root)"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A post of `fields` to FEED/SYM0, by alice.
pub(crate) fn post(post_id: u32, fields: &[u8]) -> Received<'_> {
    Received {
        service: "FEED",
        item: "SYM0",
        user: "alice",
        post_id,
        image: false,
        fields: FieldList::decode(fields).unwrap(),
    }
}
