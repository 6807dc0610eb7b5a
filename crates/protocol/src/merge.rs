//! Merging result documents of the same suite (several drives of a model, several hosts)
//! into one: each round's latency figures become those of the union of the runs' I/Os,
//! read from the merged histograms (so its percentiles are what one run over all of them
//! would have shown), and its throughput figures the mean over the runs (a merged
//! document describes one typical drive of the set; its `ops` count every I/O).

use super::hist::{HistError, LatencyHist};
use super::result::{
    CurvePoint, DirFigures, Phase, Round, SteadyState, SuiteResult, SweepPoint, WorkloadDesc,
};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge: give two or more result documents")]
    Nothing,
    #[error("{0} is a {1} document and {2} a {3} one: only runs of the same suite at the same scale merge")]
    Suite(String, String, String, String),
    #[error("{0} has {1} phase(s) and {2} has {3}: only runs of the same suite that both finished merge")]
    Phases(String, usize, String, usize),
    #[error("{doc}, phase {phase}: {what}")]
    Mismatch {
        doc: String,
        phase: usize,
        what: String,
    },
    #[error("{doc}, phase {phase}: no latency histograms (written before driveprobe kept them, or an application workload): its percentiles cannot be merged")]
    NoHistogram { doc: String, phase: usize },
    #[error("{doc}: {source}")]
    Hist { doc: String, source: HistError },
    /// Counts whose sum passes what a u64 holds: no real runs do that many I/Os (a drive
    /// at 10 million IOPS takes 58,000 years to reach it), so a document was altered;
    /// a wrapped or saturated sum would be a wrong figure, not a merge.
    #[error("{doc}, phase {phase}: the {what} of these documents add up past 18,446,744,073,709,551,615, more than any real runs count; a document was altered: merge the documents as the runs wrote them")]
    Overflow {
        doc: String,
        phase: usize,
        what: &'static str,
    },
}

/// The sum of `values`, or [`MergeError::Overflow`] naming `what` when it passes u64.
fn checked_sum(
    values: impl IntoIterator<Item = u64>,
    doc: &str,
    phase: usize,
    what: &'static str,
) -> Result<u64, MergeError> {
    values
        .into_iter()
        .try_fold(0u64, u64::checked_add)
        .ok_or_else(|| MergeError::Overflow {
            doc: doc.to_string(),
            phase,
            what,
        })
}

/// Merges `docs` (name, document); the names are only for errors and the merged
/// document's `target`.
pub fn merge_documents(docs: &[(String, SuiteResult)]) -> Result<SuiteResult, MergeError> {
    let ((first_name, first), rest) = docs.split_first().ok_or(MergeError::Nothing)?;
    if rest.is_empty() {
        return Err(MergeError::Nothing);
    }
    for (name, d) in rest {
        if d.suite != first.suite || d.scale != first.scale {
            return Err(MergeError::Suite(
                first_name.clone(),
                format!("{} ({})", first.suite, first.scale),
                name.clone(),
                format!("{} ({})", d.suite, d.scale),
            ));
        }
        if d.phases.len() != first.phases.len() {
            return Err(MergeError::Phases(
                first_name.clone(),
                first.phases.len(),
                name.clone(),
                d.phases.len(),
            ));
        }
    }
    let mut phases = Vec::with_capacity(first.phases.len());
    for i in 0..first.phases.len() {
        let all: Vec<(&str, &Phase)> = docs
            .iter()
            .map(|(n, d)| (n.as_str(), &d.phases[i]))
            .collect();
        phases.push(merge_phase(i, &all)?);
    }
    let same_drive = docs.iter().all(|(_, d)| d.drive == first.drive);
    let names: Vec<&str> = docs.iter().map(|(n, _)| n.as_str()).collect();
    Ok(SuiteResult {
        target: format!("merged: {}", names.join(", ")),
        target_bytes: docs.iter().map(|(_, d)| d.target_bytes).min().unwrap_or(0),
        drive: if same_drive {
            first.drive.clone()
        } else {
            None
        },
        started_unix_seconds: docs
            .iter()
            .map(|(_, d)| d.started_unix_seconds)
            .fold(f64::INFINITY, f64::min),
        ended_unix_seconds: docs
            .iter()
            .map(|(_, d)| d.ended_unix_seconds)
            .fold(f64::NEG_INFINITY, f64::max),
        complete: docs.iter().all(|(_, d)| d.complete),
        incomplete_reason: docs
            .iter()
            .find_map(|(n, d)| d.incomplete_reason.as_ref().map(|r| format!("{n}: {r}"))),
        phases,
        ..first.clone()
    })
}

