//! The `fio-job` workload: a user's own fio job file, run by the system's fio on
//! driveprobe's target, its jobs read into the same figures as the built-in workloads.
//!
//! The job file names the target as `${TARGET}`. driveprobe substitutes it itself and
//! hands fio the result on its standard input (`fio --output-format=json -`): fio's own
//! expansion of `${VAR}` from its environment is not used, because then the text checked
//! here would not be the text fio runs (`ioengine=${ENGINE}` would pass the check and
//! become anything). So a job file may hold no `${...}` but `${TARGET}`, and that only
//! as the whole value of `filename` or `filename_format`; nothing is written
//! to disk besides what fio itself does to the target.
//!
//! The safety gate, in this order, each refusal one line naming the file, the job, the
//! option and what to write instead:
//! - `filename` and `filename_format` must be exactly `${TARGET}`, and `directory` is
//!   refused (the target is a file or a device, never a directory: fio would fail at run
//!   time trying to make its files inside it). A job file
//!   that names none of them anywhere gets `filename=TARGET` in a `[global]` section put
//!   in front (fio would otherwise create `JOB.0.0` in its working directory);
//! - `ioengine` must be one that does block I/O on the target (`psync`, `sync`,
//!   `pvsync`, `pvsync2`, `vsync`, `libaio`, `io_uring`, `posixaio`, `mmap`, `splice`);
//! - no option that runs a command (`exec_prerun`, `exec_postrun`), writes a file
//!   elsewhere (`write_*_log`, `write_iolog`, `verify_dump`, a file-backed `mem`), reads
//!   I/O from elsewhere or sends it elsewhere (`read_iolog`, `replay_redirect`,
//!   `merge_blktrace_file`, `opendir`), changes the system (`ioscheduler`, `cgroup`),
//!   deletes the target (`unlink`, `unlink_each_loop`) or brings in unchecked jobs
//!   (`include`, `profile`);
//! - on a target that is a regular file, nothing that would grow it: fio extends a file
//!   smaller than the region a job asks for, so `offset` (with `offset_increment` over
//!   the clones) plus `size` or `filesize` must end inside the file, and `file_append`,
//!   `fill_device` and `fill_fs` are refused.
//!
//! The target itself must already have passed driveprobe's write gate: the caller's
//! business, as for any workload.
//!
//! fio runs in its own process group; the time limit is wall-clock (the jobs' own
//! `runtime` is left alone): past it, or on a stop request, fio's group is ended
//! (SIGTERM, then SIGKILL) and the run is an error, since its figures would cover only
//! part of what the job file asks.
//!
//! Figures, per entry of fio's `jobs` array (one per job and clone, or one per group
//! under `group_reporting`): `total_ios`, `iops`, `bw_bytes`, and the latency from
//! `lat_ns` (submission to completion, as the built-in engine times an I/O) for the
//! mean, standard deviation and maximum. fio computes percentiles of `lat_ns` only with
//! `lat_percentiles=1`; by default they come from `clat_ns` (completion latency, which
//! leaves out the submission: nothing for the sync engines, the `io_submit` or
//! `io_uring_enter` call for the others). [`FioJobRun::percentiles_from`] says which.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::result::{DirFigures, Round, WorkloadDesc};
use crate::app::{self, ChildGuard, Waited};
use crate::engine::RunControl;
use crate::process::capture;

#[derive(Debug, thiserror::Error)]
pub enum FioJobError {
    #[error("fio was not found on PATH: install Debian's fio")]
    Missing,
    #[error("cannot read the fio job file {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(Box<Refusal>),
    #[error("{file}: line {line}: {what}")]
    Syntax {
        file: String,
        line: usize,
        what: String,
    },
    #[error("the target {0} cannot be written into a fio job file (it holds ';', '#' or a line break): use a path without them")]
    BadTarget(PathBuf),
    #[error("{file} has no job sections: add at least one [job]")]
    NoJobs { file: String },
    #[error("cannot start fio: {0}")]
    Spawn(std::io::Error),
    #[error("fio failed on {file} ({status}): {line}")]
    Fio {
        file: String,
        status: String,
        line: String,
    },
    #[error("cannot read fio's JSON output for {file}: {what}")]
    Json { file: String, what: String },
    #[error("fio job [{job}] in {file} stopped on error {errno} ({text})")]
    JobError {
        file: String,
        job: String,
        errno: i64,
        text: String,
    },
    #[error("fio printed no {percentile} latency percentile for job [{job}] in {file}: leave clat_percentiles on, and list 50:99:99.9 in percentile_list if you set it")]
    NoPercentile {
        file: String,
        job: String,
        percentile: String,
    },
    #[error("fio on {file} ran past the time limit of {limit_seconds} s and was stopped: give its jobs a runtime= below the limit, or raise the limit")]
    TimeLimit { file: String, limit_seconds: u64 },
    #[error("the fio job file {file} was stopped before it finished; fio was ended")]
    Stopped { file: String },
}

/// A job file the safety gate refused: which file, job and option, why, and what to
/// write instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: job [{job}]: {option}: {why}; {what}")]
pub struct Refusal {
    pub file: String,
    pub job: String,
    pub option: String,
    pub why: String,
    pub what: String,
}

/// The engines that do block I/O on the target.
pub const ALLOWED_ENGINES: &[&str] = &[
    "psync", "sync", "pvsync", "pvsync2", "vsync", "libaio", "io_uring", "posixaio", "mmap",
    "splice",
];

/// One job's (or group's) figures, as a built-in workload's point has them.
pub type JobResult = (WorkloadDesc, Round);

/// The placeholder for the target.
pub const PLACEHOLDER: &str = "${TARGET}";

/// A whole run: the figures, and what they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct FioJobRun {
    pub results: Vec<(WorkloadDesc, Round)>,
    /// fio's JSON, as it printed it.
    pub raw_json: String,
    /// The job file fio ran (the target substituted).
    pub job_text: String,
    /// `lat_ns` or `clat_ns`, per result: where the percentiles came from.
    pub percentiles_from: Vec<&'static str>,
}

/// Runs `job_file` with the system's fio on `target` (which the caller has passed
/// through the write gate), killing fio after `time_limit`.
pub fn run(
    job_file: &Path,
    target: &Path,
    time_limit: Duration,
    control: &RunControl,
) -> Result<Vec<(WorkloadDesc, Round)>, FioJobError> {
    run_detailed(job_file, target, time_limit, control).map(|r| r.results)
}

