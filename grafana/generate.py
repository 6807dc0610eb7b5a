#!/usr/bin/env python3
"""Generates the driveprobe Grafana dashboards: grafana/driveprobe-fleet.json and
grafana/driveprobe-drive.json.

    python3 grafana/generate.py          # rewrite both JSON files
    python3 grafana/generate.py --check  # exit 1 when a JSON file is not what this writes

The JSON files are committed so that they can be imported or provisioned as they are;
this script is their source. Edit the panels here, run it, commit both. A dashboard
changed in Grafana's editor is ported back here by hand (copy the query or option over).
tests/cli/dashboards_lint.rs runs `--check`, so the two cannot drift apart.

Why a script and not hand-written JSON: every panel and every target repeats the same
datasource object, every panel needs a gridPos that does not overlap its neighbours and a
unique id, and both dashboards share their variables. Here each panel is a few lines
(title, unit, queries) and the layout, ids and boilerplate are computed. Standard library
only; the output is stable (sorted keys, 2-space indent) so diffs stay small.

Conventions every panel follows (and the lint test checks):
  - datasource {"type": "prometheus", "uid": "${datasource}"} on every panel and target;
  - a unit in fieldConfig.defaults.unit;
  - every selector of a driveprobe series filters job=~"$job", instance=~"$instance"
    and, when the series has a drive label, drive=~"$drive" (SEL below);
  - counters go through rate()/increase() over $__rate_interval or a fixed window.
"""

import json
import os
import sys

SCHEMA_VERSION = 41  # Grafana 12.0; later versions migrate nothing these dashboards use
DS = {"type": "prometheus", "uid": "${datasource}"}

# Selectors. SEL for series with a drive label, HOST for per-daemon series.
SEL = 'job=~"$job", instance=~"$instance", drive=~"$drive"'
HOST = 'job=~"$job", instance=~"$instance"'
DRIVE_KEY = "job, instance, drive"

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------


def target(expr, legend="", instant=False, fmt="time_series"):
    """One Prometheus query. refId is filled in by the panel."""
    t = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
    }
    return t


def instant(expr, legend=""):
    return target(expr, legend, instant=True)


def table_query(expr):
    return target(expr, instant=True, fmt="table")


def thresholds(*steps):
    """steps: (value or None, colour) pairs, the first with None (the base)."""
    return {
        "mode": "absolute",
        "steps": [{"color": c, "value": v} for v, c in steps],
    }


GREEN = thresholds((None, "green"))


def value_map(pairs):
    """pairs: (value, text, colour): a value mapping for numbers or strings."""
    return [
        {
            "options": {
                str(v): {"color": c, "index": i, "text": t}
                for i, (v, t, c) in enumerate(pairs)
            },
            "type": "value",
        }
    ]


UP_DOWN = value_map([(0, "down", "red"), (1, "up", "green")])
OK_FAILED = value_map([(0, "failed", "red"), (1, "ok", "green")])
VERDICT_TEXT = value_map(
    [
        ("ok", "ok", "green"),
        ("warning", "warning", "orange"),
        ("failing", "failing", "red"),
        ("unknown", "unknown", "text"),
    ]
)
VERDICT_CODE = value_map(
    [
        (0, "unknown", "text"),
        (1, "ok", "green"),
        (2, "warning", "orange"),
        (3, "failing", "red"),
    ]
)


def panel(kind, title, unit, targets, description="", w=12, h=8, **extra):
    """A panel before layout: gridPos and id are set by Dashboard.layout()."""
    p = {
        "datasource": DS,
        "description": description,
        "fieldConfig": {
            "defaults": {"unit": unit},
            "overrides": [],
        },
        "targets": targets,
        "title": title,
        "type": kind,
        "_w": w,
        "_h": h,
    }
    for key, value in extra.items():
        if key == "defaults":
            p["fieldConfig"]["defaults"].update(value)
        elif key == "overrides":
            p["fieldConfig"]["overrides"] = value
        else:
            p[key] = value
    return p


def timeseries(title, unit, targets, description="", w=12, h=8, stack=False, **extra):
    custom = {
        "drawStyle": "line",
        "fillOpacity": 10,
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
    }
    if stack:
        custom["stacking"] = {"group": "A", "mode": "normal"}
    defaults = {"color": {"mode": "palette-classic"}, "custom": custom}
    defaults.update(extra.pop("defaults", {}))
    return panel(
        "timeseries",
        title,
        unit,
        targets,
        description,
        w,
        h,
        defaults=defaults,
        options={
            "legend": {
                "calcs": ["lastNotNull", "max"],
                "displayMode": "table",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        **extra,
    )


def stat(title, unit, targets, description="", w=4, h=4, steps=GREEN, mappings=None, **extra):
    defaults = {"color": {"mode": "thresholds"}, "thresholds": steps}
    if mappings:
        defaults["mappings"] = mappings
    defaults.update(extra.pop("defaults", {}))
    return panel(
        "stat",
        title,
        unit,
        targets,
        description,
        w,
        h,
        defaults=defaults,
        options={
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        **extra,
    )


def bargauge(title, unit, targets, description="", w=8, h=8, steps=GREEN, **extra):
    defaults = {"color": {"mode": "thresholds"}, "min": 0, "thresholds": steps}
    defaults.update(extra.pop("defaults", {}))
    return panel(
        "bargauge",
        title,
        unit,
        targets,
        description,
        w,
        h,
        defaults=defaults,
        options={
            "displayMode": "gradient",
            "minVizHeight": 16,
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
            "valueMode": "color",
        },
        **extra,
    )


def state_timeline(title, mappings, targets, description="", w=12, h=8, **extra):
    return panel(
        "state-timeline",
        title,
        "none",
        targets,
        description,
        w,
        h,
        defaults={
            "color": {"mode": "thresholds"},
            "mappings": mappings,
            "thresholds": thresholds((None, "red"), (1, "green")),
        },
        options={
            "alignValue": "left",
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
            "mergeValues": True,
            "rowHeight": 0.9,
            "showValue": "auto",
            "tooltip": {"mode": "single", "sort": "none"},
        },
        **extra,
    )


def column(name, unit=None, mappings=None, width=None, color_mode=None, steps=None, link=None):
    """A field override of a table column (by its name after the organize step)."""
    props = []
    if link:
        props.append({"id": "links", "value": [link]})
    if unit:
        props.append({"id": "unit", "value": unit})
    if mappings:
        props.append({"id": "mappings", "value": mappings})
    if width:
        props.append({"id": "custom.width", "value": width})
    if color_mode:
        props.append({"id": "custom.cellOptions", "value": {"type": color_mode}})
    if steps:
        props.append({"id": "thresholds", "value": steps})
    return {"matcher": {"id": "byName", "options": name}, "properties": props}


def table(title, unit, queries, columns, overrides, description="", w=24, h=10, sort=None):
    """Instant table queries joined on their shared labels (merge), then organize:
    queries: list of (expr, value column name or None to drop the value);
    columns: the label columns to keep, in order (everything else is hidden)."""
    targets = [table_query(expr) for expr, _ in queries]
    rename = {}
    order = {}
    keep = list(columns)
    for i, (_, name) in enumerate(queries):
        value = "Value #%s" % ref_id(i)
        if name:
            rename[value] = name
            keep.append(value)
    for i, name in enumerate(keep):
        order[name] = i
    exclude = {"Time": True}
    if "job" not in columns:
        exclude["job"] = True  # still joined on by merge; hosts are named by instance
    for i, (_, name) in enumerate(queries):
        if not name:
            exclude["Value #%s" % ref_id(i)] = True
    transformations = [
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": exclude,
                "indexByName": order,
                "renameByName": rename,
            },
        },
    ]
    options = {
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "fields": ""},
        "showHeader": True,
    }
    if sort:
        options["sortBy"] = [{"desc": sort[1], "displayName": sort[0]}]
    return panel(
        "table",
        title,
        unit,
        targets,
        description,
        w,
        h,
        defaults={
            "color": {"mode": "thresholds"},
            "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True},
            "thresholds": GREEN,
        },
        overrides=overrides,
        options=options,
        transformations=transformations,
    )


