//! The comparison plot, written by hand as SVG (deterministic text, no fonts embedded).
//!
//! Left: predicted vs measured device time per point (log-log, the diagonal and a ±5% band);
//! right: time vs context per request (total KV read / batch, log scale), one colour per batch
//! size, measured as dots and predicted as crosses joined by lines.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::compare::PointCmp;

const W: f64 = 1100.0;
const H: f64 = 500.0;
const PANEL_W: f64 = 430.0;
const PANEL_H: f64 = 360.0;
const TOP: f64 = 70.0;
const LEFT1: f64 = 80.0;
const LEFT2: f64 = 620.0;

const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22",
];

/// A log-scale axis over `[lo, hi]` mapped to `[a, b]` pixels.
struct LogAxis {
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
}

impl LogAxis {
    fn new(lo: f64, hi: f64, a: f64, b: f64) -> LogAxis {
        let (lo, hi) = (lo.max(1e-9), hi.max(lo.max(1e-9) * 1.0001));
        // Pad by 10% of a decade on each side.
        LogAxis {
            lo: lo / 10f64.powf(0.1),
            hi: hi * 10f64.powf(0.1),
            a,
            b,
        }
    }

    fn px(&self, v: f64) -> f64 {
        let t = (v.max(self.lo).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln());
        self.a + t * (self.b - self.a)
    }

    /// Ticks at 1, 2 and 5 times powers of ten inside the range (only powers of ten when the
    /// range spans more than three decades).
    fn ticks(&self) -> Vec<f64> {
        let mut out = Vec::new();
        let decades = (self.hi / self.lo).log10();
        let mults: &[f64] = if decades > 3.0 { &[1.0] } else { &[1.0, 2.0, 5.0] };
        let mut p = 10f64.powf(self.lo.log10().floor());
        while p <= self.hi {
            for m in mults {
                let v = p * m;
                if v >= self.lo && v <= self.hi {
                    out.push(v);
                }
            }
            p *= 10.0;
        }
        out
    }
}

fn label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn frame(out: &mut String, x: &LogAxis, y: &LogAxis, left: f64, xlabel: &str, ylabel: &str, title: &str) {
    let (x0, y0) = (left, TOP);
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#333"/>"##
    );
    for t in x.ticks() {
        let px = x.px(t);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{y0}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            y0 + PANEL_H,
            y0 + PANEL_H + 15.0,
            label(t)
        );
    }
    for t in y.ticks() {
        let py = y.px(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            x0 + PANEL_W,
            x0 - 5.0,
            py + 4.0,
            label(t)
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle">{}</text>"##,
        x0 + PANEL_W / 2.0,
        y0 + PANEL_H + 34.0,
        esc(xlabel)
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="13" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"##,
        x0 - 50.0,
        y0 + PANEL_H / 2.0,
        x0 - 50.0,
        y0 + PANEL_H / 2.0,
        esc(ylabel)
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle" font-weight="bold">{}</text>"##,
        x0 + PANEL_W / 2.0,
        y0 - 10.0,
        esc(title)
    );
}

/// The SVG document for `points`, titled `title`.
pub fn plot(points: &[PointCmp], title: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">"##
    );
    let _ = writeln!(out, r##"<rect width="{W}" height="{H}" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="28" font-size="16" text-anchor="middle">{}</text>"##,
        W / 2.0,
        esc(title)
    );
    if points.is_empty() {
        let _ = writeln!(out, r##"<text x="40" y="100" font-size="14">no points</text></svg>"##);
        return out;
    }
    let times: Vec<f64> = points.iter().flat_map(|p| [p.predicted_us, p.measured_us]).collect();
    let (tmin, tmax) = (
        times.iter().copied().fold(f64::INFINITY, f64::min),
        times.iter().copied().fold(0.0, f64::max),
    );
    predicted_vs_measured(&mut out, points, tmin, tmax);
    across_batch_and_context(&mut out, points, tmin, tmax);
    out.push_str("</svg>\n");
    out
}

