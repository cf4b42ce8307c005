//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/files_messages.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_files_corpus_replays_without_a_panic() {
    for input in replay::inputs("files_messages", 8) {
        fuzz_logic::files_messages(&input.data);
        let decoded = tickwire_files::wire::FilesMessage::decode(&input.data);
        input.check(decoded.is_ok(), &decoded);
    }
}

#[test]
fn the_hub_corpus_replays_without_a_panic() {
    for input in replay::inputs("files_hub", 4) {
        fuzz_logic::files_hub(&input.data);
    }
}
