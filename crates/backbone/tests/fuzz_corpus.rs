//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/backbone_messages.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_backbone_corpus_replays_without_a_panic() {
    for input in replay::inputs("backbone_messages", 8) {
        fuzz_logic::backbone_messages(&input.data);
        let decoded = tickwire_backbone::wire::BackboneMessage::decode(&input.data);
        input.check(decoded.is_ok(), &decoded);
    }
}
