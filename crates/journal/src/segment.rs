//! Segments: the files of a journal, and reading one back (pure functions over bytes).
//!
//! A segment is a 32-byte header (`TWJOURN1`, header length, first seq, creation time)
//! followed by records whose seqs follow each other from the first. Reading one finds
//! its valid records and says where they end: a crash can leave the last record of the
//! last segment cut short (a torn write), which recovery cuts off; anything else that is
//! not a record is corruption.

use crate::record::{self, Record, RecordError};
use std::io::Read;

/// A segment's first bytes.
pub const MAGIC: &[u8; 8] = b"TWJOURN1";
/// A segment header's length.
pub const HEADER_LEN: usize = 32;
/// Segment files are named after their first seq: `00000000000000000001.twj`.
pub const EXTENSION: &str = "twj";

/// The file name of the segment starting at `first_seq`.
pub fn file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.{EXTENSION}")
}

/// The first seq a segment's file name says, if it is a segment's name.
pub fn parse_file_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".twj")?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// A segment's header.
pub fn encode_header(first_seq: u64, created_ns: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&(HEADER_LEN as u32).to_be_bytes());
    h[16..24].copy_from_slice(&first_seq.to_be_bytes());
    h[24..32].copy_from_slice(&created_ns.to_be_bytes());
    h
}

/// What reading a segment found.
#[derive(Debug)]
pub struct Scan<'a> {
    /// Its valid records, in order.
    pub records: Vec<Record<'a>>,
    /// Bytes from the start of the file up to the end of the last valid record.
    pub valid_len: usize,
    /// Why reading stopped before the end of the file, if it did.
    pub stopped: Option<Stop>,
}

/// Where and why reading a segment stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// The byte where it stopped.
    pub offset: usize,
    /// Why.
    pub why: String,
    /// What stopped the reading runs to the end of the file (a record cut short, or
    /// zeros the file system left after the last write): what a crash leaves.
    pub torn: bool,
}

/// Why a file is not a segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Shorter than a header.
    #[error("file of {0} bytes is shorter than a segment header")]
    Short(usize),
    /// No magic.
    #[error("not a journal segment (no TWJOURN1 magic)")]
    Magic,
    /// Its header and its name disagree on its first seq.
    #[error("segment header says first seq {header}, its name says {name}")]
    FirstSeq {
        /// What the header says.
        header: u64,
        /// What the name says.
        name: u64,
    },
}

/// Whether a bad record at the start of `rest` (the one of seq `due`) is what an
/// interrupted last write leaves: cut short, or followed by nothing but zeros (a file
/// system may extend a file before its data reaches the disk), or zeros itself.
fn is_last_write(rest: &[u8], e: &RecordError, due: u64) -> bool {
    if rest.iter().all(|&b| b == 0) {
        return true;
    }
    if matches!(e, RecordError::Short { .. }) {
        // Its length is outside the checksum: a flipped bit there also makes a record
        // look cut short. Whole, checked records after it say it was not the last write.
        return !the_next_record_follows(rest, due);
    }
    let len = u32::from_be_bytes(rest[0..4].try_into().expect("a header was read")) as usize;
    let end = record::RECORD_HEADER_LEN.saturating_add(len);
    matches!(
        e,
        RecordError::Checksum { .. } | RecordError::Body(_) | RecordError::UnknownStream(_)
    ) && rest
        .get(end..)
        .is_none_or(|after| after.iter().all(|&b| b == 0))
}

/// Whether a segment's bytes are what a crash leaves when it came before the header
/// reached the disk: nothing but zeros, or a beginning of the header and no more. As
/// the last segment, such a file held nothing and is removed at the next start.
pub fn header_cut_short(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
        || (bytes.len() < HEADER_LEN && MAGIC.starts_with(&bytes[..bytes.len().min(8)]))
}

/// Whether the record after `due` (seq `due + 1`), whole and with a checksum that holds,
/// starts anywhere in `rest` past its first header: the bad record is then not the last
/// one written. Only that seq: bytes inside a post cut short by a crash would have to
/// carry the very next seq, which a poster does not know, to be taken for it. Only on a
/// damaged tail, which is shorter than one record: its cost is bounded by that, and most
/// offsets fail the cheap checks before the checksum.
fn the_next_record_follows(rest: &[u8], due: u64) -> bool {
    /// Stream (1) and seq (8): the start of every body.
    const BODY_START: usize = 9;
    (record::RECORD_HEADER_LEN..rest.len()).any(|at| {
        let r = &rest[at..];
        if r.len() < record::RECORD_HEADER_LEN + BODY_START {
            return false;
        }
        let len = u32::from_be_bytes(r[0..4].try_into().expect("4 bytes")) as usize;
        let body = record::RECORD_HEADER_LEN;
        if !(BODY_START..=record::MAX_BODY).contains(&len) || r.len() < body + len {
            return false;
        }
        let seq = u64::from_be_bytes(r[body + 1..body + 9].try_into().expect("8 bytes"));
        seq == due + 1 && record::decode(r).is_ok_and(|(rec, _)| rec.seq == seq)
    })
}

