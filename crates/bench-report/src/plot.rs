//! Dependency-free SVG plots for the lab's reports.
//!
//! * [`LineChart`]: series of (x, y) points, linear or logarithmic axes (e.g. latency
//!   percentiles against offered load).
//! * [`BarChart`]: grouped bars per category, with an optional horizontal reference line
//!   (e.g. "base 100" comparisons between builds).
//!
//! Both render a standalone 800x480 SVG string with [`LineChart::to_svg`] /
//! [`BarChart::to_svg`]. Non-finite values (and non-positive ones on log axes) are
//! skipped, so the output never contains NaN or infinities. The axis helpers
//! ([`linear_axis`], [`log_axis`], [`nice_ticks`]) and [`format_number`] are public for
//! tables and tests.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Width of the rendered SVG in pixels.
pub const WIDTH: f64 = 800.0;
/// Height of the rendered SVG in pixels.
pub const HEIGHT: f64 = 480.0;

/// Series colours (Tableau 10): distinct, readable on white.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Approximate advance of one character of 11px sans-serif text, for layout.
const CHAR_W: f64 = 6.3;

/// The colour of series `i`.
fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Escapes `&`, `<`, `>`, `"` and `'` for XML text and attribute values, and drops
/// characters XML 1.0 does not allow.
pub fn escape_xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// Shortens `s` to at most `max` characters, ending with "…" when cut.
fn truncate(s: &str, max: usize) -> String {
    let max = max.max(2);
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// A pixel coordinate for SVG output (one decimal; never NaN).
fn px(v: f64) -> String {
    if v.is_finite() {
        let s = format!("{v:.1}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    } else {
        "0".to_string()
    }
}

// ---------------------------------------------------------------------------------------
// Numbers and ticks
// ---------------------------------------------------------------------------------------

/// Removes trailing zeros after a decimal point ("1.50" -> "1.5", "2.0" -> "2").
fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn si_scale(a: f64) -> (f64, &'static str) {
    if a >= 1e12 {
        (1e12, "T")
    } else if a >= 1e9 {
        (1e9, "G")
    } else if a >= 1e6 {
        (1e6, "M")
    } else if a >= 1e3 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

/// Formats a number compactly with up to three significant digits and an SI suffix for
/// large values: 950, 1.5k, 10k, 2.35M, 0.25, 1e-5.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if a < 1e-3 {
        let s = format!("{v:.2e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{}", trim_zeros(m.to_string()), e);
    }
    let (scale, suffix) = si_scale(a);
    let x = v / scale;
    let xa = x.abs();
    let decimals = if xa >= 100.0 {
        0
    } else if xa >= 10.0 {
        1
    } else if xa >= 1.0 {
        2
    } else {
        (2.0 - xa.log10().floor()).min(6.0) as usize
    };
    let s = trim_zeros(format!("{x:.decimals$}"));
    // Rounding can carry into the next unit (999.6 -> "1000"): redo one unit up.
    if suffix.is_empty() && s.trim_start_matches('-') == "1000" {
        return format_number(v.signum() * 1000.0);
    }
    if s == "-0" {
        return "0".to_string();
    }
    format!("{s}{suffix}")
}

/// Formats a tick value with just enough decimals for the tick spacing `step`, with SI
/// suffixes for large values (0, 0.2, 20, 1.2k, 2M).
pub fn format_tick(v: f64, step: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    if v.abs() < step.abs() * 1e-6 || v == 0.0 {
        return "0".to_string();
    }
    let (scale, suffix) = si_scale(v.abs());
    let st = (step / scale).abs();
    if scale == 1.0 && v.abs() < 1e-3 {
        return format_number(v);
    }
    let decimals = if st.is_nan() || st <= 0.0 || st >= 1.0 {
        0
    } else {
        ((-st.log10()) - 1e-9).ceil().clamp(0.0, 6.0) as usize
    };
    let s = trim_zeros(format!("{:.*}", decimals, v / scale));
    format!("{s}{suffix}")
}

/// An axis: its range, labelled ticks and (log axes) unlabelled minor ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Low end of the axis.
    pub lo: f64,
    /// High end of the axis.
    pub hi: f64,
    /// Logarithmic scale.
    pub log: bool,
    /// Labelled tick values, ascending, within [lo, hi].
    pub ticks: Vec<f64>,
    /// Unlabelled minor tick values (2..9 x 10^k on log axes).
    pub minor: Vec<f64>,
    /// Spacing of linear ticks (used for label precision); 0 on log axes.
    pub step: f64,
}

impl Axis {
    /// Position of `v` on the axis as a fraction of its length (0 at lo, 1 at hi).
    pub fn fraction(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        if f.is_finite() {
            f
        } else {
            0.0
        }
    }

    /// The label of tick value `v`.
    pub fn label(&self, v: f64) -> String {
        if self.log {
            format_number(v)
        } else {
            format_tick(v, self.step)
        }
    }
}

/// A "nice" step at least `raw`: (m, e) for m x 10^e with m in {1, 2, 5, 10}.
fn nice_step(raw: f64) -> (i64, i32) {
    let exp = raw.log10().floor() as i32;
    let f = raw / pow10(exp);
    let m = if f <= 1.0 + 1e-9 {
        1
    } else if f <= 2.0 + 1e-9 {
        2
    } else if f <= 5.0 + 1e-9 {
        5
    } else {
        10
    };
    (m, exp)
}

/// 10^e, exact for the representable powers.
fn pow10(e: i32) -> f64 {
    10f64.powi(e)
}

/// n x 10^e, rounded once (so 3 x 0.2 is 0.6, not 0.6000000000000001).
fn scaled(n: i64, e: i32) -> f64 {
    if e < 0 {
        n as f64 / pow10(-e)
    } else {
        n as f64 * pow10(e)
    }
}

