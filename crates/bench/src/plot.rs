//! SVG charts of a run: rate (bandwidth or operations) over time, one coloured step line per
//! phase, the mean of each phase in the legend. Plain SVG 1.1, no scripts, so any browser or
//! document tool shows it.

use crate::team::Sample;
use std::collections::BTreeMap;
use std::fmt::Write;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 56.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One phase's rate steps: (start s, end s, rate).
type Steps = Vec<(f64, f64, f64)>;

/// Splits samples into per-phase rate steps, in time order; phases that moved nothing are
/// left out.
pub fn steps(samples: &[Sample], scale: f64) -> Vec<(String, Steps)> {
    let mut out: Vec<(String, Steps)> = Vec::new();
    let mut prev: Option<&Sample> = None;
    for s in samples {
        match prev {
            Some(p) if p.phase == s.phase => {
                let dt = s.t - p.t;
                if dt > 0.0 {
                    let rate = s.done.saturating_sub(p.done) as f64 / scale / dt;
                    if let Some(last) = out.last_mut().filter(|l| l.0 == s.phase) {
                        last.1.push((p.t, s.t, rate));
                    } else {
                        out.push((s.phase.clone(), vec![(p.t, s.t, rate)]));
                    }
                }
            }
            _ => {}
        }
        prev = Some(s);
    }
    out.retain(|(_, st)| st.iter().any(|&(_, _, r)| r > 0.0));
    out
}

/// The kind of a phase label: its words without the iteration number (`write 1` → `write`).
fn kind(label: &str) -> String {
    label
        .split_whitespace()
        .filter(|w| w.parse::<u64>().is_err())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A round axis step giving about `n` ticks up to `max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Draws `samples` (units divided by `scale`, shown as `unit`) as an SVG document.
pub fn svg(title: &str, unit: &str, scale: f64, samples: &[Sample]) -> String {
    let phases = steps(samples, scale);
    let t_max = samples.iter().map(|s| s.t).fold(0.0, f64::max).max(1e-3);
    let r_max = phases
        .iter()
        .flat_map(|(_, st)| st.iter().map(|s| s.2))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |t: f64| LEFT + t / t_max * pw;
    let y = |r: f64| TOP + ph - r / r_max * ph;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        escape(title)
    );
    let ys = tick_step(r_max, 5.0);
    let mut v = 0.0;
    while v <= r_max {
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y(v) + 4.0,
            fmt_num(v),
            y = y(v)
        );
        v += ys;
    }
    let xs = tick_step(t_max, 8.0);
    let mut t = 0.0;
    while t <= t_max {
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            fmt_num(t),
            x = x(t)
        );
        t += xs;
    }
    let _ = writeln!(
        o,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 14.0
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        escape(unit)
    );
    let mut colour_of: BTreeMap<String, &str> = BTreeMap::new();
    let mut legend: Vec<(String, &str, f64, f64)> = Vec::new();
    for (label, st) in &phases {
        let k = kind(label);
        let n = colour_of.len();
        let c = *colour_of.entry(k).or_insert(COLOURS[n % COLOURS.len()]);
        let mut pts = String::new();
        for &(a, b, r) in st {
            let _ = write!(pts, "{:.1},{:.1} {:.1},{:.1} ", x(a), y(r), x(b), y(r));
        }
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"><title>{}</title></polyline>"#,
            pts.trim_end(),
            escape(label)
        );
        let span = st.last().map_or(0.0, |l| l.1) - st.first().map_or(0.0, |f| f.0);
        let moved: f64 = st.iter().map(|&(a, b, r)| r * (b - a)).sum();
        legend.push((label.clone(), c, moved / span.max(1e-9), span));
    }
    for (i, (label, c, mean, span)) in legend.iter().enumerate().take(24) {
        let ly = TOP + 8.0 + 16.0 * i as f64;
        let lx = WIDTH - RIGHT + 14.0;
        let _ = writeln!(
            o,
            r#"<rect x="{lx}" y="{}" width="12" height="4" fill="{c}"/><text x="{}" y="{ly:.1}">{}: {} {}, {:.2} s</text>"#,
            ly - 6.0,
            lx + 18.0,
            escape(label),
            fmt_num(*mean),
            escape(unit),
            span
        );
    }
    o.push_str("</svg>\n");
    o
}

fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, phase: &str, done: u64) -> Sample {
        Sample {
            t,
            phase: phase.into(),
            done,
        }
    }

    #[test]
    fn steps_are_rates_per_phase() {
        let samples = vec![
            s(0.0, "write 0", 0),
            s(1.0, "write 0", 100),
            s(2.0, "write 0", 300),
            s(2.0, "remove 0", 0),
            s(2.1, "remove 0", 0),
            s(2.5, "read 0", 0),
            s(3.0, "read 0", 50),
        ];
        let st = steps(&samples, 1.0);
        assert_eq!(st.len(), 2, "the remove phase moved nothing");
        assert_eq!(st[0].1, vec![(0.0, 1.0, 100.0), (1.0, 2.0, 200.0)]);
        assert_eq!(st[1].0, "read 0");
        assert!((st[1].1[0].2 - 100.0).abs() < 1e-9);
        let doc = svg("t <1>", "MiB/s", 1.0, &samples);
        assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
        assert!(doc.contains("t &lt;1&gt;"));
        assert_eq!(doc.matches("<polyline").count(), 2);
        assert!(
            doc.contains("write 0: 150 MiB/s"),
            "mean of the write phase"
        );
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1000.0, 5.0), 200.0);
        assert_eq!(tick_step(7.0, 8.0), 1.0);
        assert_eq!(kind("write 12"), "write");
        assert_eq!(kind("File creation"), "File creation");
    }
}