/// [`run`], with fio's raw JSON and the job text it ran.
pub fn run_detailed(
    job_file: &Path,
    target: &Path,
    time_limit: Duration,
    control: &RunControl,
) -> Result<FioJobRun, FioJobError> {
    let text = crate::file::read_regular(job_file, crate::file::MAX_CONFIG_BYTES).map_err(|e| {
        FioJobError::Read {
            file: job_file.to_path_buf(),
            source: match e {
                crate::file::FileError::Io(e) => e,
                other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
            },
        }
    })?;
    let label = job_file.display().to_string();
    let prepared = prepare(&text, &label, target)?;
    let fio = app::find_program(&["fio"], None).ok_or(FioJobError::Missing)?;
    let before = control.written_bytes();
    // Metered: what fio writes is counted under `control` while it runs, for a wear
    // budget (the suite adds the rest of what fio reports at its end).
    let mut guard = ChildGuard::spawn_metered(
        Command::new(fio)
            .args(["--output-format=json", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        control,
    )
    .map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => FioJobError::Missing,
        _ => FioJobError::Spawn(e),
    })?;
    // The job text is small: fio reads all of it before it starts any job.
    if let Some(mut stdin) = guard.child_mut().stdin.take() {
        stdin
            .write_all(prepared.text.as_bytes())
            .map_err(FioJobError::Spawn)?;
    }
    // Through a cap: fio's JSON is on stdout; of stderr only an excerpt is ever used.
    let out_reader = capture(
        guard.child_mut().stdout.take(),
        app::OUTPUT_HEAD,
        app::OUTPUT_TAIL,
    );
    let err_reader = capture(
        guard.child_mut().stderr.take(),
        app::OUTPUT_TAIL,
        app::OUTPUT_TAIL,
    );
    let status = match app::wait(&mut guard, control, time_limit).map_err(FioJobError::Spawn)? {
        Waited::Exited(s) => s,
        stopped => {
            // SIGTERM: fio ends its jobs and still prints its JSON, with what they wrote
            // (on tmpfs the only count there is: the kernel counts no storage writes).
            let _ = guard.stop(Duration::from_secs(5));
            count_written(
                control,
                before,
                &out_reader.join().unwrap_or_default().text(),
            );
            return Err(match stopped {
                Waited::Stopped => FioJobError::Stopped { file: label },
                _ => FioJobError::TimeLimit {
                    file: label,
                    limit_seconds: time_limit.as_secs(),
                },
            });
        }
    };
    drop(guard);
    let (out, err) = (
        out_reader.join().unwrap_or_default(),
        err_reader.join().unwrap_or_default(),
    );
    let stdout = out.text();
    // Whatever fio's status: its jobs wrote what they wrote.
    count_written(control, before, &stdout);
    let json = json_part(&stdout);
    // A job that failed on an I/O error still has its entry (with the errno) in the JSON,
    // and fio exits non-zero: the job's error says more than fio's status.
    let parsed = json.map(|j| parse_output(j, &prepared, &label));
    if let Some(Err(e @ FioJobError::JobError { .. })) = parsed {
        return Err(e);
    }
    let (Some(json), Some(parsed), true) = (json, parsed, status.success()) else {
        let line = app::failure_excerpt(&err, &out);
        return Err(FioJobError::Fio {
            file: label,
            status: status.to_string(),
            line,
        });
    };
    let raw_json = json.to_string();
    let (results, percentiles_from) = parsed?;
    Ok(FioJobRun {
        results,
        raw_json,
        job_text: prepared.text,
        percentiles_from,
    })
}

/// The bytes fio says its jobs wrote: `write.io_bytes` summed over its `jobs` array (one
/// entry per job, or per group under `group_reporting`, so nothing is counted twice).
/// Like the engine's counter, I/O in a job's `ramp_time` is not in it.
pub fn written_bytes(raw_json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(raw_json).unwrap_or_default();
    v.get("jobs")
        .and_then(serde_json::Value::as_array)
        .map_or(0, |jobs| {
            jobs.iter()
                .filter_map(|j| {
                    j.pointer("/write/io_bytes")
                        .and_then(serde_json::Value::as_u64)
                })
                .fold(0u64, u64::saturating_add)
        })
}

/// Counts under `control` what fio says its jobs wrote (its JSON in `stdout`; nothing when
/// it printed none), less what was already counted under the control since `before` was
/// read while fio ran (a metered process group: `app::ChildGuard::spawn_metered`), so the
/// total is the larger of the two and nothing counts twice.
fn count_written(control: &RunControl, before: u64, stdout: &str) {
    let reported = json_part(stdout).map_or(0, written_bytes);
    let metered = control.written_bytes().saturating_sub(before);
    control.add_written(reported.saturating_sub(metered));
}

/// fio may print notes before its JSON on stdout: the JSON starts at the first line
/// that is `{`.
fn json_part(stdout: &str) -> Option<&str> {
    let mut at = 0;
    for line in stdout.split_inclusive('\n') {
        if line.trim_end() == "{" {
            return Some(&stdout[at..]);
        }
        at += line.len();
    }
    None
}

/// fio's other spellings of its options (`fio --cmdhelp=OPTION` shows them as
/// `alias:`; the list is fio 3.33's whole set), each with the name it stands for. fio
/// matches option names exactly (case and `-` against `_` matter), so these are the only
/// other names an option has. Every check below is made on the canonical name: a job
/// file that writes `fileoffset=` meets the same bound as one that writes `offset=`.
pub const ALIASES: &[(&str, &str)] = &[
    ("blockalign", "ba"),
    ("blocksize", "bs"),
    ("blocksize_unaligned", "bs_unaligned"),
    ("blocksize_range", "bsrange"),
    ("disable_bw", "disable_bw_measurement"),
    ("fill_fs", "fill_device"),
    ("io_limit", "io_size"),
    ("iodepth_batch_submit", "iodepth_batch"),
    ("iodepth_batch_complete", "iodepth_batch_complete_min"),
    ("iomem", "mem"),
    ("nr_files", "nrfiles"),
    ("fileoffset", "offset"),
    ("ratecycle", "rate_cycle"),
    ("ratemin", "rate_min"),
    ("timeout", "runtime"),
    ("readwrite", "rw"),
    ("ss", "steadystate"),
    ("ss_dur", "steadystate_duration"),
    ("ss_ramp", "steadystate_ramp_time"),
    ("wait_for_previous", "stonewall"),
];

/// The name fio gives the option written `key`: its canonical name when `key` is an
/// alias. fio itself refuses `Offset=` and `file-offset=`; they are read here as
/// `offset` all the same (lower case, `-` as `_`), so that a spelling some fio accepts
/// is never one this gate does not check.
pub fn canonical(key: &str) -> String {
    let k = key.trim().to_ascii_lowercase().replace('-', "_");
    match ALIASES.iter().find(|(alias, _)| *alias == k) {
        Some((_, name)) => name.to_string(),
        None => k,
    }
}

/// One option line of a job file.
#[derive(Debug, Clone, PartialEq)]
struct Opt {
    /// fio's canonical name of the option ([`canonical`]).
    key: String,
    /// The name as the file writes it (for messages).
    written: String,
    value: Option<String>,
    line: usize,
}

#[derive(Debug, Clone, PartialEq)]
struct Section {
    name: String,
    opts: Vec<Opt>,
    first_line: usize,
}

/// One job of a checked job file: its name, its options with the `[global]` sections
/// before it applied, and the group fio puts it in.
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub name: String,
    /// By fio's canonical option name ([`canonical`]).
    pub options: BTreeMap<String, Option<String>>,
    /// How the job file spelled each option of `options` (for messages).
    pub written: BTreeMap<String, String>,
    pub groupid: u64,
}

impl JobInfo {
    /// `key` as the job file wrote it (`fileoffset` for `offset`).
    fn shown<'a>(&'a self, key: &'a str) -> &'a str {
        self.written.get(key).map_or(key, String::as_str)
    }
    fn get(&self, keys: &[&str]) -> Option<&str> {
        keys.iter()
            .find_map(|k| self.options.get(*k))
            .map(|v| v.as_deref().unwrap_or(""))
    }
    fn flag(&self, key: &str) -> bool {
        match self.options.get(key) {
            None => false,
            Some(v) => truthy(v.as_deref()),
        }
    }
}