/// A linear axis covering [min, max] with about five "nice" intervals (steps of 1, 2 or
/// 5 x 10^k); the ends are rounded out to whole steps. A degenerate range (all values
/// equal) becomes 0..2v (or 2v..0; 0..1 for zero); non-finite input gives 0..1.
pub fn linear_axis(min: f64, max: f64) -> Axis {
    let (mut min, mut max) = if min.is_finite() && max.is_finite() {
        (min.min(max), min.max(max))
    } else {
        (0.0, 1.0)
    };
    if max - min <= 1e-12 * max.abs().max(min.abs()).max(1e-300) {
        let v = min;
        if v > 0.0 {
            (min, max) = (0.0, 2.0 * v);
        } else if v < 0.0 {
            (min, max) = (2.0 * v, 0.0);
        } else {
            (min, max) = (0.0, 1.0);
        }
    }
    let (m, e) = nice_step((max - min) / 5.0);
    let step = scaled(m, e);
    let k0 = (min / step + 1e-9).floor() as i64;
    let k1 = (max / step - 1e-9).ceil() as i64;
    let ticks: Vec<f64> = (k0..=k1).map(|k| scaled(k * m, e) + 0.0).collect();
    let (lo, hi) = (scaled(k0 * m, e), scaled(k1 * m, e));
    Axis {
        lo,
        hi,
        log: false,
        ticks,
        minor: Vec::new(),
        step,
    }
}

/// The tick values of [`linear_axis`]`(min, max)`: e.g. 0..97 gives 0, 20, ..., 100.
pub fn nice_ticks(min: f64, max: f64) -> Vec<f64> {
    linear_axis(min, max).ticks
}

/// The largest 1, 2 or 5 x 10^k not above `v` (v > 0).
fn floor_125(v: f64) -> f64 {
    let base = 10f64.powf(v.log10().floor());
    for m in [5.0, 2.0, 1.0] {
        if m * base <= v * (1.0 + 1e-9) {
            return m * base;
        }
    }
    base
}

/// The smallest 1, 2 or 5 x 10^k not below `v` (v > 0).
fn ceil_125(v: f64) -> f64 {
    let base = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * base >= v * (1.0 - 1e-9) {
            return m * base;
        }
    }
    10.0 * base
}

/// A logarithmic axis covering [min, max] (both > 0): the ends are rounded out to
/// 1, 2 or 5 x 10^k, labelled ticks are the decades inside (thinned if there are more
/// than eight), plus the ends when they are not too close to a decade; minor ticks at
/// 2..9 x 10^k. A range within one decade is ticked at 1, 2, 5 x 10^k instead. E.g.
/// 800..2,000,000 gives 500, 1k, 10k, 100k, 1M, 2M. Non-positive or non-finite input
/// gives 1..10; a single value v gives v/2..2v (rounded out).
pub fn log_axis(min: f64, max: f64) -> Axis {
    let (mut min, mut max) = if min.is_finite() && max.is_finite() && min > 0.0 && max > 0.0 {
        (min.min(max), min.max(max))
    } else {
        (1.0, 10.0)
    };
    if max <= min * (1.0 + 1e-12) {
        (min, max) = (min / 2.0, max * 2.0);
    }
    let lo = floor_125(min);
    let hi = ceil_125(max);
    let (llo, lhi) = (lo.log10(), hi.log10());
    let span = lhi - llo;
    let k0 = (llo - 1e-9).ceil() as i32;
    let k1 = (lhi + 1e-9).floor() as i32;
    let mut ticks: Vec<f64>;
    let mut minor = Vec::new();
    if k1 - k0 >= 1 {
        let count = (k1 - k0 + 1) as usize;
        let stride = count.div_ceil(8).max(1) as i32;
        ticks = (k0..=k1)
            .filter(|k| (k - k0) % stride == 0)
            .map(|k| 10f64.powi(k))
            .collect();
        // The ends, unless they crowd a decade tick.
        let near = |v: f64, ticks: &[f64]| {
            ticks
                .iter()
                .any(|t| ((t.log10() - v.log10()) / span).abs() < 0.06)
        };
        if !near(lo, &ticks) {
            ticks.insert(0, lo);
        }
        if !near(hi, &ticks) {
            ticks.push(hi);
        }
        if count <= 7 {
            for k in (k0 - 1)..=k1 {
                for m in 2..=9 {
                    let v = m as f64 * 10f64.powi(k);
                    if v > lo * (1.0 + 1e-9) && v < hi * (1.0 - 1e-9) {
                        minor.push(v);
                    }
                }
            }
        }
    } else {
        ticks = Vec::new();
        for k in (k0 - 1)..=(k1 + 1) {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powi(k);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    ticks.push(v);
                }
            }
        }
        if ticks.len() < 2 {
            ticks = vec![lo, hi];
        }
    }
    Axis {
        lo,
        hi,
        log: true,
        ticks,
        minor,
        step: 0.0,
    }
}

// ---------------------------------------------------------------------------------------
// Shared drawing
// ---------------------------------------------------------------------------------------

/// The plotting rectangle; the axes' ranges map to it inset by `pad` pixels so that
/// markers at the ends do not sit on the frame.
#[derive(Debug, Clone, Copy)]
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    pad: f64,
}

impl Frame {
    fn x(&self, axis: &Axis, v: f64) -> f64 {
        self.left + self.pad + axis.fraction(v) * (self.right - self.left - 2.0 * self.pad)
    }
    fn y(&self, axis: &Axis, v: f64) -> f64 {
        self.bottom - self.pad - axis.fraction(v) * (self.bottom - self.top - 2.0 * self.pad)
    }
}

fn svg_open(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" \
         font-size=\"11\">\n<title>{t}</title>\n\
         <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n",
        w = WIDTH,
        h = HEIGHT,
        t = escape_xml(title)
    );
    if !title.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\" \
             font-weight=\"bold\" fill=\"#222\">{}</text>",
            px(WIDTH / 2.0),
            escape_xml(&truncate(title, 95))
        );
    }
}

/// The width in pixels of the widest label.
fn labels_width(labels: &[String]) -> f64 {
    labels
        .iter()
        .map(|l| l.chars().count() as f64 * CHAR_W)
        .fold(0.0, f64::max)
}

