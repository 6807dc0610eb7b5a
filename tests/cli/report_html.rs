//! `driveprobe report`: the HTML page from suite result documents. The two fixtures in
//! tests/fixtures/results/ are made by the generator below (realistic figures after
//! the published reviews in docs/protocol.md: an SSD800MM-like SAS drive and a
//! read-intensive SATA drive); regenerate them with `UPDATE_FIXTURES=1 cargo test --test cli report_html::`.
//!
//! The page is checked as text (a chart per series, a marker per data point, escaping, no
//! network references), through the CLI, and in headless Chromium (Debian's `chromium`):
//! a screenshot that is not blank and a DOM that holds the charts.

use crate::common;

use common::chromium;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use driveprobe::health::model::{Identity, Transport};
use driveprobe::protocol::result::{
    CurvePoint, DirFigures, Phase, Rated, Round, SteadyState, SuiteResult, SweepPoint,
    WorkloadDesc, SCHEMA_VERSION,
};
use driveprobe::report;

// ------------------------------------------------------------------ fixture generator

/// Deterministic noise (xorshift64*).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
    /// 1 +- share.
    fn jitter(&mut self, share: f64) -> f64 {
        1.0 + (self.unit() * 2.0 - 1.0) * share
    }
}

fn wl(name: &str, rw: &str, bs: &str, read: u32, workers: u32, depth: u32) -> WorkloadDesc {
    WorkloadDesc {
        name: name.into(),
        rw: rw.into(),
        bs: bs.into(),
        rwmixread: read,
        workers,
        depth,
        distribution: "uniform".into(),
    }
}

fn bs_bytes(w: &WorkloadDesc) -> f64 {
    match w.bs.as_str() {
        "4k" => 4096.0,
        "8k" => 8192.0,
        "128k" => 131_072.0,
        other => panic!("no size for {other}"),
    }
}

fn dir(iops: f64, secs: f64, bs: f64, mean: f64, sd: f64, max: f64) -> DirFigures {
    if iops <= 0.0 {
        return DirFigures::default();
    }
    let max = max.max(mean + 4.5 * sd);
    DirFigures {
        ops: (iops * secs).round() as u64,
        iops,
        bw_bytes: iops * bs,
        lat_mean_ns: mean,
        lat_stddev_ns: sd,
        lat_max_ns: max as u64,
        lat_p50_ns: (mean * 0.9) as u64,
        lat_p99_ns: (mean + 2.6 * sd) as u64,
        lat_p99_9_ns: (mean + 4.0 * sd) as u64,
    }
}

/// One round with `iops` in all, the given read share, mean, stddev and max latency
/// (ns), combined as result.rs documents (means weighted by ops, max the larger).
#[allow(clippy::too_many_arguments)]
fn round(
    index: u32,
    end: f64,
    secs: f64,
    w: &WorkloadDesc,
    iops: f64,
    mean: f64,
    sd: f64,
    max: f64,
) -> Round {
    let share = f64::from(w.rwmixread) / 100.0;
    let bs = bs_bytes(w);
    // In a mix, reads complete faster than writes.
    let (rm, wm, rmax) = if share > 0.0 && share < 1.0 {
        let rm = mean * 0.8;
        (rm, (mean - share * rm) / (1.0 - share), max * 0.6)
    } else {
        (mean, mean, max)
    };
    let read = dir(iops * share, secs, bs, rm, sd * rm / mean, rmax);
    let write = dir(iops * (1.0 - share), secs, bs, wm, sd * wm / mean, max);
    let ops = (read.ops + write.ops).max(1) as f64;
    let weigh = |r: f64, w: f64| (r * read.ops as f64 + w * write.ops as f64) / ops;
    Round {
        index,
        end_seconds: end,
        iops: read.iops + write.iops,
        lat_mean_ns: weigh(read.lat_mean_ns, write.lat_mean_ns),
        lat_stddev_ns: weigh(read.lat_stddev_ns, write.lat_stddev_ns),
        lat_max_ns: read.lat_max_ns.max(write.lat_max_ns),
        slot_idle_seconds: 0.0,
        slot_uncounted_seconds: 0.0,
        in_flight_seconds: 0.0,
        due_missed_ops: 0,
        read_lat_hist: None,
        write_lat_hist: None,
        read,
        write,
    }
}

/// The window rule: range and least-squares excursion as shares of the mean.
fn window_figures(rounds: &[Round]) -> (f64, f64, f64) {
    let n = rounds.len() as f64;
    let ys: Vec<f64> = rounds.iter().map(|r| r.iops).collect();
    let mean = ys.iter().sum::<f64>() / n;
    let range =
        ys.iter().cloned().fold(f64::MIN, f64::max) - ys.iter().cloned().fold(f64::MAX, f64::min);
    let xm = (n - 1.0) / 2.0;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        sxy += (i as f64 - xm) * (y - mean);
        sxx += (i as f64 - xm).powi(2);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (mean, range / mean, (slope * (n - 1.0)).abs() / mean)
}

