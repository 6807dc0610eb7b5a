//! The daemon's log lines on stderr, as Prometheus exporters write theirs (`--log.level`,
//! `--log.format`):
//!
//! - `logfmt`: `ts=2026-12-01T19:48:37.123Z level=info msg="drive is up" drive=a`; a value
//!   is quoted (JSON string escapes: `\"`, `\\`, `\n`, `\u0001`...) when it is empty or
//!   holds a space, `=`, `"`, a backslash or a control character, so one event is always
//!   one line;
//! - `json`: one object per line, `{"ts":...,"level":...,"msg":...,FIELD:...}`.
//!
//! When stderr is the systemd journal (`JOURNAL_STREAM` names stderr's device and inode,
//! as systemd sets it for a service whose stderr it connects to the journal), every line
//! starts with its sd-daemon(3) priority, `<3>` error, `<4>` warn, `<6>` info, `<7>`
//! debug, which journald takes off and keeps as the entry's priority.
//!
//! Which events pass: `--log.level` when given; else `RUST_LOG` (tracing's directives,
//! `driveprobe=debug`...) when set; else `info`.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// `--log.level`: the least severe level logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// `--log.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Logfmt,
    Json,
}

/// Installs the process's log subscriber (stderr). `level` (the flag) wins over
/// `RUST_LOG`; without either, `info`. A second call does nothing.
pub fn init(level: Option<LogLevel>, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(l) => EnvFilter::new(l.directive()),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let fmt = LineFormat {
        format,
        journal: stderr_is_journal(),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(fmt)
        .try_init();
}

/// Whether stderr is the journal: `JOURNAL_STREAM` (`DEVICE:INODE`, decimal) names the
/// device and inode of what fd 2 is now. A child that inherited the variable but whose
/// stderr was redirected elsewhere does not match.
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(st) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    journal_stream_matches(&v.to_string_lossy(), st.st_dev, st.st_ino)
}

/// `JOURNAL_STREAM`'s `DEVICE:INODE` against a file's device and inode.
pub fn journal_stream_matches(value: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = value.trim().split_once(':') else {
        return false;
    };
    d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
}

/// One event's fields, in the order they were given.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    fields: Vec<(&'static str, FieldValue)>,
}

#[derive(Debug)]
enum FieldValue {
    Str(String),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .push((field.name(), FieldValue::Str(value.to_string())));
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.push((field.name(), FieldValue::I64(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.push((field.name(), FieldValue::U64(value)));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.push((field.name(), FieldValue::F64(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.push((field.name(), FieldValue::Bool(value)));
    }
}

/// The event format of [`init`].
#[derive(Debug, Clone, Copy)]
pub struct LineFormat {
    pub format: LogFormat,
    /// Start each line with its journald priority (`<6>`).
    pub journal: bool,
}

impl<S, N> FormatEvent<S, N> for LineFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut f = Fields::default();
        event.record(&mut f);
        let line = self.line(
            &rfc3339_now(),
            *event.metadata().level(),
            &f.message,
            &f.fields,
        );
        writer.write_str(&line)
    }
}

impl LineFormat {
    /// One whole line (with its newline).
    fn line(
        &self,
        ts: &str,
        level: Level,
        msg: &str,
        fields: &[(&'static str, FieldValue)],
    ) -> String {
        let mut out = String::with_capacity(128);
        if self.journal {
            let _ = write!(out, "<{}>", priority(level));
        }
        match self.format {
            LogFormat::Logfmt => {
                let _ = write!(
                    out,
                    "ts={ts} level={} msg={}",
                    level_name(level),
                    logfmt_value(msg)
                );
                for (k, v) in fields {
                    out.push(' ');
                    out.push_str(&logfmt_key(k));
                    out.push('=');
                    match v {
                        FieldValue::Str(s) => out.push_str(&logfmt_value(s)),
                        FieldValue::I64(n) => out.push_str(&n.to_string()),
                        FieldValue::U64(n) => out.push_str(&n.to_string()),
                        FieldValue::F64(n) => out.push_str(&logfmt_value(&n.to_string())),
                        FieldValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                    }
                }
            }
            LogFormat::Json => {
                let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
                let _ = write!(
                    out,
                    "{{\"ts\":{},\"level\":{},\"msg\":{}",
                    q(ts),
                    q(level_name(level)),
                    q(msg)
                );
                for (k, v) in fields {
                    let _ = write!(out, ",{}:", q(k));
                    match v {
                        FieldValue::Str(s) => out.push_str(&q(s)),
                        FieldValue::I64(n) => out.push_str(&n.to_string()),
                        FieldValue::U64(n) => out.push_str(&n.to_string()),
                        // NaN and infinities are no JSON numbers.
                        FieldValue::F64(n) if n.is_finite() => out.push_str(&n.to_string()),
                        FieldValue::F64(n) => out.push_str(&q(&n.to_string())),
                        FieldValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                    }
                }
                out.push('}');
            }
        }
        out.push('\n');
        out
    }
}

/// sd-daemon(3)'s priority of a level.
fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG | Level::TRACE => "debug",
    }
}

/// A key as logfmt takes it: anything but letters, digits, `_`, `.` and `-` becomes `_`.
fn logfmt_key(k: &str) -> String {
    let k: String = k
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if k.is_empty() {
        "_".into()
    } else {
        k
    }
}

/// A value as logfmt takes it: bare when it can be, else quoted with JSON's escapes.
fn logfmt_value(v: &str) -> String {
    let bare = !v.is_empty()
        && v.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && !matches!(c, '"' | '=' | '\\'));
    if bare {
        v.to_string()
    } else {
        serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into())
    }
}

/// Now as RFC 3339 in UTC, to the millisecond: `2026-12-01T19:48:37.123Z`.
fn rfc3339_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_millis())
}

