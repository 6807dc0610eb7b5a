//! Line charts as inline SVG: axes from zero with round ticks and units, one coloured
//! series per document, markers with hover titles, shaded windows and labelled points.

use std::fmt::Write;

use super::fmt::{esc, grouped};

/// Series colours, by document (blue and red first, for the common two-drive comparison).
pub const PALETTE: [&str; 10] = [
    "#1f6fb4", "#d62728", "#2a9d3a", "#f28e00", "#8a55c7", "#8c564b", "#d6489c", "#139eb0",
    "#6f6f6f", "#a5a51b",
];

/// The colour of document `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

const W: f64 = 600.0;
/// Height of the plot area; the chart grows with its legend and window rows.
const PLOT_H: f64 = 190.0;
const LEFT: f64 = 68.0;
const RIGHT: f64 = 20.0;

/// What an axis measures; values are given raw (IOPS, nanoseconds, seconds, bytes) and
/// shown in the unit that suits the largest one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Quantity {
    Iops,
    /// Nanoseconds, shown in ns, µs, ms or s.
    Latency,
    /// Seconds, shown in s, min or h.
    Seconds,
    /// Bytes, shown in decimal units (GB, TB).
    Bytes,
    /// A plain count (round numbers).
    Count,
    /// A rate of operations with its own unit (`TPS`, `ops/s`), ticks like IOPS.
    Rate(&'static str),
    /// Bytes per second, shown in decimal units (MB/s, GB/s).
    BytesPerSecond,
}

impl Quantity {
    /// Divisor and unit name for values up to `max`.
    fn scale(self, max: f64) -> (f64, &'static str) {
        match self {
            Quantity::Iops => (1.0, "IOPS"),
            Quantity::Rate(unit) => (1.0, unit),
            Quantity::Count => (1.0, ""),
            Quantity::Latency => {
                if max < 1e3 {
                    (1.0, "ns")
                } else if max < 1e6 {
                    (1e3, "µs")
                } else if max < 1e9 {
                    (1e6, "ms")
                } else {
                    (1e9, "s")
                }
            }
            Quantity::Seconds => {
                if max <= 1200.0 {
                    (1.0, "s")
                } else if max <= 3.0 * 3600.0 {
                    (60.0, "min")
                } else {
                    (3600.0, "h")
                }
            }
            Quantity::Bytes => {
                for (m, u) in [
                    (1e15, "PB"),
                    (1e12, "TB"),
                    (1e9, "GB"),
                    (1e6, "MB"),
                    (1e3, "kB"),
                ] {
                    if max >= m {
                        return (m, u);
                    }
                }
                (1.0, "B")
            }
            Quantity::BytesPerSecond => {
                for (m, u) in [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")] {
                    if max >= m {
                        return (m, u);
                    }
                }
                (1.0, "B/s")
            }
        }
    }
}

/// A linear axis from zero.
#[derive(Debug, Clone)]
pub struct Axis {
    pub name: String,
    pub q: Quantity,
}

impl Axis {
    pub fn new(name: &str, q: Quantity) -> Axis {
        Axis {
            name: name.to_string(),
            q,
        }
    }
}

#[derive(Debug, Clone)]
pub enum XAxis {
    Linear(Axis),
    /// Named categories; a point's x is the index of its category. Lines break before
    /// the categories listed in `breaks` (a new group), where a faint rule is drawn.
    Category {
        name: String,
        labels: Vec<String>,
        breaks: Vec<usize>,
    },
}

/// One data point: raw x and y, the hover text, and an optional label drawn beside it.
#[derive(Debug, Clone)]
pub struct Pt {
    pub x: f64,
    pub y: f64,
    pub tip: String,
    pub label: Option<String>,
}

/// One line: a document's figures. `doc` picks the colour and the CSS class `s{doc}`.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub doc: usize,
    pub points: Vec<Pt>,
}

/// A shaded x range (the steady window), in raw x units.
#[derive(Debug, Clone)]
pub struct Band {
    pub x0: f64,
    pub x1: f64,
    pub doc: usize,
    pub label: String,
    /// Dashed outline: a window that did not meet its rule.
    pub dashed: bool,
}

/// A ringed point with a label (the burst round).
#[derive(Debug, Clone)]
pub struct Mark {
    pub x: f64,
    pub y: f64,
    pub doc: usize,
    pub label: String,
}