def ref_id(i):
    return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[i]


class Row:
    def __init__(self, title, panels, collapsed=False):
        self.title = title
        self.panels = panels
        self.collapsed = collapsed


def query_variable(name, label, query, multi=True, description=""):
    return {
        "allValue": ".*" if multi else None,
        "current": {},
        "datasource": DS,
        "definition": query,
        "description": description,
        "hide": 0,
        "includeAll": multi,
        "label": label,
        "multi": multi,
        "name": name,
        "options": [],
        "query": {
            "qryType": 1,
            "query": query,
            "refId": "PrometheusVariableQueryEditor-VariableQuery",
        },
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def variables(single_drive):
    """datasource, then job -> instance -> drive, each chained on the one before. The
    drive dashboard shows one drive of one host (drive names repeat across hosts)."""
    out = [
        {
            "current": {},
            "description": "The Prometheus that scrapes the driveprobe daemons.",
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "skipUrlSync": False,
            "type": "datasource",
        },
        query_variable(
            "job",
            "Job",
            "label_values(driveprobe_drive_info, job)",
            description="The scrape job(s) of the driveprobe daemons.",
        ),
        query_variable(
            "instance",
            "Host",
            'label_values(driveprobe_drive_info{job=~"$job"}, instance)',
            multi=not single_drive,
            description="The daemon's scrape target: one per host.",
        ),
        query_variable(
            "drive",
            "Drive",
            'label_values(driveprobe_drive_info{job=~"$job", instance=~"$instance"}, drive)',
            multi=not single_drive,
            description="The drive's name in the daemon's config (its drive label).",
        ),
    ]
    for v in out:
        if v.get("allValue", "") is None:
            del v["allValue"]
    return out


def dashboard(uid, title, description, tags, rows, templating, links):
    panels = []
    next_id = 1
    y = 0
    for row in rows:
        row_panel = {
            "collapsed": row.collapsed,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "id": next_id,
            "panels": [],
            "title": row.title,
            "type": "row",
        }
        next_id += 1
        panels.append(row_panel)
        y += 1
        # Flow the row's panels left to right, wrapping at 24 columns.
        x, line_h, body = 0, 0, []
        for p in row.panels:
            w, h = p.pop("_w"), p.pop("_h")
            if x + w > 24:
                y += line_h
                x, line_h = 0, 0
            p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
            p["id"] = next_id
            next_id += 1
            for i, t in enumerate(p["targets"]):
                t["refId"] = ref_id(i)
            x += w
            line_h = max(line_h, h)
            body.append(p)
        y += line_h
        if row.collapsed:
            row_panel["panels"] = body
            y = row_panel["gridPos"]["y"] + 1
        else:
            panels.extend(body)
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": links,
        "panels": panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": tags,
        "templating": {"list": templating},
        "time": {"from": "now-24h", "to": "now"},
        "timepicker": {},
        "timezone": "utc",
        "title": title,
        "uid": uid,
        "version": 1,
    }


def link_to(title, uid, tooltip):
    return {
        "asDropdown": False,
        "icon": "dashboard",
        "includeVars": True,
        "keepTime": True,
        "tags": [],
        "targetBlank": False,
        "title": title,
        "tooltip": tooltip,
        "type": "link",
        "url": "/d/%s" % uid,
    }


# --------------------------------------------------------------------------------------
# Fleet
# --------------------------------------------------------------------------------------

# From a drive in a fleet table to the drive dashboard, same datasource and time range.
DRIVE_LINK = {
    "targetBlank": False,
    "title": "Open the drive dashboard",
    "url": "/d/driveprobe-drive?${datasource:queryparam}&${job:queryparam}"
    "&var-instance=${__data.fields.instance}&var-drive=${__value.raw}&${__url_time_range}",
}


