//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/rdm_dictionary.rs` on stable
//! Rust, through the same logic (`fuzz_rdm/mod.rs`): `seed-valid-*` inputs must read,
//! `seed-invalid-*` ones must be refused with an error.

mod fuzz_rdm;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_dictionary_corpus_replays_without_a_panic() {
    for input in replay::inputs("rdm_dictionary", 6) {
        fuzz_rdm::rdm_dictionary(&input.data);
        let read = fuzz_rdm::read(&input.data).map(|d| d.len());
        input.check(read.is_ok(), &read);
    }
}