fn mismatch(doc: &str, phase: usize, what: String) -> MergeError {
    MergeError::Mismatch {
        doc: doc.to_string(),
        phase,
        what,
    }
}

/// Merges phase `i` of every run (name, phase) into one phase.
fn merge_phase(i: usize, all: &[(&str, &Phase)]) -> Result<Phase, MergeError> {
    check_same_phase(i, all)?;
    let (_, first) = all[0];
    Ok(match first {
        Phase::Purge { .. } | Phase::Precondition { .. } | Phase::Fill { .. } => first.clone(),
        Phase::Qos { .. } => {
            return Err(mismatch(
                all[0].0,
                i,
                "a QoS qualification: each run qualifies its own drive at its own rates, so these do not merge".into(),
            ))
        }
        Phase::Pts(_) => {
            return Err(mismatch(
                all[0].0,
                i,
                "a SNIA PTS test (throughput, xsr, hir, dirth): its figures are per round of one drive's history, so these do not merge".into(),
            ))
        }
        Phase::App { .. } => {
            return Err(MergeError::NoHistogram {
                doc: all[0].0.to_string(),
                phase: i,
            })
        }
        Phase::Point { workload, .. } => merge_point(i, all, workload)?,
        Phase::SteadyState {
            workload, steady, ..
        } => merge_steady_state(i, all, workload, steady)?,
        Phase::Sweep { workload, points } => merge_sweep(i, all, workload, points)?,
        Phase::RateCurve {
            workload, points, ..
        } => merge_rate_curve(i, all, workload, points)?,
        Phase::WriteSaturation { workload, .. } => merge_write_saturation(i, all, workload)?,
    })
}

/// Checks that every run's phase `i` is of the same kind and has the same workload as
/// the first's.
fn check_same_phase(i: usize, all: &[(&str, &Phase)]) -> Result<(), MergeError> {
    let (_, first) = all[0];
    let kind = |p: &Phase| std::mem::discriminant(p);
    for &(n, p) in &all[1..] {
        if kind(p) != kind(first) {
            return Err(mismatch(n, i, "a different kind of phase".into()));
        }
    }
    // The workload must be the same one.
    let workload = |p: &Phase| match p {
        Phase::SteadyState { workload, .. }
        | Phase::Sweep { workload, .. }
        | Phase::RateCurve { workload, .. }
        | Phase::WriteSaturation { workload, .. }
        | Phase::Point { workload, .. } => Some(workload.clone()),
        _ => None,
    };
    for &(n, p) in &all[1..] {
        if workload(p) != workload(first) {
            return Err(mismatch(n, i, "a different workload".into()));
        }
    }
    Ok(())
}

/// Merges the rounds that `f` takes from each run's phase, by position over the runs'
/// common length.
fn rounds_by_position(
    i: usize,
    all: &[(&str, &Phase)],
    f: &dyn Fn(&Phase) -> Vec<Round>,
) -> Result<Vec<Round>, MergeError> {
    // Rounds by position over the runs' common length (a steady state reached sooner
    // in one run has fewer rounds).
    let per: Vec<(&str, Vec<Round>)> = all.iter().map(|&(n, p)| (n, f(p))).collect();
    let len = per.iter().map(|(_, r)| r.len()).min().unwrap_or(0);
    (0..len)
        .map(|k| {
            let rs: Vec<(&str, &Round)> = per.iter().map(|(n, r)| (*n, &r[k])).collect();
            merge_rounds(i, &rs)
        })
        .collect()
}

/// Merges the runs' single measured round of a fixed workload.
fn merge_point(
    i: usize,
    all: &[(&str, &Phase)],
    workload: &WorkloadDesc,
) -> Result<Phase, MergeError> {
    Ok(Phase::Point {
        workload: workload.clone(),
        round: rounds_by_position(i, all, &|p| match p {
            Phase::Point { round, .. } => vec![round.clone()],
            _ => vec![],
        })?
        .remove(0),
    })
}