#[derive(Debug, Clone)]
pub struct Chart {
    pub id: String,
    pub title: String,
    pub x: XAxis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    pub marks: Vec<Mark>,
}

/// A round top and step for an axis from 0 to `max`, about `target` steps.
pub fn nice_ticks(max: f64, target: usize) -> (f64, f64) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, 0.2);
    }
    let raw = max / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 2.5 {
        2.5
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    let step = m * mag;
    let top = (max / step - 1e-9).ceil().max(1.0) * step;
    (top, step)
}

/// Decimal places that show every multiple of `step` exactly.
fn decimals(step: f64) -> usize {
    (0..6)
        .find(|&d| {
            let s = step * 10f64.powi(d as i32);
            (s - s.round()).abs() < 1e-6 * s.max(1.0)
        })
        .unwrap_or(6)
}

/// A tick's text, `v` already divided by the axis unit.
fn tick_text(q: Quantity, v: f64, top: f64, step: f64) -> String {
    if matches!(q, Quantity::Iops | Quantity::Rate(_)) && top >= 1e4 {
        let (d, suffix) = if top >= 2e6 { (1e6, "M") } else { (1e3, "k") };
        if v == 0.0 {
            return "0".to_string();
        }
        return format!("{}{suffix}", grouped(v / d, decimals(step / d)));
    }
    grouped(v, decimals(step))
}

struct Ticks {
    div: f64,
    unit: &'static str,
    top: f64,
    step: f64,
}

impl Ticks {
    fn new(q: Quantity, raw_max: f64, target: usize, headroom: f64) -> Ticks {
        let raw_max = if raw_max.is_finite() { raw_max } else { 0.0 };
        let (div, unit) = q.scale(raw_max);
        let (top, step) = nice_ticks(raw_max / div * headroom, target);
        Ticks {
            div,
            unit,
            top,
            step,
        }
    }
    fn values(&self) -> Vec<f64> {
        let n = (self.top / self.step).round() as usize;
        (0..=n).map(|i| i as f64 * self.step).collect()
    }
    /// Raw value as a share of the axis.
    fn frac(&self, raw: f64) -> f64 {
        raw / self.div / self.top
    }
    fn title(&self, name: &str) -> String {
        if self.unit.is_empty() {
            name.to_string()
        } else if name.is_empty() {
            self.unit.to_string()
        } else {
            format!("{name} ({})", self.unit)
        }
    }
}

/// Width of a text in px, roughly (DejaVu Sans averages 0.6 em).
fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// Places labels where they overlap neither each other nor the markers.
struct Placer {
    boxes: Vec<[f64; 4]>,
    area: [f64; 4],
}

impl Placer {
    fn free(&self, b: [f64; 4]) -> bool {
        let a = self.area;
        if b[0] < a[0] || b[1] < a[1] || b[2] > a[2] || b[3] > a[3] {
            return false;
        }
        !self
            .boxes
            .iter()
            .any(|o| b[0] < o[2] && o[0] < b[2] && b[1] < o[3] && o[1] < b[3])
    }
    /// Marks a line segment as taken (sampled every few pixels).
    fn segment(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64)) {
        let n = ((x1 - x0).hypot(y1 - y0) / 4.0).ceil().max(1.0) as usize;
        for i in 0..=n {
            let t = i as f64 / n as f64;
            let (x, y) = (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t);
            self.boxes.push([x - 1.5, y - 1.5, x + 1.5, y + 1.5]);
        }
    }

    /// The box of `text` at baseline (tx, ty) with `anchor`.
    fn text_box(tx: f64, ty: f64, anchor: &str, text: &str, size: f64) -> [f64; 4] {
        let w = text_width(text, size);
        let x0 = match anchor {
            "start" => tx,
            "end" => tx - w,
            _ => tx - w / 2.0,
        };
        [x0 - 1.0, ty - size * 0.8, x0 + w + 1.0, ty + size * 0.25]
    }

    /// The first free spot of `spots` (baseline and anchor); with `force`, the first spot
    /// when none is free.
    fn first_free<'s>(
        &mut self,
        spots: &[(f64, f64, &'s str)],
        text: &str,
        size: f64,
        force: bool,
    ) -> Option<(f64, f64, &'s str)> {
        let pick = spots
            .iter()
            .find(|&&(x, y, a)| self.free(Self::text_box(x, y, a, text, size)))
            .or(if force { spots.first() } else { None })
            .copied()?;
        self.boxes
            .push(Self::text_box(pick.0, pick.1, pick.2, text, size));
        Some(pick)
    }

    /// Finds a place for `text` near (px, py); returns the baseline point and anchor.
    fn place(&mut self, px: f64, py: f64, text: &str, size: f64) -> Option<(f64, f64, &str)> {
        const CANDIDATES: [(f64, f64, &str); 8] = [
            (7.0, -6.0, "start"),
            (-7.0, -6.0, "end"),
            (7.0, 13.0, "start"),
            (-7.0, 13.0, "end"),
            (0.0, -10.0, "middle"),
            (0.0, 18.0, "middle"),
            (10.0, 4.0, "start"),
            (-10.0, 4.0, "end"),
        ];
        let spots: Vec<(f64, f64, &str)> = CANDIDATES
            .iter()
            .map(|&(dx, dy, a)| (px + dx, py + dy, a))
            .collect();
        self.first_free(&spots, text, size, false)
    }
}