def fleet():
    overview = Row(
        "Overview",
        [
            stat(
                "Drives",
                "none",
                [instant("count(driveprobe_drive_info{%s})" % SEL)],
                "Drives configured on the selected daemons.",
            ),
            stat(
                "Drives down",
                "none",
                [instant("count(driveprobe_drive_up{%s} == 0) or vector(0)" % SEL)],
                "Drives absent, or with another drive at their path: their probes do not run.",
                steps=thresholds((None, "green"), (1, "red")),
            ),
            stat(
                "Verdict: failing",
                "none",
                [
                    instant(
                        'count(driveprobe_health_verdict{%s, verdict="failing"} == 1) or vector(0)'
                        % SEL
                    )
                ],
                "Drives whose health verdict is failing (reasons on the daemon's status page).",
                steps=thresholds((None, "green"), (1, "red")),
            ),
            stat(
                "Verdict: warning",
                "none",
                [
                    instant(
                        'count(driveprobe_health_verdict{%s, verdict="warning"} == 1) or vector(0)'
                        % SEL
                    )
                ],
                "Drives whose health verdict is warning.",
                steps=thresholds((None, "green"), (1, "orange")),
            ),
            stat(
                "Alerts firing",
                "none",
                [
                    instant(
                        'count(ALERTS{alertname=~"Driveprobe.*", alertstate="firing", %s}) or vector(0)'
                        % HOST
                    )
                ],
                "driveprobe alerts firing on the selected hosts (Prometheus's ALERTS series).",
                steps=thresholds((None, "green"), (1, "red")),
            ),
            stat(
                "Daemons up",
                "none",
                [instant("sum(up{%s})" % HOST)],
                "Scrape targets of the selected jobs that answered their last scrape.",
            ),
        ],
    )

    drives = Row(
        "Drives",
        [
            table(
                "Every drive",
                "none",
                [
                    (
                        "max by (%s, model, firmware) (driveprobe_drive_info{%s})"
                        % (DRIVE_KEY, SEL),
                        None,
                    ),
                    (
                        "max by (%s, verdict) (driveprobe_health_verdict{%s} == 1)"
                        % (DRIVE_KEY, SEL),
                        None,
                    ),
                    (
                        "max by (%s) (driveprobe_endurance_used_ratio{%s})" % (DRIVE_KEY, SEL),
                        "endurance used",
                    ),
                    (
                        "max by (%s) (driveprobe_endurance_projected_wearout_timestamp_seconds{%s}) * 1000"
                        % (DRIVE_KEY, SEL),
                        "projected wear-out",
                    ),
                    (
                        'max by (%s) (driveprobe_probe_latency_quantile_seconds{%s, quantile="0.99"})'
                        % (DRIVE_KEY, SEL),
                        "canary p99 now",
                    ),
                    (
                        "max by (%s) (driveprobe:probe_latency_p99_seconds:median7d{%s})"
                        % (DRIVE_KEY, SEL),
                        "p99 7-day baseline",
                    ),
                    (
                        "max by (%s) (driveprobe:probe_latency_regression:ratio{%s})"
                        % (DRIVE_KEY, SEL),
                        "p99 / baseline",
                    ),
                    (
                        "max by (%s) (driveprobe_run_last_start_timestamp_seconds{%s}) * 1000"
                        % (DRIVE_KEY, SEL),
                        "last run",
                    ),
                ],
                ["instance", "drive", "model", "firmware", "verdict"],
                [
                    column("instance", width=180),
                    column("drive", link=DRIVE_LINK),
                    column("verdict", mappings=VERDICT_TEXT, color_mode="color-text"),
                    column(
                        "endurance used",
                        unit="percentunit",
                        color_mode="color-text",
                        steps=thresholds((None, "green"), (0.8, "orange"), (0.9, "red")),
                    ),
                    column("projected wear-out", unit="dateTimeAsIso"),
                    column("canary p99 now", unit="s"),
                    column("p99 7-day baseline", unit="s"),
                    column(
                        "p99 / baseline",
                        unit="none",
                        color_mode="color-text",
                        steps=thresholds((None, "green"), (1.5, "orange"), (2, "red")),
                    ),
                    column("last run", unit="dateTimeAsIso"),
                ],
                "One line per drive: identity from driveprobe_drive_info, driveprobe's "
                "verdict, endurance, the canary's p99 (worst probe and op) against its own "
                "7-day median, and when a scheduled suite last started. Columns are empty "
                "where the drive does not report the figure (no rating, no runs yet).",
                h=12,
                sort=("p99 / baseline", True),
            ),
        ],
    )

    rankings = Row(
        "Rankings",
        [
            bargauge(
                "Latency regression (canary p99 over its 7-day median)",
                "none",
                [
                    instant(
                        "topk(10, max by (%s) (driveprobe:probe_latency_regression:ratio{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}}",
                    )
                ],
                "The 10 drives whose canary p99 (30-minute average) is furthest above its "
                "own 7-day median. 1 is no change.",
                steps=thresholds((None, "green"), (1.5, "orange"), (2, "red")),
            ),
            bargauge(
                "Sibling outliers (canary p99 over its cohort's median)",
                "none",
                [
                    instant(
                        "topk(10, max by (%s, model) (driveprobe:probe_latency_p99_seconds:cohort_ratio{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}} ({{model}})",
                    )
                ],
                "The 10 drives whose canary p99 (30-minute average) is furthest above the "
                "median of their siblings: every drive of the same model and firmware doing "
                "the same probe, across all instances this Prometheus sees. 1 is like its "
                "siblings; DriveprobeSiblingOutlier fires above 3 in a cohort of 5 or more.",
                steps=thresholds((None, "green"), (2, "orange"), (3, "red")),
            ),
            bargauge(
                "Endurance used",
                "percentunit",
                [
                    instant(
                        "topk(10, max by (%s) (driveprobe_endurance_used_ratio{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}}",
                    )
                ],
                "The 10 drives that used the largest share of their rated endurance.",
                steps=thresholds((None, "green"), (0.8, "orange"), (0.9, "red")),
                defaults={"max": 1},
            ),
            bargauge(
                "Temperature",
                "celsius",
                [
                    instant(
                        "topk(10, max by (%s) (driveprobe_health_temperature_celsius{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}}",
                    )
                ],
                "The 10 hottest drives (composite temperature).",
                steps=thresholds((None, "green"), (60, "orange"), (70, "red")),
            ),
            timeseries(
                "Latency regression over time (top 10)",
                "none",
                [
                    target(
                        "topk(10, max by (%s) (driveprobe:probe_latency_regression:ratio{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}}",
                    ),
                    target(
                        "max(driveprobe:threshold:latency_regression_ratio)",
                        "alert threshold",
                    ),
                ],
                "Canary p99 (30-minute average) over its 7-day median, and the ratio above "
                "which DriveprobeLatencyRegression fires.",
                w=12,
            ),
            timeseries(
                "Days of rated endurance left (lowest 10)",
                "d",
                [
                    target(
                        "bottomk(10, max by (%s) (driveprobe:endurance_days_left{%s}))"
                        % (DRIVE_KEY, SEL),
                        "{{instance}} {{drive}}",
                    )
                ],
                "Days until each drive reaches its rated endurance at its observed write rate.",
                w=12,
            ),
        ],
    )

    composition = Row(
        "Fleet composition",
        [
            bargauge(
                "Drives by model",
                "none",
                [instant("count by (model) (driveprobe_drive_info{%s})" % SEL, "{{model}}")],
                "How many drives of each model (empty model: identity unknown).",
                w=8,
            ),
            bargauge(
                "Drives by model and firmware",
                "none",
                [
                    instant(
                        "count by (model, firmware) (driveprobe_drive_info{%s})" % SEL,
                        "{{model}} {{firmware}}",
                    )
                ],
                "Firmware revisions in the fleet, per model: spot stragglers before a bug "
                "in an old revision bites.",
                w=8,
            ),
            bargauge(
                "Drives by transport",
                "none",
                [
                    instant(
                        "count by (transport) (driveprobe_drive_info{%s})" % SEL,
                        "{{transport}}",
                    )
                ],
                "nvme, sata, sas, scsi, usb or unknown.",
                w=8,
            ),
        ],
        collapsed=True,
    )

    alerts = Row(
        "Alerts and drives down",
        [
            table(
                "driveprobe alerts firing",
                "none",
                [
                    (
                        'max by (alertname, severity, instance, drive) (ALERTS{alertname=~"Driveprobe.*", alertstate="firing", %s})'
                        % HOST,
                        None,
                    )
                ],
                ["alertname", "severity", "instance", "drive"],
                [column("severity", width=100)],
                "Alerts of the driveprobe rules firing now on the selected hosts (runbooks "
                "in docs/alerts.md). Empty when nothing fires.",
                w=12,
                h=8,
            ),
            drives_down_table(),
        ],
    )

    daemons = Row(
        "Daemons",
        [
            table(
                "driveprobe daemons",
                "none",
                [
                    ("max by (job, instance) (up{%s})" % HOST, "scrape up"),
                    (
                        "max by (job, instance, version) (driveprobe_build_info{%s})" % HOST,
                        None,
                    ),
                    (
                        "max by (job, instance) (driveprobe_config_last_reload_successful{%s})"
                        % HOST,
                        "config loaded",
                    ),
                    (
                        "max by (job, instance) (driveprobe_config_last_reload_success_timestamp_seconds{%s}) * 1000"
                        % HOST,
                        "config loaded at",
                    ),
                    (
                        "max by (job, instance) (driveprobe:scheduler_tick_age_seconds{%s})" % HOST,
                        "scheduler tick age",
                    ),
                    (
                        "count by (job, instance) (driveprobe_drive_info{%s})" % SEL,
                        "drives",
                    ),
                ],
                ["instance", "version"],
                [
                    column("scrape up", mappings=UP_DOWN, color_mode="color-text"),
                    column("config loaded", mappings=OK_FAILED, color_mode="color-text"),
                    column("config loaded at", unit="dateTimeAsIso"),
                    column(
                        "scheduler tick age",
                        unit="s",
                        color_mode="color-text",
                        steps=thresholds((None, "green"), (15, "orange"), (120, "red")),
                    ),
                ],
                "One line per daemon: scrape state, version, whether the last config "
                "(re)load was accepted, and the scheduler's heartbeat (it ticks every second; "
                "DriveprobeSchedulerStuck fires past driveprobe:threshold:scheduler_stall_seconds).",
                h=8,
            ),
            timeseries(
                "Scheduled runs going on",
                "none",
                [
                    target(
                        "sum by (instance, schedule) (driveprobe_schedule_running{%s})" % HOST,
                        "{{instance}} {{schedule}}",
                    )
                ],
                "1 while a run started by the schedule is going.",
                w=12,
                stack=True,
            ),
            table(
                "Next scheduled runs",
                "dateTimeAsIso",
                [
                    (
                        "max by (job, instance, schedule) (driveprobe_schedule_next_run_timestamp_seconds{%s}) * 1000"
                        % HOST,
                        "next run",
                    )
                ],
                ["instance", "schedule"],
                [column("next run", unit="dateTimeAsIso")],
                "When each schedule is next due (UTC).",
                w=12,
                h=8,
                sort=("next run", False),
            ),
        ],
        collapsed=True,
    )

    return dashboard(
        "driveprobe-fleet",
        "driveprobe / Fleet",
        "Every drive driveprobe watches: health verdicts, endurance, canary latency against "
        "each drive's own baseline, full-run results, and the alerts that fire.",
        ["driveprobe", "storage"],
        [overview, drives, rankings, composition, alerts, daemons],
        variables(single_drive=False),
        [link_to("Drive", "driveprobe-drive", "One drive in detail")],
    )


