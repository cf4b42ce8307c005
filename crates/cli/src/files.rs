//! `tickwire files send` and `tickwire files status` (docs/FILES.md): queue files at a
//! node for its sites, and read the node's record of who has what.

use crate::subscribe::Exit;
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use tickwire_client::files::{self, FileStatus};
use tickwire_client::Subscriber;

#[derive(clap::Subcommand)]
pub(crate) enum FilesCommand {
    /// Queue files at a node, which sends them to its sites (one stream to every site
    /// at once, repaired where a site missed chunks); each arrives whole and checked
    /// (SHA-256) in every site's inbox, or not at all. Prints one line per file queued
    /// (its transfer id and SHA-256); exit status 1 if the node refused any (the
    /// reason on standard error). The node must move files (`[files]`) and your user
    /// may publish the service.
    Send(SendArgs),
    /// What a node has queued, is sending, and has delivered or not: one line per file
    /// and site (`--json`: one object per line with "file", "site", "state"
    /// (queued, sending, done, failed), "sha256", "transfer", "service", "size",
    /// "since_ms", "reason").
    Status(StatusArgs),
}

#[derive(clap::Args)]
pub(crate) struct SendArgs {
    #[command(flatten)]
    conn: crate::node_args::NodeArgs,
    /// The files service to send in.
    #[arg(long, value_name = "NAME", default_value = "FILES")]
    service: String,
    /// The sites (node names) to deliver to, comma-separated; default: every site of
    /// the service present when the file starts.
    #[arg(long, value_name = "SITE,...", value_delimiter = ',')]
    to: Vec<String>,
    /// The name the files get in each site's inbox (under the service's directory):
    /// DIR/ before each file's own name (default: the file's own name).
    #[arg(long, value_name = "DIR")]
    as_dir: Option<String>,
    /// Give up on the node after this many seconds without an answer (at most a day).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    timeout: f64,
    /// Print one JSON object per file queued: "file", "transfer", "sha256", "size".
    #[arg(long)]
    json: bool,
    /// The files to send.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    conn: crate::node_args::NodeArgs,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Give up after this many seconds without an answer (at most a day).
    #[arg(long, value_name = "SECONDS", default_value_t = 15.0)]
    timeout: f64,
}

/// The longest `--timeout`: a day.
const LONGEST_TIME_OUT: f64 = 86_400.0;

/// A `--timeout` of `seconds`, from 0.1 s to a day (one past what a clock holds, or
/// infinite, is a day).
fn time_out(seconds: f64) -> Duration {
    // (`clamp` keeps a NaN, which is no time.)
    Duration::from_secs_f64(match seconds.is_nan() {
        true => 0.1,
        false => seconds.clamp(0.1, LONGEST_TIME_OUT),
    })
}

fn connect(conn: &crate::node_args::NodeArgs, app: &str) -> Result<Subscriber> {
    let mut opts = conn.connect_options(app)?;
    opts.reconnect = false;
    Subscriber::connect(opts).with_context(|| format!("cannot connect to {}", conn.node))
}

pub(crate) fn run(cmd: FilesCommand) -> Result<()> {
    match cmd {
        FilesCommand::Send(a) => send(a),
        FilesCommand::Status(a) => status(a),
    }
}

fn send(args: SendArgs) -> Result<()> {
    let mut names = Vec::new();
    for p in &args.paths {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", p.display());
        }
        let Some(own) = p.file_name().and_then(|n| n.to_str()) else {
            bail!("{}: the file name is not UTF-8", p.display());
        };
        let name = match &args.as_dir {
            Some(d) => format!("{}/{own}", d.trim_end_matches('/')),
            None => own.to_string(),
        };
        tickwire_files::name::check_name(&name).map_err(|e| anyhow::anyhow!("{name:?}: {e}"))?;
        names.push(name);
    }
    let mut sub = connect(&args.conn, "tickwire-files")?;
    let timeout = time_out(args.timeout);
    let uploads: Vec<files::Upload> = args
        .paths
        .iter()
        .zip(&names)
        .map(|(path, name)| files::Upload { name, path })
        .collect();
    // Answers come as the node gives them; lines go out in the order of the paths.
    let mut outcomes: Vec<Option<Result<files::Queued, String>>> = vec![None; names.len()];
    let mut printed = 0;
    let mut refused = 0;
    let mut print_ready = |outcomes: &mut Vec<Option<Result<files::Queued, String>>>| {
        while let Some(Some(outcome)) = outcomes.get_mut(printed).map(Option::take) {
            let name = &names[printed];
            match outcome {
                // Sent whether or not the report is read.
                Ok(q) if args.json => {
                    let _ = crate::stdout::line(
                        json!({"file": name, "transfer": format!("{:016x}", q.transfer), "sha256": hex::encode(q.sha256), "size": q.size}),
                    );
                }
                Ok(q) => {
                    let _ = crate::stdout::line(format_args!(
                        "queued {name} ({} bytes) as {:016x}, sha256 {}",
                        q.size,
                        q.transfer,
                        hex::encode(q.sha256)
                    ));
                }
                Err(reason) => {
                    eprintln!(
                        "tickwire files send: {name}: refused by {}: {reason}",
                        args.conn.node
                    );
                    refused += 1;
                }
            }
            printed += 1;
        }
    };
    let sent = files::send_files(
        &mut sub,
        &args.service,
        &uploads,
        &args.to,
        timeout,
        |i, outcome| {
            outcomes[i] = Some(outcome.map_err(|e| match e {
                tickwire_client::ClientError::Refused(r) => r,
                other => other.to_string(),
            }));
            print_ready(&mut outcomes);
        },
    );
    sent.with_context(|| format!("sending files to {}", args.conn.node))?;
    if refused > 0 {
        return Err(Exit(1).into());
    }
    Ok(())
}

fn status_json(s: &FileStatus) -> serde_json::Value {
    json!({
        "file": s.file,
        "site": s.site,
        "state": s.state,
        "sha256": hex::encode(s.sha256),
        "transfer": format!("{:016x}", s.transfer),
        "service": s.service,
        "size": s.size,
        "since_ms": s.since_ms,
        "reason": s.reason,
    })
}

fn status(args: StatusArgs) -> Result<()> {
    let mut sub = connect(&args.conn, "tickwire-files")?;
    let timeout = time_out(args.timeout);
    let list = files::status(&mut sub, 1, timeout)
        .with_context(|| format!("asking {} for its files", args.conn.node))?;
    for s in &list {
        if args.json {
            // Escaped as the plain lines are (JSON lets C1 and bidi controls through).
            let line = status_json(s).to_string();
            crate::stdout::line(tickwire_files::name::printable_json(&line))?;
        } else {
            // Sites, names and reasons come from other nodes: shown without the
            // characters that would write on the terminal or forge a line.
            use tickwire_files::name::printable;
            let site = if s.site.is_empty() {
                "(every site)".into()
            } else {
                printable(&s.site)
            };
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", printable(&s.reason))
            };
            crate::stdout::line(format_args!(
                "{:<8} {:<16} {} {} bytes  {}{reason}",
                s.state,
                site,
                printable(&s.file),
                s.size,
                &hex::encode(s.sha256)[..16]
            ))?;
        }
    }
    if list.is_empty() && !args.json {
        crate::stdout::line("no files")?;
    }
    Ok(())
}
