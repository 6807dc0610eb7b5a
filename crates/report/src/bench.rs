//! `bench --output-format json` output read as a result document: one run of one workload
//! is a suite of one phase (a [`Phase::Point`]). The adapter reads the JSON loosely, so
//! outputs of older and newer driveprobe versions are all accepted: percentile keys in
//! any of the spellings bench has used (`"99.9"`, `"p99.9"`, `"p99_9"`), `rw` given or
//! worked out from the pattern and the read share.

use serde_json::Value;

use crate::protocol::hist::LatencyHist;
use crate::protocol::result::{
    DirFigures, Phase, Round, SuiteResult, WorkloadDesc, SCHEMA_VERSION,
};

/// The suite name a bench run gets in the report.
pub const BENCH_SUITE: &str = "bench";

/// Whether `v` is the JSON bench prints (and not some other JSON without a schema).
pub fn is_bench_output(v: &Value) -> bool {
    v.get("schema_version").is_none()
        && v.get("driveprobe_version").is_some_and(Value::is_string)
        && v.get("workload").is_some_and(Value::is_object)
        && ["read", "write"]
            .iter()
            .all(|d| v.get(d).and_then(|d| d.get("lat_ns")).is_some())
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

fn uint(v: Option<&Value>) -> u64 {
    v.and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)))
        .unwrap_or(0)
}

/// A value as text: a string as it is, anything else as compact JSON.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The percentile `want` (50, 99, 99.9) of a latency object, whichever key style it uses:
/// a `percentiles` map or keys beside `mean`, with or without a `p`, `.` or `_`.
fn percentile(lat: &Value, want: f64) -> u64 {
    let key_of = |k: &str| -> Option<f64> {
        let k = k.strip_prefix('p').unwrap_or(k).replace('_', ".");
        k.parse::<f64>().ok()
    };
    let find = |m: &serde_json::Map<String, Value>| {
        m.iter()
            .find(|(k, _)| key_of(k).is_some_and(|p| (p - want).abs() < 1e-9))
            .map(|(_, v)| uint(Some(v)))
    };
    lat.get("percentiles")
        .and_then(Value::as_object)
        .and_then(find)
        .or_else(|| lat.as_object().and_then(find))
        .unwrap_or(0)
}

fn dir(d: Option<&Value>) -> DirFigures {
    let Some(d) = d else {
        return DirFigures::default();
    };
    let lat = d.get("lat_ns").cloned().unwrap_or(Value::Null);
    DirFigures {
        ops: uint(d.get("ops")),
        iops: num(d.get("iops")),
        bw_bytes: num(d.get("bw_bytes")),
        lat_mean_ns: num(lat.get("mean")),
        lat_stddev_ns: num(lat.get("stddev")),
        lat_max_ns: uint(lat.get("max")),
        lat_p50_ns: percentile(&lat, 50.0),
        lat_p99_ns: percentile(&lat, 99.0),
        lat_p99_9_ns: percentile(&lat, 99.9),
    }
}

/// A direction's latency histogram, key `field` (bench JSON carries them since issue 23;
/// older output has none, and reads as a document without histograms: it renders, and a
/// merge says it cannot merge it). One present but not in the histogram's form is an
/// error: read as absent, a damaged file would merge as "no histograms".
fn hist(
    v: &Value,
    field: &'static str,
) -> Result<Option<LatencyHist>, (&'static str, serde_json::Error)> {
    v.get(field)
        .map(|h| serde_json::from_value(h.clone()).map_err(|e| (field, e)))
        .transpose()
}

