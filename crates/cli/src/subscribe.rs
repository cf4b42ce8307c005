//! `tickwire subscribe`: print every refresh, update and status of some items.

use crate::json::{event_json_line, event_line};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tickwire_client::{EventRef, RequestOptions, Subscriber};
use tickwire_proto::{Dictionary, StreamState};

#[derive(clap::Args)]
pub(crate) struct SubscribeArgs {
    #[command(flatten)]
    pub(crate) conn: crate::node_args::NodeArgs,
    /// Service of the items.
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    pub(crate) service: String,
    /// Item names, e.g. SYM0 SYM1.
    #[arg(required = true, value_name = "ITEM")]
    pub(crate) items: Vec<String>,
    /// One JSON object per line: type, service, item, stream, seq, fields (keyed by
    /// field name), state (for refresh and status).
    #[arg(long)]
    pub(crate) json: bool,
    /// Exit (status 0) after this many messages.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
    /// Ask for one refresh per item; exit once every item has answered.
    #[arg(long)]
    pub(crate) snapshot: bool,
    /// Only these fields, by name or id, e.g. BID,ASK.
    #[arg(long, value_name = "FIELDS", value_delimiter = ',')]
    pub(crate) view: Option<Vec<String>>,
    /// Field dictionary file (default: the built-in MarketPrice dictionary).
    #[arg(long, value_name = "FILE")]
    pub(crate) dictionary: Option<PathBuf>,
    /// What the node should do if this subscriber reads slower than its items update:
    /// `conflate` (merge pending updates of an item into one) or `disconnect`. Default:
    /// the node's configured policy.
    #[arg(long, value_name = "POLICY")]
    pub(crate) slow_consumer: Option<tickwire_node::SlowPolicy>,
    /// Kernel receive buffer in bytes (default: the kernel's autotuning, which may let
    /// tens of MB wait in this host's kernel before the node sees a slow reader).
    #[arg(long, value_name = "BYTES")]
    pub(crate) receive_buffer: Option<usize>,
    /// Give up (exit status 3) if --count messages have not arrived within this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = seconds)]
    pub(crate) timeout: Option<f64>,
    /// Set by `tickwire replay`: start with the items' history.
    #[arg(skip)]
    pub(crate) replay: Option<tickwire_proto::ReplayFrom>,
}

/// Exit with a given status, without an error message.
#[derive(Debug)]
pub(crate) struct Exit(pub i32);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}

/// The longest time a flag in seconds takes: ten years.
const LONGEST_SECONDS: f64 = 315_360_000.0;

/// A flag's number of seconds, from 0 to [`LONGEST_SECONDS`]: a negative, infinite or
/// larger one is no time a clock can count to.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    // (clap's message names the flag and the value before this.)
    let range = format!("give a number of seconds from 0 to {LONGEST_SECONDS} (ten years)");
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=LONGEST_SECONDS).contains(&v) => Ok(v),
        _ => Err(range),
    }
}

/// The dictionary in `path`, or the built-in MarketPrice dictionary.
pub(crate) fn load_dictionary(path: Option<&std::path::Path>) -> Result<Dictionary> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read dictionary {}", path.display()))?;
            Dictionary::parse(&text).with_context(|| format!("dictionary {}", path.display()))
        }
        None => Ok(Dictionary::market_price()),
    }
}

pub(crate) fn run(args: SubscribeArgs) -> Result<()> {
    let dict = load_dictionary(args.dictionary.as_deref())?;
    let view = match &args.view {
        None => None,
        Some(names) => {
            let mut fids = Vec::new();
            for n in names {
                match dict.fid(n) {
                    Some(f) => fids.push(f),
                    None => bail!(
                        "--view: unknown field {n:?} (not in the dictionary and not a number)"
                    ),
                }
            }
            Some(fids)
        }
    };
    let mut opts = args.conn.connect_options("tickwire-subscribe")?;
    opts.slow_consumer = args.slow_consumer.map(|p| p.to_proto());
    opts.receive_buffer_bytes = args.receive_buffer;
    let mut sub = Subscriber::connect(opts)
        .with_context(|| format!("cannot subscribe at {}", args.conn.node))?;
    for item in &args.items {
        sub.subscribe(
            &args.service,
            item,
            RequestOptions {
                snapshot: args.snapshot,
                view: view.clone(),
                replay: args.replay,
            },
        )?;
    }
    sub.flush(Duration::from_secs(5))?;
    let deadline = args
        .timeout
        .map(|t| Instant::now() + Duration::from_secs_f64(t));
    let mut seen: u64 = 0;
    let mut failed = false;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    loop {
        if let Some(d) = deadline {
            if Instant::now() >= d {
                out.flush()?;
                eprintln!("tickwire subscribe: timed out after {seen} messages");
                return Err(Exit(3).into());
            }
        }
        let mut write_err = None;
        let mut done = false;
        let wait = dispatch_wait(deadline, Instant::now());
        sub.dispatch(wait, |e: EventRef<'_>| {
            if done || matches!(e, EventRef::Directory(_)) {
                return;
            }
            if let EventRef::Status(_, s) = &e {
                // Closed-recover too: a snapshot the node ends so (shutting down) got
                // no image. (A streaming stream's is shown open/suspect: it recovers.)
                if s.state.stream != StreamState::Open {
                    failed = true;
                }
            }
            let line = if args.json {
                event_json_line(&dict, &e)
            } else {
                event_line(&dict, &e)
            };
            if let Err(err) = writeln!(out, "{line}") {
                write_err = Some(err);
            }
            seen += 1;
            if args.count.is_some_and(|c| seen >= c) {
                done = true;
            }
        })?;
        if let Some(e) = write_err {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
        out.flush()?;
        if done {
            return Ok(());
        }
        if sub.open_streams() == 0 {
            // Every stream ended: snapshots answered, or items closed by the node.
            if args.count.is_some_and(|c| seen < c) || failed {
                return Err(Exit(1).into());
            }
            return Ok(());
        }
    }
}

/// How long a dispatch waits for the next event: until the deadline (`--timeout`), at
/// most [`LOOK_AGAIN`]. (Every 200 ms, as it was, cost an idle subscriber 5 wake-ups a
/// second.)
fn dispatch_wait(deadline: Option<Instant>, now: Instant) -> Duration {
    deadline.map_or(LOOK_AGAIN, |d| {
        d.saturating_duration_since(now).min(LOOK_AGAIN)
    })
}

/// The longest a dispatch waits before the loop looks again. A dispatch returns with
/// each event as it comes, the node's last statuses before it closes the connection
/// among them (a stopping node's snapshot ends at once), so nothing the loop acts on
/// waits for this; it only bounds how long a call goes without looking.
const LOOK_AGAIN: Duration = Duration::from_secs(60);

#[cfg(test)]
mod wait_tests {
    use super::{dispatch_wait, LOOK_AGAIN};
    use std::time::{Duration, Instant};

    #[test]
    fn a_subscriber_waits_for_its_deadline_or_its_next_event() {
        let now = Instant::now();
        assert_eq!(dispatch_wait(None, now), LOOK_AGAIN);
        let d = now + Duration::from_millis(700);
        assert_eq!(dispatch_wait(Some(d), now), Duration::from_millis(700));
        assert_eq!(dispatch_wait(Some(now + 3 * LOOK_AGAIN), now), LOOK_AGAIN);
        assert_eq!(
            dispatch_wait(Some(now), now + Duration::from_secs(1)),
            Duration::ZERO
        );
    }
}