/// A point both of whose coordinates can be drawn.
fn finite(p: &&Pt) -> bool {
    p.x.is_finite() && p.y.is_finite()
}

/// Where a chart draws: the plot area, the scales and the rows above the plot.
struct Frame {
    /// Height of the whole chart.
    h: f64,
    /// Top of the strip above the plot that holds the windows' dimension lines.
    strip: f64,
    /// Category labels are turned to fit.
    rotate: bool,
    px0: f64,
    px1: f64,
    py0: f64,
    py1: f64,
    pw: f64,
    ph: f64,
    yt: Ticks,
    /// The x ticks of a linear axis (none for categories).
    xt: Option<Ticks>,
    /// The number of categories (1 for a linear axis).
    ncat: f64,
}

impl Frame {
    /// The x pixel of raw value `v`.
    fn sx(&self, v: f64) -> f64 {
        match &self.xt {
            Some(t) => self.px0 + t.frac(v).clamp(0.0, 1.0) * self.pw,
            None => self.px0 + (v + 0.5) / self.ncat * self.pw,
        }
    }

    /// The y pixel of raw value `v`.
    fn sy(&self, v: f64) -> f64 {
        self.py1 - self.yt.frac(v).clamp(0.0, 1.0) * self.ph
    }
}

/// Font size of the legend.
const LEGEND_SIZE: f64 = 12.0;

impl Chart {
    fn point_count(&self) -> usize {
        self.series.iter().map(|s| s.points.len()).sum()
    }

    /// The chart as an `<svg>` element (no namespace attribute: it is inline in HTML).
    pub fn svg(&self) -> String {
        let mut o = String::new();
        let (legend, legend_rows) = self.legend_layout();
        let fr = self.frame(legend_rows);
        self.write_head(&mut o, &fr);

        let mut placer = Placer {
            boxes: Vec::new(),
            area: [fr.px0 + 1.0, fr.py0 + 1.0, fr.px1 - 1.0, fr.py1 - 1.0],
        };

        self.write_x_axis(&mut o, &fr);
        self.write_bands(&mut o, &fr);

        // Axes.
        let (px0, px1, py0, py1) = (fr.px0, fr.px1, fr.py0, fr.py1);
        let _ = write!(
            o,
            r##"<path d="M{px0:.1} {py0:.1}V{py1:.1}H{px1:.1}" fill="none" stroke="#9aa3af"/>"##
        );

        if self.point_count() == 0 {
            let _ = write!(
                o,
                r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#6b7280" text-anchor="middle">no data</text>"##,
                px0 + fr.pw / 2.0,
                py0 + fr.ph / 2.0
            );
        }

        // Lines, then markers on top.
        self.write_lines(&mut o, &fr, &mut placer);
        self.write_markers(&mut o, &fr, &mut placer);
        // Ringed marks, then point labels, where there is room.
        self.write_labels(&mut o, &fr, &mut placer);
        write_legend(&mut o, legend);
        o.push_str("</svg>");
        o
    }

