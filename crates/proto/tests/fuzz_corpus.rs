//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`) through the same logic
//! as the cargo-fuzz targets, on stable Rust, so every `cargo test` re-checks the inputs
//! the fuzzer found interesting. The logic lives in `fuzz_logic/mod.rs`, which the fuzz
//! targets include too.
//!
//! Hand-written seeds are named for what they must do: `seed-valid-*` must be accepted
//! as a whole, `seed-invalid-*` must be rejected (with an error, not a panic).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

use replay::Seed;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs every file of one target's corpus directory; returns how many there were.
fn replay_target(target: &str) -> usize {
    let inputs = replay::inputs(target, 1);
    let mut failures = Vec::new();
    for input in &inputs {
        let name = &input.name;
        match catch_unwind(AssertUnwindSafe(|| fuzz_logic::run(target, &input.data))) {
            Err(_) => failures.push(format!("{name}: panicked (see the message above)")),
            Ok(Err(why)) if input.seed() == Seed::Valid => {
                failures.push(format!("{name}: valid seed rejected: {why}"))
            }
            Ok(Ok(())) if input.seed() == Seed::Invalid => {
                failures.push(format!("{name}: invalid seed accepted"))
            }
            Ok(_) => {}
        }
    }
    assert!(
        failures.is_empty(),
        "fuzz target {target}: {} of {} corpus files failed:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
    inputs.len()
}

#[test]
fn frame_decoder_corpus() {
    replay_target("frame_decoder");
}

#[test]
fn message_decoder_corpus() {
    replay_target("message_decoder");
}

#[test]
fn field_list_corpus() {
    replay_target("field_list");
}

#[test]
fn dictionary_corpus() {
    replay_target("dictionary");
}

/// Every directory under the corpus belongs to a known target, and every target has one.
#[test]
fn corpus_directories_match_the_targets() {
    let root = replay::root();
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
    targets.extend(["ws_frames", "json_session", "ws_connection"].map(String::from));
    // The backbone's, replayed by crates/backbone/tests/fuzz_corpus.rs.
    targets.push("backbone_messages".to_string());
    // The lab's NATS client, replayed by crates/bench/tests/nats_fuzz_corpus.rs.
    targets.push("nats_frames".to_string());
    // RSSL (RIPC and RWF, both sides), replayed by crates/rssl/tests/fuzz_corpus.rs.
    targets.push("rssl_connection".to_string());
    // File transfer's messages and a node's hub, replayed by
    // crates/files/tests/fuzz_corpus.rs.
    targets.extend(["files_messages".to_string(), "files_hub".to_string()]);
    // The journal's segments, replayed by crates/journal/tests/fuzz_corpus.rs.
    targets.push("journal_segment".to_string());
    // The RSSL dictionary files, replayed by crates/rssl/tests/fuzz_rdm_corpus.rs.
    targets.push("rdm_dictionary".to_string());
    targets.sort();
    assert_eq!(
        dirs, targets,
        "corpus directories and fuzz targets differ: add the target to fuzz_logic::run"
    );
}
