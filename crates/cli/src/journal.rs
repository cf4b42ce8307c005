//! `tickwire journal inspect DIR`: the journal's records, one JSON object per line,
//! read without changing anything (a torn last write is reported, not cut).

use crate::json::fields_json;
use crate::subscribe::Exit;
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
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

pub(crate) fn run(cmd: JournalCommand) -> Result<()> {
    let JournalCommand::Inspect { dir } = cmd;
    let dict = Dictionary::market_price();
    let list = files::list_segments(&dir)
        .with_context(|| format!("cannot read journal directory {}", dir.display()))?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    // received seq -> (post_id, service, item), to name what a completed record completes.
    let mut posts: HashMap<u64, (u32, String, String)> = HashMap::new();
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
        let bytes =
            files::read_file(path).with_context(|| format!("cannot read {}", path.display()))?;
        let scan = match segment::scan(&bytes, *first) {
            Ok(s) => s,
            Err(e) if last && segment::header_cut_short(&bytes) => {
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
        next_seq = Some(first + scan.records.len() as u64);
        // (A segment whose first record is corrupt is said to be so, below.)
        empty_before = (scan.records.is_empty() && scan.stopped.is_none()).then_some(path);
        for r in &scan.records {
            let mut o = json!({
                "seq": r.seq,
                "time_ns": r.time_ns,
                "stream": r.body.stream().name(),
            });
            match &r.body {
                Body::Received(p) => {
                    posts.insert(
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
                    let (post_id, service, item) = posts.get(&c.received).cloned().unwrap_or((
                        0,
                        String::new(),
                        String::new(),
                    ));
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
            if let Err(e) = writeln!(out, "{o}") {
                return reader_gone(e);
            }
        }
        if let Some(stop) = &scan.stopped {
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
    if let Err(e) = out.flush() {
        return reader_gone(e);
    }
    if corrupt {
        return Err(Exit(1).into());
    }
    Ok(())
}

/// A reader that stopped reading (`| head`) ends the listing quietly, as it ends
/// `subscribe`; any other write error is one.
fn reader_gone(e: std::io::Error) -> Result<()> {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Ok(());
    }
    Err(e.into())
}
