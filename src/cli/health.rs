//! `driveprobe health`: one drive's health, verdict and endurance estimate.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde::Serialize;

use super::Failure;
use crate::file::{read_regular_bytes, Limit};
use crate::health::endurance::{self, Endurance, Rating};
use crate::health::model::{assess, Assessment, HealthReport, Source, Verdict};
use crate::health::{self, nvme, smartctl, ReadOptions};
use crate::units;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the verdict is ok (or unknown, e.g. a sleeping disk), 3 when it is warning, 4 when failing; 1 when the drive could not be read, 2 for bad usage."
)]
pub struct HealthArgs {
    /// The drive: an NVMe namespace or controller (/dev/nvme0n1, /dev/nvme0) or a SATA/SAS disk (/dev/sda).
    #[arg(value_name = "DEV", required_unless_present_any = ["from_smartctl_json", "from_nvme_log"])]
    device: Option<PathBuf>,
    /// Read saved `smartctl --json` output instead of a live device.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["device", "from_nvme_log"])]
    from_smartctl_json: Option<PathBuf>,
    /// Read a saved 512-byte NVMe SMART / Health log page (`nvme smart-log -b`).
    #[arg(long, value_name = "FILE", conflicts_with = "device")]
    from_nvme_log: Option<PathBuf>,
    /// With --from-nvme-log: the Identify Controller data (`nvme id-ctrl -b`, 4096 bytes).
    #[arg(long, value_name = "FILE", requires = "from_nvme_log")]
    nvme_id_ctrl: Option<PathBuf>,
    /// With --from-nvme-log: the Identify Namespace data (`nvme id-ns -b`, 4096 bytes).
    #[arg(long, value_name = "FILE", requires = "from_nvme_log")]
    nvme_id_ns: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Rated endurance in bytes written, with its unit (3.5PB, 600TB, 1PiB).
    #[arg(long, value_name = "SIZE")]
    rated_tbw: Option<String>,
    /// Rated drive writes per day (with --warranty-years).
    #[arg(long, value_name = "N")]
    rated_dwpd: Option<f64>,
    /// Warranty period in years.
    #[arg(long, value_name = "YEARS")]
    warranty_years: Option<f64>,
    /// Rated MTBF in hours (gives the annual failure rate).
    #[arg(long, value_name = "HOURS")]
    mtbf_hours: Option<f64>,
    /// Read NVMe drives through smartctl rather than the admin ioctl.
    #[arg(long)]
    via_smartctl: bool,
    /// Give up on smartctl after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    smartctl_timeout: String,
    /// smartctl's -d TYPE, for a drive behind a RAID controller or USB bridge (megaraid,N, cciss,N, aacraid,H,L,ID, areca,N, 3ware,N, sat, usbjmicron...): the drive is read through smartctl with it; `smartctl --scan-open` lists the types. The same check as a [[drive]]'s smartctl_type.
    #[arg(long, value_name = "TYPE", conflicts_with_all = ["from_smartctl_json", "from_nvme_log"])]
    device_type: Option<String>,
}

/// What `health --json` prints.
#[derive(Serialize)]
pub struct HealthOutput<'a> {
    pub device: String,
    pub health: &'a HealthReport,
    pub assessment: &'a Assessment,
    pub endurance: &'a Endurance,
}

fn positive(flag: &str, v: Option<f64>) -> Result<Option<f64>, Failure> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(Failure::usage(format!(
            "--{flag}: {x} is not a positive number"
        ))),
        v => Ok(v),
    }
}

/// The most of a saved `smartctl --json` output read: its largest real ones (`-x` of a
/// SAS disk with every log) are a few hundred kB.
const SMARTCTL_JSON: Limit = Limit {
    bytes: 16 << 20,
    what: "saved smartctl --json output",
};
/// The most of a saved NVMe log page or identify data read: 512 and 4096 bytes, padded by
/// some tools.
const NVME_DATA: Limit = Limit {
    bytes: 64 << 10,
    what: "a saved NVMe log page or identify data",
};

/// A saved file, bounded and only a regular one: `/dev/zero` or a FIFO is refused at once
/// rather than read forever or waited on.
fn read_file(p: &Path, limit: Limit) -> Result<Vec<u8>, Failure> {
    read_regular_bytes(p, limit)
        .map_err(|e| Failure::runtime(format!("{}: cannot read it: {e}", p.display())))
}

/// What `health --json` prints when there is no reading: the device and the error.
#[derive(Serialize)]
struct HealthError<'a> {
    device: Option<String>,
    error: &'a str,
    exit_status: u8,
}

