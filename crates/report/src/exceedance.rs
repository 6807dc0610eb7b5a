//! Latency-percentile (exceedance) charts from the histograms result documents keep, one
//! curve per document (x: the percentile as a number of nines, out to the highest the
//! I/O count supports; y: latency on a log scale), and the QoS qualification tables.

use std::fmt::Write;

use super::chart::color;
use super::fmt::{esc, grouped, latency};
use crate::protocol::hist::{percentile_name, LatencyHist};
use crate::protocol::qos::QosOutcome;
use crate::protocol::result::{Phase, Round, SuiteResult};

/// One line for a QoS row: pass or fail, the rate qualified, and where the first failing
/// rate failed.
pub fn qos_line(name: &str, q: &QosOutcome) -> String {
    let verdict = if q.pass { "PASS" } else { "FAIL" };
    let at = match q.qualified_iops {
        Some(r) => format!("limits held up to {} IOPS", grouped(r, 0)),
        None => "no rate tried held the limits".to_string(),
    };
    let min = q
        .min_iops
        .map(|m| format!(" (needs {} IOPS)", grouped(m, 0)))
        .unwrap_or_default();
    let fail = match &q.failure {
        Some(f) => match (f.percentile, f.measured_ns, f.limit_ns) {
            (Some(p), Some(m), Some(l)) => format!(
                "; at {} IOPS {} was {} > {}",
                grouped(f.target_iops, 0),
                percentile_name(p),
                latency(m as f64),
                latency(l as f64)
            ),
            _ => format!(
                "; at {} IOPS the rate was not sustained",
                grouped(f.target_iops, 0)
            ),
        },
        None => String::new(),
    };
    format!("qos {}/{name}: {verdict}, {at}{min}{fail}", q.class)
}

/// Every kept histogram of a phase's rounds, both directions: the phase's whole
/// distribution (a steady-state phase's: its steady window's).
pub fn phase_hist(p: &Phase) -> Option<LatencyHist> {
    let rounds: Vec<&Round> = match p {
        Phase::SteadyState { steady_figures, .. } => vec![steady_figures],
        Phase::Sweep { points, .. } => points.iter().map(|p| &p.round).collect(),
        Phase::RateCurve { .. } => Vec::new(),
        Phase::WriteSaturation { rounds, .. } => rounds.iter().collect(),
        Phase::Point { round, .. } => vec![round],
        Phase::Qos { qos, .. } => qos
            .probes
            .iter()
            .filter(|p| Some(p.target_iops) == qos.qualified_iops)
            .map(|p| &p.round)
            .collect(),
        _ => Vec::new(),
    };
    let hs: Vec<&LatencyHist> = rounds
        .iter()
        .flat_map(|r| [r.read_lat_hist.as_ref(), r.write_lat_hist.as_ref()])
        .flatten()
        .collect();
    if hs.is_empty() {
        return None;
    }
    LatencyHist::merge(hs).ok()
}

/// A curve ready to draw: its document, label and (nines, latency) steps.
type Drawn<'a> = (usize, &'a str, Vec<(f64, u64)>);

const W: f64 = 600.0;
const H: f64 = 220.0;
const LEFT: f64 = 68.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;

/// One curve: a document's index (its colour), its label, and the histogram.
pub struct Curve<'a> {
    pub doc: usize,
    pub label: &'a str,
    pub hist: LatencyHist,
}