/// A job file that passed the checks, with the target put in.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The text fio is given.
    pub text: String,
    pub jobs: Vec<JobInfo>,
    /// True when `filename=TARGET` was added (the file named no file at all).
    pub filename_added: bool,
}

fn truthy(v: Option<&str>) -> bool {
    match v {
        None => true,
        Some(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        ),
    }
}

/// fio strips a comment from `;` or `#` to the end of any line.
fn strip_comment(line: &str) -> &str {
    match line.find([';', '#']) {
        Some(i) => &line[..i],
        None => line,
    }
}

fn parse_sections(text: &str, file: &str) -> Result<Vec<Section>, FioJobError> {
    let mut sections: Vec<Section> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let name = name.strip_suffix(']').ok_or_else(|| FioJobError::Syntax {
                file: file.to_string(),
                line: n,
                // Not quoted: a file that is no job file (a symlink to someone's secrets)
                // would have its line in the log.
                what: "a section name is opened with '[' and not closed with ']'".into(),
            })?;
            sections.push(Section {
                name: name.trim().to_string(),
                opts: Vec::new(),
                first_line: n,
            });
            continue;
        }
        let first_word = line.split_whitespace().next().unwrap_or("");
        if first_word == "include" && !line.contains('=') {
            return Err(FioJobError::Refused(Box::new(Refusal {
                file: file.to_string(),
                job: sections.last().map_or("(top)".into(), |s| s.name.clone()),
                option: line.to_string(),
                why: "brings in another job file, which is not checked".into(),
                what: "copy its jobs into this file".into(),
            })));
        }
        let (written, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
            None => (line.to_string(), None),
        };
        let key = canonical(&written);
        let Some(section) = sections.last_mut() else {
            return Err(FioJobError::Syntax {
                file: file.to_string(),
                line: n,
                // Not quoted, as above: a job file's first line is a section.
                what: "an option comes before any [section]: put it under [global]".into(),
            });
        };
        section.opts.push(Opt {
            key,
            written,
            value,
            line: n,
        });
    }
    Ok(sections)
}

fn refuse(file: &str, job: &str, opt: &Opt, why: &str, what: &str) -> FioJobError {
    let option = match &opt.value {
        Some(v) => format!("{}={v}", opt.written),
        None => opt.written.clone(),
    };
    FioJobError::Refused(Box::new(Refusal {
        file: file.to_string(),
        job: job.to_string(),
        option,
        why: why.to_string(),
        what: what.to_string(),
    }))
}

/// Checks one option against the safety gate.
fn check(file: &str, job: &str, opt: &Opt) -> Result<(), FioJobError> {
    let key = opt.key.as_str();
    let value = opt.value.as_deref();
    let r = |why: &str, what: &str| Err(refuse(file, job, opt, why, what));
    if let Some(v) = value {
        let others = v.replace(PLACEHOLDER, "");
        if others.contains("${") {
            return r(
                "uses an environment variable; driveprobe substitutes only ${TARGET}",
                "write the value itself",
            );
        }
    }
    match key {
        "directory" => {
            return r(
                "names a directory, but driveprobe's target is a file or a device",
                "remove it and write filename=${TARGET}",
            );
        }
        "filename" | "filename_format" => {
            if value.map(str::trim) != Some(PLACEHOLDER) {
                return r(
                    "names something other than the target",
                    &format!("write {key}=${{TARGET}} (driveprobe puts its target there)"),
                );
            }
            return Ok(());
        }
        "ioengine" => {
            let v = value.unwrap_or("").trim().to_ascii_lowercase();
            if !ALLOWED_ENGINES.contains(&v.as_str()) {
                return r(
                    "is not an engine that does block I/O on the target",
                    &format!("use one of {}", ALLOWED_ENGINES.join(", ")),
                );
            }
        }
        "exec_prerun" | "exec_postrun" => {
            return r(
                "runs a command",
                "remove it; run commands outside driveprobe",
            )
        }
        "write_iolog" => return r("writes an I/O log file outside the target", "remove it"),
        "verify_dump" if truthy(value) => {
            return r(
                "writes dump files outside the target",
                "remove it (or set it to 0)",
            )
        }
        k if k.starts_with("write_") && k.ends_with("_log") => {
            return r(
                "writes log files outside the target",
                "remove it: driveprobe records the figures itself",
            )
        }
        "read_iolog" | "replay_redirect" | "merge_blktrace_file" | "opendir" => {
            return r(
                "takes I/O or files from somewhere other than the target",
                "remove it and name the target with filename=${TARGET}",
            )
        }
        "ioscheduler" | "cgroup" => {
            return r(
                "changes the system outside the target",
                "remove it; set it up outside driveprobe",
            )
        }
        "unlink" | "unlink_each_loop" if truthy(value) => {
            return r("deletes the target", "remove it (or set it to 0)")
        }
        "mem" | "iomem" if value.is_some_and(|v| v.contains(':')) => {
            return r(
                "backs the I/O buffers with a file outside the target",
                "use mem=malloc, shm, shmhuge or mmap without a file",
            )
        }
        "profile" => {
            return r(
                "runs a built-in fio profile with jobs of its own",
                "write the jobs out in the file",
            )
        }
        _ => {}
    }
    if value.is_some_and(|v| v.contains(PLACEHOLDER)) {
        return r(
            "uses ${TARGET} outside filename and filename_format",
            "use ${TARGET} only as filename=${TARGET}",
        );
    }
    Ok(())
}