/// Merges the runs' preconditioning to steady state: rounds, burst and steady figures,
/// and the steady-state verdict (attained only when attained in every run).
fn merge_steady_state(
    i: usize,
    all: &[(&str, &Phase)],
    workload: &WorkloadDesc,
    steady: &SteadyState,
) -> Result<Phase, MergeError> {
    let pick = |f: fn(&Phase) -> Option<Round>| {
        rounds_by_position(i, all, &move |p| f(p).into_iter().collect())
    };
    let rounds = rounds_by_position(i, all, &|p| match p {
        Phase::SteadyState { rounds, .. } => rounds.clone(),
        _ => vec![],
    })?;
    let burst = pick(|p| match p {
        Phase::SteadyState { burst, .. } => Some(burst.clone()),
        _ => None,
    })?
    .remove(0);
    let steady_figures = pick(|p| match p {
        Phase::SteadyState { steady_figures, .. } => Some(steady_figures.clone()),
        _ => None,
    })?
    .remove(0);
    let mut steady = steady.clone();
    let attained = all
        .iter()
        .all(|&(_, p)| matches!(p, Phase::SteadyState { steady, .. } if steady.attained));
    steady.attained = attained;
    steady.window_mean_iops = steady_figures.iops;
    // A drive that left steady state in any run is flagged in the merge (the
    // largest departure), whichever document comes first.
    steady.left = all
        .iter()
        .filter_map(|&(_, p)| match p {
            Phase::SteadyState { steady, .. } => steady.left,
            _ => None,
        })
        .max_by(|a, b| a.departure_ratio.abs().total_cmp(&b.departure_ratio.abs()));
    Ok(Phase::SteadyState {
        workload: workload.clone(),
        steady,
        rounds,
        burst,
        steady_figures,
    })
}

/// Merges the runs' thread/queue matrices point by point, matched by workers and depth.
fn merge_sweep(
    i: usize,
    all: &[(&str, &Phase)],
    workload: &WorkloadDesc,
    points: &[SweepPoint],
) -> Result<Phase, MergeError> {
    let mut out = Vec::new();
    for pt in points {
        let mut rs = Vec::new();
        for &(n, p) in all {
            let Phase::Sweep { points, .. } = p else {
                unreachable!("kinds checked")
            };
            let found = points
                .iter()
                .find(|q| q.workers == pt.workers && q.depth == pt.depth)
                .ok_or_else(|| mismatch(n, i, format!("no {}x{} point", pt.workers, pt.depth)))?;
            rs.push((n, &found.round));
        }
        out.push(SweepPoint {
            workers: pt.workers,
            depth: pt.depth,
            round: merge_rounds(i, &rs)?,
        });
    }
    Ok(Phase::Sweep {
        workload: workload.clone(),
        points: out,
    })
}

/// Merges the runs' latency-against-load curves point by point over their common
/// length; target and maximum rates become the means.
fn merge_rate_curve(
    i: usize,
    all: &[(&str, &Phase)],
    workload: &WorkloadDesc,
    points: &[CurvePoint],
) -> Result<Phase, MergeError> {
    let mean =
        |f: &dyn Fn(&Phase) -> f64| all.iter().map(|&(_, p)| f(p)).sum::<f64>() / all.len() as f64;
    let len = all
        .iter()
        .map(|&(_, p)| match p {
            Phase::RateCurve { points, .. } => points.len(),
            _ => 0,
        })
        .min()
        .unwrap_or(0);
    let mut out = Vec::new();
    for (k, pt) in points.iter().take(len).enumerate() {
        let mut rs = Vec::new();
        let mut target = 0.0;
        for &(n, p) in all {
            let Phase::RateCurve { points, .. } = p else {
                unreachable!("kinds checked")
            };
            rs.push((n, &points[k].round));
            target += points[k].target_iops;
        }
        out.push(CurvePoint {
            fraction: pt.fraction,
            target_iops: target / all.len() as f64,
            round: merge_rounds(i, &rs)?,
        });
    }
    Ok(Phase::RateCurve {
        workload: workload.clone(),
        max_iops: mean(&|p| match p {
            Phase::RateCurve { max_iops, .. } => *max_iops,
            _ => 0.0,
        }),
        points: out,
    })
}

