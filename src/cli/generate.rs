//! `driveprobe generate man|completions DIR` (hidden): the man pages and shell completions
//! the Debian package ships (`scripts/package`), written by the binary being packaged so
//! that they describe exactly its command line and its config file.
//!
//! - `man`: `driveprobe.1` and one page per subcommand (`driveprobe-daemon.1`, ...) from
//!   the clap definition (clap_mangen), and `driveprobe.toml.5` from the config reference,
//!   `config/driveprobe.example.toml`, which `tests/cli/config.rs` keeps equal to what the
//!   parser takes (`config::raw::KEYS`): each key with its comment and example value.
//! - `completions`: `driveprobe.bash`, `_driveprobe` (zsh) and `driveprobe.fish`.
//!
//! The pages' date is `SOURCE_DATE_EPOCH` when set (reproducible builds), else none.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Subcommand};

use super::{Cli, Failure};

/// The config reference the daemon's config file is documented by.
const EXAMPLE: &str = include_str!("../../config/driveprobe.example.toml");

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Man pages: driveprobe(1), driveprobe-SUBCOMMAND(1), driveprobe.toml(5).
    Man {
        /// The directory to write them to (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Shell completions: driveprobe.bash, _driveprobe (zsh), driveprobe.fish.
    Completions {
        /// The directory to write them to (created if missing).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

pub fn run(args: GenerateArgs) -> Result<u8, Failure> {
    let (dir, written) = match args.what {
        What::Man { dir } => {
            let w = create(&dir).and_then(|()| man_pages(&dir));
            (dir, w)
        }
        What::Completions { dir } => {
            let w = create(&dir).and_then(|()| completions(&dir));
            (dir, w)
        }
    };
    let files =
        written.map_err(|e| Failure::runtime(format!("{}: cannot write: {e}", dir.display())))?;
    let mut text = String::new();
    for f in files {
        text.push_str(&format!("{}\n", f.display()));
    }
    super::out(&text)?;
    Ok(0)
}

fn create(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// The command line as clap sees it, with the binary's name set for the pages.
fn command() -> clap::Command {
    let mut cmd = Cli::command().bin_name("driveprobe");
    cmd.build();
    cmd
}

/// `YYYY-MM-DD` of `SOURCE_DATE_EPOCH`, or "" when it is unset or not a number.
fn page_date() -> String {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map(civil_date)
        .unwrap_or_default()
}

/// `YYYY-MM-DD` (UTC) of a Unix time.
fn civil_date(secs: i64) -> String {
    crate::calendar::ymd(secs)
}

fn source() -> String {
    format!("driveprobe {}", crate::version::VERSION)
}

const MANUAL: &str = "driveprobe manual";

fn man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let cmd = command();
    let mut written = Vec::new();
    let subcommands: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .cloned()
        .collect();
    let names: Vec<String> = subcommands
        .iter()
        .map(|s| format!("driveprobe-{}", s.get_name()))
        .collect();

    // driveprobe(1): its subcommands each have their own page.
    let mut see_also: Vec<String> = names.iter().map(|n| format!("{n}(1)")).collect();
    see_also.push("driveprobe.toml(5)".to_string());
    written.push(man_page(
        cmd.clone().disable_help_subcommand(true),
        dir,
        &see_also,
        "",
    )?);
    for sub in subcommands {
        let name = format!("driveprobe-{}", sub.get_name());
        let mut see_also = vec!["driveprobe(1)".to_string()];
        let mut extra = String::new();
        if matches!(sub.get_name(), "daemon" | "check-config" | "discover") {
            see_also.push("driveprobe.toml(5)".to_string());
        }
        if sub.get_name() == "daemon" {
            see_also.push("systemctl(1)".to_string());
            extra = DAEMON_FILES.to_string();
        }
        see_also.extend(
            names
                .iter()
                .filter(|n| **n != name)
                .map(|n| format!("{n}(1)")),
        );
        written.push(man_page(sub.display_name(name), dir, &see_also, &extra)?);
    }
    let config = dir.join("driveprobe.toml.5");
    std::fs::write(&config, config_page(EXAMPLE, &page_date()))?;
    written.push(config);
    Ok(written)
}

/// The FILES section of driveprobe-daemon(1): where the package puts things.
const DAEMON_FILES: &str = r#".SH FILES
.TP
\fI/etc/driveprobe/driveprobe.toml\fR
The configuration the service runs with: \fBdriveprobe.toml\fR(5).
.TP
\fI/etc/default/driveprobe\fR
\fBDRIVEPROBE_ARGS\fR, extra arguments the service passes to \fBdriveprobe daemon\fR.
.TP
\fI/usr/lib/systemd/system/driveprobe.service\fR
The systemd unit (Type=notify, with a watchdog; \fBsystemctl reload driveprobe\fR checks the
configuration, then sends SIGHUP).
.TP
\fI/var/lib/driveprobe\fR
The state directory: the wear ledger, scheduled runs and their result documents.
"#;

fn man_page(
    cmd: clap::Command,
    dir: &Path,
    see_also: &[String],
    extra: &str,
) -> std::io::Result<PathBuf> {
    let man = clap_mangen::Man::new(cmd)
        .date(page_date())
        .source(source())
        .manual(MANUAL);
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)?;
    page.extend_from_slice(extra.as_bytes());
    page.extend_from_slice(b".SH \"SEE ALSO\"\n");
    page.extend_from_slice(see_also_line(see_also).as_bytes());
    std::fs::write(&path, page)?;
    Ok(path)
}

/// `\fBa\fR(1), \fBb\fR(5)` from `a(1)`, `b(5)`.
fn see_also_line(pages: &[String]) -> String {
    let items: Vec<String> = pages
        .iter()
        .map(|p| match p.split_once('(') {
            Some((name, rest)) => format!("\\fB{}\\fR({rest}", roff_escape(name)),
            None => roff_escape(p),
        })
        .collect();
    format!("{}\n", items.join(", "))
}

fn completions(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    let mut cmd = command();
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        written.push(clap_complete::generate_to(
            shell,
            &mut cmd,
            "driveprobe",
            dir,
        )?);
    }
    Ok(written)
}