/// Checks `text` (a job file named `file` in messages) and substitutes `target` for
/// `${TARGET}`.
pub fn prepare(text: &str, file: &str, target: &Path) -> Result<Prepared, FioJobError> {
    let target_s = target.to_string_lossy();
    if target_s.contains([';', '#', '\n', '\r']) || target_s.trim() != target_s {
        return Err(FioJobError::BadTarget(target.to_path_buf()));
    }
    // fio splits filename= at ':' (several files); a colon in the path is written `\:`.
    let escaped = target_s.replace(':', "\\:");
    let sections = parse_sections(text, file)?;
    for s in &sections {
        for o in &s.opts {
            check(file, &s.name, o)?;
        }
    }
    let names_file = sections.iter().any(|s| {
        s.opts
            .iter()
            .any(|o| matches!(o.key.as_str(), "filename" | "directory" | "filename_format"))
    });
    // The effective options and the groups of the jobs, as fio forms them: a [global]
    // section applies to the jobs after it; a job with stonewall or new_group starts a
    // new group unless the current one is still empty.
    let mut jobs = Vec::new();
    let mut global: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut global_written: BTreeMap<String, String> = BTreeMap::new();
    if !names_file {
        global.insert("filename".into(), Some(PLACEHOLDER.into()));
    }
    let mut groupid = 0u64;
    let mut jobs_in_group = 0u64;
    for s in &sections {
        if s.name == "global" {
            for o in &s.opts {
                global.insert(o.key.clone(), o.value.clone());
                global_written.insert(o.key.clone(), o.written.clone());
            }
            continue;
        }
        let mut options = global.clone();
        let mut written = global_written.clone();
        for o in &s.opts {
            options.insert(o.key.clone(), o.value.clone());
            written.insert(o.key.clone(), o.written.clone());
        }
        let mut job = JobInfo {
            name: s.name.clone(),
            options,
            written,
            groupid: 0,
        };
        if (job.flag("stonewall") || job.flag("new_group")) && jobs_in_group > 0 {
            groupid += 1;
            jobs_in_group = 0;
        }
        job.groupid = groupid;
        jobs_in_group += 1;
        let _ = s.first_line;
        jobs.push(job);
    }
    if jobs.is_empty() {
        return Err(FioJobError::NoJobs {
            file: file.to_string(),
        });
    }
    // fio extends a regular file that is smaller than what a job asks of it; a file
    // target is never grown (its size is the drive's, chosen by the operator).
    if let Ok(meta) = std::fs::metadata(target) {
        if meta.is_file() {
            for j in &jobs {
                fits_in_file(file, j, meta.len())?;
            }
        }
    }
    // The text fio runs: the lines as written, the placeholder replaced.
    let mut out = String::new();
    if !names_file {
        out.push_str(&format!(
            "; added by driveprobe: the job file names no file\n[global]\nfilename={escaped}\n"
        ));
    }
    for raw in text.lines() {
        let code = strip_comment(raw);
        if code.contains(PLACEHOLDER) {
            // Checked above: only `filename|filename_format = ${TARGET}`.
            let key = code.split_once('=').map_or("", |(k, _)| k.trim());
            out.push_str(&format!("{key}={escaped}\n"));
        } else {
            out.push_str(raw);
            out.push('\n');
        }
    }
    Ok(Prepared {
        text: out,
        jobs,
        filename_added: !names_file,
    })
}

