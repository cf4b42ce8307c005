//! The audit log: one JSON object per line for everything that happened to a file at
//! this node (queued, each site's state, finished, arrived, failed), written as it
//! happens and read back when the node starts, so that `files status` still lists what
//! was sent and received before a restart (the spool keeps only what is still queued).

use crate::manifest::Manifest;
use crate::sender::Delivery;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::io::BufRead;

/// What happened, for the audit log (one JSON line each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubEvent {
    /// A client's file was queued (by `user`).
    Queued {
        /// The file.
        manifest: Manifest,
        /// Who queued it.
        user: String,
    },
    /// A site's delivery of one of this node's files changed.
    Site {
        /// The file.
        manifest: Manifest,
        /// The site (a node name).
        site: String,
        /// Where it stands.
        state: Delivery,
        /// Why (empty when there is nothing to say).
        reason: String,
    },
    /// One of this node's transfers is over.
    Finished {
        /// The file.
        manifest: Manifest,
        /// Every site named has it.
        delivered: bool,
    },
    /// A file arrived in this node's inbox.
    Arrived {
        /// The file.
        manifest: Manifest,
    },
    /// A file could not be taken here.
    Failed {
        /// The file.
        manifest: Manifest,
        /// Why (empty when there is nothing to say).
        reason: String,
    },
    /// The spool could not be written (the queue may not survive a restart).
    SpoolError {
        /// Why (empty when there is nothing to say).
        reason: String,
    },
}

/// One audit line for `event`, which happened at `at_ms` (milliseconds since 1970).
pub fn line(event: &HubEvent, at_ms: u64) -> Value {
    let (name, mut v) = match event {
        HubEvent::Queued { manifest, user } => {
            let mut v = file(manifest);
            v["user"] = json!(user);
            v["to"] = json!(if manifest.open {
                vec!["*".to_string()]
            } else {
                manifest.targets.clone()
            });
            ("queued", v)
        }
        HubEvent::Site {
            manifest,
            site,
            state,
            reason,
        } => {
            let mut v = file(manifest);
            v["site"] = json!(site);
            v["state"] = json!(state.as_str());
            if !reason.is_empty() {
                v["reason"] = json!(reason);
            }
            ("site", v)
        }
        HubEvent::Finished {
            manifest,
            delivered,
        } => {
            let mut v = file(manifest);
            v["delivered"] = json!(delivered);
            ("finished", v)
        }
        HubEvent::Arrived { manifest } => ("arrived", file(manifest)),
        HubEvent::Failed { manifest, reason } => {
            let mut v = file(manifest);
            v["reason"] = json!(reason);
            ("failed", v)
        }
        HubEvent::SpoolError { reason } => ("spool_error", json!({ "reason": reason })),
    };
    v["event"] = json!(name);
    v["time_ms"] = json!(at_ms);
    v
}

fn file(m: &Manifest) -> Value {
    json!({
        "transfer": format!("{:016x}", m.transfer),
        "file": m.name,
        "service": m.service,
        "size": m.size,
        "sha256": hex::encode(m.sha256),
        "sender": m.sender,
    })
}

/// A site's last state for a file, as the audit log tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastSite {
    /// The site (a node name).
    pub site: String,
    /// Its last state.
    pub state: Delivery,
    /// When it got there (milliseconds since 1970).
    pub since_ms: u64,
    /// Why (empty when there is nothing to say).
    pub reason: String,
}

/// A file whose story at this node is over: sent to its sites (finished) or received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastFile {
    /// What the log says of the file (its name, service, size, hash, sender, transfer;
    /// the fields only a transfer in flight needs are left empty).
    pub manifest: Manifest,
    /// Each site's last state, in the order the log names them.
    pub sites: Vec<PastSite>,
}

impl PastFile {
    fn set_site(&mut self, site: &str, state: Delivery, since_ms: u64, reason: &str) {
        let line = PastSite {
            site: site.to_string(),
            state,
            since_ms,
            reason: reason.to_string(),
        };
        match self.sites.iter_mut().find(|s| s.site == site) {
            Some(s) => *s = line,
            None => self.sites.push(line),
        }
    }
}

/// What a node's audit log says happened before it started.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct History {
    /// The latest files whose story is over, oldest first (at most `keep`).
    pub files: Vec<PastFile>,
    /// Transfers that arrived here (at most the last 100,000): offered again, they are
    /// answered "done", not received again.
    pub arrived: Vec<u64>,
    /// Lines that were not an audit record (a line cut short by a crash, say).
    pub unreadable: u64,
}