/// Left panel: predicted vs measured, one colour per label, over `[tmin, tmax]` µs.
fn predicted_vs_measured(out: &mut String, points: &[PointCmp], tmin: f64, tmax: f64) {
    let labels: Vec<String> = {
        let mut l: Vec<String> = points.iter().map(|p| p.label.clone()).collect();
        l.sort();
        l.dedup();
        l
    };
    let colour_of_label = |l: &str| PALETTE[labels.iter().position(|x| x == l).unwrap_or(0) % PALETTE.len()];
    let x = LogAxis::new(tmin, tmax, LEFT1, LEFT1 + PANEL_W);
    let y = LogAxis::new(tmin, tmax, TOP + PANEL_H, TOP);
    frame(
        out,
        &x,
        &y,
        LEFT1,
        "measured device time per point (µs)",
        "predicted (µs)",
        "predicted vs measured",
    );
    for (f, dash) in [
        (1.0, ""),
        (1.05, r##" stroke-dasharray="4 3""##),
        (0.95, r##" stroke-dasharray="4 3""##),
    ] {
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888"{dash}/>"##,
            x.px(x.lo),
            y.px(x.lo * f),
            x.px(x.hi),
            y.px(x.hi * f)
        );
    }
    for p in points {
        let (cx, cy) = (x.px(p.measured_us), y.px(p.predicted_us));
        let c = colour_of_label(&p.label);
        let shape = if p.decode_only {
            format!(r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="3.5" fill="{c}" fill-opacity="0.8"/>"##)
        } else {
            format!(
                r##"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="none" stroke="{c}"/>"##,
                cx - 3.5,
                cy - 3.5
            )
        };
        let _ = writeln!(
            out,
            "{shape}<!-- {} point {} {:+.2}% -->",
            esc(&p.label),
            p.point,
            p.error_pct
        );
    }
    for (i, l) in labels.iter().enumerate() {
        let ly = TOP + 14.0 + 16.0 * i as f64;
        let _ = writeln!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"##,
            LEFT1 + 12.0,
            ly - 4.0,
            colour_of_label(l),
            LEFT1 + 20.0,
            ly,
            esc(l)
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#555">dots: decode points, squares: others; dashed: ±5%</text>"##,
        LEFT1 + 8.0,
        TOP + PANEL_H - 8.0
    );
}

/// Right panel: time vs context per request, one colour per batch.
fn across_batch_and_context(out: &mut String, points: &[PointCmp], tmin: f64, tmax: f64) {
    let ctx = |p: &PointCmp| (p.ctx_tokens as f64 / p.batch.max(1) as f64).max(1.0);
    let cs: Vec<f64> = points.iter().map(ctx).collect();
    let x2 = LogAxis::new(
        cs.iter().copied().fold(f64::INFINITY, f64::min),
        cs.iter().copied().fold(0.0, f64::max),
        LEFT2,
        LEFT2 + PANEL_W,
    );
    let y2 = LogAxis::new(tmin, tmax, TOP + PANEL_H, TOP);
    frame(
        out,
        &x2,
        &y2,
        LEFT2,
        "context per request (tokens)",
        "device time per point (µs)",
        "across batch and context",
    );
    let mut batches: BTreeMap<u64, Vec<&PointCmp>> = BTreeMap::new();
    for p in points {
        batches.entry(p.batch).or_default().push(p);
    }
    for (bi, (batch, ps)) in batches.iter().enumerate() {
        let c = PALETTE[bi % PALETTE.len()];
        // One predicted line per (label, batch), in context order.
        let mut by_label: BTreeMap<&str, Vec<&PointCmp>> = BTreeMap::new();
        for p in ps {
            by_label.entry(p.label.as_str()).or_default().push(p);
        }
        for line in by_label.values_mut() {
            line.sort_by(|a, b| ctx(a).total_cmp(&ctx(b)).then(a.point.cmp(&b.point)));
            let pts: Vec<String> = line
                .iter()
                .map(|p| format!("{:.1},{:.1}", x2.px(ctx(p)), y2.px(p.predicted_us)))
                .collect();
            let _ = writeln!(
                out,
                r##"<polyline points="{}" fill="none" stroke="{c}" stroke-width="1" stroke-opacity="0.6"/>"##,
                pts.join(" ")
            );
        }
        for p in ps {
            let (cx, py, my) = (x2.px(ctx(p)), y2.px(p.predicted_us), y2.px(p.measured_us));
            let _ = writeln!(
                out,
                r##"<circle cx="{cx:.1}" cy="{my:.1}" r="3.5" fill="{c}" fill-opacity="0.8"/><path d="M{:.1} {:.1} l7 7 m0 -7 l-7 7" stroke="{c}"/>"##,
                cx - 3.5,
                py - 3.5
            );
        }
        let ly = TOP + 14.0 + 16.0 * bi as f64;
        let _ = writeln!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{c}"/><text x="{:.1}" y="{:.1}" font-size="12">batch {batch}</text>"##,
            LEFT2 + 12.0,
            ly - 4.0,
            LEFT2 + 20.0,
            ly
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#555">dots: measured, crosses and lines: predicted</text>"##,
        LEFT2 + 8.0,
        TOP + PANEL_H - 8.0
    );
}
