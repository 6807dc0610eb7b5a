//! `driveprobe report`: one self-contained HTML page from one or more suite result
//! documents, with the charts of the drive reviews (preconditioning curves from burst to
//! steady state, thread/queue sweeps, latency against load, write saturation) drawn as
//! inline SVG. Several documents on one page are overlaid, one colour each.
//!
//! [`render`] is pure (documents in, HTML out); [`load`] reads and checks one document.
//! The JSON of `bench --output-format json` is a document too: one run, one phase.
#![forbid(unsafe_code)]

use driveprobe_core::{fmt, units};
use driveprobe_health as health;
use driveprobe_protocol as protocol;
use driveprobe_protocol::app;

mod bench;
mod chart;
mod exceedance;
mod page;
mod pts_charts;

use std::collections::HashMap;
use std::path::Path;

use crate::protocol::result::{SuiteResult, SCHEMA_VERSION};

pub use exceedance::qos_line;
pub use page::render;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: cannot read it: {source}{}", read_hint(.source))]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, `/dev/zero`), or larger than [`MAX_DOCUMENT_BYTES`].
    #[error("{path}: cannot read it: {source}")]
    NotRead {
        path: String,
        source: driveprobe_core::file::FileError,
    },
    #[error("{path}: not valid JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: not a driveprobe result document (no schema_version) nor `bench --output-format json` output")]
    NotResult { path: String },
    #[error("{path}: schema_version {found} is not known (this driveprobe reads version {known}); use a driveprobe that wrote it")]
    Schema {
        path: String,
        found: String,
        known: u32,
    },
    #[error("{path}: not a valid result document: {source}")]
    Shape {
        path: String,
        source: serde_json::Error,
    },
    /// A bench output whose histogram is there but not in the histogram's form: a damaged
    /// file, said rather than read as a run without histograms.
    #[error("{path}: {field} is not a latency histogram ({source}); the file is damaged: run the bench again")]
    BenchHist {
        path: String,
        field: &'static str,
        source: serde_json::Error,
    },
}

/// What to do about a document that cannot be read.
fn read_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            "; give the path of a result document (`driveprobe bench --suite ... --output-format \
             json > FILE` writes one; the daemon keeps each run's in STATE_DIR/runs/)"
        }
        std::io::ErrorKind::PermissionDenied => "; run as a user who may read it",
        _ => "",
    }
}

/// Parses a result document, or bench's JSON output; `name` (a file name) is only used in
/// errors.
pub fn parse(bytes: &[u8], name: &str) -> Result<SuiteResult, ReportError> {
    parse_written(bytes, name, None)
}

/// [`parse`], with the time the file was written (dates a bench output, which carries no
/// clock time of its own).
fn parse_written(
    bytes: &[u8],
    name: &str,
    written_unix_seconds: Option<f64>,
) -> Result<SuiteResult, ReportError> {
    let mut value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| ReportError::Json {
            path: name.to_string(),
            source,
        })?;
    // The render's cost is bounded by design: no histogram it draws is finer than the
    // engine's 3 digits (a 5-digit one is 100 times the work, a dense 27 MB, per round).
    crate::protocol::hist::coarsen_finer_than(
        &mut value,
        *crate::protocol::hist::KEPT_DIGITS.end(),
    );
    match value.get("schema_version") {
        None if bench::is_bench_output(&value) => {
            return bench::to_result(&value, written_unix_seconds).map_err(|(field, source)| {
                ReportError::BenchHist {
                    path: name.to_string(),
                    field,
                    source,
                }
            })
        }
        None => {
            return Err(ReportError::NotResult {
                path: name.to_string(),
            })
        }
        Some(v) if v.as_u64() == Some(u64::from(SCHEMA_VERSION)) => {}
        Some(v) => {
            return Err(ReportError::Schema {
                path: name.to_string(),
                found: v.to_string(),
                known: SCHEMA_VERSION,
            })
        }
    }
    serde_json::from_value(value).map_err(|source| ReportError::Shape {
        path: name.to_string(),
        source,
    })
}

/// The most of a document `report` reads. The largest the daemon or a suite writes is a
/// full-scale `wsat` of 1,440 rounds with 3-digit histograms, about 100 MB as the daemon
/// writes it (BENCHMARKS.md, "Result document sizes"); more is no result of driveprobe's,
/// and is refused rather than held in memory several times over while it is parsed.
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// What `report` reads as one input.
const DOCUMENT: driveprobe_core::file::Limit = driveprobe_core::file::Limit {
    bytes: MAX_DOCUMENT_BYTES,
    what: "a result document",
};

/// Reads and parses a result document: a regular file only, opened without blocking (a
/// FIFO or `/dev/zero` is refused at once, not waited on or read forever), of at most
/// [`MAX_DOCUMENT_BYTES`].
pub fn load(path: &Path) -> Result<SuiteResult, ReportError> {
    use driveprobe_core::file::{read_regular_bytes, FileError};
    let name = path.display().to_string();
    let bytes = read_regular_bytes(path, DOCUMENT).map_err(|e| match e {
        FileError::Io(source) => ReportError::Read {
            path: name.clone(),
            source,
        },
        source => ReportError::NotRead {
            path: name.clone(),
            source,
        },
    })?;
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    parse_written(&bytes, &name, written)
}