/// Preconditioning from burst towards `steady_iops`, stopping at the first steady window
/// (5 rounds, range 20%, excursion 10%) or after `max_rounds`.
#[allow(clippy::too_many_arguments)]
fn steady_phase(
    rng: &mut Rng,
    w: WorkloadDesc,
    burst_iops: f64,
    steady_iops: f64,
    decay: f64,
    max_rounds: u32,
    burst_max_ms: f64,
    steady_max_ms: f64,
) -> (Phase, f64) {
    let secs = 60.0;
    let inflight = f64::from(w.workers * w.depth);
    let (window, max_range, max_excursion) = (5usize, 0.20, 0.10);
    let mut rounds = Vec::new();
    let mut steady_round = None;
    for k in 0..max_rounds {
        // Minute rounds: the threads' start-up is lost in round 1, which is the burst.
        let fresh = (-f64::from(k) / decay).exp();
        let iops = (steady_iops + (burst_iops - steady_iops) * fresh)
            * if k == 0 { 1.0 } else { rng.jitter(0.012) };
        let mean = inflight / iops * 1e9;
        let sd = mean * (0.55 - 0.2 * fresh) * rng.jitter(0.05);
        let max = (steady_max_ms + (burst_max_ms - steady_max_ms) * fresh)
            * 1e6
            * if k == 0 { 1.0 } else { rng.jitter(0.3) };
        let end = f64::from(k + 1) * secs + rng.unit() * 0.05;
        rounds.push(round(k, end, secs, &w, iops, mean, sd, max));
        if rounds.len() >= window {
            let (_, range, exc) = window_figures(&rounds[rounds.len() - window..]);
            if range <= max_range && exc <= max_excursion {
                steady_round = Some(k);
                break;
            }
        }
    }
    let last = &rounds[rounds.len().saturating_sub(window)..];
    let (mean, range, exc) = window_figures(last);
    let seconds = rounds.last().unwrap().end_seconds;
    let phase = Phase::SteadyState {
        workload: w,
        steady: SteadyState {
            window_rounds: window as u32,
            max_range_ratio: max_range,
            max_slope_excursion_ratio: max_excursion,
            max_rounds,
            attained: steady_round.is_some(),
            steady_round,
            window_mean_iops: mean,
            window_range_ratio: range,
            window_slope_excursion_ratio: exc,
            watch_rounds: 0,
            left: None,
        },
        burst: rounds[0].clone(),
        steady_figures: Round::average(last),
        rounds,
    };
    (phase, seconds)
}

/// The 2T2Q ... 16T16Q matrix: IOPS saturating towards `peak` (Little's law for latency).
fn sweep_phase(
    rng: &mut Rng,
    w: WorkloadDesc,
    peak: f64,
    knee: f64,
    heaviest_max_ms: f64,
) -> (Phase, f64) {
    let mut points = Vec::new();
    let mut t = 0.0;
    for workers in [2u32, 4, 8, 16] {
        for depth in [2u32, 4, 8, 16] {
            let inflight = f64::from(workers * depth);
            let iops = peak * inflight / (inflight + knee) * rng.jitter(0.01);
            let mean = inflight / iops * 1e9;
            let max = if workers * depth == 256 {
                heaviest_max_ms * 1e6
            } else {
                (mean * 6.0 + 1.5e6) * rng.jitter(0.1)
            };
            t += 60.0;
            let wd = WorkloadDesc {
                workers,
                depth,
                ..w.clone()
            };
            let r = round(
                points.len() as u32,
                60.0,
                60.0,
                &wd,
                iops,
                mean,
                mean * 0.45,
                max,
            );
            points.push(SweepPoint {
                workers,
                depth,
                round: r,
            });
        }
    }
    (
        Phase::Sweep {
            workload: w,
            points,
        },
        t,
    )
}

/// Latency against load: 10% ... 100%, 110%, 120% of the maximum rate.
fn curve_phase(rng: &mut Rng, w: WorkloadDesc, max_iops: f64, base_us: f64) -> (Phase, f64) {
    let inflight = f64::from(w.workers * w.depth);
    let mut points = Vec::new();
    for k in 1..=12u32 {
        let fraction = f64::from(k) / 10.0;
        let target = max_iops * fraction;
        let (iops, mean) = if k <= 10 {
            (
                target * (1.0 - 0.002 * rng.unit()),
                base_us * 1e3 * (1.0 + 5.0 * fraction.powi(6)) * rng.jitter(0.02),
            )
        } else {
            let iops = max_iops * (1.0 - 0.003 * f64::from(k - 10)) * rng.jitter(0.002);
            (iops, inflight / iops * 1e9)
        };
        let r = round(k - 1, 60.0, 60.0, &w, iops, mean, mean * 0.4, mean * 9.0);
        points.push(CurvePoint {
            fraction,
            target_iops: target,
            round: r,
        });
    }
    (
        Phase::RateCurve {
            workload: w,
            max_iops,
            points,
        },
        13.0 * 60.0,
    )
}

/// Random writes until past the spare area: fast, then falling to the steady rate.
fn write_sat_phase(
    rng: &mut Rng,
    w: WorkloadDesc,
    fresh_iops: f64,
    steady_iops: f64,
    cliff_bytes: f64,
    rounds_n: u32,
) -> (Phase, f64) {
    let inflight = f64::from(w.workers * w.depth);
    let mut rounds = Vec::new();
    let mut bytes_written = Vec::new();
    let mut written = 0.0f64;
    for k in 0..rounds_n {
        let past = (written - cliff_bytes).max(0.0);
        let iops = (steady_iops + (fresh_iops - steady_iops) * (-past / (cliff_bytes * 0.3)).exp())
            * rng.jitter(0.015);
        let mean = inflight / iops * 1e9;
        written += iops * 4096.0 * 60.0;
        rounds.push(round(
            k,
            f64::from(k + 1) * 60.0,
            60.0,
            &w,
            iops,
            mean,
            mean * 0.5,
            mean * 8.0,
        ));
        bytes_written.push(written.round() as u64);
    }
    (
        Phase::WriteSaturation {
            workload: w,
            rounds,
            bytes_written,
        },
        f64::from(rounds_n) * 60.0,
    )
}

