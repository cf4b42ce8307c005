//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/rssl_connection.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`). Its seeds are what
//! LSEG's own applications sent a provider (the ETA Consumer, EMA, ConsPerf, the
//! watchlist consumer, the NIProvider), captured on loopback.

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_rssl_corpus_replays_without_a_panic() {
    for input in replay::inputs("rssl_connection", 5) {
        fuzz_logic::rssl_connection(&input.data);
    }
}
