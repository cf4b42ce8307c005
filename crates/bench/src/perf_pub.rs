//! `tickwire-bench perf-pub`: the publisher under load.
//!
//! Publishes an image of every item, then sends reference Level 1 updates (74 bytes of
//! field list) on an exact schedule: `--tick-rate` bursts per second, each carrying its
//! share of `--update-rate`. Updates selected for latency carry in TIM_TRK_1 the time the
//! schedule meant them to be sent (not the time they were sent), so a publisher or node
//! that falls behind shows up as latency instead of hiding it (no coordinated omission).

mod shape;

pub use shape::Shape;

use crate::load_flags::{FeedFlags, RunFlags};
use crate::stats::{pin, realtime_ns, self_usage, NO_TIMESTAMP};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, ItemId, Publisher, PublisherOptions};
use tickwire_proto::reference::{write_level1, FeedRng, Level1};
use tickwire_proto::{fid, FieldList, FieldListWriter, Time, UpdateType, Value};

/// What the load tools talk to.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum System {
    /// A Tickwire node (its own protocol).
    #[default]
    Tickwire,
    /// A NATS server (the lab's peer scenario): item SYMn of service S is subject
    /// `S.SYMn`, and each message is the item's sequence number (4 bytes, little
    /// endian) followed by the same 74-byte field list. NATS keeps no last value, so
    /// no images are sent.
    Nats,
}

/// `tickwire-bench perf-pub`'s flags.
#[derive(clap::Args, Clone, Debug)]
pub struct PerfPubArgs {
    /// Node address (host:port); with `--system nats`, the NATS server's.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14002")]
    pub node: String,
    /// What `--node` is.
    #[arg(long, value_enum, default_value_t = System::Tickwire)]
    pub system: System,
    /// Who it logs in as and how it reaches a TLS node (not used with `--system nats`).
    #[command(flatten)]
    pub credentials: tickwire_client::Credentials,
    /// The service and items published: each item gets an image, then updates at random.
    #[command(flatten)]
    pub feed: FeedFlags,
    /// Updates per second across all items.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub update_rate: u64,
    /// Bursts per second; each burst carries update-rate / tick-rate updates.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub tick_rate: u64,
    /// Also write the queued updates after every N updates of a burst, not only at its
    /// end (0: at the end only). A burst is timestamped with its intended time and
    /// built before it is written: written whole, an update's latency includes the
    /// building of the burst's later updates (at 100,000/s, 100 of them). The latency
    /// ladders of `tickwire bench` use 8, as the reference procedure's latency runs
    /// flushed at once.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub flush_every: u64,
    /// Wait for each burst's time by spinning over its last N microseconds instead of
    /// sleeping to it (0: sleep all the way). A sleep ends late by the kernel's wake-up
    /// (tens of microseconds on a virtual machine whose idle CPUs halt), and a burst is
    /// stamped with its intended time, so that lateness would count as the system's
    /// latency. Costs up to N µs of CPU per burst. The latency ladders of `tickwire
    /// bench` use 200.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub spin_us: u64,
    /// After each write within a burst (`--flush-every`), give up the CPU
    /// (`sched_yield`). The kernel often queues the reader a write wakes (the node) on
    /// the writer's own CPU, expecting the writer to sleep; a publisher that goes on
    /// building its burst then holds the node off that CPU until the burst is written
    /// (measured at 100,000/s: the node waited 20-22 µs per run for a CPU, 0.1-0.3 with
    /// this). The latency ladders of `tickwire bench` use it.
    #[arg(long)]
    pub yield_after_write: bool,
    /// Updates per second that carry a latency timestamp (TIM_TRK_1), or `all`.
    #[arg(long, value_name = "N|all", default_value = "1000")]
    pub latency_rate: String,
    /// `--duration` is the seconds of updates, after the images.
    #[command(flatten)]
    pub run: RunFlags,
    /// Read commands from standard input while running: `rate N` changes the update
    /// rate, `mark` prints (JSON) the updates sent so far and the largest lag since the
    /// previous mark, `quit` stops (used by `tickwire bench`).
    #[arg(long)]
    pub control: bool,
    /// Seed of the random choice of items and price walk.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// What the images and updates hold: `level1`, the reference quote, or `wide`, the
    /// perf tools' 83-field images and 23-field updates.
    #[arg(long, value_enum, default_value_t = Shape::Level1)]
    pub shape: Shape,
}