fn point(w: WorkloadDesc, iops: f64, max_ms: f64) -> (Phase, f64) {
    let mean = f64::from(w.workers * w.depth) / iops * 1e9;
    let r = round(0, 60.0, 60.0, &w, iops, mean, mean * 0.5, max_ms * 1e6);
    (
        Phase::Point {
            workload: w,
            round: r,
        },
        60.0,
    )
}

const START: f64 = 1_740_837_753.0;

/// An enterprise-suite run on an SSD800MM-like 400 GB SAS drive: complete.
fn sas_drive() -> SuiteResult {
    let mut rng = Rng(0x5ad_800);
    let mut phases = Vec::new();
    let mut t = 0.0;
    let mut add = |(p, s): (Phase, f64), phases: &mut Vec<Phase>| {
        t += s;
        phases.push(p);
    };
    add(
        (
            Phase::Purge {
                method: "blkdiscard".into(),
                seconds: 8.4,
            },
            8.4,
        ),
        &mut phases,
    );
    add(
        (
            Phase::Precondition {
                passes: 2,
                bytes: 800_176_914_432,
                seconds: 1_391.0,
            },
            1_391.0,
        ),
        &mut phases,
    );
    let w4 = wl("4k-randwrite", "randwrite", "4k", 0, 16, 16);
    add(
        steady_phase(&mut rng, w4, 98_024.0, 66_000.0, 1.5, 25, 11.5, 26.0),
        &mut phases,
    );
    let w8 = wl("8k-70-30", "randrw", "8k", 70, 16, 16);
    add(
        steady_phase(
            &mut rng,
            w8.clone(),
            90_000.0,
            64_000.0,
            1.5,
            25,
            10.0,
            19.0,
        ),
        &mut phases,
    );
    add(
        sweep_phase(&mut rng, w8, 66_000.0, 12.0, 33.54),
        &mut phases,
    );
    add(
        (
            Phase::Fill {
                bytes: 400_088_457_216,
                seconds: 712.0,
            },
            712.0,
        ),
        &mut phases,
    );
    add(
        curve_phase(
            &mut rng,
            wl("4k-randread", "randread", "4k", 100, 8, 16),
            150_000.0,
            112.0,
        ),
        &mut phases,
    );
    add(
        write_sat_phase(
            &mut rng,
            wl("4k-randwrite", "randwrite", "4k", 0, 4, 16),
            98_000.0,
            66_000.0,
            450e9,
            32,
        ),
        &mut phases,
    );
    add(
        point(
            wl("4k-randread", "randread", "4k", 100, 16, 16),
            149_697.0,
            18.5,
        ),
        &mut phases,
    );
    add(
        point(
            wl("128k-seqread", "read", "128k", 100, 16, 16),
            8_912.0,
            61.0,
        ),
        &mut phases,
    );
    add(
        point(
            wl("128k-seqwrite", "write", "128k", 0, 16, 16),
            5_318.0,
            97.0,
        ),
        &mut phases,
    );
    SuiteResult {
        schema_version: SCHEMA_VERSION,
        driveprobe_version: "0.1.0".into(),
        suite: "enterprise".into(),
        scale: "standard".into(),
        target: "/dev/sdb".into(),
        target_bytes: 400_088_457_216,
        drive: Some(common::fixtures::sas_ssd()),
        engine: "io_uring".into(),
        started_unix_seconds: START,
        ended_unix_seconds: START + t,
        complete: true,
        incomplete_reason: None,
        rated: Some(Rated {
            read_iops_4k: Some(145_000.0),
            write_iops_4k: Some(70_000.0),
            seq_read_bytes_per_second: Some(1_150e6),
            seq_write_bytes_per_second: Some(700e6),
        }),
        phases,
    }
}

