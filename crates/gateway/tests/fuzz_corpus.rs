//! Replays the committed fuzz corpus of the gateway's targets (`fuzz/corpus/ws_frames`,
//! `json_session`, `ws_connection`) on stable Rust, through the same logic as the cargo-fuzz
//! targets (`fuzz_logic/mod.rs`). A panic is a bug; rejecting an input is fine, unless it is a hand-written seed whose name
//! says otherwise (`seed-valid-*`, `seed-invalid-*`).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_gateway_corpus_replays_without_a_panic() {
    for target in fuzz_logic::TARGETS {
        for input in replay::inputs(target, 1) {
            let verdict = fuzz_logic::run(target, &input.data);
            input.check(verdict.is_ok(), &verdict);
        }
    }
}