fn level1(i: usize) -> Level1 {
    let mid = 1_000_000 + (i as i64 % 4_000) * 1_000;
    Level1 {
        bid: mid - 100,
        ask: mid + 100,
        last: mid,
        net_change: 0,
        bid_size: 1_000,
        ask_size: 1_000,
        trade_volume: 25_000,
        total_volume: 1_000_000,
        time_of_day: Time {
            nanos_since_midnight: 0,
        },
        send_time_ns: NO_TIMESTAMP,
    }
}

/// The summary printed at the end (JSON with `--json`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PubSummary {
    /// Items published (`--items`).
    pub items: usize,
    /// Seconds to connect and send every item's image (NATS, which has no images: to
    /// connect).
    pub image_seconds: f64,
    /// Updates sent.
    pub sent: u64,
    /// Updates that carried a latency timestamp in TIM_TRK_1.
    pub timestamped: u64,
    /// Seconds of updates (after the images).
    pub seconds: f64,
    /// Updates sent per second over `seconds`.
    pub rate: f64,
    /// Largest delay of a burst behind its schedule.
    pub max_lag_ms: f64,
    /// The tool's own CPU and memory (its JSON keys at this level).
    #[serde(flatten)]
    pub usage: crate::stats::ToolUsage,
}

/// Publishes every image, then updates on schedule until `--duration` ends (or
/// `quit` with `--control`); prints a line a second and the summary it returns.
pub fn run(args: PerfPubArgs) -> Result<PubSummary> {
    pin(&args.run.cpus)?;
    crate::stats::precise_timers();
    if args.feed.items == 0 {
        bail!("--items must be at least 1");
    }
    if args.tick_rate == 0 || args.tick_rate > 100_000 {
        bail!("--tick-rate must be 1 to 100000, not {}", args.tick_rate);
    }
    let latency_all = args.latency_rate == "all";
    let latency_rate: u64 = if latency_all {
        u64::MAX
    } else {
        args.latency_rate.parse().with_context(|| {
            format!(
                "--latency-rate {:?}: expected a number or `all`",
                args.latency_rate
            )
        })?
    };
    let rate = Arc::new(AtomicU64::new(args.update_rate));
    let quit = Arc::new(AtomicBool::new(false));
    let mark = Arc::new(AtomicBool::new(false));
    if args.control {
        let (rate, quit, mark) = (rate.clone(), quit.clone(), mark.clone());
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let mut words = line.split_whitespace();
                match (words.next(), words.next().map(str::parse::<u64>)) {
                    (Some("rate"), Some(Ok(r))) => rate.store(r, Ordering::SeqCst),
                    (Some("mark"), _) => mark.store(true, Ordering::SeqCst),
                    (Some("quit"), _) => break,
                    _ => eprintln!("perf-pub: unknown command {line:?} (rate N | mark | quit)"),
                }
            }
            quit.store(true, Ordering::SeqCst);
        });
    }

    let image_start = Instant::now();
    let mut quotes: Vec<Level1> = (0..args.feed.items).map(level1).collect();
    let mut sink: Box<dyn Sink> = match args.system {
        System::Tickwire => Box::new(TickwireSink::connect(&args, &quotes)?),
        System::Nats => Box::new(NatsSink::connect(&args)?),
    };
    let mut buf = Vec::with_capacity(256);
    let mut shaped = Vec::with_capacity(512);
    let image_seconds = image_start.elapsed().as_secs_f64();
    if !args.run.json {
        println!(
            "perf-pub: {} images in {:.2} s; sending {} updates/s in {} bursts/s",
            args.feed.items, image_seconds, args.update_rate, args.tick_rate
        );
    }

    let usage0 = self_usage();
    let mut rng = FeedRng::new(args.seed);
    // Where in a burst the timestamps go: a generator of its own, so that the items
    // and prices do not depend on the latency rate.
    let mut stamp_rng = FeedRng::new(args.seed ^ 0x5157_A4D5);
    let start = Instant::now();
    let start_realtime = realtime_ns();
    let tick_ns = 1_000_000_000 / args.tick_rate;
    let end = start + Duration::from_secs_f64(args.run.duration.max(0.0));
    let mut tick: u64 = 0;
    let mut sent: u64 = 0;
    let mut timestamped: u64 = 0;
    // Fractional updates and timestamps carried from burst to burst.
    let mut update_credit = 0f64;
    let mut stamp_credit = 0f64;
    let mut max_lag = Duration::ZERO;
    let mut per_second = PerSecond::new(start);
    let mut mark_lag = Duration::ZERO;
    let spin = Duration::from_micros(args.spin_us);
    loop {
        if mark.swap(false, Ordering::SeqCst) {
            println!(
                "{}",
                json!({"type": "mark", "role": "perf-pub", "total": sent,
                       "target_rate": rate.load(Ordering::Relaxed),
                       "max_lag_ms": mark_lag.as_secs_f64() * 1e3})
            );
            mark_lag = Duration::ZERO;
        }
        let due = start + Duration::from_nanos(tick * tick_ns);
        let now = Instant::now();
        if now >= end || quit.load(Ordering::Relaxed) {
            break;
        }
        if now < due {
            // poll(2) has millisecond resolution: use it (answering the node) only for
            // the part of the wait beyond 2 ms, then sleep precisely to the burst time.
            let wait = due - now;
            if wait > Duration::from_millis(2) {
                sink.serve(wait - Duration::from_millis(2))?;
            } else if wait > spin {
                std::thread::sleep(wait - spin);
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let lag = now - due;
        max_lag = max_lag.max(lag);
        mark_lag = mark_lag.max(lag);
        let rate_now = rate.load(Ordering::Relaxed);
        update_credit += rate_now as f64 / args.tick_rate as f64;
        let n = update_credit as u64;
        update_credit -= n as f64;
        let line = per_second.burst(now, n, lag);
        stamp_credit += if latency_all {
            n as f64
        } else {
            latency_rate as f64 / args.tick_rate as f64
        };
        let stamps = (stamp_credit as u64).min(n);
        stamp_credit -= stamps as f64;
        let stamp_offset = stamp_rng.next_u64();
        // The time this burst was meant to leave.
        let intended = start_realtime + tick * tick_ns;
        let tod = Time {
            nanos_since_midnight: intended % tickwire_proto::field::NANOS_PER_DAY,
        };
        for k in 1..=n {
            let i = (rng.next_u64() % args.feed.items as u64) as usize;
            let q = &mut quotes[i];
            let step = (rng.next_u64() % 3) as i64 - 1;
            q.bid = (q.bid + step * 100).max(100);
            q.ask = q.bid + 200;
            q.bid_size = 100 * (1 + rng.next_u64() % 50);
            q.ask_size = 100 * (1 + rng.next_u64() % 50);
            q.time_of_day = tod;
            q.send_time_ns = if is_stamped(k - 1, n, stamps, stamp_offset) {
                timestamped += 1;
                intended
            } else {
                NO_TIMESTAMP
            };
            buf.clear();
            write_level1(&mut buf, q);
            args.shape.update(&buf, rng.next_u64(), tod, &mut shaped);
            sink.update(i, &shaped)?;
            if args.flush_every > 0 && k % args.flush_every == 0 && k < n {
                sink.flush()?;
                if args.yield_after_write {
                    std::thread::yield_now();
                }
            }
        }
        stamp_credit = stamp_credit.min(n as f64 + 1.0);
        sent += n;
        tick += 1;
        sink.flush()?;
        // Answer the node (image requests with the cache off, pings) every burst.
        sink.serve(Duration::ZERO)?;
        // Printed once the burst is out, so that printing does not delay it.
        if let Some(l) = line {
            if args.run.json {
                println!(
                    "{}",
                    json!({"type": "second", "role": "perf-pub", "t": l.t, "sent": l.sent,
                           "total": l.total, "target_rate": rate_now,
                           "max_lag_ms": l.max_lag.as_secs_f64() * 1e3})
                );
            } else {
                println!(
                    "perf-pub t={:>3}s sent {:>9}/s (target {rate_now}) total {:>11} lag max {:.2} ms",
                    l.t,
                    l.sent,
                    l.total,
                    l.max_lag.as_secs_f64() * 1e3
                );
            }
        }
    }
    sink.flush()?;
    let seconds = start.elapsed().as_secs_f64();
    let u = self_usage();
    let summary = PubSummary {
        items: args.feed.items,
        image_seconds,
        sent,
        timestamped,
        seconds,
        rate: sent as f64 / seconds.max(1e-9),
        max_lag_ms: max_lag.as_secs_f64() * 1e3,
        usage: crate::stats::ToolUsage::between(&usage0, &u, seconds),
    };
    if args.run.json {
        println!(
            "{}",
            json!({"type": "summary", "role": "perf-pub", "summary": summary})
        );
    } else {
        println!(
            "perf-pub: sent {} updates in {:.2} s = {:.0}/s ({} timestamped); max lag {:.2} ms; CPU {:.0}% ({:.2} s user, {:.2} s sys); peak RSS {:.1} MiB",
            summary.sent,
            summary.seconds,
            summary.rate,
            summary.timestamped,
            summary.max_lag_ms,
            summary.usage.cpu_percent,
            summary.usage.cpu_user_s,
            summary.usage.cpu_sys_s,
            summary.usage.peak_rss_bytes as f64 / 1048576.0
        );
    }
    Ok(summary)
}

/// One second's line: updates sent in it, in all by its end, and its largest lag.
#[derive(Debug, PartialEq)]
struct SecondLine {
    t: u64,
    sent: u64,
    total: u64,
    max_lag: Duration,
}

/// What perf-pub sent in each second of its run (from its first burst's time).
struct PerSecond {
    /// The end of the current second.
    next: Instant,
    t: u64,
    sent: u64,
    sent_before: u64,
    lag: Duration,
}

impl PerSecond {
    fn new(start: Instant) -> PerSecond {
        PerSecond {
            next: start + Duration::from_secs(1),
            t: 0,
            sent: 0,
            sent_before: 0,
            lag: Duration::ZERO,
        }
    }

    /// A burst of `n` updates going out at `now`, `lag` behind its schedule. The line of
    /// the second that ended by `now`, if one did, is closed first: the burst belongs to
    /// the second it goes out in (one due at 1.000 s is not the first second's).
    fn burst(&mut self, now: Instant, n: u64, lag: Duration) -> Option<SecondLine> {
        let line = (now >= self.next).then(|| {
            self.t += 1;
            self.next += Duration::from_secs(1);
            let sent = self.sent - self.sent_before;
            self.sent_before = self.sent;
            SecondLine {
                t: self.t,
                sent,
                total: self.sent,
                max_lag: std::mem::take(&mut self.lag),
            }
        });
        self.sent += n;
        self.lag = self.lag.max(lag);
        line
    }
}

/// Where perf-pub's updates go.
trait Sink {
    /// Queues one update of item `item` (its encoded field list).
    fn update(&mut self, item: usize, fields: &[u8]) -> Result<()>;
    /// Sends what is queued.
    fn flush(&mut self) -> Result<()>;
    /// Answers the server (requests, pings) for up to `wait`.
    fn serve(&mut self, wait: Duration) -> Result<()>;
}

/// A Tickwire publisher: every item's image first, then updates on its stream.
struct TickwireSink {
    publisher: Publisher,
    ids: Vec<ItemId>,
}

impl TickwireSink {
    fn connect(args: &PerfPubArgs, quotes: &[Level1]) -> Result<TickwireSink> {
        let mut connect = ConnectOptions::new(args.node.clone());
        connect.application = "tickwire-perf-pub".into();
        args.credentials
            .apply(&mut connect)
            .map_err(anyhow::Error::msg)?;
        let mut publisher = Publisher::connect(PublisherOptions {
            start_down: true,
            ..PublisherOptions::new(connect, args.feed.service.clone())
        })
        .with_context(|| format!("perf-pub: cannot connect to {}", args.node))?;
        // Images: the Level 1 fields plus a display name.
        let mut ids = Vec::with_capacity(quotes.len());
        let mut buf = Vec::with_capacity(256);
        for (i, q) in quotes.iter().enumerate() {
            buf.clear();
            write_level1(&mut buf, q);
            let name = format!("SYM{i}");
            let mut img = Vec::with_capacity(buf.len() + 16);
            let mut w = FieldListWriter::new(&mut img);
            w.push(fid::DSPLY_NAME, Value::Ascii(&name));
            for (f, raw) in FieldList::from_trusted(&buf).raw_iter() {
                w.push_raw(f, raw);
            }
            args.shape.image_extras(&mut w, q.time_of_day);
            w.finish();
            ids.push(publisher.publish_refresh(&name, FieldList::from_trusted(&img))?);
            if i % 4096 == 4095 {
                publisher.flush(Duration::from_secs(30))?;
            }
        }
        publisher.set_service_up(true)?;
        publisher.flush(Duration::from_secs(30))?;
        Ok(TickwireSink { publisher, ids })
    }
}

impl Sink for TickwireSink {
    fn update(&mut self, item: usize, fields: &[u8]) -> Result<()> {
        self.publisher.publish_update(
            self.ids[item],
            UpdateType::Quote,
            FieldList::from_trusted(fields),
            false,
        )?;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(self.publisher.flush(Duration::from_secs(30))?)
    }

    fn serve(&mut self, wait: Duration) -> Result<()> {
        self.publisher.dispatch(wait)?;
        Ok(())
    }
}

/// A NATS publisher: subject `SERVICE.SYMn`, the item's sequence number, the fields.
struct NatsSink {
    conn: crate::nats::Connection,
    subjects: Vec<Vec<u8>>,
    seqs: Vec<u32>,
}

impl NatsSink {
    fn connect(args: &PerfPubArgs) -> Result<NatsSink> {
        let conn =
            crate::nats::Connection::connect(&args.node, "perf-pub", Duration::from_secs(10))?;
        Ok(NatsSink {
            conn,
            subjects: (0..args.feed.items)
                .map(|i| format!("{}.SYM{i}", args.feed.service).into_bytes())
                .collect(),
            seqs: vec![0; args.feed.items],
        })
    }
}

impl Sink for NatsSink {
    fn update(&mut self, item: usize, fields: &[u8]) -> Result<()> {
        let seq = &mut self.seqs[item];
        *seq = seq.wrapping_add(1);
        self.conn
            .publish(&self.subjects[item], &[&seq.to_le_bytes(), fields]);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.conn.flush()
    }

    fn serve(&mut self, wait: Duration) -> Result<()> {
        // Nothing arrives but pings (answered inside) and errors.
        self.conn.read(wait, |_| {})?;
        Ok(())
    }
}

/// Whether update `k` (0-based) of a burst of `n` is one of the burst's `stamps`
/// timestamped ones: the burst is cut into `stamps` stretches of about equal length and
/// each is stamped at the same random `offset` into it. A burst is written in order,
/// its later updates after its earlier ones: stamped always first, the samples would
/// leave out the time an update waits behind the rest of its burst.
fn is_stamped(k: u64, n: u64, stamps: u64, offset: u64) -> bool {
    if stamps >= n {
        return true;
    }
    if stamps == 0 {
        return false;
    }
    // Stretch j is [ceil(j n / stamps), ceil((j + 1) n / stamps)).
    let start = |j: u64| (j * n).div_ceil(stamps);
    let j = k * stamps / n;
    let (lo, hi) = (start(j), start(j + 1));
    k == lo + offset % (hi - lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_counts_the_bursts_sent_in_it() {
        // One burst of 10 updates a second, on time: each line says 10/s (a burst due at
        // the second's end is the next second's).
        let start = Instant::now();
        let mut s = PerSecond::new(start);
        let ms = |m| Duration::from_millis(m);
        let lines: Vec<SecondLine> = [0, 1_000, 2_000, 3_000]
            .into_iter()
            .filter_map(|t| s.burst(start + ms(t), 10, ms(t / 1_000)))
            .collect();
        let line = |t, total, lag| SecondLine {
            t,
            sent: 10,
            total,
            max_lag: ms(lag),
        };
        assert_eq!(lines, [line(1, 10, 0), line(2, 20, 1), line(3, 30, 2)]);
    }

    #[test]
    fn a_bursts_timestamps_fall_anywhere_in_it() {
        // One stamp in a burst of 100, over many bursts: every position is sampled
        // alike, not only the first update.
        let mut seen = [0u32; 100];
        for offset in 0..10_000u64 {
            let stamped: Vec<u64> = (0..100)
                .filter(|&k| is_stamped(k, 100, 1, offset))
                .collect();
            assert_eq!(stamped.len(), 1);
            seen[stamped[0] as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c == 100), "{seen:?}");
        // Any number of stamps: exactly that many, one in each stretch.
        for (n, stamps) in [(3, 2), (10, 3), (100, 7), (5, 5), (4, 9), (8, 0)] {
            for offset in [0, 1, 2, 99] {
                let count = (0..n).filter(|&k| is_stamped(k, n, stamps, offset)).count();
                assert_eq!(count as u64, stamps.min(n), "n {n} stamps {stamps}");
            }
        }
    }
}