/// The same suite on a read-intensive 960 GB SATA drive: 4K writes never get steady
/// within the round limit, and the run was stopped before its last point.
fn sata_drive() -> SuiteResult {
    let mut rng = Rng(0x0510_0ec0);
    let mut phases = Vec::new();
    let mut t = 0.0;
    let mut add = |(p, s): (Phase, f64), phases: &mut Vec<Phase>| {
        t += s;
        phases.push(p);
    };
    add(
        (
            Phase::Purge {
                method: "blksecdiscard".into(),
                seconds: 2.1,
            },
            2.1,
        ),
        &mut phases,
    );
    add(
        (
            Phase::Precondition {
                passes: 2,
                bytes: 1_920_394_248_192,
                seconds: 3_712.0,
            },
            3_712.0,
        ),
        &mut phases,
    );
    let w4 = wl("4k-randwrite", "randwrite", "4k", 0, 16, 16);
    add(
        steady_phase(&mut rng, w4, 61_200.0, 12_000.0, 2.0, 8, 28.0, 140.0),
        &mut phases,
    );
    let w8 = wl("8k-70-30", "randrw", "8k", 70, 16, 16);
    add(
        steady_phase(&mut rng, w8.clone(), 52_000.0, 44_500.0, 1.1, 8, 21.0, 48.0),
        &mut phases,
    );
    add(sweep_phase(&mut rng, w8, 49_200.0, 16.0, 88.0), &mut phases);
    add(
        (
            Phase::Fill {
                bytes: 960_197_124_096,
                seconds: 1_851.0,
            },
            1_851.0,
        ),
        &mut phases,
    );
    add(
        curve_phase(
            &mut rng,
            wl("4k-randread", "randread", "4k", 100, 8, 16),
            93_400.0,
            176.0,
        ),
        &mut phases,
    );
    add(
        write_sat_phase(
            &mut rng,
            wl("4k-randwrite", "randwrite", "4k", 0, 4, 16),
            61_000.0,
            13_900.0,
            190e9,
            32,
        ),
        &mut phases,
    );
    add(
        point(
            wl("4k-randread", "randread", "4k", 100, 16, 16),
            91_870.0,
            24.7,
        ),
        &mut phases,
    );
    add(
        point(
            wl("128k-seqread", "read", "128k", 100, 16, 16),
            4_051.0,
            121.0,
        ),
        &mut phases,
    );
    SuiteResult {
        schema_version: SCHEMA_VERSION,
        driveprobe_version: "0.1.0".into(),
        suite: "enterprise".into(),
        scale: "standard".into(),
        target: "/dev/sdc".into(),
        target_bytes: 960_197_124_096,
        drive: Some(Identity {
            model: Some("Micron_5100_MTFDDAK960TCB".into()),
            serial: Some("17411A2B3C4D".into()),
            firmware: Some("D0MU027".into()),
            wwn: Some("0x500a07511a2b3c4d".into()),
            transport: Transport::Sata,
            capacity_bytes: Some(960_197_124_096),
            logical_block_size: Some(512),
            rotation_rpm: Some(0),
        }),
        engine: "io_uring".into(),
        started_unix_seconds: START + 86_400.0,
        ended_unix_seconds: START + 86_400.0 + t + 31.0,
        complete: false,
        incomplete_reason: Some("stopped (SIGINT) during 128k-seqwrite".into()),
        rated: Some(Rated {
            read_iops_4k: Some(93_000.0),
            write_iops_4k: Some(13_500.0),
            seq_read_bytes_per_second: Some(540e6),
            seq_write_bytes_per_second: Some(520e6),
        }),
        phases,
    }
}

const FIXTURES: [&str; 2] = [
    "enterprise-sas-ssd800mm.json",
    "enterprise-sata-5100eco.json",
];

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(name)
}

fn generated() -> [SuiteResult; 2] {
    [sas_drive(), sata_drive()]
}

/// The fixtures as the CLI labels them.
fn fixtures() -> Vec<(String, SuiteResult)> {
    let docs = FIXTURES
        .iter()
        .map(|n| {
            let p = fixture_path(n);
            let d = report::load(&p).unwrap_or_else(|e| panic!("{e}"));
            (p, d)
        })
        .collect();
    report::label_documents(docs)
}

// ------------------------------------------------------------------ helpers

fn exe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_driveprobe"))
}

fn one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("driveprobe: error: "), "{err}");
    assert!(err.contains(needle), "{err}");
    assert!(out.stdout.is_empty());
}

/// The `<svg>` element with this id.
fn chart<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("no chart {id}"));
    let start = html[..at].rfind("<svg").unwrap();
    let end = at + html[at..].find("</svg>").unwrap() + 6;
    &html[start..end]
}

