//! The SNIA PTS tests' sections of the report, in the specification's style: for
//! throughput, the steady-state convergence of write and read MB/s round by round with the
//! measurement window shaded, and the window's figures; for XSR, throughput and IOPS over
//! time across the three access groups, with the time each took to settle; for HIR, IOPS
//! burst by burst over time, and each idle length's mean against the baseline; for DIRTH,
//! IOPS across the threads x depth grid (demand variation), response time against IOPS
//! with the chosen points and the knee marked (demand intensity), and the response-time
//! histograms at the minimum, middle and maximum points.

use std::fmt::Write;

use super::chart::{Axis, Band, Chart, Mark, Pt, Quantity, Series, XAxis};
use super::fmt::{self as f, esc};
use crate::protocol::pts::{DirthTest, HirTest, PtsTest, ThroughputTest, XsrTest};

/// One document's run of a test: (document index, label, test).
pub type Member<'a> = (usize, &'a str, &'a PtsTest);

fn swatch(i: usize) -> String {
    format!(
        r#"<span class="sw" style="background:{}"></span>"#,
        super::chart::color(i)
    )
}

fn mbs(b: f64) -> String {
    f::bandwidth(b)
}

/// The section of test `key` for every document that ran it.
pub fn section(o: &mut String, key: &str, members: &[Member]) {
    let Some((_, _, first)) = members.first() else {
        return;
    };
    let id = format!("pts-{key}");
    match first {
        PtsTest::Throughput(t) => {
            let ms = of_kind(members, |t| match t {
                PtsTest::Throughput(t) => Some(t),
                _ => None,
            });
            throughput(o, &id, &t.block_size, &ms);
        }
        PtsTest::Xsr(_) => {
            let ms = of_kind(members, |t| match t {
                PtsTest::Xsr(t) => Some(t),
                _ => None,
            });
            xsr(o, &id, &ms);
        }
        PtsTest::Hir(_) => {
            let ms = of_kind(members, |t| match t {
                PtsTest::Hir(t) => Some(t),
                _ => None,
            });
            hir(o, &id, &ms);
        }
        PtsTest::Dirth(_) => {
            let ms = of_kind(members, |t| match t {
                PtsTest::Dirth(t) => Some(t),
                _ => None,
            });
            dirth(o, &id, &ms);
        }
    }
}

