//! `tickwire publish`: a synthetic random-walk quote feed for one service.

use crate::feed::{now_ns, read_item_file, Instrument};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{
    ClientError, ItemId, PublishError, Publisher, PublisherEvent, PublisherOptions, ReceivedPost,
};
use tickwire_proto::reference::FeedRng;
use tickwire_proto::{FieldList, NakCode, UpdateType};

#[derive(clap::Args, Clone)]
pub(crate) struct PublishArgs {
    #[command(flatten)]
    pub conn: crate::node_args::NodeArgs,
    /// Service name to publish.
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    pub service: String,
    /// Number of synthetic items, named SYM0 .. SYM{N-1}.
    #[arg(long, value_name = "N", conflicts_with = "item_file")]
    pub items: Option<usize>,
    /// File of item names, one per line (# starts a comment).
    #[arg(long, value_name = "FILE")]
    pub item_file: Option<PathBuf>,
    /// Total updates per second across all items (0: images only).
    #[arg(long, value_name = "UPDATES_PER_S", default_value_t = 1000)]
    pub rate: u64,
    /// Milliseconds between the feed's bursts: each carries what is due since the last
    /// (default: 1 at 1,000 updates/s or more, else 10). A feed that ticks every
    /// millisecond keeps a backbone node's adaptive wait polling, as a steady load
    /// should; a coarser tick lets it park between bursts.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub tick_ms: Option<u64>,
    /// Interactive ("sink-driven"): publish an item only when the node asks for it, and
    /// stop updating it when nobody watches it any more.
    #[arg(long)]
    pub interactive: bool,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS", value_parser = crate::subscribe::seconds)]
    pub duration: Option<f64>,
    /// Seed of the random walk (same seed, same prices).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Take subscribers' posts: a posted BID and/or ASK replaces the item's quote, goes
    /// out to every subscriber as an update, and is acknowledged; anything else is
    /// refused with the reason. (The node must take posts for the service too:
    /// `[posts] services`.)
    #[arg(long)]
    pub accept_posts: bool,
}

impl PublishArgs {
    pub(crate) fn item_names(&self) -> Result<Vec<String>> {
        match (&self.item_file, self.items) {
            (Some(path), _) => read_item_file(path),
            (None, Some(n)) if n > 0 => Ok((0..n).map(|i| format!("SYM{i}")).collect()),
            (None, Some(_)) => bail!("--items must be at least 1"),
            (None, None) => bail!("say which items to publish: --items N or --item-file FILE"),
        }
    }
}

