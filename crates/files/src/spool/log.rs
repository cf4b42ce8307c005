//! The spool's log: one JSON object per line. A transfer queued (its manifest, an
//! encoded Offer in hex, and where its bytes are), a large upload begun (its manifest:
//! if the node stops before the file is whole, the next run tells the sites to drop
//! what they got of it), a site's new state (and since when), what a file for every site knows of newer
//! files of its name, the sites still to tell to drop an upload a restart interrupted,
//! a transfer removed. Replayed when the
//! spool opens; a line that does not parse (a crash mid-append) is skipped.

use std::io;

use super::{PendingCancel, SpooledSite};
use crate::manifest::Manifest;
use crate::sender::Delivery;
use crate::wire::FilesMessage;

/// Where a queued transfer's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// A file of its own, `TRANSFER.data`.
    Own,
    /// Bytes `at..at + size` of segment `id`.
    Segment { id: u32, at: u64 },
}

/// One line of the log.
pub(super) enum LogLine {
    Queued(Manifest, Place),
    /// An upload begun, its file queued as it arrives: not whole yet.
    Arriving(Manifest),
    Site {
        transfer: u64,
        site: SpooledSite,
    },
    /// What a file for every site with no sites yet knows of newer files of its name
    /// (`SenderEvent::ReplacedAt`).
    ReplacedAt {
        transfer: u64,
        by: u64,
        sites: Vec<String>,
    },
    /// Sites are told to drop what they got of an upload a restart interrupted (it
    /// replaces the upload's `Arriving` line, and is written again as sites are told).
    Cancel(PendingCancel),
    /// Its sites are told no more.
    CancelOver(u64),
    /// A transfer's bytes moved (out of a sparse segment); its place in the queue
    /// stays.
    Moved {
        transfer: u64,
        place: Place,
    },
    Removed(u64),
}

impl LogLine {
    pub(super) fn to_json(&self) -> io::Result<String> {
        let v = match self {
            LogLine::Queued(m, place) => {
                let bytes = offer_bytes(m)?;
                match place {
                    Place::Own => serde_json::json!({ "queued": hex::encode(&bytes) }),
                    Place::Segment { id, at } => {
                        serde_json::json!({ "queued": hex::encode(&bytes), "segment": id, "at": at })
                    }
                }
            }
            LogLine::Arriving(m) => serde_json::json!({ "arriving": hex::encode(offer_bytes(m)?) }),
            LogLine::Site { transfer, site } => {
                let mut v = serde_json::json!({
                    "transfer": format!("{transfer:016x}"),
                    "site": site.site,
                    "state": site.state.as_str(),
                    "reason": site.reason,
                });
                if let Some(ms) = site.since_ms {
                    v["since_ms"] = ms.into();
                }
                v
            }
            LogLine::ReplacedAt {
                transfer,
                by,
                sites,
            } => serde_json::json!({
                "replaced_at": format!("{transfer:016x}"),
                "by": format!("{by:016x}"),
                "sites": sites,
            }),
            LogLine::Cancel(c) => serde_json::json!({
                "cancel": format!("{:016x}", c.transfer),
                "service": c.service,
                "until_ms": c.until_ms,
                "told": c.told,
            }),
            LogLine::CancelOver(t) => serde_json::json!({ "cancel_over": format!("{t:016x}") }),
            LogLine::Moved { transfer, place } => match place {
                Place::Own => serde_json::json!({ "moved": format!("{transfer:016x}") }),
                Place::Segment { id, at } => serde_json::json!({
                    "moved": format!("{transfer:016x}"), "segment": id, "at": at
                }),
            },
            LogLine::Removed(t) => serde_json::json!({ "removed": format!("{t:016x}") }),
        };
        let mut line = v.to_string();
        line.push('\n');
        Ok(line)
    }

    /// A line of the log; `None` for one that is torn or not ours.
    pub(super) fn parse(line: &str) -> Option<LogLine> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        let id = |key: &str| u64::from_str_radix(v[key].as_str()?, 16).ok();
        if let Some(h) = v["queued"].as_str() {
            return Some(LogLine::Queued(manifest_of(h)?, place(&v)?));
        }
        if let Some(h) = v["arriving"].as_str() {
            return Some(LogLine::Arriving(manifest_of(h)?));
        }
        if let Some(transfer) = id("moved") {
            return Some(LogLine::Moved {
                transfer,
                place: place(&v)?,
            });
        }
        if let Some(transfer) = id("replaced_at") {
            let sites = v["sites"].as_array()?.iter();
            return Some(LogLine::ReplacedAt {
                transfer,
                by: id("by")?,
                sites: sites
                    .map(|s| s.as_str().map(str::to_owned))
                    .collect::<Option<_>>()?,
            });
        }
        if let Some(transfer) = id("cancel") {
            let told = v["told"].as_array()?.iter();
            return Some(LogLine::Cancel(PendingCancel {
                transfer,
                service: v["service"].as_str()?.to_owned(),
                until_ms: v["until_ms"].as_u64()?,
                told: told
                    .map(|s| s.as_str().map(str::to_owned))
                    .collect::<Option<_>>()?,
            }));
        }
        if let Some(t) = id("cancel_over") {
            return Some(LogLine::CancelOver(t));
        }
        if let Some(t) = id("removed") {
            return Some(LogLine::Removed(t));
        }
        Some(LogLine::Site {
            transfer: id("transfer")?,
            site: SpooledSite {
                site: v["site"].as_str()?.to_owned(),
                state: Delivery::from_name(v["state"].as_str()?)?,
                reason: v["reason"].as_str().unwrap_or("").to_owned(),
                // Not in the lines of earlier versions.
                since_ms: v["since_ms"].as_u64(),
            },
        })
    }
}

/// A manifest as the log keeps it: an encoded Offer.
fn offer_bytes(m: &Manifest) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    FilesMessage::Offer(m.offer(0))
        .encode(&mut bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok(bytes)
}

/// The manifest of an encoded Offer in hex.
fn manifest_of(h: &str) -> Option<Manifest> {
    let bytes = hex::decode(h).ok()?;
    let FilesMessage::Offer(o) = FilesMessage::decode(&bytes).ok()? else {
        return None;
    };
    Some(Manifest::from_offer(&o))
}

/// The place a line gives: a segment and offset, else a file of its own.
fn place(v: &serde_json::Value) -> Option<Place> {
    Some(match (v["segment"].as_u64(), v["at"].as_u64()) {
        (Some(id), Some(at)) => Place::Segment {
            id: u32::try_from(id).ok()?,
            at,
        },
        _ => Place::Own,
    })
}
