//! Logging to standard error with `tracing-subscriber`: every record has its date and
//! time (UTC, RFC 3339), its level and where it comes from (`target`), as text or, with
//! `--log-format json`, one JSON object per line for log shippers. The node's core
//! logs with `tracing` and fields (peer, user, role, service: `fields.peer` in JSON);
//! the other crates through the `log` facade, whose records the subscriber takes too.
//! The level comes
//! from TICKWIRE_LOG (error, warn, info, debug, trace, off; default info): anything
//! else is an error, not a silent default.

use log::LevelFilter;
use std::sync::atomic::{AtomicU8, Ordering};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `2026-11-24T04:40:01.123456Z  INFO tickwire_node::server: message`
    Text,
    /// `{"timestamp":"...","level":"INFO","fields":{"message":"...",...},"target":"..."}`
    /// (the schema: docs/OPERATIONS.md, "JSON logs").
    Json,
}

/// A command's fatal error, the last thing it says: `tickwire: ...` on standard error,
/// or with JSON logs one ERROR record of the same schema as the rest (log shippers
/// would otherwise get a line that is not JSON). Written directly: logging may be what
/// failed to start.
pub(crate) fn fatal(format: LogFormat, message: &str) {
    match format {
        LogFormat::Text => eprintln!("tickwire: {message}"),
        LogFormat::Json => {
            let mut fields = serde_json::Map::new();
            fields.insert("message".into(), message.into());
            fields.insert("fatal".into(), true.into());
            eprintln!("{}", crate::json_log::record("ERROR", fields, "tickwire"));
        }
    }
}

/// The level TICKWIRE_LOG asks for.
pub(crate) fn level_from_env() -> Result<LevelFilter, String> {
    match std::env::var("TICKWIRE_LOG") {
        Err(std::env::VarError::NotPresent) => Ok(LevelFilter::Info),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!(
            "TICKWIRE_LOG={v:?} is not a log level: use error, warn, info, debug, trace or off"
        )),
        Ok(v) => match v.to_ascii_lowercase().as_str() {
            "error" => Ok(LevelFilter::Error),
            "warn" => Ok(LevelFilter::Warn),
            "info" | "" => Ok(LevelFilter::Info),
            "debug" => Ok(LevelFilter::Debug),
            "trace" => Ok(LevelFilter::Trace),
            "off" => Ok(LevelFilter::Off),
            _ => Err(format!(
                "TICKWIRE_LOG={v:?} is not a log level: use error, warn, info, debug, trace or off"
            )),
        },
    }
}

/// The level records must reach to be written: a `log::LevelFilter` as a number (0 off,
/// 1 error .. 5 trace), for the `log` facade's records and `tracing`'s alike.
static LEVEL: AtomicU8 = AtomicU8::new(LevelFilter::Info as u8);

fn allows(level: &tracing::Level) -> bool {
    let rank = match *level {
        tracing::Level::ERROR => LevelFilter::Error,
        tracing::Level::WARN => LevelFilter::Warn,
        tracing::Level::INFO => LevelFilter::Info,
        tracing::Level::DEBUG => LevelFilter::Debug,
        tracing::Level::TRACE => LevelFilter::Trace,
    };
    rank as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Changes the level while running (the demo quiets the nodes it runs in process
/// while its board is on the terminal).
pub(crate) fn set_level(level: LevelFilter) {
    LEVEL.store(level as u8, Ordering::Relaxed);
    log::set_max_level(level);
}

pub(crate) fn init(format: LogFormat) -> Result<(), String> {
    let level = level_from_env()?;
    let filter = tracing_subscriber::filter::filter_fn(|meta| allows(meta.level()));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(|| OneLinePerRecord)
        .with_ansi(false);
    let res = match format {
        LogFormat::Text => tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .try_init(),
        LogFormat::Json => tracing_subscriber::registry()
            .with(
                layer
                    .event_format(crate::json_log::JsonLines)
                    .with_filter(filter),
            )
            .try_init(),
    };
    res.map_err(|e| format!("cannot start logging: {e}"))?;
    // (`try_init` also routes the `log` facade's records here.)
    set_level(level);
    Ok(())
}

/// Standard error, one line per record: a record's control characters but its last
/// newline are written escaped (`\n`, `\r`, `\u{1b}`...). Names in records are often a
/// peer's (a user name in a login that failed): with a newline in one, a peer wrote
/// log lines of its own making, say "login accepted user=root", or terminal escapes.
/// (The JSON format escapes them as JSON does.) The formatter writes each record whole,
/// in one call.
struct OneLinePerRecord;

impl std::io::Write for OneLinePerRecord {
    fn write(&mut self, record: &[u8]) -> std::io::Result<usize> {
        let body = record.strip_suffix(b"\n").unwrap_or(record);
        let text = String::from_utf8_lossy(body);
        let mut out = String::with_capacity(record.len() + 16);
        for c in text.chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push('\t'),
                // C0 and C1 controls (an 8-bit CSI is a terminal escape too) and
                // Unicode's line and paragraph separators.
                c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                    out.push_str(&format!("\\u{{{:x}}}", c as u32))
                }
                c => out.push(c),
            }
        }
        if body.len() < record.len() {
            out.push('\n');
        }
        std::io::stderr().lock().write_all(out.as_bytes())?;
        Ok(record.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