/// The members whose test `pick` finds of its kind, with that test.
fn of_kind<'a, T>(
    members: &[Member<'a>],
    pick: fn(&'a PtsTest) -> Option<&'a T>,
) -> Vec<(usize, &'a str, &'a T)> {
    members
        .iter()
        .filter_map(|(i, l, t)| pick(t).map(|t| (*i, *l, t)))
        .collect()
}

/// The measurement window of a throughput test: (first, last) round positions.
fn window(t: &ThroughputTest) -> Option<(usize, usize)> {
    let n = t.rounds.len();
    if n == 0 {
        return None;
    }
    let last = t
        .steady
        .steady_round
        .and_then(|s| t.rounds.iter().position(|r| r.index == s))
        .unwrap_or(n - 1);
    let w = (t.steady.window_rounds as usize).max(1);
    Some(((last + 1).saturating_sub(w), last))
}

fn throughput(o: &mut String, id: &str, bs: &str, ms: &[(usize, &str, &ThroughputTest)]) {
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Throughput: sequential {}</h2><p class="meta">SNIA PTS throughput test: purge, workload-independent preconditioning, then rounds of a sequential write run and a sequential read run until the write throughput meets the steady-state rule.</p>"#,
        esc(id),
        esc(bs)
    );
    o.push_str(r#"<table><tr><th class="l">document</th><th>rounds</th><th class="l">steady state</th><th>write</th><th>read</th></tr>"#);
    for (i, label, t) in ms {
        let state = match (t.steady.attained, t.steady.steady_round) {
            (true, Some(r)) => format!(r#"<span class="ok">steady</span> at round {}"#, r + 1),
            _ => r#"<span class="bad">not steady</span> (last window)"#.to_string(),
        };
        let _ = write!(
            o,
            r#"<tr><td class="l">{}{}</td><td>{}</td><td class="l">{}</td><td>{}</td><td>{}</td></tr>"#,
            swatch(*i),
            esc(label),
            t.rounds.len(),
            state,
            mbs(t.write_bytes_per_second),
            mbs(t.read_bytes_per_second)
        );
    }
    o.push_str(r#"</table><div class="grid">"#);
    for (dir, what) in [(true, "write"), (false, "read")] {
        let chart = Chart {
            id: format!("chart-{id}-{what}"),
            title: format!("Steady-state convergence: {what}"),
            x: XAxis::Linear(Axis::new("round", Quantity::Count)),
            y: Axis::new(&format!("{what} throughput"), Quantity::BytesPerSecond),
            series: ms
                .iter()
                .map(|(i, label, t)| Series {
                    name: label.to_string(),
                    doc: *i,
                    points: t
                        .rounds
                        .iter()
                        .map(|r| {
                            let v = if dir {
                                r.write.write.bw_bytes
                            } else {
                                r.read.read.bw_bytes
                            };
                            Pt {
                                x: (r.index + 1) as f64,
                                y: v,
                                tip: format!("round {}: {what} {}", r.index + 1, mbs(v)),
                                label: None,
                            }
                        })
                        .collect(),
                })
                .collect(),
            bands: ms
                .iter()
                .filter_map(|(i, _, t)| {
                    let (a, b) = window(t)?;
                    Some(Band {
                        x0: (a + 1) as f64,
                        x1: (b + 1) as f64,
                        doc: *i,
                        label: "measurement window".to_string(),
                        dashed: !t.steady.attained,
                    })
                })
                .collect(),
            marks: Vec::new(),
        };
        o.push_str(&chart.svg());
    }
    o.push_str("</div></section>");
}

fn xsr(o: &mut String, id: &str, ms: &[(usize, &str, &XsrTest)]) {
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Cross-stimulus recovery</h2><p class="meta">SNIA PTS XSR: from a purged drive, sequential 128 KiB writes, then random 8 KiB writes, then sequential 128 KiB writes again. A group has settled from the first round after which every round stays within the tolerance of the group's last window.</p>"#,
        esc(id)
    );
    o.push_str(r#"<table><tr><th class="l">document</th><th class="l">access group</th><th>rounds</th><th>window MB/s</th><th>window IOPS</th><th>settled after</th></tr>"#);
    for (i, label, x) in ms {
        for s in &x.segments {
            let _ = write!(
                o,
                r#"<tr><td class="l">{}{}</td><td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                swatch(*i),
                esc(label),
                esc(&s.workload.name),
                s.rounds.len(),
                mbs(s.window_bytes_per_second),
                f::iops(s.window_iops),
                s.recovery_seconds.map_or_else(
                    || r#"<span class="bad">not settled</span>"#.to_string(),
                    f::duration
                )
            );
        }
    }
    o.push_str(r#"</table><div class="grid">"#);
    for (what, q) in [
        ("throughput", Quantity::BytesPerSecond),
        ("IOPS", Quantity::Iops),
    ] {
        let chart = Chart {
            id: format!("chart-{id}-{}", if what == "IOPS" { "iops" } else { "bw" }),
            title: format!(
                "{} over time",
                if what == "IOPS" { "IOPS" } else { "Throughput" }
            ),
            x: XAxis::Linear(Axis::new("time", Quantity::Seconds)),
            y: Axis::new(what, q),
            series: ms
                .iter()
                .map(|(i, label, x)| Series {
                    name: label.to_string(),
                    doc: *i,
                    points: x
                        .segments
                        .iter()
                        .flat_map(|s| {
                            s.rounds.iter().map(move |r| {
                                let v = if what == "IOPS" {
                                    r.iops
                                } else {
                                    r.write.bw_bytes
                                };
                                Pt {
                                    x: s.start_seconds + r.end_seconds,
                                    y: v,
                                    tip: format!(
                                        "{}, round {}: {}, {}",
                                        s.workload.name,
                                        r.index + 1,
                                        mbs(r.write.bw_bytes),
                                        f::iops(r.iops)
                                    ),
                                    label: None,
                                }
                            })
                        })
                        .collect(),
                })
                .collect(),
            // The settling period of each group after a change of stimulus.
            bands: ms
                .iter()
                .flat_map(|(i, _, x)| {
                    x.segments.iter().skip(1).filter_map(move |s| {
                        let r = s.recovery_seconds?;
                        Some(Band {
                            x0: s.start_seconds,
                            x1: s.start_seconds + r,
                            doc: *i,
                            label: format!("{} settling", s.workload.name),
                            dashed: false,
                        })
                    })
                })
                .collect(),
            marks: ms
                .iter()
                .flat_map(|(i, _, x)| {
                    x.segments.iter().skip(1).filter_map(move |s| {
                        let r = s.rounds.first()?;
                        Some(Mark {
                            x: s.start_seconds + r.end_seconds,
                            y: if what == "IOPS" {
                                r.iops
                            } else {
                                r.write.bw_bytes
                            },
                            doc: *i,
                            label: format!("to {}", s.workload.name),
                        })
                    })
                })
                .collect(),
        };
        o.push_str(&chart.svg());
    }
    o.push_str("</div></section>");
}

fn hir(o: &mut String, id: &str, ms: &[(usize, &str, &HirTest)]) {
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Host idle recovery</h2><p class="meta">SNIA PTS HIR: after 4 KiB random writes to steady state, write bursts with idle periods between them, longer in each state, each state followed by a return to baseline (bursts back to back). Recovery is a state's mean IOPS over the baseline just before it.</p>"#,
        esc(id)
    );
    o.push_str(r#"<table><tr><th class="l">document</th><th>burst</th><th>idle</th><th>bursts</th><th>mean IOPS</th><th>recovery</th></tr>"#);
    for (i, label, h) in ms {
        for s in &h.states {
            let _ = write!(
                o,
                r#"<tr><td class="l">{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                swatch(*i),
                esc(label),
                f::duration(h.burst_seconds),
                if s.wait_seconds > 0.0 {
                    f::duration(s.wait_seconds)
                } else {
                    "none (baseline)".to_string()
                },
                s.bursts.len(),
                f::iops(s.mean_iops),
                s.recovery_ratio
                    .map_or_else(|| "-".to_string(), |r| format!("x{r:.2}"))
            );
        }
    }
    o.push_str(r#"</table><div class="grid">"#);
    let by_time = Chart {
        id: format!("chart-{id}-bursts"),
        title: "IOPS per burst over time".to_string(),
        x: XAxis::Linear(Axis::new("time", Quantity::Seconds)),
        y: Axis::new("burst IOPS", Quantity::Iops),
        series: ms
            .iter()
            .map(|(i, label, h)| Series {
                name: label.to_string(),
                doc: *i,
                points: h
                    .states
                    .iter()
                    .flat_map(|s| {
                        s.bursts.iter().zip(&s.burst_starts).map(move |(r, t)| Pt {
                            x: *t,
                            y: r.iops,
                            tip: format!(
                                "{} idle, burst {}: {}",
                                f::duration(s.wait_seconds),
                                r.index + 1,
                                f::iops(r.iops)
                            ),
                            label: None,
                        })
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    };
    let waits: Vec<f64> = ms
        .first()
        .map(|(_, _, h)| {
            h.states
                .iter()
                .filter(|s| s.wait_seconds > 0.0)
                .map(|s| s.wait_seconds)
                .collect()
        })
        .unwrap_or_default();
    let by_wait = Chart {
        id: format!("chart-{id}-recovery"),
        title: "Mean IOPS by idle length".to_string(),
        x: XAxis::Category {
            name: "idle between bursts".to_string(),
            labels: std::iter::once("baseline".to_string())
                .chain(waits.iter().map(|w| f::duration(*w)))
                .collect(),
            breaks: Vec::new(),
        },
        y: Axis::new("mean IOPS", Quantity::Iops),
        series: ms
            .iter()
            .map(|(i, label, h)| Series {
                name: label.to_string(),
                doc: *i,
                points: std::iter::once((0usize, h.baseline_iops, None))
                    .chain(
                        h.states
                            .iter()
                            .filter(|s| s.wait_seconds > 0.0)
                            .enumerate()
                            .map(|(k, s)| (k + 1, s.mean_iops, s.recovery_ratio)),
                    )
                    .map(|(k, v, r)| Pt {
                        x: k as f64,
                        y: v,
                        tip: format!(
                            "{}{}",
                            f::iops(v),
                            r.map_or_else(String::new, |r: f64| format!(", x{r:.2} the baseline"))
                        ),
                        label: None,
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    };
    o.push_str(&by_time.svg());
    o.push_str(&by_wait.svg());
    o.push_str("</div></section>");
}

fn dirth(o: &mut String, id: &str, ms: &[(usize, &str, &DirthTest)]) {
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Demand intensity / response time histogram</h2><p class="meta">SNIA PTS DIRTH: random 8 KiB, 65% reads, one round at each thread count x queue depth, the whole grid repeated until the IOPS of its highest point (in the first run) is steady; each point's figures are its average over the measurement window. The minimum point is the lowest demand, the maximum the highest IOPS, the middle the point nearest halfway between their IOPS; each gets a run of its own for its response-time histogram. The knee is the point farthest below the straight line from the lowest to the highest demand on the response time against IOPS curve.</p>"#,
        esc(id)
    );
    dirth_steady(o, ms);
    dirth_points_table(o, ms);
    o.push_str(r#"<div class="grid">"#);
    o.push_str(&dirth_variation(id, ms).svg());
    o.push_str(&dirth_intensity(id, ms).svg());
    // The histograms, one chart per chosen point; bins from the first to the last with
    // a count in any document.
    for which in ["min", "mid", "max"] {
        if let Some(chart) = dirth_histogram(id, ms, which) {
            o.push_str(&chart.svg());
        }
    }
    o.push_str("</div></section>");
}

/// Per document: how many runs of the grid, and whether its tracked point became steady
/// (documents from before the grid was repeated say nothing).
fn dirth_steady(o: &mut String, ms: &[(usize, &str, &DirthTest)]) {
    for (i, label, d) in ms {
        let (Some(st), Some(p)) = (&d.steady, d.tracked_point.and_then(|k| d.points.get(k))) else {
            continue;
        };
        let runs = if d.grid_rounds == 1 { "run" } else { "runs" };
        let verdict = match st.steady_round {
            Some(r) => format!("steady after run {} of the grid", r + 1),
            None if d.grid_rounds < st.max_rounds => {
                "<strong>not steady</strong> when the run was stopped".to_string()
            }
            None => format!(
                "<strong>not steady</strong> within the limit of {} runs",
                st.max_rounds
            ),
        };
        let _ = write!(
            o,
            r#"<p class="meta">{}{}: {} {} of the grid; tracked point {} x {}, {} (window mean {}, range {:.1}%, slope excursion {:.1}%).</p>"#,
            swatch(*i),
            esc(label),
            d.grid_rounds,
            runs,
            p.workers,
            p.depth,
            verdict,
            f::iops(st.window_mean_iops),
            st.window_range_ratio * 100.0,
            st.window_slope_excursion_ratio * 100.0
        );
    }
}

/// The rows of the chosen points (minimum, middle, maximum, knee) of every document.
fn dirth_points_table(o: &mut String, ms: &[(usize, &str, &DirthTest)]) {
    o.push_str(r#"<table><tr><th class="l">document</th><th class="l">point</th><th>threads x depth</th><th>IOPS</th><th>mean response</th><th>max response</th></tr>"#);
    for (i, label, d) in ms {
        for (name, at) in [
            ("minimum", d.min_point),
            ("middle", d.mid_point),
            ("maximum", d.max_point),
            ("knee", d.knee_point),
        ] {
            let Some(p) = at.and_then(|k| d.points.get(k)) else {
                continue;
            };
            let _ = write!(
                o,
                r#"<tr><td class="l">{}{}</td><td class="l">{}</td><td>{} x {}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                swatch(*i),
                esc(label),
                name,
                p.workers,
                p.depth,
                f::iops(p.round.iops),
                f::latency(p.round.lat_mean_ns),
                f::latency(p.round.lat_max_ns as f64)
            );
        }
    }
    o.push_str("</table>");
}

/// The hover text of a grid point.
fn dirth_tip(p: &crate::protocol::pts::DirthPoint) -> String {
    format!(
        "{}T{}Q: {}, mean {}",
        p.workers,
        p.depth,
        f::iops(p.round.iops),
        f::latency(p.round.lat_mean_ns)
    )
}

/// Demand variation: IOPS at each grid point, a group per thread count.
fn dirth_variation(id: &str, ms: &[(usize, &str, &DirthTest)]) -> Chart {
    let first = ms[0].2;
    let labels: Vec<String> = first
        .points
        .iter()
        .map(|p| format!("{}T{}Q", p.workers, p.depth))
        .collect();
    let breaks: Vec<usize> = first
        .points
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[0].workers != w[1].workers)
        .map(|(k, _)| k + 1)
        .collect();
    Chart {
        id: format!("chart-{id}-variation"),
        title: "Demand variation: IOPS by threads x depth".to_string(),
        x: XAxis::Category {
            name: "threads x queue depth".to_string(),
            labels: labels.clone(),
            breaks,
        },
        y: Axis::new("IOPS", Quantity::Iops),
        series: ms
            .iter()
            .map(|(i, label, d)| Series {
                name: label.to_string(),
                doc: *i,
                points: d
                    .points
                    .iter()
                    .filter_map(|p| {
                        let k = labels
                            .iter()
                            .position(|l| *l == format!("{}T{}Q", p.workers, p.depth))?;
                        Some(Pt {
                            x: k as f64,
                            y: p.round.iops,
                            tip: dirth_tip(p),
                            label: None,
                        })
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    }
}

/// Demand intensity: response time against IOPS, by outstanding I/Os, the chosen points
/// and the knee marked.
fn dirth_intensity(id: &str, ms: &[(usize, &str, &DirthTest)]) -> Chart {
    Chart {
        id: format!("chart-{id}-intensity"),
        title: "Demand intensity: response time against IOPS".to_string(),
        x: XAxis::Linear(Axis::new("IOPS", Quantity::Iops)),
        y: Axis::new("mean response time", Quantity::Latency),
        series: ms
            .iter()
            .map(|(i, label, d)| {
                let mut pts: Vec<&crate::protocol::pts::DirthPoint> = d.points.iter().collect();
                pts.sort_by_key(|p| (p.workers * p.depth, p.workers));
                Series {
                    name: label.to_string(),
                    doc: *i,
                    points: pts
                        .iter()
                        .map(|p| Pt {
                            x: p.round.iops,
                            y: p.round.lat_mean_ns,
                            tip: dirth_tip(p),
                            label: None,
                        })
                        .collect(),
                }
            })
            .collect(),
        bands: Vec::new(),
        marks: ms
            .iter()
            .flat_map(|(i, _, d)| {
                [
                    ("min", d.min_point),
                    ("mid", d.mid_point),
                    ("max", d.max_point),
                    ("knee", d.knee_point),
                ]
                .into_iter()
                .filter_map(move |(name, at)| {
                    let p = d.points.get(at?)?;
                    Some(Mark {
                        x: p.round.iops,
                        y: p.round.lat_mean_ns,
                        doc: *i,
                        label: format!("{name} {}T{}Q", p.workers, p.depth),
                    })
                })
            })
            .collect(),
    }
}

/// The most bars a response-time histogram chart draws (the run's own bins are about 30).
const MAX_BINS_DRAWN: usize = 64;

/// The response-time histogram at chosen point `which` (min, mid, max) of every document
/// that has one; none when no document has.
fn dirth_histogram(id: &str, ms: &[(usize, &str, &DirthTest)], which: &str) -> Option<Chart> {
    let hs: Vec<(usize, &str, &crate::protocol::pts::ResponseHistogram)> = ms
        .iter()
        .filter_map(|(i, l, d)| {
            d.histograms
                .iter()
                .find(|h| h.point == which)
                .map(|h| (*i, *l, h))
        })
        .collect();
    let (_, _, h0) = hs.first()?;
    let used = |k: usize| {
        hs.iter()
            .any(|(_, _, h)| h.counts.get(k).is_some_and(|&c| c > 0))
    };
    let n = h0.counts.len();
    let lo = (0..n).find(|&k| used(k)).unwrap_or(0);
    let hi = (0..n).rev().find(|&k| used(k)).unwrap_or(0).max(lo);
    // The run bins at 4 a decade (about 30); a document with more is drawn with
    // neighbouring bins taken together, so that a chart has at most MAX_BINS_DRAWN bars.
    let group = (hi - lo + 1).div_ceil(MAX_BINS_DRAWN);
    let bins = (hi - lo) / group + 1;
    // Group j: bins lo + j*group up to the last, labelled by its last bin's upper edge.
    let last_of = |j: usize| (lo + (j + 1) * group - 1).min(hi);
    let bin_label = |j: usize| match h0.upper_ns.get(last_of(j)) {
        Some(&u) => format!("≤ {}", f::latency(u as f64)),
        None => format!(
            "> {}",
            f::latency(h0.upper_ns.last().copied().unwrap_or(0) as f64)
        ),
    };
    let count = |h: &crate::protocol::pts::ResponseHistogram, j: usize| {
        (lo + j * group..=last_of(j))
            .map(|k| h.counts.get(k).copied().unwrap_or(0))
            .fold(0u64, u64::saturating_add)
    };
    Some(Chart {
        id: format!("chart-{id}-histogram-{which}"),
        title: format!(
            "Response-time histogram: {} IOPS point ({}T{}Q)",
            which, h0.workers, h0.depth
        ),
        x: XAxis::Category {
            name: "response time".to_string(),
            labels: (0..bins).map(bin_label).collect(),
            breaks: Vec::new(),
        },
        y: Axis::new("I/Os", Quantity::Count),
        series: hs
            .iter()
            .map(|(i, label, h)| Series {
                name: label.to_string(),
                doc: *i,
                points: (0..bins)
                    .map(|j| {
                        let c = count(h, j);
                        Pt {
                            x: j as f64,
                            y: c as f64,
                            tip: format!("{}: {} I/Os", bin_label(j), c),
                            label: None,
                        }
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    })
}
