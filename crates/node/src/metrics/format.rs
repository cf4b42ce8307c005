//! The two text formats Prometheus scrapes, chosen by the request's `Accept` header as
//! Prometheus's own exporters choose: OpenMetrics when it is asked for (Prometheus
//! asks for it first), else the classic text format 0.0.4 (curl, `promtool check
//! metrics`, older scrapers).
//!
//! `prometheus-client` writes only OpenMetrics; the classic format is derived from it.
//! The two differ only in their descriptor lines, never in a sample's name, labels or
//! value: a counter family is named with its `_total` in the classic format, an info
//! family with its `_info` (and typed a gauge), and the classic format has no `# UNIT`,
//! no `_created` samples and no `# EOF`.

use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    OpenMetrics,
    /// The classic Prometheus text format, version 0.0.4.
    Text,
}

impl Format {
    /// The format an `Accept` header asks for (none, or `*/*`: the classic one).
    pub(crate) fn negotiate(accept: Option<&str>) -> Format {
        let wants_openmetrics = accept.is_some_and(|a| {
            a.split(',').any(|range| {
                let mut params = range.split(';').map(str::trim);
                let media = params.next().unwrap_or("");
                // `q=0` means "not this one".
                let refused = params.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The classic text format of an OpenMetrics exposition.
pub(crate) fn classic_text(openmetrics: &str) -> String {
    // A family's type comes after its HELP line: read all types first.
    let types: HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect();
    let family_name = |name: &str| -> String {
        match types.get(name) {
            Some(&"counter") => format!("{name}_total"),
            Some(&"info") => format!("{name}_info"),
            _ => name.to_string(),
        }
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push_str(&format!("# HELP {} {help}\n", family_name(name)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let kind = match kind {
                "info" | "stateset" => "gauge",
                "gaugehistogram" | "unknown" => "untyped",
                other => other,
            };
            out.push_str(&format!("# TYPE {} {kind}\n", family_name(name)));
        } else if line.starts_with("# UNIT ") || line == "# EOF" || is_created_sample(line, &types)
        {
            continue;
        } else {
            // A sample: the same in both formats (this exposition has no exemplars).
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A counter's `_created` sample (OpenMetrics only).
fn is_created_sample(line: &str, types: &HashMap<&str, &str>) -> bool {
    let name = line.split(['{', ' ']).next().unwrap_or("");
    name.strip_suffix("_created")
        .is_some_and(|family| types.get(family) == Some(&"counter"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_asked_for() {
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text; q=0, text/plain")),
            Format::Text
        );
    }

    #[test]
    fn counters_and_infos_are_named_with_their_suffix_in_the_classic_format() {
        let om = "# HELP x_logins Logins.\n# TYPE x_logins counter\nx_logins_total 3\nx_logins_created 1.5\n\
                  # HELP x_build Build.\n# TYPE x_build info\nx_build_info{version=\"1\"} 1\n\
                  # HELP x_lat Latency.\n# TYPE x_lat histogram\n# UNIT x_lat seconds\nx_lat_bucket{le=\"+Inf\"} 2\nx_lat_sum 0.5\nx_lat_count 2\n\
                  # HELP x_up Up.\n# TYPE x_up gauge\nx_up{service=\"a b\"} 1\n# EOF\n";
        let text = classic_text(om);
        assert_eq!(
            text,
            "# HELP x_logins_total Logins.\n# TYPE x_logins_total counter\nx_logins_total 3\n\
             # HELP x_build_info Build.\n# TYPE x_build_info gauge\nx_build_info{version=\"1\"} 1\n\
             # HELP x_lat Latency.\n# TYPE x_lat histogram\nx_lat_bucket{le=\"+Inf\"} 2\nx_lat_sum 0.5\nx_lat_count 2\n\
             # HELP x_up Up.\n# TYPE x_up gauge\nx_up{service=\"a b\"} 1\n"
        );
    }
}