    /// Legend entries (x, row, series), laid out left to right under the title, and the
    /// number of rows.
    fn legend_layout(&self) -> (Vec<(f64, usize, &Series)>, usize) {
        let mut legend: Vec<(f64, usize, &Series)> = Vec::new();
        let mut lx = LEFT;
        let mut row = 0;
        for s in &self.series {
            let w = 24.0 + text_width(&s.name, LEGEND_SIZE) + 18.0;
            if lx + w > W - RIGHT && lx > LEFT {
                row += 1;
                lx = LEFT;
            }
            legend.push((lx, row, s));
            lx += w;
        }
        let legend_rows = if legend.is_empty() { 0 } else { row + 1 };
        (legend, legend_rows)
    }

    /// The geometry and scales for a chart with `legend_rows` rows of legend.
    fn frame(&self, legend_rows: usize) -> Frame {
        // A strip above the plot for the windows' dimension lines, one row each.
        let strip = 30.0 + legend_rows as f64 * 18.0 + 4.0;
        let top = strip + self.bands.len() as f64 * 15.0 + 6.0;
        let categories = match &self.x {
            XAxis::Category { labels, .. } => Some(labels),
            XAxis::Linear(_) => None,
        };
        let rotate = categories.is_some_and(|l| l.len() > 8);
        let bottom = if rotate { 70.0 } else { 46.0 };
        let h = (top + PLOT_H + bottom).round();
        let (px0, px1, py0, py1) = (LEFT, W - RIGHT, top, h - bottom);
        let (pw, ph) = (px1 - px0, py1 - py0);

        let ymax = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(finite).map(|p| p.y))
            .fold(0.0, f64::max);
        let yt = Ticks::new(self.y.q, ymax, 5, 1.04);

