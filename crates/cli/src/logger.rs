//! A small stderr logger: `TIMESTAMP LEVEL message`. Level from TICKWIRE_LOG
//! (error, warn, info, debug, trace; default info).

use log::{Level, LevelFilter, Log, Metadata, Record};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct StderrLogger {
    level: LevelFilter,
}

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let secs = now.as_secs();
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let level = match r.level() {
            Level::Error => "ERROR",
            Level::Warn => "WARN ",
            Level::Info => "INFO ",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        };
        let _ = writeln!(
            std::io::stderr().lock(),
            "{h:02}:{m:02}:{s:02}.{:03}Z {level} {}",
            now.subsec_millis(),
            r.args()
        );
    }

    fn flush(&self) {}
}

pub fn init() {
    let level = match std::env::var("TICKWIRE_LOG").as_deref() {
        Ok("error") => LevelFilter::Error,
        Ok("warn") => LevelFilter::Warn,
        Ok("debug") => LevelFilter::Debug,
        Ok("trace") => LevelFilter::Trace,
        Ok("off") => LevelFilter::Off,
        _ => LevelFilter::Info,
    };
    static LOGGER: std::sync::OnceLock<StderrLogger> = std::sync::OnceLock::new();
    let _ = log::set_logger(LOGGER.get_or_init(|| StderrLogger { level }));
    log::set_max_level(level);
}
