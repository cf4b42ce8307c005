//! `FieldImage::apply`, per field of an update: the small images of the hot path (must
//! not get slower) and the large images an adversarial publisher can send. A plain
//! `std::time` harness (no dev-dependency): each case is timed in several samples and the
//! median is printed, in nanoseconds per field applied.
//!
//! `cargo bench -p tickwire-proto --bench image` (add a case name to run only the cases
//! whose name contains it).

use std::hint::black_box;
use std::time::{Duration, Instant};
use tickwire_proto::reference::{
    random_walk, typical, write_level1, write_level1_image, FeedRng, Level1,
};
use tickwire_proto::{encode_field_list, FieldImage, FieldList, Real, Value};

const SAMPLES: usize = 9;

/// Times `run` (which applies `fields` fields per call) in samples of about `target`
/// each; prints and returns the median in ns per field.
fn measure(name: &str, fields: usize, target: Duration, mut run: impl FnMut()) -> f64 {
    // Calibrate: calls per sample (at least one).
    let t = Instant::now();
    let mut calls = 0u64;
    while calls == 0 || t.elapsed() < target / 10 {
        run();
        calls += 1;
    }
    let calls = (target.as_nanos() as u64 * calls / t.elapsed().as_nanos().max(1) as u64).max(1);
    let mut per_field: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                run();
            }
            t.elapsed().as_nanos() as f64 / (calls as f64 * fields as f64)
        })
        .collect();
    per_field.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = per_field[SAMPLES / 2];
    println!(
        "{name:<44} {median:>9.2} ns/field  (min {:.2}, max {:.2}; {fields} fields x {calls} calls x {SAMPLES} samples)",
        per_field[0],
        per_field[SAMPLES - 1]
    );
    median
}

/// The 14-field image `tickwire publish` sends.
fn reference_image(q: &Level1) -> Vec<u8> {
    let mut out = Vec::new();
    write_level1_image(&mut out, "SYM0", q.last, q);
    out
}

/// The id of the `i`th field of an `n`-field image: spread out (every third id) as a
/// dictionary's are, unless that would leave the i16 range.
fn fid_of(n: usize, i: usize) -> i16 {
    (i * (65_000 / n).clamp(1, 3)) as i16 - 30_000
}

/// An image of `n` fields of 9-byte reals, ids spread as a dictionary's are.
fn image_of(n: usize) -> FieldImage {
    let bytes =
        encode_field_list((0..n).map(|i| (fid_of(n, i), Value::Real(Real::new(1_000_000, -4)))));
    let mut img = FieldImage::new();
    img.apply(FieldList::decode(&bytes).expect("image"));
    assert_eq!(img.len(), n);
    img
}

/// Updates of `k` of the `n` fields of `image_of(n)`: in image order or shuffled; the
/// mantissas alternate so the values change (same encoded length unless `widths`).
fn updates_of(n: usize, k: usize, shuffled: bool, widths: bool, rng: &mut FeedRng) -> Vec<Vec<u8>> {
    (0..64)
        .map(|u| {
            let mut picked: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                picked.swap(i, rng.below(i as u64 + 1) as usize);
            }
            picked.truncate(k);
            if !shuffled {
                picked.sort_unstable();
            }
            let mantissa = |i: usize| -> i64 {
                if widths {
                    // 1 to 7 bytes of varint: the encoded length changes.
                    1i64 << (7 * ((u + i) % 7))
                } else {
                    1_000_000 + (u as i64 % 2) * 100
                }
            };
            encode_field_list(
                picked
                    .iter()
                    .map(|&i| (fid_of(n, i), Value::Real(Real::new(mantissa(i), -4)))),
            )
        })
        .collect()
}

fn bench_updates(name: &str, img: &mut FieldImage, updates: &[Vec<u8>], target: Duration) {
    let lists: Vec<FieldList<'_>> = updates
        .iter()
        .map(|u| FieldList::decode(u).expect("update"))
        .collect();
    let fields = lists[0].len();
    let mut next = 0usize;
    measure(name, fields, target, || {
        img.apply(black_box(lists[next % lists.len()]));
        next += 1;
    });
    black_box(&*img);
}

