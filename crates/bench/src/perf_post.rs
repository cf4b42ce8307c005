//! `tickwire-bench perf-post`: the lab's load poster. It keeps `--window` posts waiting for
//! their answer (each post to one of `--items` items, off-stream, asking for an Ack),
//! for `--duration` seconds, and measures each Ack's latency (post written to Ack
//! read). The node's own figures (`TICKWIRE/NODE`: posts answered, journal records and
//! system calls) are read before and after, so the result also says what the node's
//! journal did per post. Prints one JSON line `{"type":"result",...}`.

use crate::stats::Latency;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::LatencySummary;
use tickwire_client::{ConnectOptions, EventRef, PostTo, RequestOptions, Subscriber};
use tickwire_proto::{encode_field_list, FieldList, Real, Value};

/// `tickwire-bench perf-post`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PerfPostArgs {
    /// Node address (host:port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14002")]
    pub node: String,
    /// Service to post to.
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    pub service: String,
    /// Items posted to, SYM0 .. SYM{N-1}, in turn.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub items: usize,
    /// Posts waiting for their answer at most (the poster's pipeline).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub window: usize,
    /// Seconds of load.
    #[arg(long, value_name = "S", default_value_t = 5.0)]
    pub duration: f64,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PostResult {
    /// Posts sent.
    pub posts: u64,
    /// Posts answered with a positive Ack.
    pub acked: u64,
    /// Posts refused (an Ack carrying a NAK code).
    pub nakked: u64,
    /// The first refusal's code and text, if any.
    pub first_nak: Option<String>,
    /// Seconds from the first post to the last answer (the load, then the wait for the
    /// posts still in flight).
    pub seconds: f64,
    /// Posts answered (acked or refused) per second over `seconds`.
    pub posts_per_s: f64,
    /// Time from writing a post to reading its Ack, in ns.
    pub ack_latency: LatencySummary,
    /// From the node's figures over the run: journal records and system calls.
    pub journal_records: u64,
    /// The node's journal system calls over the run (TW_JNL_SYSCALLS).
    pub journal_syscalls: u64,
}

/// The node's post and journal counters (TW_POSTS_ACK + TW_POSTS_NAK, TW_JNL_RECORDS,
/// TW_JNL_SYSCALLS).
fn node_counters(sub: &mut Subscriber) -> Result<(u64, u64, u64)> {
    let sid = sub.subscribe(
        "TICKWIRE",
        "NODE",
        RequestOptions {
            snapshot: true,
            view: None,
            ..Default::default()
        },
    )?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        sub.dispatch(Duration::from_millis(50), |e| {
            if let EventRef::Refresh(i, r) = e {
                if i.stream == sid {
                    let u = |fid| match r.fields.get(fid) {
                        Some(Value::UInt(v)) => v,
                        _ => 0,
                    };
                    got = Some((u(-1032) + u(-1033), u(-1034), u(-1035)));
                }
            }
        })?;
    }
    got.context("the node's figures (TICKWIRE/NODE) did not come")
}

/// Posts for `--duration` seconds, keeping up to `--window` in flight, then waits
/// for every answer; prints the result as one JSON line and returns it.
pub fn run(args: PerfPostArgs) -> Result<PostResult> {
    if args.items == 0 || args.window == 0 {
        bail!("--items and --window must be at least 1");
    }
    let mut opts = ConnectOptions::new(args.node.clone());
    opts.application = "tickwire-perf-post".into();
    opts.reconnect = false;
    let mut sub =
        Subscriber::connect(opts).with_context(|| format!("cannot connect to {}", args.node))?;
    let (answered0, records0, syscalls0) = node_counters(&mut sub)?;
    let names: Vec<String> = (0..args.items).map(|i| format!("SYM{i}")).collect();
    // Sent times of the posts waiting (at most `window`), by post id.
    let mut sent_at: std::collections::HashMap<u32, Instant> =
        std::collections::HashMap::with_capacity(args.window);
    let mut latency = Latency::default();
    let mut r = PostResult::default();
    let mut waiting = 0usize;
    let mut next: u32 = 1;
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.duration.max(0.1));
    // The quote a post carries: a price that moves, ask above bid.
    let mut fields = Vec::with_capacity(64);
    while Instant::now() < end || waiting > 0 {
        let loading = Instant::now() < end;
        while loading && waiting < args.window {
            let p = 10_000 + (next % 1000) as i64;
            fields.clear();
            fields.extend(encode_field_list([
                (22, Value::Real(Real::new(p, -2))),
                (25, Value::Real(Real::new(p + 5, -2))),
            ]));
            let name = &names[next as usize % names.len()];
            sub.post(
                PostTo::Item {
                    service: &args.service,
                    name,
                },
                next,
                FieldList::from_trusted(&fields),
                true,
            )?;
            sent_at.insert(next, Instant::now());
            next = next.wrapping_add(1);
            waiting += 1;
            r.posts += 1;
        }
        if !loading && Instant::now() > end + Duration::from_secs(30) {
            bail!("{waiting} posts still unanswered 30 s after the load stopped");
        }
        sub.dispatch(Duration::from_millis(1), |e| {
            if let EventRef::Ack(a) = e {
                let now = Instant::now();
                // An answer to no post in flight (a duplicate) is not counted.
                let Some(t) = sent_at.remove(&a.post_id) else {
                    return;
                };
                latency.record(now.duration_since(t).as_nanos() as u64);
                waiting -= 1;
                match a.nak {
                    None => r.acked += 1,
                    Some(code) => {
                        r.nakked += 1;
                        if r.first_nak.is_none() {
                            r.first_nak = Some(format!("{}: {}", code.name(), a.text));
                        }
                    }
                }
            }
        })?;
    }
    r.seconds = start.elapsed().as_secs_f64();
    r.posts_per_s = (r.acked + r.nakked) as f64 / r.seconds;
    r.ack_latency = latency.summary();
    // The node's figures are a second old at most: wait until they count every answer.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (answered, records, syscalls) = node_counters(&mut sub)?;
        r.journal_records = records - records0;
        r.journal_syscalls = syscalls - syscalls0;
        let counted = answered - answered0;
        if counted >= r.acked + r.nakked {
            break;
        }
        // Figures that never caught up would make the journal's cost per post short.
        if Instant::now() > deadline {
            bail!(
                "the node's figures counted {counted} of the {} posts answered within 5 s: no journal figures per post",
                r.acked + r.nakked
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let line = serde_json::json!({"type": "result", "result": &r});
    println!("{line}");
    Ok(r)
}