def drives_down_table():
    """Every selected drive's up state, with the up ones filtered out by a transformation
    (so the query itself always returns data)."""
    p = table(
        "Drives down",
        "none",
        [("max by (%s) (driveprobe_drive_up{%s})" % (DRIVE_KEY, SEL), "up")],
        ["instance", "drive"],
        [column("up", mappings=UP_DOWN, color_mode="color-text")],
        "Drives that are absent or have another drive at their path (the daemon's status "
        "page says which). Their probes and health reads do not run.",
        w=12,
        h=8,
    )
    p["transformations"].append(
        {
            "id": "filterByValue",
            "options": {
                "filters": [
                    {
                        "config": {"id": "equal", "options": {"value": 0}},
                        "fieldName": "up",
                    }
                ],
                "match": "any",
                "type": "include",
            },
        }
    )
    return p


# --------------------------------------------------------------------------------------
# Drive
# --------------------------------------------------------------------------------------


def drive():
    latency = Row(
        "Canary latency",
        [
            timeseries(
                "Canary latency p50 / p99 / p99.9 (sliding window)",
                "s",
                [
                    target(
                        'driveprobe_probe_latency_quantile_seconds{%s, quantile=~"0.5|0.99|0.999"}'
                        % SEL,
                        "{{probe}} {{op}} q{{quantile}}",
                    ),
                    target(
                        'driveprobe_probe_host_stall_seconds{%s, quantile=~"0.5|0.99"}' % SEL,
                        "{{probe}} host stall q{{quantile}}",
                    ),
                ],
                "Exact quantiles of each canary probe's I/Os over its sliding window, from "
                "driveprobe's HDR histogram: the drive's service time (submission to "
                "completion), and beside it the host's stall (how late each I/O was issued, "
                "plus its thread's wait for a CPU). A busy host raises the stall, a slow "
                "drive the service time.",
                defaults={"custom": {"drawStyle": "line", "fillOpacity": 0, "lineWidth": 1,
                                     "showPoints": "never", "spanNulls": False,
                                     "scaleDistribution": {"type": "log", "log": 10}}},
            ),
            timeseries(
                "Canary p99 against its 7-day baseline",
                "s",
                [
                    target(
                        "driveprobe:probe_latency_p99_seconds:avg30m{%s}" % SEL,
                        "{{probe}} {{op}} p99, 30m average",
                    ),
                    target(
                        "driveprobe:probe_latency_p99_seconds:median7d{%s}" % SEL,
                        "{{probe}} {{op}} baseline (7-day median)",
                    ),
                    target(
                        "driveprobe:probe_latency_p99_seconds:median7d{%s}"
                        " * on() group_left() max(driveprobe:threshold:latency_regression_ratio)"
                        % SEL,
                        "{{probe}} {{op}} alert threshold",
                    ),
                ],
                "The 30-minute average of the canary p99 against its own 7-day median "
                "(the baseline). The band from the baseline up to the alert threshold "
                "(baseline x driveprobe:threshold:latency_regression_ratio) is normal; "
                "DriveprobeLatencyRegression fires when the average stays above it.",
                overrides=[
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
                            {"id": "custom.fillOpacity", "value": 0},
                        ],
                    },
                    {
                        "matcher": {"id": "byFrameRefID", "options": "C"},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"dash": [4, 6], "fill": "dash"}},
                            {"id": "color", "value": {"fixedColor": "red", "mode": "fixed"}},
                            {"id": "custom.fillOpacity", "value": 0},
                        ],
                    },
                ],
            ),
            panel(
                "heatmap",
                "Canary latency distribution (histogram buckets)",
                "s",
                [
                    target(
                        "sum by (le) (rate(driveprobe_probe_latency_seconds_bucket{%s}[$__rate_interval]))"
                        % SEL,
                        "{{le}}",
                        fmt="heatmap",
                    )
                ],
                "I/Os per second in each latency bucket of driveprobe_probe_latency_seconds, "
                "all probes and ops of the drive together.",
                defaults={"custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                     "scaleDistribution": {"type": "linear"}}},
                options={
                    "calculate": False,
                    "cellGap": 1,
                    "cellValues": {"unit": "iops"},
                    "color": {
                        "exponent": 0.5,
                        "fill": "dark-orange",
                        "mode": "scheme",
                        "reverse": False,
                        "scale": "exponential",
                        "scheme": "Oranges",
                        "steps": 64,
                    },
                    "exemplars": {"color": "rgba(255,0,255,0.7)"},
                    "filterValues": {"le": 1e-9},
                    "legend": {"show": True},
                    "rowsFrame": {"layout": "auto"},
                    "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
                    "yAxis": {"axisPlacement": "left", "reverse": False, "unit": "s"},
                },
            ),
            timeseries(
                "Canary p99 from the histogram (5m)",
                "s",
                [
                    target(
                        "driveprobe:probe_latency_seconds:p99_5m{%s}" % SEL,
                        "{{probe}} {{op}}",
                    )
                ],
                "histogram_quantile(0.99) over 5 minutes of the classic buckets: coarser "
                "than the window quantiles, but it can be aggregated and kept for months.",
            ),
            timeseries(
                "Latency regression ratio",
                "none",
                [
                    target(
                        "driveprobe:probe_latency_regression:ratio{%s}" % SEL,
                        "{{probe}} {{op}}",
                    ),
                    target(
                        "max(driveprobe:threshold:latency_regression_ratio)",
                        "alert threshold",
                    ),
                ],
                "Canary p99 (30-minute average) over its 7-day median: 1 is no change.",
                w=10,
            ),
            timeseries(
                "Canary window maximum",
                "s",
                [
                    target(
                        'driveprobe_probe_latency_quantile_seconds{%s, quantile="1"}' % SEL,
                        "{{probe}} {{op}} max",
                    )
                ],
                "The slowest I/O of each probe's sliding window.",
                w=10,
            ),
            stat(
                "Baseline depth",
                "h",
                [instant("min(driveprobe:probe_latency_p99_seconds:baseline_hours{%s})" % SEL)],
                "Hours of 30-minute averages the 7-day baseline holds (the shallowest probe). "
                "DriveprobeLatencyRegression waits for "
                "driveprobe:threshold:latency_baseline_min_hours (24 h) of them.",
                w=4,
                h=8,
                steps=thresholds((None, "orange"), (24, "green")),
            ),
            timeseries(
                "Canary p99 against the drive's own load",
                "s",
                [
                    target(
                        'max without (quantile) (driveprobe_probe_latency_quantile_seconds{%s, quantile="0.99"})'
                        % SEL,
                        "{{probe}} {{op}} p99",
                    ),
                    target(
                        "driveprobe:drive_load_iops:rate5m{%s}" % SEL,
                        "others' I/O per second (5m)",
                    ),
                ],
                "The canary's p99 beside the rate of I/O others than the canaries complete "
                "on the drive's disk (the daemon's own /proc/diskstats reading, "
                "driveprobe_drive_load_ios_total). A p99 that rises while that rate does "
                "not is the drive's own doing; one that rises with it is load. "
                "DriveprobeLatencyRegression compares each p99 with its baseline at a "
                "similar share of the drive's usual peak. Empty for a drive with no disk (a "
                "file on tmpfs).",
                w=24,
                overrides=[
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "unit", "value": "iops"},
                            {"id": "custom.axisPlacement", "value": "right"},
                            {"id": "min", "value": 0},
                        ],
                    },
                ],
            ),
            timeseries(
                "Canary p99 against the disk's busy share (node_exporter)",
                "s",
                [
                    target(
                        "driveprobe:probe_latency_p99_seconds:with_device{%s}" % SEL,
                        "{{probe}} {{op}} p99 ({{device}})",
                    ),
                    target(
                        "driveprobe:drive_busy:ratio_rate5m{%s}" % SEL,
                        "{{device}} busy (node_exporter, 5m)",
                    ),
                ],
                "The canary's p99 beside the share of time the drive's disk was busy, from "
                "node_exporter's node_disk_io_time_seconds_total joined through "
                "driveprobe_drive_info's device label (docs/alerts.md, \"Joining "
                "node_exporter\"). A p99 that rises while the disk stays idle is the drive's "
                "own doing; one that rises with the busy share is load. Empty when "
                "Prometheus does not scrape node_exporter on the drive's host.",
                w=24,
                overrides=[
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "unit", "value": "percentunit"},
                            {"id": "custom.axisPlacement", "value": "right"},
                            {"id": "min", "value": 0},
                            {"id": "max", "value": 1},
                        ],
                    },
                ],
            ),
        ],
    )

    io = Row(
        "Canary IOPS and errors",
        [
            timeseries(
                "Canary IOPS",
                "iops",
                [
                    target(
                        "sum by (probe, op) (rate(driveprobe_probe_ops_total{%s}[$__rate_interval]))"
                        % SEL,
                        "{{probe}} {{op}}",
                    )
                ],
                "I/Os per second the canary probes completed.",
                w=8,
            ),
            timeseries(
                "Canary throughput",
                "Bps",
                [
                    target(
                        "sum by (probe, op) (rate(driveprobe_probe_bytes_total{%s}[$__rate_interval]))"
                        % SEL,
                        "{{probe}} {{op}}",
                    )
                ],
                "Bytes per second the canary probes moved.",
                w=8,
            ),
            timeseries(
                "Canary I/O errors",
                "iops",
                [
                    target(
                        "sum by (probe, op) (rate(driveprobe_probe_errors_total{%s}[$__rate_interval]))"
                        % SEL,
                        "{{probe}} {{op}}",
                    )
                ],
                "Failed canary I/Os per second: an error from the drive or a verify mismatch.",
                w=8,
                defaults={"color": {"fixedColor": "red", "mode": "fixed"}},
            ),
            stat(
                "IOPS (5m)",
                "iops",
                [instant("sum(driveprobe:probe_iops:rate5m{%s})" % SEL)],
                "All canary I/Os per second over the last 5 minutes.",
            ),
            stat(
                "Errors per second (5m)",
                "iops",
                [instant("sum(driveprobe:probe_errors:rate5m{%s})" % SEL)],
                "Failed canary I/Os per second over the last 5 minutes.",
                steps=thresholds((None, "green"), (1e-9, "red")),
            ),
            stat(
                "Errors in the time range",
                "none",
                [instant("sum(increase(driveprobe_probe_errors_total{%s}[$__range]))" % SEL)],
                "Failed canary I/Os over the dashboard's time range.",
                steps=thresholds((None, "green"), (1, "red")),
                defaults={"decimals": 0},
            ),
            state_timeline(
                "Probes running",
                value_map([(0, "not running", "orange"), (1, "running", "green")]),
                [target("driveprobe_probe_running{%s}" % SEL, "{{probe}}")],
                "Whether each canary is issuing I/O (it pauses for scheduled runs, a spent "
                "wear budget if it writes, a drive that is down, or while it fails; "
                "driveprobe_probe_state says which).",
                w=6,
                h=4,
            ),
            state_timeline(
                "Probes paused",
                value_map([(0, "active", "green"), (1, "paused", "orange")]),
                [target("driveprobe_probe_paused{%s}" % SEL, "{{probe}}")],
                "1 while the canary is held on purpose: a scheduled run holds the drive, or "
                "(a canary that writes) the wear budget is spent. Never 1 while it runs.",
                w=6,
                h=4,
            ),
        ],
    )

    health = Row(
        "Health",
        [
            stat(
                "Verdict",
                "none",
                [
                    instant(
                        'sum(driveprobe_health_verdict{%s, verdict="ok"})'
                        ' + 2 * sum(driveprobe_health_verdict{%s, verdict="warning"})'
                        ' + 3 * sum(driveprobe_health_verdict{%s, verdict="failing"})'
                        % (SEL, SEL, SEL)
                    )
                ],
                "driveprobe's verdict on the drive (the reasons are on the status page).",
                mappings=VERDICT_CODE,
            ),
            stat(
                "Critical warning",
                "none",
                [instant("max(driveprobe_health_critical_warning{%s})" % SEL)],
                "The NVMe critical warning bits: 1 spare low, 2 temperature, 4 reliability "
                "degraded, 8 read-only, 16 volatile backup failed, 32 PMR unreliable.",
                steps=thresholds((None, "green"), (1, "red")),
                mappings=value_map([(0, "none", "green")]),
            ),
            stat(
                "SMART self-assessment",
                "none",
                [instant("min(driveprobe_health_smart_passed{%s})" % SEL)],
                "The drive's own overall SMART verdict.",
                steps=thresholds((None, "red"), (1, "green")),
                mappings=value_map([(0, "FAILED", "red"), (1, "PASSED", "green")]),
            ),
            stat(
                "Power-on time",
                "s",
                [instant("max(driveprobe_health_power_on_seconds_total{%s})" % SEL)],
                "How long the drive has been powered over its life.",
            ),
            stat(
                "Health reading age",
                "s",
                [instant("time() - max(driveprobe_health_read_timestamp_seconds{%s})" % SEL)],
                "Since the reading the health series come from (a sleeping disk keeps its "
                "last reading).",
            ),
            stat(
                "Drive up",
                "none",
                [instant("min(driveprobe_drive_up{%s})" % SEL)],
                "Present with its identity matched.",
                steps=thresholds((None, "red"), (1, "green")),
                mappings=UP_DOWN,
            ),
            timeseries(
                "Temperature",
                "celsius",
                [
                    target("driveprobe_health_temperature_celsius{%s}" % SEL, "composite"),
                    target("driveprobe_health_temperature_warning_celsius{%s}" % SEL, "warning threshold"),
                    target("driveprobe_health_temperature_critical_celsius{%s}" % SEL, "critical threshold"),
                    target("driveprobe:health_temperature_limit_celsius{%s}" % SEL, "alert limit"),
                ],
                "The composite temperature, the drive's own warning and critical thresholds, "
                "and the limit DriveprobeTemperatureHigh uses (the drive's warning threshold, "
                "else driveprobe:threshold:temperature_celsius).",
                w=8,
            ),
            timeseries(
                "Available spare",
                "percentunit",
                [
                    target("driveprobe_health_available_spare_ratio{%s}" % SEL, "spare"),
                    target(
                        "driveprobe_health_available_spare_threshold_ratio{%s}" % SEL,
                        "critical-warning threshold",
                    ),
                    target(
                        "driveprobe:health_available_spare_alert_ratio{%s}" % SEL,
                        "DriveprobeSpareLow level",
                    ),
                ],
                "Spare capacity left for worn-out blocks, and the level below which the "
                "drive raises a critical warning.",
                w=8,
                defaults={"min": 0, "max": 1},
            ),
            timeseries(
                "Percentage used (vendor)",
                "percentunit",
                [target("driveprobe_health_percentage_used_ratio{%s}" % SEL, "percentage used")],
                "The vendor's estimate of the drive's life used (may pass 100%).",
                w=8,
                defaults={"min": 0},
            ),
            timeseries(
                "Media and interface errors (lifetime)",
                "none",
                [
                    target("driveprobe_health_media_errors_total{%s}" % SEL, "media errors"),
                    target("driveprobe_health_error_log_entries_total{%s}" % SEL, "error log entries"),
                    target("driveprobe_health_crc_errors_total{%s}" % SEL, "interface CRC errors"),
                ],
                "Unrecovered media errors, error-log entries and interface CRC errors over "
                "the drive's life (a rise is what matters).",
                w=8,
                defaults={"decimals": 0},
            ),
            timeseries(
                "Unsafe shutdowns and power cycles (lifetime)",
                "none",
                [
                    target("driveprobe_health_unsafe_shutdowns_total{%s}" % SEL, "unsafe shutdowns"),
                    target("driveprobe_health_power_cycles_total{%s}" % SEL, "power cycles"),
                ],
                "Power losses without a clean shutdown, and all power cycles.",
                w=8,
                defaults={"decimals": 0},
            ),
            timeseries(
                "Sectors (ATA)",
                "none",
                [
                    target("driveprobe_health_reallocated_sectors{%s}" % SEL, "reallocated"),
                    target("driveprobe_health_pending_sectors{%s}" % SEL, "pending"),
                    target("driveprobe_health_offline_uncorrectable{%s}" % SEL, "offline uncorrectable"),
                ],
                "Remapped, pending and offline-uncorrectable sectors (ATA attributes 5, "
                "197, 198; SAS grown defects).",
                w=8,
                defaults={"decimals": 0},
            ),
            timeseries(
                "Critical warning bits",
                "none",
                [target("driveprobe_health_critical_warning{%s}" % SEL, "critical warning")],
                "The NVMe critical warning field over time (0 when nothing is wrong).",
                w=12,
                defaults={"decimals": 0, "min": 0},
            ),
            timeseries(
                "Host I/O (from the drive's counters)",
                "Bps",
                [
                    target(
                        "rate(driveprobe_health_host_written_bytes_total{%s}[1h])" % SEL,
                        "written",
                    ),
                    target(
                        "rate(driveprobe_health_host_read_bytes_total{%s}[1h])" % SEL,
                        "read",
                    ),
                ],
                "Bytes per second the host wrote and read, over the past hour, as the drive "
                "counts them (updated at each health reading).",
                w=12,
            ),
        ],
    )

    link = Row(
        "Link and self-tests",
        [
            timeseries(
                "Link speed",
                "bps",
                [
                    target("driveprobe_link_speed_transfers_per_second{%s}" % SEL, "{{drive}} current"),
                    target("driveprobe_link_max_speed_transfers_per_second{%s}" % SEL, "{{drive}} maximum"),
                ],
                "The per-lane speed the drive's link trained at, and the most it and its port "
                "can do (NVMe: PCIe from sysfs, 8 GT/s shown as 8 Gb/s; SATA: smartctl's "
                "interface speed). Below the maximum for 15 minutes: DriveprobeLinkDegraded.",
                w=12,
                defaults={"min": 0},
            ),
            timeseries(
                "Link share of its maximum",
                "percentunit",
                [
                    target(
                        "min by (job, instance, drive) ("
                        "driveprobe_link_speed_transfers_per_second{%s}"
                        " / driveprobe_link_max_speed_transfers_per_second{%s}"
                        " or driveprobe_link_width_lanes{%s}"
                        " / driveprobe_link_max_width_lanes{%s})" % (SEL, SEL, SEL, SEL),
                        "{{drive}}",
                    ),
                ],
                "The lower of current over maximum speed and (PCIe) current over maximum "
                "lanes: 100% is a link at full speed and width; 50% is a Gen3 drive at Gen2, "
                "or x2 of x4.",
                w=12,
                defaults={"min": 0, "max": 1},
            ),
            timeseries(
                "Latest self-test failed, self-test running",
                "none",
                [
                    target("driveprobe_health_self_test_failed{%s}" % SEL, "{{drive}} {{kind}}"),
                    target("driveprobe_selftest_running{%s}" % SEL, "{{drive}} running"),
                ],
                "1 when the drive's latest self-test of a kind (short, extended, conveyance, "
                "selective) failed, from its self-test log; `driveprobe health DEVICE` shows "
                "the result and the first failing LBA. \"running\" is 1 while the drive runs "
                "a self-test (a [[selftest]] schedule's, or one started by hand); its share "
                "done is driveprobe_selftest_progress_ratio, also on the status page.",
                w=12,
                defaults={"decimals": 0, "min": 0, "max": 1},
            ),
            timeseries(
                "Latest self-test age",
                "h",
                [
                    target(
                        "(driveprobe_health_power_on_seconds_total{%s}"
                        " - on (job, instance, drive) group_right"
                        " driveprobe_health_self_test_power_on_seconds{%s}) / 3600" % (SEL, SEL),
                        "{{drive}} {{kind}}",
                    ),
                ],
                "Power-on hours since the drive's latest self-test of each kind ran: a "
                "drive whose extended test is months old has not checked its whole surface.",
                w=12,
                defaults={"decimals": 0, "min": 0},
            ),
        ],
    )

    endurance = Row(
        "Endurance",
        [
            timeseries(
                "Endurance used",
                "percentunit",
                [
                    target("driveprobe_endurance_used_ratio{%s}" % SEL, "endurance used"),
                    target("driveprobe_health_percentage_used_ratio{%s}" % SEL, "vendor's percentage used"),
                ],
                "Share of the rated endurance used: the larger of the vendor's estimate and "
                "host bytes written over the rated bytes.",
                w=8,
                defaults={"min": 0},
            ),
            timeseries(
                "Drive writes per day: observed against rated",
                "none",
                [
                    target("driveprobe_endurance_drive_writes_per_day{%s}" % SEL, "observed DWPD"),
                    target("driveprobe_endurance_rated_drive_writes_per_day{%s}" % SEL, "rated DWPD"),
                ],
                "Host bytes written per day over the capacity, against the datasheet's rating.",
                w=8,
                defaults={"min": 0},
            ),
            timeseries(
                "Write amplification",
                "none",
                [
                    target(
                        "driveprobe_endurance_write_amplification_ratio{%s}" % SEL,
                        "flash writes / host writes",
                    )
                ],
                "Bytes written to flash per byte written by the host (only drives that report "
                "media writes, such as the OCP C0h log).",
                w=8,
            ),
            stat(
                "Projected wear-out",
                "dateTimeAsIso",
                [
                    instant(
                        "max(driveprobe_endurance_projected_wearout_timestamp_seconds{%s}) * 1000"
                        % SEL
                    )
                ],
                "When the drive reaches its rated endurance at the observed write rate.",
                w=8,
            ),
            stat(
                "Days of rated endurance left",
                "d",
                [instant("min(driveprobe:endurance_days_left{%s})" % SEL)],
                "DriveprobeWearoutSoon fires below 180 days.",
                steps=thresholds((None, "red"), (180, "orange"), (365, "green")),
                w=8,
            ),
            stat(
                "Endurance used now",
                "percentunit",
                [instant("max(driveprobe_endurance_used_ratio{%s})" % SEL)],
                "Share of the rated endurance used.",
                steps=thresholds((None, "green"), (0.8, "orange"), (0.9, "red")),
                w=8,
            ),
        ],
        collapsed=True,
    )

    wear = Row(
        "driveprobe's own writes",
        [
            timeseries(
                "Written today against the daily wear budget",
                "bytes",
                [
                    target("driveprobe_wear_budget_used_bytes{%s}" % SEL, "written today (UTC)"),
                    target("driveprobe_wear_budget_bytes{%s}" % SEL, "daily budget"),
                ],
                "Bytes driveprobe wrote to the drive on the current UTC day, against what it "
                "may write per day; past the budget its writes pause until the next day.",
                w=12,
                overrides=[
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
                            {"id": "color", "value": {"fixedColor": "red", "mode": "fixed"}},
                            {"id": "custom.fillOpacity", "value": 0},
                        ],
                    }
                ],
            ),
            timeseries(
                "driveprobe write rate",
                "Bps",
                [
                    target(
                        "rate(driveprobe_self_written_bytes_total{%s}[$__rate_interval])" % SEL,
                        "driveprobe writes",
                    ),
                ],
                "Bytes per second driveprobe itself wrote (canaries and scheduled runs).",
                w=12,
            ),
            bargauge(
                "Budget used today",
                "percentunit",
                [
                    instant(
                        "max(driveprobe:wear_budget_used:ratio{%s})" % SEL,
                        "today",
                    )
                ],
                "Today's writes as a share of the daily budget.",
                steps=thresholds((None, "green"), (0.8, "orange"), (1, "red")),
                defaults={"max": 1},
            ),
            stat(
                "Written by driveprobe (time range)",
                "bytes",
                [instant("sum(increase(driveprobe_self_written_bytes_total{%s}[$__range]))" % SEL)],
                "Bytes driveprobe wrote to the drive over the dashboard's time range.",
                w=8,
                h=8,
            ),
            state_timeline(
                "Wear budget exceeded",
                value_map([(0, "within budget", "green"), (1, "exceeded", "red")]),
                [target("driveprobe_wear_budget_exceeded{%s}" % SEL, "budget")],
                "1 while today's writes are over the budget (writes paused).",
                w=8,
                h=8,
            ),
        ],
        collapsed=True,
    )

    run_sel = SEL + ', suite=~"$suite"'
    runs = Row(
        "Last full runs",
        [
            table(
                "Last run of each suite",
                "none",
                [
                    (
                        "max by (%s, suite) (driveprobe_run_last_start_timestamp_seconds{%s}) * 1000"
                        % (DRIVE_KEY, run_sel),
                        "started",
                    ),
                    (
                        "max by (%s, suite) (driveprobe_run_duration_seconds{%s})"
                        % (DRIVE_KEY, run_sel),
                        "duration",
                    ),
                    (
                        "max by (%s, suite) (driveprobe_run_last_passed{%s})" % (DRIVE_KEY, run_sel),
                        "passed",
                    ),
                    (
                        "max by (%s, suite) (driveprobe_run_steady_state{%s})"
                        % (DRIVE_KEY, run_sel),
                        "steady state",
                    ),
                    (
                        "max by (%s, suite) (driveprobe_run_last_success_timestamp_seconds{%s}) * 1000"
                        % (DRIVE_KEY, run_sel),
                        "last passed run started",
                    ),
                ],
                ["suite"],
                [
                    column("started", unit="dateTimeAsIso"),
                    column("duration", unit="s"),
                    column(
                        "passed",
                        mappings=value_map([(0, "no", "red"), (1, "yes", "green")]),
                        color_mode="color-text",
                    ),
                    column(
                        "steady state",
                        mappings=value_map([(0, "not reached", "orange"), (1, "reached", "green")]),
                        color_mode="color-text",
                    ),
                    column("last passed run started", unit="dateTimeAsIso"),
                ],
                "The suite's last finished run on the drive (results in the daemon's run "
                "index and /runs/ID/report).",
                h=6,
            ),
            table(
                "Results by workload and point",
                "none",
                [
                    (
                        "max by (suite, workload, threads, depth) (driveprobe_run_iops{%s})"
                        % run_sel,
                        "IOPS",
                    ),
                    (
                        "max by (suite, workload, threads, depth) (driveprobe_run_bandwidth_bytes_per_second{%s})"
                        % run_sel,
                        "bandwidth",
                    ),
                    (
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="mean"})'
                        % run_sel,
                        "mean",
                    ),
                    (
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="p50"})'
                        % run_sel,
                        "p50",
                    ),
                    (
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="p99"})'
                        % run_sel,
                        "p99",
                    ),
                    (
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="p99_9"})'
                        % run_sel,
                        "p99.9",
                    ),
                    (
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="max"})'
                        % run_sel,
                        "max",
                    ),
                ],
                ["suite", "workload", "threads", "depth"],
                [
                    column("IOPS", unit="iops"),
                    column("bandwidth", unit="Bps"),
                    column("mean", unit="s"),
                    column("p50", unit="s"),
                    column("p99", unit="s"),
                    column("p99.9", unit="s"),
                    column("max", unit="s"),
                ],
                "Every measured point of each suite's last run: the thread/queue-depth sweep "
                "is one line per threads x depth.",
                h=10,
            ),
            bargauge(
                "IOPS by workload, threads x depth",
                "iops",
                [
                    instant(
                        "max by (suite, workload, threads, depth) (driveprobe_run_iops{%s})"
                        % run_sel,
                        "{{suite}} {{workload}} T{{threads}} QD{{depth}}",
                    )
                ],
                "IOPS of each point of the last runs: the thread/queue sweep side by side.",
                w=12,
                h=10,
            ),
            bargauge(
                "p99 latency by workload, threads x depth",
                "s",
                [
                    instant(
                        'max by (suite, workload, threads, depth) (driveprobe_run_latency_seconds{%s, stat="p99"})'
                        % run_sel,
                        "{{suite}} {{workload}} T{{threads}} QD{{depth}}",
                    )
                ],
                "p99 latency of each point of the last runs.",
                w=12,
                h=10,
                steps=thresholds((None, "blue")),
            ),
            bargauge(
                "IOPS against the previous run",
                "percentunit",
                [
                    instant(
                        "max by (suite, workload, threads, depth) (driveprobe:run_iops:ratio_previous_run{%s})"
                        % run_sel,
                        "{{suite}} {{workload}} T{{threads}} QD{{depth}}",
                    )
                ],
                "Each point's IOPS in the last run over the run before (100% unchanged). "
                "DriveprobeRunRegression fires below driveprobe:threshold:run_regression_ratio "
                "(80%). Empty until a suite has run twice under these rules.",
                w=24,
                h=8,
                steps=thresholds((None, "red"), (0.8, "green")),
            ),
        ],
        collapsed=True,
    )

    app_by = "max by (suite, workload, threads)"
    apps = Row(
        "Applications",
        [
            table(
                "Application workloads of the last runs",
                "none",
                [
                    (
                        "%s (driveprobe_app_transactions_per_second{%s})" % (app_by, SEL),
                        "TPS",
                    ),
                    (
                        '%s (driveprobe_app_latency_seconds{%s, stat="mean"})' % (app_by, SEL),
                        "mean",
                    ),
                    (
                        '%s (driveprobe_app_latency_seconds{%s, stat="p99"})' % (app_by, SEL),
                        "p99",
                    ),
                ],
                ["suite", "workload", "threads"],
                [
                    column("TPS", unit="short"),
                    column("mean", unit="s"),
                    column("p99", unit="s"),
                ],
                "sysbench OLTP on a private MariaDB (workload oltp_read_write, one row per "
                "thread count) and RocksDB db_bench (one row per phase) with their data on the "
                "drive, from the last run of each suite: transactions (operations) per second "
                "and latency per transaction (operation).",
                h=8,
            ),
            timeseries(
                "Transactions per second, run after run",
                "short",
                [
                    target(
                        "%s (driveprobe_app_transactions_per_second{%s})" % (app_by, SEL),
                        "{{suite}} {{workload}} T{{threads}}",
                    )
                ],
                "Each application point's TPS (ops/s) as of the last finished run: a step is a "
                "new run. Compare with last month over a long time range.",
            ),
            timeseries(
                "p99 latency, run after run",
                "s",
                [
                    target(
                        '%s (driveprobe_app_latency_seconds{%s, stat="p99"})' % (app_by, SEL),
                        "{{suite}} {{workload}} T{{threads}}",
                    )
                ],
                "Each application point's 99th-percentile latency as of the last finished run.",
            ),
            bargauge(
                "TPS by threads",
                "short",
                [
                    instant(
                        "%s (driveprobe_app_transactions_per_second{%s})" % (app_by, SEL),
                        "{{suite}} {{workload}} T{{threads}}",
                    )
                ],
                "Transactions (operations) per second of each point of the last runs: the "
                "oltp thread counts side by side.",
                w=12,
                h=8,
            ),
            bargauge(
                "TPS against the previous run",
                "percentunit",
                [
                    instant(
                        "%s (driveprobe:app_tps:ratio_previous_run{%s})" % (app_by, SEL),
                        "{{suite}} {{workload}} T{{threads}}",
                    )
                ],
                "Each application point's TPS in the last run over the run before (100% "
                "unchanged). DriveprobeAppRegression fires below "
                "driveprobe:threshold:run_regression_ratio (80%). Empty until a suite has run "
                "twice under these rules.",
                w=12,
                h=8,
                steps=thresholds((None, "red"), (0.8, "green")),
            ),
        ],
        collapsed=True,
    )

    collectors = Row(
        "Collectors",
        [
            state_timeline(
                "Collector success",
                OK_FAILED,
                [target("driveprobe_collector_success{%s}" % SEL, "{{collector}}")],
                "Whether each collector's last attempt on the drive succeeded; a failing "
                "collector keeps its series' last values or drops them.",
            ),
            timeseries(
                "Collector duration",
                "s",
                [target("driveprobe_collector_duration_seconds{%s}" % SEL, "{{collector}}")],
                "How long each collector's last attempt on the drive took.",
            ),
            state_timeline(
                "Drive up",
                UP_DOWN,
                [target("driveprobe_drive_up{%s}" % SEL, "{{drive}}")],
                "Present with its identity matched (see the status page when not).",
                w=24,
                h=4,
            ),
        ],
        collapsed=True,
    )

    templating = variables(single_drive=True)
    templating.append(
        query_variable(
            "suite",
            "Suite",
            'label_values(driveprobe_run_last_start_timestamp_seconds{job=~"$job", instance=~"$instance", drive=~"$drive"}, suite)',
            description="Scheduled suites, application workloads and fio job files that ran on the drive (full-run panels only).",
        )
    )
    return dashboard(
        "driveprobe-drive",
        "driveprobe / Drive",
        "One drive: canary latency against its own baseline, IOPS and errors, health, "
        "endurance, driveprobe's own writes, the last full runs, application workloads and "
        "the collectors.",
        ["driveprobe", "storage"],
        [latency, io, health, link, endurance, wear, runs, apps, collectors],
        templating,
        [link_to("Fleet", "driveprobe-fleet", "Every drive")],
    )


# --------------------------------------------------------------------------------------


def render(d):
    return json.dumps(d, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        sys.stderr.write("usage: generate.py [--check]\n")
        return 2
    stale = []
    for name, build in (("driveprobe-fleet.json", fleet), ("driveprobe-drive.json", drive)):
        path = os.path.join(HERE, name)
        text = render(build())
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                stale.append(name)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if stale:
        sys.stderr.write(
            "grafana/%s not what grafana/generate.py writes: run python3 grafana/generate.py\n"
            % ", ".join(stale)
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
