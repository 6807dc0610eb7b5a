//! The status page at `/`: one server-rendered HTML page for an SRE (no JavaScript, no
//! network assets; it reloads itself every 10 s). Every string that comes from the status
//! (drive names, models, error messages, paths) is escaped.
//!
//! [`render`] is pure: a status and the time in, HTML out.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::fmt::{self as f, esc, opt, NONE};
use super::routes::{heartbeat, report_url};
use crate::health::model::Verdict;
use crate::schedule::RunStatus;
use crate::status::HEALTH_COLLECTOR;
use crate::status::{DriveStatus, HealthState, OpStatus, ProbeState, ProbeStatus, Status};

/// Columns of the drive table.
const DRIVE_COLUMNS: usize = 11;

/// Runs listed on the page (newest first); `/api/v1/runs` has them all.
pub const RUNS_SHOWN: usize = 25;

const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;background:#eceff4;color:#1d2430;font:14px/1.45 "DejaVu Sans","Segoe UI",Roboto,Helvetica,Arial,sans-serif}
main{max-width:1500px;margin:0 auto;padding:14px 18px 8px}
header{margin:2px 0 12px}
h1{font-size:22px;margin:0 0 2px}
h2{font-size:17px;margin:0 0 6px}
a{color:#1f5fbf}
.sub{color:#5b6576;margin:0}
.card{background:#fff;border:1px solid #d7dce5;border-radius:6px;padding:12px 16px 14px;margin:0 0 14px;overflow-x:auto}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #e3e7ee;text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}
th{background:#f5f7fa;font-weight:600;color:#333b48;white-space:nowrap}
td.n,th.n{text-align:right;white-space:nowrap}
td.nw{white-space:nowrap}
tr.down>td:first-child{border-left:4px solid #b42318}
tr.up>td:first-child{border-left:4px solid #12b76a}
tr.drive>td{border-bottom:none}
tr.canaries>td{padding-top:0}
td.wide{min-width:12em}
td.name{min-width:9em;max-width:16em;overflow-wrap:anywhere}
table.probes{font-size:12px;width:auto;margin:2px 0 0}
table.probes th,table.probes td{padding:1px 6px;border-bottom:1px solid #eef1f5}
table.probes th{background:none;color:#5b6576;font-weight:600}
ul.reasons{margin:2px 0 0;padding-left:16px;font-size:12px;color:#333b48}
.ok{color:#067647;font-weight:600}
.warn{color:#b54708;font-weight:600}
.bad{color:#b42318;font-weight:600}
.dim{color:#6b7280}
.small{font-size:12px}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:0}
dl.kv dt{color:#5b6576}
dl.kv dd{margin:0}
footer{color:#6b7280;font-size:12px;margin:0 0 14px}
"#;

/// The whole page for `status` at Unix time `now`.
pub fn render(status: &Status, now: f64) -> String {
    let mut h = String::with_capacity(16 * 1024 + status.drives.len() * 4096);
    let down = status.drives.values().filter(|d| !d.up).count();
    let n_drives = crate::units::count(status.drives.len() as u64, "drive", "drives");
    let title = if down > 0 {
        format!("driveprobe: {down} of {n_drives} down")
    } else {
        format!("driveprobe: {n_drives}")
    };
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"10\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head>\n<body><main>\n",
        esc(&title)
    );
    header(&mut h, status, now);
    overview(&mut h, status, now);
    drives(&mut h, status, now);
    runs(&mut h, status, now);
    schedules(&mut h, status, now);
    let _ = write!(
        h,
        "<footer>driveprobe {} · <a href=\"/metrics\">/metrics</a> · \
         <a href=\"/api/v1/drives\">/api/v1/drives</a> · <a href=\"/api/v1/runs\">/api/v1/runs</a> · \
         <a href=\"/healthz\">/healthz</a></footer>\n</main></body></html>\n",
        env!("CARGO_PKG_VERSION")
    );
    h
}

fn header(h: &mut String, s: &Status, now: f64) {
    let _ = writeln!(
        h,
        "<header><h1>driveprobe</h1><p class=\"sub\">Generated {} · started {} ({}) · \
         this page reloads every 10 s · <a href=\"/metrics\">metrics</a> · \
         <a href=\"/api/v1/drives\">drives JSON</a> · <a href=\"/api/v1/runs\">runs JSON</a> · \
         <a href=\"/healthz\">healthz</a></p></header>",
        f::utc(now),
        f::utc(s.started_unix),
        f::relative(s.started_unix, now),
    );
}

fn overview(h: &mut String, s: &Status, now: f64) {
    h.push_str("<section class=\"card\" id=\"overview\"><h2>Overview</h2><dl class=\"kv\">\n");

    let up = s.drives.values().filter(|d| d.up).count();
    let total = s.drives.len();
    let cls = if up == total { "ok" } else { "bad" };
    let _ = writeln!(
        h,
        "<dt>Drives up</dt><dd><span class=\"{cls}\">{up} of {total}</span></dd>"
    );

    let _ = writeln!(h, "<dt>Health</dt><dd>{}</dd>", health_overview(s));

    let sched = match heartbeat(s.scheduler.last_tick_unix, now) {
        Ok(()) => format!(
            "<span class=\"ok\">running</span> (last pass {})",
            f::relative(s.scheduler.last_tick_unix, now)
        ),
        Err(why) => format!("<span class=\"bad\">{}</span>", esc(&why.to_string())),
    };
    let _ = writeln!(h, "<dt>Scheduler</dt><dd>{sched}</dd>");
    if let Some(why) = s.threads.summary() {
        let names: Vec<&str> = s.threads.unstarted.keys().map(String::as_str).collect();
        let _ = writeln!(
            h,
            "<dt>Threads</dt><dd><span class=\"bad\">{}</span><br><span class=\"small\">without a thread: {}</span></dd>",
            esc(&why),
            esc(&names.join(", "))
        );
    }

    let c = &s.config;
    let file = match &c.path {
        Some(p) => format!("<code>{}</code>", esc(&p.display().to_string())),
        None => "built-in config".to_string(),
    };
    let reload = if c.last_reload_successful {
        format!(
            "<span class=\"ok\">loaded</span> {} ({})",
            f::utc(c.last_reload_success_unix),
            f::relative(c.last_reload_success_unix, now)
        )
    } else {
        format!(
            "<span class=\"bad\">last reload refused</span>; running the config loaded {}",
            f::utc(c.last_reload_success_unix)
        )
    };
    let _ = write!(h, "<dt>Config</dt><dd>{file}: {reload}");
    if let Some(e) = &c.last_error {
        let _ = write!(h, "<br><span class=\"bad small\">{}</span>", esc(e));
    }
    h.push_str("</dd>\n");
    state_overview(h, &s.state);
    h.push_str("</dl></section>\n");
}

/// The state directory's line: its path, and whatever is wrong with it.
fn state_overview(h: &mut String, st: &crate::status::StateStatus) {
    let _ = write!(
        h,
        "<dt>State</dt><dd><code>{}</code>",
        esc(&st.dir.display().to_string())
    );
    let mut fine = true;
    for (cls, text) in [
        ("bad", &st.ledger_held),
        ("warn", &st.insecure),
        ("warn", &st.recovered),
    ] {
        if let Some(t) = text {
            fine = false;
            let _ = write!(h, "<br><span class=\"{cls} small\">{}</span>", esc(t));
        }
    }
    if fine {
        h.push_str(": <span class=\"ok\">ok</span>");
    }
    h.push_str("</dd>\n");
}

/// The drives' health in one line: verdicts of those read, then how many failed, are
/// not read yet or have nothing to read (each drive counted once, by its health state).
fn health_overview(s: &Status) -> String {
    let mut verdicts = [0usize; 4];
    let (mut failed, mut not_yet, mut na) = (0, 0, 0);
    for d in s.drives.values() {
        match (&d.health_state, &d.health) {
            (HealthState::Read { .. }, Some(hs)) => verdicts[verdict_index(hs.verdict)] += 1,
            (HealthState::Failed { .. }, _) => failed += 1,
            (HealthState::NotApplicable { .. }, _) => na += 1,
            _ => not_yet += 1,
        }
    }
    let mut parts = Vec::new();
    for v in [
        Verdict::Failing,
        Verdict::Warning,
        Verdict::Ok,
        Verdict::Unknown,
    ] {
        let n = verdicts[verdict_index(v)];
        if n > 0 {
            parts.push(format!(
                "<span class=\"{}\">{n} {}</span>",
                verdict_class(v),
                v.name()
            ));
        }
    }
    if failed > 0 {
        parts.push(format!("<span class=\"bad\">{failed} read failed</span>"));
    }
    if not_yet > 0 {
        parts.push(format!("<span class=\"dim\">{not_yet} not read yet</span>"));
    }
    if na > 0 {
        parts.push(format!("<span class=\"dim\">{na} not applicable</span>"));
    }
    if parts.is_empty() {
        "no drives".to_string()
    } else {
        parts.join(", ")
    }
}

fn verdict_index(v: Verdict) -> usize {
    match v {
        Verdict::Ok => 0,
        Verdict::Warning => 1,
        Verdict::Failing => 2,
        Verdict::Unknown => 3,
    }
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Warning => "warn",
        Verdict::Failing => "bad",
        Verdict::Unknown => "dim",
    }
}

fn drives(h: &mut String, s: &Status, now: f64) {
    h.push_str("<section class=\"card\" id=\"drives\"><h2>Drives</h2>\n");
    if s.drives.is_empty() {
        h.push_str("<p class=\"dim\">No drives are registered in the config.</p></section>\n");
        return;
    }
    h.push_str(
        "<table class=\"drives\"><thead><tr><th>Drive</th><th>State</th><th>Model</th>\
         <th>Firmware</th><th>Serial</th><th>Health</th><th class=\"n\">Temp</th>\
         <th class=\"n\">Endurance used</th><th>Projected wear-out</th>\
         <th class=\"n\">DWPD obs. / rated</th><th class=\"n\">Wear budget: canaries today, runs over the period</th>\
         </tr></thead>\n<tbody>\n",
    );
    for d in s.drives.values() {
        drive_row(h, d, now);
    }
    h.push_str("</tbody></table></section>\n");
}

fn drive_row(h: &mut String, d: &DriveStatus, now: f64) {
    let state = if d.up { "up" } else { "down" };
    name_cell(h, d, state);

    // State, with the reason and any failing collector.
    if d.up {
        h.push_str("<td class=\"wide\"><span class=\"ok\">up</span>");
    } else {
        let _ = write!(
            h,
            "<td class=\"wide\"><span class=\"bad\">down</span><br><span class=\"small\">{}</span>",
            opt(d.down_reason.as_deref())
        );
    }
    let failing: Vec<String> = d
        .collectors
        .iter()
        // The health column says why health failed.
        .filter(|(name, c)| !c.success && name.as_str() != HEALTH_COLLECTOR)
        .map(|(name, c)| {
            format!(
                "<li><span class=\"bad\">{} failed:</span> {}</li>",
                esc(name),
                opt(c.error.as_deref())
            )
        })
        .collect();
    if !failing.is_empty() {
        let _ = write!(h, "<ul class=\"reasons\">{}</ul>", failing.concat());
    }
    h.push_str("</td>");

    let id = &d.identity;
    let _ = write!(
        h,
        "<td>{}</td><td class=\"nw\">{}</td><td class=\"nw\">{}</td>",
        opt(id.model.as_deref()),
        opt(id.firmware.as_deref()),
        opt(id.serial.as_deref())
    );

    // Health state, verdict and reasons, temperature.
    health_cells(h, d, now);

    // Endurance.
    endurance_cells(h, d, now);

    // Wear budget.
    wear_cell(h, d);

    // Canary probes, on a row of their own under the drive.
    canary_row(h, d, state);
}

/// The row's first cell: the drive's name, its device, and its target when not the device.
fn name_cell(h: &mut String, d: &DriveStatus, state: &str) {
    let _ = write!(
        h,
        "<tr class=\"drive {state}\" data-drive=\"{}\"><td class=\"name\"><b>{}</b>",
        esc(&d.name),
        esc(&d.name)
    );
    if let Some(dev) = &d.device {
        let _ = write!(
            h,
            "<br><span class=\"dim small\">{}</span>",
            esc(&dev.display().to_string())
        );
    }
    if let Some(t) = &d.target {
        if Some(t) != d.device.as_ref() {
            let _ = write!(
                h,
                "<br><span class=\"dim small\">target {}</span>",
                esc(&t.display().to_string())
            );
        }
    }
    h.push_str("</td>");
}

/// The endurance cells: share used, projected wear-out, drive writes per day.
fn endurance_cells(h: &mut String, d: &DriveStatus, now: f64) {
    match &d.endurance {
        Some(e) => {
            let used = e.used_ratio.map_or(NONE.to_string(), f::percent);
            let wearout = match e.projected_wearout_unix_seconds {
                // A date already passed (the rating used up) says so.
                Some(t) if t < now => {
                    format!("{} <span class=\"dim small\">(passed)</span>", f::date(t))
                }
                Some(t) => {
                    let left = e
                        .days_left
                        .filter(|d| d.is_finite() && *d >= 0.0)
                        .map(|d| {
                            format!(
                                " <span class=\"dim small\">({} days)</span>",
                                f::grouped(d, 0)
                            )
                        })
                        .unwrap_or_default();
                    format!("{}{left}", f::date(t))
                }
                None => NONE.to_string(),
            };
            let dwpd = format!(
                "{} / {}",
                e.drive_writes_per_day.map_or(NONE.to_string(), dwpd),
                e.rated_drive_writes_per_day.map_or(NONE.to_string(), dwpd)
            );
            let _ = write!(
                h,
                "<td class=\"n\">{used}</td><td class=\"nw\">{wearout}</td><td class=\"n\">{dwpd}</td>"
            );
        }
        None => h.push_str("<td class=\"n\">-</td><td>-</td><td class=\"n\">-</td>"),
    }
}

/// The wear budget cell: the canaries' today, the runs' over the period, skipped runs.
fn wear_cell(h: &mut String, d: &DriveStatus) {
    let w = &d.wear;
    let budget = if w.budget_bytes_per_day > 0.0 && w.budget_bytes_per_day.is_finite() {
        let share = w.written_today_bytes as f64 / w.budget_bytes_per_day;
        format!(
            "{} / {} <span class=\"dim small\">({})</span>",
            f::bytes(w.written_today_bytes as f64),
            f::bytes(w.budget_bytes_per_day),
            f::percent(share)
        )
    } else {
        format!("{} / no budget", f::bytes(w.written_today_bytes as f64))
    };
    let budget = if w.exceeded {
        format!("<span class=\"bad\">exceeded</span><br>{budget}")
    } else {
        budget
    };
    let runs = format!(
        "runs: {} / {} per {} days",
        f::bytes(w.runs_written_bytes as f64),
        f::bytes(w.runs_budget_bytes),
        w.runs_period_days
    );
    let skipped: String = d
        .skipped
        .iter()
        .map(|(name, sk)| {
            format!(
                "<br><span class=\"warn small skip\">{} skipped {}x, last at {}: {}</span>",
                esc(name),
                sk.count,
                f::utc(sk.last_unix),
                esc(&sk.last_message)
            )
        })
        .collect();
    let _ = write!(
        h,
        "<td class=\"n\">canaries: {budget}<br><span class=\"small\">{runs}</span>{skipped}</td>"
    );
}

/// The canary probes, on a row of their own under the drive.
fn canary_row(h: &mut String, d: &DriveStatus, state: &str) {
    let _ = write!(
        h,
        "</tr>\n<tr class=\"canaries {state}\"><td></td><td colspan=\"{}\"><span class=\"dim small\">canary probes</span> ",
        DRIVE_COLUMNS - 1
    );
    if d.probes.is_empty() {
        h.push_str("<span class=\"dim\">no probes</span>");
    } else {
        h.push_str(
            "<table class=\"probes\"><thead><tr><th>probe</th><th>op</th><th class=\"n\">p50</th>\
             <th class=\"n\">p99</th><th class=\"n\">p99.9</th><th class=\"n\">max</th>\
             <th class=\"n\">ops</th><th class=\"n\">errors</th></tr></thead><tbody>",
        );
        for (name, p) in &d.probes {
            probe_rows(h, name, p);
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("</td></tr>\n");
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{} {what}s", f::count(n))
    }
}

/// The health and temperature cells of a drive, from its one health state.
/// The drive's self-test in the health cell: one running now (with its share done) and
/// the last result of each `[[selftest]]` kind; empty when there is nothing to say.
fn self_test_line(d: &DriveStatus, now: f64) -> String {
    let mut out = String::new();
    let by_health = d
        .health
        .as_ref()
        .and_then(|hs| hs.report.self_test_running.as_ref());
    let running = match (&d.self_test.running, by_health) {
        (Some(r), _) => Some((
            r.kind.as_str(),
            r.done_ratio,
            r.schedule
                .as_deref()
                .map(|s| {
                    format!(
                        " ({}, started {})",
                        esc(s),
                        r.started_unix
                            .map_or(NONE.to_string(), |t| f::relative(t, now))
                    )
                })
                .unwrap_or_default(),
        )),
        (None, Some(p)) => Some((
            p.kind.as_str(),
            p.done_ratio,
            " (not started by driveprobe)".to_string(),
        )),
        (None, None) => None,
    };
    if let Some((kind, done, from)) = running {
        let done = done.map_or("progress unknown".to_string(), |r| {
            format!("{} done", f::percent(r))
        });
        let _ = write!(
            out,
            "<br><span class=\"small selftest\" data-selftest=\"running\">{} self-test running: {done}{from}</span>",
            esc(kind)
        );
    }
    for (kind, o) in &d.self_test.last {
        let class = match o.result.as_str() {
            "passed" => "ok",
            "failed" => "bad",
            _ => "warn",
        };
        let _ = write!(
            out,
            "<br><span class=\"small selftest\">last {} self-test ({}): <span class=\"{class}\">{}</span> {}<br><span class=\"dim small\">{}</span></span>",
            esc(kind),
            esc(&o.schedule),
            esc(&o.result),
            f::relative(o.ended_unix, now),
            esc(&o.message)
        );
    }
    out
}

fn health_cells(h: &mut String, d: &DriveStatus, now: f64) {
    let failed = match &d.health_state {
        HealthState::NotApplicable { reason } => {
            let _ = write!(
                h,
                "<td class=\"wide\" data-health=\"not_applicable\"><span class=\"dim\">not applicable</span><br><span class=\"dim small\">{}</span></td><td class=\"n\">-</td>",
                esc(reason)
            );
            return;
        }
        HealthState::NotReadYet => {
            h.push_str(
                "<td class=\"dim\" data-health=\"not_read_yet\">not read yet</td><td class=\"n\">-</td>",
            );
            return;
        }
        HealthState::Failed {
            reason,
            attempts,
            since_unix,
        } => Some(format!(
            "<span class=\"bad\">health read failed</span> <span class=\"dim small\">{} since {}</span><br><span class=\"small\">{}</span>",
            plural(*attempts, "attempt"),
            f::relative(*since_unix, now),
            esc(reason)
        )),
        HealthState::Read { .. } => None,
    };
    match &d.health {
        Some(hs) => {
            let _ = write!(
                h,
                "<td class=\"wide\" data-health=\"{}\">",
                d.health_state.name()
            );
            if let Some(f) = &failed {
                // The last reading that succeeded, said to be older than the failure.
                let _ = write!(h, "{f}<br><span class=\"dim small\">last reading:</span> ");
            }
            let _ = write!(
                h,
                "<span class=\"{}\">{}</span> <span class=\"dim small\">{}</span>",
                verdict_class(hs.verdict),
                hs.verdict.name(),
                f::relative(hs.read_unix, now)
            );
            if !hs.reasons.is_empty() {
                h.push_str("<ul class=\"reasons\">");
                for r in &hs.reasons {
                    let _ = write!(h, "<li>{}</li>", esc(r));
                }
                h.push_str("</ul>");
            }
            h.push_str(&self_test_line(d, now));
            h.push_str("</td>");
            let r = &hs.report;
            let temp = match r.temperature_celsius {
                Some(t) if t.is_finite() => {
                    let hot = r
                        .temperature_critical_celsius
                        .is_some_and(|c| t >= c)
                        .then_some("bad")
                        .or(r
                            .temperature_warning_celsius
                            .is_some_and(|w| t >= w)
                            .then_some("warn"));
                    match hot {
                        Some(c) => format!("<span class=\"{c}\">{} °C</span>", f::grouped(t, 0)),
                        None => format!("{} °C", f::grouped(t, 0)),
                    }
                }
                _ => NONE.to_string(),
            };
            let _ = write!(h, "<td class=\"n\">{temp}</td>");
        }
        None => {
            let _ = write!(
                h,
                "<td class=\"wide\" data-health=\"{}\">{}</td><td class=\"n\">-</td>",
                d.health_state.name(),
                failed.unwrap_or_default()
            );
        }
    }
}

fn dwpd(v: f64) -> String {
    if v > 0.0 && v < 0.01 {
        format!("{v:.4}")
    } else {
        f::sig3(v)
    }
}

fn probe_rows(h: &mut String, name: &str, p: &ProbeStatus) {
    let mut ops: Vec<(&str, &OpStatus)> = Vec::new();
    if !p.writes || p.read.ops_total > 0 || p.read.window.is_some() {
        ops.push(("read", &p.read));
    }
    if p.writes || p.write.ops_total > 0 || p.write.window.is_some() {
        ops.push(("write", &p.write));
    }
    let label = format!("{} {}", esc(name), probe_state(name, p));
    for (op, o) in ops {
        let label = &label;
        let (p50, p99, p999, max) = match &o.window {
            Some(w) => (
                f::latency_secs(w.quantiles[0]),
                f::latency_secs(w.quantiles[2]),
                f::latency_secs(w.quantiles[3]),
                f::latency_secs(w.max),
            ),
            None => Default::default(),
        };
        let or_none = |s: String| if s.is_empty() { NONE.to_string() } else { s };
        // Errors the host caused (a full or read-only filesystem, a truncated file) are
        // told apart: they do not make the drive's verdict failing.
        let host = o.errors_total.saturating_sub(o.device_errors_total);
        let errors = if o.errors_total == 0 {
            "0".to_string()
        } else if host == 0 {
            format!("<span class=\"bad\">{}</span>", f::count(o.errors_total))
        } else {
            format!(
                "<span class=\"bad\" title=\"{} caused by the host, not the drive; the last: {}\">{} \
                 <span class=\"dim\">({} host)</span></span>",
                f::count(host),
                esc(o.last_host_error.as_deref().unwrap_or("unknown")),
                f::count(o.errors_total),
                f::count(host),
            )
        };
        let _ = write!(
            h,
            "<tr><td class=\"nw\">{label}</td><td>{op}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{errors}</td></tr>",
            or_none(p50),
            or_none(p99),
            or_none(p999),
            or_none(max),
            f::count(o.ops_total),
        );
    }
}

/// The probe's state as the page says it: from its one state, with the reason, and the
/// host's CPU wait when it likely explains the latency.
fn probe_state(name: &str, p: &ProbeStatus) -> String {
    let (class, text) = match &p.state {
        ProbeState::Running => ("ok", "running".to_string()),
        ProbeState::Starting => ("dim", "starting".to_string()),
        ProbeState::Stopped => ("dim", "stopped".to_string()),
        ProbeState::Paused { reason } => ("warn", format!("paused: {}", esc(reason))),
        ProbeState::DriveDown { reason } => ("bad", format!("drive down: {}", esc(reason))),
        ProbeState::Failing { reason } => ("bad", format!("failing: {}", esc(reason))),
    };
    let mut out = format!(
        "<span class=\"{class} small\" data-probe=\"{}\" data-state=\"{}\">({text})</span>",
        esc(name),
        p.state.name()
    );
    if let Some(w) = &p.host_stall {
        // The host's part, beside the drive's figures in the row.
        let _ = write!(
            out,
            "<br><span class=\"dim small\" data-host-stall=\"{}\">host stall p50 {} · p99 {}</span>",
            esc(name),
            f::latency_secs(w.quantiles[0]),
            f::latency_secs(w.quantiles[2])
        );
    }
    // A probe the canary's own loop runs has its latency without the host's part (that
    // is the host stall above): the CPU wait cannot make its figures the host's.
    if let Some(busy) = p.cpu_wait.sentence().filter(|_| p.host_stall.is_none()) {
        let _ = write!(
            out,
            "<br><span class=\"warn small\" data-host-busy=\"{}\">{}</span>",
            esc(name),
            esc(&busy)
        );
    }
    out
}

fn run_status_class(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Passed => "ok",
        RunStatus::Running | RunStatus::Pending => "warn",
        RunStatus::Failed | RunStatus::TimedOut => "bad",
        RunStatus::Interrupted | RunStatus::Stopped | RunStatus::Skipped => "dim",
    }
}

fn run_status_name(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Running => "running",
        RunStatus::Passed => "passed",
        RunStatus::Failed => "failed",
        RunStatus::TimedOut => "timed out",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Stopped => "stopped",
        RunStatus::Pending => "result pending",
        RunStatus::Skipped => "skipped",
    }
}

fn runs(h: &mut String, s: &Status, now: f64) {
    let _ = writeln!(
        h,
        "<section class=\"card\" id=\"runs\"><h2>Last runs</h2>\
         <p class=\"sub small\">Newest first, the last {RUNS_SHOWN}; \
         <a href=\"/api/v1/runs\">/api/v1/runs</a> has all {}.</p>",
        s.runs.len()
    );
    if s.runs.is_empty() {
        h.push_str("<p class=\"dim\">No runs yet.</p></section>\n");
        return;
    }
    h.push_str(
        "<table class=\"runs\"><thead><tr><th>Run</th><th>Drive</th><th>Suite</th><th>Schedule</th>\
         <th>Status</th><th>Started</th><th class=\"n\">Duration</th><th>Report</th></tr></thead>\n<tbody>\n",
    );
    for r in s.runs.iter().rev().take(RUNS_SHOWN) {
        let started = r.started as f64;
        let duration = match r.ended {
            Some(e) => f::span(e as f64 - started),
            None if r.status == RunStatus::Running => {
                format!("{} so far", f::span(now - started))
            }
            None => NONE.to_string(),
        };
        let report = match report_url(r) {
            Some(url) => format!("<a href=\"{}\">report</a>", esc(&url)),
            None => "<span class=\"dim\">none</span>".to_string(),
        };
        let _ = writeln!(
            h,
            "<tr class=\"run\"><td class=\"nw\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"{}\">{}</td><td class=\"nw\">{}</td><td class=\"n\">{duration}</td><td>{report}</td></tr>",
            esc(&r.id),
            esc(&r.drive),
            esc(&r.suite),
            opt(r.schedule.as_deref()),
            run_status_class(r.status),
            match (s.run_notes.get(&r.id), &r.reason) {
                (Some(note), _) => esc(note),
                (None, Some(why)) => format!(
                    "{}<br><span class=\"small reason\">{}</span>",
                    run_status_name(r.status),
                    esc(why)
                ),
                (None, None) => run_status_name(r.status).to_string(),
            },
            f::utc(started),
        );
    }
    h.push_str("</tbody></table></section>\n");
}

fn schedules(h: &mut String, s: &Status, now: f64) {
    h.push_str("<section class=\"card\" id=\"schedules\"><h2>Schedules</h2>\n");
    let names: BTreeSet<&String> = s
        .scheduler
        .next_due
        .keys()
        .chain(s.scheduler.running.keys())
        .collect();
    let clock = &s.scheduler.clock;
    if clock.steps_total > 0 {
        let step = clock.last_step_seconds;
        let _ = writeln!(
            h,
            "<p class=\"warn clock\">The wall clock stepped {} {} at {} ({} step{} seen since the daemon started; {} schedule{} brought back from times saved while it was ahead).</p>",
            if step < 0.0 { "back" } else { "forward" },
            f::span(step.abs()),
            f::utc(clock.last_step_unix),
            clock.steps_total,
            if clock.steps_total == 1 { "" } else { "s" },
            clock.clamped_total,
            if clock.clamped_total == 1 { "" } else { "s" },
        );
    }
    if names.is_empty() {
        h.push_str("<p class=\"dim\">No schedules.</p></section>\n");
        return;
    }
    h.push_str(
        "<table class=\"schedules\"><thead><tr><th>Schedule</th><th>Next due</th>\
         <th>Running now</th></tr></thead>\n<tbody>\n",
    );
    for name in names {
        let due = match (s.scheduler.held.get(name), s.scheduler.next_due.get(name)) {
            (Some(held), _) => format!(
                "<span class=\"warn held\">held since {} ({}): {}</span>",
                f::utc(held.since_unix),
                f::relative(held.since_unix, now),
                esc(&held.message)
            ),
            (None, Some(&t)) => format!(
                "{} <span class=\"dim small\">({})</span>",
                f::utc(t as f64),
                f::relative(t as f64, now)
            ),
            (None, None) => NONE.to_string(),
        };
        let running = match s.scheduler.running.get(name) {
            Some(id) => format!("<span class=\"warn\">{}</span>", esc(id)),
            None => "<span class=\"dim\">no</span>".to_string(),
        };
        let _ = writeln!(
            h,
            "<tr class=\"schedule\"><td>{}</td><td class=\"nw\">{due}</td><td>{running}</td></tr>",
            esc(name)
        );
    }
    h.push_str("</tbody></table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{CollectorStatus, WindowQuantiles};

    /// A wear-out date already passed is shown as passed, not as a date to come.
    #[test]
    fn a_passed_wearout_date_says_passed() {
        let now = 1.8e9;
        let mut s = Status::default();
        for (name, at, left) in [
            ("worn", now - 30.0 * 86_400.0, 0.0),
            ("fresh", now + 400.0 * 86_400.0, 400.0),
        ] {
            s.drives.insert(
                name.into(),
                DriveStatus {
                    name: name.into(),
                    endurance: Some(crate::health::endurance::Endurance {
                        projected_wearout_unix_seconds: Some(at),
                        days_left: Some(left),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
        }
        let html = render(&s, now);
        assert_eq!(html.matches("(passed)").count(), 1, "{html}");
        assert!(html.contains("(400 days)"), "{html}");
    }

    #[test]
    fn empty_status_renders() {
        let html = render(&Status::default(), 1.7e9);
        assert!(html.contains("No drives are registered"));
        assert!(html.contains("No runs yet"));
        assert!(html.contains("No schedules"));
        assert!(html.ends_with("</html>\n"));
    }

    #[test]
    fn every_status_string_is_escaped() {
        let evil = "<script>alert('x')</script>&\"";
        let mut s = Status::default();
        let mut d = DriveStatus {
            name: evil.into(),
            down_reason: Some(evil.into()),
            health_state: HealthState::Failed {
                reason: evil.into(),
                attempts: 9,
                since_unix: 0.0,
            },
            ..Default::default()
        };
        d.identity.model = Some(evil.into());
        d.identity.serial = Some(evil.into());
        d.identity.firmware = Some(evil.into());
        d.collectors.insert(
            evil.into(),
            CollectorStatus {
                error: Some(evil.into()),
                ..Default::default()
            },
        );
        d.probes.insert(
            evil.into(),
            ProbeStatus {
                read: OpStatus {
                    ops_total: 5,
                    errors_total: 3,
                    device_errors_total: 1,
                    last_host_error: Some(evil.into()),
                    window: Some(WindowQuantiles {
                        ops: 5,
                        quantiles: [f64::NAN, f64::INFINITY, -1.0, 1e300],
                        max: f64::MAX,
                    }),
                    ..Default::default()
                },
                state: ProbeState::Paused {
                    reason: evil.into(),
                },
                ..Default::default()
            },
        );
        d.device = Some(evil.into());
        s.drives.insert(evil.into(), d);
        s.config.last_error = Some(evil.into());
        s.config.path = Some(evil.into());
        s.scheduler.next_due.insert(evil.into(), i64::MAX);
        s.scheduler.running.insert(evil.into(), evil.into());
        s.scheduler.held.insert(
            evil.into(),
            crate::status::HeldStatus {
                reason: evil.into(),
                message: evil.into(),
                due_unix: i64::MIN,
                since_unix: f64::NAN,
            },
        );
        s.runs.push(crate::schedule::RunRecord {
            id: evil.into(),
            suite: evil.into(),
            drive: evil.into(),
            schedule: Some(evil.into()),
            started: i64::MIN,
            ended: Some(i64::MAX),
            status: RunStatus::Failed,
            result_path: Some(evil.into()),
            reason: None,
            write_bound_bytes: None,
            stop: None,
            written_bytes: None,
        });
        let html = render(&s, f64::NAN);
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("'x'"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"));
        // Host errors are counted apart, their last one named (escaped, as above).
        assert!(
            html.contains("title=\"2 caused by the host, not the drive; the last: &lt;script&gt;"),
            "{html}"
        );
        assert!(html.contains(">3 <span class=\"dim\">(2 host)</span></span>"));
        // An id that is not URL-safe gets no report link.
        assert!(!html.contains("/runs/&lt;"));
    }

    fn drive_with(health: HealthState, reading: bool) -> Status {
        let mut s = Status::default();
        let mut d = DriveStatus {
            name: "a".into(),
            up: true,
            health_state: health,
            ..Default::default()
        };
        if reading {
            d.health = Some(crate::status::HealthStatus {
                report: Default::default(),
                verdict: Verdict::Ok,
                reasons: vec![],
                read_unix: 1000.0,
            });
        }
        s.drives.insert("a".into(), d);
        s
    }

    #[test]
    fn each_health_state_reads_plainly() {
        let now = 2000.0;
        let na = render(
            &drive_with(
                HealthState::NotApplicable {
                    reason: "no drive under the file target".into(),
                },
                false,
            ),
            now,
        );
        assert!(na.contains("data-health=\"not_applicable\""));
        assert!(na.contains("no drive under the file target"));
        assert!(!na.contains("not read yet"), "{na}");
        assert!(na.contains("1 not applicable"));

        let never = render(&drive_with(HealthState::NotReadYet, false), now);
        assert!(never.contains("not read yet"));
        assert!(never.contains("1 not read yet"));

        let failed = HealthState::NotReadYet.failed("smartctl refused /dev/vda".into(), 1100.0);
        let failed = (1..9).fold(failed, |f, _| {
            f.failed("smartctl refused /dev/vda".into(), now)
        });
        let f = render(&drive_with(failed.clone(), false), now);
        assert!(f.contains("health read failed"), "{f}");
        assert!(f.contains("9 attempts since"), "{f}");
        assert!(f.contains("smartctl refused /dev/vda"));
        assert!(
            !f.contains("not read yet") && !f.contains("no readings yet"),
            "{f}"
        );
        assert!(f.contains("1 read failed"));
        // With an older reading that succeeded: both, the failure first.
        let f = render(&drive_with(failed, true), now);
        let (fail_at, last_at) = (
            f.find("health read failed").unwrap(),
            f.find("last reading:").unwrap(),
        );
        assert!(fail_at < last_at, "{f}");

        let read = render(
            &drive_with(HealthState::Read { read_unix: 1000.0 }, true),
            now,
        );
        assert!(read.contains("data-health=\"read\""));
        assert!(read.contains("1 ok"));
        assert!(!read.contains("not read yet") && !read.contains("health read failed"));
    }

    #[test]
    fn each_probe_state_is_said_on_its_own_row() {
        let states = [
            (ProbeState::Starting, "(starting)"),
            (ProbeState::Running, "(running)"),
            (
                ProbeState::Paused {
                    reason: "scheduled run r (latency)".into(),
                },
                "(paused: scheduled run r (latency))",
            ),
            (
                ProbeState::DriveDown {
                    reason: "absent".into(),
                },
                "(drive down: absent)",
            ),
            (
                ProbeState::Failing {
                    reason: "EROFS".into(),
                },
                "(failing: EROFS)",
            ),
            (ProbeState::Stopped, "(stopped)"),
        ];
        for (st, text) in states {
            let mut s = drive_with(HealthState::NotReadYet, false);
            let d = s.drives.get_mut("a").unwrap();
            d.probes.insert(
                "rd".into(),
                ProbeStatus {
                    state: st.clone(),
                    ..Default::default()
                },
            );
            let html = render(&s, 2000.0);
            assert!(html.contains(text), "{st:?}: {html}");
            assert!(html.contains(&format!("data-probe=\"rd\" data-state=\"{}\"", st.name())));
        }
    }

    /// Issue 21: the host's stall is shown beside the drive's latency, where it is known.
    #[test]
    fn the_host_stall_is_shown_beside_the_probe() {
        let mut s = drive_with(HealthState::NotReadYet, false);
        let d = s.drives.get_mut("a").unwrap();
        d.probes.insert(
            "rd".into(),
            ProbeStatus {
                state: ProbeState::Running,
                host_stall: Some(WindowQuantiles {
                    ops: 100,
                    quantiles: [60e-6, 1e-4, 4e-3, 5e-3],
                    max: 6e-3,
                }),
                ..Default::default()
            },
        );
        let html = render(&s, 2000.0);
        let line = html
            .split("data-host-stall=\"rd\">")
            .nth(1)
            .and_then(|t| t.split("</span>").next())
            .unwrap_or_else(|| panic!("no host stall line: {html}"));
        assert!(line.starts_with("host stall p50 "), "{line}");
        assert!(line.contains(&f::latency_secs(4e-3)), "{line}");
        // Unknown (a probe the engine runs): no line.
        s.drives
            .get_mut("a")
            .unwrap()
            .probes
            .get_mut("rd")
            .unwrap()
            .host_stall = None;
        assert!(!render(&s, 2000.0).contains("data-host-stall"));
    }

    #[test]
    fn the_host_is_named_when_the_probe_waited_for_a_cpu() {
        // (worst interval's share, wait per I/O at the p99, the p99, named)
        for (ratio, wait, p99, busy) in [
            (None, None, None, false),
            (Some(0.003), Some(30e-6), Some(100e-6), false),
            // Review of issue 17, B5: a busy interval beside a p99 it cannot explain.
            (Some(0.41), Some(0.2e-3), Some(30e-3), false),
            (Some(0.41), Some(4.1e-3), Some(5e-3), true),
        ] {
            let mut s = drive_with(HealthState::NotReadYet, false);
            s.drives.get_mut("a").unwrap().probes.insert(
                "rd".into(),
                ProbeStatus {
                    state: ProbeState::Running,
                    cpu_wait: crate::status::CpuWait {
                        seconds_total: 1.0,
                        window_max_ratio: ratio,
                        p99_wait_seconds: wait,
                        p99_latency_seconds: p99,
                    },
                    ..Default::default()
                },
            );
            let html = render(&s, 2000.0);
            assert_eq!(html.contains("host CPU busy"), busy, "{ratio:?} {wait:?}");
            assert_eq!(
                html.contains("host CPU busy: at its p99 the probe waited about 4.10 ms per I/O for a CPU, 82% of its p99 latency (5.00 ms)"),
                busy,
                "{ratio:?}"
            );
            // Review: with the host's stall measured apart (the canary's own loop), the
            // latency is the drive's, and the sentence would blame the host wrongly.
            s.drives
                .get_mut("a")
                .unwrap()
                .probes
                .get_mut("rd")
                .unwrap()
                .host_stall = Some(WindowQuantiles {
                ops: 100,
                quantiles: [4e-3, 4e-3, 4e-3, 4e-3],
                max: 4e-3,
            });
            assert!(!render(&s, 2000.0).contains("host CPU busy"), "{ratio:?}");
        }
    }

    /// Issue 33: a due run held by the drive's self-test said "next due 41 s ago"; it
    /// says why it waits, and a step of the wall clock is shown.
    #[test]
    fn a_held_schedule_says_why_and_a_clock_step_is_shown() {
        let now = 1.8e9;
        let mut s = Status::default();
        s.scheduler.next_due.insert("s/a".into(), now as i64 - 41);
        s.scheduler.held.insert(
            "s/a".into(),
            crate::status::HeldStatus {
                reason: "selftest".into(),
                message: "s/a: due, held: drive a is running self-test st/a".into(),
                due_unix: now as i64 - 41,
                since_unix: now - 40.0,
            },
        );
        s.scheduler.clock = crate::status::ClockStatus {
            steps_total: 2,
            last_step_seconds: -31_536_000.0,
            last_step_unix: now - 10.0,
            clamped_total: 1,
        };
        let html = render(&s, now);
        let row = html
            .split("<tr class=\"schedule\">")
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap();
        assert!(
            row.contains("held since") && row.contains("drive a is running self-test st/a"),
            "{row}"
        );
        assert!(!row.contains("41 s ago"), "{row}");
        assert!(html.contains("The wall clock stepped back"), "{html}");
        assert!(html.contains("2 steps seen") && html.contains("1 schedule brought back"));
    }
}
