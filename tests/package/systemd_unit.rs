//! The systemd unit, `systemd/driveprobe.service`: systemd itself accepts it
//! (`systemd-analyze verify`, no warning about our unit), its sandbox scores below a
//! measured exposure (`systemd-analyze security --offline=yes`), and the settings the
//! daemon's contract relies on are there: Type=notify with a watchdog, restart on failure,
//! ProtectSystem=strict, a closed device policy without PrivateDevices, and exactly two
//! capabilities.
//!
//! systemd-analyze comes with the `systemd` package, which `scripts/test` installs: these
//! tests fail (they do not skip) when it is missing.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where ExecStart= points in the shipped unit; the tests point it at the built binary.
const INSTALLED_BINARY: &str = "/usr/bin/driveprobe";

/// The overall exposure `systemd-analyze security` may give the unit (0 = locked down,
/// 10 = no sandbox). Measured with systemd 252: 2.5 ("OK"). What remains is inherent to
/// the job: the network for scrapers (PrivateNetwork 0.5, INET sockets 0.3, no IP allow
/// list 0.2), root for the device nodes (0.4), CAP_SYS_ADMIN for NVMe admin commands
/// (0.3), CAP_SYS_RAWIO for SMART (0.2), device access without PrivateDevices (0.2)
/// and a few 0.1-0.2 items. 3.0 leaves room for a newer systemd weighing a check
/// differently; dropping any one big setting (SystemCallFilter, the bounding set,
/// ProtectSystem) goes well above it.
const MAX_EXPOSURE: f64 = 3.0;

/// The device classes the unit may name: driver names as /proc/devices lists them
/// (`block-NAME` / `char-NAME`). Catches a misspelt class, which systemd would silently
/// match to no device at all.
const KNOWN_CLASSES: &[&str] = &[
    "block-blkext",
    "block-sd",
    "block-virtblk",
    "block-loop",
    "block-device-mapper",
    "block-md",
    "char-nvme",
    "char-nvme-generic",
    "char-bsg",
    "char-sg",
];

/// The unit's sizing of `TasksMax=`: tasks = fixed + per canary x canaries.
const TASKS_FIXED: u64 = 256;
const TASKS_PER_CANARY: u64 = 2;

fn unit_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("systemd/driveprobe.service")
}

fn unit_text() -> String {
    let path = unit_path();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The unit with every mention of the installed binary replaced by the one cargo built,
/// written into a fresh temporary directory under the same file name.
fn unit_for_this_build() -> (tempfile::TempDir, PathBuf) {
    let text = unit_text();
    assert!(
        text.contains(INSTALLED_BINARY),
        "the unit no longer runs {INSTALLED_BINARY}; update this test"
    );
    let text = text.replace(INSTALLED_BINARY, env!("CARGO_BIN_EXE_driveprobe"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("driveprobe.service");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn systemd_analyze(args: &[&str], unit: &Path) -> Output {
    systemd_analyze_with(args, unit, &mut Command::new("systemd-analyze"))
}

fn systemd_analyze_with(args: &[&str], unit: &Path, cmd: &mut Command) -> Output {
    match cmd.args(args).arg(unit).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "systemd-analyze is not installed: run scripts/test (it installs the systemd package)"
        ),
        Err(e) => panic!("cannot run systemd-analyze: {e}"),
    }
}

/// `[Section]` -> key -> every value it is given (in order): systemd keys such as
/// DeviceAllow= or SystemCallFilter= may appear several times. Comments and blank lines
/// are dropped; the unit uses no line continuations (checked).
fn parse_unit(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut sections: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(
            !line.ends_with('\\'),
            "line {}: no line continuations, please (this parser does not join them)",
            no + 1
        );
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not KEY=VALUE: {line}", no + 1));
        let section = current
            .clone()
            .unwrap_or_else(|| panic!("line {}: a setting before any [Section]", no + 1));
        sections
            .entry(section)
            .or_default()
            .entry(key.trim().to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    sections
}

/// The values of `[Service] key`, in order.
fn service<'a>(
    unit: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>,
    key: &str,
) -> &'a [String] {
    unit.get("Service")
        .and_then(|s| s.get(key))
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The one value of a key that must be set exactly once.
fn single<'a>(unit: &'a BTreeMap<String, BTreeMap<String, Vec<String>>>, key: &str) -> &'a str {
    match service(unit, key) {
        [v] => v,
        [] => panic!("[Service] {key}= is not set"),
        many => panic!("[Service] {key}= is set {} times: {many:?}", many.len()),
    }
}

