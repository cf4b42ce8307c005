//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/nats_frames.rs` on stable
//! Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

use fuzz_logic::Outcome;
use replay::Seed;

#[test]
fn the_nats_corpus_replays_without_a_panic() {
    for input in replay::inputs("nats_frames", 8) {
        let outcome = fuzz_logic::nats_frames(&input.data);
        // Hand-written seeds say what they must give: a valid one whole frames, an
        // invalid one a refusal (not merely an incomplete frame).
        match input.seed() {
            Seed::Valid => assert_eq!(outcome, Outcome::Whole, "{}", input.name),
            Seed::Invalid => assert_eq!(outcome, Outcome::Refused, "{}", input.name),
            Seed::Found => {}
        }
    }
}
