//! Lint of the Grafana dashboards in `grafana/` (issue 6): the JSON files are what
//! `grafana/generate.py` writes; valid JSON with a schemaVersion; unique panel ids; a
//! `datasource` variable that every panel and target uses (no hard-coded UID); a unit on
//! every panel; job -> instance -> drive variables chained from `driveprobe_drive_info`;
//! every metric a query names exists in the daemon's exposition
//! (`tests/snapshots/metrics.text004.txt`) or is a recording rule
//! (`config/prometheus/driveprobe.rules.yml`); every selector filters by the variables;
//! every query parses (`promtool check rules`); and the layout holds (gridPos everywhere,
//! no overlaps, collapsed rows hold their panels).

use crate::dashboards;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use dashboards::{all_panels, load, DASHBOARDS};
use serde_json::{json, Value};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const RULES_FILE: &str = "config/prometheus/driveprobe.rules.yml";

/// The recording rules announced for issue 6, checked against when the rules file is not
/// there yet.
const ANNOUNCED_RULES: &[&str] = &[
    "driveprobe:probe_latency_p99_seconds:avg30m",
    "driveprobe:probe_latency_p99_seconds:median7d",
    "driveprobe:probe_latency_regression:ratio",
    "driveprobe:probe_latency_seconds:p99_5m",
    "driveprobe:probe_iops:rate5m",
    "driveprobe:probe_errors:rate5m",
    "driveprobe:endurance_days_left",
    "driveprobe:threshold:latency_regression_ratio",
];

/// Recording rules that hold a threshold (one series, no job/instance/drive labels), when
/// the rules file is not there to say so.
const THRESHOLD_PREFIX: &str = "driveprobe:threshold:";

/// Grafana's own variables a query may use.
const BUILTIN_VARIABLES: &[&str] = &[
    "__rate_interval",
    "__interval",
    "__interval_ms",
    "__range",
    "__range_s",
    "__range_ms",
];

fn ds() -> Value {
    json!({"type": "prometheus", "uid": "${datasource}"})
}

fn each_dashboard() -> Vec<(&'static str, Value)> {
    DASHBOARDS.iter().map(|n| (*n, load(&root(), n))).collect()
}

fn is_row(p: &Value) -> bool {
    p["type"] == "row"
}

fn title(p: &Value) -> &str {
    p["title"].as_str().unwrap_or("<untitled>")
}

// ---------------------------------------------------------------------------------------
// The generator
// ---------------------------------------------------------------------------------------