/// Refuses a job that would grow a target file of `len` bytes: a region past its end
/// (`offset`, `offset_increment` over the clones, `size`, `filesize`), appending, or
/// filling the filesystem.
fn fits_in_file(file: &str, j: &JobInfo, len: u64) -> Result<(), FioJobError> {
    let refusal = |option: String, why: String, what: &str| {
        FioJobError::Refused(Box::new(Refusal {
            file: file.to_string(),
            job: j.name.clone(),
            option,
            why,
            what: what.to_string(),
        }))
    };
    for key in ["fill_device"] {
        if j.flag(key) {
            return Err(refusal(
                j.shown(key).to_string(),
                "writes until the filesystem is full; on a file target that fills the \
                 filesystem the file is on"
                    .into(),
                "remove it; bound the run with size=, io_size= or runtime=",
            ));
        }
    }
    if j.flag("file_append") {
        return Err(refusal(
            j.shown("file_append").into(),
            "writes past the end of the target file, growing it".into(),
            "remove it",
        ));
    }
    // An amount in bytes, or a share of the file (`N%`); a range (`filesize=1m-4m`)
    // counts by its upper end.
    let bytes = |key: &str| -> Result<Option<u64>, FioJobError> {
        let Some(v) = j.get(&[key]) else {
            return Ok(None);
        };
        let upper = v.rsplit(['-', ':']).next().unwrap_or(v).trim();
        let n = match upper.strip_suffix('%') {
            Some(pct) => pct
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .map(|p| (len as f64 * p / 100.0) as u64),
            None => fio_bytes(upper),
        };
        n.map(Some).ok_or_else(|| {
            refusal(
                format!("{}={v}", j.shown(key)),
                "cannot be read as a size, so it cannot be checked against the target file".into(),
                "write a number of bytes with k, m, g or t, or a share of the file up to 100%",
            )
        })
    };
    // fio aligns an offset given as a share upwards, to `offset_align` or else to the
    // smallest block size: taken here as the largest size any block-size option names
    // (at least as far up as fio goes).
    let align = match bytes("offset_align")? {
        Some(a) if a > 0 => a,
        _ => largest_block(j),
    };
    let aligned = |key: &str| -> Result<u64, FioJobError> {
        let n = bytes(key)?.unwrap_or(0);
        let share = j.get(&[key]).is_some_and(|v| v.trim().ends_with('%'));
        Ok(if share {
            n.div_ceil(align).saturating_mul(align)
        } else {
            n
        })
    };
    let offset = aligned("offset")?;
    // A count this check cannot read (fio also takes `0x10`, or an expression) could
    // hide clones whose offsets reach past the end: refused.
    let clones = match j.get(&["numjobs"]) {
        None => 1,
        Some(v) => v.trim().parse::<u64>().map_err(|_| {
            refusal(
                format!("{}={v}", j.shown("numjobs")),
                "cannot be read as a count, so the clones' offsets cannot be checked against the target file".into(),
                "write the number of clones in decimal digits",
            )
        })?,
    }
    .max(1);
    let step = aligned("offset_increment")?;
    let region_keys = [
        "offset",
        "offset_align",
        "offset_increment",
        "size",
        "filesize",
    ];
    let shown = || {
        region_keys
            .iter()
            .filter_map(|k| j.get(&[k]).map(|v| format!("{}={v}", j.shown(k))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let size = match (bytes("size")?, bytes("filesize")?) {
        (None, None) => {
            // The region is the rest of the file from the offset: none left past its end.
            let start = offset.saturating_add(step.saturating_mul(clones - 1));
            if (offset > 0 || step > 0) && start >= len {
                return Err(refusal(
                    shown(),
                    format!("starts past the end of the target file (byte {start} of {len})"),
                    "keep the offset inside the file",
                ));
            }
            return Ok(());
        }
        (a, b) => a.unwrap_or(0).max(b.unwrap_or(0)),
    };
    let end = offset
        .saturating_add(step.saturating_mul(clones - 1))
        .saturating_add(size);
    if end > len {
        return Err(refusal(
            shown(),
            format!("reaches byte {end} of a target file of {len} bytes; fio would grow the file"),
            "keep the region inside the file, or give size as a share of it (size=100%)",
        ));
    }
    Ok(())
}

/// The largest block size a job's `bs`, `bsrange` or `bssplit` names (4 KiB, fio's
/// default, when none does; 1 MiB when one cannot be read, which fio refuses anyway).
fn largest_block(j: &JobInfo) -> u64 {
    let mut max = 0u64;
    for key in ["bs", "bsrange", "bssplit"] {
        let Some(v) = j.get(&[key]) else { continue };
        for part in v.split([',', ':', '-']) {
            let size = part.split('/').next().unwrap_or("").trim();
            if size.is_empty() {
                continue;
            }
            match fio_bytes(size) {
                Some(n) => max = max.max(n),
                None => return 1 << 20,
            }
        }
    }
    if max == 0 {
        4096
    } else {
        max
    }
}

/// A fio size (`4k`, `1g`, `1GiB`, `512`): every unit is binary, as with fio's default
/// `kb_base=1024`.
fn fio_bytes(v: &str) -> Option<u64> {
    let v = v.trim().to_ascii_lowercase();
    let v = v.strip_suffix('b').unwrap_or(&v);
    let v = v.strip_suffix('i').unwrap_or(v);
    let (digits, shift) = match v.chars().last()? {
        'k' => (&v[..v.len() - 1], 10),
        'm' => (&v[..v.len() - 1], 20),
        'g' => (&v[..v.len() - 1], 30),
        't' => (&v[..v.len() - 1], 40),
        'p' => (&v[..v.len() - 1], 50),
        _ => (v, 0),
    };
    let n: f64 = digits.trim().parse().ok()?;
    (n.is_finite() && n >= 0.0).then(|| (n * (1u64 << shift) as f64).ceil() as u64)
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn unum(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(|x| x.as_u64().or_else(|| x.as_f64().map(|f| f as u64)))
        .unwrap_or(0)
}

/// The percentile `p` from fio's `{"50.000000": 1234, ...}`.
fn percentile(map: &serde_json::Map<String, Value>, p: f64) -> Option<u64> {
    map.iter().find_map(|(k, v)| {
        let kp: f64 = k.parse().ok()?;
        ((kp - p).abs() < 1e-6).then(|| v.as_u64()).flatten()
    })
}

/// One direction (`read`, `write`) of one entry of fio's `jobs`.
fn dir_figures(
    d: &Value,
    file: &str,
    job: &str,
) -> Result<(DirFigures, Option<&'static str>), FioJobError> {
    let ops = unum(d, "total_ios");
    let lat = d.get("lat_ns").ok_or_else(|| FioJobError::Json {
        file: file.to_string(),
        what: format!("job [{job}] has no lat_ns (fio 3.0 or later is needed)"),
    })?;
    let mut f = DirFigures {
        ops,
        iops: num(d, "iops"),
        bw_bytes: num(d, "bw_bytes"),
        lat_mean_ns: num(lat, "mean"),
        lat_stddev_ns: num(lat, "stddev"),
        lat_max_ns: unum(lat, "max"),
        ..DirFigures::default()
    };
    if ops == 0 {
        return Ok((f, None));
    }
    let (source, pct) = match lat.get("percentile").and_then(Value::as_object) {
        Some(m) => ("lat_ns", m),
        None => match d
            .get("clat_ns")
            .and_then(|c| c.get("percentile"))
            .and_then(Value::as_object)
        {
            Some(m) => ("clat_ns", m),
            None => {
                return Err(FioJobError::NoPercentile {
                    file: file.to_string(),
                    job: job.to_string(),
                    percentile: "(any)".into(),
                })
            }
        },
    };
    let get = |p: f64, name: &str| {
        percentile(pct, p).ok_or_else(|| FioJobError::NoPercentile {
            file: file.to_string(),
            job: job.to_string(),
            percentile: name.to_string(),
        })
    };
    f.lat_p50_ns = get(50.0, "50th")?;
    f.lat_p99_ns = get(99.0, "99th")?;
    f.lat_p99_9_ns = get(99.9, "99.9th")?;
    Ok((f, Some(source)))
}

/// Reads fio's JSON output into one (workload, round) per entry of its `jobs` array.
/// Returns, beside them, where each entry's percentiles came from.
pub fn parse_output(
    json: &str,
    prepared: &Prepared,
    file: &str,
) -> Result<(Vec<JobResult>, Vec<&'static str>), FioJobError> {
    let jerr = |what: String| FioJobError::Json {
        file: file.to_string(),
        what,
    };
    let v: Value = serde_json::from_str(json).map_err(|e| jerr(e.to_string()))?;
    let entries = v
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| jerr("no jobs array".into()))?;
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let count = |name: &str| {
        entries
            .iter()
            .filter(|e| e.get("jobname").and_then(Value::as_str) == Some(name))
            .count()
    };
    let mut results = Vec::new();
    let mut sources = Vec::new();
    for e in entries {
        let job = e
            .get("jobname")
            .and_then(Value::as_str)
            .ok_or_else(|| jerr("a job without a jobname".into()))?
            .to_string();
        let errno = e.get("error").and_then(Value::as_i64).unwrap_or(0);
        if errno != 0 {
            return Err(FioJobError::JobError {
                file: file.to_string(),
                job,
                errno,
                text: std::io::Error::from_raw_os_error(errno as i32).to_string(),
            });
        }
        let groupid = unum(e, "groupid");
        let (read, rs) = dir_figures(e.get("read").unwrap_or(&Value::Null), file, &job)?;
        let (write, ws) = dir_figures(e.get("write").unwrap_or(&Value::Null), file, &job)?;
        let end_seconds = unum(e, "job_runtime") as f64 / 1000.0;
        let k = seen.entry(job.clone()).or_insert(0);
        let name = if count(&job) > 1 {
            format!("{job}.{k}")
        } else {
            job.clone()
        };
        *k += 1;
        let desc = describe(&name, &job, groupid, prepared, &read, &write);
        sources.push(rs.or(ws).unwrap_or("lat_ns"));
        results.push((desc, Round::from_dirs(0, end_seconds, read, write)));
    }
    Ok((results, sources))
}

/// The workload description of one entry: from the job's options (with its group's
/// under `group_reporting`: the values the jobs share, or the distinct values joined
/// with `+`; workers added; the deepest queue).
fn describe(
    name: &str,
    jobname: &str,
    groupid: u64,
    prepared: &Prepared,
    read: &DirFigures,
    write: &DirFigures,
) -> WorkloadDesc {
    let named: Vec<&JobInfo> = prepared
        .jobs
        .iter()
        .filter(|j| j.name == jobname)
        .take(1)
        .collect();
    let grouped = named.first().is_some_and(|j| j.flag("group_reporting"));
    let members: Vec<&JobInfo> = if grouped {
        let g: Vec<&JobInfo> = prepared
            .jobs
            .iter()
            .filter(|j| j.groupid == groupid && j.flag("group_reporting"))
            .collect();
        if g.first().map(|j| j.name.as_str()) == Some(jobname) {
            g
        } else {
            named
        }
    } else {
        named
    };
    let joined = |f: &dyn Fn(&JobInfo) -> String| -> String {
        let mut vals: Vec<String> = Vec::new();
        for j in &members {
            let v = f(j);
            if !vals.contains(&v) {
                vals.push(v);
            }
        }
        vals.join("+")
    };
    let rw_of = |j: &JobInfo| -> String {
        let rw = j.get(&["rw"]).unwrap_or("read");
        rw.split(':').next().unwrap_or(rw).trim().to_string()
    };
    let numjobs = |j: &JobInfo| -> u32 {
        j.get(&["numjobs"])
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
    };
    let rw = joined(&|j| rw_of(j));
    let bs = joined(&|j| {
        j.get(&["bs"])
            .or_else(|| j.get(&["bsrange"]))
            .or_else(|| j.get(&["bssplit"]))
            .unwrap_or("4k")
            .to_string()
    });
    let mix_of = |j: &JobInfo| -> u32 {
        if let Some(r) = j
            .get(&["rwmixread"])
            .and_then(|v| v.trim().parse::<u32>().ok())
        {
            return r.min(100);
        }
        if let Some(w) = j
            .get(&["rwmixwrite"])
            .and_then(|v| v.trim().parse::<u32>().ok())
        {
            return 100 - w.min(100);
        }
        match rw_of(j).as_str() {
            "read" | "randread" => 100,
            "rw" | "readwrite" | "randrw" => 50,
            _ => 0,
        }
    };
    let mixes: Vec<u32> = members.iter().map(|j| mix_of(j)).collect();
    let rwmixread = match mixes.as_slice() {
        [m, rest @ ..] if rest.iter().all(|x| x == m) => *m,
        _ => {
            // Jobs with different mixes in one group: the share the reads had.
            let ops = read.ops + write.ops;
            (read.ops * 100).checked_div(ops).unwrap_or(0) as u32
        }
    };
    let workers = if grouped {
        members.iter().map(|j| numjobs(j)).sum::<u32>().max(1)
    } else {
        1
    };
    let depth = members
        .iter()
        .map(|j| {
            j.get(&["iodepth"])
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(1)
        })
        .max()
        .unwrap_or(1);
    let distribution = joined(&|j| match j.get(&["random_distribution"]) {
        None | Some("random") | Some("") => "uniform".to_string(),
        Some(d) => d.trim().to_string(),
    });
    WorkloadDesc {
        name: name.to_string(),
        rw: if rw.is_empty() { "read".into() } else { rw },
        bs: if bs.is_empty() { "4k".into() } else { bs },
        rwmixread,
        workers,
        depth,
        distribution: if distribution.is_empty() {
            "uniform".into()
        } else {
            distribution
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_written_bytes_sums_every_jobs_writes() {
        let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/app/fio");
        let json = std::fs::read_to_string(dir.join("3.33-two-jobs.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let jobs = v["jobs"].as_array().unwrap();
        let writes: Vec<u64> = jobs
            .iter()
            .map(|j| j["write"]["io_bytes"].as_u64().unwrap())
            .collect();
        // The captured file: a read job (no writes) and a write job.
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0], 0);
        assert!(writes[1] > 0);
        assert_eq!(written_bytes(&json), writes[1]);
        assert_eq!(
            written_bytes(
                r#"{"jobs":[{"write":{"io_bytes":5}},{"write":{"io_bytes":7}},{"read":{}}]}"#
            ),
            12
        );
        assert_eq!(written_bytes("not json"), 0);
    }

    const T: &str = "/dev/shm/drive target";

    fn refused(text: &str) -> String {
        match prepare(text, "jobs.fio", Path::new(T)) {
            Err(e @ FioJobError::Refused(_)) => e.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_file_target_is_never_grown() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("drive.dat");
        std::fs::write(&target, vec![0u8; 1 << 20]).unwrap();
        let job = |opts: &str| format!("[w]\nrw=randwrite\nfilename=${{TARGET}}\n{opts}");
        let prep = |opts: &str| prepare(&job(opts), "jobs.fio", &target);
        // Inside the file, or no region at all: accepted.
        for ok in [
            "",
            "size=1m",
            "size=1MiB",
            "size=100%",
            "size=512k\noffset=512k",
            "size=256k\noffset=50%",
            "filesize=128k-1m",
            "size=256k\nnumjobs=4\noffset_increment=256k",
            "io_size=64m",
            "fill_device=0",
        ] {
            assert!(prep(ok).is_ok(), "{ok}: {:?}", prep(ok));
        }
        for (bad, says) in [
            (
                "size=2m",
                "reaches byte 2097152 of a target file of 1048576 bytes",
            ),
            ("size=1.5m", "reaches byte 1572864"),
            (
                "size=1m\noffset=4k",
                "offset=4k size=1m: reaches byte 1052672",
            ),
            ("size=512k\noffset=75%", "reaches byte 1310720"),
            ("filesize=512k-2m", "filesize=512k-2m: reaches byte 2097152"),
            (
                "size=256k\nnumjobs=5\noffset_increment=256k",
                "reaches byte 1310720",
            ),
            ("size=200%", "size=200%: cannot be read as a size"),
            ("size=lots", "cannot be read as a size"),
            ("fill_fs=1", "fill_fs: writes until the filesystem is full"),
            (
                "fill_device",
                "fill_device: writes until the filesystem is full",
            ),
            ("file_append=1", "file_append: writes past the end"),
        ] {
            let e = prep(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("jobs.fio: job [w]: ") && e.contains(says),
                "{bad}: {e}"
            );
        }
        // The same options on a target that is not a regular file are fio's business
        // (a device cannot grow; fio stops at its end).
        assert!(prepare(&job("size=2m"), "jobs.fio", Path::new(T)).is_ok());
        assert_eq!(std::fs::metadata(&target).unwrap().len(), 1 << 20);
    }

    /// Every option of fio's own list (fio 3.33, `fio --cmdhelp=all`, and `alias:` in
    /// `fio --cmdhelp=OPTION`) that sets where I/O starts or how large a file is, in
    /// every spelling fio takes (and the ones it refuses, read the same way here): each
    /// is refused, or bounded by the region check, on a 1 MiB target file.
    #[test]
    fn every_spelling_of_every_option_that_grows_a_file_is_refused_or_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("drive.dat");
        std::fs::write(&target, vec![0u8; 1 << 20]).unwrap();
        let prep = |text: &str| prepare(text, "jobs.fio", &target);
        let job = |opts: &str| format!("[w]\nrw=randwrite\nfilename=${{TARGET}}\n{opts}\n");
        // (options, refused with this text; or None: accepted, the region inside the file)
        let cases: &[(&str, Option<&str>)] = &[
            // Where I/O starts.
            ("offset=512k\nsize=512k", None),
            (
                "offset=1m\nsize=512k",
                Some("offset=1m size=512k: reaches byte 1572864"),
            ),
            ("fileoffset=512k\nsize=512k", None),
            (
                "fileoffset=1m\nsize=512k",
                Some("fileoffset=1m size=512k: reaches byte 1572864"),
            ),
            (
                "FILEOFFSET=1m\nsize=512k",
                Some("FILEOFFSET=1m size=512k: reaches byte"),
            ),
            ("fileoffset=50%\nsize=600k", Some("reaches byte 1138688")),
            ("fileoffset=2m", Some("fileoffset=2m: starts past the end")),
            ("offset=100%", Some("offset=100%: starts past the end")),
            ("offset=50%\nsize=4k", None),
            (
                "offset=50%\noffset_align=1m\nsize=4k",
                Some("offset_align=1m size=4k: reaches byte 1052672"),
            ),
            ("offset=1k\noffset_align=1m\nsize=4k", None),
            (
                "offset=51%\nbs=256k\nsize=512k",
                Some("reaches byte 1310720"),
            ),
            ("numjobs=2\noffset_increment=512k\nsize=512k", None),
            (
                "numjobs=3\noffset_increment=512k\nsize=512k",
                Some("offset_increment=512k size=512k: reaches byte 1572864"),
            ),
            (
                "numjobs=2\noffset_increment=60%\nsize=40%",
                Some("reaches byte 1050214"),
            ),
            (
                "numjobs=2\nfileoffset=256k\noffset_increment=512k\nsize=512k",
                Some("reaches byte 1310720"),
            ),
            (
                "numjobs=0x10\noffset_increment=64k\nsize=64k",
                Some("numjobs=0x10: cannot be read as a count"),
            ),
            // How large the file is.
            ("size=1m", None),
            ("size=2m", Some("size=2m: reaches byte 2097152")),
            ("size=101%", Some("size=101%: cannot be read as a size")),
            ("size=2z", Some("size=2z: cannot be read as a size")),
            ("size=(1m*2)", Some("cannot be read as a size")),
            ("size=0x200000", Some("cannot be read as a size")),
            ("filesize=2m", Some("filesize=2m: reaches byte 2097152")),
            (
                "filesize=4k:2m",
                Some("filesize=4k:2m: reaches byte 2097152"),
            ),
            ("FileSize=2m", Some("FileSize=2m: reaches byte 2097152")),
            ("file_append=1", Some("file_append: writes past the end")),
            ("file_append", Some("file_append: writes past the end")),
            ("File-Append=1", Some("File-Append: writes past the end")),
            ("file_append=0", None),
            (
                "fill_device=1",
                Some("fill_device: writes until the filesystem is full"),
            ),
            (
                "fill_fs=1",
                Some("fill_fs: writes until the filesystem is full"),
            ),
            (
                "fill_fs",
                Some("fill_fs: writes until the filesystem is full"),
            ),
            (
                "Fill-FS=1",
                Some("Fill-FS: writes until the filesystem is full"),
            ),
            // The amount of I/O, not the region: bounded by size (the file when none).
            ("io_size=64m", None),
            ("io_limit=64m", None),
            (
                "io_limit=64m\nsize=2m",
                Some("size=2m: reaches byte 2097152"),
            ),
            // Files: with filename=${TARGET} fio ignores nrfiles; the region still holds.
            ("nrfiles=4\nsize=1m", None),
            ("nr_files=4\nsize=2m", Some("size=2m: reaches byte 2097152")),
            (
                "nr_files=4\nfilesize=2m",
                Some("filesize=2m: reaches byte 2097152"),
            ),
            // Layout: creating and extending happen only up to the region.
            (
                "fallocate=truncate\nsize=2m",
                Some("size=2m: reaches byte 2097152"),
            ),
            ("fallocate=truncate\nsize=1m", None),
            (
                "create_on_open=1\nallow_file_create=1\ncreate_only=1\npre_read=1\nsize=1m",
                None,
            ),
            ("create_on_open=1\nsize=2m", Some("reaches byte 2097152")),
            // Zones stay inside the region (fio 3.33, checked by hand on a file).
            (
                "zonemode=strided\nzonerange=4m\nzonesize=4k\nzoneskip=8m\nsize=1m",
                None,
            ),
            (
                "zonemode=strided\nzonesize=4k\nzoneskip=8m\nsize=2m",
                Some("size=2m: reaches byte"),
            ),
            (
                "zonemode=zbd\nzonesize=64k\noffset=2z\nsize=64k",
                Some("offset=2z: cannot be read as a size"),
            ),
            // Sequential holes (`rw=write:N`) wrap inside the region.
            ("rw=write:512k\nsize=1m", None),
        ];
        for (opts, refused) in cases {
            let got = prep(&job(opts));
            match refused {
                None => assert!(got.is_ok(), "{opts:?}: {got:?}"),
                Some(says) => {
                    let e = got.expect_err(opts).to_string();
                    assert!(
                        e.starts_with("jobs.fio: job [w]: ") && e.contains(says),
                        "{opts:?}: wanted {says:?} in {e}"
                    );
                }
            }
        }
        // An alias in a job overrides the canonical name in [global], as in fio.
        let e = prep(
            "[global]\noffset=0\nsize=512k\n[w]\nrw=write\nfilename=${TARGET}\nfileoffset=768k\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("fileoffset=768k size=512k: reaches byte 1310720"),
            "{e}"
        );
        let e = prep("[global]\nfill_device=0\n[w]\nfilename=${TARGET}\nfill_fs=1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fill_fs: writes until"), "{e}");
        // Every alias fio lists maps to an option name, never to another alias.
        for (alias, name) in ALIASES {
            assert_eq!(canonical(alias), *name);
            assert!(ALIASES.iter().all(|(a, _)| a != name), "{name}");
        }
        // The other gates see aliases too.
        for (text, needle) in [
            (
                "[r]\nfilename=${TARGET}\niomem=mmap:/tmp/buf\n",
                "iomem=mmap:/tmp/buf",
            ),
            (
                "[r]\nfilename=${TARGET}\nUNLINK=1\n",
                "UNLINK=1: deletes the target",
            ),
            (
                "[r]\nfilename=${TARGET}\nexec-prerun=true\n",
                "exec-prerun=true: runs a command",
            ),
            (
                "[r]\nFileName=/dev/sda\n",
                "FileName=/dev/sda: names something other",
            ),
        ] {
            let e = refused(text);
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        assert_eq!(std::fs::metadata(&target).unwrap().len(), 1 << 20);
    }

    #[test]
    fn sizes_read_as_fio_reads_them() {
        for (v, n) in [
            ("512", 512),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4kb", 4096),
            ("1m", 1 << 20),
            ("2g", 2 << 30),
            ("1t", 1 << 40),
            ("1.5k", 1536),
        ] {
            assert_eq!(fio_bytes(v), Some(n), "{v}");
        }
        for v in ["", "k", "-1k", "lots", "1x"] {
            assert_eq!(fio_bytes(v), None, "{v}");
        }
    }

    #[test]
    fn the_placeholder_becomes_the_target() {
        let p = prepare(
            "[global]\nioengine=psync\n; a comment ${HOME}\n[a]\nrw=randread\nfilename = ${TARGET} ; here\n",
            "jobs.fio",
            Path::new("/dev/shm/a:b"),
        )
        .unwrap();
        assert!(!p.filename_added);
        assert!(p.text.contains("filename=/dev/shm/a\\:b\n"), "{}", p.text);
        assert!(!p.text.contains("filename = ${TARGET}"));
        // Comments pass through untouched.
        assert!(p.text.contains("; a comment ${HOME}"));
        assert_eq!(p.jobs.len(), 1);
        assert_eq!(p.jobs[0].get(&["ioengine"]), Some("psync"));
    }

    #[test]
    fn a_file_that_names_no_file_gets_the_target() {
        let p = prepare("[a]\nrw=read\n[b]\nrw=write\n", "jobs.fio", Path::new(T)).unwrap();
        assert!(p.filename_added);
        assert!(p.text.starts_with("; added by driveprobe"));
        assert!(p.text.contains(&format!("[global]\nfilename={T}\n[a]")));
    }

    #[test]
    fn groups_follow_stonewall_and_new_group() {
        let p = prepare(
            "[global]\nfilename=${TARGET}\n[a]\nstonewall\n[b]\n[c]\nstonewall\n[d]\nnew_group\n[e]\nstonewall=0\n",
            "f",
            Path::new(T),
        )
        .unwrap();
        let g: Vec<u64> = p.jobs.iter().map(|j| j.groupid).collect();
        assert_eq!(g, [0, 0, 1, 2, 2]);
    }

    #[test]
    fn refusals_name_the_job_the_option_and_the_fix() {
        let e = refused("[global]\nfilename=${TARGET}\n[r]\nfilename=/dev/sda\n");
        assert!(
            e.contains("job [r]") && e.contains("filename=/dev/sda"),
            "{e}"
        );
        assert!(e.contains("write filename=${TARGET}"), "{e}");
        for (text, needle) in [
            ("[r]\nfilename=${TARGET}:/dev/sdb\n", "filename="),
            ("[r]\ndirectory=/tmp\n", "directory=/tmp"),
            ("[r]\ndirectory=${TARGET}\n", "names a directory"),
            ("[r]\nfilename_format=/tmp/$jobname\n", "filename_format"),
            ("[r]\nfilename=${TARGET}\nioengine=exec\n", "ioengine=exec"),
            ("[r]\nfilename=${TARGET}\nioengine=net\n", "ioengine=net"),
            (
                "[r]\nfilename=${TARGET}\nioengine=external:/x.so\n",
                "ioengine=external",
            ),
            (
                "[r]\nfilename=${TARGET}\nexec_prerun=rm -rf /\n",
                "exec_prerun",
            ),
            (
                "[r]\nfilename=${TARGET}\nwrite_lat_log=/tmp/x\n",
                "write_lat_log",
            ),
            ("[r]\nfilename=${TARGET}\nwrite_bw_log\n", "write_bw_log"),
            (
                "[r]\nfilename=${TARGET}\nwrite_iolog=/tmp/x\n",
                "write_iolog",
            ),
            ("[r]\nfilename=${TARGET}\nread_iolog=/tmp/x\n", "read_iolog"),
            (
                "[r]\nfilename=${TARGET}\nreplay_redirect=/dev/sda\n",
                "replay_redirect",
            ),
            ("[r]\nfilename=${TARGET}\nopendir=/home\n", "opendir"),
            ("[r]\nfilename=${TARGET}\nioscheduler=none\n", "ioscheduler"),
            ("[r]\nfilename=${TARGET}\nunlink=1\n", "unlink=1"),
            ("[r]\nfilename=${TARGET}\nverify_dump=1\n", "verify_dump"),
            (
                "[r]\nfilename=${TARGET}\nmem=mmap:/tmp/buf\n",
                "mem=mmap:/tmp/buf",
            ),
            (
                "[r]\nfilename=${TARGET}\nioengine=${ENGINE}\n",
                "environment variable",
            ),
            (
                "[r]\nfilename=${TARGET}\ndescription=${TARGET}\n",
                "outside filename",
            ),
            (
                "[r]\nfilename=${TARGET}\ninclude other.fio\n",
                "include other.fio",
            ),
        ] {
            let e = refused(text);
            assert!(e.contains(needle), "{text:?}: {e}");
            assert!(e.starts_with("jobs.fio: job [r]: "), "{e}");
            assert!(e.contains("; "), "says what to do: {e}");
        }
        // Fine: engines that do block I/O on the target, harmless options.
        for ok in [
            "[r]\nfilename=${TARGET}\nioengine=libaio\niodepth=32\ndirect=1\n",
            "[r]\nfilename=${TARGET}\nunlink=0\nverify_dump=0\nmem=malloc\n",
            "[r]\nfilename_format=${TARGET}\n",
        ] {
            prepare(ok, "jobs.fio", Path::new(T)).unwrap();
        }
        // A comment hides what follows it, as fio reads it.
        prepare("[r]\nfilename=${TARGET} # :/dev/sda\n", "f", Path::new(T)).unwrap();
        assert!(matches!(
            prepare("ioengine=psync\n[r]\n", "f", Path::new(T)),
            Err(FioJobError::Syntax { line: 1, .. })
        ));
        assert!(matches!(
            prepare("[global]\nfilename=${TARGET}\n", "f", Path::new(T)),
            Err(FioJobError::NoJobs { .. })
        ));
        assert!(matches!(
            prepare("[r]\n", "f", Path::new("/tmp/a;b")),
            Err(FioJobError::BadTarget(_))
        ));
    }

    /// A file that is no job file (a symlink to someone's secrets as `fio_job`) is refused
    /// by its line, never quoted: the refusal goes to `check-config`, the log and the
    /// status page.
    #[test]
    fn a_file_that_is_no_job_file_is_refused_without_a_quote() {
        for text in [
            "root:$6$SECRETHASH:19000:0:99999:7:::\n",
            "[SECRETsection\nrw=read\n",
        ] {
            let e = prepare(text, "f", Path::new(T)).unwrap_err().to_string();
            assert!(!e.to_lowercase().contains("secret"), "{e}");
            assert!(e.starts_with("f: line 1: "), "{e}");
        }
    }

    #[test]
    fn json_after_notes() {
        let s = "note: both iodepth >= 1 and synchronous I/O engine are selected\n{\n  \"jobs\" : []\n}\n";
        assert_eq!(json_part(s), Some("{\n  \"jobs\" : []\n}\n"));
        assert_eq!(json_part("fio: no jobs\n"), None);
    }

    #[test]
    fn parse_a_captured_output() {
        let dir =
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("tests/fixtures/app/fio");
        let json = std::fs::read_to_string(dir.join("3.33-two-jobs.json")).unwrap();
        let job = std::fs::read_to_string(dir.join("two-jobs.fio")).unwrap();
        let p = prepare(&job, "two-jobs.fio", Path::new("/dev/shm/x")).unwrap();
        let (r, src) = parse_output(&json, &p, "two-jobs.fio").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(src, ["clat_ns", "clat_ns"]);
        let (d, round) = &r[0];
        assert_eq!(
            (d.name.as_str(), d.rw.as_str(), d.bs.as_str()),
            ("r4k", "randread", "4k")
        );
        assert_eq!((d.rwmixread, d.workers, d.depth), (100, 1, 1));
        assert!(round.read.ops > 0 && round.write.ops == 0);
        let (d, round) = &r[1];
        assert_eq!(
            (d.name.as_str(), d.rw.as_str(), d.bs.as_str()),
            ("w8k", "randwrite", "8k")
        );
        assert_eq!(d.rwmixread, 0);
        assert!(round.write.ops > 0 && round.read.ops == 0);
        assert_eq!(round.iops, round.write.iops);
    }

    #[test]
    fn a_job_error_and_missing_percentiles_are_errors() {
        let p = prepare("[a]\nfilename=${TARGET}\n", "f", Path::new(T)).unwrap();
        let e = parse_output(
            r#"{"jobs":[{"jobname":"a","groupid":0,"error":5,"read":{},"write":{}}]}"#,
            &p,
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("error 5"), "{e}");
        let j = r#"{"jobs":[{"jobname":"a","groupid":0,"error":0,"job_runtime":1000,
            "read":{"total_ios":10,"iops":10.0,"bw_bytes":40960,"lat_ns":{"mean":5.0,"stddev":1.0,"max":9},
                    "clat_ns":{"percentile":{"50.000000":4,"90.000000":8}}},
            "write":{"total_ios":0,"lat_ns":{}}}]}"#;
        let e = parse_output(j, &p, "f").unwrap_err();
        assert!(e.to_string().contains("99th"), "{e}");
        // With lat_percentiles=1, lat_ns has its own percentiles and they are used.
        let j = j.replace(
            r#""max":9}"#,
            r#""max":9,"percentile":{"50.000000":5,"99.000000":8,"99.900000":9}}"#,
        );
        let (r, src) = parse_output(&j, &p, "f").unwrap();
        assert_eq!(src, ["lat_ns"]);
        assert_eq!(r[0].1.read.lat_p99_ns, 8);
        assert!(parse_output("not json", &p, "f").is_err());
    }
}