/// Writes a line from `from` to `to` in `stroke`.
fn svg_line(out: &mut String, from: (f64, f64), to: (f64, f64), stroke: &str) {
    let _ = writeln!(
        out,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{stroke}\"/>",
        px(from.0),
        px(from.1),
        px(to.0),
        px(to.1)
    );
}

/// Draws the y axis: gridlines, ticks, labels and the rotated axis title.
fn draw_y_axis(out: &mut String, f: &Frame, axis: &Axis, label: &str) {
    for &v in &axis.minor {
        let y = f.y(axis, v);
        svg_line(out, (f.left, y), (f.right, y), "#f1f1f1");
    }
    for &v in &axis.ticks {
        let y = f.y(axis, v);
        svg_line(out, (f.left, y), (f.right, y), "#dddddd");
        svg_line(out, (f.left - 5.0, y), (f.left, y), "#333");
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#333\">{}</text>",
            px(f.left - 8.0),
            px(y + 4.0),
            escape_xml(&axis.label(v)),
        );
    }
    if !label.is_empty() {
        let cy = (f.top + f.bottom) / 2.0;
        let _ = writeln!(
            out,
            "<text x=\"16\" y=\"{cy}\" transform=\"rotate(-90 16 {cy})\" \
             text-anchor=\"middle\" font-size=\"12\" fill=\"#222\">{}</text>",
            escape_xml(&truncate(label, 60)),
            cy = px(cy)
        );
    }
}

/// Draws the x axis of a line chart: gridlines, ticks, labels and the axis title.
fn draw_x_axis(out: &mut String, f: &Frame, axis: &Axis, label: &str) {
    for &v in &axis.minor {
        let x = f.x(axis, v);
        svg_line(out, (x, f.top), (x, f.bottom), "#f1f1f1");
    }
    for &v in &axis.ticks {
        let x = f.x(axis, v);
        svg_line(out, (x, f.top), (x, f.bottom), "#dddddd");
        svg_line(out, (x, f.bottom), (x, f.bottom + 5.0), "#333");
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{}</text>",
            px(x),
            px(f.bottom + 18.0),
            escape_xml(&axis.label(v)),
        );
    }
    if !label.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" \
             fill=\"#222\">{}</text>",
            px((f.left + f.right) / 2.0),
            px(f.bottom + 38.0),
            escape_xml(&truncate(label, 100))
        );
    }
}

fn draw_frame(out: &mut String, f: &Frame) {
    let _ = writeln!(
        out,
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>",
        px(f.left),
        px(f.top),
        px(f.right - f.left),
        px(f.bottom - f.top)
    );
}

fn draw_no_data(out: &mut String, f: &Frame) {
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" \
         fill=\"#888\">no data</text>",
        px((f.left + f.right) / 2.0),
        px((f.top + f.bottom) / 2.0)
    );
}

/// Marker shapes, cycled with a different period than the colours so that series 11
/// differs from series 1.
fn marker(out: &mut String, shape: usize, x: f64, y: f64, fill: &str) {
    let (x, y) = (x, y);
    match shape % 4 {
        0 => {
            let _ = write!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{fill}\"/>",
                px(x),
                px(y)
            );
        }
        1 => {
            let _ = write!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"7\" height=\"7\" fill=\"{fill}\"/>",
                px(x - 3.5),
                px(y - 3.5)
            );
        }
        2 => {
            let _ = write!(
                out,
                "<path d=\"M{} {}L{} {}L{} {}Z\" fill=\"{fill}\"/>",
                px(x),
                px(y - 4.5),
                px(x + 4.2),
                px(y + 3.2),
                px(x - 4.2),
                px(y + 3.2)
            );
        }
        _ => {
            let _ = write!(
                out,
                "<path d=\"M{} {}L{} {}L{} {}L{} {}Z\" fill=\"{fill}\"/>",
                px(x),
                px(y - 4.5),
                px(x + 4.5),
                px(y),
                px(x),
                px(y + 4.5),
                px(x - 4.5),
                px(y)
            );
        }
    }
}

/// Legend entry kinds.
#[derive(Clone, Copy)]
enum Swatch {
    /// A line with the series' marker shape.
    Line(usize),
    /// A filled square.
    Block,
}

/// Ends a chart's SVG: its legend in a column from (x, top) down to the foot of the
/// image, then the closing tag.
fn end_with_legend(
    mut out: String,
    x: f64,
    top: f64,
    legend: &[(String, Swatch)],
    max_chars: usize,
) -> String {
    draw_legend(&mut out, x, top, HEIGHT - 10.0, legend, max_chars);
    out.push_str("</svg>\n");
    out
}

/// Draws a legend in a column starting at (x, y), one entry per name, at most as many
/// as fit above `bottom`; names are cut to `max_chars`.
fn draw_legend(
    out: &mut String,
    x: f64,
    y: f64,
    bottom: f64,
    names: &[(String, Swatch)],
    max_chars: usize,
) {
    const ROW: f64 = 18.0;
    let fits = (((bottom - y) / ROW).floor() as usize).max(1);
    let shown = if names.len() > fits {
        fits - 1
    } else {
        names.len()
    };
    for (i, (name, swatch)) in names.iter().take(shown).enumerate() {
        let cy = y + i as f64 * ROW + 9.0;
        let c = colour(i);
        match swatch {
            Swatch::Line(shape) => {
                let _ = write!(
                    out,
                    "<line x1=\"{}\" y1=\"{cy}\" x2=\"{}\" y2=\"{cy}\" stroke=\"{c}\" \
                     stroke-width=\"2\"/>",
                    px(x),
                    px(x + 22.0),
                    cy = px(cy)
                );
                marker(out, *shape, x + 11.0, cy, c);
            }
            Swatch::Block => {
                let _ = write!(
                    out,
                    "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{c}\"/>",
                    px(x + 5.0),
                    px(cy - 6.0)
                );
            }
        }
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"#222\">{}</text>",
            px(x + 28.0),
            px(cy + 4.0),
            escape_xml(&truncate(name, max_chars))
        );
    }
    if shown < names.len() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"#666\">+{} more</text>",
            px(x + 28.0),
            px(y + shown as f64 * ROW + 13.0),
            names.len() - shown
        );
    }
}

