//! The Prometheus rules, `config/prometheus/driveprobe.rules.yml`: promtool accepts them
//! (`promtool check rules`), their unit tests pass (`promtool test rules
//! config/prometheus/driveprobe.rules.test.yml`), every alert is written in the house style
//! (a severity, a `for:`, a summary, a description and a runbook URL), has a runbook
//! section in `docs/alerts.md` and a unit test where it fires and one where it stays quiet,
//! and every metric the rules read is one the daemon exports (the golden exposition
//! `tests/snapshots/metrics.text004.txt`), `up`, node_exporter's disk time (the join of
//! issue 18), or a recording rule of the file.
//!
//! promtool comes with the Debian package `prometheus`, which `scripts/test` installs:
//! these tests fail (they do not skip) when it is missing. The YAML is read line by line
//! (the crate has no YAML parser); the files keep one key per line, as written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

const RULES: &str = "config/prometheus/driveprobe.rules.yml";
const RULE_TESTS: &str = "config/prometheus/driveprobe.rules.test.yml";
const RUNBOOKS: &str = "docs/alerts.md";
const GOLDEN: &str = "tests/snapshots/metrics.text004.txt";

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(path(rel)).unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
}

/// Runs promtool with `args` from the crate's root, prints what it said, and returns
/// whether it succeeded with its output.
fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): run scripts/test, which installs it \
                 (Debian package prometheus)"
            )
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("promtool {}: {}\n{said}", args.join(" "), out.status);
    (out.status.success(), said)
}