/// Transfers remembered as arrived, at most.
const MAX_ARRIVED: usize = 100_000;

/// Reads the audit log of the node named `site`, keeping the last `keep` files whose
/// story is over. Memory is bounded by `keep` and by the transfers still open in the
/// log, not by the log's length.
pub fn read_history(log: impl BufRead, site: &str, keep: usize) -> History {
    let mut history = History::default();
    let mut open: HashMap<u64, PastFile> = HashMap::new();
    let mut over: VecDeque<PastFile> = VecDeque::new();
    let mut arrived: VecDeque<u64> = VecDeque::new();
    for line in log.split(b'\n') {
        let Ok(line) = line else { break };
        // A line cut short (a crash or a full disk mid-write, perhaps inside a
        // character) is counted and passed over, as is any line that is not a record.
        let Some((event, at_ms, m, v)) = std::str::from_utf8(&line).ok().and_then(parse) else {
            history.unreadable += 1;
            continue;
        };
        let transfer = m.transfer;
        let file = open.entry(transfer).or_insert_with(|| PastFile {
            manifest: m,
            sites: Vec::new(),
        });
        let reason = v["reason"].as_str().unwrap_or("");
        let finished = match event.as_str() {
            "site" => {
                let state = v["state"].as_str().and_then(Delivery::from_name);
                if let (Some(to), Some(state)) = (v["site"].as_str(), state) {
                    file.set_site(to, state, at_ms, reason);
                }
                false
            }
            "arrived" => {
                arrived.push_back(transfer);
                if arrived.len() > MAX_ARRIVED {
                    arrived.pop_front();
                }
                // A file this node both sent and received keeps its sender's sites.
                if file.sites.is_empty() {
                    file.set_site(site, Delivery::Done, at_ms, "");
                }
                true
            }
            "failed" => {
                if file.sites.is_empty() {
                    file.set_site(site, Delivery::Failed, at_ms, reason);
                }
                true
            }
            "finished" => true,
            _ => false,
        };
        if finished {
            if let Some(done) = open.remove(&transfer) {
                over.retain(|f| f.manifest.transfer != transfer);
                over.push_back(done);
                if over.len() > keep {
                    over.pop_front();
                }
            }
        }
    }
    history.files = over.into();
    history.arrived = arrived.into();
    history
}

