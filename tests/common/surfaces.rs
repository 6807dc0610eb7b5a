//! One check that the daemon's surfaces agree: for every drive of `/api/v1/drives`, its
//! health state and each probe's state (and CPU wait) as /metrics and the status page
//! render them. Shared by the HTTP tests (a fixed status) and the daemon tests (a live one).

use driveprobe::status::CpuWait;
use serde_json::Value;

use super::daemon::Exposition;

/// The status page's escaping of a string in text and attributes.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// The part of the page about one drive: from its row to the next drive's.
pub fn drive_section<'a>(page: &'a str, drive: &str) -> &'a str {
    let mark = format!("data-drive=\"{}\"", esc(drive));
    let start = page
        .find(&mark)
        .unwrap_or_else(|| panic!("no row for drive {drive} on the page"));
    let rest = &page[start + mark.len()..];
    let end = rest
        .find("data-drive=\"")
        .or_else(|| rest.find("</table>\n</section>"))
        .or_else(|| rest.find("</tbody></table></section>"))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// The value of the attribute `attr` on the element that also has `key="value"`.
fn attr_after(section: &str, key_value: &str, attr: &str) -> Option<String> {
    let at = section.find(key_value)?;
    let rest = &section[at..];
    let tag_end = rest.find('>')?;
    let tag = &rest[..tag_end];
    let a = format!("{attr}=\"");
    let v = tag.find(&a)? + a.len();
    Some(tag[v..v + tag[v..].find('"')?].to_string())
}

/// The one sample of `name` with `labels`, or a failure that shows the exposition.
fn value(e: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    e.value(name, labels)
        .unwrap_or_else(|| panic!("no single {name}{labels:?} in\n{}", e.text))
}

/// Asserts that the page, the API and the metrics say the same of every drive's health
/// and every probe. Returns the probe states seen, as (drive, probe, kind).
///
/// `live`: the three were read one after the other from a running daemon, so figures that
/// move every second (CPU wait, attempt counts) are not compared; states are (the caller
/// reads them when they are settled).
pub fn assert_agree(
    page: &str,
    drives: &Value,
    e: &Exposition,
    live: bool,
) -> Vec<(String, String, String)> {
    let mut seen = Vec::new();
    for d in drives.as_array().expect("/api/v1/drives is an array") {
        let name = d["name"].as_str().unwrap();
        let section = drive_section(page, name);

        // Health: one state, the same three times.
        let hs = &d["health_state"];
        let kind = hs["kind"].as_str().expect("health_state.kind");
        let ones: Vec<&str> = e
            .find("driveprobe_health_state", &[("drive", name)])
            .into_iter()
            .filter(|s| s.value == 1.0)
            .map(|s| s.labels["state"].as_str())
            .collect();
        assert_eq!(ones, [kind], "{name}: metrics vs API health state");
        let on_page = attr_after(section, "data-health=\"", "data-health");
        assert_eq!(
            on_page.as_deref(),
            Some(kind),
            "{name}: page vs API health state:\n{section}"
        );
        match kind {
            "failed" => {
                let reason = hs["reason"].as_str().unwrap();
                assert!(section.contains("health read failed"), "{section}");
                assert!(
                    section.contains(&esc(reason)),
                    "{name}: {reason}\n{section}"
                );
                let n = hs["attempts"].as_u64().unwrap();
                let attempts = if n == 1 {
                    "1 attempt ".to_string()
                } else {
                    format!("{n} attempts")
                };
                assert!(live || section.contains(&attempts), "{attempts}\n{section}");
            }
            "not_applicable" => assert!(section.contains("not applicable"), "{section}"),
            "read" => assert!(d["health"]["verdict"].is_string(), "{d}"),
            _ => {}
        }
        if kind != "not_read_yet" {
            assert!(
                !section.contains("not read yet"),
                "{name} is {kind}:\n{section}"
            );
        }

        // Probes: one state each; running and paused derived from it.
        for (probe, p) in d["probes"].as_object().unwrap() {
            let st = p["state"]["kind"].as_str().expect("state.kind");
            let l = [("drive", name), ("probe", probe.as_str())];
            let running = value(e, "driveprobe_probe_running", &l);
            let paused = value(e, "driveprobe_probe_paused", &l);
            assert_eq!(
                (running, paused),
                (
                    f64::from(u8::from(st == "running")),
                    f64::from(u8::from(st == "paused"))
                ),
                "{name}/{probe} is {st} in the API"
            );
            let ones: Vec<&str> = e
                .find("driveprobe_probe_state", &l)
                .into_iter()
                .filter(|s| s.value == 1.0)
                .map(|s| s.labels["state"].as_str())
                .collect();
            assert_eq!(ones, [st], "{name}/{probe}: metrics vs API state");
            let key = format!("data-probe=\"{}\"", esc(probe));
            assert_eq!(
                attr_after(section, &key, "data-state").as_deref(),
                Some(st),
                "{name}/{probe}: page vs API state:\n{section}"
            );
            if let Some(reason) = p["state"]["reason"].as_str() {
                assert!(
                    section.contains(&esc(reason)),
                    "{name}/{probe}: the reason {reason:?} is not on the page:\n{section}"
                );
            }
            seen.push((name.to_string(), probe.clone(), st.to_string()));
            if live {
                continue;
            }
            // CPU wait: the same figure, and the page's sentence exactly when it is high.
            let ratio = p["cpu_wait"]["window_max_ratio"].as_f64();
            let m = e.value("driveprobe_probe_cpu_wait_ratio", &l);
            match (ratio, m) {
                (Some(a), Some(b)) => assert!((a - b).abs() < 1e-9, "{a} vs {b}"),
                (None, None) => {}
                other => panic!("{name}/{probe}: cpu wait API vs metrics: {other:?}"),
            }
            let c = &p["cpu_wait"];
            let busy = CpuWait {
                seconds_total: c["seconds_total"].as_f64().unwrap_or(0.0),
                window_max_ratio: ratio,
                p99_wait_seconds: c["p99_wait_seconds"].as_f64(),
                p99_latency_seconds: c["p99_latency_seconds"].as_f64(),
            }
            .host_busy();
            let sentence = format!("data-host-busy=\"{}\"", esc(probe));
            assert_eq!(
                section.contains(&sentence),
                busy,
                "{name}/{probe}: cpu wait {ratio:?}, host-busy sentence on the page:\n{section}"
            );
        }
    }
    seen
}