/// How a document is named on the page: the drive's model and serial, else the file name.
pub fn document_label(file: &Path, doc: &SuiteResult) -> String {
    let drive = doc.drive.as_ref();
    let model = drive.and_then(|d| d.model.as_deref()).map(str::trim);
    let serial = drive.and_then(|d| d.serial.as_deref()).map(str::trim);
    match (model, serial) {
        (Some(m), Some(s)) if !m.is_empty() && !s.is_empty() => format!("{m} {s}"),
        (Some(m), _) if !m.is_empty() => m.to_string(),
        _ => file_name(file),
    }
}

fn file_name(file: &Path) -> String {
    file.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.display().to_string())
}

/// Labels every document, adding the file name (then a number) where two labels would be
/// the same, as for two runs on one drive.
pub fn label_documents<P: AsRef<Path>>(docs: Vec<(P, SuiteResult)>) -> Vec<(String, SuiteResult)> {
    let labels: Vec<String> = docs
        .iter()
        .map(|(p, d)| document_label(p.as_ref(), d))
        .collect();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for l in &labels {
        *count.entry(l.as_str()).or_default() += 1;
    }
    let mut labels: Vec<String> = labels
        .iter()
        .zip(&docs)
        .map(|(l, (p, _))| {
            let name = file_name(p.as_ref());
            if count[l.as_str()] > 1 && *l != name {
                format!("{l} ({name})")
            } else {
                l.clone()
            }
        })
        .collect();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for l in labels.iter_mut() {
        let n = seen.entry(l.clone()).or_default();
        *n += 1;
        if *n > 1 {
            *l = format!("{l} #{n}");
        }
    }
    labels
        .into_iter()
        .zip(docs)
        .map(|(l, (_, d))| (l, d))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::model::Identity;

    fn doc(model: Option<&str>, serial: Option<&str>) -> SuiteResult {
        SuiteResult {
            schema_version: SCHEMA_VERSION,
            driveprobe_version: "0.1.0".into(),
            suite: "enterprise".into(),
            scale: "quick".into(),
            target: "/dev/sdb".into(),
            target_bytes: 400_000_000_000,
            drive: Some(Identity {
                model: model.map(String::from),
                serial: serial.map(String::from),
                ..Identity::default()
            }),
            engine: "io_uring".into(),
            started_unix_seconds: 1.7e9,
            ended_unix_seconds: 1.7e9 + 3600.0,
            complete: true,
            incomplete_reason: None,
            rated: None,
            phases: vec![],
        }
    }

    #[test]
    fn parse_checks_json_and_schema() {
        let good = serde_json::to_vec(&doc(Some("M"), Some("S"))).unwrap();
        assert!(parse(&good, "a.json").is_ok());

        let e = parse(b"{not json", "a.json").unwrap_err().to_string();
        assert!(e.starts_with("a.json: not valid JSON"), "{e}");
        let e = parse(b"{}", "a.json").unwrap_err().to_string();
        assert_eq!(
            e,
            "a.json: not a driveprobe result document (no schema_version) nor `bench --output-format json` output"
        );
        let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
        v["schema_version"] = 99.into();
        let e = parse(v.to_string().as_bytes(), "a.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema_version 99 is not known"), "{e}");
        let e = parse(br#"{"schema_version": 1}"#, "a.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("a.json: not a valid result document"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn histograms_finer_than_the_engines_are_read_at_its_three_digits() {
        use crate::protocol::hist::LatencyHist;
        use crate::protocol::result::{DirFigures, Phase, Round, WorkloadDesc};
        // Buckets a 5-digit histogram keeps apart, 3 digits take together.
        let fine = LatencyHist {
            sig_digits: 5,
            delta_ns: vec![1_000_000, 1, 1, 1, 7_000],
            counts: vec![1, 2, 3, 4, 5],
        };
        let mut round = Round::from_dirs(
            0,
            1.0,
            DirFigures {
                ops: 15,
                ..DirFigures::default()
            },
            DirFigures::default(),
        );
        round.read_lat_hist = Some(fine.clone());
        let mut d = doc(Some("M"), Some("S"));
        d.phases = vec![Phase::Point {
            workload: WorkloadDesc {
                name: "w".into(),
                rw: "randread".into(),
                bs: "4k".into(),
                rwmixread: 100,
                workers: 1,
                depth: 1,
                distribution: "uniform".into(),
            },
            round,
        }];
        let back = parse(&serde_json::to_vec(&d).unwrap(), "a.json").unwrap();
        let Phase::Point { round, .. } = &back.phases[0] else {
            panic!("a point")
        };
        let h = round.read_lat_hist.as_ref().unwrap();
        assert_eq!(h.sig_digits, 3);
        assert_eq!(h.total(), 15);
        assert_eq!(*h, fine.coarsen(3).unwrap());
        assert!(h.delta_ns.len() < fine.delta_ns.len());
    }

    #[test]
    fn labels_are_drive_then_file_and_unique() {
        let docs = vec![
            ("x/run1.json", doc(Some("SSD800MM"), Some("S1"))),
            ("x/run2.json", doc(Some("SSD800MM"), Some("S1"))),
            ("y/run3.json", doc(None, None)),
            ("z/run3.json", doc(Some(" "), None)),
            ("z/other.json", doc(Some("HG6"), None)),
        ];
        let labels: Vec<String> = label_documents(docs).into_iter().map(|(l, _)| l).collect();
        assert_eq!(
            labels,
            [
                "SSD800MM S1 (run1.json)",
                "SSD800MM S1 (run2.json)",
                "run3.json",
                "run3.json #2",
                "HG6"
            ]
        );
    }
}