/// Space-separated words over every line of a list-valued key (an empty assignment
/// resets the list, as systemd does).
fn words(unit: &BTreeMap<String, BTreeMap<String, Vec<String>>>, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for v in service(unit, key) {
        if v.is_empty() {
            out.clear();
        }
        out.extend(v.split_whitespace().map(str::to_string));
    }
    out
}

fn is_true(v: &str) -> bool {
    matches!(v, "1" | "yes" | "y" | "true" | "t" | "on")
}

/// Is this line of systemd-analyze's stderr about a unit other than ours? systemd names
/// the unit or the unit file at the start of each message (`foo.service: ...`,
/// `/lib/systemd/system/foo.service:12: ...`); verify also loads the units ours depends on
/// (network-online.target, multi-user.target) and on some hosts complains about those.
fn about_another_unit(line: &str, ours: &Path) -> bool {
    let head = line.split(':').next().unwrap_or("").trim();
    if head.is_empty() || head.contains(' ') {
        return false;
    }
    let name = Path::new(head)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let unit_suffixes = [
        ".service",
        ".socket",
        ".target",
        ".mount",
        ".automount",
        ".device",
        ".path",
        ".timer",
        ".slice",
        ".scope",
        ".swap",
    ];
    let is_unit = unit_suffixes.iter().any(|s| name.ends_with(s));
    is_unit && name != "driveprobe.service" && Path::new(head) != ours
}

#[test]
fn systemd_analyze_verify_accepts_the_unit() {
    let (dir, unit) = unit_for_this_build();
    // Documentation= names man pages: verify runs `man` on each. They are the package's
    // (`driveprobe generate man`), put where MANPATH finds them.
    let generated = dir.path().join("generated");
    let out = Command::new(env!("CARGO_BIN_EXE_driveprobe"))
        .args(["generate", "man"])
        .arg(&generated)
        .output()
        .unwrap();
    common::assert_ok(&out, "driveprobe generate man");
    let manpath = dir.path().join("man");
    for page in std::fs::read_dir(&generated).unwrap() {
        let page = page.unwrap().path();
        let section = page.extension().unwrap().to_string_lossy().into_owned();
        let to = manpath.join(format!("man{section}"));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::rename(&page, to.join(page.file_name().unwrap())).unwrap();
    }
    let out = systemd_analyze_with(
        &["verify"],
        &unit,
        Command::new("systemd-analyze").env("MANPATH", &manpath),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !about_another_unit(l, &unit))
        .collect();
    let noise: Vec<&str> = stderr
        .lines()
        .filter(|l| about_another_unit(l, &unit))
        .collect();
    if !noise.is_empty() {
        eprintln!("systemd-analyze verify, about other units (ignored):\n{noise:#?}");
    }
    assert!(
        out.status.success(),
        "systemd-analyze verify failed ({}):\n{stderr}{stdout}",
        out.status
    );
    // verify exits 0 on an unknown key or a bad value (it ignores the line and warns),
    // so the warnings are the real check.
    assert!(
        ours.is_empty(),
        "systemd-analyze verify warns about the unit:\n{}",
        ours.join("\n")
    );
}

#[test]
fn systemd_analyze_verify_catches_a_broken_unit() {
    // The check above means something only if verify does complain here: a misspelt key
    // and a bad device right must come out as warnings about our unit.
    let (dir, unit) = unit_for_this_build();
    let mut text = std::fs::read_to_string(&unit).unwrap();
    text = text.replace("ProtectSystem=strict", "ProtectSytem=strict");
    text = text.replace("DeviceAllow=block-sd r", "DeviceAllow=block-sd x");
    let broken = dir.path().join("driveprobe.service");
    std::fs::write(&broken, text).unwrap();
    let out = systemd_analyze(&["verify"], &broken);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !about_another_unit(l, &broken))
        .collect();
    assert!(
        ours.iter().any(|l| l.contains("ProtectSytem")),
        "no warning about the misspelt key: {stderr}"
    );
    assert!(
        ours.iter().any(|l| l.contains("device rights")),
        "no warning about the bad device right: {stderr}"
    );
}