#[test]
fn promtool_checks_the_rules() {
    let (ok, said) = promtool(&["check", "rules", RULES]);
    assert!(ok, "promtool check rules {RULES} failed:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

#[test]
fn promtool_unit_tests_pass() {
    let (ok, said) = promtool(&["test", "rules", RULE_TESTS]);
    assert!(ok, "promtool test rules {RULE_TESTS} failed:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

/// One rule of the rules file: its kind (`alert` or `record`), name, and its other lines
/// up to the next rule or group.
#[derive(Debug)]
struct Rule {
    kind: &'static str,
    name: String,
    body: Vec<String>,
}

impl Rule {
    /// The value of `key:` on a line of the rule (first occurrence), unquoted.
    fn value(&self, key: &str) -> Option<String> {
        let prefix = format!("{key}:");
        self.body.iter().find_map(|l| {
            let rest = l.trim().strip_prefix(&prefix)?;
            Some(rest.trim().trim_matches('"').trim_matches('\'').to_string())
        })
    }

    /// The text of the rule's `expr:`: inline, or the block of lines indented under it.
    fn expr(&self) -> String {
        let mut lines = self.body.iter();
        let mut text = String::new();
        while let Some(l) = lines.next() {
            let Some(rest) = l.trim_start().strip_prefix("expr:") else {
                continue;
            };
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with('|') && !rest.starts_with('>') {
                return rest.to_string();
            }
            let indent = indent_of(l);
            for l in lines.by_ref() {
                if !l.trim().is_empty() && indent_of(l) <= indent {
                    break;
                }
                text.push_str(l.trim());
                text.push('\n');
            }
            return text;
        }
        panic!("rule {} has no expr", self.name)
    }
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The rules of the rules file, in order (comments dropped).
fn rules() -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for line in read(RULES).lines() {
        let t = line.trim();
        if t.starts_with('#') {
            continue;
        }
        if let Some(name) = t.strip_prefix("- alert:") {
            rules.push(Rule {
                kind: "alert",
                name: name.trim().to_string(),
                body: Vec::new(),
            });
        } else if let Some(name) = t.strip_prefix("- record:") {
            rules.push(Rule {
                kind: "record",
                name: name.trim().to_string(),
                body: Vec::new(),
            });
        } else if t.starts_with("- name:") {
            // A new group: the lines that follow belong to no rule until the next one.
            rules.push(Rule {
                kind: "group",
                name: t.to_string(),
                body: Vec::new(),
            });
        } else if let Some(rule) = rules.last_mut() {
            rule.body.push(line.to_string());
        }
    }
    rules.retain(|r| r.kind != "group");
    rules
}

fn alerts() -> Vec<Rule> {
    rules().into_iter().filter(|r| r.kind == "alert").collect()
}

/// The anchor GitHub makes of a heading made of letters.
fn anchor(heading: &str) -> String {
    heading.trim().to_ascii_lowercase()
}

#[test]
fn the_rules_file_has_the_alerts_and_recordings_of_the_contract() {
    let rules = rules();
    let names: BTreeSet<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    for want in [
        // alerts of issue 6
        "DriveprobeLatencyRegression",
        "DriveprobeCriticalWarning",
        "DriveprobeSpareLow",
        "DriveprobeEnduranceHigh",
        "DriveprobeWearoutSoon",
        "DriveprobeTemperatureHigh",
        "DriveprobeMediaErrorsIncreasing",
        "DriveprobeProbeErrors",
        "DriveprobeDriveAbsent",
        "DriveprobeRunRegression",
        "DriveprobeCollectorFailing",
        "DriveprobeWearBudgetExceeded",
        "DriveprobeDown",
        // ATA sectors that cannot be read, and link CRC errors
        "DriveprobePendingSectors",
        "DriveprobeInterfaceCrcErrors",
        // recording rules the dashboards read (grafana/)
        "driveprobe:probe_latency_p99_seconds:avg30m",
        "driveprobe:probe_latency_p99_seconds:median7d",
        "driveprobe:probe_latency_regression:ratio",
        "driveprobe:probe_latency_seconds:p99_5m",
        "driveprobe:probe_iops:rate5m",
        "driveprobe:probe_errors:rate5m",
        "driveprobe:endurance_days_left",
        // the join with node_exporter's disk statistics (issue 18)
        "driveprobe:drive_busy:ratio_rate5m",
        "driveprobe:probe_latency_p99_seconds:with_device",
        // thresholds
        "driveprobe:threshold:latency_regression_ratio",
        "driveprobe:threshold:spare_low_margin_ratio",
        "driveprobe:threshold:endurance_used_ratio",
        "driveprobe:threshold:wearout_days",
        "driveprobe:threshold:temperature_celsius",
        "driveprobe:threshold:run_regression_ratio",
    ] {
        assert!(names.contains(want), "{RULES} has no rule {want}");
    }
    let mut seen = BTreeSet::new();
    for r in &rules {
        assert!(seen.insert(&r.name), "{RULES}: {} is defined twice", r.name);
        match r.kind {
            "record" => assert!(
                r.name
                    .strip_prefix("driveprobe:")
                    .is_some_and(|rest| !rest.is_empty() && !rest.starts_with(':')),
                "recording rule {} is not named driveprobe:metric[:operations]",
                r.name
            ),
            _ => assert!(
                r.name.starts_with("Driveprobe")
                    && r.name.chars().all(|c| c.is_ascii_alphanumeric()),
                "alert {} is not CamelCase with the Driveprobe prefix",
                r.name
            ),
        }
        if r.name.starts_with("driveprobe:threshold:") {
            let expr = r.expr();
            assert!(
                expr.trim().starts_with("vector(") && expr.trim().ends_with(')'),
                "threshold {} is not a vector(N) constant: {expr}",
                r.name
            );
        }
    }
}

#[test]
fn every_alert_has_severity_for_annotations_and_its_runbook_url() {
    let alerts = alerts();
    assert!(alerts.len() >= 13, "{alerts:?}");
    for a in &alerts {
        let severity = a.value("severity").unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity.as_str()),
            "{}: severity {severity:?}",
            a.name
        );
        assert!(a.value("for").is_some(), "{}: no for:", a.name);
        for key in ["summary", "description"] {
            assert!(
                a.value(key).is_some_and(|v| !v.is_empty()),
                "{}: no {key}",
                a.name
            );
        }
        let want = format!("docs/alerts.md#{}", anchor(&a.name));
        assert_eq!(
            a.value("runbook_url").as_deref(),
            Some(want.as_str()),
            "{}: runbook_url",
            a.name
        );
    }
}

#[test]
fn every_alert_has_a_runbook_section_and_every_section_an_alert() {
    let doc = read(RUNBOOKS);
    let sections: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter(|h| h.starts_with("Driveprobe"))
        .map(anchor)
        .collect();
    let alerts: BTreeSet<String> = alerts().iter().map(|a| anchor(&a.name)).collect();
    let missing: Vec<_> = alerts.difference(&sections).collect();
    assert!(
        missing.is_empty(),
        "{RUNBOOKS} has no section for {missing:?}"
    );
    let stale: Vec<_> = sections.difference(&alerts).collect();
    assert!(
        stale.is_empty(),
        "{RUNBOOKS} has sections for no alert: {stale:?}"
    );
    // Every threshold the rules define is in the thresholds table.
    for r in rules() {
        if r.name.starts_with("driveprobe:threshold:") {
            assert!(
                doc.contains(&format!("| `{}` |", r.name)),
                "{RUNBOOKS}: the thresholds table lacks {}",
                r.name
            );
        }
    }
}

#[test]
fn every_alert_has_a_unit_test_where_it_fires_and_one_where_it_stays_quiet() {
    // alertname -> (cases where alerts are expected, cases where none are)
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let text = read(RULE_TESTS);
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("alertname:") {
            current = Some(name.trim().to_string());
        } else if let Some(rest) = t.strip_prefix("exp_alerts:") {
            let name = current
                .take()
                .unwrap_or_else(|| panic!("{RULE_TESTS}: exp_alerts without alertname"));
            let entry = cases.entry(name).or_default();
            if rest.trim() == "[]" {
                entry.1 += 1;
            } else {
                entry.0 += 1;
            }
        }
    }
    for a in alerts() {
        let (fires, quiet) = cases.get(&a.name).copied().unwrap_or_default();
        assert!(
            fires >= 1 && quiet >= 1,
            "{RULE_TESTS}: {} has {fires} firing and {quiet} quiet cases; it needs one of each",
            a.name
        );
    }
    let known: BTreeSet<String> = alerts().into_iter().map(|a| a.name).collect();
    for name in cases.keys() {
        assert!(
            known.contains(name),
            "{RULE_TESTS} tests unknown alert {name}"
        );
    }
}

/// PromQL functions, aggregations and keywords: identifiers that are not metric names.
const PROMQL_WORDS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "and",
    "avg",
    "avg_over_time",
    "bool",
    "bottomk",
    "by",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count",
    "count_over_time",
    "count_values",
    "delta",
    "deriv",
    "floor",
    "group",
    "group_left",
    "group_right",
    "histogram_quantile",
    "ignoring",
    "increase",
    "irate",
    "label_replace",
    "last_over_time",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "offset",
    "on",
    "or",
    "predict_linear",
    "present_over_time",
    "quantile",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sort",
    "stddev",
    "sum",
    "sum_over_time",
    "time",
    "timestamp",
    "topk",
    "unless",
    "vector",
    "without",
];