/// The exceedance chart of `curves` as inline SVG, titled `title`; None when no curve has
/// a point.
pub fn chart(title: &str, curves: &[Curve]) -> Option<String> {
    let pts: Vec<Drawn> = curves
        .iter()
        .filter_map(|c| {
            let e = c.hist.exceedance().ok()?;
            (!e.is_empty()).then_some((c.doc, c.label, e))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let max_x = pts
        .iter()
        .flat_map(|(_, _, e)| e.iter().map(|p| p.0))
        .fold(1.0f64, f64::max)
        .ceil();
    let lo = pts
        .iter()
        .flat_map(|(_, _, e)| e.iter().map(|p| p.1))
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let hi = pts
        .iter()
        .flat_map(|(_, _, e)| e.iter().map(|p| p.1))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // Decades around the data.
    let y0 = lo.log10().floor();
    let y1 = (hi.log10().ceil()).max(y0 + 1.0);
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |n: f64| LEFT + n / max_x * pw;
    let y = |v: u64| TOP + ph - ((v.max(1) as f64).log10() - y0) / (y1 - y0) * ph;
    let legend_h = 18.0 * pts.len() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart exceedance" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {}" role="img" aria-label="{}">"#,
        H + legend_h,
        esc(title)
    );
    // Axes and ticks: a percentile per nine, a latency per decade.
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#444"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#444"/>"##,
        TOP + ph,
        LEFT + pw,
        TOP + ph,
        TOP + ph
    );
    for n in 0..=(max_x as u32) {
        let label = if n == 0 {
            "p0".to_string()
        } else {
            percentile_name(100.0 - 100.0 * 10f64.powi(-(n as i32))).replace('_', ".")
        };
        let _ = write!(
            s,
            r##"<line class="xtick" x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#ddd"/><text x="{0}" y="{3}" font-size="11" text-anchor="middle">{4}</text>"##,
            x(n as f64),
            TOP,
            TOP + ph,
            TOP + ph + 14.0,
            esc(&label)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle">percentile (number of nines)</text>"#,
        LEFT + pw / 2.0,
        TOP + ph + 30.0
    );
    for d in (y0 as i32)..=(y1 as i32) {
        let v = 10f64.powi(d);
        let yy = y(v as u64);
        let _ = write!(
            s,
            r##"<line class="ytick" x1="{LEFT}" y1="{yy}" x2="{}" y2="{yy}" stroke="#eee"/><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 4.0,
            yy + 4.0,
            esc(&latency(v))
        );
    }
    for (k, (doc, label, e)) in pts.iter().enumerate() {
        // Steps: each bucket's latency from its first percentile to the next bucket's.
        let steps: Vec<(f64, f64)> = e.iter().map(|&(n, v)| (x(n), y(v))).collect();
        let mut d = String::new();
        for (i, (px, py)) in drawn_steps(&steps).into_iter().enumerate() {
            let cmd = if i == 0 { 'M' } else { 'H' };
            let _ = write!(d, "{cmd}{px:.1} V{py:.1} ");
        }
        let _ = write!(
            s,
            r#"<path class="series" data-doc="{doc}" d="{}" fill="none" stroke="{}" stroke-width="1.6"><title>{}</title></path>"#,
            d.trim_end(),
            color(*doc),
            esc(label)
        );
        let ly = H + 18.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect x="{LEFT}" y="{}" width="14" height="4" fill="{}"/><text x="{}" y="{}" font-size="12">{}</text>"#,
            ly - 4.0,
            color(*doc),
            LEFT + 20.0,
            ly + 1.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    Some(s)
}

/// The steps of a curve that are drawn: a step that moves less than half a pixel either
/// way from the last one drawn is left out (the first and the last always drawn). The
/// curve only rises and goes right, so what is left out is within half a pixel of the
/// line, and a curve takes at most twice the chart's width and height in points, however
/// many buckets its histogram lists (up to 34,000 at 3 digits).
fn drawn_steps(steps: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &(px, py)) in steps.iter().enumerate() {
        let last = i + 1 == steps.len();
        match out.last() {
            Some(&(lx, ly)) if !last && (px - lx).abs() < 0.5 && (py - ly).abs() < 0.5 => {}
            _ => out.push((px, py)),
        }
    }
    out
}

/// The page's exceedance section: for each workload phase with histograms, in order of
/// appearance, one chart overlaying every document's phase of the same name.
pub fn section(o: &mut String, docs: &[(usize, &str, &SuiteResult)]) {
    let mut names: Vec<String> = Vec::new();
    for (_, _, r) in docs {
        for p in &r.phases {
            if let Some(n) = phase_name(p) {
                if phase_hist(p).is_some() && !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    if names.is_empty() {
        return;
    }
    o.push_str(r#"<section id="exceedance"><h2>Latency percentiles</h2><p>Each phase's whole latency distribution from the histogram the document keeps (a steady-state phase: its steady window), as latency against percentile. The x axis counts nines (p90, p99, p99.9...) out to the highest percentile the phase's I/O count resolves; the latency axis is logarithmic.</p>"#);
    for name in &names {
        let curves: Vec<Curve> = docs
            .iter()
            .flat_map(|&(i, label, r)| {
                r.phases
                    .iter()
                    .filter(|p| phase_name(p).as_deref() == Some(name))
                    .take(1)
                    .filter_map(move |p| {
                        Some(Curve {
                            doc: i,
                            label,
                            hist: phase_hist(p)?,
                        })
                    })
            })
            .collect();
        if let Some(svg) = chart(name, &curves) {
            let _ = write!(o, "<figure><figcaption>{}</figcaption>{svg}", esc(name));
            o.push_str("<table class=\"pct\"><tr><th></th>");
            for p in ["p50", "p99", "p99.9", "p99.99", "p99.999", "p99.9999"] {
                let _ = write!(o, "<th>{p}</th>");
            }
            o.push_str("<th>I/Os</th></tr>");
            for c in &curves {
                let _ = write!(
                    o,
                    r#"<tr><td><span style="color:{}">&#9632;</span> {}</td>"#,
                    color(c.doc),
                    esc(c.label)
                );
                let nines = c.hist.supported_nines();
                for (p, n) in [
                    (50.0, 0.3),
                    (99.0, 2.0),
                    (99.9, 3.0),
                    (99.99, 4.0),
                    (99.999, 5.0),
                    (99.9999, 6.0),
                ] {
                    match c.hist.percentile_ns(p) {
                        Ok(v) if nines + 1e-9 >= n => {
                            let _ = write!(o, "<td>{}</td>", latency(v as f64));
                        }
                        _ => o.push_str(
                            "<td class=\"na\" title=\"too few I/Os for this percentile\">-</td>",
                        ),
                    }
                }
                let _ = write!(o, "<td>{}</td></tr>", grouped(c.hist.total() as f64, 0));
            }
            o.push_str("</table></figure>");
        }
    }
    o.push_str("</section>");
}

fn phase_name(p: &Phase) -> Option<String> {
    Some(match p {
        Phase::SteadyState { workload, .. } => format!("{} (steady state)", workload.name),
        Phase::Sweep { workload, .. } => format!("{} (sweep, all points)", workload.name),
        Phase::WriteSaturation { workload, .. } => {
            format!("{} (write saturation)", workload.name)
        }
        Phase::Point { workload, .. } => workload.name.clone(),
        Phase::Qos { workload, .. } => format!("{} (QoS, at the qualified rate)", workload.name),
        _ => return None,
    })
}

/// The QoS section: one table per document, a row per QoS phase.
pub fn qos_section(o: &mut String, docs: &[(usize, &str, &SuiteResult)]) {
    let any = docs
        .iter()
        .any(|(_, _, r)| r.phases.iter().any(|p| matches!(p, Phase::Qos { .. })));
    if !any {
        return;
    }
    o.push_str(r#"<section id="qos"><h2>QoS qualification</h2><p>For each row, the open-loop engine's rates tried (latency from each I/O's due time), and the highest at which every percentile limit held.</p>"#);
    for &(i, label, r) in docs {
        let rows: Vec<_> = r
            .phases
            .iter()
            .filter_map(|p| match p {
                Phase::Qos { workload, qos } => Some((workload, qos)),
                _ => None,
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(
            o,
            r#"<h3><span style="color:{}">&#9632;</span> {}</h3><table class="qos"><tr><th>row</th><th>verdict</th><th>qualified IOPS</th><th>limits</th><th>at the qualified rate</th><th>first failure</th></tr>"#,
            color(i),
            esc(label)
        );
        for (w, q) in rows {
            let limits: Vec<String> = q
                .limits
                .iter()
                .map(|l| {
                    format!(
                        "{} {}",
                        percentile_name(l.percentile).replace('_', "."),
                        latency(l.limit_ns as f64)
                    )
                })
                .collect();
            let at: Vec<String> = q
                .probes
                .iter()
                .find(|p| Some(p.target_iops) == q.qualified_iops)
                .map(|p| {
                    p.verdicts
                        .iter()
                        .map(|v| {
                            format!(
                                "{} {}",
                                percentile_name(v.percentile).replace('_', "."),
                                latency(v.measured_ns as f64)
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let fail = match &q.failure {
                Some(f) => match (f.percentile, f.measured_ns, f.limit_ns) {
                    (Some(p), Some(m), Some(l)) => format!(
                        "{} IOPS: {} {} &gt; {}",
                        grouped(f.target_iops, 0),
                        percentile_name(p).replace('_', "."),
                        latency(m as f64),
                        latency(l as f64)
                    ),
                    _ => format!("{} IOPS: rate not sustained", grouped(f.target_iops, 0)),
                },
                None => "-".into(),
            };
            let _ = write!(
                o,
                r#"<tr class="{}"><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                if q.pass { "pass" } else { "fail" },
                esc(&q.class),
                esc(&w.name),
                if q.pass { "PASS" } else { "FAIL" },
                q.qualified_iops.map_or("-".into(), |v| grouped(v, 0)),
                esc(&limits.join(", ")),
                esc(&at.join(", ")),
                fail
            );
        }
        o.push_str("</table>");
    }
    o.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3-digit histogram of `n` neighbouring buckets from 1 us up, one I/O each (at 3
    /// digits a bucket at v spans 2^(log2(v) - 10) ns from 2,048 ns up).
    fn dense(n: usize) -> LatencyHist {
        let (mut delta_ns, mut v, mut prev) = (Vec::new(), 1_000u64, 0u64);
        for _ in 0..n {
            delta_ns.push(v - prev);
            prev = v;
            v += 1u64 << (63 - v.leading_zeros()).saturating_sub(10);
        }
        LatencyHist {
            sig_digits: 3,
            delta_ns,
            counts: vec![1; n],
        }
    }

    #[test]
    fn a_curve_draws_at_most_twice_the_charts_size_in_steps() {
        let bound = 2.0 * ((W - LEFT - RIGHT) + (H - TOP - BOTTOM)) + 2.0;
        for n in [10, 1_000, 30_000] {
            let hist = dense(n);
            assert_eq!(hist.exceedance().unwrap().len(), n + 1, "a step a bucket");
            let svg = chart(
                "t",
                &[Curve {
                    doc: 0,
                    label: "d",
                    hist,
                }],
            )
            .unwrap();
            let path = svg.split(r#"<path class="series""#).nth(1).unwrap();
            let d = path
                .split(r#"d=""#)
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let steps = d.matches('V').count();
            assert!(steps as f64 <= bound, "{n} buckets: {steps} steps drawn");
            // Few buckets: every one drawn.
            if n == 10 {
                assert_eq!(steps, n + 1);
            }
        }
    }

    #[test]
    fn steps_left_out_are_within_half_a_pixel_and_the_ends_are_kept() {
        let steps: Vec<(f64, f64)> = (0..1000)
            .map(|i| (i as f64 * 0.01, 100.0 - i as f64 * 0.01))
            .collect();
        let d = drawn_steps(&steps);
        assert_eq!(d.first(), steps.first());
        assert_eq!(d.last(), steps.last());
        assert!(d.len() <= 22, "{}", d.len());
        for w in d.windows(2) {
            assert!(w[1].0 - w[0].0 <= 0.51, "{w:?}");
        }
    }
}