pub fn run(a: HealthArgs) -> Result<u8, Failure> {
    let json = a.json;
    let device = a
        .device
        .as_ref()
        .or(a.from_smartctl_json.as_ref())
        .or(a.from_nvme_log.as_ref())
        .map(|p| p.display().to_string());
    let result = read_and_print(a);
    if let (true, Err(f)) = (json, &result) {
        // A script reading stdout gets a JSON object either way (and the one line on
        // stderr, and the exit status, as always).
        let out = HealthError {
            device,
            error: &f.message,
            exit_status: f.status,
        };
        if let Ok(j) = serde_json::to_string_pretty(&out) {
            // The failure is already the result; a closed stdout adds nothing to it.
            let _ = super::out(&format!("{j}\n"));
        }
    }
    result
}

fn read_and_print(a: HealthArgs) -> Result<u8, Failure> {
    let rating = Rating {
        tbw_bytes: a
            .rated_tbw
            .as_deref()
            .map(|t| {
                units::parse_rated_size(t, units::Rating::Written)
                    .map(|b| b as f64)
                    .map_err(|e| Failure::usage(format!("--rated-tbw: {e}")))
            })
            .transpose()?,
        dwpd: positive("rated-dwpd", a.rated_dwpd)?,
        warranty_years: positive("warranty-years", a.warranty_years)?,
        mtbf_hours: positive("mtbf-hours", a.mtbf_hours)?,
    };
    if rating.dwpd.is_some() && rating.warranty_years.is_none() && rating.tbw_bytes.is_none() {
        return Err(Failure::usage("--rated-dwpd needs --warranty-years"));
    }
    let timeout = units::parse_duration(&a.smartctl_timeout)
        .map_err(|e| Failure::usage(format!("--smartctl-timeout: {e}")))?;
    let (device, report) = if let Some(p) = &a.from_smartctl_json {
        let text = String::from_utf8(read_file(p, SMARTCTL_JSON)?).map_err(|_| {
            Failure::runtime(format!(
                "{}: not UTF-8 text, so not smartctl JSON output",
                p.display()
            ))
        })?;
        let r = smartctl::parse(&text)
            .map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
        (p.display().to_string(), r)
    } else if let Some(p) = &a.from_nvme_log {
        let smart = nvme::parse_smart_log(&read_file(p, NVME_DATA)?)
            .map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
        let ctrl = match &a.nvme_id_ctrl {
            Some(f) => Some(
                nvme::parse_id_ctrl(&read_file(f, NVME_DATA)?)
                    .map_err(|e| Failure::runtime(format!("{}: {e}", f.display())))?,
            ),
            None => None,
        };
        let ns = match &a.nvme_id_ns {
            Some(f) => Some(
                nvme::parse_id_ns(&read_file(f, NVME_DATA)?)
                    .map_err(|e| Failure::runtime(format!("{}: {e}", f.display())))?,
            ),
            None => None,
        };
        (
            p.display().to_string(),
            nvme::report(
                &smart,
                ctrl.as_ref(),
                ns.as_ref(),
                None,
                Source::NvmeLogFile,
            ),
        )
    } else {
        let dev = a
            .device
            .clone()
            .ok_or_else(|| Failure::usage("give a device"))?;
        let smartctl_type = a
            .device_type
            .as_deref()
            .map(crate::config::check_smartctl_type)
            .transpose()
            .map_err(|e| Failure::usage(format!("--device-type {e}")))?;
        let opts = ReadOptions {
            smartctl_timeout: timeout.max(Duration::from_millis(100)),
            nvme_via_smartctl: a.via_smartctl,
            smartctl_type,
        };
        let r = health::read(&dev, &opts).map_err(Failure::runtime)?;
        (dev.display().to_string(), r)
    };
    let mut assessment = assess(&report);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let endurance = endurance::estimate(&report, &rating, now, &[], None);
    endurance::assess(&endurance, &mut assessment);
    if a.json {
        let out = HealthOutput {
            device: device.clone(),
            health: &report,
            assessment: &assessment,
            endurance: &endurance,
        };
        let json = serde_json::to_string_pretty(&out)
            .map_err(|e| Failure::runtime(format!("could not encode the result: {e}")))?;
        super::out(&format!("{json}\n"))?;
    } else {
        super::out(&text(&device, &report, &assessment, &endurance, now))?;
    }
    Ok(match assessment.verdict {
        Verdict::Ok | Verdict::Unknown => 0,
        Verdict::Warning => 3,
        Verdict::Failing => 4,
    })
}

fn bytes(v: f64) -> String {
    const U: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = v;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < U.len() {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.2} {}", U[i])
    }
}

fn date(unix: f64) -> String {
    crate::calendar::ymd(unix.floor() as i64)
}

