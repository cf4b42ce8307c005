//! Replays the committed fuzz corpus of `fuzz/fuzz_targets/journal_segment.rs` on
//! stable Rust, through the same logic (`fuzz_logic/mod.rs`).

mod fuzz_logic;
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[test]
fn the_journal_corpus_replays_without_a_panic() {
    for input in replay::inputs("journal_segment", 6) {
        fuzz_logic::journal_segment(&input.data);
        let accepted = fuzz_logic::accepted(&input.data);
        input.check(accepted, &input.name);
    }
}

// Without a fuzzer at hand (cargo-fuzz needs nightly), the same checks on the valid
// seeds damaged at random, as a disk or a crash would: bytes flipped, the file cut,
// bytes inserted, a piece repeated.
proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    #[test]
    fn a_damaged_segment_is_read_as_far_as_it_is_whole(
        which in 0usize..3,
        flips in proptest::collection::vec((0usize..4096, 1u8..=255), 0..4),
        cut in proptest::option::of(0usize..4096),
        insert in proptest::option::of((0usize..4096, proptest::collection::vec(0u8..=255, 1..16))),
        repeat in proptest::option::of((0usize..4096, 1usize..64)),
    ) {
        let seeds: Vec<_> = replay::inputs("journal_segment", 6)
            .into_iter()
            .filter(|i| i.seed() == replay::Seed::Valid)
            .collect();
        let mut data = seeds[which % seeds.len()].data.clone();
        for (at, mask) in flips {
            if !data.is_empty() {
                let n = data.len();
                data[at % n] ^= mask;
            }
        }
        if let Some((at, bytes)) = insert {
            let at = at % (data.len() + 1);
            data.splice(at..at, bytes);
        }
        if let Some((at, len)) = repeat {
            if !data.is_empty() {
                let at = at % data.len();
                let piece = data[at..(at + len).min(data.len())].to_vec();
                data.splice(at..at, piece);
            }
        }
        if let Some(cut) = cut {
            data.truncate(cut % (data.len() + 1));
        }
        fuzz_logic::journal_segment(&data);
    }
}