        let xt = match &self.x {
            XAxis::Linear(a) => {
                let band_max = self.bands.iter().map(|b| b.x1).fold(0.0, f64::max);
                let xmax = self
                    .series
                    .iter()
                    .flat_map(|s| s.points.iter().filter(finite).map(|p| p.x))
                    .fold(band_max, f64::max);
                let headroom = if a.q == Quantity::Iops { 1.04 } else { 1.0 };
                Some(Ticks::new(a.q, xmax, 7, headroom))
            }
            XAxis::Category { .. } => None,
        };
        let ncat = categories.map_or(1, |l| l.len().max(1)) as f64;
        Frame {
            h,
            strip,
            rotate,
            px0,
            px1,
            py0,
            py1,
            pw,
            ph,
            yt,
            xt,
            ncat,
        }
    }

    /// The `<svg>` start, background, title, grid with y ticks and the y axis title.
    fn write_head(&self, o: &mut String, fr: &Frame) {
        let (h, px0, px1, py0, py1, ph) = (fr.h, fr.px0, fr.px1, fr.py0, fr.py1, fr.ph);
        let yt = &fr.yt;
        let _ = write!(
            o,
            r#"<svg class="chart" id="{}" viewBox="0 0 {W} {h}" role="img" aria-label="{}">"#,
            esc(&self.id),
            esc(&self.title)
        );
        let _ = write!(
            o,
            r##"<rect class="bg" x="0" y="0" width="{W}" height="{h}" fill="#fff"/>"##
        );
        let _ = write!(
            o,
            r##"<text class="title" x="12" y="20" font-size="14" font-weight="600" fill="#1d2430">{}</text>"##,
            esc(&self.title)
        );

        // Grid and y ticks.
        for v in yt.values() {
            let y = py1 - v / yt.top * ph;
            let _ = write!(
                o,
                r##"<line x1="{px0:.1}" x2="{px1:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e6e9ef"/><text x="{:.1}" y="{:.1}" font-size="11" fill="#4a5363" text-anchor="end">{}</text>"##,
                px0 - 7.0,
                y + 4.0,
                esc(&tick_text(self.y.q, v, yt.top, yt.step))
            );
        }
        let _ = write!(
            o,
            r##"<text transform="translate(16,{:.1}) rotate(-90)" font-size="12" fill="#333b48" text-anchor="middle">{}</text>"##,
            py0 + ph / 2.0,
            esc(&yt.title(&self.y.name))
        );
    }

    /// The x ticks, their labels and the x axis title.
    fn write_x_axis(&self, o: &mut String, fr: &Frame) {
        let (h, px0, py0, py1, pw) = (fr.h, fr.px0, fr.py0, fr.py1, fr.pw);
        match (&self.x, &fr.xt) {
            (XAxis::Linear(a), Some(t)) => {
                for v in t.values() {
                    let x = px0 + v / t.top * pw;
                    let _ = write!(
                        o,
                        r##"<line x1="{x:.1}" x2="{x:.1}" y1="{py0:.1}" y2="{py1:.1}" stroke="#f0f2f6"/><line x1="{x:.1}" x2="{x:.1}" y1="{py1:.1}" y2="{:.1}" stroke="#9aa3af"/><text x="{x:.1}" y="{:.1}" font-size="11" fill="#4a5363" text-anchor="middle">{}</text>"##,
                        py1 + 4.0,
                        py1 + 17.0,
                        esc(&tick_text(a.q, v, t.top, t.step))
                    );
                }
                let _ = write!(
                    o,
                    r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#333b48" text-anchor="middle">{}</text>"##,
                    px0 + pw / 2.0,
                    h - 8.0,
                    esc(&t.title(&a.name))
                );
            }
            (
                XAxis::Category {
                    name,
                    labels,
                    breaks,
                },
                _,
            ) => {
                for &b in breaks {
                    let x = fr.sx(b as f64 - 0.5);
                    let _ = write!(
                        o,
                        r##"<line x1="{x:.1}" x2="{x:.1}" y1="{py0:.1}" y2="{py1:.1}" stroke="#dde1e8" stroke-dasharray="3 3"/>"##
                    );
                }
                for (i, l) in labels.iter().enumerate() {
                    let x = fr.sx(i as f64);
                    let _ = write!(
                        o,
                        r##"<line x1="{x:.1}" x2="{x:.1}" y1="{py1:.1}" y2="{:.1}" stroke="#9aa3af"/>"##,
                        py1 + 4.0
                    );
                    if fr.rotate {
                        let _ = write!(
                            o,
                            r##"<text transform="translate({:.1},{:.1}) rotate(-40)" font-size="11" fill="#4a5363" text-anchor="end">{}</text>"##,
                            x + 3.0,
                            py1 + 14.0,
                            esc(l)
                        );
                    } else {
                        let _ = write!(
                            o,
                            r##"<text x="{x:.1}" y="{:.1}" font-size="11" fill="#4a5363" text-anchor="middle">{}</text>"##,
                            py1 + 17.0,
                            esc(l)
                        );
                    }
                }
                let _ = write!(
                    o,
                    r##"<text x="{:.1}" y="{:.1}" font-size="12" fill="#333b48" text-anchor="middle">{}</text>"##,
                    px0 + pw / 2.0,
                    h - 8.0,
                    esc(name)
                );
            }
            (XAxis::Linear(_), None) => {}
        }
    }

    /// Shaded windows, each with a dimension line in the strip above the plot:
    /// |--- label ---|, the label outside when the window is too narrow for it.
    fn write_bands(&self, o: &mut String, fr: &Frame) {
        let (py0, ph) = (fr.py0, fr.ph);
        for (k, b) in self.bands.iter().enumerate() {
            let (x0, x1) = (fr.sx(b.x0), fr.sx(b.x1));
            let c = color(b.doc);
            let y = fr.strip + 8.0 + 15.0 * k as f64;
            let dash = if b.dashed {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let _ = write!(
                o,
                r#"<rect class="band s{}" x="{x0:.1}" y="{py0:.1}" width="{:.1}" height="{ph:.1}" fill="{c}" fill-opacity="{}"><title>{}</title></rect>"#,
                b.doc,
                (x1 - x0).max(1.0),
                if b.dashed { "0.04" } else { "0.08" },
                esc(&b.label)
            );
            let w = text_width(&b.label, 10.5);
            let line = |o: &mut String, a: f64, z: f64| {
                if z > a {
                    let _ = write!(
                        o,
                        r#"<line x1="{a:.1}" x2="{z:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{c}" stroke-width="1.5"{dash}/>"#
                    );
                }
            };
            let (tx, anchor) = if x1 - x0 >= w + 24.0 {
                let mid = (x0 + x1) / 2.0;
                line(o, x0, mid - w / 2.0 - 5.0);
                line(o, mid + w / 2.0 + 5.0, x1);
                (mid, "middle")
            } else {
                line(o, x0, x1);
                if x0 - 6.0 - w >= 4.0 {
                    (x0 - 6.0, "end")
                } else {
                    (x1 + 6.0, "start")
                }
            };
            let _ = write!(
                o,
                r#"<path d="M{x0:.1} {:.1}V{:.1}M{x1:.1} {:.1}V{:.1}" stroke="{c}" stroke-width="1.5"/><text class="band-label" x="{tx:.1}" y="{:.1}" font-size="10.5" fill="{c}" text-anchor="{anchor}">{}</text>"#,
                y - 4.0,
                y + 4.0,
                y - 4.0,
                y + 4.0,
                y + 3.5,
                esc(&b.label)
            );
        }
    }

    /// One line per series, broken between category groups; its segments are taken from
    /// the label placer.
    fn write_lines(&self, o: &mut String, fr: &Frame, placer: &mut Placer) {
        for s in &self.series {
            let c = color(s.doc);
            let mut d = String::new();
            let mut prev: Option<(f64, (f64, f64))> = None;
            for p in s.points.iter().filter(finite) {
                let here = (fr.sx(p.x), fr.sy(p.y));
                let joined = match (prev, &self.x) {
                    (Some((px, _)), XAxis::Category { breaks, .. }) => {
                        p.x - px <= 1.0 && !breaks.contains(&(p.x.round() as usize))
                    }
                    (Some(_), XAxis::Linear(_)) => true,
                    (None, _) => false,
                };
                if joined {
                    if let Some((_, from)) = prev {
                        placer.segment(from, here);
                    }
                }
                let _ = write!(
                    d,
                    "{}{:.1} {:.1}",
                    if joined { 'L' } else { 'M' },
                    here.0,
                    here.1
                );
                prev = Some((p.x, here));
            }
            if !d.is_empty() {
                let _ = write!(
                    o,
                    r#"<path class="ln s{}" d="{d}" fill="none" stroke="{c}" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"/>"#,
                    s.doc
                );
            }
        }
    }

    /// A marker with its hover text at every point, smaller as the series grow longer.
    fn write_markers(&self, o: &mut String, fr: &Frame, placer: &mut Placer) {
        let total: usize = self
            .series
            .iter()
            .map(|s| s.points.len())
            .max()
            .unwrap_or(0);
        let r = if total <= 40 {
            3.6
        } else if total <= 120 {
            2.6
        } else {
            1.8
        };
        for s in &self.series {
            let c = color(s.doc);
            for p in s.points.iter().filter(finite) {
                let (x, y) = (fr.sx(p.x), fr.sy(p.y));
                placer
                    .boxes
                    .push([x - r - 1.0, y - r - 1.0, x + r + 1.0, y + r + 1.0]);
                let _ = write!(
                    o,
                    r##"<circle class="pt s{}" cx="{x:.1}" cy="{y:.1}" r="{r}" fill="{c}" stroke="#fff" stroke-width="1"><title>{}: {}</title></circle>"##,
                    s.doc,
                    esc(&s.name),
                    esc(&p.tip)
                );
            }
        }
    }

    /// The ringed marks with their labels, then the points' labels, where there is room.
    fn write_labels(&self, o: &mut String, fr: &Frame, placer: &mut Placer) {
        for m in &self.marks {
            if !(m.x.is_finite() && m.y.is_finite()) {
                continue;
            }
            let c = color(m.doc);
            let (x, y) = (fr.sx(m.x), fr.sy(m.y));
            let _ = write!(
                o,
                r#"<circle class="mark s{}" cx="{x:.1}" cy="{y:.1}" r="7.5" fill="none" stroke="{c}" stroke-width="1.5"/>"#,
                m.doc
            );
            placer.boxes.push([x - 8.5, y - 8.5, x + 8.5, y + 8.5]);
            if let Some((tx, ty, anchor)) = placer.place(x + 3.0, y, &m.label, 11.0) {
                let _ = write!(
                    o,
                    r#"<text class="mark-label" x="{tx:.1}" y="{ty:.1}" font-size="11" font-weight="600" fill="{c}" text-anchor="{anchor}">{}</text>"#,
                    esc(&m.label)
                );
            }
        }
        for s in &self.series {
            let c = color(s.doc);
            for p in s.points.iter().filter(finite) {
                let Some(label) = &p.label else { continue };
                if let Some((tx, ty, anchor)) = placer.place(fr.sx(p.x), fr.sy(p.y), label, 10.0) {
                    let _ = write!(
                        o,
                        r#"<text class="pt-label s{}" x="{tx:.1}" y="{ty:.1}" font-size="10" fill="{c}" text-anchor="{anchor}">{}</text>"#,
                        s.doc,
                        esc(label)
                    );
                }
            }
        }
    }
}