/// Checks a segment's first bytes (all of them when fewer than a header) against the
/// first seq its name says.
fn check_header(bytes: &[u8], first_seq: u64) -> Result<(), HeaderError> {
    if bytes.len() < HEADER_LEN {
        return Err(HeaderError::Short(bytes.len()));
    }
    if &bytes[0..8] != MAGIC {
        return Err(HeaderError::Magic);
    }
    let header_seq = u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if header_seq != first_seq {
        return Err(HeaderError::FirstSeq {
            header: header_seq,
            name: first_seq,
        });
    }
    Ok(())
}

/// Reads a segment whose name says `first_seq`: its records up to the first thing that
/// is not the next record.
pub fn scan(bytes: &[u8], first_seq: u64) -> Result<Scan<'_>, HeaderError> {
    check_header(bytes, first_seq)?;
    let mut at = HEADER_LEN;
    let mut next = first_seq;
    let mut records = Vec::new();
    let stopped = loop {
        if at == bytes.len() {
            break None;
        }
        let rest = &bytes[at..];
        match record::decode(rest) {
            Ok((rec, len)) if rec.seq == next => {
                records.push(rec);
                next += 1;
                at += len;
            }
            Ok((rec, _)) => {
                break Some(Stop {
                    offset: at,
                    why: format!("record seq {} where {next} was due", rec.seq),
                    torn: false,
                })
            }
            Err(e) => {
                let torn = is_last_write(rest, &e, next);
                break Some(Stop {
                    offset: at,
                    why: e.to_string(),
                    torn,
                });
            }
        }
    };
    Ok(Scan {
        records,
        valid_len: at,
        stopped,
    })
}

/// Fills `buf` from `src` up to `len` bytes, fewer only at the end of the file.
fn fill(src: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> std::io::Result<()> {
    let have = buf.len();
    src.take((len - have) as u64).read_to_end(buf)?;
    Ok(())
}

/// Whether what is left of `src` is nothing but zeros, read a chunk at a time.
pub fn rest_is_zeros(src: &mut impl Read) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    loop {
        match src.read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(n) if chunk[..n].iter().all(|&b| b == 0) => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// A segment read record by record from a file (or any reader), holding one record at
/// a time: what [`scan`] finds, in memory bounded by the largest record rather than the
/// segment's size (`tickwire journal inspect` reads journals of any size with it).
pub struct Reader<R> {
    src: R,
    /// The seq of the next record.
    next: u64,
    /// Bytes from the start of the file up to the end of the last valid record.
    valid_len: u64,
    /// The record being read.
    buf: Vec<u8>,
    stopped: Option<Stop>,
    done: bool,
}

impl<R: Read> Reader<R> {
    /// Reads the header of a segment whose name says `first_seq`: the reader, or why
    /// the file is not such a segment (as [`scan`] says it).
    pub fn new(mut src: R, first_seq: u64) -> std::io::Result<Result<Reader<R>, HeaderError>> {
        let mut header = Vec::with_capacity(HEADER_LEN);
        fill(&mut src, &mut header, HEADER_LEN)?;
        if let Err(e) = check_header(&header, first_seq) {
            return Ok(Err(e));
        }
        Ok(Ok(Reader {
            src,
            next: first_seq,
            valid_len: HEADER_LEN as u64,
            buf: Vec::new(),
            stopped: None,
            done: false,
        }))
    }

    /// The next valid record, or None at the end of the file or where reading stopped
    /// ([`Reader::stopped`] says why).
    pub fn next_record(&mut self) -> std::io::Result<Option<Record<'_>>> {
        if self.done {
            return Ok(None);
        }
        self.buf.clear();
        fill(&mut self.src, &mut self.buf, record::RECORD_HEADER_LEN)?;
        if self.buf.is_empty() {
            self.done = true;
            return Ok(None);
        }
        if self.buf.len() == record::RECORD_HEADER_LEN {
            let len = u32::from_be_bytes(self.buf[0..4].try_into().expect("4 bytes")) as usize;
            // A length out of range is left for `decode` to refuse, not read.
            if (1..=record::MAX_BODY).contains(&len) {
                fill(
                    &mut self.src,
                    &mut self.buf,
                    record::RECORD_HEADER_LEN + len,
                )?;
            }
        }
        let why = match record::decode(&self.buf) {
            Ok((rec, len)) if rec.seq == self.next => {
                self.next += 1;
                self.valid_len += len as u64;
                return Ok(Some(rec));
            }
            Ok((rec, _)) => Stop {
                offset: self.valid_len as usize,
                why: format!("record seq {} where {} was due", rec.seq, self.next),
                torn: false,
            },
            Err(e) => {
                // As `scan` judges it over the rest of the file: a record cut short is
                // the rest of the file already; any other bad record is the last write
                // only if nothing but zeros follows what was read of it.
                let torn = rest_is_zeros(&mut self.src)? && is_last_write(&self.buf, &e, self.next);
                Stop {
                    offset: self.valid_len as usize,
                    why: e.to_string(),
                    torn,
                }
            }
        };
        self.stopped = Some(why);
        self.done = true;
        Ok(None)
    }

    /// Why reading stopped before the end of the file, once it has.
    pub fn stopped(&self) -> Option<&Stop> {
        self.stopped.as_ref()
    }

    /// Bytes from the start of the file up to the end of the last record read.
    pub fn valid_len(&self) -> u64 {
        self.valid_len
    }
}
