//! Replays the committed fuzz corpus of the gateway's targets (`fuzz/corpus/ws_frames`,
//! `fuzz/corpus/json_session`) on stable Rust, through the same logic as the cargo-fuzz
//! targets (`fuzz_logic/mod.rs`). A panic is a bug; rejecting an input is fine.

mod fuzz_logic;

use std::path::Path;

#[test]
fn the_gateway_corpus_replays_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for target in fuzz_logic::TARGETS {
        let dir = root.join(target);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()))
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "corpus {} is empty", dir.display());
        for f in files {
            let data = std::fs::read(&f).expect("read");
            let _ = fuzz_logic::run(target, &data);
        }
    }
}