fn text(device: &str, r: &HealthReport, a: &Assessment, e: &Endurance, now: f64) -> String {
    let mut o = String::new();
    text_header(&mut o, device, r, a);
    text_smart(&mut o, r);
    text_endurance(&mut o, e, now);
    o
}

/// A string from the drive (or a file) as the text output shows it: one line, bounded
/// ([`fmt::drive_text`](crate::fmt::drive_text)), whatever the reader let through.
fn drive(s: Option<&str>, unknown: &str) -> String {
    s.and_then(crate::fmt::drive_text)
        .unwrap_or_else(|| unknown.to_string())
}

/// The identity line, the verdict and its reasons.
fn text_header(o: &mut String, device: &str, r: &HealthReport, a: &Assessment) {
    use std::fmt::Write as _;
    let id = &r.identity;
    // One spelling for what is not known: "unknown" (not "?" beside "(unknown)").
    let _ = writeln!(
        o,
        "{}: {}{}, serial {}, firmware {}{}",
        crate::fmt::one_line(device),
        drive(id.model.as_deref(), "unknown model"),
        match &id.transport {
            crate::health::model::Transport::Unknown => String::new(),
            t => format!(" ({})", t.name()),
        },
        drive(id.serial.as_deref(), "unknown"),
        drive(id.firmware.as_deref(), "unknown"),
        id.capacity_bytes
            .map(|c| format!(", {}", bytes(c as f64)))
            .unwrap_or_default()
    );
    let _ = writeln!(o, "verdict: {}", a.verdict.name().to_uppercase());
    for reason in &a.reasons {
        let _ = writeln!(o, "  - {}", crate::fmt::one_line(reason));
    }
}

/// The SMART figures, one per line (those the drive gave), then the reader's notes.
fn text_smart(o: &mut String, r: &HealthReport) {
    use std::fmt::Write as _;
    let mut line = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            let (k, v) = (crate::fmt::one_line(k), crate::fmt::one_line(&v));
            let _ = writeln!(o, "  {k:<22} {v}");
        }
    };
    line(
        "power state",
        Some(format!("{:?}", r.power_state).to_lowercase()),
    );
    line(
        "SMART overall",
        r.smart_passed
            .map(|p| if p { "PASSED".into() } else { "FAILED".into() }),
    );
    line("temperature", temperature_text(r));
    line("available spare", spare_text(r));
    line(
        "percentage used",
        r.percentage_used_ratio
            .map(|u| format!("{:.0}%", u * 100.0)),
    );
    line("critical warning", critical_warning_text(r));
    line("media errors", r.media_errors.map(|v| v.to_string()));
    line(
        "error log entries",
        r.error_log_entries.map(|v| v.to_string()),
    );
    line(
        "reallocated sectors",
        r.reallocated_sectors.map(|v| v.to_string()),
    );
    line("pending sectors", r.pending_sectors.map(|v| v.to_string()));
    line(
        "offline uncorrectable",
        r.offline_uncorrectable.map(|v| v.to_string()),
    );
    line("CRC errors", r.crc_errors.map(|v| v.to_string()));
    line(
        "host written",
        r.host_written_bytes.map(|b| bytes(b as f64)),
    );
    line("host read", r.host_read_bytes.map(|b| bytes(b as f64)));
    line(
        "media written",
        r.media_written_bytes.map(|b| bytes(b as f64)),
    );
    line(
        "power on",
        r.power_on_seconds
            .map(|s| format!("{} h ({:.1} days)", s / 3600, s as f64 / 86_400.0)),
    );
    line("power cycles", r.power_cycles.map(|v| v.to_string()));
    line(
        "unsafe shutdowns",
        r.unsafe_shutdowns.map(|v| v.to_string()),
    );
    line("link", r.link.as_ref().and_then(link_text));
    for t in &r.self_tests {
        line(
            &format!("{} self-test", t.kind),
            Some(format!(
                "{}{}{}",
                t.result.replace('_', " "),
                t.power_on_hours
                    .map(|h| format!(" at {h} h"))
                    .unwrap_or_default(),
                t.first_failing_lba
                    .map(|l| format!(", first failing LBA {l}"))
                    .unwrap_or_default()
            )),
        );
    }
    if !r.ata_attributes.is_empty() {
        line("ATA attributes", Some(ata_attributes_text(r)));
    }
    // The reader's notes belong to the SMART data above, the estimate's to endurance.
    for n in &r.notes {
        let _ = writeln!(o, "  note: {}", crate::fmt::one_line(n));
    }
}