/// Merges the runs' write saturation rounds by position; bytes written per round become
/// the mean.
fn merge_write_saturation(
    i: usize,
    all: &[(&str, &Phase)],
    workload: &WorkloadDesc,
) -> Result<Phase, MergeError> {
    let rounds = rounds_by_position(i, all, &|p| match p {
        Phase::WriteSaturation { rounds, .. } => rounds.clone(),
        _ => vec![],
    })?;
    let bytes_written = (0..rounds.len())
        .map(|k| {
            let sum: u128 = all
                .iter()
                .map(|&(_, p)| match p {
                    Phase::WriteSaturation { bytes_written, .. } => {
                        bytes_written.get(k).copied().unwrap_or(0) as u128
                    }
                    _ => 0,
                })
                .sum();
            (sum / all.len() as u128) as u64
        })
        .collect();
    Ok(Phase::WriteSaturation {
        workload: workload.clone(),
        rounds,
        bytes_written,
    })
}

/// One direction of several runs' same round: I/Os counted together, latency of the
/// union (mean weighted by I/Os, standard deviation pooled, percentiles from the merged
/// histogram clamped to the largest maximum as the engine clamps), throughput the mean.
fn merge_dir(
    i: usize,
    dirs: &[(&str, &DirFigures, Option<&LatencyHist>)],
) -> Result<(DirFigures, Option<LatencyHist>), MergeError> {
    let n = dirs.len() as f64;
    let ops = checked_sum(
        dirs.iter().map(|d| d.1.ops),
        dirs[0].0,
        i,
        "operation counts",
    )?;
    let mut hists = Vec::new();
    for &(doc, f, h) in dirs {
        match h {
            Some(h) => hists.push(h),
            None if f.ops == 0 => {}
            None => {
                return Err(MergeError::NoHistogram {
                    doc: doc.to_string(),
                    phase: i,
                })
            }
        }
    }
    // The histograms' counts are summed too (HDR saturates a bucket rather than wrap:
    // a merged histogram would then hold fewer I/Os than it says).
    checked_sum(
        hists.iter().map(|h| h.total()),
        dirs[0].0,
        i,
        "latency histogram counts",
    )?;
    let hist = if hists.is_empty() {
        None
    } else {
        Some(
            LatencyHist::merge(hists).map_err(|source| MergeError::Hist {
                doc: dirs[0].0.to_string(),
                source,
            })?,
        )
    };
    let max = dirs.iter().map(|d| d.1.lat_max_ns).max().unwrap_or(0);
    let w = |f: &dyn Fn(&DirFigures) -> f64| {
        if ops == 0 {
            0.0
        } else {
            dirs.iter().map(|d| f(d.1) * d.1.ops as f64).sum::<f64>() / ops as f64
        }
    };
    let mean = w(&|d| d.lat_mean_ns);
    // E[x^2] of each part is its variance plus its mean squared.
    let sq = w(&|d| d.lat_stddev_ns * d.lat_stddev_ns + d.lat_mean_ns * d.lat_mean_ns);
    let p = |q: f64| -> Result<u64, MergeError> {
        Ok(match &hist {
            Some(h) => h
                .percentile_ns(q)
                .map_err(|source| MergeError::Hist {
                    doc: dirs[0].0.to_string(),
                    source,
                })?
                .min(max),
            None => 0,
        })
    };
    Ok((
        DirFigures {
            ops,
            iops: dirs.iter().map(|d| d.1.iops).sum::<f64>() / n,
            bw_bytes: dirs.iter().map(|d| d.1.bw_bytes).sum::<f64>() / n,
            lat_mean_ns: mean,
            lat_stddev_ns: (sq - mean * mean).max(0.0).sqrt(),
            lat_max_ns: max,
            lat_p50_ns: p(50.0)?,
            lat_p99_ns: p(99.0)?,
            lat_p99_9_ns: p(99.9)?,
        },
        hist,
    ))
}

