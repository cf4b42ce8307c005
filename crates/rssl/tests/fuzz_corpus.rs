//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/rssl_connection.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`). Its seeds are what
//! LSEG's own applications sent a provider (the ETA Consumer, EMA, ConsPerf, the
//! watchlist consumer, the NIProvider), captured on loopback.

mod fuzz_logic;

use std::path::Path;

#[test]
fn the_rssl_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rssl_connection");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "corpus {} has too few inputs",
        dir.display()
    );
    for f in files {
        fuzz_logic::rssl_connection(&std::fs::read(&f).expect("read"));
    }
}
