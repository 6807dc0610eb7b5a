//! `driveprobe bench --suite NAME`: a whole suite of the drive test protocol, with a
//! progress bar per phase, a summary table at the end, and the result document.

use std::fmt::Write as _;
use std::io::IsTerminal;

use super::bench::{self, Amount, BenchArgs, OutputFormat};
use super::Failure;
use crate::app::AppPoint;
use crate::health::model::{Identity, Transport};
use crate::protocol::result::{CurvePoint, Phase, Rated, Round, SuiteResult, SweepPoint};
use crate::protocol::steady::Check;
use crate::protocol::suite::{self, Observer, Scale, SuiteOptions};
use crate::target::{Target, TargetKind};
use crate::units;

/// `--list-suites`.
pub fn list() -> String {
    let mut out = String::new();
    for s in suite::suites() {
        out.push_str(&format!("{}\n  {}\n", s.name, s.about));
        for step in s.describe_steps() {
            out.push_str(&format!("    - {step}\n"));
        }
    }
    out.push_str("\nScales (--scale): quick (0.5 s rounds, at most 10: enterprise takes about 35 s on a 256 MiB file), standard (10 s rounds, at most 25), full (60 s rounds, at most 25, as SNIA PTS).\n");
    out
}

fn scale(a: &BenchArgs) -> Result<Scale, Failure> {
    let mut s = Scale::named(&a.scale).map_err(Failure::usage)?;
    if let Some(r) = &a.round_time {
        s.round = bench::duration("round-time", r)?;
        if s.round.is_zero() {
            return Err(Failure::usage("--round-time: must be more than 0"));
        }
    }
    if let Some(m) = a.max_rounds {
        if (m as usize) < s.rule.window {
            return Err(Failure::usage(format!(
                "--max-rounds: at least {} (the steady-state window)",
                s.rule.window
            )));
        }
        s.rule.max_rounds = m as usize;
    }
    if let Some(p) = a.precondition_passes {
        s.precondition_passes = p;
    }
    Ok(s)
}

fn rated(a: &BenchArgs) -> Result<Option<Rated>, Failure> {
    let bw = |flag: &str, v: &Option<String>| -> Result<Option<f64>, Failure> {
        v.as_deref()
            .map(|t| {
                units::parse_rated_size(t, units::Rating::PerSecond)
                    .map(|b| b as f64)
                    .map_err(|e| Failure::usage(format!("--{flag}: {e}")))
            })
            .transpose()
    };
    let r = Rated {
        read_iops_4k: a.rated_read_iops,
        write_iops_4k: a.rated_write_iops,
        seq_read_bytes_per_second: bw("rated-seq-read", &a.rated_seq_read)?,
        seq_write_bytes_per_second: bw("rated-seq-write", &a.rated_seq_write)?,
    };
    Ok((r != Rated::default()).then_some(r))
}

fn identity(target: &Target) -> Option<Identity> {
    match target.kind() {
        TargetKind::BlockDevice { device: info } => Some(Identity {
            model: info.identity.model.clone(),
            serial: info.identity.serial.clone(),
            wwn: info.identity.wwn.clone(),
            transport: if info.name.starts_with("nvme") {
                Transport::Nvme
            } else {
                Transport::Unknown
            },
            capacity_bytes: Some(info.size_bytes),
            logical_block_size: Some(info.logical_block_size),
            ..Default::default()
        }),
        TargetKind::File => None,
    }
}