/// The temperature, with its warning and critical thresholds when known.
fn temperature_text(r: &HealthReport) -> Option<String> {
    r.temperature_celsius.map(|t| {
        let mut s = format!("{t:.0} °C");
        if let Some(w) = r.temperature_warning_celsius {
            s += &format!(" (warning {w:.0} °C");
            if let Some(c) = r.temperature_critical_celsius {
                s += &format!(", critical {c:.0} °C");
            }
            s += ")";
        }
        s
    })
}

/// The available spare, with its threshold when known.
fn spare_text(r: &HealthReport) -> Option<String> {
    r.available_spare_ratio.map(|s| {
        format!(
            "{:.0}%{}",
            s * 100.0,
            r.available_spare_threshold_ratio
                .map(|t| format!(" (threshold {:.0}%)", t * 100.0))
                .unwrap_or_default()
        )
    })
}

/// The critical warning byte, with the names of the flags set.
fn critical_warning_text(r: &HealthReport) -> Option<String> {
    r.critical_warning.map(|w| {
        let names = r.critical_flags.map(|f| f.names()).unwrap_or_default();
        if names.is_empty() {
            format!("0x{w:02x}")
        } else {
            format!("0x{w:02x}: {}", names.join(", "))
        }
    })
}

/// The link's speed and width against its maximum; None without a current speed.
fn link_text(l: &crate::health::detail::Link) -> Option<String> {
    let speed = |v: Option<f64>| v.map(|s| format!("{:.1} Gb/s", s / 1e9));
    let width = |v: Option<u32>| v.map(|w| format!(" x{w}"));
    let cur = format!(
        "{}{}",
        speed(l.current_speed_transfers_per_second)?,
        width(l.current_width).unwrap_or_default()
    );
    let max = speed(l.max_speed_transfers_per_second)
        .map(|m| format!("{m}{}", width(l.max_width).unwrap_or_default()));
    Some(match max {
        Some(m) if l.degraded() => format!("{cur}, DEGRADED (maximum {m})"),
        Some(m) => format!("{cur} (maximum {m})"),
        None => cur,
    })
}

/// How many ATA attributes, and which are at or below their threshold.
fn ata_attributes_text(r: &HealthReport) -> String {
    let failing: Vec<String> = r
        .ata_attributes
        .iter()
        .filter(|a| a.failed_now || a.failed_in_past)
        .map(|a| {
            format!(
                "{} ({})",
                a.label(),
                if a.failed_now { "now" } else { "in the past" }
            )
        })
        .collect();
    if failing.is_empty() {
        format!(
            "{}, none at or below threshold (--json lists them)",
            r.ata_attributes.len()
        )
    } else {
        format!(
            "{}, at or below threshold: {}",
            r.ata_attributes.len(),
            failing.join(", ")
        )
    }
}

/// The endurance estimate, one figure per line, then its notes.
fn text_endurance(o: &mut String, e: &Endurance, now: f64) {
    use std::fmt::Write as _;
    let _ = writeln!(o, "endurance:");
    let mut eline = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(o, "  {k:<22} {v}");
        }
    };
    eline(
        "used",
        e.used_ratio.map(|u| {
            format!(
                "{:.1}% (by {})",
                u * 100.0,
                match e.used_basis {
                    Some(endurance::Basis::HostWrites) => "host writes against the rating",
                    _ => "the drive's own estimate",
                }
            )
        }),
    );
    eline("rated", e.rated_bytes.map(bytes));
    eline("remaining", e.remaining_bytes.map(bytes));
    eline(
        "drive writes per day",
        e.drive_writes_per_day.map(|d| {
            format!(
                "{d:.3}{}",
                e.rated_drive_writes_per_day
                    .map(|r| format!(" (rated {r:.2})"))
                    .unwrap_or_default()
            )
        }),
    );
    eline(
        "projected wear-out",
        e.projected_wearout_unix_seconds.map(|t| {
            if t < now {
                format!(
                    "{} (in the past: passed {:.0} days ago)",
                    date(t),
                    (now - t) / 86_400.0
                )
            } else {
                format!(
                    "{} ({:.0} days left)",
                    date(t),
                    e.days_left.unwrap_or((t - now) / 86_400.0)
                )
            }
        }),
    );
    eline(
        "write amplification",
        e.write_amplification.map(|w| format!("{w:.2}")),
    );
    eline(
        "annual failure rate",
        e.annual_failure_rate.map(|f| format!("{:.2}%", f * 100.0)),
    );
    for n in &e.notes {
        let _ = writeln!(o, "  note: {}", crate::fmt::one_line(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(date(0.0), "1970-01-01");
        assert_eq!(date(951_782_400.0), "2000-02-29");
        assert_eq!(date(1_796_083_200.0), "2026-12-01");
    }
}