fn rfc3339(secs: i64, millis: u32) -> String {
    crate::calendar::rfc3339_millis(secs, millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(format: LogFormat, journal: bool) -> LineFormat {
        LineFormat { format, journal }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_154_517, 123), "2026-12-01T19:48:37.123Z");
    }

    #[test]
    fn logfmt_quotes_what_must_be_quoted() {
        assert_eq!(logfmt_value("sda"), "sda");
        assert_eq!(logfmt_value("127.0.0.1:9"), "127.0.0.1:9");
        assert_eq!(logfmt_value(""), "\"\"");
        assert_eq!(logfmt_value("a b"), "\"a b\"");
        assert_eq!(logfmt_value("a=b"), "\"a=b\"");
        assert_eq!(logfmt_value("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(logfmt_value("c:\\x"), "\"c:\\\\x\"");
        assert_eq!(logfmt_value("two\nlines"), "\"two\\nlines\"");
        assert_eq!(logfmt_value("bell\u{7}"), "\"bell\\u0007\"");
        assert_eq!(logfmt_key("a b=c"), "a_b_c");
    }

    #[test]
    fn a_logfmt_line_is_one_line_in_order() {
        let f = vec![
            ("drive", FieldValue::Str("nvme 0".into())),
            ("n", FieldValue::U64(3)),
            ("ok", FieldValue::Bool(true)),
        ];
        let l = fmt(LogFormat::Logfmt, false).line("T", Level::WARN, "it\nbroke", &f);
        assert_eq!(
            l,
            "ts=T level=warn msg=\"it\\nbroke\" drive=\"nvme 0\" n=3 ok=true\n"
        );
        let l = fmt(LogFormat::Logfmt, true).line("T", Level::ERROR, "x", &[]);
        assert_eq!(l, "<3>ts=T level=error msg=x\n");
    }

    #[test]
    fn a_json_line_is_one_object() {
        let f = vec![
            ("path", FieldValue::Str("/a \"b\"".into())),
            ("n", FieldValue::I64(-1)),
            ("r", FieldValue::F64(f64::NAN)),
        ];
        let l = fmt(LogFormat::Json, false).line("T", Level::DEBUG, "m", &f);
        assert_eq!(l.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(l.trim_end()).unwrap();
        assert_eq!(v["level"], "debug");
        assert_eq!(v["msg"], "m");
        assert_eq!(v["path"], "/a \"b\"");
        assert_eq!(v["n"], -1);
        assert_eq!(v["r"], "NaN");
        let l = fmt(LogFormat::Json, true).line("T", Level::INFO, "m", &[]);
        assert!(l.starts_with("<6>{"), "{l}");
    }

    #[test]
    fn journal_stream_names_one_file() {
        assert!(journal_stream_matches("8:12345", 8, 12345));
        assert!(!journal_stream_matches("8:12345", 8, 12346));
        assert!(!journal_stream_matches("9:12345", 8, 12345));
        assert!(!journal_stream_matches("", 8, 12345));
        assert!(!journal_stream_matches("8", 8, 12345));
        assert_eq!(priority(Level::ERROR), 3);
        assert_eq!(priority(Level::WARN), 4);
        assert_eq!(priority(Level::INFO), 6);
        assert_eq!(priority(Level::DEBUG), 7);
    }
}