/// Progress on stderr: a bar per phase on a terminal, a line per phase otherwise.
struct Progress {
    tty: bool,
    quiet: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl Observer for Progress {
    fn phase(&mut self, index: usize, total: usize, what: &str, max_rounds: u32) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        if self.quiet {
            return;
        }
        let head = format!("[{}/{}] {what}", index + 1, total);
        if self.tty && max_rounds > 0 {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(max_rounds as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(s) = indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:20}] round {pos}/{len} (at most) {msg} eta {eta}",
            ) {
                bar.set_style(s.progress_chars("=> "));
            }
            bar.set_prefix(head);
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
            self.bar = Some(bar);
        } else {
            eprintln!("driveprobe: {head}");
        }
    }

    fn note(&mut self, what: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(b) => b.set_message(what.to_string()),
            None => eprintln!("driveprobe:   {what}"),
        }
    }

    fn round(&mut self, round: &Round, steady: Option<&Check>) {
        if let Some(b) = &self.bar {
            b.inc(1);
            let mut msg = format!("{:.0} IOPS, avg {}", round.iops, ms(round.lat_mean_ns));
            if let Some(c) = steady {
                msg += &format!(
                    ", window range {:.0}% slope {:.0}%{}",
                    c.range_ratio * 100.0,
                    c.excursion_ratio * 100.0,
                    if c.steady { " STEADY" } else { "" }
                );
            }
            b.set_message(msg);
        }
    }
}

fn ms(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.1} us", ns / 1e3)
    }
}

/// `--suite qos` with its table (`--qos-targets`, else the embedded one) and class.
fn qos_suite(a: &BenchArgs) -> Result<suite::Suite, Failure> {
    use crate::protocol::qos::QosTable;
    let table = match &a.qos_targets {
        Some(path) => {
            // A table of a few classes: a regular file of text, bounded, not waited on.
            const QOS_TABLE: crate::file::Limit = crate::file::Limit {
                bytes: 1 << 20,
                what: "a QoS targets table",
            };
            let text = crate::file::read_regular_text(path, QOS_TABLE)
                .map_err(|e| Failure::usage(format!("--qos-targets {}: {e}", path.display())))?;
            QosTable::parse(&text, &path.display().to_string()).map_err(Failure::usage)?
        }
        None => QosTable::default_table(),
    };
    suite::qos_suite(&table, a.qos_class.as_deref()).map_err(Failure::usage)
}

pub fn run(a: &BenchArgs) -> Result<u8, Failure> {
    let suite = match &a.fio_job {
        Some(job) => {
            let limit = match &a.runtime {
                Some(r) => bench::duration("runtime", r)?,
                None => std::time::Duration::from_secs(3600),
            };
            suite::fio_job_suite(job, limit)
        }
        None if a.suite.as_deref() == Some("qos") => qos_suite(a)?,
        None => suite::find(a.suite.as_deref().unwrap_or_default()).map_err(Failure::usage)?,
    };
    if a.suite.as_deref() != Some("qos") && (a.qos_targets.is_some() || a.qos_class.is_some()) {
        return Err(Failure::usage(
            "--qos-targets and --qos-class go with --suite qos",
        ));
    }
    if a.offset.is_some() {
        return Err(Failure::usage(
            "--offset does not apply to suites: they use the whole target (give a file or device of the size to test)",
        ));
    }
    let scale = scale(a)?;
    // A QoS table the scale cannot support: refused before the target is touched.
    for step in &suite.steps {
        if let suite::Step::Qos(row) = step {
            crate::protocol::qos::ios_per_probe(row, scale.name).map_err(Failure::usage)?;
        }
    }
    let rated = rated(a)?;
    let size = a
        .size
        .as_deref()
        .map(|s| bench::amount("size", s))
        .transpose()?;
    if matches!(size, Some(Amount::Fraction(_))) {
        return Err(Failure::usage(
            "--size with a suite is the size of a file to create, in bytes",
        ));
    }
    let direct = !(a.buffered || a.direct == Some(0));
    let target = bench::prepare_target(a, size, None, true, direct)?;
    let opts = SuiteOptions {
        scale,
        drive: identity(&target),
        rated,
        seed: a.seed,
        // Ctrl-C sets only the control's flag: a run stopped without a reason was
        // stopped by a signal.
        stop: Default::default(),
        hist_digits: a.hist_digits,
        bound: None,
    };
    let control = bench::stop_on_signals();
    let json = a.output_format == OutputFormat::Json;
    let mut progress = Progress {
        tty: std::io::stderr().is_terminal(),
        quiet: json,
        bar: None,
    };
    let (mut result, error) = suite::run_suite(&suite, &target, &opts, &control, &mut progress);
    if let Some(job) = &a.fio_job {
        // The same name a schedule of this job file gives its runs, so a report puts the
        // two side by side.
        result.suite = crate::config::fio_job_label(job);
    }
    if let Some(b) = progress.bar.take() {
        b.finish_and_clear();
    }
    super::emit(&result, a.output.as_deref(), json, || summary(&result))?;
    match error {
        Some(e) => Err(Failure::runtime(e)),
        None if !result.complete => Err(Failure::runtime(format!(
            "suite {} incomplete: {}",
            result.suite,
            result.incomplete_reason.as_deref().unwrap_or("stopped")
        ))),
        None => Ok(0),
    }
}

