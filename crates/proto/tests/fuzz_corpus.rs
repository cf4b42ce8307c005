//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same logic
//! as the cargo-fuzz targets, on stable Rust, so every `cargo test` re-checks the inputs
//! the fuzzer found interesting. The logic lives in `fuzz_logic/mod.rs`, which the fuzz
//! targets include too.
//!
//! Hand-written seeds are named for what they must do: `seed-valid-*` must be accepted
//! as a whole, `seed-invalid-*` must be rejected (with an error, not a panic).

mod fuzz_logic;

use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn corpus_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    assert!(
        root.is_dir(),
        "fuzz corpus directory {} is missing: the corpus is part of the repository",
        root.display()
    );
    root
}

/// Runs every file of one target's corpus directory; returns how many there were.
fn replay(target: &str) -> usize {
    let dir = corpus_root().join(target);
    assert!(
        dir.is_dir(),
        "corpus directory {} for fuzz target {target} is missing",
        dir.display()
    );
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    files.sort();
    let mut count = 0;
    let mut failures = Vec::new();
    for path in &files {
        assert!(path.is_file(), "{} is not a file", path.display());
        let data = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match catch_unwind(AssertUnwindSafe(|| fuzz_logic::run(target, &data))) {
            Err(_) => failures.push(format!("{name}: panicked (see the message above)")),
            Ok(Err(why)) if name.starts_with("seed-valid") => {
                failures.push(format!("{name}: valid seed rejected: {why}"))
            }
            Ok(Ok(())) if name.starts_with("seed-invalid") => {
                failures.push(format!("{name}: invalid seed accepted"))
            }
            Ok(_) => {}
        }
        count += 1;
    }
    assert!(
        failures.is_empty(),
        "fuzz target {target}: {} of {count} corpus files failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(count > 0, "corpus directory {} is empty", dir.display());
    count
}

#[test]
fn frame_decoder_corpus() {
    replay("frame_decoder");
}

#[test]
fn message_decoder_corpus() {
    replay("message_decoder");
}

#[test]
fn field_list_corpus() {
    replay("field_list");
}

#[test]
fn dictionary_corpus() {
    replay("dictionary");
}

/// Every directory under the corpus belongs to a known target, and every target has one.
#[test]
fn corpus_directories_match_the_targets() {
    let root = corpus_root();
    let mut dirs: Vec<String> = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("reading {}: {e}", root.display()))
        .map(|entry| {
            let entry = entry.expect("directory entry");
            assert!(
                entry.path().is_dir(),
                "{} is not a directory",
                entry.path().display()
            );
            entry.file_name().to_string_lossy().into_owned()
        })
        .collect();
    dirs.sort();
    let mut targets: Vec<String> = fuzz_logic::TARGETS.iter().map(|t| t.to_string()).collect();
    // The WebSocket gateway's targets, replayed by crates/gateway/tests/fuzz_corpus.rs.
    targets.extend(["ws_frames".to_string(), "json_session".to_string()]);
    // The backbone's, replayed by crates/backbone/tests/fuzz_corpus.rs.
    targets.push("backbone_messages".to_string());
    // The lab's NATS client, replayed by crates/bench/tests/nats_fuzz_corpus.rs.
    targets.push("nats_frames".to_string());
    // RSSL (RIPC and RWF, both sides), replayed by crates/rssl/tests/fuzz_corpus.rs.
    targets.push("rssl_connection".to_string());
    // File transfer's messages, replayed by crates/files/tests/fuzz_corpus.rs.
    targets.push("files_messages".to_string());
    targets.sort();
    assert_eq!(
        dirs, targets,
        "corpus directories and fuzz targets differ: add the target to fuzz_logic::run"
    );
}