/// Runs a feed until `stop` is set or the duration passes. Returns updates sent.
/// `ready` is set once every image has been published (non-interactive) or the service
/// announced (interactive).
pub(crate) fn run_feed(
    args: &PublishArgs,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) -> Result<u64> {
    let names = args.item_names()?;
    let connect = args.conn.connect_options("tickwire-publish")?;
    let mut publisher = Publisher::connect(PublisherOptions {
        connect,
        service: args.service.clone(),
        interactive: args.interactive,
        // Non-interactive: the service goes up once every image is out, so no request
        // is answered "not found" for an item still on its way.
        start_down: !args.interactive,
        accept_posts: args.accept_posts,
    })
    .with_context(|| format!("cannot publish to {}", args.conn.node))?;
    let mut rng = FeedRng::new(args.seed);
    let mut instruments: Vec<Instrument> =
        names.iter().map(|n| Instrument::new(n, &mut rng)).collect();
    let by_name: HashMap<String, usize> = names
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, n)| (n, i))
        .collect();
    let mut live = LiveItems::default();
    let mut buf = Vec::with_capacity(256);
    if !args.interactive {
        for (i, inst) in instruments.iter().enumerate() {
            buf.clear();
            inst.write_image(&mut buf);
            let id = publisher.publish_refresh(&inst.name, FieldList::from_trusted(&buf))?;
            live.add(id, i);
            if i % 1000 == 999 {
                keep_up(&mut publisher)?;
            }
        }
        // Up only now: no request is answered "not found" for an image on its way.
        publisher.set_service_up(true)?;
        keep_up(&mut publisher)?;
        log::info!(
            "published {} images to service {:?}",
            live.len(),
            args.service
        );
    } else {
        log::info!(
            "interactive publisher for service {:?}: {} items available on request",
            args.service,
            names.len()
        );
    }
    ready.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let end = args
        .duration
        .map(|d| start + Duration::from_secs_f64(d.max(0.0)));
    let mut sent: u64 = 0;
    // Ticks of 1 ms at high rates, coarser when few updates are due.
    let tick = match args.tick_ms {
        Some(ms) => Duration::from_millis(ms),
        None if args.rate >= 1000 => Duration::from_millis(1),
        None => Duration::from_millis(10),
    };
    let mut next_tick = start;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        let ticking = args.rate > 0 && !live.is_empty();
        for ev in publisher.dispatch(feed_wait(now, next_tick, end, ticking))? {
            match ev {
                PublisherEvent::Request { name } => match by_name.get(&name) {
                    Some(&i) => {
                        buf.clear();
                        instruments[i].write_image(&mut buf);
                        let id = publisher.publish_refresh(&name, FieldList::from_trusted(&buf))?;
                        live.add(id, i);
                    }
                    None => publisher.reject_request(&name, "no such item in this feed")?,
                },
                PublisherEvent::Closed { item } => live.remove(item),
                PublisherEvent::Disconnected { reason } => log::warn!("publisher: {reason}"),
                PublisherEvent::Reconnected => log::info!("publisher reconnected"),
                PublisherEvent::Post(post) => {
                    let i = by_name.get(&post.name).copied();
                    let inst = i.map(|i| &mut instruments[i]);
                    answer_post(&mut publisher, &post, inst, &mut buf)?;
                }
            }
        }
        let now = Instant::now();
        if args.rate == 0 || live.is_empty() {
            // Nothing to send: the next tick counts from when there is.
            next_tick = now;
            continue;
        }
        if now < next_tick {
            continue;
        }
        next_tick += tick;
        if next_tick < now {
            next_tick = now + tick; // we fell behind (paused); do not burst to catch up
        }
        let due = (args.rate as f64 * now.duration_since(start).as_secs_f64()) as u64;
        let mut n = due.saturating_sub(sent);
        // After a pause, send at most one second's worth at once.
        n = n.min(args.rate.max(1));
        let stamp = now_ns();
        for _ in 0..n {
            let (id, i) = live.items[rng.below(live.len() as u64) as usize];
            if instruments[i].step(&mut rng, stamp) {
                buf.clear();
                instruments[i].write_trade(&mut buf);
                publisher.publish_update(
                    id,
                    UpdateType::Trade,
                    FieldList::from_trusted(&buf),
                    true,
                )?;
            }
            publish_quote(&mut publisher, id, &instruments[i], &mut buf)?;
        }
        sent += n;
        if due > sent + args.rate {
            sent = due - args.rate; // a long pause: forget the backlog beyond one second
        }
        keep_up(&mut publisher)?;
    }
    publisher.flush(Duration::from_secs(5))?;
    Ok(publisher.updates_sent())
}

/// The longest an idle feed (images only, or an interactive one nobody asked for
/// anything) waits for the node at a time. A signal ends the wait at once; this bounds
/// how late a stop asked for just before the wait began is seen.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// How long the feed waits for the node before it looks again: until its next tick
/// while it has updates to send, else until its end (`--duration`) or [`IDLE_WAIT`].
/// (Waking every tick with nothing to send cost an idle feed 100 wake-ups a second.)
fn feed_wait(now: Instant, next_tick: Instant, end: Option<Instant>, ticking: bool) -> Duration {
    let until = match ticking {
        true => next_tick,
        false => end.map_or(now + IDLE_WAIT, |e| e.min(now + IDLE_WAIT)),
    };
    until.saturating_duration_since(now)
}

/// An instrument's current quote as an update of item `id`.
fn publish_quote(
    publisher: &mut Publisher,
    id: ItemId,
    inst: &Instrument,
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.clear();
    inst.write_update(buf);
    publisher.publish_update(id, UpdateType::Quote, FieldList::from_trusted(buf), false)?;
    Ok(())
}