/// 23-field updates, out of image order, to `items` images of 83 fields picked at
/// random; with `prefetch_ahead`, the image of the update that many ahead is loaded
/// first (`FieldImage::prefetch`).
fn bench_many(
    name: &str,
    items: usize,
    prefetch_ahead: Option<usize>,
    rng: &mut FeedRng,
    target: Duration,
) {
    let mut images: Vec<FieldImage> = (0..items).map(|_| image_of(83)).collect();
    let updates = updates_of(83, 23, true, false, rng);
    let lists: Vec<FieldList<'_>> = updates
        .iter()
        .map(|u| FieldList::decode(u).expect("update"))
        .collect();
    let item_of = |n: usize| n.wrapping_mul(2_654_435_761) % items;
    let mut next = 0usize;
    measure(name, 23, target, || {
        if let Some(ahead) = prefetch_ahead {
            images[item_of(next + ahead)].prefetch();
        }
        images[item_of(next)].apply(black_box(lists[next % lists.len()]));
        next += 1;
    });
    black_box(&images);
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let short = Duration::from_millis(300);
    let mut rng = FeedRng::new(42);

    // The hot path: the reference Level 1 update (10 fields, image order, same lengths)
    // into the 14-field reference image, and 1,024 successive quotes (some lengths change).
    let q = typical();
    if wanted("small/reference_update") {
        let mut img = FieldImage::new();
        img.apply(FieldList::decode(&reference_image(&q)).expect("image"));
        let mut u = Vec::new();
        write_level1(&mut u, &q);
        bench_updates("small/reference_update (14 fields)", &mut img, &[u], short);
    }
    if wanted("small/random_walk") {
        let mut img = FieldImage::new();
        img.apply(FieldList::decode(&reference_image(&q)).expect("image"));
        let updates = random_walk(q, &mut rng, 1024);
        bench_updates("small/random_walk (14 fields)", &mut img, &updates, short);
    }

    // Around the index threshold: 10-field updates into n-field images, in image order
    // and shuffled.
    for n in [16usize, 32, 48, 64, 65, 96, 128, 256, 1024] {
        for shuffled in [false, true] {
            let name = format!(
                "sized/{n}_fields/10_{}",
                if shuffled { "shuffled" } else { "in_order" }
            );
            if wanted(&name) {
                let mut img = image_of(n);
                let updates = updates_of(n, 10, shuffled, false, &mut rng);
                bench_updates(&name, &mut img, &updates, short);
            }
        }
    }

    // Many wide images, as a node's cache holds them: 1,000 items of 83 fields (the
    // perf tools' shape), 23-field updates out of image order to items at random, so
    // each update finds its image and index out of the CPU's nearer caches.
    let name = "many/1000_images_83_fields/23_shuffled";
    if wanted(name) {
        bench_many(name, 1_000, None, &mut rng, short);
    }
    // The same out of every cache: 100,000 items (about 200 MB of images), as a node's
    // cache of that many wide items holds them; each image is loaded 4 updates ahead
    // with `FieldImage::prefetch`, as the node's merge does (SETTLE_IMAGE_AHEAD).
    let name = "many/100000_images_83_fields/23_shuffled_prefetched";
    if wanted(name) {
        bench_many(name, 100_000, Some(4), &mut rng, short);
    }

    // The attack: a 60,000-field image, 15,000-field updates in reverse field order; the
    // same with every value changing length. Each sample is at least one update.
    let long = Duration::from_secs(2);
    for widths in [false, true] {
        let name = format!(
            "large/60000_fields/15000_reverse{}",
            if widths { "_length_changes" } else { "" }
        );
        if wanted(&name) {
            let mut img = image_of(60_000);
            let updates: Vec<Vec<u8>> = (0..4)
                .map(|r| {
                    let picked = (0..15_000).rev().map(|i| i * 4 + r);
                    encode_field_list(picked.map(|i| {
                        let m = if widths {
                            1i64 << (7 * (i % 7))
                        } else {
                            1_000_100
                        };
                        (fid_of(60_000, i), Value::Real(Real::new(m, -4)))
                    }))
                })
                .collect();
            bench_updates(&name, &mut img, &updates, long);
        }
    }
}