/// The metric names an expression reads: identifiers outside label matchers (`{...}`),
/// ranges (`[...]`), strings, and the label lists of by/without/on/ignoring/group_left,
/// that are no PromQL word.
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut label_list_next = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            let close = c;
            i += 1;
            while i < chars.len() && chars[i] != close {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            while i < chars.len() && chars[i] != close {
                i += 1;
            }
            i += 1;
        } else if c == '(' && label_list_next {
            while i < chars.len() && chars[i] != ')' {
                i += 1;
            }
            i += 1;
            label_list_next = false;
        } else if c.is_ascii_digit() || c == '.' {
            // A number (1e9, 0.5, 86400): digits, letters and dots.
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            label_list_next = [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&word.as_str());
            if !PROMQL_WORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            if !c.is_whitespace() {
                label_list_next = false;
            }
            i += 1;
        }
    }
    names
}

#[test]
fn metric_names_are_found_in_expressions() {
    assert_eq!(
        metric_names(
            "max without (quantile) (avg_over_time(a_b{quantile=\"0.99\", x=~\"y.*z\"}[30m]))\n\
             / on() group_left() driveprobe:threshold:x > 0.5 and on(job, drive) up offset 5m\n\
             or histogram_quantile(0.99, sum by (le) (rate(c_bucket[5m]))) * 1e9"
        ),
        ["a_b", "driveprobe:threshold:x", "up", "c_bucket"]
    );
}

#[test]
fn rules_read_only_exported_metrics_up_and_their_own_recordings() {
    let golden = read(GOLDEN);
    let exported: BTreeSet<&str> = golden
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
        .collect();
    let rules = rules();
    let recorded: BTreeSet<&str> = rules
        .iter()
        .filter(|r| r.kind == "record")
        .map(|r| r.name.as_str())
        .collect();
    let mut read_somewhere = BTreeSet::new();
    let mut unknown = Vec::new();
    for r in &rules {
        for name in metric_names(&r.expr()) {
            let ok = name == "up"
                || NODE_EXPORTER_METRICS.contains(&name.as_str())
                || exported.contains(name.as_str())
                || recorded.contains(name.as_str());
            if !ok {
                unknown.push(format!("{} reads {name}", r.name));
            }
            read_somewhere.insert(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "the rules read metrics that are neither in {GOLDEN}, up, nor recorded in {RULES}:\n{}",
        unknown.join("\n")
    );
    // The scan did see the rules' inputs (a broken scan would pass the check above).
    for name in [
        "up",
        "driveprobe_probe_latency_quantile_seconds",
        "driveprobe_probe_latency_seconds_bucket",
        "driveprobe_run_iops",
        "driveprobe:threshold:latency_regression_ratio",
        "node_disk_io_time_seconds_total",
        "driveprobe_drive_info",
    ] {
        assert!(read_somewhere.contains(name), "no rule reads {name}?");
    }
    // Every recording rule but the dashboards' own is read by some rule or is documented.
    let doc = read(RUNBOOKS);
    for name in &recorded {
        assert!(
            read_somewhere.contains(*name) || doc.contains(name) || is_dashboard_only(name),
            "{name} is recorded but neither read by a rule nor documented in {RUNBOOKS}"
        );
    }
}

/// node_exporter's metrics the rules join with driveprobe's (through `driveprobe_drive_info`'s
/// `device` label; docs/alerts.md, "Joining node_exporter"). tests/prometheus_e2e.rs runs
/// the rules on a real node_exporter's series.
const NODE_EXPORTER_METRICS: &[&str] = &["node_disk_io_time_seconds_total"];

/// Recordings kept for the dashboards (grafana/) only.
fn is_dashboard_only(name: &str) -> bool {
    [
        "driveprobe:probe_latency_seconds:p99_5m",
        "driveprobe:probe_iops:rate5m",
        "driveprobe:probe_bytes:rate5m",
        "driveprobe:wear_budget_used:ratio",
    ]
    .contains(&name)
}
