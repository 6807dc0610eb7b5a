//! The HTML page: a summary of the runs, then one section per measured workload, in the
//! order the suites ran them, with every document's figures overlaid.

use std::collections::HashSet;
use std::fmt::Write;

use super::chart::{color, Axis, Band, Chart, Mark, Pt, Quantity, Series, XAxis};
use super::fmt::{self as f, esc};
use crate::protocol::result::{
    burst_round, CurvePoint, DirFigures, Phase, Round, SteadyState, SuiteResult, SweepPoint,
    WorkloadDesc,
};

const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;background:#eceff4;color:#1d2430;font:14px/1.45 "DejaVu Sans","Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:1260px;margin:0 auto;padding:18px 20px 8px}
header{margin:4px 0 16px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:18px;margin:0 0 4px}
h3{font-size:15px;margin:16px 0 4px}
.sub{color:#5b6576;margin:0}
.card{background:#fff;border:1px solid #d7dce5;border-radius:6px;padding:16px 20px 18px;margin:0 0 18px;overflow-x:auto}
.meta{color:#5b6576;margin:0 0 8px}
.grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:12px 18px;margin-top:8px}
svg.chart{width:100%;height:auto;display:block;border:1px solid #edf0f4;border-radius:4px}
svg.chart text{font-family:inherit}
svg.chart circle.pt:hover{stroke:#111;stroke-width:2}
table{border-collapse:collapse;font-size:13px;margin-top:10px;width:100%}
th,td{padding:4px 9px;border-bottom:1px solid #e3e7ee;text-align:right;vertical-align:top;font-variant-numeric:tabular-nums;white-space:nowrap}
th[colspan]{text-align:center}
td.phases,td.wrap{white-space:normal}
th{background:#f5f7fa;font-weight:600;color:#333b48}
th.l,td.l{text-align:left}
td.phases{font-size:12px;color:#333b48}
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:6px;vertical-align:-1px}
.ok{color:#067647;font-weight:600}
.bad{color:#b42318;font-weight:600}
.dim{color:#6b7280}
ul.status{list-style:none;margin:4px 0 0;padding:0}
ul.status li{margin:2px 0}
footer{color:#6b7280;font-size:12px;margin:0 0 18px}
"#;

/// One document: its index (colour), label and contents.
struct Doc<'a> {
    i: usize,
    label: &'a str,
    r: &'a SuiteResult,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Steady,
    Sweep,
    Rate,
    WriteSat,
}

/// The same workload's phase of one kind from every document.
struct Group<'a> {
    kind: Kind,
    name: String,
    nth: usize,
    slug: String,
    members: Vec<(usize, &'a Phase)>,
}

enum Section {
    Group(usize),
    Rate,
    Points,
    /// An application workload (`oltp`, `kv`), every document's phases of it together.
    App(String),
    /// A SNIA PTS test (`throughput-1m`, `xsr`, `hir`), every document's run of it.
    Pts(String),
}

fn workload(p: &Phase) -> Option<(Kind, &WorkloadDesc)> {
    match p {
        Phase::SteadyState { workload, .. } => Some((Kind::Steady, workload)),
        Phase::Sweep { workload, .. } => Some((Kind::Sweep, workload)),
        Phase::RateCurve { workload, .. } => Some((Kind::Rate, workload)),
        Phase::WriteSaturation { workload, .. } => Some((Kind::WriteSat, workload)),
        _ => None,
    }
}

/// Lowercase letters, digits and dashes, for element ids.
fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t = out.trim_matches('-');
    if t.is_empty() {
        "workload".to_string()
    } else {
        t.to_string()
    }
}

/// Renders the page for `docs` (label, document), in that order and colour.
pub fn render(docs: &[(String, SuiteResult)]) -> String {
    let docs: Vec<Doc> = docs
        .iter()
        .enumerate()
        .map(|(i, (label, r))| Doc { i, label, r })
        .collect();

    let (groups, sections) = layout(&docs);
    let mut o = String::new();
    page_head(&mut o, &docs);
    summary(&mut o, &docs);
    write_sections(&mut o, &sections, &groups, &docs);
    // Issue 23: QoS qualification tables, then every phase's latency percentiles from the
    // histograms the documents keep.
    let plain: Vec<(usize, &str, &SuiteResult)> =
        docs.iter().map(|d| (d.i, d.label, d.r)).collect();
    super::exceedance::qos_section(&mut o, &plain);
    super::exceedance::section(&mut o, &plain);
    let _ = write!(
        o,
        r#"<footer>Made by driveprobe {} from {} result document{}. Hover over a point for its figures.</footer></main></body></html>"#,
        env!("CARGO_PKG_VERSION"),
        docs.len(),
        if docs.len() == 1 { "" } else { "s" }
    );
    o.push('\n');
    o
}

/// The charts' groups and the page's sections, in order of appearance: phases grouped by
/// kind and workload across the documents.
fn layout<'a>(docs: &[Doc<'a>]) -> (Vec<Group<'a>>, Vec<Section>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut sections: Vec<Section> = Vec::new();
    let mut used_ids: HashSet<String> = HashSet::new();
    for d in docs {
        let mut seen: Vec<(Kind, &str)> = Vec::new();
        for p in &d.r.phases {
            if matches!(p, Phase::Point { .. })
                && !sections.iter().any(|s| matches!(s, Section::Points))
            {
                sections.push(Section::Points);
            }
            if let Phase::Pts(t) = p {
                let key = t.key();
                if !sections
                    .iter()
                    .any(|s| matches!(s, Section::Pts(k) if *k == key))
                {
                    sections.push(Section::Pts(key));
                }
            }
            if let Phase::App { app, .. } = p {
                if !sections
                    .iter()
                    .any(|s| matches!(s, Section::App(a) if a == app))
                {
                    sections.push(Section::App(app.clone()));
                }
            }
            let Some((kind, w)) = workload(p) else {
                continue;
            };
            let nth = seen
                .iter()
                .filter(|&&(k, n)| k == kind && n == w.name)
                .count();
            seen.push((kind, &w.name));
            if let Some(g) = groups
                .iter_mut()
                .find(|g| g.kind == kind && g.name == w.name && g.nth == nth)
            {
                g.members.push((d.i, p));
                continue;
            }
            let prefix = match kind {
                Kind::Steady => "steady",
                Kind::Sweep => "sweep",
                Kind::Rate => "rate",
                Kind::WriteSat => "wsat",
            };
            let mut s = format!("{prefix}-{}", slug(&w.name));
            if nth > 0 {
                let _ = write!(s, "-{}", nth + 1);
            }
            let base = s.clone();
            let mut k = 2;
            while !used_ids.insert(s.clone()) {
                s = format!("{base}-x{k}");
                k += 1;
            }
            groups.push(Group {
                kind,
                name: w.name.clone(),
                nth,
                slug: s,
                members: vec![(d.i, p)],
            });
            if kind == Kind::Rate {
                if !sections.iter().any(|s| matches!(s, Section::Rate)) {
                    sections.push(Section::Rate);
                }
            } else {
                sections.push(Section::Group(groups.len() - 1));
            }
        }
    }
    (groups, sections)
}

/// The document start, with its style, and the page header.
fn page_head(o: &mut String, docs: &[Doc]) {
    let title = docs
        .iter()
        .map(|d| d.label)
        .collect::<Vec<_>>()
        .join(" vs ");
    let _ = write!(
        o,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>driveprobe report: {}</title><style>{STYLE}</style></head><body><main>"#,
        esc(&title)
    );
    let suites: Vec<&str> = {
        let mut v: Vec<&str> = docs.iter().map(|d| d.r.suite.as_str()).collect();
        v.dedup();
        v
    };
    let _ = write!(
        o,
        r#"<header><h1>Drive test report</h1><p class="sub">{} suite · {} result document{}{}</p></header>"#,
        esc(&suites.join(", ")),
        docs.len(),
        if docs.len() == 1 { "" } else { "s" },
        if docs.len() > 1 {
            ", overlaid in the charts"
        } else {
            ""
        }
    );
}

/// Every section of the page, in order.
fn write_sections(o: &mut String, sections: &[Section], groups: &[Group], docs: &[Doc]) {
    for s in sections {
        match s {
            Section::Group(g) => {
                let g = &groups[*g];
                match g.kind {
                    Kind::Steady => steady_section(o, g, docs),
                    Kind::Sweep => sweep_section(o, g, docs),
                    Kind::WriteSat => write_sat_section(o, g, docs),
                    Kind::Rate => {}
                }
            }
            Section::Rate => rate_section(o, groups, docs),
            Section::Points => points_section(o, docs),
            Section::App(app) => app_section(o, app, docs),
            Section::Pts(key) => {
                let members: Vec<(usize, &str, &crate::protocol::pts::PtsTest)> = docs
                    .iter()
                    .flat_map(|d| {
                        d.r.phases.iter().filter_map(move |p| match p {
                            Phase::Pts(t) if t.key() == *key => Some((d.i, d.label, t)),
                            _ => None,
                        })
                    })
                    .collect();
                super::pts_charts::section(o, key, &members);
            }
        }
    }
}

fn swatch(i: usize) -> String {
    format!(
        r#"<span class="sw" style="background:{}"></span>"#,
        color(i)
    )
}

fn doc_cell(d: &Doc) -> String {
    format!("{}{}", swatch(d.i), esc(d.label))
}

fn workload_text(w: &WorkloadDesc) -> String {
    workload_text_with(
        w,
        format!(
            "{} × queue depth {} ({} in flight)",
            count(w.workers as usize, "worker"),
            w.depth,
            u64::from(w.workers) * u64::from(w.depth)
        ),
    )
}

/// A workload's line with `load` for its workers and queue depth.
fn workload_text_with(w: &WorkloadDesc, load: String) -> String {
    let mut parts = vec![format!("{} {}", w.bs, w.rw)];
    if matches!(w.rw.as_str(), "randrw" | "rw" | "readwrite") {
        parts.push(format!(
            "{}% read, {}% write",
            w.rwmixread,
            100u32.saturating_sub(w.rwmixread)
        ));
    }
    parts.push(load);
    parts.push(format!("{} access", w.distribution));
    parts.join(" · ")
}

/// The load of a sweep: its corners and its grid, `sweep 2T2Q..16T16Q (2, 4, 8, 16
/// workers × 2, 4, 8, 16 queue depth: 16 points)`.
fn sweep_text(w: &WorkloadDesc, points: &[SweepPoint]) -> String {
    let (Some(first), Some(last)) = (
        points.iter().min_by_key(|p| (p.workers, p.depth)),
        points.iter().max_by_key(|p| (p.workers, p.depth)),
    ) else {
        return workload_text_with(w, "sweep with no point measured".to_string());
    };
    let list = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    };
    workload_text_with(
        w,
        format!(
            "sweep {}T{}Q..{}T{}Q ({} workers × {} queue depth: {} point{})",
            first.workers,
            first.depth,
            last.workers,
            last.depth,
            list(points.iter().map(|p| p.workers).collect()),
            list(points.iter().map(|p| p.depth).collect()),
            points.len(),
            if points.len() == 1 { "" } else { "s" }
        ),
    )
}

/// The workload line of a section: one line, or one per document when they differ.
fn workload_meta(o: &mut String, g: &Group, docs: &[Doc]) {
    let texts: Vec<(usize, String)> = g
        .members
        .iter()
        .filter_map(|(i, p)| match p {
            Phase::Sweep { workload, points } => Some((*i, sweep_text(workload, points))),
            p => workload(p).map(|(_, w)| (*i, workload_text(w))),
        })
        .collect();
    if texts.iter().all(|(_, t)| *t == texts[0].1) {
        let _ = write!(o, r#"<p class="meta">{}</p>"#, esc(&texts[0].1));
    } else {
        for (i, t) in texts {
            let _ = write!(
                o,
                r#"<p class="meta">{}: {}</p>"#,
                doc_cell(&docs[i]),
                esc(&t)
            );
        }
    }
}

// ---------------------------------------------------------------- summary

/// `1 point`, `2 points`.
fn count(n: usize, what: &str) -> String {
    crate::units::count(n as u64, what, &format!("{what}s"))
}

fn phase_line(p: &Phase) -> String {
    match p {
        Phase::Purge { method, seconds } => {
            format!("purge: {method}, {}", f::duration(*seconds))
        }
        Phase::Precondition {
            passes,
            bytes,
            seconds,
        } => format!(
            "precondition: {passes} pass{} of sequential writes, {} in {}",
            if *passes == 1 { "" } else { "es" },
            f::size(*bytes),
            f::duration(*seconds)
        ),
        Phase::Fill { bytes, seconds } => {
            format!("fill: {} in {}", f::size(*bytes), f::duration(*seconds))
        }
        Phase::SteadyState {
            workload,
            steady,
            rounds,
            ..
        } => format!(
            "steady state {}: {}, {}",
            workload.name,
            count(rounds.len(), "round"),
            match (steady.attained, steady.steady_round) {
                (true, Some(r)) => format!("steady at round {}", r + 1),
                (true, None) => "steady".to_string(),
                _ => "not steady".to_string(),
            }
        ),
        Phase::Sweep { workload, points } => {
            format!("sweep {}: {}", workload.name, count(points.len(), "point"))
        }
        Phase::RateCurve {
            workload, points, ..
        } => format!(
            "rate curve {}: {}",
            workload.name,
            count(points.len(), "point")
        ),
        Phase::WriteSaturation {
            workload, rounds, ..
        } => format!(
            "write saturation {}: {}",
            workload.name,
            count(rounds.len(), "round")
        ),
        Phase::Point { workload, round } => {
            format!("point {}: {} IOPS", workload.name, f::iops(round.iops))
        }
        Phase::Qos { workload, qos } => super::qos_line(&workload.name, qos),
        Phase::Pts(t) => t.summary_line(),
        Phase::App { app, points } => {
            let best = points
                .iter()
                .max_by(|a, b| a.ops_per_second.total_cmp(&b.ops_per_second));
            match best {
                Some(b) if app == "oltp" => format!(
                    "{app}: {}, peak {} TPS at {}",
                    count(points.len(), "thread count"),
                    f::iops(b.ops_per_second),
                    count(b.threads as usize, "thread")
                ),
                Some(_) => format!(
                    "{app}: {}",
                    points
                        .iter()
                        .map(|p| format!("{} {} ops/s", p.workload, f::iops(p.ops_per_second)))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => format!("{app}: no point measured"),
            }
        }
    }
}

// ---------------------------------------------------------------- application workloads

/// Every document's points of application `app`.
fn app_members<'a>(app: &str, docs: &[Doc<'a>]) -> Vec<(usize, Vec<&'a crate::app::AppPoint>)> {
    docs.iter()
        .map(|d| {
            let pts =
                d.r.phases
                    .iter()
                    .filter_map(|p| match p {
                        Phase::App { app: a, points } if a == app => Some(points.iter()),
                        _ => None,
                    })
                    .flatten()
                    .collect::<Vec<_>>();
            (d.i, pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

fn app_section(o: &mut String, app: &str, docs: &[Doc]) {
    let members = app_members(app, docs);
    if members.is_empty() {
        return;
    }
    if app == "kv" {
        kv_section(o, &members, docs);
    } else {
        by_threads_section(o, app, &members, docs);
    }
}

/// How a document's points of an application reached the drive, when they say.
fn app_io(ps: &[&crate::app::AppPoint]) -> Option<&'static str> {
    let known: Vec<bool> = ps.iter().filter_map(|p| p.direct_io).collect();
    if known.is_empty() {
        None
    } else if known.iter().all(|d| *d) {
        Some("direct I/O")
    } else if known.iter().all(|d| !*d) {
        Some("buffered I/O (no O_DIRECT)")
    } else {
        Some("direct I/O in part")
    }
}

fn app_tip(p: &crate::app::AppPoint, unit: &str) -> String {
    let mut t = format!(
        "{}: {} {unit}, average {}, p99 {}",
        count(p.threads as usize, "thread"),
        f::iops(p.ops_per_second),
        f::latency(p.lat_mean_ns),
        f::latency(p.lat_p99_ns)
    );
    if let Some(a) = p.lat_p99_avg_ns {
        let _ = write!(t, ", average per-second p99 {}", f::latency(a));
    }
    if p.errors + p.reconnects > 0 {
        let _ = write!(
            t,
            ", {}, {}",
            count(p.errors as usize, "error"),
            count(p.reconnects as usize, "reconnect")
        );
    }
    t
}

/// oltp: TPS, mean and p99 latency against the thread count.
fn by_threads_section(
    o: &mut String,
    app: &str,
    members: &[(usize, Vec<&crate::app::AppPoint>)],
    docs: &[Doc],
) {
    let (title, unit) = if app == "oltp" {
        ("Database: sysbench OLTP on MariaDB", "TPS")
    } else {
        (app, "ops/s")
    };
    let mut threads: Vec<u32> = members
        .iter()
        .flat_map(|(_, ps)| ps.iter().map(|p| p.threads))
        .collect();
    threads.sort_unstable();
    threads.dedup();
    let _ = write!(
        o,
        r#"<section class="card" id="app-{}"><h2>{}</h2>"#,
        slug(app),
        esc(title)
    );
    if app == "oltp" {
        o.push_str(r#"<p class="meta">sysbench oltp_read_write against a private MariaDB whose datadir is on the drive (InnoDB with O_DIRECT and a small buffer pool, so the drive answers), one measured run per thread count after a warm-up.</p>"#);
    }
    o.push_str(r#"<ul class="status">"#);
    for (i, ps) in members {
        if let Some(peak) = ps
            .iter()
            .max_by(|a, b| a.ops_per_second.total_cmp(&b.ops_per_second))
        {
            let mut text = format!("peak at {}", app_tip(peak, unit));
            if let Some(io) = app_io(ps) {
                let _ = write!(text, "; {io}");
            }
            let _ = write!(o, "<li>{}: {}</li>", doc_cell(&docs[*i]), esc(&text));
        }
    }
    o.push_str(r#"</ul><div class="grid">"#);
    type Get = fn(&crate::app::AppPoint) -> f64;
    let charts: [(&str, &str, &str, Quantity, Get); 3] = [
        (
            "tps",
            "Transactions per second by threads",
            "throughput",
            Quantity::Rate(unit),
            |p| p.ops_per_second,
        ),
        (
            "lat-mean",
            "Average latency by threads",
            "average latency",
            Quantity::Latency,
            |p| p.lat_mean_ns,
        ),
        (
            "lat-p99",
            "99th percentile latency by threads",
            "99th percentile",
            Quantity::Latency,
            |p| p.lat_p99_ns,
        ),
    ];
    for (id, ctitle, axis, q, get) in charts {
        let chart = Chart {
            id: format!("chart-app-{}-{id}", slug(app)),
            title: if app == "oltp" {
                ctitle.to_string()
            } else {
                ctitle.replace("Transactions", "Operations")
            },
            x: XAxis::Category {
                name: "threads".to_string(),
                labels: threads.iter().map(u32::to_string).collect(),
                breaks: Vec::new(),
            },
            y: Axis::new(axis, q),
            series: members
                .iter()
                .map(|(i, ps)| {
                    let mut ps = ps.clone();
                    ps.sort_by_key(|p| p.threads);
                    Series {
                        name: docs[*i].label.to_string(),
                        doc: *i,
                        points: ps
                            .iter()
                            .map(|p| Pt {
                                x: threads.iter().position(|&t| t == p.threads).unwrap_or(0) as f64,
                                y: get(p),
                                tip: app_tip(p, unit),
                                label: None,
                            })
                            .collect(),
                    }
                })
                .collect(),
            bands: Vec::new(),
            marks: Vec::new(),
        };
        o.push_str(&chart.svg());
    }
    o.push_str("</div></section>");
}

/// kv: per db_bench phase, latency interval by interval (compaction stalls show as spikes).
fn kv_section(o: &mut String, members: &[(usize, Vec<&crate::app::AppPoint>)], docs: &[Doc]) {
    o.push_str(r#"<section class="card" id="app-kv"><h2>Key-value store: RocksDB db_bench</h2><p class="meta">db_bench with its database on the drive: a load, then the measured phases. Latency is charted interval by interval, so compactions and journal writes that stall a weak drive show as spikes.</p><ul class="status">"#);
    for (i, ps) in members {
        let text = ps
            .iter()
            .map(|p| {
                format!(
                    "{} {} ops/s (average {}, p99 {})",
                    p.workload,
                    f::iops(p.ops_per_second),
                    f::latency(p.lat_mean_ns),
                    f::latency(p.lat_p99_ns)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let text = match app_io(ps) {
            Some(io) => format!("{text}; {io}"),
            None => text,
        };
        let _ = write!(o, "<li>{}: {}</li>", doc_cell(&docs[*i]), esc(&text));
    }
    o.push_str(r#"</ul><div class="grid">"#);
    let mut phases: Vec<&str> = Vec::new();
    for (_, ps) in members {
        for p in ps {
            if !phases.contains(&p.workload.as_str()) {
                phases.push(&p.workload);
            }
        }
    }
    for phase in phases {
        let of_phase = |ps: &[&'_ crate::app::AppPoint]| -> Vec<crate::app::AppPoint> {
            ps.iter()
                .filter(|p| p.workload == phase)
                .map(|p| (*p).clone())
                .collect()
        };
        // p99 per interval when db_bench gave it, else the mean.
        let has_p99 = members.iter().any(|(_, ps)| {
            of_phase(ps)
                .iter()
                .any(|p| p.intervals.iter().any(|i| i.lat_p99_ns.is_some()))
        });
        let stat = if has_p99 {
            "99th percentile"
        } else {
            "average"
        };
        let series: Vec<Series> = members
            .iter()
            .map(|(i, ps)| Series {
                name: docs[*i].label.to_string(),
                doc: *i,
                points: of_phase(ps)
                    .iter()
                    .flat_map(|p| p.intervals.iter())
                    .filter_map(|iv| {
                        let y = if has_p99 {
                            iv.lat_p99_ns
                        } else {
                            iv.lat_mean_ns
                        }?;
                        Some(Pt {
                            x: iv.end_seconds,
                            y,
                            tip: format!(
                                "at {:.1} s: {} ops/s, {stat} {}",
                                iv.end_seconds,
                                f::iops(iv.ops_per_second),
                                f::latency(y)
                            ),
                            label: None,
                        })
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let ops: Vec<Series> = members
            .iter()
            .map(|(i, ps)| Series {
                name: docs[*i].label.to_string(),
                doc: *i,
                points: of_phase(ps)
                    .iter()
                    .flat_map(|p| p.intervals.iter())
                    .map(|iv| Pt {
                        x: iv.end_seconds,
                        y: iv.ops_per_second,
                        tip: format!(
                            "at {:.1} s: {} ops/s",
                            iv.end_seconds,
                            f::iops(iv.ops_per_second)
                        ),
                        label: None,
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        for (id, title, axis, q, series) in [
            (
                "lat",
                format!("{phase}: {stat} latency per interval"),
                stat,
                Quantity::Latency,
                series,
            ),
            (
                "ops",
                format!("{phase}: operations per second per interval"),
                "throughput",
                Quantity::Rate("ops/s"),
                ops,
            ),
        ] {
            if series.is_empty() {
                continue;
            }
            let chart = Chart {
                id: format!("chart-app-kv-{}-{id}", slug(phase)),
                title,
                x: XAxis::Linear(Axis::new("time", Quantity::Seconds)),
                y: Axis::new(axis, q),
                series,
                bands: Vec::new(),
                marks: Vec::new(),
            };
            o.push_str(&chart.svg());
        }
    }
    o.push_str("</div></section>");
}

/// The round measured for a workload: the steady figures when a steady-state phase ran it,
/// else a fixed point's round.
fn measured(r: &SuiteResult, pred: impl Fn(&WorkloadDesc) -> bool) -> Option<&Round> {
    let steady = r.phases.iter().rev().find_map(|p| match p {
        Phase::SteadyState {
            workload,
            steady_figures,
            ..
        } if pred(workload) => Some(steady_figures),
        _ => None,
    });
    steady.or_else(|| {
        r.phases.iter().rev().find_map(|p| match p {
            Phase::Point { workload, round } if pred(workload) => Some(round),
            _ => None,
        })
    })
}

fn is_4k(w: &WorkloadDesc, name: &str, rw: &str) -> bool {
    w.name == name || (w.rw == rw && w.bs.eq_ignore_ascii_case("4k"))
}

fn is_seq128(w: &WorkloadDesc, rw: &str) -> bool {
    w.rw == rw && w.bs.eq_ignore_ascii_case("128k")
}

type RatedRow = (
    &'static str,
    fn(&crate::protocol::result::Rated) -> Option<f64>,
    fn(&SuiteResult) -> Option<f64>,
    fn(f64) -> String,
);

fn iops_text(v: f64) -> String {
    format!("{} IOPS", f::iops(v))
}

/// The summary card: each document's run and drive, then measured against rated.
fn summary(o: &mut String, docs: &[Doc]) {
    o.push_str(r#"<section class="card" id="summary"><h2>Summary</h2><table class="summary"><thead><tr><th class="l"></th>"#);
    for d in docs {
        let _ = write!(o, r#"<th class="l">{}</th>"#, doc_cell(d));
    }
    o.push_str("</tr></thead><tbody>");
    summary_row(
        o,
        "Suite",
        each(docs, &|r| {
            if r.scale.is_empty() {
                // A bench run has no scale: its own runtime.
                esc(&r.suite)
            } else {
                format!(
                    "{} <span class=\"dim\">({} scale)</span>",
                    esc(&r.suite),
                    esc(&r.scale)
                )
            }
        }),
    );
    summary_row(
        o,
        "Target",
        each(docs, &|r| {
            format!(
                "{} <span class=\"dim\">({})</span>",
                esc(&r.target),
                f::size(r.target_bytes)
            )
        }),
    );
    summary_drive_rows(o, docs);
    summary_row(o, "Engine", each(docs, &|r| esc(&r.engine)));
    summary_row(o, "driveprobe", each(docs, &|r| esc(&r.driveprobe_version)));
    summary_row(
        o,
        "Started",
        each(docs, &|r| f::utc(r.started_unix_seconds)),
    );
    summary_row(
        o,
        "Ended",
        each(docs, &|r| {
            format!(
                "{} <span class=\"dim\">({})</span>",
                f::utc(r.ended_unix_seconds),
                f::duration(r.ended_unix_seconds - r.started_unix_seconds)
            )
        }),
    );
    summary_row(
        o,
        "Run",
        each(docs, &|r| {
            if r.complete {
                r#"<span class="ok">complete</span>"#.to_string()
            } else {
                format!(
                    r#"<span class="bad">incomplete</span>: {}"#,
                    esc(r
                        .incomplete_reason
                        .as_deref()
                        .unwrap_or("no reason recorded"))
                )
            }
        }),
    );
    o.push_str(r#"<tr><th class="l">Phases</th>"#);
    for d in docs {
        let lines: Vec<String> = d.r.phases.iter().map(|p| esc(&phase_line(p))).collect();
        let _ = write!(o, r#"<td class="l phases">{}</td>"#, lines.join("<br>"));
    }
    o.push_str("</tr></tbody></table>");

    rated_table(o, docs);
    o.push_str("</section>");
}

/// One row of the summary table: a name and a cell per document.
fn summary_row(o: &mut String, name: &str, cells: Vec<String>) {
    let _ = write!(o, r#"<tr><th class="l">{}</th>"#, esc(name));
    for c in cells {
        let _ = write!(o, r#"<td class="l">{c}</td>"#);
    }
    o.push_str("</tr>");
}

/// A cell per document from its result.
fn each(docs: &[Doc], fun: &dyn Fn(&SuiteResult) -> String) -> Vec<String> {
    docs.iter().map(|d| fun(d.r)).collect()
}

/// A cell per document from its drive's identity ("-" where unknown), or none when no
/// document knows it.
fn drive_field(
    docs: &[Doc],
    fun: &dyn Fn(&crate::health::model::Identity) -> Option<String>,
) -> Option<Vec<String>> {
    let cells: Vec<Option<String>> = docs
        .iter()
        .map(|d| {
            d.r.drive
                .as_ref()
                .and_then(fun)
                .filter(|s| !s.trim().is_empty())
        })
        .collect();
    if cells.iter().all(Option::is_none) {
        None
    } else {
        Some(
            cells
                .into_iter()
                .map(|c| c.map_or_else(|| "-".to_string(), |s| esc(&s)))
                .collect::<Vec<_>>(),
        )
    }
}

/// The summary rows of the drive's identity, those some document knows.
fn summary_drive_rows(o: &mut String, docs: &[Doc]) {
    if let Some(c) = drive_field(docs, &|d| d.model.clone()) {
        summary_row(o, "Model", c);
    }
    if let Some(c) = drive_field(docs, &|d| d.serial.clone()) {
        summary_row(o, "Serial", c);
    }
    if let Some(c) = drive_field(docs, &|d| d.firmware.clone()) {
        summary_row(o, "Firmware", c);
    }
    // An unknown interface is "-", as every unknown field here (not "unknown" beside "-").
    if let Some(c) = drive_field(docs, &|d| {
        (d.transport != crate::health::model::Transport::Unknown)
            .then(|| d.transport.name().to_string())
    }) {
        summary_row(o, "Interface", c);
    }
    if let Some(c) = drive_field(docs, &|d| {
        let mut parts = Vec::new();
        if let Some(b) = d.capacity_bytes {
            parts.push(f::size(b));
        }
        if let Some(l) = d.logical_block_size {
            parts.push(format!("{l} B sectors"));
        }
        match d.rotation_rpm {
            Some(0) => parts.push("solid state".to_string()),
            Some(rpm) => parts.push(format!("{rpm} rpm")),
            None => {}
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }) {
        summary_row(o, "Capacity", c);
    }
}

/// Measured against rated, for the figures some document has a rating of.
fn rated_table(o: &mut String, docs: &[Doc]) {
    let rows: [RatedRow; 4] = [
        (
            "4K random read",
            |r| r.read_iops_4k,
            |d| measured(d, |w| is_4k(w, "4k-randread", "randread")).map(|r| r.read.iops),
            iops_text,
        ),
        (
            "4K random write",
            |r| r.write_iops_4k,
            |d| measured(d, |w| is_4k(w, "4k-randwrite", "randwrite")).map(|r| r.write.iops),
            iops_text,
        ),
        (
            "Sequential read (128K)",
            |r| r.seq_read_bytes_per_second,
            |d| measured(d, |w| is_seq128(w, "read")).map(|r| r.read.bw_bytes),
            f::bandwidth,
        ),
        (
            "Sequential write (128K)",
            |r| r.seq_write_bytes_per_second,
            |d| measured(d, |w| is_seq128(w, "write")).map(|r| r.write.bw_bytes),
            f::bandwidth,
        ),
    ];
    let rated_of = |d: &Doc, get: fn(&crate::protocol::result::Rated) -> Option<f64>| {
        d.r.rated.as_ref().and_then(get)
    };
    let shown: Vec<&RatedRow> = rows
        .iter()
        .filter(|(_, get, _, _)| docs.iter().any(|d| rated_of(d, *get).is_some()))
        .collect();
    if !shown.is_empty() {
        o.push_str(r#"<h3>Measured against rated</h3><p class="meta">Steady-state figures (or the fixed point when the workload had no steady-state phase) against the datasheet.</p><table class="rated"><thead><tr><th class="l"></th>"#);
        for d in docs {
            let _ = write!(o, r#"<th class="l">{}</th>"#, doc_cell(d));
        }
        o.push_str("</tr></thead><tbody>");
        for (name, get_rated, get_measured, show) in shown {
            let _ = write!(o, r#"<tr><th class="l">{}</th>"#, esc(name));
            for d in docs {
                let m = get_measured(d.r).filter(|v| v.is_finite());
                let r = rated_of(d, *get_rated).filter(|v| v.is_finite() && *v > 0.0);
                let cell = match (m, r) {
                    (Some(m), Some(r)) => {
                        let share = m / r;
                        let class = if share >= 0.95 { "ok" } else { "bad" };
                        format!(
                            r#"{} <span class="dim">rated {}</span> <span class="{class}">{}</span>"#,
                            show(m),
                            show(r),
                            f::percent((share * 100.0).round() / 100.0)
                        )
                    }
                    (Some(m), None) => format!(r#"{} <span class="dim">no rating</span>"#, show(m)),
                    (None, Some(r)) => format!(
                        r#"<span class="dim">not measured; rated {}</span>"#,
                        show(r)
                    ),
                    (None, None) => "-".to_string(),
                };
                let _ = write!(o, r#"<td class="l">{cell}</td>"#);
            }
            o.push_str("</tr>");
        }
        o.push_str("</tbody></table>");
    }
}

// ---------------------------------------------------------------- round metrics

struct Metric {
    id: &'static str,
    title: &'static str,
    axis: &'static str,
    q: Quantity,
    get: fn(&Round) -> f64,
}

const METRICS: [Metric; 4] = [
    Metric {
        id: "iops",
        title: "Throughput",
        axis: "throughput",
        q: Quantity::Iops,
        get: |r| r.iops,
    },
    Metric {
        id: "lat-mean",
        title: "Average latency",
        axis: "average latency",
        q: Quantity::Latency,
        get: |r| r.lat_mean_ns,
    },
    Metric {
        id: "lat-max",
        title: "Maximum latency",
        axis: "maximum latency",
        q: Quantity::Latency,
        get: |r| r.lat_max_ns as f64,
    },
    Metric {
        id: "lat-sd",
        title: "Latency standard deviation",
        axis: "latency standard deviation",
        q: Quantity::Latency,
        get: |r| r.lat_stddev_ns,
    },
];

/// All the figures of a round, for hover text.
fn round_tip(r: &Round) -> String {
    format!(
        "{}, average {}, maximum {}, std dev {}",
        iops_text(r.iops),
        f::latency(r.lat_mean_ns),
        f::latency(r.lat_max_ns as f64),
        f::latency(r.lat_stddev_ns)
    )
}

// ---------------------------------------------------------------- steady state

struct SteadyMember<'a> {
    doc: usize,
    steady: &'a SteadyState,
    rounds: &'a [Round],
    burst: &'a Round,
    figures: &'a Round,
}

fn steady_window(m: &SteadyMember) -> Option<(usize, usize)> {
    let n = m.rounds.len();
    if n == 0 {
        return None;
    }
    let last = match (m.steady.attained, m.steady.steady_round) {
        (true, Some(s)) => m.rounds.iter().position(|r| r.index == s).unwrap_or(n - 1),
        _ => n - 1,
    };
    let w = (m.steady.window_rounds as usize).max(1);
    Some(((last + 1).saturating_sub(w), last))
}

/// Which rounds (1-based, first and last) the steady figures average.
fn window_rounds_text(m: &SteadyMember) -> String {
    match steady_window(m) {
        Some((a, b)) if a == b => format!("round {}", a + 1),
        Some((a, b)) => format!("rounds {}-{}", a + 1, b + 1),
        None => "no round".to_string(),
    }
}

/// Issue 23: whether the drive held steady state in the rounds watched after it.
fn left_text(s: &crate::protocol::result::SteadyState, steady_round: Option<u32>) -> String {
    match (&s.left, steady_round) {
        (Some(l), Some(r)) => format!(
            ". <span class=\"bad left-steady\">Left steady state</span> at round {}: {} ({} from the window's mean), and the next round too: a garbage-collection cliff or a change of state, so the steady figures do not hold for long",
            r as usize + 2 + l.after,
            iops_text(l.iops),
            f::percent(l.departure_ratio.abs())
        ),
        _ if s.watch_rounds > 0 => format!(
            "; it held in the {} round{} watched after",
            s.watch_rounds,
            if s.watch_rounds == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    }
}

fn steady_status(m: &SteadyMember) -> String {
    let s = m.steady;
    let averaged = window_rounds_text(m);
    let rule = format!(
        "range {} (allowed {}), line excursion {} (allowed {})",
        f::percent(s.window_range_ratio),
        f::percent(s.max_range_ratio),
        f::percent(s.window_slope_excursion_ratio),
        f::percent(s.max_slope_excursion_ratio)
    );
    match (s.attained, s.steady_round) {
        (true, r) => format!(
            "<span class=\"ok\">steady</span> at round {} of {}: {averaged} (the steady window) average {} with {rule}{}",
            r.map_or_else(|| "?".to_string(), |r| (r + 1).to_string()),
            m.rounds.len(),
            iops_text(s.window_mean_iops),
            left_text(s, r),
        ),
        (false, _) => format!(
            "<span class=\"bad\">not steady</span>: steady state was not reached in {} round{} (limit {}); the steady figures below are the average of {averaged}, the last {} measured, which is not a steady state: {} with {rule}",
            m.rounds.len(),
            if m.rounds.len() == 1 { "" } else { "s" },
            s.max_rounds,
            steady_window(m).map_or(0, |(a, b)| b + 1 - a),
            iops_text(s.window_mean_iops),
        ),
    }
}

fn steady_section(o: &mut String, g: &Group, docs: &[Doc]) {
    let members = steady_members(g);
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Preconditioning to steady state: {}</h2>"#,
        esc(&g.slug),
        esc(&g.name)
    );
    workload_meta(o, g, docs);
    steady_notes(o, &members, docs);

    let by_time = rounds_by_time(&members);
    o.push_str(r#"<div class="grid">"#);
    for metric in &METRICS {
        o.push_str(&steady_chart(g, metric, &members, docs, by_time).svg());
    }
    o.push_str("</div>");

    steady_table(o, &members, docs);
    o.push_str("</section>");
}

/// Each document's steady-state phase of the group.
fn steady_members<'a>(g: &Group<'a>) -> Vec<SteadyMember<'a>> {
    g.members
        .iter()
        .filter_map(|(i, p)| match p {
            Phase::SteadyState {
                steady,
                rounds,
                burst,
                steady_figures,
                ..
            } => Some(SteadyMember {
                doc: *i,
                steady,
                rounds,
                // Documents before the burst was the first full round recorded round 1.
                burst: burst_round(rounds).unwrap_or(burst),
                figures: steady_figures,
            }),
            _ => None,
        })
        .collect()
}

/// The burst and steady note and each document's steady-state status.
fn steady_notes(o: &mut String, members: &[SteadyMember], docs: &[Doc]) {
    let burst_note = if members.iter().all(|m| m.rounds.len() >= 2) {
        "round 2, as round 1 also holds their start-up"
    } else {
        "round 2, as round 1 also holds their start-up; round 1 where it is the only one"
    };
    let _ = write!(
        o,
        r#"<p class="meta">Burst: the first full round after the workers started ({burst_note}). Steady: the average of the steady window, or of the last rounds when steady state was not reached.</p>"#
    );
    o.push_str(r#"<ul class="status">"#);
    for m in members {
        let _ = write!(
            o,
            "<li>{}: {}</li>",
            doc_cell(&docs[m.doc]),
            steady_status(m)
        );
    }
    o.push_str("</ul>");
}

/// Whether the rounds carry increasing times from the phase start, for a time axis
/// (else rounds are numbered).
fn rounds_by_time(members: &[SteadyMember]) -> bool {
    members.iter().all(|m| {
        m.rounds.iter().all(|r| r.end_seconds.is_finite())
            && m.rounds
                .windows(2)
                .all(|w| w[1].end_seconds > w[0].end_seconds)
            && m.rounds.first().is_none_or(|r| r.end_seconds > 0.0)
    })
}

/// The chart of one round metric: every document's rounds, steady window and burst.
fn steady_chart(
    g: &Group,
    metric: &Metric,
    members: &[SteadyMember],
    docs: &[Doc],
    by_time: bool,
) -> Chart {
    // x: seconds from the phase start when the rounds carry them, else round numbers.
    let x_of = |rounds: &[Round], k: usize| -> f64 {
        if by_time {
            rounds[k].end_seconds
        } else {
            (k + 1) as f64
        }
    };
    let x_axis = if by_time {
        XAxis::Linear(Axis::new("time", Quantity::Seconds))
    } else {
        XAxis::Linear(Axis::new("round", Quantity::Count))
    };

    let mut chart = Chart {
        id: format!("chart-{}-{}", g.slug, metric.id),
        title: metric.title.to_string(),
        x: x_axis,
        y: Axis::new(metric.axis, metric.q),
        series: Vec::new(),
        bands: Vec::new(),
        marks: Vec::new(),
    };
    for m in members {
        let d = &docs[m.doc];
        let steady = m.steady.attained;
        chart.series.push(Series {
            name: if steady {
                d.label.to_string()
            } else {
                format!("{} (not steady)", d.label)
            },
            doc: m.doc,
            points: m
                .rounds
                .iter()
                .enumerate()
                .map(|(k, r)| Pt {
                    x: x_of(m.rounds, k),
                    y: (metric.get)(r),
                    tip: format!(
                        "round {}, {}: {}",
                        r.index + 1,
                        f::duration(r.end_seconds),
                        round_tip(r)
                    ),
                    label: None,
                })
                .collect(),
        });
        if let Some((first, last)) = steady_window(m) {
            let (x0, x1) = if by_time {
                let start = if first == 0 {
                    0.0
                } else {
                    m.rounds[first - 1].end_seconds
                };
                (start, m.rounds[last].end_seconds)
            } else {
                (first as f64 + 0.5, last as f64 + 1.5)
            };
            chart.bands.push(Band {
                x0,
                x1,
                doc: m.doc,
                label: if steady {
                    "steady window".to_string()
                } else {
                    "last window, not steady".to_string()
                },
                dashed: !steady,
            });
        }
        // The burst: the first full round after the start.
        let burst_x = match m.rounds.iter().position(|r| std::ptr::eq(r, m.burst)) {
            Some(k) => x_of(m.rounds, k),
            None if by_time => m.burst.end_seconds,
            None => 1.0,
        };
        if !m.rounds.is_empty() || m.burst.iops > 0.0 {
            chart.marks.push(Mark {
                x: burst_x,
                y: (metric.get)(m.burst),
                doc: m.doc,
                label: "burst".to_string(),
            });
        }
    }
    chart
}

/// Burst against steady, per direction, for each document.
fn steady_table(o: &mut String, members: &[SteadyMember], docs: &[Doc]) {
    o.push_str(r#"<table class="steady"><thead><tr><th class="l" rowspan="2">Document</th><th class="l" rowspan="2">Direction</th><th colspan="2">IOPS</th><th colspan="2">Bandwidth</th><th colspan="2">Average latency</th><th colspan="2">Maximum latency</th><th colspan="2">Latency std dev</th></tr><tr>"#);
    for _ in 0..5 {
        o.push_str("<th>burst</th><th>steady</th>");
    }
    o.push_str("</tr></thead><tbody>");
    for m in members {
        type Pick = fn(&Round) -> DirFigures;
        let mut rows: Vec<(&str, DirFigures, DirFigures)> = Vec::new();
        let dirs: [(&str, Pick); 2] =
            [("read", |r| r.read.clone()), ("write", |r| r.write.clone())];
        for (name, pick) in dirs {
            let (b, s) = (pick(m.burst), pick(m.figures));
            if b.ops > 0 || s.ops > 0 || b.iops > 0.0 || s.iops > 0.0 {
                rows.push((name, b, s));
            }
        }
        if rows.len() > 1 {
            let all = |r: &Round| DirFigures {
                ops: r.read.ops.saturating_add(r.write.ops),
                iops: r.iops,
                bw_bytes: r.read.bw_bytes + r.write.bw_bytes,
                lat_mean_ns: r.lat_mean_ns,
                lat_stddev_ns: r.lat_stddev_ns,
                lat_max_ns: r.lat_max_ns,
                ..DirFigures::default()
            };
            rows.push(("combined", all(m.burst), all(m.figures)));
        }
        for (k, (name, b, s)) in rows.iter().enumerate() {
            o.push_str("<tr>");
            if k == 0 {
                let _ = write!(
                    o,
                    r#"<td class="l" rowspan="{}">{}</td>"#,
                    rows.len(),
                    doc_cell(&docs[m.doc])
                );
            }
            let _ = write!(
                o,
                r#"<td class="l">{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                f::iops(b.iops),
                f::iops(s.iops),
                f::bandwidth(b.bw_bytes),
                f::bandwidth(s.bw_bytes),
                f::latency(b.lat_mean_ns),
                f::latency(s.lat_mean_ns),
                f::latency(b.lat_max_ns as f64),
                f::latency(s.lat_max_ns as f64),
                f::latency(b.lat_stddev_ns),
                f::latency(s.lat_stddev_ns),
            );
        }
    }
    o.push_str("</tbody></table>");
}

// ---------------------------------------------------------------- sweep

fn sweep_section(o: &mut String, g: &Group, docs: &[Doc]) {
    let members: Vec<(usize, &[SweepPoint])> = g
        .members
        .iter()
        .filter_map(|(i, p)| match p {
            Phase::Sweep { points, .. } => Some((*i, points.as_slice())),
            _ => None,
        })
        .collect();
    let mut cats: Vec<(u32, u32)> = members
        .iter()
        .flat_map(|(_, ps)| ps.iter().map(|p| (p.workers, p.depth)))
        .collect();
    cats.sort_unstable();
    cats.dedup();
    let labels: Vec<String> = cats.iter().map(|(w, d)| format!("{w}T{d}Q")).collect();
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Thread and queue sweep: {}</h2>"#,
        esc(&g.slug),
        esc(&g.name)
    );
    workload_meta(o, g, docs);
    o.push_str(r#"<ul class="status">"#);
    for (i, ps) in &members {
        let Some(peak) = ps
            .iter()
            .max_by(|a, b| a.round.iops.total_cmp(&b.round.iops))
        else {
            continue;
        };
        let heaviest = ps
            .iter()
            .max_by_key(|p| (u64::from(p.workers) * u64::from(p.depth), p.workers))
            .unwrap_or(peak);
        let at_peak = format!(
            "peak {} at {}T{}Q",
            iops_text(peak.round.iops),
            peak.workers,
            peak.depth
        );
        let at_heaviest = format!(
            "average {}, maximum {}",
            f::latency(heaviest.round.lat_mean_ns),
            f::latency(heaviest.round.lat_max_ns as f64)
        );
        let text = if std::ptr::eq(peak, heaviest) {
            format!("{at_peak} ({at_heaviest})")
        } else {
            format!(
                "{at_peak}; at {}T{}Q {}, {at_heaviest}",
                heaviest.workers,
                heaviest.depth,
                iops_text(heaviest.round.iops)
            )
        };
        let _ = write!(o, "<li>{}: {}</li>", doc_cell(&docs[*i]), esc(&text));
    }
    o.push_str(r#"</ul><div class="grid">"#);
    for metric in &METRICS {
        let chart = Chart {
            id: format!("chart-{}-{}", g.slug, metric.id),
            title: metric.title.to_string(),
            x: XAxis::Category {
                name: "workers (T) × queue depth per worker (Q)".to_string(),
                labels: labels.clone(),
                breaks: (1..cats.len())
                    .filter(|&k| cats[k].0 != cats[k - 1].0)
                    .collect(),
            },
            y: Axis::new(metric.axis, metric.q),
            series: members
                .iter()
                .map(|(i, ps)| {
                    let mut pts: Vec<(usize, &SweepPoint)> = ps
                        .iter()
                        .map(|p| {
                            let c = cats
                                .iter()
                                .position(|&c| c == (p.workers, p.depth))
                                .unwrap_or(0);
                            (c, p)
                        })
                        .collect();
                    pts.sort_by_key(|(c, _)| *c);
                    Series {
                        name: docs[*i].label.to_string(),
                        doc: *i,
                        points: pts
                            .into_iter()
                            .map(|(c, p)| Pt {
                                x: c as f64,
                                y: (metric.get)(&p.round),
                                tip: format!("{}T{}Q: {}", p.workers, p.depth, round_tip(&p.round)),
                                label: None,
                            })
                            .collect(),
                    }
                })
                .collect(),
            bands: Vec::new(),
            marks: Vec::new(),
        };
        o.push_str(&chart.svg());
    }
    o.push_str("</div></section>");
}

// ---------------------------------------------------------------- rate curves

fn rate_section(o: &mut String, groups: &[Group], docs: &[Doc]) {
    let rate: Vec<&Group> = groups.iter().filter(|g| g.kind == Kind::Rate).collect();
    o.push_str(r#"<section class="card" id="rate-curves"><h2>Latency against load</h2><p class="meta">Each workload's maximum rate is measured first, then fixed shares of it from 10% up to 120% are asked for: average latency against the IOPS achieved, points labelled with the share asked for.</p><div class="grid">"#);
    for g in &rate {
        let series = g
            .members
            .iter()
            .filter_map(|(i, p)| match p {
                Phase::RateCurve { points, .. } => Some(Series {
                    name: docs[*i].label.to_string(),
                    doc: *i,
                    points: points
                        .iter()
                        .map(|c: &CurvePoint| Pt {
                            x: c.round.iops,
                            y: c.round.lat_mean_ns,
                            tip: format!(
                                "{} of the maximum ({} asked): {}",
                                f::percent(c.fraction),
                                iops_text(c.target_iops),
                                round_tip(&c.round)
                            ),
                            label: Some(f::percent(c.fraction)),
                        })
                        .collect(),
                }),
                _ => None,
            })
            .collect();
        let chart = Chart {
            id: format!("chart-{}", g.slug),
            title: format!("{}: latency against load", g.name),
            x: XAxis::Linear(Axis::new("achieved rate", Quantity::Iops)),
            y: Axis::new("average latency", Quantity::Latency),
            series,
            bands: Vec::new(),
            marks: Vec::new(),
        };
        o.push_str(&chart.svg());
    }
    o.push_str(r#"</div><table class="rate"><thead><tr><th class="l">Workload</th><th class="l">Document</th><th>Maximum rate</th><th>Lightest load (IOPS at latency)</th><th>Full rate</th><th>Heaviest load</th></tr></thead><tbody>"#);
    let at = |c: &CurvePoint| {
        format!(
            "{}: {} at {}",
            f::percent(c.fraction),
            f::iops(c.round.iops),
            f::latency(c.round.lat_mean_ns)
        )
    };
    for g in &rate {
        for (k, (i, p)) in g.members.iter().enumerate() {
            let Phase::RateCurve {
                max_iops, points, ..
            } = p
            else {
                continue;
            };
            o.push_str("<tr>");
            if k == 0 {
                let _ = write!(
                    o,
                    r#"<td class="l" rowspan="{}">{}</td>"#,
                    g.members.len(),
                    esc(&g.name)
                );
            }
            let lightest = points
                .iter()
                .min_by(|a, b| a.fraction.total_cmp(&b.fraction));
            let heaviest = points
                .iter()
                .max_by(|a, b| a.fraction.total_cmp(&b.fraction));
            let full = points.iter().find(|c| (c.fraction - 1.0).abs() < 1e-6);
            let _ = write!(
                o,
                r#"<td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                doc_cell(&docs[*i]),
                iops_text(*max_iops),
                lightest.map_or_else(|| "-".to_string(), at),
                full.map_or_else(|| "-".to_string(), at),
                heaviest.map_or_else(|| "-".to_string(), at),
            );
        }
    }
    o.push_str("</tbody></table></section>");
}

// ---------------------------------------------------------------- write saturation

fn write_sat_section(o: &mut String, g: &Group, docs: &[Doc]) {
    let members: Vec<(usize, &[Round], &[u64])> = g
        .members
        .iter()
        .filter_map(|(i, p)| match p {
            Phase::WriteSaturation {
                rounds,
                bytes_written,
                ..
            } => Some((*i, rounds.as_slice(), bytes_written.as_slice())),
            _ => None,
        })
        .collect();
    let _ = write!(
        o,
        r#"<section class="card" id="{}"><h2>Write saturation: {}</h2>"#,
        esc(&g.slug),
        esc(&g.name)
    );
    workload_meta(o, g, docs);
    o.push_str(r#"<ul class="status">"#);
    for (i, rounds, bytes) in &members {
        let (Some(first), Some(last)) = (rounds.first(), rounds.last()) else {
            continue;
        };
        let min = rounds.iter().map(|r| r.iops).fold(f64::INFINITY, f64::min);
        let _ = write!(
            o,
            "<li>{}: {} written in {}; {} in the first round, {} in the last (lowest {})</li>",
            doc_cell(&docs[*i]),
            f::bytes(bytes.last().copied().unwrap_or(0) as f64),
            f::duration(last.end_seconds),
            iops_text(first.iops),
            iops_text(last.iops),
            iops_text(min)
        );
    }
    o.push_str(r#"</ul><div class="grid">"#);
    let tip = |r: &Round, b: Option<u64>| {
        format!(
            "round {}, {}{}: {}",
            r.index + 1,
            f::duration(r.end_seconds),
            b.map_or_else(String::new, |b| format!(", {} written", f::bytes(b as f64))),
            round_tip(r)
        )
    };
    let by_time = Chart {
        id: format!("chart-{}-time", g.slug),
        title: "Throughput over time".to_string(),
        x: XAxis::Linear(Axis::new("time", Quantity::Seconds)),
        y: Axis::new("throughput", Quantity::Iops),
        series: members
            .iter()
            .map(|(i, rounds, bytes)| Series {
                name: docs[*i].label.to_string(),
                doc: *i,
                points: rounds
                    .iter()
                    .enumerate()
                    .map(|(k, r)| Pt {
                        x: r.end_seconds,
                        y: r.iops,
                        tip: tip(r, bytes.get(k).copied()),
                        label: None,
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    };
    let by_bytes = Chart {
        id: format!("chart-{}-bytes", g.slug),
        title: "Throughput against data written".to_string(),
        x: XAxis::Linear(Axis::new("data written", Quantity::Bytes)),
        y: Axis::new("throughput", Quantity::Iops),
        series: members
            .iter()
            .map(|(i, rounds, bytes)| Series {
                name: docs[*i].label.to_string(),
                doc: *i,
                points: rounds
                    .iter()
                    .zip(bytes.iter())
                    .map(|(r, b)| Pt {
                        x: *b as f64,
                        y: r.iops,
                        tip: tip(r, Some(*b)),
                        label: None,
                    })
                    .collect(),
            })
            .collect(),
        bands: Vec::new(),
        marks: Vec::new(),
    };
    o.push_str(&by_time.svg());
    o.push_str(&by_bytes.svg());
    o.push_str("</div></section>");
}

// ---------------------------------------------------------------- fixed points

fn p99_text(r: &Round) -> String {
    let dirs: Vec<(&str, &DirFigures)> = [("read", &r.read), ("write", &r.write)]
        .into_iter()
        .filter(|(_, d)| d.ops > 0 || d.iops > 0.0)
        .collect();
    match dirs.as_slice() {
        [] => "-".to_string(),
        [(_, d)] => f::latency(d.lat_p99_ns as f64),
        _ => dirs
            .iter()
            .map(|(n, d)| format!("{n} {}", f::latency(d.lat_p99_ns as f64)))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn points_section(o: &mut String, docs: &[Doc]) {
    // Workload names in order of appearance, each with every document's points.
    let mut names: Vec<&str> = Vec::new();
    for d in docs {
        for p in &d.r.phases {
            if let Phase::Point { workload, .. } = p {
                if !names.contains(&workload.name.as_str()) {
                    names.push(&workload.name);
                }
            }
        }
    }
    o.push_str(r#"<section class="card" id="points"><h2>Fixed workloads</h2><p class="meta">One measured round per workload.</p><table class="points"><thead><tr><th class="l">Workload</th><th class="l">Pattern</th><th class="l">Document</th><th>IOPS</th><th>Bandwidth</th><th>Average latency</th><th>99th percentile</th><th>Maximum latency</th></tr></thead><tbody>"#);
    for name in names {
        let rows: Vec<(&Doc, &WorkloadDesc, &Round)> = docs
            .iter()
            .flat_map(|d| {
                d.r.phases.iter().filter_map(move |p| match p {
                    Phase::Point { workload, round } if workload.name == name => {
                        Some((d, workload, round))
                    }
                    _ => None,
                })
            })
            .collect();
        for (k, (d, w, r)) in rows.iter().enumerate() {
            o.push_str("<tr>");
            if k == 0 {
                let _ = write!(
                    o,
                    r#"<td class="l" rowspan="{}">{}</td>"#,
                    rows.len(),
                    esc(name)
                );
            }
            let mut pattern = format!("{} {}", w.bs, w.rw);
            if matches!(w.rw.as_str(), "randrw" | "rw" | "readwrite") {
                let _ = write!(
                    pattern,
                    " {}/{}",
                    w.rwmixread,
                    100u32.saturating_sub(w.rwmixread)
                );
            }
            let _ = write!(pattern, ", {}T{}Q", w.workers, w.depth);
            let _ = write!(
                o,
                r#"<td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(&pattern),
                doc_cell(d),
                f::iops(r.iops),
                f::bandwidth(r.read.bw_bytes + r.write.bw_bytes),
                f::latency(r.lat_mean_ns),
                p99_text(r),
                f::latency(r.lat_max_ns as f64)
            );
        }
    }
    o.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::result::{Rated, SCHEMA_VERSION};

    fn rnd(index: u32, end: f64, iops: f64) -> Round {
        let d = DirFigures {
            ops: iops as u64,
            iops,
            bw_bytes: iops * 4096.0,
            lat_mean_ns: 256.0 / iops * 1e9,
            lat_stddev_ns: 1e5,
            lat_max_ns: 9_000_000,
            ..DirFigures::default()
        };
        Round {
            index,
            end_seconds: end,
            iops,
            lat_mean_ns: d.lat_mean_ns,
            lat_max_ns: d.lat_max_ns,
            lat_stddev_ns: d.lat_stddev_ns,
            slot_idle_seconds: 0.0,
            slot_uncounted_seconds: 0.0,
            in_flight_seconds: 0.0,
            due_missed_ops: 0,
            read_lat_hist: None,
            write_lat_hist: None,
            write: d,
            read: DirFigures::default(),
        }
    }

    fn wd(name: &str, rw: &str, bs: &str) -> WorkloadDesc {
        WorkloadDesc {
            name: name.into(),
            rw: rw.into(),
            bs: bs.into(),
            rwmixread: 0,
            workers: 16,
            depth: 16,
            distribution: "uniform".into(),
        }
    }

    fn doc(phases: Vec<Phase>) -> SuiteResult {
        SuiteResult {
            schema_version: SCHEMA_VERSION,
            driveprobe_version: "0.1.0".into(),
            suite: "quick".into(),
            scale: "quick".into(),
            target: "/tmp/f".into(),
            target_bytes: 1 << 30,
            drive: None,
            engine: "psync".into(),
            started_unix_seconds: 0.0,
            ended_unix_seconds: 0.0,
            complete: true,
            incomplete_reason: None,
            rated: Some(Rated {
                write_iops_4k: Some(50_000.0),
                ..Rated::default()
            }),
            phases,
        }
    }

    fn steady(rounds: Vec<Round>, attained: bool) -> Phase {
        let n = rounds.len() as u32;
        Phase::SteadyState {
            workload: wd("4k-randwrite", "randwrite", "4k"),
            steady: SteadyState {
                window_rounds: 3,
                max_range_ratio: 0.2,
                max_slope_excursion_ratio: 0.1,
                max_rounds: 10,
                attained,
                steady_round: attained.then_some(n - 1),
                window_mean_iops: 40_000.0,
                window_range_ratio: 0.05,
                window_slope_excursion_ratio: 0.02,
                watch_rounds: 0,
                left: None,
            },
            burst: rounds[0].clone(),
            steady_figures: Round::average(&rounds[rounds.len() - 3..]),
            rounds,
        }
    }

    #[test]
    fn slugs() {
        assert_eq!(slug("4k-randread"), "4k-randread");
        assert_eq!(slug("SQL 90/10"), "sql-90-10");
        assert_eq!(slug("<>"), "workload");
    }

    #[test]
    fn rounds_without_times_are_numbered() {
        let rounds: Vec<Round> = (0..5)
            .map(|i| rnd(i, 0.0, 60_000.0 - f64::from(i) * 4000.0))
            .collect();
        let html = render(&[("a".into(), doc(vec![steady(rounds, false)]))]);
        assert!(html.contains(">round<"), "x axis in rounds");
        assert!(html.contains("last window, not steady"));
        assert!(
            html.contains("not steady</span>: steady state was not reached in 5 rounds (limit 10)")
        );
        // The window of this document is 3 rounds: what the figures average is named.
        assert!(html.contains("the average of rounds 3-5, the last 3 measured"));
        assert_eq!(html.matches(r#"<circle class="pt s0""#).count(), 20);
    }

    /// Issue 23: a drive that left steady state in its watch rounds is flagged, with the
    /// round and the figure; one that held says so.
    #[test]
    fn leaving_steady_state_is_flagged() {
        let rounds: Vec<Round> = [60e3, 60e3, 60e3, 61e3, 40e3, 39e3]
            .iter()
            .enumerate()
            .map(|(i, &v)| rnd(i as u32, (i + 1) as f64, v))
            .collect();
        let mut p = steady(rounds, true);
        if let Phase::SteadyState { steady, .. } = &mut p {
            steady.steady_round = Some(2);
            steady.watch_rounds = 3;
            steady.left = crate::protocol::steady::left_steady(
                60e3,
                &[61e3, 40e3, 39e3],
                &crate::protocol::steady::Rule::default(),
            );
            assert!(steady.left.is_some());
        }
        let html = render(&[("a".into(), doc(vec![p.clone()]))]);
        assert!(
            html.contains(
                "Left steady state</span> at round 5: 40,000 IOPS (33.3% from the window's mean)"
            ),
            "{}",
            &html[html.find("steady</span> at").unwrap_or(0)..][..400]
        );
        if let Phase::SteadyState { steady, .. } = &mut p {
            steady.left = None;
        }
        let html = render(&[("a".into(), doc(vec![p]))]);
        assert!(!html.contains("Left steady state"));
        assert!(html.contains("it held in the 3 rounds watched after"));
    }

    #[test]
    fn rated_compares_steady_figures_before_points() {
        let rounds: Vec<Round> = (0..4)
            .map(|i| rnd(i, f64::from(i + 1) * 30.0, 40_000.0))
            .collect();
        let phases = vec![
            Phase::Point {
                workload: wd("4k-randwrite", "randwrite", "4k"),
                round: rnd(0, 60.0, 10_000.0),
            },
            steady(rounds, true),
        ];
        let html = render(&[("a".into(), doc(phases))]);
        assert!(
            html.contains(
                r#"40,000 IOPS <span class="dim">rated 50,000 IOPS</span> <span class="bad">80%</span>"#
            ),
            "{html}"
        );
        assert!(html.contains(">time (s)<"));
        assert!(html.contains(">steady window<"));
    }

    #[test]
    fn sweep_lines_break_between_thread_counts() {
        let points = [(2, 2), (2, 4), (4, 2), (4, 4)]
            .iter()
            .map(|&(workers, depth)| SweepPoint {
                workers,
                depth,
                round: rnd(0, 60.0, f64::from(workers * depth) * 1000.0),
            })
            .collect();
        let html = render(&[(
            "a".into(),
            doc(vec![Phase::Sweep {
                workload: wd("8k-70-30", "randrw", "8k"),
                points,
            }]),
        )]);
        let svg = &html[html.find(r#"id="chart-sweep-8k-70-30-iops""#).unwrap()..];
        let svg = &svg[..svg.find("</svg>").unwrap()];
        let path = svg.split(r#"<path class="ln s0" d=""#).nth(1).unwrap();
        let path = &path[..path.find('"').unwrap()];
        assert_eq!(path.matches('M').count(), 2, "{path}");
        for label in [">2T2Q<", ">2T4Q<", ">4T2Q<", ">4T4Q<"] {
            assert!(svg.contains(label));
        }
    }

    fn app_point(workload: &str, threads: u32, tps: f64, intervals: usize) -> crate::app::AppPoint {
        crate::app::AppPoint {
            workload: workload.into(),
            threads,
            seconds: intervals as f64,
            ops_per_second: tps,
            queries_per_second: Some(tps * 20.0),
            lat_mean_ns: threads as f64 / tps * 1e9,
            lat_p99_ns: 3.0 * threads as f64 / tps * 1e9,
            lat_p99_avg_ns: Some(2.5 * threads as f64 / tps * 1e9),
            errors: 0,
            reconnects: 0,
            intervals: (1..=intervals)
                .map(|k| crate::app::AppInterval {
                    end_seconds: k as f64,
                    ops_per_second: tps,
                    lat_mean_ns: Some(1e6),
                    // One compaction stall at the third interval.
                    lat_p99_ns: Some(if k == 3 { 90e6 } else { 4e6 }),
                })
                .collect(),
            direct_io: None,
        }
    }

    fn with_io(mut p: crate::app::AppPoint, direct: bool) -> crate::app::AppPoint {
        p.direct_io = Some(direct);
        p
    }

    #[test]
    fn counts_in_tooltips_and_workload_lines_agree_with_their_nouns() {
        let mut p = app_point("oltp_read_write", 1, 100.0, 2);
        p.errors = 1;
        p.reconnects = 1;
        let t = app_tip(&p, "TPS");
        assert!(t.contains(", 1 error, 1 reconnect"), "{t}");
        p.errors = 2;
        p.reconnects = 3;
        let t = app_tip(&p, "TPS");
        assert!(t.contains(", 2 errors, 3 reconnects"), "{t}");
        let mut w = wd("4k-randread", "randread", "4k");
        (w.workers, w.depth) = (1, 1);
        let t = workload_text(&w);
        assert!(t.contains("1 worker × queue depth 1 (1 in flight)"), "{t}");
        (w.workers, w.depth) = (4, 8);
        let t = workload_text(&w);
        assert!(
            t.contains("4 workers × queue depth 8 (32 in flight)"),
            "{t}"
        );
    }

    #[test]
    fn application_phases_get_their_charts() {
        let oltp = Phase::App {
            app: "oltp".into(),
            points: vec![
                with_io(app_point("oltp_read_write", 2, 400.0, 3), false),
                with_io(app_point("oltp_read_write", 8, 900.0, 3), false),
                with_io(app_point("oltp_read_write", 32, 1200.0, 3), false),
            ],
        };
        let kv = Phase::App {
            app: "kv".into(),
            points: vec![
                with_io(app_point("readwhilewriting", 2, 50_000.0, 5), true),
                with_io(app_point("overwrite", 2, 30_000.0, 5), true),
            ],
        };
        let a = doc(vec![oltp.clone(), kv.clone()]);
        let b = doc(vec![oltp]);
        let html = render(&[("a".into(), a), ("b".into(), b)]);
        for id in [
            r#"id="app-oltp""#,
            r#"id="chart-app-oltp-tps""#,
            r#"id="chart-app-oltp-lat-mean""#,
            r#"id="chart-app-oltp-lat-p99""#,
            r#"id="app-kv""#,
            r#"id="chart-app-kv-readwhilewriting-lat""#,
            r#"id="chart-app-kv-overwrite-lat""#,
            r#"id="chart-app-kv-overwrite-ops""#,
        ] {
            assert!(html.contains(id), "{id} missing");
        }
        // TPS by threads in its own unit, threads as categories, both documents' series.
        assert!(html.contains("TPS"), "no TPS axis");
        assert!(html.contains("2 threads: 400 TPS"), "no tip for 2 threads");
        assert!(html.contains("32 threads: 1,200 TPS"));
        // The kv spike is a point of its own (the p99 of interval 3).
        assert!(
            html.contains("at 3.0 s: 50,000 ops/s, 99th percentile 90"),
            "no spike tip"
        );
        // The summary names the phases.
        assert!(html.contains("oltp: 3 thread counts, peak"));
        // The oltp section comes before the kv section, as the phases ran.
        assert!(html.find("app-oltp").unwrap() < html.find("app-kv").unwrap());
        // How the data reached the drive, per document.
        let kv_html = &html[html.find(r#"id="app-kv""#).unwrap()..];
        assert!(kv_html.contains("ops/s (average "), "no kv status line");
        assert!(
            kv_html.contains("); direct I/O</li>"),
            "kv direct I/O not shown"
        );
        let oltp_html =
            &html[html.find(r#"id="app-oltp""#).unwrap()..html.find(r#"id="app-kv""#).unwrap()];
        assert_eq!(
            oltp_html
                .matches("; buffered I/O (no O_DIRECT)</li>")
                .count(),
            2,
            "oltp I/O not shown for both documents"
        );
        // A point that does not say (an older document) shows nothing.
        let old = doc(vec![Phase::App {
            app: "kv".into(),
            points: vec![app_point("overwrite", 2, 30_000.0, 5)],
        }]);
        let html = render(&[("old".into(), old)]);
        assert!(!html.contains("direct I/O") && !html.contains("buffered I/O"));
    }
}