/// Text made safe for a roff line: backslashes and hyphens escaped (a `-` in an option
/// name must stay a hyphen-minus), a leading `.` or `'` protected.
fn roff_escape(text: &str) -> String {
    let mut s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        s.insert_str(0, "\\&");
    }
    s
}

/// One entry of the config reference: a table heading or a key, with the comment above it.
#[derive(Debug)]
enum Entry {
    /// Free text (the file's header, a note between tables).
    Text(Vec<String>),
    /// `[name]` or `[[name]]`.
    Table {
        name: String,
        array: bool,
        comment: Vec<String>,
    },
    /// `key = value` inside `table` (`""` at the top), or a commented-out one.
    Key {
        path: String,
        value: String,
        comment: Vec<String>,
    },
}

/// Reads the example config into entries. Comment lines gather until a table heading or
/// a key (written, or commented out as `# key = value`) takes them as its description; a
/// blank line makes the gathered lines free text.
fn entries(example: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut comment: Vec<String> = Vec::new();
    let key_line = |line: &str| -> Option<(String, String)> {
        let (k, v) = line.split_once(" = ")?;
        let k = k.trim();
        (!k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .then(|| (k.to_string(), v.trim().to_string()))
    };
    for line in example.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            if !comment.is_empty() {
                out.push(Entry::Text(std::mem::take(&mut comment)));
            }
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let c = c.strip_prefix(' ').unwrap_or(c);
            // A commented-out key: `# wwn = "..."`.
            if let Some((k, v)) = key_line(c).filter(|(k, _)| {
                let path = join(&table, k);
                crate::config::raw::KEYS.contains(&path.as_str())
            }) {
                out.push(Entry::Key {
                    path: join(&table, &k),
                    value: v,
                    comment: std::mem::take(&mut comment),
                });
            } else {
                comment.push(c.to_string());
            }
            continue;
        }
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            table = name.trim().to_string();
            out.push(Entry::Table {
                name: table.clone(),
                array: true,
                comment: std::mem::take(&mut comment),
            });
        } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.trim().to_string();
            out.push(Entry::Table {
                name: table.clone(),
                array: false,
                comment: std::mem::take(&mut comment),
            });
        } else if let Some((k, v)) = key_line(line) {
            out.push(Entry::Key {
                path: join(&table, &k),
                value: v,
                comment: std::mem::take(&mut comment),
            });
        } else {
            comment.push(line.to_string());
        }
    }
    if !comment.is_empty() {
        out.push(Entry::Text(comment));
    }
    out
}

/// A TOML value as written in the example (the toml crate here has no serialiser).
fn scalar(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

/// Comment lines as roff text: one paragraph, except that lines indented in the comment
/// (lists, config snippets) are kept as they are.
fn roff_text(lines: &[String]) -> String {
    let mut s = String::new();
    let mut literal = false;
    for line in lines {
        let indented = line.starts_with("  ");
        if indented && !literal {
            s.push_str(".nf\n");
            literal = true;
        } else if !indented && literal {
            s.push_str(".fi\n");
            literal = false;
        }
        let text = roff_escape(if indented { line } else { line.trim() });
        s.push_str(&if indented { text } else { code_spans(&text) });
        s.push('\n');
    }
    if literal {
        s.push_str(".fi\n");
    }
    s
}

/// `code` spans in bold; a lone backtick stays as it is.
fn code_spans(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    if parts.len() % 2 == 0 {
        return text.to_string();
    }
    let mut s = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 {
            s.push_str(&format!("\\fB{part}\\fR"));
        } else {
            s.push_str(part);
        }
    }
    s
}