/// `--accept-posts`: a posted BID/ASK becomes the instrument's quote, goes out to the
/// item's subscribers if it is live, and is acknowledged; anything else is refused with
/// the reason.
fn answer_post(
    publisher: &mut Publisher,
    post: &ReceivedPost,
    inst: Option<&mut Instrument>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let (nak, text) = match inst {
        None => (
            Some(NakCode::SymbolUnknown),
            "no such item in this feed".to_string(),
        ),
        Some(inst) => match inst.apply_post(post.fields.list(), now_ns()) {
            Err(why) => (Some(NakCode::InvalidContent), why),
            Ok(()) => {
                if let Some(id) = post.item.filter(|&id| publisher.is_open(id)) {
                    publish_quote(publisher, id, inst, buf)?;
                }
                (None, String::new())
            }
        },
    };
    // One line per post at debug level (a feed may take many per second).
    let fields: Vec<String> = post
        .fields
        .iter()
        .map(|(f, v)| format!("{f}={v}"))
        .collect();
    log::debug!(
        "post to {}: {} {}{}",
        post.name,
        fields.join(" "),
        nak.map_or("applied", |c| c.name()),
        if post.redelivered {
            " (redelivered)"
        } else {
            ""
        }
    );
    publisher.answer_post(post, nak, &text)?;
    Ok(())
}

pub(crate) fn run(args: PublishArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let sent = run_feed(&args, stop, Arc::new(AtomicBool::new(false)))?;
    log::info!("publisher stopped after {sent} updates");
    Ok(())
}

/// Writes what is queued, waiting up to 10 s. A node that takes none of it meanwhile
/// (stopped, say) does not end the feed: publishing goes on, and the library's back-pressure
/// takes the node as lost and reconnects if it stays so.
fn keep_up(publisher: &mut Publisher) -> std::result::Result<(), PublishError> {
    match publisher.flush(Duration::from_secs(10)) {
        Err(PublishError::Client(ClientError::Timeout(why))) => {
            log::warn!("the node took nothing for 10 s ({why}); publishing goes on");
            Ok(())
        }
        other => other,
    }
}

/// The items live at the node: (publisher item id, instrument index), with where each
/// id is, so that a request or a close costs the same however many are live.
#[derive(Default)]
struct LiveItems {
    items: Vec<(usize, usize)>,
    at: HashMap<usize, usize>,
}

impl LiveItems {
    /// Item `id` (instrument `i`) is live; once, however often it is asked for.
    fn add(&mut self, id: usize, i: usize) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.at.entry(id) {
            e.insert(self.items.len());
            self.items.push((id, i));
        }
    }

    /// Item `id` is no longer live.
    fn remove(&mut self, id: usize) {
        let Some(pos) = self.at.remove(&id) else {
            return;
        };
        self.items.swap_remove(pos);
        if let Some(&(moved, _)) = self.items.get(pos) {
            self.at.insert(moved, pos);
        }
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::{feed_wait, LiveItems, IDLE_WAIT};
    use std::time::{Duration, Instant};

    /// A feed with updates to send waits for its next tick; one with none (images
    /// only, or nothing asked for) does not wake at every tick, only at its end or
    /// after IDLE_WAIT.
    #[test]
    fn an_idle_feed_waits_for_the_node_not_for_its_ticks() {
        let now = Instant::now();
        let tick = now + Duration::from_millis(10);
        assert_eq!(feed_wait(now, tick, None, true), Duration::from_millis(10));
        assert_eq!(feed_wait(now, tick, None, false), IDLE_WAIT);
        let end = now + Duration::from_millis(300);
        assert_eq!(
            feed_wait(now, tick, Some(end), false),
            Duration::from_millis(300)
        );
        assert_eq!(feed_wait(now, tick, Some(now), false), Duration::ZERO);
    }

    #[test]
    fn live_items_are_each_held_once_and_removed_wherever_they_are() {
        let mut live = LiveItems::default();
        for id in [10, 11, 12, 11] {
            live.add(id, id * 2);
        }
        assert_eq!(live.len(), 3, "an item asked for twice is live once");
        live.remove(10); // the last takes its place
        live.remove(99); // not live: nothing
        assert_eq!(live.items, [(12, 24), (11, 22)]);
        live.remove(11);
        live.remove(12);
        assert!(live.is_empty() && live.at.is_empty());
        live.add(11, 22);
        assert_eq!(live.items, [(11, 22)]);
    }
}