fn markers(svg: &str, doc: usize) -> usize {
    svg.matches(&format!(r#"<circle class="pt s{doc}""#))
        .count()
}

/// The charts each document's phases should have, with their number of points.
fn expected_charts(docs: &[(String, SuiteResult)]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (i, (_, d)) in docs.iter().enumerate() {
        for p in &d.phases {
            match p {
                Phase::SteadyState {
                    workload, rounds, ..
                } => {
                    for m in ["iops", "lat-mean", "lat-max", "lat-sd"] {
                        out.push((
                            format!("chart-steady-{}-{m}", workload.name),
                            i,
                            rounds.len(),
                        ));
                    }
                }
                Phase::Sweep { workload, points } => {
                    for m in ["iops", "lat-mean", "lat-max", "lat-sd"] {
                        out.push((
                            format!("chart-sweep-{}-{m}", workload.name),
                            i,
                            points.len(),
                        ));
                    }
                }
                Phase::RateCurve {
                    workload, points, ..
                } => out.push((format!("chart-rate-{}", workload.name), i, points.len())),
                Phase::WriteSaturation {
                    workload,
                    rounds,
                    bytes_written,
                } => {
                    out.push((
                        format!("chart-wsat-{}-time", workload.name),
                        i,
                        rounds.len(),
                    ));
                    out.push((
                        format!("chart-wsat-{}-bytes", workload.name),
                        i,
                        rounds.len().min(bytes_written.len()),
                    ));
                }
                _ => {}
            }
        }
    }
    out
}

// ------------------------------------------------------------------ tests

#[test]
fn fixtures_are_what_the_generator_makes() {
    for (name, doc) in FIXTURES.iter().zip(generated()) {
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        let path = fixture_path(name);
        if std::env::var_os("UPDATE_FIXTURES").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == text,
            "{} differs from the generator; if the change is meant, run UPDATE_FIXTURES=1 cargo test --test cli report_html::",
            path.display()
        );
    }
}

#[test]
fn fixtures_look_like_the_reviews() {
    let [sas, sata] = generated();
    let Phase::SteadyState {
        steady,
        rounds,
        burst,
        steady_figures,
        ..
    } = &sas.phases[2]
    else {
        panic!("phase 2 is not a steady state")
    };
    assert!(steady.attained);
    assert!((7..=10).contains(&rounds.len()), "{} rounds", rounds.len());
    assert_eq!(burst.iops, 98_024.0);
    assert!((63_000.0..69_000.0).contains(&steady_figures.iops));
    // Little's law: 256 in flight.
    assert!((steady_figures.iops * steady_figures.lat_mean_ns / 1e9 - 256.0).abs() < 3.0);
    let Phase::SteadyState { steady, .. } = &sata.phases[2] else {
        panic!("phase 2 is not a steady state")
    };
    assert!(!steady.attained);
    let Phase::Sweep { points, .. } = &sas.phases[4] else {
        panic!("phase 4 is not a sweep")
    };
    assert_eq!(points.len(), 16);
    let Phase::RateCurve { points, .. } = &sas.phases[6] else {
        panic!("phase 6 is not a rate curve")
    };
    assert_eq!(points.len(), 12);
}

#[test]
fn a_chart_per_series_and_a_marker_per_point() {
    let docs = fixtures();
    let html = report::render(&docs);
    let expected = expected_charts(&docs);
    for (id, doc, n) in &expected {
        let svg = chart(&html, id);
        assert_eq!(markers(svg, *doc), *n, "{id}: markers of document {doc}");
        assert!(
            svg.contains(&docs[*doc].0),
            "{id}: no legend for {}",
            docs[*doc].0
        );
    }
    let mut ids: Vec<&str> = expected.iter().map(|(id, _, _)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        html.matches("<svg").count(),
        ids.len(),
        "one <svg> per chart"
    );
    // Both documents overlaid in the same charts.
    let both = chart(&html, "chart-steady-4k-randwrite-iops");
    assert!(markers(both, 0) > 0 && markers(both, 1) > 0);

    // Windows, burst, units, labels.
    assert!(both.contains(">steady window<"));
    assert!(both.contains(">last window, not steady<"));
    assert!(both.contains(">burst<"));
    assert!(both.contains("(not steady)"));
    assert!(both.contains(">throughput (IOPS)<"));
    assert!(both.contains(">time (s)<"));
    assert!(chart(&html, "chart-steady-4k-randwrite-lat-mean").contains(">average latency (ms)<"));
    let sweep = chart(&html, "chart-sweep-8k-70-30-lat-max");
    for label in [">2T2Q<", ">4T8Q<", ">16T16Q<"] {
        assert!(sweep.contains(label), "sweep axis lacks {label}");
    }
    let curve = chart(&html, "chart-rate-4k-randread");
    assert!(curve.contains(">achieved rate (IOPS)<"));
    assert!(curve.contains(">average latency (µs)<") || curve.contains(">average latency (ms)<"));
    for label in [">10%<", ">50%<"] {
        assert!(curve.contains(label), "rate curve lacks {label}");
    }
    let by_bytes = chart(&html, "chart-wsat-4k-randwrite-bytes");
    assert!(by_bytes.contains(">data written (GB)<") || by_bytes.contains(">data written (TB)<"));
    assert!(chart(&html, "chart-wsat-4k-randwrite-time").contains(">time (min)<"));

    // Summary, measured against rated, burst against steady, the fixed points.
    for text in [
        "HGST HUSMM1640ASS200",
        "0QV1K5XA",
        "A204",
        "Micron_5100_MTFDDAK960TCB",
        "incomplete",
        "stopped (SIGINT) during 128k-seqwrite",
        "2025-03-01",
        "Measured against rated",
        "rated 145,000 IOPS",
        "rated 1.15 GB/s",
        "149,697 IOPS",
        "98,024",
        "not steady",
        "Fixed workloads",
        "128k-seqread",
        "99th percentile",
        "Latency against load",
    ] {
        assert!(html.contains(text), "page lacks {text:?}");
    }
}

#[test]
fn text_from_documents_is_escaped() {
    let mut docs = fixtures();
    let evil = r#"Evil <script>alert("x")</script> & Co"#;
    docs[0].1.drive.as_mut().unwrap().model = Some(evil.into());
    docs[0].0 = evil.into();
    docs[1].1.incomplete_reason = Some("<img src=x onerror=alert(1)>".into());
    if let Phase::SteadyState { workload, .. } = &mut docs[1].1.phases[3] {
        workload.name = "8k <b>bold</b>".into();
    }
    let html = report::render(&docs);
    assert!(!html.contains("<script"), "a script element got through");
    assert!(!html.contains("<img"));
    assert!(!html.contains("<b>"));
    assert!(html.contains("Evil &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; Co"));
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(html.contains("8k &lt;b&gt;bold&lt;/b&gt;"));
}

#[test]
fn the_page_is_self_contained() {
    let html = report::render(&fixtures());
    assert!(html.starts_with("<!DOCTYPE html>"));
    for bad in ["http://", "https://", "src=", "<link", "@import", "url("] {
        assert!(
            !html.contains(bad),
            "the page refers to something outside: {bad}"
        );
    }
}

#[test]
fn one_document_and_no_phases_render() {
    let mut doc = sas_drive();
    let one = report::render(&[("only".into(), doc.clone())]);
    assert_eq!(markers(chart(&one, "chart-rate-4k-randread"), 0), 12);
    doc.phases.clear();
    doc.drive = None;
    doc.rated = None;
    let empty = report::render(&[("empty.json".into(), doc)]);
    assert!(!empty.contains("<svg"));
    assert!(!empty.contains("Measured against rated"));
    assert!(empty.contains("empty.json"));
}

#[test]
fn cli_writes_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.html");
    let out = exe()
        .arg("report")
        .args(FIXTURES.map(fixture_path))
        .arg("-o")
        .arg(&out_path)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe report");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        out_path.display().to_string()
    );
    let html = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(html, report::render(&fixtures()));

    // Without -o: report.html in the working directory.
    let out = exe()
        .current_dir(dir.path())
        .arg("report")
        .arg(fixture_path(FIXTURES[0]))
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe report");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "report.html");
    assert!(dir.path().join("report.html").is_file());
}

