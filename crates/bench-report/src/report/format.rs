//! How report.md writes numbers.

/// A time in ns as µs with one decimal ("12.5").
pub fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

/// A rate with thousands separators, no decimals ("1,250,000").
pub fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A per-update CPU time: "-" where there was none to measure.
pub fn ns(v: f64) -> String {
    if v > 0.0 {
        format!("{v:.0} ns")
    } else {
        "-".to_string()
    }
}

/// A latency already in µs with one decimal, or "-" when there was none (ConsPerf's).
pub fn us_or_dash(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}