/// An audit line's event, time and file; None for anything else.
fn parse(text: &str) -> Option<(String, u64, Manifest, Value)> {
    let v: Value = serde_json::from_str(text).ok()?;
    let event = v["event"].as_str()?.to_string();
    let at_ms = v["time_ms"].as_u64()?;
    let transfer = u64::from_str_radix(v["transfer"].as_str()?, 16).ok()?;
    let sha256: [u8; 32] = hex::decode(v["sha256"].as_str()?).ok()?.try_into().ok()?;
    let m = Manifest {
        transfer,
        sender: v["sender"].as_str()?.to_string(),
        service: v["service"].as_str()?.to_string(),
        name: v["file"].as_str()?.to_string(),
        size: v["size"].as_u64()?,
        chunk_size: 0,
        sha256,
        expires_ms: 0,
        open: false,
        targets: Vec::new(),
    };
    Some((event, at_ms, m, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(transfer: u64, name: &str) -> Manifest {
        Manifest::sample(transfer, name, 12)
    }

    fn site(m: &Manifest, to: &str, state: Delivery, reason: &str) -> HubEvent {
        HubEvent::Site {
            manifest: m.clone(),
            site: to.into(),
            state,
            reason: reason.into(),
        }
    }

    fn log(events: &[(HubEvent, u64)]) -> String {
        events
            .iter()
            .map(|(e, at)| line(e, *at).to_string() + "\n")
            .collect()
    }

    #[test]
    fn the_history_keeps_each_finished_files_last_site_states_and_what_arrived() {
        let sent = manifest(0xa1, "eod.csv");
        let open = manifest(0xb2, "still-queued.csv");
        let got = manifest(0xc3, "ref.csv");
        let mut text = log(&[
            (
                HubEvent::Queued {
                    manifest: sent.clone(),
                    user: "alice".into(),
                },
                1_000,
            ),
            (site(&sent, "edge1", Delivery::Sending, ""), 1_001),
            (site(&sent, "edge2", Delivery::Sending, ""), 1_002),
            (site(&sent, "edge1", Delivery::Done, ""), 1_010),
            (site(&sent, "edge2", Delivery::Failed, "disk full"), 1_020),
            (
                HubEvent::Finished {
                    manifest: sent.clone(),
                    delivered: false,
                },
                1_021,
            ),
            (
                HubEvent::Queued {
                    manifest: open.clone(),
                    user: "alice".into(),
                },
                1_030,
            ),
            (
                HubEvent::Arrived {
                    manifest: got.clone(),
                },
                1_040,
            ),
        ]);
        text.push_str("{\"event\":\"site\",\"transfer\":\"00"); // cut short by a crash
        let h = read_history(text.as_bytes(), "here", 10);
        assert_eq!(h.unreadable, 1);
        assert_eq!(h.arrived, vec![0xc3]);
        assert_eq!(
            h.files.len(),
            2,
            "the queued file is the spool's, not history"
        );
        let f = &h.files[0];
        assert_eq!(
            (f.manifest.transfer, f.manifest.name.as_str()),
            (0xa1, "eod.csv")
        );
        assert_eq!(
            (
                f.manifest.size,
                f.manifest.sha256,
                f.manifest.sender.as_str()
            ),
            (12, [0xab; 32], "src")
        );
        let states: Vec<(&str, Delivery, u64, &str)> = f
            .sites
            .iter()
            .map(|s| (s.site.as_str(), s.state, s.since_ms, s.reason.as_str()))
            .collect();
        assert_eq!(
            states,
            vec![
                ("edge1", Delivery::Done, 1_010, ""),
                ("edge2", Delivery::Failed, 1_020, "disk full"),
            ]
        );
        let g = &h.files[1];
        assert_eq!(g.manifest.name, "ref.csv");
        assert_eq!(g.sites.len(), 1);
        assert_eq!(
            (g.sites[0].site.as_str(), g.sites[0].state),
            ("here", Delivery::Done)
        );
    }

    #[test]
    fn the_history_is_bounded_to_the_latest_files() {
        let events: Vec<(HubEvent, u64)> = (0..50u64)
            .map(|t| {
                (
                    HubEvent::Arrived {
                        manifest: manifest(t, &format!("f{t}")),
                    },
                    t,
                )
            })
            .collect();
        let h = read_history(log(&events).as_bytes(), "here", 5);
        let kept: Vec<u64> = h.files.iter().map(|f| f.manifest.transfer).collect();
        assert_eq!(kept, vec![45, 46, 47, 48, 49]);
        assert_eq!(h.arrived.len(), 50);
    }

    /// A line torn inside a UTF-8 character (a write cut short by a full disk or a crash,
    /// with a name such as "café.csv") is counted and passed over like any torn line; the
    /// lines after it are read.
    #[test]
    fn a_line_torn_inside_a_character_is_passed_over_and_the_rest_read() {
        let mut text: Vec<u8> = log(&[(
            HubEvent::Arrived {
                manifest: manifest(1, "a.csv"),
            },
            10,
        )])
        .into_bytes();
        // "café.csv" cut after the first byte of "é" (0xc3 0xa9).
        text.extend_from_slice(b"{\"event\":\"arrived\",\"file\":\"caf\xc3\n");
        text.extend_from_slice(
            log(&[(
                HubEvent::Arrived {
                    manifest: manifest(2, "b.csv"),
                },
                20,
            )])
            .as_bytes(),
        );
        let h = read_history(&text[..], "here", 10);
        assert_eq!(h.unreadable, 1, "the torn line is counted");
        assert_eq!(h.arrived, vec![1, 2], "the line after the torn one is read");
    }

    #[test]
    fn a_file_received_again_after_a_failure_is_listed_once_as_done() {
        let m = manifest(7, "again.csv");
        let text = log(&[
            (
                HubEvent::Failed {
                    manifest: m.clone(),
                    reason: "no space left".into(),
                },
                10,
            ),
            (
                HubEvent::Arrived {
                    manifest: m.clone(),
                },
                20,
            ),
        ]);
        let h = read_history(text.as_bytes(), "here", 10);
        assert_eq!(h.files.len(), 1);
        assert_eq!(h.files[0].sites[0].state, Delivery::Done);
        assert_eq!(h.files[0].sites[0].since_ms, 20);
    }
}
