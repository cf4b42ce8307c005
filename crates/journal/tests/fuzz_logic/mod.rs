//! What the `journal_segment` fuzz target does with an input, shared with the
//! stable-Rust corpus replay test. A journal reads its segments back after a crash, and
//! a disk can hand it anything: the input is read as a whole segment file, and again as
//! the records behind a valid header (so the fuzzer explores records, not the magic).
//! Reading must never panic, and what it accepts must be exactly what was written: every
//! valid record encodes back to its own bytes, their seqs follow each other, and where
//! reading stopped is where the valid records end. A panic or a failed check is a bug.

use tickwire_journal::record::{self, RECORD_HEADER_LEN};
use tickwire_journal::segment::{self, Scan};

/// The first seq of the segment the records are read as.
pub(crate) const FIRST_SEQ: u64 = 1;

pub(crate) fn journal_segment(data: &[u8]) {
    // As a whole file: the header's checks too.
    if let Ok(scan) = segment::scan(data, FIRST_SEQ) {
        check(data, &scan);
    }
    let file = as_segment(data);
    let scan = segment::scan(&file, FIRST_SEQ).expect("a valid header is a segment");
    check(&file, &scan);
    // One record on its own, as recovery reads each.
    if let Ok((rec, len)) = record::decode(data) {
        assert!((RECORD_HEADER_LEN + 1..=data.len()).contains(&len));
        assert_eq!(
            encoded(&rec),
            &data[..len],
            "a record re-encodes to its bytes"
        );
    }
}

/// Whether every byte of `data`, read as the records of a segment, is a valid record
/// (what a `seed-valid-*` input must be, and a `seed-invalid-*` one must not).
pub(crate) fn accepted(data: &[u8]) -> bool {
    let file = as_segment(data);
    let scan = segment::scan(&file, FIRST_SEQ).expect("a valid header is a segment");
    scan.stopped.is_none()
}

/// `records` behind the header of a segment starting at [`FIRST_SEQ`].
pub(crate) fn as_segment(records: &[u8]) -> Vec<u8> {
    let mut file = segment::encode_header(FIRST_SEQ, 0).to_vec();
    file.extend_from_slice(records);
    file
}

fn check(file: &[u8], scan: &Scan<'_>) {
    assert!(scan.valid_len >= segment::HEADER_LEN && scan.valid_len <= file.len());
    match &scan.stopped {
        None => assert_eq!(scan.valid_len, file.len(), "read to the end"),
        Some(stop) => {
            assert_eq!(stop.offset, scan.valid_len, "stopped where the records end");
            assert!(stop.offset < file.len());
            assert!(!stop.why.is_empty());
        }
    }
    // The valid records, re-encoded one after another, are the file's bytes up to where
    // reading stopped, and their seqs follow each other from the segment's first.
    let mut again = Vec::with_capacity(scan.valid_len);
    again.extend_from_slice(&file[..segment::HEADER_LEN]);
    for (i, rec) in scan.records.iter().enumerate() {
        assert_eq!(rec.seq, FIRST_SEQ + i as u64);
        again.extend_from_slice(&encoded(rec));
    }
    assert_eq!(again, &file[..scan.valid_len]);
}

fn encoded(rec: &record::Record<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    rec.encode(&mut out).expect("a decoded record encodes");
    out
}
