//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/files_messages.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;

use std::path::Path;

#[test]
fn the_files_corpus_replays_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/files_messages");
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
        fuzz_logic::files_messages(&data);
        // Hand-written seeds say what they must do.
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let decoded = tickwire_files::wire::FilesMessage::decode(&data);
        if name.starts_with("seed-valid") {
            assert!(decoded.is_ok(), "{name}: valid seed rejected: {decoded:?}");
        } else if name.starts_with("seed-invalid") {
            assert!(
                decoded.is_err(),
                "{name}: invalid seed accepted: {decoded:?}"
            );
        }
    }
}