#[test]
fn security_exposure_is_below_the_measured_level() {
    let (_dir, unit) = unit_for_this_build();
    // --offline=yes (systemd 250 and later) reads the unit file itself instead of asking
    // a running systemd, so this works in a container without systemd as PID 1.
    let out = systemd_analyze(&["security", "--offline=yes", "--no-pager"], &unit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze security --offline=yes failed ({}):\n{stderr}{stdout}",
        out.status
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("Overall exposure level for driveprobe.service"))
        .unwrap_or_else(|| panic!("no overall exposure line in:\n{stdout}"));
    // The number right after the unit's name: the line ends in an emoji on a terminal
    // and in ":-)" without one (TERM unset, as under CI), whose colon is not the field's.
    let score: f64 = line
        .split_once("driveprobe.service:")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the exposure from: {line}"));
    eprintln!("systemd-analyze security: {}", line.trim());
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} is above {MAX_EXPOSURE}: a hardening setting was lost?\n{stdout}"
    );
    // The checks that must pass, whatever the weights: each line starts with ✓ or ✗.
    for check in [
        "NoNewPrivileges=",
        "ProtectSystem=",
        "PrivateTmp=",
        "ProtectKernelTunables=",
        "ProtectKernelModules=",
        "ProtectControlGroups=",
        "ProtectClock=",
        "ProtectHostname=",
        "RestrictRealtime=",
        "RestrictSUIDSGID=",
        "LockPersonality=",
        "MemoryDenyWriteExecute=",
        "SystemCallArchitectures=",
        "SystemCallFilter=~@privileged",
        "SystemCallFilter=~@mount",
        "RestrictNamespaces=~user",
        "RestrictAddressFamilies=~AF_NETLINK",
        "RestrictAddressFamilies=~AF_PACKET",
        "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)",
        "CapabilityBoundingSet=~CAP_SYS_PTRACE",
        "CapabilityBoundingSet=~CAP_NET_ADMIN",
        "CapabilityBoundingSet=~CAP_SYS_MODULE",
    ] {
        let row = stdout
            .lines()
            .find(|l| {
                l.trim_start()
                    .trim_start_matches(['✓', '✗'])
                    .trim_start()
                    .starts_with(check)
            })
            .unwrap_or_else(|| {
                panic!("systemd-analyze security printed no {check} row:\n{stdout}")
            });
        assert!(
            row.trim_start().starts_with('✓'),
            "security check not passed: {}",
            row.trim()
        );
    }
}