/// driveprobe.toml(5) from the example config.
pub fn config_page(example: &str, date: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        ".TH DRIVEPROBE.TOML 5 \"{date}\" \"{}\" \"{MANUAL}\"\n",
        source()
    ));
    s.push_str(".SH NAME\ndriveprobe.toml \\- configuration file of the driveprobe daemon\n");
    s.push_str(".SH SYNOPSIS\n\\fI/etc/driveprobe/driveprobe.toml\\fR\n");
    s.push_str(".SH DESCRIPTION\n");
    s.push_str(CONFIG_INTRO);
    let mut first_text = true;
    let mut section_open = false;
    for entry in entries(example) {
        match entry {
            Entry::Text(lines) => {
                if first_text {
                    first_text = false;
                    // The example's header, less its last sentence (about its own test).
                    let header = lines.join("\n");
                    let header = match header.find("`tests/cli/config.rs`") {
                        Some(at) => header[..at].trim_end().to_string(),
                        None => header,
                    };
                    let lines: Vec<String> = header.lines().map(str::to_string).collect();
                    s.push_str(".PP\n");
                    s.push_str(&roff_text(&lines));
                    s.push_str(".SH KEYS\n.PP\nKeys outside any table:\n");
                    section_open = true;
                } else {
                    s.push_str(".PP\n");
                    s.push_str(&roff_text(&lines));
                }
            }
            Entry::Table {
                name,
                array,
                comment,
            } => {
                if !section_open {
                    s.push_str(".SH KEYS\n");
                    section_open = true;
                }
                let heading = if array {
                    format!("[[{name}]]")
                } else {
                    format!("[{name}]")
                };
                s.push_str(&format!(".SS \"{}\"\n", roff_escape(&heading)));
                if !comment.is_empty() {
                    s.push_str(".PP\n");
                    s.push_str(&roff_text(&comment));
                }
            }
            Entry::Key {
                path,
                value,
                comment,
            } => {
                s.push_str(&format!(
                    ".TP\n\\fB{}\\fR = {}\n",
                    roff_escape(&path),
                    roff_escape(&value)
                ));
                s.push_str(&roff_text(&comment));
                // The keys of an inline table (`file_target = { path = ..., size = ... }`).
                if let Ok(toml::Value::Table(t)) =
                    toml::from_str::<toml::Value>(&format!("v = {value}"))
                        .map(|v| v.get("v").cloned().unwrap_or(toml::Value::Boolean(false)))
                {
                    for (k, v) in t {
                        s.push_str(&format!(
                            ".RS\n.TP\n\\fB{}\\fR = {}\nA key of the inline table \\fB{}\\fR.\n.RE\n",
                            roff_escape(&format!("{path}.{k}")),
                            roff_escape(&scalar(&v)),
                            roff_escape(&path)
                        ));
                    }
                }
            }
        }
    }
    s.push_str(CONFIG_TAIL);
    s
}

const CONFIG_INTRO: &str = r#"The configuration of \fBdriveprobe daemon\fR, in TOML. The Debian package
installs \fI/etc/driveprobe/driveprobe.toml\fR with every line a comment: the daemon then
runs on its defaults, which, as root, watch every whole disk of the host read\-only
(discovery), and serve Prometheus metrics on 127.0.0.1:39480. \fBdriveprobe discover\fR
shows what would be watched.
.PP
Check a file with \fBdriveprobe check\-config\fR \fIFILE\fR; the running service rereads
it on \fBsystemctl reload driveprobe\fR (a refused file keeps the old configuration
running). Every key is listed below with its meaning, unit, default and an example value,
by its full dotted name (\fBdiscovery.canary.nvme.rate_iops\fR is \fBrate_iops\fR in the
table \fB[discovery.canary.nvme]\fR).
"#;

const CONFIG_TAIL: &str = r#".SH FILES
.TP
\fI/etc/driveprobe/driveprobe.toml\fR
The configuration of the packaged service (a conffile: an upgrade keeps your changes).
.TP
\fI/usr/share/doc/driveprobe/examples/driveprobe.example.toml\fR
Every key with an example value: the text this page is made from.
.SH "SEE ALSO"
\fBdriveprobe\fR(1), \fBdriveprobe\-daemon\fR(1), \fBdriveprobe\-check\-config\fR(1),
\fBdriveprobe\-discover\fR(1)
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_date_of_unix_times() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(951_782_400), "2000-02-29");
        assert_eq!(civil_date(1_796_166_000), "2026-12-01");
    }

    #[test]
    fn every_key_of_the_example_becomes_an_entry() {
        let keys: Vec<String> = entries(EXAMPLE)
            .into_iter()
            .filter_map(|e| match e {
                Entry::Key { path, .. } => Some(path),
                _ => None,
            })
            .collect();
        for k in [
            "state_dir",
            "drive.wwn",
            "drive.by_id",
            "discovery.canary.hdd.window",
        ] {
            assert!(keys.iter().any(|p| p == k), "{k} missing from {keys:?}");
        }
    }
}