/// The same round of several runs as one.
pub fn merge_rounds(i: usize, rounds: &[(&str, &Round)]) -> Result<Round, MergeError> {
    let n = rounds.len().max(1) as f64;
    let reads: Vec<_> = rounds
        .iter()
        .map(|&(d, r)| (d, &r.read, r.read_lat_hist.as_ref()))
        .collect();
    let writes: Vec<_> = rounds
        .iter()
        .map(|&(d, r)| (d, &r.write, r.write_lat_hist.as_ref()))
        .collect();
    let (read, read_lat_hist) = merge_dir(i, &reads)?;
    let (write, write_lat_hist) = merge_dir(i, &writes)?;
    let first = rounds[0].1;
    // A round counts its reads and writes together (`Round::from_dirs`).
    checked_sum([read.ops, write.ops], rounds[0].0, i, "operation counts")?;
    let due_missed_ops = checked_sum(
        rounds.iter().map(|&(_, r)| r.due_missed_ops),
        rounds[0].0,
        i,
        "missed due times",
    )?;
    let avg = |f: &dyn Fn(&Round) -> f64| rounds.iter().map(|&(_, r)| f(r)).sum::<f64>() / n;
    Ok(Round {
        slot_idle_seconds: avg(&|r| r.slot_idle_seconds),
        slot_uncounted_seconds: avg(&|r| r.slot_uncounted_seconds),
        in_flight_seconds: avg(&|r| r.in_flight_seconds),
        due_missed_ops,
        read_lat_hist,
        write_lat_hist,
        ..Round::from_dirs(first.index, avg(&|r| r.end_seconds), read, write)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{SuiteResult, SCHEMA_VERSION};

    /// A one-point document whose reads counted `ops` I/Os, with their histogram.
    fn doc(ops: u64, due_missed: u64) -> SuiteResult {
        let read = DirFigures {
            ops,
            iops: 1000.0,
            lat_mean_ns: 100_000.0,
            lat_max_ns: 200_000,
            ..DirFigures::default()
        };
        let mut round = Round::from_dirs(0, 60.0, read, DirFigures::default());
        round.due_missed_ops = due_missed;
        round.read_lat_hist = Some(LatencyHist {
            sig_digits: 3,
            delta_ns: vec![100_000],
            counts: vec![ops],
        });
        SuiteResult {
            schema_version: SCHEMA_VERSION,
            driveprobe_version: "0.1.0".into(),
            suite: "bench".into(),
            scale: "quick".into(),
            target: "/dev/shm/x".into(),
            target_bytes: 1 << 30,
            drive: None,
            engine: "io_uring".into(),
            started_unix_seconds: 1.7e9,
            ended_unix_seconds: 1.7e9 + 60.0,
            complete: true,
            incomplete_reason: None,
            rated: None,
            phases: vec![Phase::Point {
                workload: WorkloadDesc {
                    name: "4k-randread".into(),
                    rw: "randread".into(),
                    bs: "4k".into(),
                    rwmixread: 100,
                    workers: 1,
                    depth: 1,
                    distribution: "uniform".into(),
                },
                round,
            }],
        }
    }

    fn merge(docs: &[SuiteResult]) -> Result<SuiteResult, MergeError> {
        let named: Vec<(String, SuiteResult)> = docs
            .iter()
            .enumerate()
            .map(|(i, d)| (format!("run{i}.json"), d.clone()))
            .collect();
        merge_documents(&named)
    }

    #[test]
    fn counts_that_would_pass_u64_are_refused_not_wrapped() {
        let half = 1u64 << 63;
        // 2^63 + 2^63 wrapped to 0: the merged document said no I/O was done.
        let e = merge(&[doc(half, 0), doc(half, 0)]).unwrap_err();
        assert!(
            matches!(
                e,
                MergeError::Overflow {
                    what: "operation counts",
                    phase: 0,
                    ..
                }
            ),
            "{e}"
        );
        let line = e.to_string();
        assert!(line.starts_with("run0.json, phase 0: the operation counts of these documents add up past 18,446,744,073,709,551,615"), "{line}");
        assert!(!line.contains('\n'));
        let e = merge(&[doc(1, half), doc(1, half)]).unwrap_err();
        assert!(
            matches!(
                e,
                MergeError::Overflow {
                    what: "missed due times",
                    ..
                }
            ),
            "{e}"
        );
        // At the edge, the sum is kept exactly.
        let m = merge(&[doc(half - 1, 0), doc(half, 0)]).unwrap();
        let Phase::Point { round, .. } = &m.phases[0] else {
            panic!("a point")
        };
        assert_eq!(round.read.ops, u64::MAX);
        assert_eq!(round.read_lat_hist.as_ref().unwrap().total(), u64::MAX);
    }
}
