//! `tickwire post`: contribute values to an item and wait for the answer.

use crate::json::{event_json_line, event_line};
use crate::subscribe::{load_dictionary, Exit};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tickwire_client::{EventRef, PostTo, Subscriber};
use tickwire_proto::text::parse_value;
use tickwire_proto::{Dictionary, FieldListWriter};

#[derive(clap::Args)]
pub(crate) struct PostArgs {
    #[command(flatten)]
    conn: crate::node_args::NodeArgs,
    /// Service of the item.
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    service: String,
    /// The item to post to.
    #[arg(value_name = "ITEM")]
    item: String,
    /// Values to post, by field name (or id) and in the field's type: BID=101.25
    /// ASK=101.30. An empty value posts a blank.
    #[arg(required = true, value_name = "FIELD=VALUE")]
    fields: Vec<String>,
    /// Print the answer as one JSON object: type "ack", post_id, ok, nak_code, text.
    #[arg(long)]
    json: bool,
    /// Give up (exit status 3) if no answer came within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value = "15", value_parser = crate::subscribe::seconds)]
    timeout: f64,
    /// Field dictionary file (default: the built-in MarketPrice dictionary).
    #[arg(long, value_name = "FILE")]
    dictionary: Option<PathBuf>,
}

/// The post's field list from `FIELD=VALUE` arguments.
fn encode_fields(dict: &Dictionary, args: &[String]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut w = FieldListWriter::new(&mut out);
    for arg in args {
        let Some((name, text)) = arg.split_once('=') else {
            bail!("{arg:?}: expected FIELD=VALUE, e.g. BID=101.25");
        };
        let Some(fid) = dict.fid(name) else {
            bail!("{arg:?}: unknown field {name:?} (not in the dictionary and not a number)");
        };
        let Some(def) = dict.get(fid) else {
            bail!("{arg:?}: field {fid} is not in the dictionary: its type is unknown");
        };
        let mut scratch = Vec::new();
        let value = parse_value(def.field_type, text, &mut scratch).map_err(|why| {
            anyhow::anyhow!("{arg:?}: {why} ({} is {})", def.name, def.field_type.name())
        })?;
        w.try_push(fid, value)
            .with_context(|| format!("{arg:?}: cannot encode"))?;
    }
    w.finish();
    Ok(out)
}

pub(crate) fn run(args: PostArgs) -> Result<()> {
    let dict = load_dictionary(args.dictionary.as_deref())?;
    let fields = encode_fields(&dict, &args.fields)?;
    let mut opts = args.conn.connect_options("tickwire-post")?;
    // One post, one answer: a lost connection is reported, not retried.
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts)
        .with_context(|| format!("cannot connect to {}", args.conn.node))?;
    const POST_ID: u32 = 1;
    sub.post(
        PostTo::Item {
            service: &args.service,
            name: &args.item,
        },
        POST_ID,
        tickwire_proto::FieldList::decode(&fields)?,
        true,
    )?;
    sub.flush(Duration::from_secs(5))?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout.max(0.0));
    while Instant::now() < deadline {
        let mut answer: Option<(String, bool)> = None;
        sub.dispatch(Duration::from_millis(200), |e| {
            if let EventRef::Ack(a) = &e {
                if a.post_id == POST_ID {
                    let line = if args.json {
                        event_json_line(&dict, &e)
                    } else {
                        event_line(&dict, &e)
                    };
                    answer = Some((line, a.nak.is_none()));
                }
            }
        })?;
        if let Some((line, ok)) = answer {
            crate::stdout::line(line)?;
            return if ok { Ok(()) } else { Err(Exit(1).into()) };
        }
    }
    eprintln!(
        "tickwire post: no answer from {} within {} s",
        args.conn.node, args.timeout
    );
    Err(Exit(3).into())
}