/// The summary table printed at the end.
pub fn summary(r: &SuiteResult) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "suite {} ({} scale) on {}, engine {}, {:.0} s{}",
        r.suite,
        r.scale,
        r.target,
        r.engine,
        r.ended_unix_seconds - r.started_unix_seconds,
        if r.complete { "" } else { ", INCOMPLETE" }
    );
    let mut steady_rows = Vec::new();
    for p in &r.phases {
        match steady_row(p) {
            Some(row) => steady_rows.push(row),
            None => phase_lines(&mut o, p),
        }
    }
    steady_table(&mut o, &steady_rows);
    if let Some(why) = &r.incomplete_reason {
        let _ = writeln!(o, "  incomplete: {why}");
    }
    o
}

/// Writes the summary lines of one phase (steady-state phases go in `steady_table`).
fn phase_lines(o: &mut String, p: &Phase) {
    match p {
        Phase::Purge { method, seconds } => {
            let _ = writeln!(o, "  purge: {method} ({seconds:.1} s)");
        }
        Phase::Precondition {
            passes,
            bytes,
            seconds,
        } => {
            let _ = writeln!(
                o,
                "  precondition: {}, {} written ({seconds:.1} s)",
                units::count(u64::from(*passes), "pass", "passes"),
                units::format_size(*bytes)
            );
        }
        Phase::Fill { bytes, seconds } => {
            let _ = writeln!(
                o,
                "  fill: {} written ({seconds:.1} s)",
                units::format_size(*bytes)
            );
        }
        // A row of the table at the end: see `steady_row`.
        Phase::SteadyState { .. } => {}
        Phase::Sweep { workload, points } => sweep_lines(o, &workload.name, points),
        Phase::RateCurve {
            workload,
            max_iops,
            points,
        } => rate_curve_line(o, &workload.name, *max_iops, points),
        Phase::Qos { workload, qos } => {
            let _ = writeln!(o, "  {}", crate::report::qos_line(&workload.name, qos));
        }
        Phase::WriteSaturation {
            workload,
            rounds,
            bytes_written,
        } => write_saturation_line(o, &workload.name, rounds, bytes_written),
        Phase::Point { workload, round } => point_line(o, &workload.name, round),
        Phase::Pts(t) => {
            let _ = writeln!(o, "  {}", t.summary_line());
        }
        Phase::App { app, points } => app_lines(o, app, points),
    }
}

/// The row of the steady-state table for a steady-state phase; None for other phases.
fn steady_row(p: &Phase) -> Option<String> {
    let Phase::SteadyState {
        workload,
        steady,
        rounds,
        burst,
        steady_figures,
    } = p
    else {
        return None;
    };
    Some(format!(
        "  {:<14} {:>10.0} {:>10.0} {:>10} {:>10} {:>10} {:>10}  {}",
        workload.name,
        burst.iops,
        steady_figures.iops,
        ms(steady_figures.lat_mean_ns),
        ms(steady_figures.lat_max_ns as f64),
        ms(steady_figures.lat_stddev_ns),
        rounds.len(),
        match steady.steady_round {
            Some(s) if steady.left.is_some() => format!(
                "steady at round {}, LEFT it at round {}",
                s + 1,
                s as usize + 2 + steady.left.map_or(0, |l| l.after)
            ),
            Some(s) => format!("steady at round {}", s + 1),
            None => "NOT steady".to_string(),
        }
    ))
}

