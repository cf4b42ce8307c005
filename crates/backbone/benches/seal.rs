//! What authenticating the backbone costs per message: a source seals each message it
//! offers, an edge checks each it receives, with each MAC a key may use (keyed BLAKE3,
//! what `tickwire backbone keygen` writes; HMAC-SHA256, ring's assembly). Messages of
//! the sizes a source builds: one update, one 1,500-byte Ethernet datagram's worth, one
//! 9,000-byte jumbo frame's (the lab's default), and a file chunk of the lab's 62 KiB.
//! docs/BENCHMARKS.md ("An authenticated backbone") has the figures and the command:
//! `cargo bench -p tickwire-backbone --bench seal`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tickwire_backbone::auth::{Keys, Lane, Mac, Sealer, Verifier, TRAILER_LEN};
use tickwire_backbone::wire::data_header;

/// A data message of `len` bytes (a data header, then filler standing for updates).
fn message(len: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(len);
    data_header(&mut m, 0x5005);
    m.resize(len, 0x42);
    m
}

fn seal(c: &mut Criterion) {
    for mac in [Mac::Blake3, Mac::HmacSha256] {
        let line = format!("00000001 {} {}\n", "ab".repeat(32), mac.name());
        seal_with(c, &Keys::parse(&line).unwrap());
    }
}

fn seal_with(c: &mut Criterion, keys: &Keys) {
    let mut g = c.benchmark_group(format!("backbone seal {}", keys.signing().mac().name()));
    // One 74-byte update; what a 1408-byte and an 8192-byte datagram carry; a files
    // message of a 62 KiB chunk.
    for len in [
        88usize,
        1408 - 32 - TRAILER_LEN,
        8192 - 32 - TRAILER_LEN,
        62 * 1024 + 30,
    ] {
        let msg = message(len);
        g.throughput(Throughput::Bytes(len as u64));
        let mut sealer = Sealer::new(1, 1);
        g.bench_with_input(BenchmarkId::new("seal", len), &msg, |b, msg| {
            b.iter(|| {
                black_box(
                    sealer
                        .seal(keys.signing(), Lane::Data, black_box(msg), 0)
                        .len(),
                )
            })
        });
        // Every check passes: the counter grows as the sender's would.
        let mut sealer = Sealer::new(2, 1);
        let sealed: Vec<Vec<u8>> = (0..4096)
            .map(|_| sealer.seal(keys.signing(), Lane::Data, &msg, 0).to_vec())
            .collect();
        g.bench_with_input(BenchmarkId::new("verify", len), &sealed, |b, sealed| {
            let mut i = 0;
            let mut v = Verifier::default();
            b.iter(|| {
                if i == sealed.len() {
                    // A fresh receiver: the same counters pass again.
                    v = Verifier::default();
                    i = 0;
                }
                let ok = v.verify(keys, Lane::Data, black_box(&sealed[i]), 1).is_ok();
                i += 1;
                assert!(ok);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, seal);
criterion_main!(benches);
