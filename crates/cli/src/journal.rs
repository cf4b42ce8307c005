//! `tickwire journal inspect DIR`: the journal's records, one JSON object per line,
//! read without changing anything (a torn last write is reported, not cut).

use crate::json::fields_json;
use crate::subscribe::Exit;
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use tickwire_journal::{files, segment, Body};
use tickwire_proto::Dictionary;

#[derive(clap::Subcommand)]
pub(crate) enum JournalCommand {
    /// Print every record of the journal in DIR, one JSON object per line: `seq`,
    /// `time_ns`, `stream` ("received" or "completed"), `post_id`, `service`, `item`
    /// (a completed record repeats those of the post it completes, and names it in
    /// `received`), then `user` and `fields` (received) or `ok`, `nak_code`, `text`
    /// (completed); journaled refreshes and updates (`[journal] updates`) have `stream`
    /// "update", `post_id` null, `service`, `item`, `item_seq`, `kind` and `fields`. Exit status 1 if the journal is corrupt (what and where on standard
    /// error); a torn last write, which the node cuts at its next start, is reported
    /// and is not an error.
    Inspect {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// Posts held at most while they wait for their answers (about 100 bytes each), to
/// name them in their completed records: past it the oldest is let go, and read again
/// from its segment if its answer comes.
const MAX_HELD: usize = 100_000;

pub(crate) fn run(cmd: JournalCommand) -> Result<()> {
    let JournalCommand::Inspect { dir } = cmd;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let listed = inspect(&dir, &mut out, MAX_HELD).and_then(|corrupt| {
        out.flush()?;
        Ok(corrupt)
    });
    match listed {
        Ok(false) => Ok(()),
        Ok(true) => Err(Exit(1).into()),
        // A reader that stopped reading (`| head`) ends the listing quietly, as it ends
        // `subscribe` (reading files gives no broken pipe).
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// What a completed record names of its post: post_id, service, item.
type Post = (u32, String, String);

/// The posts read and not yet answered, by seq: at most `max` (a journal may hold any
/// number of posts waiting for their answers), the oldest let go first.
struct Posts {
    held: BTreeMap<u64, Post>,
    max: usize,
}

impl Posts {
    fn received(&mut self, seq: u64, post: Post) {
        if self.held.len() >= self.max {
            self.held.pop_first();
        }
        self.held.insert(seq, post);
    }

    /// Answered: no longer held (another answer to it would find it in its segment).
    fn answered(&mut self, seq: u64) -> Option<Post> {
        self.held.remove(&seq)
    }
}

/// A segment, read a record at a time; or why its header does not read.
fn open_segment(
    path: &Path,
    first: u64,
) -> Result<Result<segment::Reader<BufReader<File>>, segment::HeaderError>> {
    let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    segment::Reader::new(BufReader::new(file), first)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// Whether `e` is a file not found: a segment removed since it was listed, as a
/// running node removes its oldest ones (`retain_mb`).
fn removed(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether a segment whose header does not read is what a crash leaves before its
/// header reached the disk ([`segment::header_cut_short`] of the whole file), read a
/// chunk at a time.
fn header_cut_short(path: &Path) -> Result<bool> {
    let mut file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut head = Vec::new();
    (&mut file)
        .take(segment::HEADER_LEN as u64)
        .read_to_end(&mut head)?;
    Ok(segment::header_cut_short(&head) && segment::rest_is_zeros(&mut file)?)
}

/// The post received as `seq`, read again from its segment (the one of the highest first
/// seq not above it, in `list`: the segments read so far).
fn read_post(list: &[(u64, PathBuf)], seq: u64) -> Result<Option<Post>> {
    let Some((first, path)) = list.iter().rev().find(|(first, _)| *first <= seq) else {
        return Ok(None);
    };
    let opened = match open_segment(path, *first) {
        Ok(opened) => opened,
        // Removed meanwhile: as a post removed before the listing began.
        Err(e) if removed(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Ok(mut reader) = opened else {
        return Ok(None);
    };
    while let Some(r) = reader
        .next_record()
        .with_context(|| format!("cannot read {}", path.display()))?
    {
        if r.seq == seq {
            return Ok(match &r.body {
                Body::Received(p) => Some((p.post_id, p.service.to_string(), p.item.to_string())),
                _ => None,
            });
        }
    }
    Ok(None)
}

/// Writes the records of the journal in `dir` to `out`, reading one record at a time
/// and holding at most `max_held` posts; whether it is corrupt (what and where on
/// standard error).
fn inspect(dir: &Path, out: &mut impl Write, max_held: usize) -> Result<bool> {
    let dict = Dictionary::market_price();
    let list = files::list_segments(dir)
        .with_context(|| format!("cannot read journal directory {}", dir.display()))?;
    let mut posts = Posts {
        held: BTreeMap::new(),
        max: max_held,
    };
    let mut corrupt = false;
    // The seq the next segment must start at, as the node checks it.
    let mut next_seq: Option<u64> = None;
    // The segment before, if it held no records (only the last one may).
    let mut empty_before: Option<&PathBuf> = None;
    for (i, (first, path)) in list.iter().enumerate() {
        let last = i + 1 == list.len();
        if let Some(empty) = empty_before.take() {
            eprintln!(
                "tickwire journal: {}: segments do not follow each other: it holds no records, yet {} follows it (only the last segment can be empty)",
                empty.display(),
                segment::file_name(*first)
            );
            corrupt = true;
        } else if let Some(next) = next_seq.filter(|n| n != first) {
            eprintln!(
                "tickwire journal: {}: segments do not follow each other: it starts at seq {first}, the one before ends at {}",
                path.display(),
                next.saturating_sub(1)
            );
            corrupt = true;
        }
        let opened = match open_segment(path, *first) {
            Ok(opened) => opened,
            // Removed since it was listed, as the oldest segments of a running node go:
            // those before it went too (or it is a hole, an error). The listing goes on
            // at the next segment, which follows none printed.
            Err(e) if removed(&e) && list[..i].iter().all(|(_, p)| !p.exists()) => {
                eprintln!(
                    "tickwire journal: {}: removed while the journal was listed (the node's retain_mb)",
                    path.display()
                );
                next_seq = None;
                empty_before = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut reader = match opened {
            Ok(r) => r,
            Err(e) if last && header_cut_short(path)? => {
                eprintln!(
                    "tickwire journal: {}: a segment whose header never reached the disk ({e}); the node removes it at its next start",
                    path.display()
                );
                continue;
            }
            Err(e) => {
                eprintln!("tickwire journal: {}: {e}", path.display());
                corrupt = true;
                continue;
            }
        };
        let mut records = 0;
        while let Some(r) = reader
            .next_record()
            .with_context(|| format!("cannot read {}", path.display()))?
        {
            records += 1;
            let mut o = json!({
                "seq": r.seq,
                "time_ns": r.time_ns,
                "stream": r.body.stream().name(),
            });
            match &r.body {
                Body::Received(p) => {
                    posts.received(
                        r.seq,
                        (p.post_id, p.service.to_string(), p.item.to_string()),
                    );
                    o["post_id"] = json!(p.post_id);
                    o["service"] = json!(p.service);
                    o["item"] = json!(p.item);
                    o["user"] = json!(p.user);
                    o["image"] = json!(p.image);
                    o["fields"] = fields_json(&dict, p.fields);
                }
                Body::Completed(c) => {
                    let post = match posts.answered(c.received) {
                        Some(p) => Some(p),
                        // Let go (or answered before): in a segment read so far, before
                        // this record, if anywhere.
                        None if c.received < r.seq => read_post(&list[..=i], c.received)?,
                        None => None,
                    };
                    let (post_id, service, item) =
                        post.unwrap_or((0, String::new(), String::new()));
                    o["received"] = json!(c.received);
                    o["post_id"] = json!(post_id);
                    o["service"] = json!(service);
                    o["item"] = json!(item);
                    o["ok"] = json!(c.nak.is_none());
                    if let Some(code) = c.nak {
                        o["nak_code"] = json!(code.name());
                    }
                    o["text"] = json!(c.text);
                }
                Body::Update(m) => {
                    // Not a post: no post id (the key is there for every record).
                    o["post_id"] = json!(null);
                    o["service"] = json!(m.service);
                    o["item"] = json!(m.item);
                    o["item_seq"] = json!(m.seq);
                    o["kind"] = json!(if m.refresh { "refresh" } else { "update" });
                    o["fields"] = fields_json(&dict, m.fields);
                }
            }
            writeln!(out, "{o}")?;
        }
        next_seq = Some(first + records);
        // (A segment whose first record is corrupt is said to be so, below.)
        empty_before = (records == 0 && reader.stopped().is_none()).then_some(path);
        if let Some(stop) = reader.stopped() {
            if last && stop.torn {
                eprintln!(
                    "tickwire journal: {}: an interrupted last write at byte {} ({}); the node cuts it at its next start",
                    path.display(),
                    stop.offset,
                    stop.why
                );
            } else {
                eprintln!(
                    "tickwire journal: {}: corrupt at byte {}: {}",
                    path.display(),
                    stop.offset,
                    stop.why
                );
                corrupt = true;
            }
        }
    }
    Ok(corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_journal::{Journal, JournalOptions, Received, SyncPolicy};
    use tickwire_proto::{encode_field_list, FieldList, NakCode, Real, Value};

    #[test]
    fn posts_waiting_for_their_answers_are_held_at_most_max() {
        let mut posts = Posts {
            held: BTreeMap::new(),
            max: 2,
        };
        for seq in 1..=5 {
            posts.received(seq, (seq as u32, "FEED".into(), format!("SYM{seq}")));
            assert!(posts.held.len() <= 2, "{} held", posts.held.len());
        }
        assert_eq!(posts.answered(5), Some((5, "FEED".into(), "SYM5".into())));
        assert_eq!(posts.answered(5), None);
        assert_eq!(posts.answered(1), None, "the oldest was let go");
    }

    /// A journal in `dir` (made anew) of six posts over segments of a record or two,
    /// then their answers, last first, the first twice.
    fn posts_journal(dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
        let f = encode_field_list([(22, Value::Real(Real::new(1, -2)))]);
        {
            let opts = JournalOptions {
                sync: SyncPolicy::Never,
                segment_bytes: 150,
                ..JournalOptions::default()
            };
            let (mut j, _) = Journal::open(dir, opts).unwrap();
            let items = ["SYM0", "SYM1", "SYM2", "SYM3", "SYM4", "SYM5"];
            let mut seqs = Vec::new();
            for (post_id, item) in items.iter().enumerate() {
                let post = Received {
                    service: "FEED",
                    item,
                    user: "alice",
                    post_id: post_id as u32,
                    image: false,
                    fields: FieldList::decode(&f).unwrap(),
                };
                seqs.push(j.received(&post, 1).unwrap());
                j.commit().unwrap();
            }
            // Answered last first, the first twice.
            for &seq in seqs.iter().rev().chain(&seqs[..1]) {
                j.completed(seq, Some(NakCode::SymbolUnknown), "no", 2)
                    .unwrap();
                j.commit().unwrap();
            }
        }
        assert!(files::list_segments(dir).unwrap().len() > 2);
    }

    /// Holding 2 posts, inspect names every post in its answers as holding them all
    /// does: those let go are read again from their segments.
    #[test]
    fn a_bounded_inspect_prints_what_an_unbounded_one_does() {
        let dir =
            std::env::temp_dir().join(format!("tickwire-inspect-bounded-{}", std::process::id()));
        posts_journal(&dir);
        let listing = |max| {
            let mut out = Vec::new();
            assert!(!inspect(&dir, &mut out, max).unwrap(), "not corrupt");
            String::from_utf8(out).unwrap()
        };
        let bounded = listing(2);
        assert_eq!(bounded, listing(usize::MAX));
        let answers: Vec<serde_json::Value> = bounded
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|r: &serde_json::Value| r["stream"] == "completed")
            .collect();
        assert_eq!(answers.len(), 7);
        for a in &answers {
            assert!(
                a["item"].as_str().is_some_and(|i| i.starts_with("SYM")),
                "{a}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Removes the first segments at the first line written: a running node's
    /// retention removing its oldest segments while they are listed.
    struct RemovingAtFirstLine {
        out: Vec<u8>,
        remove: Vec<PathBuf>,
    }

    impl Write for RemovingAtFirstLine {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            for path in self.remove.drain(..) {
                std::fs::remove_file(path)?;
            }
            self.out.write(buf)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The oldest two segments go while the first is listed: the listing goes on at
    /// the next one left, not corrupt, and names the posts that went with them as it
    /// names those removed before it began (empty service and item).
    #[test]
    fn segments_removed_while_listed_are_passed_over() {
        let dir =
            std::env::temp_dir().join(format!("tickwire-inspect-removed-{}", std::process::id()));
        posts_journal(&dir);
        let list = files::list_segments(&dir).unwrap();
        let mut out = RemovingAtFirstLine {
            out: Vec::new(),
            remove: vec![list[0].1.clone(), list[1].1.clone()],
        };
        // Holding one post, the answers to the others read their segments again.
        assert!(!inspect(&dir, &mut out, 1).unwrap(), "not corrupt");
        let records: Vec<serde_json::Value> = String::from_utf8(out.out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert!(seqs.contains(&list[0].0), "{seqs:?}");
        assert!(!seqs.contains(&list[1].0), "{seqs:?}");
        let last = list.last().unwrap().0;
        assert!(seqs.contains(&last), "{seqs:?}");
        let unnamed = records
            .iter()
            .filter(|r| r["stream"] == "completed" && r["item"] == "")
            .count();
        assert!(unnamed > 0, "{records:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