#[test]
fn cli_bad_inputs_give_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.html");
    let run = |input: &Path| {
        exe()
            .arg("report")
            .arg(fixture_path(FIXTURES[0]))
            .arg(input)
            .arg("-o")
            .arg(&out_path)
            .output()
            .unwrap()
    };
    let missing = run(&dir.path().join("missing.json"));
    one_line_error(&missing, "missing.json: cannot read it: No such file");
    // What to do about it, on the same line.
    one_line_error(&missing, "give the path of a result document");

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"schema_version\": 1,\n  oops").unwrap();
    one_line_error(&run(&bad), "bad.json: not valid JSON");

    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path(FIXTURES[0])).unwrap()).unwrap();
    v["schema_version"] = 2.into();
    let future = dir.path().join("future.json");
    std::fs::write(&future, v.to_string()).unwrap();
    one_line_error(&run(&future), "schema_version 2 is not known");

    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"device": "/dev/sda", "health": {}}"#).unwrap();
    one_line_error(&run(&other), "not a driveprobe result document");

    v["schema_version"] = SCHEMA_VERSION.into();
    v["phases"] = serde_json::json!([{"kind": "warp_drive"}]);
    let shape = dir.path().join("shape.json");
    std::fs::write(&shape, v.to_string()).unwrap();
    one_line_error(&run(&shape), "not a valid result document");
    assert!(!out_path.exists(), "a failed run wrote the page");

    // The output cannot be written.
    let out = exe()
        .arg("report")
        .arg(fixture_path(FIXTURES[0]))
        .arg("-o")
        .arg(dir.path().join("no/such/dir/out.html"))
        .output()
        .unwrap();
    one_line_error(&out, "out.html");

    // No document at all is bad usage.
    let out = exe().arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

struct Image {
    width: usize,
    height: usize,
    rgb: Vec<[u8; 3]>,
}

fn decode_png(path: &Path) -> Image {
    let file = std::fs::File::open(path).unwrap();
    let mut decoder = png::Decoder::new(BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let rgb = buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| match channels {
            1 | 2 => [p[0], p[0], p[0]],
            _ => [p[0], p[1], p[2]],
        })
        .collect();
    Image {
        width: info.width as usize,
        height: info.height as usize,
        rgb,
    }
}

/// Slices of the screenshot, 1280 x 1000 each, to look at (target/tmp/report-shot-N.png).
fn save_slices(img: &Image, dir: &Path) {
    for (k, y0) in (0..img.height).step_by(1000).enumerate() {
        let h = (img.height - y0).min(1000);
        let file = std::fs::File::create(dir.join(format!("report-shot-{k}.png"))).unwrap();
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), img.width as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().unwrap();
        let data: Vec<u8> = img.rgb[y0 * img.width..(y0 + h) * img.width]
            .iter()
            .flatten()
            .copied()
            .collect();
        w.write_image_data(&data).unwrap();
    }
}

fn near(a: [u8; 3], b: [u8; 3], tolerance: i32) -> bool {
    (0..3).all(|i| (i32::from(a[i]) - i32::from(b[i])).abs() <= tolerance)
}