/// Width of the legend column for these names (0 without names).
fn legend_width(names: &[String]) -> (f64, usize) {
    if names.is_empty() {
        return (0.0, 0);
    }
    let max_chars = 26;
    let longest = names
        .iter()
        .map(|n| n.chars().count().min(max_chars))
        .max()
        .unwrap_or(0);
    (
        (longest as f64 * CHAR_W + 36.0).clamp(80.0, 200.0),
        max_chars,
    )
}

// ---------------------------------------------------------------------------------------
// Line chart
// ---------------------------------------------------------------------------------------

/// A named series of (x, y) points for a [`LineChart`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Points; drawn in ascending x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series named `name` with `points`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// A line chart with markers at the points, a legend on the right, and linear or
/// logarithmic axes. Render with [`LineChart::to_svg`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label beside the y axis.
    pub y_label: String,
    /// Logarithmic x axis (points with x <= 0 are skipped).
    pub x_log: bool,
    /// Logarithmic y axis (points with y <= 0 are skipped).
    pub y_log: bool,
    /// The series, coloured in order.
    pub series: Vec<Series>,
}

impl LineChart {
    /// An empty chart with linear axes.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> LineChart {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            ..LineChart::default()
        }
    }

    /// Adds a series (builder style).
    pub fn with_series(mut self, name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        self.series.push(Series::new(name, points));
        self
    }

    /// Sets logarithmic axes (builder style).
    pub fn with_log(mut self, x_log: bool, y_log: bool) -> Self {
        self.x_log = x_log;
        self.y_log = y_log;
        self
    }

    /// The drawable points of each series: finite, positive on log axes, sorted by x.
    fn drawable(&self) -> Vec<Vec<(f64, f64)>> {
        self.series
            .iter()
            .map(|s| {
                let mut pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.x_log || *x > 0.0)
                            && (!self.y_log || *y > 0.0)
                    })
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                pts
            })
            .collect()
    }

    /// Renders the chart as a standalone SVG document (800x480).
    pub fn to_svg(&self) -> String {
        let data = self.drawable();
        let all: Vec<(f64, f64)> = data.iter().flatten().copied().collect();
        let range = |vals: Vec<f64>| {
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        };
        let axis = |log: bool, (lo, hi): (f64, f64)| {
            if log {
                log_axis(lo, hi)
            } else {
                linear_axis(lo, hi)
            }
        };
        let xa = axis(self.x_log, range(all.iter().map(|p| p.0).collect()));
        let ya = axis(self.y_log, range(all.iter().map(|p| p.1).collect()));

        let names: Vec<String> = self.series.iter().map(|s| s.name.clone()).collect();
        let (legend_w, max_chars) = legend_width(&names);
        let y_labels: Vec<String> = ya.ticks.iter().map(|&v| ya.label(v)).collect();
        let left = (30.0 + labels_width(&y_labels) + 8.0).max(58.0);
        // Room for half of the last x tick label to the right of the plot.
        let last_x = xa.ticks.last().map(|&v| xa.label(v)).unwrap_or_default();
        let right_pad = (last_x.chars().count() as f64 * CHAR_W / 2.0 + 6.0).max(16.0);
        let frame = Frame {
            left,
            right: WIDTH - legend_w - right_pad.max(if legend_w > 0.0 { 16.0 } else { 24.0 }),
            top: 42.0,
            bottom: HEIGHT - 52.0,
            pad: 10.0,
        };

        let mut out = String::with_capacity(16 * 1024);
        svg_open(&mut out, &self.title);
        draw_y_axis(&mut out, &frame, &ya, &self.y_label);
        draw_x_axis(&mut out, &frame, &xa, &self.x_label);
        draw_frame(&mut out, &frame);
        if all.is_empty() {
            draw_no_data(&mut out, &frame);
        }
        for (i, pts) in data.iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            let c = colour(i);
            let _ = writeln!(out, "<g>");
            if pts.len() > 1 {
                let coords: Vec<String> = pts
                    .iter()
                    .map(|&(x, y)| format!("{},{}", px(frame.x(&xa, x)), px(frame.y(&ya, y))))
                    .collect();
                let _ = writeln!(
                    out,
                    "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" \
                     stroke-linejoin=\"round\" points=\"{}\"/>",
                    coords.join(" ")
                );
            }
            for &(x, y) in pts {
                marker(
                    &mut out,
                    i / PALETTE.len() + i,
                    frame.x(&xa, x),
                    frame.y(&ya, y),
                    c,
                );
            }
            let _ = writeln!(out, "\n</g>");
        }
        let legend: Vec<(String, Swatch)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), Swatch::Line(i / PALETTE.len() + i)))
            .collect();
        let x = frame.right + right_pad.max(16.0) - 4.0;
        end_with_legend(out, x, frame.top, &legend, max_chars)
    }

    /// Writes [`LineChart::to_svg`] to `path`.
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

// ---------------------------------------------------------------------------------------
// Bar chart
// ---------------------------------------------------------------------------------------

/// A grouped bar chart: one group per category, one bar per series, a legend on the
/// right, and an optional dashed reference line (e.g. at 100 for "base 100" comparisons).
/// Non-finite values are left out (no bar).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Label beside the y axis.
    pub y_label: String,
    /// Category names along the x axis.
    pub categories: Vec<String>,
    /// Series name and one value per category (missing values: no bar).
    pub series: Vec<(String, Vec<f64>)>,
    /// Value at which to draw a horizontal reference line.
    pub reference: Option<f64>,
}

impl BarChart {
    /// An empty chart.
    pub fn new(title: impl Into<String>, y_label: impl Into<String>) -> BarChart {
        BarChart {
            title: title.into(),
            y_label: y_label.into(),
            ..BarChart::default()
        }
    }

