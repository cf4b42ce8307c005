//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/nats_frames.rs` on stable
//! Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;

use std::path::Path;

#[test]
fn the_nats_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/nats_frames");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "corpus {} has too few inputs",
        dir.display()
    );
    for f in files {
        let data = std::fs::read(&f).expect("read");
        let outcome = fuzz_logic::nats_frames(&data);
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        // Hand-written seeds say what they must give.
        if name.starts_with("seed-valid-") {
            assert_eq!(outcome, fuzz_logic::Outcome::Whole, "{name}");
        } else if name.starts_with("seed-invalid-") {
            assert_eq!(outcome, fuzz_logic::Outcome::Refused, "{name}");
        }
    }
}