fn hex(c: &str) -> [u8; 3] {
    let v = u32::from_str_radix(c.trim_start_matches('#'), 16).unwrap();
    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs Chromium: scripts/test runs it"
)]
fn chromium_renders_the_charts() {
    let docs = fixtures();
    let html = report::render(&docs);
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let page = out_dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let url = format!("file://{}", page.display());
    let profile = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);

    // The DOM after load holds every chart.
    let dom = chromium(profile.path(), &["--dump-dom"], &url, limit);
    common::assert_ok(&dom, "chromium --dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let charts = html.matches("<svg").count();
    assert!(charts >= 15, "{charts} charts");
    assert_eq!(dom.matches("<svg").count(), charts, "charts in the DOM");
    assert_eq!(
        dom.matches(r#"<circle class="pt s0""#).count(),
        html.matches(r#"<circle class="pt s0""#).count()
    );

    // A screenshot that shows them.
    let shot = out_dir.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,4000",
        ],
        &url,
        limit,
    );
    assert!(
        shot.is_file(),
        "no screenshot ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let img = decode_png(&shot);
    save_slices(&img, &out_dir);
    assert_eq!((img.width, img.height), (1280, 4000));
    let total = img.rgb.len() as f64;
    let background = hex("#eceff4");
    let white = [255, 255, 255];
    let not_background = img.rgb.iter().filter(|&&p| !near(p, background, 2)).count() as f64;
    let ink = img
        .rgb
        .iter()
        .filter(|&&p| !near(p, background, 2) && !near(p, white, 8))
        .count() as f64;
    assert!(
        not_background / total > 0.5,
        "mostly background: {not_background}/{total}"
    );
    assert!(ink / total > 0.02, "little drawn: {ink}/{total}");
    let mut colours: Vec<[u8; 3]> = img.rgb.iter().map(|p| p.map(|c| c & 0xf0)).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(colours.len() >= 20, "{} distinct colours", colours.len());
    // Both documents' series colours are drawn.
    for (i, c) in ["#1f6fb4", "#d62728"].iter().enumerate() {
        let n = img.rgb.iter().filter(|&&p| near(p, hex(c), 24)).count();
        assert!(n > 2000, "document {i}'s colour {c}: {n} pixels");
    }
}

// ------------------------------------------------------------------ issue 17: truth on the page

/// The `<section>` of the page whose id is `id`.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html
        .find(&format!(r#"<section class="card" id="{id}""#))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = at + html[at..].find("</section>").unwrap();
    &html[at..end]
}

/// The summary table's row named `name`, if any.
fn summary_row<'a>(html: &'a str, name: &str) -> Option<&'a str> {
    let s = section(html, "summary");
    let at = s.find(&format!(r#"<tr><th class="l">{name}</th>"#))?;
    let end = at + s[at..].find("</tr>").unwrap();
    Some(&s[at..end])
}

/// A whole number as the page writes IOPS: `98,024`.
fn grouped(v: f64) -> String {
    let t = format!("{:.0}", v);
    let mut out = String::new();
    for (i, c) in t.chars().enumerate() {
        if i > 0 && (t.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn first_steady(doc: &mut SuiteResult) -> (&mut SteadyState, &mut Vec<Round>, &mut Round) {
    doc.phases
        .iter_mut()
        .find_map(|p| match p {
            Phase::SteadyState {
                steady,
                rounds,
                burst,
                ..
            } => Some((steady, rounds, burst)),
            _ => None,
        })
        .expect("a steady-state phase")
}

#[test]
fn burst_is_the_first_full_round_after_the_start() {
    let name = match &sas_drive().phases[2] {
        Phase::SteadyState { workload, .. } => workload.name.clone(),
        _ => panic!("phase 2 is not a steady state"),
    };
    // Quick scale's 0.5 s rounds: round 1 holds the threads' start-up, the burst is round
    // 2. Full scale's minute rounds: the start-up is lost in round 1, which is the burst.
    for (round_seconds, burst_at) in [(0.5, 1usize), (60.0, 0)] {
        let mut doc = sas_drive();
        {
            let (_, rounds, _) = first_steady(&mut doc);
            for (k, r) in rounds.iter_mut().enumerate() {
                r.end_seconds = round_seconds * (k + 1) as f64;
            }
            for (r, iops) in rounds.iter_mut().zip([111_111.0, 222_222.0]) {
                r.iops = iops;
                r.read.iops = iops;
                r.write.iops = 0.0;
            }
        }
        let (want, not) = if burst_at == 1 {
            (222_222.0, 111_111.0)
        } else {
            (111_111.0, 222_222.0)
        };
        // Whichever round the document recorded (older documents recorded round 1 at
        // every scale), the report draws the burst by the rule.
        for recorded in [0, 1] {
            let mut d = doc.clone();
            let (_, rounds, burst) = first_steady(&mut d);
            *burst = rounds[recorded].clone();
            let html = report::render(&[("d".into(), d)]);
            let sec = section(&html, &format!("steady-{name}"));
            let table = &sec[sec.find(r#"<table class="steady">"#).unwrap()..];
            assert!(table.contains(&grouped(want)), "{round_seconds} s: {table}");
            assert!(!table.contains(&grouped(not)), "{round_seconds} s: {table}");
            assert!(sec.contains("the first full round after the workers started"));
            // The burst's ring sits on the burst round's point of the IOPS chart.
            let svg = chart(&html, &format!("chart-steady-{name}-iops"));
            let centre = |from: &str| {
                let attr = |a: &str| {
                    from.split(&format!("{a}=\""))
                        .nth(1)
                        .unwrap()
                        .split('"')
                        .next()
                        .unwrap()
                        .to_string()
                };
                (attr("cx"), attr("cy"))
            };
            let pts: Vec<_> = svg
                .split(r#"<circle class="pt s0""#)
                .skip(1)
                .map(centre)
                .collect();
            let ring = centre(svg.split(r#"<circle class="mark s0""#).nth(1).unwrap());
            assert_eq!(
                ring,
                pts[burst_at],
                "{round_seconds} s rounds: the burst ring is not on round {}",
                burst_at + 1
            );
        }
    }
    // The generator's minute rounds record what the suite records: round 1.
    let mut g = sas_drive();
    let (_, rounds, burst) = first_steady(&mut g);
    assert_eq!(*burst, rounds[0]);
}

#[test]
fn sweep_subtitle_names_the_sweep() {
    let html = report::render(&fixtures());
    let sec = section(&html, "sweep-8k-70-30");
    let meta = &sec[sec.find(r#"<p class="meta">"#).unwrap()..];
    let meta = &meta[..meta.find("</p>").unwrap()];
    assert!(meta.contains("sweep 2T2Q..16T16Q"), "{meta}");
    assert!(meta.contains("2, 4, 8, 16 workers"), "{meta}");
    assert!(meta.contains("16 points"), "{meta}");
    assert!(!meta.contains("16 workers × 16 queue depth"), "{meta}");
}

#[test]
fn a_phase_not_steady_says_what_it_averages() {
    let docs = fixtures();
    let html = report::render(&docs);
    // The SATA drive's 4K random write never got steady in its 8 rounds.
    let sec = section(&html, "steady-4k-randwrite");
    let not_steady = sec
        .split("<li>")
        .find(|li| li.contains("not steady"))
        .expect("a document not steady");
    assert!(
        !not_steady.contains("the last 5 rounds average"),
        "{not_steady}"
    );
    assert!(
        not_steady.contains("steady state was not reached in 8 rounds"),
        "{not_steady}"
    );
    assert!(not_steady.contains("average of rounds 4-8"), "{not_steady}");
    // A steady one names its window's rounds.
    let steady = sec
        .split("<li>")
        .find(|li| li.contains(r#"class="ok">steady"#))
        .expect("a steady document");
    assert!(steady.contains("(the steady window) average"), "{steady}");
}

#[test]
fn sizes_are_in_the_units_given() {
    let mut doc = sas_drive();
    doc.target_bytes = 256 << 20;
    doc.drive = None;
    for p in &mut doc.phases {
        if let Phase::Precondition { bytes, .. } = p {
            *bytes = 512 << 20;
        }
    }
    let html = report::render(&[("quick.json".into(), doc)]);
    let target = summary_row(&html, "Target").unwrap();
    assert!(target.contains("256 MiB"), "{target}");
    assert!(!html.contains("268 MB"));
    assert!(html.contains("2 passes of sequential writes, 512 MiB"));
    // A datasheet capacity stays decimal.
    let html = report::render(&fixtures());
    let cap = summary_row(&html, "Capacity").unwrap();
    assert!(cap.contains("400 GB"), "{cap}");
}

#[test]
fn an_unknown_interface_has_one_spelling() {
    let mut loop_dev = sas_drive();
    loop_dev.drive.as_mut().unwrap().transport = Transport::Unknown;
    let mut file = sas_drive();
    file.drive = None;
    let sas = sas_drive();
    let html = report::render(&[
        ("loop.json".into(), loop_dev),
        ("file.json".into(), file),
        ("sas.json".into(), sas),
    ]);
    let row = summary_row(&html, "Interface").unwrap();
    assert!(!row.to_lowercase().contains("unknown"), "{row}");
    assert_eq!(row.matches(r#"<td class="l">-</td>"#).count(), 2, "{row}");
    assert!(row.contains(r#"<td class="l">sas</td>"#), "{row}");
}

#[test]
fn counts_of_one_are_singular() {
    let mut doc = sas_drive();
    for p in &mut doc.phases {
        match p {
            Phase::Sweep { points, .. } => points.truncate(1),
            Phase::RateCurve { points, .. } => points.truncate(1),
            Phase::Precondition { passes, .. } => *passes = 1,
            _ => {}
        }
    }
    let html = report::render(&[("one.json".into(), doc)]);
    let phases = summary_row(&html, "Phases").unwrap();
    assert!(phases.contains(": 1 point<"), "{phases}");
    assert!(!phases.contains(" 1 points"), "{phases}");
    assert!(phases.contains("1 pass of"), "{phases}");
}

/// bench's JSON as a driveprobe before issue 17 printed it (kept as it was written).
const OLD_BENCH: &str = "bench-0.1.0-randrw.json";

#[test]
fn bench_output_gets_a_one_phase_report() {
    let dir = tempfile::tempdir().unwrap();
    let old = fixture_path(OLD_BENCH);
    let doc = report::load(&old).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(doc.suite, "bench");
    assert_eq!(doc.phases.len(), 1);
    let Phase::Point { workload, round } = &doc.phases[0] else {
        panic!("not a point: {:?}", doc.phases[0])
    };
    assert_eq!(workload.rw, "randrw");
    assert_eq!((workload.workers, workload.depth), (1, 1));
    assert!(round.read.lat_p99_ns > 0 && round.write.lat_p99_9_ns > 0);
    assert!(round.read.ops > 0 && round.write.ops > 0);
    assert!(doc.complete);

    // A newer spelling: percentile keys with a `p`, and `rw` in the workload.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&old).unwrap()).unwrap();
    for d in ["read", "write", "total"] {
        let p = v[d]["lat_ns"]["percentiles"].as_object().unwrap().clone();
        let renamed: serde_json::Map<String, serde_json::Value> =
            p.into_iter().map(|(k, x)| (format!("p{k}"), x)).collect();
        v[d]["lat_ns"]["percentiles"] = renamed.into();
    }
    v["workload"]["rw"] = "randrw".into();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, v.to_string()).unwrap();
    let doc2 = report::load(&newer).unwrap();
    assert_eq!(doc2.phases, doc.phases);
    // numjobs and iodepth are read, not defaulted (the fixture has 1 and 1).
    v["workload"]["numjobs"] = 4.into();
    v["workload"]["iodepth"] = 8.into();
    std::fs::write(&newer, v.to_string()).unwrap();
    let doc3 = report::load(&newer).unwrap();
    let Phase::Point { workload, .. } = &doc3.phases[0] else {
        panic!("not a point: {:?}", doc3.phases[0])
    };
    assert_eq!((workload.workers, workload.depth), (4, 8));

    // Through the CLI, with a run made now.
    let shm = common::shm_dir("report-bench");
    let target = shm.path().join("t.dat");
    let json = dir.path().join("bench.json");
    let out = exe()
        .arg("bench")
        .arg(&target)
        .args([
            "--size",
            "8m",
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--runtime",
            "0.3s",
            "--time_based",
            "--numjobs",
            "3",
            "--iodepth",
            "5",
        ])
        .args(["--output-format", "json", "--output"])
        .arg(&json)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe bench");
    let html_path = dir.path().join("bench.html");
    let out = exe()
        .arg("report")
        .arg(&json)
        .arg(&old)
        .arg("-o")
        .arg(&html_path)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe report");
    let html = std::fs::read_to_string(&html_path).unwrap();
    let points = section(&html, "points");
    assert!(points.contains("4k-randread"), "{points}");
    assert!(points.contains("4k-randrw"), "{points}");
    // The run's numjobs and iodepth are read and shown (as T and Q).
    assert!(points.contains("4k randread, 3T5Q"), "{points}");
    assert!(points.contains("4k randrw 50/50, 1T1Q"), "{points}");
    assert!(html.contains("bench suite"));
    let ended = summary_row(&html, "Ended").unwrap();
    assert!(!ended.contains("1970"), "{ended}");
}