    /// Sets the categories (builder style).
    pub fn with_categories<S: Into<String>>(mut self, categories: Vec<S>) -> Self {
        self.categories = categories.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a series (builder style).
    pub fn with_series(mut self, name: impl Into<String>, values: Vec<f64>) -> Self {
        self.series.push((name.into(), values));
        self
    }

    /// Sets the reference line (builder style).
    pub fn with_reference(mut self, value: f64) -> Self {
        self.reference = Some(value);
        self
    }

    /// Renders the chart as a standalone SVG document (800x480).
    pub fn to_svg(&self) -> String {
        let n_cat = self.categories.len();
        let n_ser = self.series.len();
        let values: Vec<f64> = self
            .series
            .iter()
            .flat_map(|(_, v)| v.iter().take(n_cat).copied())
            .filter(|v| v.is_finite())
            .collect();
        let reference = self.reference.filter(|r| r.is_finite());
        let mut lo = 0.0f64;
        let mut hi = 0.0f64;
        for v in values.iter().copied().chain(reference) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let ya = linear_axis(lo, hi);

        let names: Vec<String> = self.series.iter().map(|s| s.0.clone()).collect();
        let (legend_w, max_chars) = legend_width(&names);
        let ref_label = reference.map(format_number).unwrap_or_default();
        let ref_w = if reference.is_some() {
            ref_label.chars().count() as f64 * CHAR_W + 8.0
        } else {
            0.0
        };
        let y_labels: Vec<String> = ya.ticks.iter().map(|&v| ya.label(v)).collect();
        let mut left = (30.0 + labels_width(&y_labels) + 8.0).max(58.0);
        let right = WIDTH - legend_w - ref_w - 20.0;

        // Category labels: horizontal if they fit their group, else rotated by 35 degrees
        // (cut to 20 characters), with room below and on the left for them.
        let group_w = |left: f64| (right - left) / n_cat.max(1) as f64;
        let chars = |c: &String| c.chars().count();
        let longest = self.categories.iter().map(chars).max().unwrap_or(0);
        let rotate = longest as f64 * CHAR_W > group_w(left) * 0.95;
        let cat_chars = if rotate { 20 } else { longest.max(1) };
        // Rotated text runs cos(35) of its width to the left and sin(35) of it down.
        const ROT_CHAR_W: f64 = 6.8;
        let (cos, sin) = (35f64.to_radians().cos(), 35f64.to_radians().sin());
        let bottom_margin = if rotate {
            let widest = longest.min(cat_chars) as f64 * ROT_CHAR_W;
            14.0 + widest * sin + 11.0 * cos + 8.0
        } else {
            40.0
        };
        if rotate {
            let first = self.categories.first().map(chars).unwrap_or(0);
            let first_w = first.min(cat_chars) as f64 * ROT_CHAR_W;
            left = left
                .max(first_w * cos - group_w(left) / 2.0 + 8.0)
                .min(right / 2.0);
        }
        let group_w = group_w(left);
        let frame = Frame {
            left,
            right,
            top: 42.0,
            bottom: HEIGHT - bottom_margin,
            pad: 0.0,
        };

        let mut out = String::with_capacity(16 * 1024);
        svg_open(&mut out, &self.title);
        draw_y_axis(&mut out, &frame, &ya, &self.y_label);
        draw_frame(&mut out, &frame);
        if values.is_empty() {
            draw_no_data(&mut out, &frame);
        }

        let zero_y = frame.y(&ya, 0.0);
        let bar_w = if n_ser > 0 {
            group_w * 0.8 / n_ser as f64
        } else {
            0.0
        };
        let show_values = bar_w >= 18.0;
        // Value labels go last, over the reference line.
        let mut value_labels = String::new();
        for (ci, cat) in self.categories.iter().enumerate() {
            let gx = frame.left + ci as f64 * group_w;
            for (si, (_, vals)) in self.series.iter().enumerate() {
                let Some(&v) = vals.get(ci) else { continue };
                if !v.is_finite() {
                    continue;
                }
                let x = gx + group_w * 0.1 + si as f64 * bar_w;
                let y = frame.y(&ya, v);
                let (top, h) = if v >= 0.0 {
                    (y, zero_y - y)
                } else {
                    (zero_y, y - zero_y)
                };
                let _ = writeln!(
                    out,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\">\
                     <title>{}: {}</title></rect>",
                    px(x + 1.0),
                    px(top),
                    px((bar_w - 2.0).max(1.0)),
                    px(h.max(0.0)),
                    colour(si),
                    escape_xml(&format!("{} / {}", cat, self.series[si].0)),
                    escape_xml(&format_number(v))
                );
                if show_values {
                    let ty = if v >= 0.0 { y - 4.0 } else { y + 12.0 };
                    let _ = writeln!(
                        value_labels,
                        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\" \
                         fill=\"#333\" stroke=\"#ffffff\" stroke-width=\"3\" \
                         paint-order=\"stroke\">{}</text>",
                        px(x + bar_w / 2.0),
                        px(ty),
                        escape_xml(&format_number(v))
                    );
                }
            }
            // Category label under the group.
            let cx = gx + group_w / 2.0;
            let label = escape_xml(&truncate(cat, cat_chars));
            if rotate {
                let ty = frame.bottom + 14.0;
                let _ = writeln!(
                    out,
                    "<text x=\"{x}\" y=\"{y}\" transform=\"rotate(-35 {x} {y})\" \
                     text-anchor=\"end\" fill=\"#333\">{label}</text>",
                    x = px(cx),
                    y = px(ty)
                );
            } else {
                let _ = writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{label}</text>",
                    px(cx),
                    px(frame.bottom + 18.0)
                );
            }
        }
        // Zero line when the axis spans negatives.
        if ya.lo < 0.0 {
            svg_line(
                &mut out,
                (frame.left, zero_y),
                (frame.right, zero_y),
                "#333",
            );
        }
        if let Some(r) = reference {
            let y = frame.y(&ya, r);
            let _ = writeln!(
                out,
                "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#c0392b\" \
                 stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n\
                 <text x=\"{}\" y=\"{}\" fill=\"#c0392b\">{}</text>",
                px(frame.left),
                px(frame.right),
                px(frame.right + 4.0),
                px(y + 4.0),
                escape_xml(&ref_label),
                y = px(y)
            );
        }
        out.push_str(&value_labels);
        let legend: Vec<(String, Swatch)> =
            names.iter().map(|n| (n.clone(), Swatch::Block)).collect();
        let x = frame.right + ref_w + 12.0;
        end_with_legend(out, x, frame.top, &legend, max_chars)
    }