/// Writes the steady-state table: a heading, then the rows (nothing when there are none).
fn steady_table(o: &mut String, rows: &[String]) {
    if !rows.is_empty() {
        let _ = writeln!(
            o,
            "  {:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "workload", "burst IOPS", "steady", "avg lat", "max lat", "stddev", "rounds"
        );
        for row in rows {
            let _ = writeln!(o, "{row}");
        }
    }
}

/// Writes a sweep: a heading, then a line per thread/queue point.
fn sweep_lines(o: &mut String, workload: &str, points: &[SweepPoint]) {
    let _ = writeln!(o, "  sweep of {workload}:");
    for pt in points {
        let _ = writeln!(
            o,
            "    {:>6} {:>10.0} IOPS  avg {:>10}  max {:>10}",
            format!("{}T{}Q", pt.workers, pt.depth),
            pt.round.iops,
            ms(pt.round.lat_mean_ns),
            ms(pt.round.lat_max_ns as f64)
        );
    }
}

/// Writes a rate curve's line: its maximum and the latency at 10, 50, 100 and 120% of it.
fn rate_curve_line(o: &mut String, workload: &str, max_iops: f64, points: &[CurvePoint]) {
    let at = |f: f64| {
        points
            .iter()
            .find(|p| (p.fraction - f).abs() < 1e-9)
            .map(|p| ms(p.round.lat_mean_ns))
            .unwrap_or_else(|| "-".into())
    };
    let _ = writeln!(
        o,
        "  curve {:<26} max {:>10.0} IOPS; avg latency at 10% {}, 50% {}, 100% {}, 120% {}",
        workload,
        max_iops,
        at(0.1),
        at(0.5),
        at(1.0),
        at(1.2)
    );
}

/// Writes a write-saturation line: rounds, bytes written, first and last IOPS.
fn write_saturation_line(o: &mut String, workload: &str, rounds: &[Round], bytes_written: &[u64]) {
    let _ = writeln!(
        o,
        "  write saturation {}: {}, {} written, first {:.0} IOPS, last {:.0} IOPS",
        workload,
        units::count(rounds.len() as u64, "round", "rounds"),
        units::format_size(bytes_written.last().copied().unwrap_or(0)),
        rounds.first().map_or(0.0, |r| r.iops),
        rounds.last().map_or(0.0, |r| r.iops)
    );
}

/// Writes a fixed workload's line: IOPS and latencies.
fn point_line(o: &mut String, workload: &str, round: &Round) {
    let _ = writeln!(
        o,
        "  {:<22} {:>10.0} IOPS  avg {:>10}  p99 {:>10}  max {:>10}",
        workload,
        round.iops,
        ms(round.lat_mean_ns),
        ms(round.read.lat_p99_ns.max(round.write.lat_p99_ns) as f64),
        ms(round.lat_max_ns as f64)
    );
}

/// Writes an application run: a heading, then a line per thread count or phase.
fn app_lines(o: &mut String, app: &str, points: &[AppPoint]) {
    let unit = if app == "oltp" { "TPS" } else { "ops/s" };
    let _ = writeln!(o, "  {app}:");
    for p in points {
        let _ = writeln!(
            o,
            "    {:<18} {:>3} threads {:>10.0} {unit}  avg {:>10}  p99 {:>10}  avg p99 {:>10}{}",
            p.workload,
            p.threads,
            p.ops_per_second,
            ms(p.lat_mean_ns),
            ms(p.lat_p99_ns),
            p.lat_p99_avg_ns.map_or_else(|| "-".to_string(), ms),
            if p.errors + p.reconnects > 0 {
                format!(
                    "  ({}, {})",
                    units::count(p.errors, "error", "errors"),
                    units::count(p.reconnects, "reconnect", "reconnects")
                )
            } else {
                String::new()
            }
        );
    }
}
