//! `tickwire-bench perf-nats-sub`: the lab's load subscriber for the NATS peer (`tickwire
//! bench peers`). One connection subscribes to `SERVICE.>`; every message is decoded as
//! perf-sub decodes an update (every field, TIM_TRK_1's latency), and the item's
//! sequence number that `perf-pub --system nats` puts first in each message is checked,
//! so a message the server dropped (a slow consumer) is counted as a gap. It speaks the
//! same `--control` and `--json` lines as perf-sub, so `tickwire bench` drives either.

use crate::load_flags::{FeedFlags, RunFlags};
use crate::nats::{Connection, Frame};
use crate::perf_sub::{control_channel, print_stand_in_summary, read_update, Counts, Reports};
use crate::stats::{pin, Latency};
use anyhow::{bail, Result};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_proto::FieldList;

/// `tickwire-bench perf-nats-sub`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfNatsSubArgs {
    /// The NATS server (host:port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4222")]
    pub nats: String,
    /// The subjects (one wildcard subscription; messages for items past `--items` are
    /// counted as junk).
    #[command(flatten)]
    pub feed: FeedFlags,
    /// With `--json`, a `ready` line once subscribed, then perf-sub's lines.
    #[command(flatten)]
    pub run: RunFlags,
    /// Read `mark NAME` / `quit` from standard input (as perf-sub).
    #[arg(long)]
    pub control: bool,
}

struct Subscription {
    conn: Connection,
}

fn subscribe(args: &PerfNatsSubArgs) -> Result<Subscription> {
    let mut conn = Connection::connect(&args.nats, "perf-nats-sub", Duration::from_secs(10))?;
    conn.subscribe(&format!("{}.>", args.feed.service), 1);
    // The PONG comes after the server has registered the subscription.
    conn.ping(Duration::from_secs(10))?;
    Ok(Subscription { conn })
}

/// Runs the subscriber until `--duration` ends, `stop` is raised or `quit` comes on
/// the control input; prints per-second lines and a summary.
pub fn run(args: PerfNatsSubArgs, stop: Arc<AtomicBool>) -> Result<()> {
    pin(&args.run.cpus)?;
    crate::stats::precise_timers();
    if args.feed.items == 0 {
        bail!("--items must be at least 1");
    }
    let mut sub = subscribe(&args)?;
    if args.run.json {
        println!("{}", json!({"type": "ready", "role": "perf-sub"}));
    }
    let prefix = format!("{}.SYM", args.feed.service);
    let marks = control_channel(args.control, stop.clone());
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.run.duration.max(0.0));
    let mut c = Counts::default();
    let mut seqs: Vec<Option<u32>> = vec![None; args.feed.items];
    let (mut overall, mut since_mark, mut second) =
        (Latency::default(), Latency::default(), Latency::default());
    let mut reports = Reports::new("perf-nats-sub", args.run.json, start);
    let (mut junk, mut reconnects, mut checksum) = (0u64, 0u64, 0i64);
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        let read = sub.conn.read(Duration::from_millis(10), |frame| {
            let Frame::Msg {
                subject, payload, ..
            } = frame
            else {
                return;
            };
            let Some(idx) = item_index(subject, prefix.as_bytes(), args.feed.items) else {
                junk += 1;
                return;
            };
            let Some((seq, fields)) = payload
                .split_first_chunk::<4>()
                .and_then(|(s, f)| Some((u32::from_le_bytes(*s), FieldList::decode(f).ok()?)))
            else {
                junk += 1;
                return;
            };
            c.updates += 1;
            if let Some(prev) = seqs[idx] {
                if seq != prev.wrapping_add(1) {
                    c.gaps += 1;
                }
            }
            seqs[idx] = Some(seq);
            if let Some(lat) = read_update(fields, &mut checksum) {
                overall.record(lat);
                since_mark.record(lat);
                second.record(lat);
            }
        });
        if let Err(e) = read {
            // A slow consumer is cut off by the server: reconnect, and let the
            // sequence numbers count what was lost.
            eprintln!("perf-nats-sub: {e:#}; reconnecting");
            sub = loop {
                match subscribe(&args) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < end && !stop.load(Ordering::Relaxed) => {
                        eprintln!("perf-nats-sub: {e:#}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(e),
                }
            };
            reconnects += 1;
        }
        if let Some(rx) = &marks {
            while let Ok(name) = rx.try_recv() {
                reports.mark(name, c, reconnects, &mut since_mark);
            }
        }
        reports.second_if_due(Instant::now(), c, &mut second);
    }
    let summary = json!({"items": args.feed.items, "updates": c.updates, "gaps": c.gaps,
        "junk": junk, "reconnects": reconnects, "checksum": checksum,
        "seconds": start.elapsed().as_secs_f64(), "latency": overall.summary()});
    print_stand_in_summary(args.run.json, "perf-nats-sub", summary);
    Ok(())
}

/// The item index of subject `PREFIXn` (n below `items`).
fn item_index(subject: &[u8], prefix: &[u8], items: usize) -> Option<usize> {
    let digits = subject.strip_prefix(prefix)?;
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    let mut n = 0usize;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + usize::from(d - b'0');
    }
    (n < items).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::item_index;

    #[test]
    fn subjects_map_to_items() {
        assert_eq!(item_index(b"FEED.SYM0", b"FEED.SYM", 10), Some(0));
        assert_eq!(item_index(b"FEED.SYM9", b"FEED.SYM", 10), Some(9));
        assert_eq!(item_index(b"FEED.SYM10", b"FEED.SYM", 10), None);
        assert_eq!(item_index(b"FEED.SYM", b"FEED.SYM", 10), None);
        assert_eq!(item_index(b"FEED.SYMx", b"FEED.SYM", 10), None);
        assert_eq!(item_index(b"OTHER.SYM1", b"FEED.SYM", 10), None);
    }
}