#[test]
fn the_unit_keeps_the_daemon_contract() {
    let unit = parse_unit(&unit_text());

    // Service manager protocol: notify, only from the main process, with a watchdog.
    assert_eq!(single(&unit, "Type"), "notify");
    assert_eq!(single(&unit, "NotifyAccess"), "main");
    // The daemon stops its own children (process::terminate_all) after its runs.
    assert_eq!(single(&unit, "KillMode"), "mixed");
    let watchdog = single(&unit, "WatchdogSec");
    assert!(
        !matches!(watchdog, "" | "0" | "0s" | "infinity"),
        "WatchdogSec={watchdog} disables the watchdog"
    );
    assert_eq!(single(&unit, "Restart"), "on-failure");
    assert!(!single(&unit, "RestartSec").is_empty());
    assert_eq!(single(&unit, "TimeoutStopSec"), "10s");
    // Issue 33: the default (15% of pid_max, 4,915 on many hosts) was reached by 2,000
    // drives. The unit states its formula, and its figure holds 2,000 drives of one probe.
    let tasks: u64 = single(&unit, "TasksMax")
        .parse()
        .expect("TasksMax= is a number");
    assert!(
        tasks >= TASKS_FIXED + TASKS_PER_CANARY * 2_000,
        "TasksMax={tasks}"
    );
    assert!(
        unit_text().contains(&format!(
            "tasks = {TASKS_FIXED} + {TASKS_PER_CANARY} x canaries"
        )),
        "the unit states how TasksMax= is sized"
    );
    assert_eq!(single(&unit, "StateDirectory"), "driveprobe");

    // Extra flags come from /etc/default/driveprobe (the package's, optional: "-").
    assert_eq!(
        single(&unit, "ExecStart"),
        format!(
            "{INSTALLED_BINARY} daemon --config /etc/driveprobe/driveprobe.toml $DRIVEPROBE_ARGS"
        )
    );
    assert_eq!(single(&unit, "EnvironmentFile"), "-/etc/default/driveprobe");
    assert!(
        service(&unit, "ExecReload")
            .iter()
            .any(|v| v == "/bin/kill -HUP $MAINPID"),
        "no ExecReload=/bin/kill -HUP $MAINPID: {:?}",
        service(&unit, "ExecReload")
    );

    // Filesystem: read-only OS; /var/lib/driveprobe (StateDirectory) and the operator's
    // ReadWritePaths= for file targets are the only writable places.
    assert_eq!(single(&unit, "ProtectSystem"), "strict");
    assert!(
        service(&unit, "ReadWritePaths").is_empty(),
        "file target directories are the operator's (a drop-in), not the shipped unit's"
    );
    assert!(
        unit_text().contains("ReadWritePaths="),
        "the unit should document the ReadWritePaths= line for file targets"
    );
    for key in [
        "PrivateTmp",
        "NoNewPrivileges",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
    ] {
        assert!(is_true(single(&unit, key)), "{key}= should be yes");
    }
    assert_eq!(single(&unit, "SystemCallArchitectures"), "native");

    // Devices: closed policy with an allow-list; PrivateDevices would hide the drives.
    assert_eq!(single(&unit, "DevicePolicy"), "closed");
    for v in service(&unit, "PrivateDevices") {
        assert!(
            !is_true(v),
            "PrivateDevices={v} hides the drives from the daemon"
        );
    }
    let allowed = service(&unit, "DeviceAllow");
    let mut classes = BTreeSet::new();
    for entry in allowed {
        let (class, rights) = entry
            .split_once(' ')
            .unwrap_or_else(|| panic!("DeviceAllow={entry}: give the rights (r)"));
        assert!(
            KNOWN_CLASSES.contains(&class),
            "DeviceAllow={entry}: {class} is not a known driver class (see /proc/devices)"
        );
        // Raw-device writes are the operator's decision, per drive class, in a drop-in.
        assert_eq!(
            rights.trim(),
            "r",
            "DeviceAllow={entry}: the shipped unit only reads"
        );
        classes.insert(class);
    }
    for needed in ["block-blkext", "char-nvme", "block-sd"] {
        assert!(classes.contains(needed), "DeviceAllow= lacks {needed}");
    }

    // Exactly the two capabilities, in the bounding set and (for a User= drop-in) ambient.
    let two: BTreeSet<String> = ["CAP_SYS_ADMIN", "CAP_SYS_RAWIO"].map(String::from).into();
    let bounding: BTreeSet<String> = words(&unit, "CapabilityBoundingSet").into_iter().collect();
    assert_eq!(bounding, two, "CapabilityBoundingSet=");
    let ambient: BTreeSet<String> = words(&unit, "AmbientCapabilities").into_iter().collect();
    assert!(ambient.is_subset(&two), "AmbientCapabilities={ambient:?}");

    // Sockets: HTTP and sd_notify only.
    let families: BTreeSet<String> = words(&unit, "RestrictAddressFamilies")
        .into_iter()
        .collect();
    assert_eq!(
        families,
        ["AF_UNIX", "AF_INET", "AF_INET6"].map(String::from).into()
    );

    // System calls: the service set, with io_uring and ioctl named.
    let calls = words(&unit, "SystemCallFilter");
    for needed in [
        "@system-service",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "ioctl",
    ] {
        assert!(
            calls.iter().any(|c| c == needed),
            "SystemCallFilter= lacks {needed}: {calls:?}"
        );
    }
    // A deny-list entry must not take back what the engine needs.
    for c in calls.iter().filter(|c| c.starts_with('~')) {
        assert!(
            !["~@aio", "~ioctl", "~@system-service"].contains(&c.as_str()),
            "SystemCallFilter={c} denies what the daemon needs"
        );
    }
}

#[test]
fn the_binary_accepts_the_units_command_lines() {
    // ExecStart= and ExecReload= name subcommands and options of this binary; a renamed
    // option would only show when the service fails to start.
    let bin = env!("CARGO_BIN_EXE_driveprobe");
    let help = Command::new(bin)
        .args(["daemon", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.status.success() && text.contains("--config"),
        "`driveprobe daemon --help` should succeed and list --config ({}):\n{text}{}",
        help.status,
        String::from_utf8_lossy(&help.stderr)
    );
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/driveprobe.example.toml");
    let check = Command::new(bin)
        .arg("check-config")
        .arg(&example)
        .output()
        .unwrap();
    common::assert_ok(
        &check,
        "ExecReload= runs `driveprobe check-config FILE`; on the example config it",
    );
}