/// The legend entries laid out by `Chart::legend_layout`.
fn write_legend(o: &mut String, legend: Vec<(f64, usize, &Series)>) {
    let legend_size = LEGEND_SIZE;
    for (x, row, s) in legend {
        let y = 38.0 + row as f64 * 18.0;
        let c = color(s.doc);
        let _ = write!(
            o,
            r##"<g class="legend s{}"><line x1="{x:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="2.5"/><rect x="{:.1}" y="{:.1}" width="6" height="6" fill="{c}"/><text x="{:.1}" y="{y:.1}" font-size="{legend_size}" fill="#1d2430">{}</text></g>"##,
            s.doc,
            x + 18.0,
            y - 4.0,
            y - 4.0,
            x + 6.0,
            y - 7.0,
            x + 24.0,
            esc(&s.name)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_ticks() {
        assert_eq!(nice_ticks(98_024.0, 5), (100_000.0, 20_000.0));
        assert_eq!(nice_ticks(3.9, 5), (4.0, 1.0));
        assert_eq!(nice_ticks(0.0, 5), (1.0, 0.2));
        assert_eq!(nice_ticks(f64::NAN, 5), (1.0, 0.2));
        let (top, step) = nice_ticks(23.0, 5);
        assert_eq!((top, step), (25.0, 5.0));
        let (top, step) = nice_ticks(11.0, 5);
        assert_eq!((top, step), (12.5, 2.5));
        assert_eq!(decimals(2.5), 1);
        assert_eq!(decimals(0.25), 2);
        assert_eq!(decimals(20.0), 0);
    }

    #[test]
    fn tick_texts_and_units() {
        assert_eq!(
            tick_text(Quantity::Iops, 40_000.0, 100_000.0, 20_000.0),
            "40k"
        );
        assert_eq!(tick_text(Quantity::Iops, 2_500.0, 5_000.0, 500.0), "2,500");
        assert_eq!(
            tick_text(Quantity::Iops, 1_500_000.0, 3_000_000.0, 500_000.0),
            "1.5M"
        );
        assert_eq!(Quantity::Latency.scale(3.9e6), (1e6, "ms"));
        assert_eq!(Quantity::Latency.scale(203e3), (1e3, "µs"));
        assert_eq!(Quantity::Seconds.scale(1500.0), (60.0, "min"));
        assert_eq!(Quantity::Bytes.scale(2.4e12), (1e12, "TB"));
    }

    fn chart(points: usize) -> Chart {
        Chart {
            id: "c".into(),
            title: "Throughput <&>".into(),
            x: XAxis::Linear(Axis::new("time", Quantity::Seconds)),
            y: Axis::new("throughput", Quantity::Iops),
            series: vec![Series {
                name: "a<b>".into(),
                doc: 1,
                points: (0..points)
                    .map(|i| Pt {
                        x: (i + 1) as f64 * 60.0,
                        y: 90_000.0 - i as f64 * 1000.0,
                        tip: format!("round {i}"),
                        label: Some(format!("{}%", i * 10)),
                    })
                    .collect(),
            }],
            bands: vec![Band {
                x0: 120.0,
                x1: 300.0,
                doc: 1,
                label: "steady window".into(),
                dashed: false,
            }],
            marks: vec![Mark {
                x: 60.0,
                y: 90_000.0,
                doc: 1,
                label: "burst".into(),
            }],
        }
    }

    #[test]
    fn one_marker_per_point_and_text_escaped() {
        let svg = chart(8).svg();
        assert_eq!(svg.matches(r#"<circle class="pt s1""#).count(), 8);
        assert_eq!(svg.matches(r#"class="mark s1""#).count(), 1);
        assert!(svg.contains("Throughput &lt;&amp;&gt;"));
        assert!(svg.contains("a&lt;b&gt;"));
        assert!(!svg.contains("<b>"));
        assert!(svg.contains(">throughput (IOPS)<"));
        assert!(svg.contains(">time (s)<"));
        assert!(svg.contains(">steady window<"));
    }

    #[test]
    fn empty_chart_says_so() {
        let svg = chart(0).svg();
        assert!(svg.contains("no data"));
        assert!(!svg.contains("<circle class=\"pt"));
    }
}