    /// Writes [`BarChart::to_svg`] to `path`.
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal XML well-formedness check: one root element, balanced and properly
    /// nested tags, quoted attributes, no raw `<` or stray `&` in text.
    fn check_well_formed(xml: &str) -> Result<(), String> {
        let mut stack: Vec<String> = Vec::new();
        let mut roots = 0;
        let mut rest = xml;
        while let Some(lt) = rest.find('<') {
            check_text(&rest[..lt])?;
            if !stack.is_empty() || rest[..lt].trim().is_empty() {
            } else {
                return Err(format!("text outside the root: {:?}", &rest[..lt]));
            }
            let after = &rest[lt..];
            if let Some(c) = after.strip_prefix("<!--") {
                let end = c.find("-->").ok_or("unterminated comment")?;
                rest = &c[end + 3..];
                continue;
            }
            if let Some(c) = after.strip_prefix("<?") {
                let end = c.find("?>").ok_or("unterminated declaration")?;
                rest = &c[end + 2..];
                continue;
            }
            // Find the end of the tag, skipping quoted attribute values.
            let mut quote = None;
            let mut end = None;
            for (i, ch) in after.char_indices().skip(1) {
                match (quote, ch) {
                    (None, '"') | (None, '\'') => quote = Some(ch),
                    (Some(q), c) if c == q => quote = None,
                    (None, '<') => return Err(format!("'<' inside tag: {after:.40}")),
                    (None, '>') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.ok_or("unterminated tag")?;
            let tag = &after[1..end];
            rest = &after[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or(format!("unmatched </{name}>"))?;
                if open != name.trim() {
                    return Err(format!("<{open}> closed by </{name}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name: String = body.chars().take_while(|c| !c.is_whitespace()).collect();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_alphanumeric() || "-_:".contains(c))
            {
                return Err(format!("bad tag name in <{tag}>"));
            }
            check_attributes(&body[name.len()..])?;
            if stack.is_empty() {
                roots += 1;
            }
            if !self_closing {
                stack.push(name);
            }
        }
        check_text(rest)?;
        if !rest.trim().is_empty() {
            return Err("text after the root".into());
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(())
    }

    fn check_text(text: &str) -> Result<(), String> {
        let mut rest = text;
        while let Some(amp) = rest.find('&') {
            let after = &rest[amp + 1..];
            let semi = after.find(';').ok_or("stray '&'")?;
            let ent = &after[..semi];
            let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                || ent.strip_prefix('#').is_some_and(|n| {
                    n.parse::<u32>().is_ok()
                        || n.strip_prefix('x')
                            .is_some_and(|h| u32::from_str_radix(h, 16).is_ok())
                });
            if !ok {
                return Err(format!("bad entity &{ent};"));
            }
            rest = &after[semi + 1..];
        }
        Ok(())
    }

    fn check_attributes(mut s: &str) -> Result<(), String> {
        let mut seen = Vec::new();
        loop {
            s = s.trim_start();
            if s.is_empty() {
                return Ok(());
            }
            let eq = s.find('=').ok_or(format!("attribute without value: {s}"))?;
            let name = s[..eq].trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("bad attribute name {name:?}"));
            }
            if seen.contains(&name.to_string()) {
                return Err(format!("duplicate attribute {name}"));
            }
            seen.push(name.to_string());
            let v = s[eq + 1..].trim_start();
            let q = v.chars().next().ok_or("missing value")?;
            if q != '"' && q != '\'' {
                return Err(format!("unquoted attribute {name}"));
            }
            let close = v[1..].find(q).ok_or("unterminated value")?;
            let value = &v[1..1 + close];
            if value.contains('<') {
                return Err(format!("'<' in attribute {name}"));
            }
            check_text(value)?;
            s = &v[close + 2..];
        }
    }

    fn assert_clean(svg: &str) {
        if let Err(e) = check_well_formed(svg) {
            panic!("not well-formed: {e}\n{svg}");
        }
        for bad in ["NaN", "inf", "Infinity"] {
            assert!(!svg.contains(bad), "contains {bad}:\n{svg}");
        }
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("width=\"800\" height=\"480\""));
    }

    #[test]
    fn the_checker_rejects_bad_xml() {
        assert!(check_well_formed("<a><b/></a>").is_ok());
        assert!(check_well_formed("<a x=\"1\">t &amp; u</a>").is_ok());
        assert!(check_well_formed("<a><b></a>").is_err());
        assert!(check_well_formed("<a>x & y</a>").is_err());
        assert!(check_well_formed("<a x=1/>").is_err());
        assert!(check_well_formed("<a/><b/>").is_err());
        assert!(check_well_formed("<a x=\"1\" x=\"2\"/>").is_err());
    }

    #[test]
    fn nice_linear_ticks() {
        assert_eq!(
            nice_ticks(0.0, 97.0),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(
            nice_ticks(0.0, 100.0),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(nice_ticks(0.0, 1.0), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(nice_ticks(3.0, 9.0), vec![2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            nice_ticks(-7.0, 12.0),
            vec![-10.0, -5.0, 0.0, 5.0, 10.0, 15.0]
        );
        assert_eq!(
            nice_ticks(950.0, 1210.0),
            vec![900.0, 1000.0, 1100.0, 1200.0, 1300.0]
        );
        assert_eq!(
            nice_ticks(950.0, 1050.0),
            vec![940.0, 960.0, 980.0, 1000.0, 1020.0, 1040.0, 1060.0]
        );
        let a = linear_axis(0.0, 97.0);
        assert_eq!((a.lo, a.hi, a.step), (0.0, 100.0, 20.0));
        // Float noise is rounded away.
        let t = nice_ticks(0.1, 0.7);
        assert_eq!(t, vec![0.0, 0.2, 0.4, 0.6, 0.8]);
        // Degenerate ranges.
        assert_eq!(nice_ticks(5.0, 5.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(nice_ticks(0.0, 0.0), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(nice_ticks(-3.0, -3.0).first(), Some(&-6.0));
        assert_eq!(nice_ticks(f64::NAN, 1.0), nice_ticks(0.0, 1.0));
        // Reversed input is accepted.
        assert_eq!(nice_ticks(97.0, 0.0), nice_ticks(0.0, 97.0));
    }

    #[test]
    fn log_ticks() {
        let a = log_axis(800.0, 2_000_000.0);
        assert_eq!((a.lo, a.hi), (500.0, 2_000_000.0));
        assert_eq!(a.ticks, vec![500.0, 1e3, 1e4, 1e5, 1e6, 2e6]);
        let labels: Vec<String> = a.ticks.iter().map(|&v| a.label(v)).collect();
        assert_eq!(labels, ["500", "1k", "10k", "100k", "1M", "2M"]);
        assert!(a.minor.contains(&2000.0) && a.minor.contains(&900_000.0));
        assert!(!a.minor.contains(&1e4));
        // Ends that crowd a decade are not labelled.
        let b = log_axis(1000.0, 1_100_000.0);
        assert_eq!(b.ticks, vec![1e3, 1e4, 1e5, 1e6, 2e6]);
        // Exact decades.
        assert_eq!(log_axis(1.0, 1000.0).ticks, vec![1.0, 10.0, 100.0, 1000.0]);
        // Within one decade: 1-2-5 ticks.
        assert_eq!(log_axis(150.0, 450.0).ticks, vec![100.0, 200.0, 500.0]);
        assert_eq!(log_axis(1000.0, 1000.0).ticks, vec![500.0, 1000.0, 2000.0]);
        // Many decades are thinned to at most about eight labels.
        let wide = log_axis(1e-3, 1e12);
        assert!(wide.ticks.len() <= 10, "{:?}", wide.ticks);
        assert!(wide.minor.is_empty());
        // Invalid input.
        assert_eq!(log_axis(0.0, -5.0).ticks, vec![1.0, 10.0]);
    }

    #[test]
    fn formats_numbers() {
        for (v, want) in [
            (0.0, "0"),
            (950.0, "950"),
            (1000.0, "1k"),
            (1500.0, "1.5k"),
            (12_345.0, "12.3k"),
            (2_000_000.0, "2M"),
            (2_345_678.0, "2.35M"),
            (3e9, "3G"),
            (0.25, "0.25"),
            (0.0123, "0.0123"),
            (99.96, "100"),
            (999.7, "1k"),
            (-1500.0, "-1.5k"),
            (0.00001, "1e-5"),
            (f64::NAN, "–"),
        ] {
            assert_eq!(format_number(v), want, "{v}");
        }
        assert_eq!(format_tick(0.2, 0.2), "0.2");
        assert_eq!(format_tick(1200.0, 200.0), "1.2k");
        assert_eq!(format_tick(1_050_000.0, 50_000.0), "1.05M");
        assert_eq!(format_tick(40.0, 20.0), "40");
        assert_eq!(format_tick(5.551115123125783e-17, 0.1), "0");
    }

    #[test]
    fn escapes_xml() {
        assert_eq!(
            escape_xml("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
    }

    fn latency_chart() -> LineChart {
        let loads = [1e3, 5e3, 1e4, 5e4, 1e5, 2e5, 5e5, 1e6];
        let curve = |base: f64, knee: f64| -> Vec<(f64, f64)> {
            loads
                .iter()
                .map(|&l| (l, base * (1.0 + (l / knee).powi(2))))
                .collect()
        };
        LineChart::new(
            "Latency vs offered load (1 publisher, 4 subscribers)",
            "offered load (msg/s)",
            "latency (µs)",
        )
        .with_log(true, true)
        .with_series("p50", curve(18.0, 4e5))
        .with_series("p99", curve(45.0, 3e5))
        .with_series("p99.9", curve(120.0, 2e5))
        .with_series("max <all> & \"more\"", curve(900.0, 1.5e5))
    }

    fn base100_chart() -> BarChart {
        BarChart::new("Throughput, base 100 = v0.1.0", "relative throughput")
            .with_categories(vec!["fan-out 1", "fan-out 8", "fan-out 64", "big messages"])
            .with_series("v0.1.0", vec![100.0, 100.0, 100.0, 100.0])
            .with_series("batching", vec![112.0, 131.5, 158.0, 97.2])
            .with_series("batching+zerocopy", vec![118.0, 140.2, 171.9, 124.0])
            .with_reference(100.0)
    }

    #[test]
    fn line_chart_renders_clean_svg() {
        let chart = latency_chart();
        let svg = chart.to_svg();
        assert_clean(&svg);
        for s in [
            "p50",
            "p99",
            "p99.9",
            "max &lt;all&gt; &amp; &quot;more&quot;",
        ] {
            assert!(svg.contains(&format!(">{s}</text>")), "{s}");
        }
        assert!(svg.contains("Latency vs offered load"));
        assert!(svg.contains(">1M</text>") && svg.contains(">10k</text>"));
        assert_eq!(svg.matches("<polyline").count(), 4);

        let linear = LineChart::new("linear", "x", "y")
            .with_series("a", vec![(3.0, 10.0), (1.0, 5.0), (2.0, 97.0)])
            .with_series("b", vec![(0.0, 0.0), (4.0, 50.0)]);
        let svg = linear.to_svg();
        assert_clean(&svg);
        for t in ["0", "20", "40", "60", "80", "100"] {
            assert!(svg.contains(&format!(">{t}</text>")), "{t}");
        }
    }

    #[test]
    fn line_chart_edge_cases() {
        let mut cases = vec![
            LineChart::new("no series", "x", "y"),
            LineChart::new("empty series", "x", "y").with_series("empty", vec![]),
            LineChart::new("one point", "x", "y").with_series("single", vec![(3.0, 7.0)]),
            LineChart::new("equal", "x", "y")
                .with_series("flat", vec![(1.0, 5.0), (2.0, 5.0), (3.0, 5.0)]),
            LineChart::new("same x", "x", "y")
                .with_series("vertical", vec![(2.0, 1.0), (2.0, 9.0)]),
            LineChart::new("zeros", "x", "y").with_series("zero", vec![(0.0, 0.0), (0.0, 0.0)]),
            LineChart::new("non-finite", "x", "y").with_series(
                "nan",
                vec![
                    (f64::NAN, 1.0),
                    (1.0, f64::INFINITY),
                    (2.0, 3.0),
                    (3.0, 4.0),
                ],
            ),
            LineChart::new("log with non-positive", "x", "y")
                .with_log(true, true)
                .with_series(
                    "mixed",
                    vec![(0.0, 5.0), (-1.0, 2.0), (10.0, 0.0), (100.0, 50.0)],
                )
                .with_series("all bad", vec![(0.0, 0.0), (-5.0, -5.0)]),
            LineChart::new("log single", "x", "y")
                .with_log(true, false)
                .with_series("one", vec![(1000.0, 0.0)]),
            LineChart::new("tiny", "x", "y").with_series("tiny", vec![(1e-9, 1e-7), (2e-9, 3e-7)]),
            LineChart::new("huge", "x", "y").with_series("huge", vec![(0.0, 1e15), (1.0, 3e15)]),
        ];
        // Many series with long names: legend is cut, colours and markers cycle.
        let mut many = LineChart::new("many", "x", "y");
        for i in 0..40 {
            many.series.push(Series::new(
                format!("series number {i} with a very long descriptive name"),
                vec![(i as f64, i as f64 * 2.0), (i as f64 + 1.0, 1.0)],
            ));
        }
        cases.push(many);
        for chart in &cases {
            let svg = chart.to_svg();
            assert_clean(&svg);
            for s in &chart.series {
                if chart.series.len() < 20 {
                    assert!(svg.contains(&escape_xml(&s.name)), "{}", s.name);
                }
            }
        }
        let svg = cases[0].to_svg();
        assert!(svg.contains("no data"));
        let svg = cases[7].to_svg();
        // One drawable point (100, 50) in "mixed": a marker, no polyline.
        assert_eq!(svg.matches("<polyline").count(), 0);
        assert!(cases.last().unwrap().to_svg().contains(">+18 more</text>"));
    }

    #[test]
    fn bar_chart_renders_clean_svg() {
        let chart = base100_chart();
        let svg = chart.to_svg();
        assert_clean(&svg);
        for s in [
            "v0.1.0",
            "batching",
            "batching+zerocopy",
            "fan-out 64",
            "big messages",
        ] {
            assert!(svg.contains(s), "{s}");
        }
        assert!(svg.contains("stroke-dasharray"), "reference line");
        assert_eq!(svg.matches("<rect").count(), 2 + 12 + 3); // bg + frame, bars, legend

        let edge = [
            BarChart::new("empty", "y"),
            BarChart::new("no series", "y").with_categories(vec!["a", "b"]),
            BarChart::new("no categories", "y").with_series("s", vec![1.0]),
            BarChart::new("zeros", "y")
                .with_categories(vec!["a"])
                .with_series("s", vec![0.0]),
            BarChart::new("negative & nan", "y")
                .with_categories(vec!["a", "b", "c"])
                .with_series("s", vec![-5.0, f64::NAN, 3.0])
                .with_series("short", vec![1.0])
                .with_reference(f64::INFINITY),
            BarChart::new("long labels", "y")
                .with_categories(
                    (0..12)
                        .map(|i| format!("scenario {i}: many subscribers <slow>"))
                        .collect(),
                )
                .with_series("only", (0..12).map(|i| i as f64 * 10.0).collect())
                .with_reference(50.0),
        ];
        for chart in &edge {
            let svg = chart.to_svg();
            assert_clean(&svg);
            for (name, _) in &chart.series {
                assert!(svg.contains(name.as_str()), "{name}");
            }
        }
        assert!(edge[0].to_svg().contains("no data"));
        assert!(edge[5].to_svg().contains("rotate(-35"));
        assert!(!edge[4].to_svg().contains("stroke-dasharray"));
    }

    /// Writes the example charts to $TICKWIRE_PLOT_DIR (if set) for a visual check.
    #[test]
    fn writes_examples_when_asked() {
        let Some(dir) = std::env::var_os("TICKWIRE_PLOT_DIR") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        latency_chart().save(dir.join("line.svg")).unwrap();
        base100_chart().save(dir.join("bars.svg")).unwrap();
        LineChart::new("Throughput by subscribers", "subscribers", "messages/s")
            .with_series(
                "tcp",
                vec![
                    (1.0, 950_000.0),
                    (2.0, 1_700_000.0),
                    (4.0, 2_900_000.0),
                    (8.0, 3_400_000.0),
                    (16.0, 3_350_000.0),
                ],
            )
            .with_series(
                "uds",
                vec![
                    (1.0, 1_250_000.0),
                    (2.0, 2_300_000.0),
                    (4.0, 3_800_000.0),
                    (8.0, 4_100_000.0),
                    (16.0, 4_050_000.0),
                ],
            )
            .save(dir.join("linear.svg"))
            .unwrap();
        let mut many = LineChart::new("Many series", "x", "y");
        for i in 0..30 {
            many.series.push(Series::new(
                format!("series number {i} with a very long descriptive name"),
                (0..6).map(|x| (x as f64, (x * (i + 1)) as f64)).collect(),
            ));
        }
        many.save(dir.join("many.svg")).unwrap();
        LineChart::new("One point on log axes", "x", "y")
            .with_log(true, true)
            .with_series("single", vec![(1000.0, 5.0), (0.0, 1.0)])
            .save(dir.join("single.svg"))
            .unwrap();
        BarChart::new("Long categories, negative values", "change (%)")
            .with_categories(
                (0..12)
                    .map(|i| format!("scenario {i}: many subscribers"))
                    .collect(),
            )
            .with_series("delta", (0..12).map(|i| i as f64 * 7.0 - 30.0).collect())
            .with_reference(0.0)
            .save(dir.join("bars_long.svg"))
            .unwrap();
    }
}