/// fio's rw name of a bench workload: given (newer outputs), else from the pattern and
/// the read share.
fn rw_of(v: &Value, w: &Value) -> String {
    if let Some(rw) = w
        .get("rw")
        .or_else(|| v.get("rw"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        return rw.to_string();
    }
    let read = uint(w.get("rwmixread"));
    let random = w.get("pattern").and_then(Value::as_str) != Some("sequential");
    match (random, read) {
        (true, 100) => "randread",
        (true, 0) => "randwrite",
        (true, _) => "randrw",
        (false, 100) => "read",
        (false, 0) => "write",
        (false, _) => "rw",
    }
    .to_string()
}

/// The result document of one bench run. `written_unix_seconds` (the output file's
/// modification time) dates it; bench's JSON carries no clock time of its own.
/// Fails, naming the key, on a histogram present but damaged.
pub fn to_result(
    v: &Value,
    written_unix_seconds: Option<f64>,
) -> Result<SuiteResult, (&'static str, serde_json::Error)> {
    let w = v.get("workload").cloned().unwrap_or(Value::Null);
    let rw = rw_of(v, &w);
    let bs = text(w.get("bs")).unwrap_or_else(|| "?".to_string());
    let name = text(v.get("name")).unwrap_or_else(|| format!("{bs}-{rw}"));
    let workload = WorkloadDesc {
        name,
        rw,
        bs,
        rwmixread: uint(w.get("rwmixread")).min(100) as u32,
        workers: uint(w.get("numjobs")).max(1) as u32,
        depth: uint(w.get("iodepth")).max(1) as u32,
        distribution: text(w.get("random_distribution")).unwrap_or_else(|| "uniform".into()),
    };
    let runtime = num(v.get("runtime_seconds"));
    let round = Round {
        slot_idle_seconds: num(v.get("slot_idle_seconds")),
        slot_uncounted_seconds: num(v.get("slot_uncounted_seconds")),
        in_flight_seconds: num(v.get("in_flight_seconds")),
        due_missed_ops: uint(v.get("due_missed_ops")),
        read_lat_hist: hist(v, "read_lat_hist")?,
        write_lat_hist: hist(v, "write_lat_hist")?,
        ..Round::from_dirs(0, runtime, dir(v.get("read")), dir(v.get("write")))
    };
    let errors = uint(v.get("errors").and_then(|e| e.get("count")));
    let mismatches = uint(v.get("verify").and_then(|e| e.get("mismatches")));
    let incomplete_reason = match (errors, mismatches) {
        (0, 0) => None,
        (e, m) => Some(format!(
            "the run saw {e} I/O error{} and {m} verify mismatch{}",
            if e == 1 { "" } else { "s" },
            if m == 1 { "" } else { "es" }
        )),
    };
    let (started, ended) = match written_unix_seconds {
        Some(t) if t.is_finite() && t > runtime => (t - runtime, t),
        _ => (0.0, 0.0),
    };
    Ok(SuiteResult {
        schema_version: SCHEMA_VERSION,
        driveprobe_version: text(v.get("driveprobe_version")).unwrap_or_default(),
        suite: BENCH_SUITE.to_string(),
        scale: String::new(),
        target: text(v.get("target")).unwrap_or_default(),
        target_bytes: uint(v.get("target_info").and_then(|t| t.get("size_bytes"))),
        drive: None,
        engine: text(v.get("engine")).unwrap_or_default(),
        started_unix_seconds: started,
        ended_unix_seconds: ended,
        complete: incomplete_reason.is_none(),
        incomplete_reason,
        rated: None,
        phases: vec![Phase::Point { workload, round }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_key_styles() {
        for lat in [
            serde_json::json!({"percentiles": {"50": 1, "99": 2, "99.9": 3}}),
            serde_json::json!({"percentiles": {"p50": 1, "p99": 2, "p99.9": 3}}),
            serde_json::json!({"percentiles": {"p50": 1, "p99": 2, "p99_9": 3}}),
            serde_json::json!({"mean": 0.5, "p50": 1, "p99": 2, "p99.9": 3}),
            serde_json::json!({"percentiles": {"50.000000": 1, "99.000000": 2, "99.900000": 3}}),
        ] {
            assert_eq!(
                [99.9, 99.0, 50.0].map(|p| percentile(&lat, p)),
                [3, 2, 1],
                "{lat}"
            );
        }
    }

    /// A histogram present but damaged is an error naming its key: read as absent, the
    /// file would merge as "no latency histograms".
    #[test]
    fn a_damaged_histogram_is_named_not_dropped() {
        let v = serde_json::json!({
            "driveprobe_version": "x",
            "workload": {"rw": "randread", "bs": "4k"},
            "read": {"ops": 8, "lat_ns": {}},
            "write": {"ops": 0, "lat_ns": {}},
            "read_lat_hist": {"sig_digits": "three"},
        });
        let (field, _) = to_result(&v, None).unwrap_err();
        assert_eq!(field, "read_lat_hist");
        let e = crate::parse(v.to_string().as_bytes(), "b.json").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("b.json: read_lat_hist is not a latency histogram"),
            "{e}"
        );
    }

    /// Bench JSON's histograms land in the one-phase document's round, so bench runs
    /// merge; output without them (older bench) reads as a document without.
    #[test]
    fn histograms_are_kept() {
        let h = serde_json::json!({"sig_digits": 3, "delta_ns": [4095, 2], "counts": [1, 7]});
        let mut v = serde_json::json!({
            "driveprobe_version": "x",
            "workload": {"rw": "randrw", "bs": "4k", "rwmixread": 50},
            "read": {"ops": 8, "lat_ns": {}},
            "write": {"ops": 0, "lat_ns": {}},
            "read_lat_hist": h,
        });
        let doc = to_result(&v, None).unwrap();
        let [Phase::Point { round, .. }] = &doc.phases[..] else {
            panic!("{doc:?}")
        };
        let want: LatencyHist = serde_json::from_value(h).unwrap();
        assert_eq!(round.read_lat_hist.as_ref(), Some(&want));
        assert_eq!(want.total(), 8);
        assert_eq!(round.write_lat_hist, None);
        v.as_object_mut().unwrap().remove("read_lat_hist");
        let doc = to_result(&v, None).unwrap();
        let [Phase::Point { round, .. }] = &doc.phases[..] else {
            panic!("{doc:?}")
        };
        assert_eq!(round.read_lat_hist, None);
    }

    #[test]
    fn rw_given_or_worked_out() {
        let v = serde_json::json!({});
        for (w, rw) in [
            (
                serde_json::json!({"pattern": "random", "rwmixread": 100}),
                "randread",
            ),
            (
                serde_json::json!({"pattern": "random", "rwmixread": 0}),
                "randwrite",
            ),
            (
                serde_json::json!({"pattern": "random", "rwmixread": 70}),
                "randrw",
            ),
            (
                serde_json::json!({"pattern": "sequential", "rwmixread": 100}),
                "read",
            ),
            (
                serde_json::json!({"pattern": "sequential", "rwmixread": 0}),
                "write",
            ),
            (
                serde_json::json!({"pattern": "sequential", "rwmixread": 50}),
                "rw",
            ),
            (
                serde_json::json!({"rw": "randrw", "pattern": "random", "rwmixread": 100}),
                "randrw",
            ),
        ] {
            assert_eq!(rw_of(&v, &w), rw, "{w}");
        }
    }
}