#[test]
fn json_files_are_what_generate_py_writes() {
    let out = Command::new("python3")
        .arg(root().join("grafana/generate.py"))
        .arg("--check")
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install python3"));
    assert!(
        out.status.success(),
        "grafana/*.json and grafana/generate.py disagree (edit generate.py, run it, commit \
         both): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// Dashboard-level checks
// ---------------------------------------------------------------------------------------

#[test]
fn dashboards_are_json_with_a_schema_version_uid_and_title() {
    let mut uids = BTreeSet::new();
    for (name, d) in each_dashboard() {
        let v = d["schemaVersion"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: schemaVersion is not set"));
        assert!(
            (39..=43).contains(&v),
            "{name}: schemaVersion {v}: use a current Grafana's (39 to 43)"
        );
        let uid = d["uid"].as_str().unwrap_or("");
        assert!(!uid.is_empty() && uid.len() <= 40, "{name}: uid {uid:?}");
        assert!(uids.insert(uid.to_string()), "{name}: uid {uid} used twice");
        assert!(
            d["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{name}: no title"
        );
        assert!(
            d.get("__inputs").is_none(),
            "{name}: __inputs (an export for sharing) would ask for a datasource at import"
        );
        assert!(
            d["panels"].as_array().is_some_and(|p| !p.is_empty()),
            "{name}: no panels"
        );
    }
}

#[test]
fn panel_ids_are_unique_per_dashboard() {
    for (name, d) in each_dashboard() {
        let mut seen = BTreeMap::new();
        for p in all_panels(&d) {
            let id = p["id"]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: panel {:?} has no id", title(p)));
            if let Some(other) = seen.insert(id, title(p).to_string()) {
                panic!("{name}: panel id {id} used by {other:?} and {:?}", title(p));
            }
        }
    }
}

#[test]
fn a_datasource_variable_is_used_by_every_panel_and_target() {
    for (name, d) in each_dashboard() {
        let vars = d["templating"]["list"].as_array().expect("templating.list");
        let dsvar = vars
            .iter()
            .find(|v| v["name"] == "datasource")
            .unwrap_or_else(|| panic!("{name}: no datasource variable"));
        assert_eq!(dsvar["type"], "datasource", "{name}");
        assert_eq!(dsvar["query"], "prometheus", "{name}");
        for p in all_panels(&d) {
            if is_row(p) {
                if let Some(ds_) = p.get("datasource") {
                    assert_eq!(ds_, &ds(), "{name}: row {:?}", title(p));
                }
                continue;
            }
            assert_eq!(
                p["datasource"],
                ds(),
                "{name}: panel {:?} datasource",
                title(p)
            );
            let targets = p["targets"].as_array();
            assert!(
                targets.is_some_and(|t| !t.is_empty()),
                "{name}: panel {:?} has no targets",
                title(p)
            );
            for t in targets.into_iter().flatten() {
                assert_eq!(t["datasource"], ds(), "{name}: panel {:?} target", title(p));
            }
        }
        // Nothing anywhere names a datasource other than the variable (the built-in
        // annotation names Grafana itself).
        let mut found = Vec::new();
        datasources(&d, "", &mut found);
        for (path, v) in found {
            let builtin = path.starts_with("/annotations/") && v["type"] == "grafana";
            let variable = v.is_string() && v == "${datasource}";
            assert!(
                v == ds() || builtin || variable,
                "{name}: {path} is a hard-coded datasource: {v}"
            );
        }
    }
}

fn datasources(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let here = format!("{path}/{k}");
                if k == "datasource" {
                    out.push((here.clone(), x.clone()));
                } else {
                    datasources(x, &here, out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                datasources(x, &format!("{path}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_panel_has_a_unit() {
    for (name, d) in each_dashboard() {
        for p in all_panels(&d).into_iter().filter(|p| !is_row(p)) {
            let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
            assert!(
                !unit.trim().is_empty(),
                "{name}: panel {:?} has no fieldConfig.defaults.unit",
                title(p)
            );
        }
    }
}

#[test]
fn job_instance_and_drive_variables_chain_from_drive_info() {
    let expected = [
        ("job", "label_values(driveprobe_drive_info, job)"),
        (
            "instance",
            r#"label_values(driveprobe_drive_info{job=~"$job"}, instance)"#,
        ),
        (
            "drive",
            r#"label_values(driveprobe_drive_info{job=~"$job", instance=~"$instance"}, drive)"#,
        ),
    ];
    for (name, d) in each_dashboard() {
        let vars = d["templating"]["list"].as_array().unwrap();
        let names: Vec<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
        // Grafana resolves variables in order: each after the ones it uses.
        let at = |n: &str| {
            names
                .iter()
                .position(|x| *x == n)
                .unwrap_or_else(|| panic!("{name}: no {n} variable"))
        };
        assert!(
            at("datasource") < at("job")
                && at("job") < at("instance")
                && at("instance") < at("drive"),
            "{name}: variables out of order: {names:?}"
        );
        for (var, query) in expected {
            let v = &vars[at(var)];
            assert_eq!(v["type"], "query", "{name}: ${var}");
            assert_eq!(v["datasource"], ds(), "{name}: ${var} datasource");
            let q = v["query"]["query"].as_str().or(v["query"].as_str());
            assert_eq!(q, Some(query), "{name}: ${var} query");
            assert_eq!(v["definition"], query, "{name}: ${var} definition");
            // Refreshed on time-range change, so a new drive shows up without a reload.
            assert_eq!(v["refresh"], 2, "{name}: ${var} refresh");
            if v["includeAll"] == true {
                assert_eq!(v["multi"], true, "{name}: ${var}: All without multi");
            }
        }
    }
}

#[test]
fn every_variable_a_query_uses_is_defined() {
    for (name, d) in each_dashboard() {
        let defined: BTreeSet<String> = d["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["name"].as_str().map(String::from))
            .collect();
        for p in all_panels(&d) {
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"].as_str().unwrap_or("");
                for var in variables_in(expr) {
                    assert!(
                        defined.contains(&var) || BUILTIN_VARIABLES.contains(&var.as_str()),
                        "{name}: panel {:?} uses ${var}, which is not defined: {expr}",
                        title(p)
                    );
                    assert!(
                        dashboards::SUBSTITUTIONS.iter().any(|(n, _)| *n == var),
                        "{name}: ${var} has no substitution in tests/common/dashboards.rs"
                    );
                }
            }
        }
    }
}

/// The `$name`, `${name}` and `${name:fmt}` in a query (not `$1`).
fn variables_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        let after = &rest[at + 1..];
        let name = if let Some(body) = after.strip_prefix('{') {
            body[..body.find('}').unwrap_or(body.len())]
                .split(':')
                .next()
                .unwrap_or("")
        } else {
            &after[..after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len())]
        };
        if !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push(name.to_string());
        }
        rest = after;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Targets and queries
// ---------------------------------------------------------------------------------------

#[test]
fn targets_are_well_formed() {
    for (name, d) in each_dashboard() {
        for p in all_panels(&d).into_iter().filter(|p| !is_row(p)) {
            let targets = p["targets"].as_array().unwrap();
            let mut refs = BTreeSet::new();
            for t in targets {
                let r = t["refId"].as_str().unwrap_or("");
                assert!(
                    !r.is_empty(),
                    "{name}: {:?}: target without refId",
                    title(p)
                );
                assert!(refs.insert(r), "{name}: {:?}: refId {r} twice", title(p));
                let expr = t["expr"].as_str().unwrap_or("");
                assert!(
                    !expr.trim().is_empty(),
                    "{name}: {:?}: empty expr",
                    title(p)
                );
                match p["type"].as_str().unwrap() {
                    "table" => {
                        assert_eq!(t["format"], "table", "{name}: {:?}", title(p));
                        assert_eq!(t["instant"], true, "{name}: {:?}", title(p));
                    }
                    "heatmap" => assert_eq!(t["format"], "heatmap", "{name}: {:?}", title(p)),
                    _ => {}
                }
            }
            if p["type"] == "table" && targets.len() > 1 {
                let ids: Vec<&str> = p["transformations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t["id"].as_str())
                    .collect();
                assert!(
                    ids.first() == Some(&"merge"),
                    "{name}: table {:?} of {} queries is not merged first: {ids:?}",
                    title(p),
                    targets.len()
                );
            }
        }
    }
}

/// A metric selector in a query: the metric name and its (label, op, value) matchers.
#[derive(Debug)]
struct Selector {
    metric: String,
    matchers: Vec<(String, String, String)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Num,
    Punct(String),
    Range,
}

/// PromQL's functions and aggregation operators (Prometheus 2.x).
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "avg",
    "avg_over_time",
    "bottomk",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "cos",
    "cosh",
    "count",
    "count_over_time",
    "count_values",
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "deg",
    "delta",
    "deriv",
    "exp",
    "floor",
    "group",
    "histogram_quantile",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "minute",
    "month",
    "pi",
    "predict_linear",
    "present_over_time",
    "quantile",
    "quantile_over_time",
    "rad",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sin",
    "sinh",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev",
    "stddev_over_time",
    "stdvar",
    "stdvar_over_time",
    "sum",
    "sum_over_time",
    "tan",
    "tanh",
    "time",
    "timestamp",
    "topk",
    "vector",
    "year",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

fn tokenize(expr: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '#' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '"' || ch == '\'' || ch == '`' {
            let mut s = String::new();
            i += 1;
            loop {
                match c.get(i) {
                    None => return Err(format!("unclosed string in {expr:?}")),
                    Some(&q) if q == ch => break,
                    Some('\\') if ch != '`' => {
                        s.push(*c.get(i + 1).ok_or("dangling escape")?);
                        i += 2;
                    }
                    Some(&x) => {
                        s.push(x);
                        i += 1;
                    }
                }
            }
            i += 1;
            out.push(Tok::Str(s));
        } else if ch == '[' {
            while i < c.len() && c[i] != ']' {
                i += 1;
            }
            if i == c.len() {
                return Err(format!("unclosed [ in {expr:?}"));
            }
            i += 1;
            out.push(Tok::Range);
        } else if ch.is_ascii_digit()
            || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < c.len() {
                let x = c[i];
                let exponent_sign = (x == '-' || x == '+') && matches!(c[i - 1], 'e' | 'E');
                if x.is_ascii_alphanumeric() || x == '.' || x == '_' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok::Num);
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
        } else if ch == '$' {
            return Err(format!("a $ outside a string or range in {expr:?}"));
        } else {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            if ["==", "!=", ">=", "<=", "=~", "!~"].contains(&two.as_str()) {
                out.push(Tok::Punct(two));
                i += 2;
            } else {
                out.push(Tok::Punct(ch.to_string()));
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The metric selectors of a query, with function names, keywords, label lists of
/// by/without/on/ignoring/group_*, strings and ranges left out.
fn selectors(expr: &str) -> Result<Vec<Selector>, String> {
    let toks = tokenize(expr)?;
    let punct = |i: usize, p: &str| matches!(toks.get(i), Some(Tok::Punct(x)) if x == p);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Ident(id) => {
                let lower = id.to_ascii_lowercase();
                let next_grouping =
                    matches!(toks.get(i + 1), Some(Tok::Ident(n)) if n == "by" || n == "without");
                if GROUPING.contains(&lower.as_str()) {
                    i += 1;
                    if punct(i, "(") {
                        while i < toks.len() && !punct(i, ")") {
                            i += 1;
                        }
                        i += 1;
                    }
                    continue;
                }
                if KEYWORDS.contains(&lower.as_str()) {
                    i += 1;
                    continue;
                }
                if punct(i + 1, "(") || next_grouping {
                    if !FUNCTIONS.contains(&id.as_str()) {
                        return Err(format!("unknown function {id} in {expr:?}"));
                    }
                    i += 1;
                    continue;
                }
                let mut sel = Selector {
                    metric: id.clone(),
                    matchers: Vec::new(),
                };
                i += 1;
                if punct(i, "{") {
                    i += 1;
                    loop {
                        if punct(i, "}") {
                            i += 1;
                            break;
                        }
                        match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
                            (Some(Tok::Ident(l)), Some(Tok::Punct(op)), Some(Tok::Str(v)))
                                if ["=", "!=", "=~", "!~"].contains(&op.as_str()) =>
                            {
                                sel.matchers.push((l.clone(), op.clone(), v.clone()));
                                i += 3;
                            }
                            _ => return Err(format!("bad matcher in {} of {expr:?}", id)),
                        }
                        if punct(i, ",") {
                            i += 1;
                        }
                    }
                }
                out.push(sel);
            }
            Tok::Punct(p) if p == "{" => {
                return Err(format!("a selector without a metric name in {expr:?}"))
            }
            _ => i += 1,
        }
    }
    Ok(out)
}

/// The series names in the golden exposition, each with whether it has a drive label.
fn exposition() -> BTreeMap<String, bool> {
    let path = root().join("tests/snapshots/metrics.text004.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let drive = line[end..].starts_with('{') && line.contains("drive=\"");
        *out.entry(line[..end].to_string()).or_insert(false) |= drive;
    }
    out
}

/// The recording rules of the rules file (name -> expr), or None when it does not exist
/// yet. A small reader for the file's own layout: `- record: NAME` then `expr: EXPR` or
/// `expr: |` and a more indented block.
fn recording_rules(repo: &Path) -> Option<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(repo.join(RULES_FILE)).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start().trim_start_matches("- ").trim_start();
        i += 1;
        let Some(rest) = l.strip_prefix("record:") else {
            continue;
        };
        let name = rest
            .split('#')
            .next()
            .unwrap()
            .trim()
            .trim_matches(['"', '\'']);
        let mut expr = String::new();
        while i < lines.len() {
            let line = lines[i];
            let t = line.trim_start();
            if t.starts_with("- ") {
                break;
            }
            i += 1;
            if let Some(v) = t.strip_prefix("expr:") {
                let v = v.trim();
                if v.starts_with('|') || v.starts_with('>') {
                    let indent = line.len() - t.len();
                    while i < lines.len() {
                        let b = lines[i];
                        let bi = b.len() - b.trim_start().len();
                        if !b.trim().is_empty() && bi <= indent {
                            break;
                        }
                        expr.push_str(b.trim());
                        expr.push('\n');
                        i += 1;
                    }
                } else {
                    expr = v.trim_matches(['"', '\'']).to_string();
                }
                break;
            }
        }
        out.insert(name.to_string(), expr);
    }
    Some(out)
}

/// Which of job, instance and drive a recording rule's series carry: those of the series
/// its expression reads, less what a `by (...)` leaves out or a `without (...)` drops.
/// Thresholds (`vector(N)`) carry none.
fn rule_labels(
    name: &str,
    rules: &BTreeMap<String, String>,
    exposed: &BTreeMap<String, bool>,
    seen: &mut BTreeSet<String>,
) -> BTreeSet<&'static str> {
    let mut labels = BTreeSet::new();
    if !seen.insert(name.to_string()) {
        return labels; // a rule that reads itself (a latch): its other inputs decide
    }
    let expr = &rules[name];
    for s in selectors(expr).unwrap_or_else(|e| panic!("{RULES_FILE}: {name}: {e}")) {
        let m = s.metric.as_str();
        if m.starts_with("driveprobe_") || m == "up" {
            labels.extend(["job", "instance"]);
            if exposed.get(m).copied().unwrap_or(false) {
                labels.insert("drive");
            }
        } else if rules.contains_key(m) {
            labels.extend(rule_labels(m, rules, exposed, seen));
        }
    }
    let toks = tokenize(expr).unwrap();
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident(kw) = t else { continue };
        if kw != "by" && kw != "without" {
            continue;
        }
        let list: BTreeSet<String> = toks[i + 1..]
            .iter()
            .skip(1)
            .take_while(|t| **t != Tok::Punct(")".into()))
            .filter_map(|t| match t {
                Tok::Ident(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        if kw == "by" {
            labels.retain(|l| list.contains(*l));
        } else {
            labels.retain(|l| !list.contains(*l));
        }
    }
    labels
}

#[test]
fn every_metric_a_query_names_exists_and_every_selector_filters_by_the_variables() {
    let exposed = exposition();
    let rules = recording_rules(&root());
    // Each recording rule with the variables' labels it carries.
    let known_rules: BTreeMap<String, BTreeSet<&str>> = match &rules {
        Some(r) => r
            .keys()
            .map(|n| (n.clone(), rule_labels(n, r, &exposed, &mut BTreeSet::new())))
            .collect(),
        None => {
            eprintln!(
                "note: {RULES_FILE} does not exist yet: recording rules checked against the \
                 names announced for issue 6"
            );
            ANNOUNCED_RULES
                .iter()
                .map(|n| {
                    let labels = if n.starts_with(THRESHOLD_PREFIX) {
                        BTreeSet::new()
                    } else {
                        BTreeSet::from(["job", "instance", "drive"])
                    };
                    (n.to_string(), labels)
                })
                .collect()
        }
    };
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (dash, panel, expr) in dashboards::raw_panel_queries(&root()) {
        let sels = match selectors(&expr) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{dash} / {panel}: {e}"));
                continue;
            }
        };
        for s in sels {
            let m = s.metric.as_str();
            used.insert(m.to_string());
            let need: Vec<&str> = if m.starts_with("driveprobe_") {
                match exposed.get(m) {
                    Some(true) => vec!["job", "instance", "drive"],
                    Some(false) => vec!["job", "instance"],
                    None => {
                        problems.push(format!(
                            "{dash} / {panel}: {m} is not in the daemon's exposition \
                             (tests/snapshots/metrics.text004.txt)"
                        ));
                        continue;
                    }
                }
            } else if m.starts_with("driveprobe:") {
                match known_rules.get(m) {
                    Some(labels) => labels.iter().copied().collect(),
                    None => {
                        problems.push(format!(
                            "{dash} / {panel}: {m} is not a recording rule of {RULES_FILE}"
                        ));
                        continue;
                    }
                }
            } else if m == "ALERTS" || m == "up" {
                vec!["job", "instance"]
            } else {
                problems.push(format!(
                    "{dash} / {panel}: {m:?} is neither a driveprobe series nor ALERTS or up: {expr}"
                ));
                continue;
            };
            let has = |label: &str| {
                s.matchers
                    .iter()
                    .any(|(l, op, v)| l == label && op == "=~" && *v == format!("${label}"))
            };
            for label in need {
                if !has(label) {
                    problems.push(format!(
                        "{dash} / {panel}: {m} does not filter {label}=~\"${label}\": {expr}"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The dashboards do use the recording rules and the series they are about.
    for m in [
        "driveprobe_drive_info",
        "driveprobe_health_verdict",
        "driveprobe_probe_latency_quantile_seconds",
        "driveprobe_probe_latency_seconds_bucket",
        "driveprobe:probe_latency_p99_seconds:median7d",
        "driveprobe:probe_latency_regression:ratio",
        "ALERTS",
    ] {
        assert!(used.contains(m), "no dashboard query uses {m}");
    }
}

#[test]
fn recording_rule_labels_are_derived_from_their_expressions() {
    let Some(rules) = recording_rules(&root()) else {
        eprintln!("note: {RULES_FILE} does not exist yet: nothing to check");
        return;
    };
    let exposed = exposition();
    let labels = |n: &str| {
        assert!(rules.contains_key(n), "{RULES_FILE} has no rule {n}");
        rule_labels(n, &rules, &exposed, &mut BTreeSet::new())
    };
    let all = BTreeSet::from(["job", "instance", "drive"]);
    assert_eq!(labels("driveprobe:probe_latency_regression:ratio"), all);
    assert_eq!(labels("driveprobe:probe_latency_seconds:p99_5m"), all);
    assert_eq!(
        labels("driveprobe:scheduler_tick_age_seconds"),
        BTreeSet::from(["job", "instance"])
    );
    assert_eq!(
        labels("driveprobe:threshold:latency_regression_ratio"),
        BTreeSet::new()
    );
    for (name, expr) in &rules {
        assert!(!expr.trim().is_empty(), "{RULES_FILE}: {name} has no expr");
    }
}

#[test]
fn the_selector_parser_sees_metrics_not_functions_or_labels() {
    let s = selectors(
        r#"sum by (le, drive) (rate(driveprobe_x_bucket{job=~"$job", le!="1"}[$__rate_interval])) / on (drive) group_left(model) max without (op) (driveprobe:y:z) > bool 0.5e-3 or vector(0)"#,
    )
    .unwrap();
    let names: Vec<&str> = s.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["driveprobe_x_bucket", "driveprobe:y:z"]);
    assert_eq!(
        s[0].matchers,
        [
            ("job".into(), "=~".into(), "$job".into()),
            ("le".into(), "!=".into(), "1".into())
        ]
    );
    assert!(selectors("rat(driveprobe_x[5m])").is_err());
    assert!(selectors(r#"{__name__="x"}"#).is_err());
    assert!(selectors("driveprobe_x offset 1d").is_ok());
}

#[test]
#[cfg_attr(
    not(feature = "system-tests"),
    ignore = "needs promtool (Debian prometheus): scripts/test runs it"
)]
fn every_query_parses() {
    // promtool parses each query as a recording rule's expression.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboards.rules.yml");
    let queries = dashboards::panel_queries(&root());
    let mut yaml = String::from("groups:\n  - name: dashboards\n    rules:\n");
    for (i, (_, _, expr)) in queries.iter().enumerate() {
        yaml.push_str(&format!(
            "      - record: dashboard:query_{i}\n        expr: {}\n",
            serde_json::to_string(expr).unwrap()
        ));
    }
    std::fs::write(&file, &yaml).unwrap();
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): run scripts/test, which installs it (Debian package prometheus)")
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let index: String = queries
            .iter()
            .enumerate()
            .map(|(i, (d, p, e))| format!("query_{i}: {d} / {p}: {e}\n"))
            .collect();
        panic!("promtool check rules refused a dashboard query:\n{said}\n{index}");
    }
}

#[test]
fn panel_queries_helper_substitutes_every_variable() {
    let raw = dashboards::raw_panel_queries(&root());
    let done = dashboards::panel_queries(&root());
    assert_eq!(raw.len(), done.len());
    assert!(done.len() >= 40, "only {} queries", done.len());
    for (d, p, e) in &done {
        assert!(
            variables_in(e).is_empty(),
            "{d} / {p}: a variable survived: {e}"
        );
        assert!(!e.contains("$job") && !e.contains("${"), "{d} / {p}: {e}");
    }
    assert!(done
        .iter()
        .any(|(_, _, e)| e.contains(r#"drive=~".*""#) && e.contains("[1m]")));
    assert_eq!(
        dashboards::substitute(r#"increase(x{a=~"${drive:regex}"}[$__range]) $1"#),
        r#"increase(x{a=~".*"}[5m]) $1"#
    );
    let vars = dashboards::variable_queries(&root());
    assert!(vars.iter().any(|(_, v, q)| v == "drive"
        && q == r#"label_values(driveprobe_drive_info{job=~".*", instance=~".*"}, drive)"#));
}

// ---------------------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Rect {
    x: u64,
    y: u64,
    w: u64,
    h: u64,
}

fn grid(name: &str, p: &Value) -> Rect {
    let g = &p["gridPos"];
    let f = |k: &str| {
        g[k].as_u64()
            .unwrap_or_else(|| panic!("{name}: panel {:?} has no gridPos.{k}", title(p)))
    };
    let r = Rect {
        x: f("x"),
        y: f("y"),
        w: f("w"),
        h: f("h"),
    };
    assert!(
        r.w > 0 && r.h > 0 && r.x + r.w <= 24,
        "{name}: panel {:?}: gridPos {r:?} outside the 24-column grid",
        title(p)
    );
    r
}

#[test]
fn layout_has_grid_positions_rows_and_no_overlaps() {
    for (name, d) in each_dashboard() {
        let top = d["panels"].as_array().unwrap();
        assert!(is_row(&top[0]), "{name}: the first panel is not a row");
        // Each row with the panels it holds (nested when collapsed, following when not).
        let mut groups: Vec<(&Value, Vec<&Value>)> = Vec::new();
        let mut last_y = 0;
        for p in top {
            let r = grid(name, p);
            assert!(
                r.y >= last_y,
                "{name}: {:?} is above the panel before it",
                title(p)
            );
            last_y = r.y;
            if is_row(p) {
                assert_eq!((r.x, r.w, r.h), (0, 24, 1), "{name}: row {:?}", title(p));
                let nested: Vec<&Value> = p["panels"].as_array().into_iter().flatten().collect();
                if p["collapsed"] == true {
                    assert!(
                        !nested.is_empty(),
                        "{name}: collapsed row {:?} is empty",
                        title(p)
                    );
                } else {
                    assert_eq!(p["collapsed"], false, "{name}: row {:?}", title(p));
                    assert!(
                        nested.is_empty(),
                        "{name}: expanded row {:?} holds panels (they belong after it)",
                        title(p)
                    );
                }
                groups.push((p, nested));
            } else {
                groups.last_mut().unwrap().1.push(p);
            }
        }
        for (row, panels) in &groups {
            assert!(
                !panels.is_empty(),
                "{name}: row {:?} has no panels",
                title(row)
            );
            let ry = grid(name, row).y;
            let rects: Vec<(Rect, &str)> =
                panels.iter().map(|p| (grid(name, p), title(p))).collect();
            for (i, (a, ta)) in rects.iter().enumerate() {
                assert!(
                    !is_row(panels[i]),
                    "{name}: a row inside row {:?}",
                    title(row)
                );
                assert!(
                    a.y > ry,
                    "{name}: {ta:?} is not below its row {:?}",
                    title(row)
                );
                for (b, tb) in &rects[i + 1..] {
                    let overlap =
                        a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
                    assert!(!overlap, "{name}: {ta:?} {a:?} overlaps {tb:?} {b:?}");
                }
            }
        }
    }
}
