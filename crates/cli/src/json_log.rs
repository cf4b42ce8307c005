//! The JSON log format (`--log-format json`): one object per line,
//!
//! ```json
//! {"timestamp":"2026-11-26T08:19:27.621973Z","level":"INFO","fields":{"message":"logged in","peer":"127.0.0.1:59246","role":"Publisher","user":"tickwire"},"target":"tickwire_core"}
//! ```
//!
//! `fields` holds the event's message and its typed fields: numbers and booleans as
//! JSON numbers and booleans, strings as strings. tracing-subscriber's own JSON format
//! would add the `log.target`, `log.file`, `log.line` and `log.module_path` of every
//! record bridged from the `log` facade to its fields; this one gives those records
//! the same shape as the rest, their target being the module that wrote them.

use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = Fields(serde_json::Map::new());
        event.record(&mut fields);
        writeln!(
            writer,
            "{}",
            record(meta.level().as_str(), fields.0, meta.target())
        )
    }
}

/// One log line of the schema above, stamped now.
pub(crate) fn record(
    level: &str,
    fields: serde_json::Map<String, serde_json::Value>,
    target: &str,
) -> String {
    let mut timestamp = String::new();
    // Writing to a String does not fail.
    let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
    // Written in this order (a map would sort its keys): what people read first.
    format!(
        "{{\"timestamp\":{},\"level\":{},\"fields\":{},\"target\":{}}}",
        serde_json::Value::from(timestamp.as_str()),
        serde_json::Value::from(level),
        serde_json::Value::Object(fields),
        serde_json::Value::from(target)
    )
}

/// The event's fields, typed; the `log` facade's metadata fields left out.
struct Fields(serde_json::Map<String, serde_json::Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        let name = field.name();
        if name.starts_with("log.") {
            return;
        }
        self.0
            .insert(name.trim_start_matches("r#").to_string(), value);
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}
