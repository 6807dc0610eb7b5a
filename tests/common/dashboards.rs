//! The Grafana dashboards in `grafana/` (written by `grafana/generate.py`): their panels and
//! every panel query, with Grafana's template variables replaced so that the queries run
//! as they are against a real Prometheus (`/api/v1/query`).
//!
//! `panel_queries` is what an end-to-end test runs; `tests/cli/dashboards_lint.rs` checks the
//! dashboards themselves (and uses the same walk over the panels).

// Each test crate compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The dashboard files under `grafana/`, by name without `.json`.
pub const DASHBOARDS: &[&str] = &["driveprobe-fleet", "driveprobe-drive"];

/// What each of Grafana's template variables becomes when a query is run outside Grafana:
/// every selected value (`.*`, as the dashboards' "All" is), and fixed windows.
pub const SUBSTITUTIONS: &[(&str, &str)] = &[
    ("job", ".*"),
    ("instance", ".*"),
    ("drive", ".*"),
    ("suite", ".*"),
    ("__rate_interval", "1m"),
    ("__interval", "1m"),
    ("__interval_ms", "60000"),
    ("__range", "5m"),
    ("__range_s", "300"),
    ("__range_ms", "300000"),
];

/// The path of a dashboard's JSON file.
pub fn dashboard_path(repo_root: &Path, name: &str) -> PathBuf {
    repo_root.join("grafana").join(format!("{name}.json"))
}

/// A dashboard, parsed. Panics with the file and the error when it is not valid JSON.
pub fn load(repo_root: &Path, name: &str) -> Value {
    let path = dashboard_path(repo_root, name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

/// Every panel of a dashboard, rows included, and the panels inside collapsed rows, in
/// order.
pub fn all_panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        out.push(p);
        for nested in p["panels"].as_array().into_iter().flatten() {
            out.push(nested);
        }
    }
    out
}

/// Every (dashboard, panel title, expr) as written in the dashboards, variables and all.
pub fn raw_panel_queries(repo_root: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for name in DASHBOARDS {
        let dashboard = load(repo_root, name);
        for p in all_panels(&dashboard) {
            let title = p["title"].as_str().unwrap_or("").to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((name.to_string(), title.clone(), expr.to_string()));
                }
            }
        }
    }
    out
}

/// Every (dashboard, panel title, expr) of both dashboards, with the template variables
/// replaced by `SUBSTITUTIONS` (`$job` and friends by `.*`, `$__rate_interval` by `1m`,
/// `$__range` by `5m`), ready for Prometheus's HTTP API.
pub fn panel_queries(repo_root: &Path) -> Vec<(String, String, String)> {
    raw_panel_queries(repo_root)
        .into_iter()
        .map(|(d, t, e)| {
            let expr = substitute(&e);
            (d, t, expr)
        })
        .collect()
}

/// Every (dashboard, variable name, query) of the query variables, substituted like the
/// panel queries. They are `label_values(SELECTOR, LABEL)`: the series API
/// (`/api/v1/series?match[]=SELECTOR`) answers them.
pub fn variable_queries(repo_root: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for name in DASHBOARDS {
        let dashboard = load(repo_root, name);
        for v in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if v["type"] != "query" {
                continue;
            }
            let query = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or("");
            out.push((
                name.to_string(),
                v["name"].as_str().unwrap_or("").to_string(),
                substitute(query),
            ));
        }
    }
    out
}

/// Replaces Grafana's `$name`, `${name}` and `${name:format}` by `SUBSTITUTIONS`. `$1` and
/// the like (label_replace's references) stay. Panics on a variable it does not know, so a
/// query never reaches Prometheus with a `$` in it.
pub fn substitute(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(body) = after.strip_prefix('{') {
            let end = body
                .find('}')
                .unwrap_or_else(|| panic!("unclosed ${{ in {expr:?}"));
            let inner = &body[..end];
            (inner.split(':').next().unwrap_or(""), end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push('$');
            rest = after;
            continue;
        }
        let value = SUBSTITUTIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("unknown template variable ${name} in {expr:?}"));
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}
