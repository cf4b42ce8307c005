//! Logging to standard error with `tracing-subscriber`: every record has its date and
//! time (UTC, RFC 3339), its level and where it comes from (`target`), as text or, with
//! `--log-format json`, one JSON object per line for log shippers. The crates log
//! through the `log` facade; the subscriber takes their records too. The level comes
//! from TICKWIRE_LOG (error, warn, info, debug, trace, off; default info): anything
//! else is an error, not a silent default.

use log::LevelFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-24T04:40:01.123456Z  INFO tickwire_node::server: message`
    Text,
    /// `{"timestamp":"...","level":"INFO","fields":{"message":"..."},"target":"..."}`
    Json,
}

/// The level TICKWIRE_LOG asks for.
pub fn level_from_env() -> Result<LevelFilter, String> {
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

pub fn init(format: LogFormat) -> Result<(), String> {
    let level = level_from_env()?;
    let max = match level {
        LevelFilter::Off => tracing_subscriber::filter::LevelFilter::OFF,
        LevelFilter::Error => tracing_subscriber::filter::LevelFilter::ERROR,
        LevelFilter::Warn => tracing_subscriber::filter::LevelFilter::WARN,
        LevelFilter::Info => tracing_subscriber::filter::LevelFilter::INFO,
        LevelFilter::Debug => tracing_subscriber::filter::LevelFilter::DEBUG,
        LevelFilter::Trace => tracing_subscriber::filter::LevelFilter::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(max)
        .with_ansi(false);
    let res = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    res.map_err(|e| format!("cannot start logging: {e}"))?;
    // (`try_init` also routes the `log` facade's records here.) The facade's own gate
    // stays in force: the demo lowers it to keep its board clean.
    log::set_max_level(level);
    Ok(())
}
