//! The Debian package (`scripts/package`, docs/packaging.md), built once per run from the
//! binary cargo built for these tests (`--binary`, no second release build): lintian
//! finds no error and no warning docs/packaging.md does not explain; the control fields,
//! conffiles and file list are what the package promises; the man pages render without a
//! warning and cover every subcommand and every config key; the completions parse and
//! complete; the shipped config passes `check-config`; and the package installs,
//! upgrades, removes and purges as promised, into a private root (`dpkg --root`, the
//! maintainer scripts run with DPKG_ROOT set), never touching this host's system.
//!
//! Every test name contains `package`: `scripts/test package` runs them. They need
//! dpkg-dev, binutils, lintian, man-db, zsh and fish, which `scripts/test` installs; they
//! fail (they do not skip) when one is missing.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clap::CommandFactory;

const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What `scripts/package` made: the .deb, and its staging tree (the package's files).
struct Built {
    deb: PathBuf,
    stage: PathBuf,
}

/// Builds the package once for all the tests of this file, from this build's binary,
/// into the target's temporary directory.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package");
        let _ = std::fs::remove_dir_all(&out);
        let deb = package_into(&out, &[]);
        let stage = deb.with_extension("");
        assert!(stage.is_dir(), "no staging tree at {}", stage.display());
        Built { deb, stage }
    })
}

/// Runs scripts/package on this build's binary into `out` (with `env` set) and returns
/// the .deb it names on its last line.
fn package_into(out: &Path, env: &[(&str, &str)]) -> PathBuf {
    let mut cmd = Command::new(root().join("scripts/package"));
    cmd.arg("--binary").arg(BIN).arg("--out").arg(out);
    // gzip: a few seconds where xz takes a minute on a loaded 2-core machine; what is
    // checked is inside the archive, and lintian reads both.
    cmd.env("DEB_COMPRESSION", "gzip");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let result = cmd.output().expect("cannot run scripts/package");
    common::assert_ok(&result, "scripts/package --binary");
    let stdout = String::from_utf8_lossy(&result.stdout);
    let deb = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        deb.is_file() && deb.extension().is_some_and(|e| e == "deb"),
        "scripts/package named no .deb: {stdout}"
    );
    deb
}

fn tool(cmd: &str, package: &str) -> Command {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{cmd} is not installed: run scripts/test (it installs the {package} package)"
    );
    Command::new(cmd)
}

fn output(mut cmd: Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    common::assert_ok(&out, what);
    out
}

fn stdout(cmd: Command, what: &str) -> String {
    String::from_utf8_lossy(&output(cmd, what).stdout).into_owned()
}

fn field(deb: &Path, name: &str) -> String {
    let mut cmd = tool("dpkg-deb", "dpkg");
    cmd.arg("-f").arg(deb).arg(name);
    stdout(cmd, &format!("dpkg-deb -f {name}"))
        .trim()
        .to_string()
}

/// The package's paths as `dpkg-deb -c` lists them (`/usr/bin/driveprobe`; directories
/// end in `/`), with their modes.
fn contents(deb: &Path) -> Vec<(String, String)> {
    let mut cmd = tool("dpkg-deb", "dpkg");
    cmd.arg("-c").arg(deb);
    stdout(cmd, "dpkg-deb -c")
        .lines()
        .map(|l| {
            let mode = l.split_whitespace().next().unwrap_or_default().to_string();
            let path = l.split_whitespace().nth(5).unwrap_or_default();
            (path.trim_start_matches('.').to_string(), mode)
        })
        .collect()
}

/// The subcommands users see, each of which gets a man page.
fn subcommands() -> Vec<String> {
    driveprobe::cli::Cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect()
}

fn gunzip(path: &Path) -> String {
    let mut cmd = tool("gzip", "gzip");
    cmd.arg("-dc").arg(path);
    stdout(cmd, &format!("gzip -dc {}", path.display()))
}

#[test]
fn package_builds_lintian_clean() {
    let b = built();
    let mut cmd = tool("lintian", "lintian");
    // Pedantic and informational tags shown too; overrides shown (as O:) to be checked.
    cmd.args(["--pedantic", "--display-info", "--show-overrides"])
        .args(["--tag-display-limit", "0"])
        .arg(&b.deb);
    let out = cmd.output().expect("cannot run lintian");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let doc = std::fs::read_to_string(root().join("docs/packaging.md")).unwrap();
    let mut errors = Vec::new();
    let mut unexplained = Vec::new();
    for line in text.lines() {
        let Some((kind, rest)) = line.split_once(": ") else {
            continue;
        };
        let tag = rest
            .strip_prefix("driveprobe: ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or(rest);
        match kind {
            "E" => errors.push(line.to_string()),
            // A kept warning, or an overridden tag, must be explained in the docs.
            "W" | "O" if !doc.contains(&format!("`{tag}`")) => unexplained.push(line.to_string()),
            _ => {}
        }
    }
    assert!(
        errors.is_empty(),
        "lintian errors:\n{}\n{text}",
        errors.join("\n")
    );
    assert!(
        unexplained.is_empty(),
        "lintian tags docs/packaging.md does not list with a reason (as `tag`):\n{}",
        unexplained.join("\n")
    );
    // lintian's own failure (status 1: it could not read the package) is not a clean
    // result. Status 2 is its --fail-on (error) condition, which an overridden error
    // shown by --show-overrides also meets: the E: lines above are the real errors.
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "lintian: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn package_control_fields_are_computed_and_complete() {
    let b = built();
    assert_eq!(field(&b.deb, "Package"), "driveprobe");
    let version = field(&b.deb, "Version");
    assert!(
        version.starts_with(&format!("{}-", env!("CARGO_PKG_VERSION"))),
        "Version {version} is not Cargo.toml's {} with a Debian revision",
        env!("CARGO_PKG_VERSION")
    );
    let name = b.deb.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        name,
        format!("driveprobe_{version}_{}.deb", field(&b.deb, "Architecture"))
    );
    assert_eq!(
        field(&b.deb, "Recommends"),
        "smartmontools, nvme-cli",
        "Recommends"
    );
    assert_eq!(
        field(&b.deb, "Suggests"),
        "fio, sysbench, mariadb-server, rocksdb-tools, prometheus",
        "Suggests"
    );

    // Depends is computed: one versioned dependency per package owning a library the
    // binary is linked against (its ELF NEEDED entries), and nothing else but procps
    // (/bin/kill, which the unit's ExecReload= runs: tests/vm/systemd.rs).
    let all_depends = field(&b.deb, "Depends");
    assert!(
        all_depends.ends_with(", procps"),
        "Depends lacks procps (the unit's /bin/kill): {all_depends}"
    );
    let depends = all_depends.trim_end_matches(", procps").to_string();
    let named: BTreeSet<String> = depends
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap_or_default().to_string())
        .collect();
    for d in depends.split(',') {
        assert!(
            d.contains("(>= "),
            "{d}: dpkg-shlibdeps gives a minimum version"
        );
    }
    let mut readelf = tool("readelf", "binutils");
    readelf.arg("-d").arg(b.stage.join("usr/bin/driveprobe"));
    let dynamic = stdout(readelf, "readelf -d");
    let mut owners = BTreeSet::new();
    for lib in dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
    {
        let mut s = tool("dpkg", "dpkg");
        s.arg("-S").arg(format!("*/{lib}"));
        let who = stdout(s, &format!("dpkg -S {lib}"));
        let pkgs: BTreeSet<String> = who
            .lines()
            .filter_map(|l| l.split(':').next())
            .flat_map(|p| p.split(", ").map(str::to_string))
            .collect();
        assert!(
            pkgs.iter().any(|p| named.contains(p)),
            "{lib} (from {pkgs:?}) has no dependency in Depends: {depends}"
        );
        owners.extend(pkgs);
    }
    assert!(!owners.is_empty(), "the binary links no library? {dynamic}");
    for n in &named {
        assert!(
            owners.contains(n),
            "Depends names {n}, which owns none of the libraries the binary links: {depends}"
        );
    }

    // The packaged (stripped) binary is this build: same version and git revision.
    let mut packaged = Command::new(b.stage.join("usr/bin/driveprobe"));
    packaged.arg("--version");
    let mut this = Command::new(BIN);
    this.arg("--version");
    let packaged = stdout(packaged, "packaged driveprobe --version");
    assert_eq!(packaged, stdout(this, "driveprobe --version"));
    assert!(packaged.contains("(revision "), "{packaged}");
}

#[test]
fn package_conffiles_are_exactly_its_etc_files() {
    let b = built();
    let conffiles: BTreeSet<String> = std::fs::read_to_string(b.stage.join("DEBIAN/conffiles"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let etc: BTreeSet<String> = contents(&b.deb)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with("/etc/") && !p.ends_with('/'))
        .collect();
    assert_eq!(
        conffiles, etc,
        "every file under /etc is a conffile, and only those"
    );
    assert_eq!(
        conffiles,
        ["/etc/default/driveprobe", "/etc/driveprobe/driveprobe.toml"]
            .map(String::from)
            .into()
    );
}

#[test]
fn package_file_list_has_everything_and_one_unit() {
    let b = built();
    let list = contents(&b.deb);
    let mode = |path: &str| {
        list.iter()
            .find(|(p, _)| p == path)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("the package has no {path}:\n{list:#?}"))
    };
    assert_eq!(mode("/usr/bin/driveprobe"), "-rwxr-xr-x");
    for f in [
        "/usr/lib/systemd/system/driveprobe.service",
        "/etc/driveprobe/driveprobe.toml",
        "/etc/default/driveprobe",
        "/usr/share/doc/driveprobe/copyright",
        "/usr/share/doc/driveprobe/changelog.Debian.gz",
        "/usr/share/doc/driveprobe/examples/driveprobe.example.toml",
        "/usr/share/man/man1/driveprobe.1.gz",
        "/usr/share/man/man5/driveprobe.toml.5.gz",
        "/usr/share/bash-completion/completions/driveprobe",
        "/usr/share/zsh/vendor-completions/_driveprobe",
        "/usr/share/fish/vendor_completions.d/driveprobe.fish",
    ] {
        assert_eq!(mode(f), "-rw-r--r--", "{f}");
    }
    // A page per subcommand, and no page for one that does not exist.
    let subs = subcommands();
    assert!(subs.iter().any(|s| s == "daemon"), "{subs:?}");
    for s in &subs {
        mode(&format!("/usr/share/man/man1/driveprobe-{s}.1.gz"));
    }
    for (p, _) in &list {
        if let Some(page) = p
            .strip_prefix("/usr/share/man/man1/driveprobe-")
            .and_then(|p| p.strip_suffix(".1.gz"))
        {
            assert!(
                subs.iter().any(|s| s == page),
                "a man page for no subcommand: {p}"
            );
        }
    }
    // Only these trees; the state directory is systemd's (StateDirectory=), not a file.
    for (p, _) in &list {
        assert!(
            ["/", "/etc/", "/usr/"].contains(&p.as_str())
                || p.starts_with("/etc/driveprobe")
                || p.starts_with("/etc/default")
                || p.starts_with("/usr/bin")
                || p.starts_with("/usr/lib/")
                || p.starts_with("/usr/share/"),
            "unexpected path in the package: {p}"
        );
        assert!(
            !p.starts_with("/var"),
            "{p}: /var/lib/driveprobe is made by systemd"
        );
    }
    // The unit's Documentation= pages are in the package.
    let unit = std::fs::read_to_string(root().join("systemd/driveprobe.service")).unwrap();
    let docs: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Documentation="))
        .flat_map(str::split_whitespace)
        .collect();
    assert!(!docs.is_empty(), "the unit names no Documentation=");
    for d in docs {
        let Some(page) = d.strip_prefix("man:") else {
            continue;
        };
        let (name, section) = page.trim_end_matches(')').split_once('(').unwrap();
        mode(&format!("/usr/share/man/man{section}/{name}.{section}.gz"));
    }
    // One unit: the package ships the repository's, byte for byte.
    assert_eq!(
        std::fs::read(b.stage.join("usr/lib/systemd/system/driveprobe.service")).unwrap(),
        std::fs::read(root().join("systemd/driveprobe.service")).unwrap(),
        "the packaged unit is not systemd/driveprobe.service"
    );
}

/// `man --warnings=w` (every groff warning) on one page: its stderr, empty when groff
/// had nothing to say.
fn man_warnings(page: &Path) -> String {
    let mut cmd = tool("man", "man-db");
    cmd.args(["--warnings=w", "-E", "UTF-8", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .env("LC_ALL", "C.UTF-8")
        .env_remove("MANPAGER")
        .env_remove("PAGER");
    let out = cmd.output().expect("cannot run man");
    assert!(
        out.status.success(),
        "man -l {}: {}",
        page.display(),
        out.status
    );
    assert!(
        !out.stdout.is_empty(),
        "man -l {} printed nothing",
        page.display()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn package_man_pages_render_without_warnings() {
    let b = built();
    let mut pages = Vec::new();
    for section in ["man1", "man5"] {
        for e in std::fs::read_dir(b.stage.join("usr/share/man").join(section)).unwrap() {
            pages.push(e.unwrap().path());
        }
    }
    assert!(pages.len() >= subcommands().len() + 2, "{pages:?}");
    for page in &pages {
        let warnings = man_warnings(page);
        assert!(warnings.is_empty(), "{}:\n{warnings}", page.display());
    }
    // The check can fail: a page with a roff mistake gets a warning.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.1");
    std::fs::write(
        &bad,
        ".TH BAD 1\n.SH NAME\nbad \\- x\n.SH DESCRIPTION\n.XX oops\n",
    )
    .unwrap();
    assert!(
        !man_warnings(&bad).is_empty(),
        "man --warnings does not report a bad escape"
    );
}

#[test]
fn package_config_page_names_every_config_key() {
    let b = built();
    let page = gunzip(&b.stage.join("usr/share/man/man5/driveprobe.toml.5.gz"));
    let mut missing = Vec::new();
    for key in driveprobe::config::raw::KEYS {
        // An entry `\fBkey\fR = value`, or a table heading `[key...]` / `[[key]]`.
        if !(page.contains(&format!("\\fB{key}\\fR"))
            || page.contains(&format!("[{key}]"))
            || page.contains(&format!("[{key}.")))
        {
            missing.push(*key);
        }
    }
    assert!(
        missing.is_empty(),
        "driveprobe.toml(5) does not name {missing:?}"
    );
    // Each key's text comes from the example: one sample sentence per kind of entry.
    assert!(page.contains("Default: \"60s\""), "{page}");
    assert!(page.contains("SEE ALSO"), "{page}");
    // And driveprobe-daemon(1) points at it.
    let daemon = gunzip(&b.stage.join("usr/share/man/man1/driveprobe-daemon.1.gz"));
    assert!(daemon.contains("\\fBdriveprobe.toml\\fR(5)"), "{daemon}");
    assert!(daemon.contains("/etc/default/driveprobe"), "{daemon}");
}

#[test]
fn package_completions_parse_and_complete() {
    let b = built();
    let share = b.stage.join("usr/share");
    let bash = share.join("bash-completion/completions/driveprobe");
    let mut cmd = tool("bash", "bash");
    cmd.arg("-n").arg(&bash);
    output(cmd, "bash -n");
    let mut cmd = tool("zsh", "zsh");
    cmd.arg("-n")
        .arg(share.join("zsh/vendor-completions/_driveprobe"));
    output(cmd, "zsh -n");
    let mut cmd = tool("fish", "fish");
    cmd.arg("--no-execute")
        .arg(share.join("fish/vendor_completions.d/driveprobe.fish"));
    output(cmd, "fish --no-execute");

    // Bash completes a subcommand and a daemon option from the file as installed.
    let script = format!(
        r#"source {}
complete -p driveprobe | grep -q . || exit 3
fn=$(complete -p driveprobe | sed -n 's/.*-F \([^ ]*\).*/\1/p')
COMP_WORDS=(driveprobe check-); COMP_CWORD=1; COMP_LINE="driveprobe check-"; COMP_POINT=${{#COMP_LINE}}
"$fn" driveprobe check- driveprobe; printf '%s\n' "${{COMPREPLY[@]}}"
COMP_WORDS=(driveprobe daemon --con); COMP_CWORD=2; COMP_LINE="driveprobe daemon --con"; COMP_POINT=${{#COMP_LINE}}
"$fn" driveprobe --con daemon; printf '%s\n' "${{COMPREPLY[@]}}""#,
        bash.display()
    );
    let mut cmd = tool("bash", "bash");
    cmd.arg("-c").arg(script);
    let words = stdout(cmd, "bash completion");
    let words: Vec<&str> = words.lines().map(str::trim).collect();
    assert!(words.contains(&"check-config"), "{words:?}");
    assert!(words.contains(&"--config"), "{words:?}");
    assert!(
        !words.contains(&"generate"),
        "the hidden subcommand is offered: {words:?}"
    );
}

#[test]
fn package_config_file_is_the_commented_default_and_passes_check_config() {
    let b = built();
    let conf = b.stage.join("etc/driveprobe/driveprobe.toml");
    let mut check = Command::new(BIN);
    check.arg("check-config").arg(&conf);
    output(check, "driveprobe check-config on the packaged config");
    // Every line a comment: what runs is the defaults (discovery on), and an upgrade
    // that changes a default is not hidden behind a copied value.
    let text = std::fs::read_to_string(&conf).unwrap();
    for (no, line) in text.lines().enumerate() {
        assert!(
            line.trim().is_empty() || line.trim_start().starts_with('#'),
            "{}:{}: not a comment: {line}",
            conf.display(),
            no + 1
        );
    }
    // Uncommented, its sample settings are a valid config too (the [[drive]] aside:
    // its serial is an example's).
    let uncommented: String = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let uncommented = uncommented.split("[[drive]]").next().unwrap().to_string();
    assert!(uncommented.contains("[discovery]"), "{uncommented}");
    let dir = tempfile::tempdir().unwrap();
    let sample = dir.path().join("sample.toml");
    std::fs::write(&sample, &uncommented).unwrap();
    let mut check = Command::new(BIN);
    check.arg("check-config").arg(&sample);
    output(
        check,
        &format!("check-config on the uncommented sample:\n{uncommented}"),
    );

    // /etc/default/driveprobe sets the variable the unit passes on.
    let default = std::fs::read_to_string(b.stage.join("etc/default/driveprobe")).unwrap();
    assert!(
        default.lines().any(|l| l.starts_with("DRIVEPROBE_ARGS=")),
        "{default}"
    );
    let unit = std::fs::read_to_string(root().join("systemd/driveprobe.service")).unwrap();
    assert!(unit.contains("EnvironmentFile=-/etc/default/driveprobe"));
    assert!(unit.lines().any(
        |l| l.starts_with("ExecStart=/usr/bin/driveprobe ") && l.ends_with(" $DRIVEPROBE_ARGS")
    ));
}

/// `dpkg --root ROOT` with the maintainer scripts run outside a chroot (DPKG_ROOT=ROOT):
/// the host's package database and services are not involved.
fn dpkg_in(root_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = tool("dpkg", "dpkg");
    cmd.arg(format!("--root={}", root_dir.display()))
        .arg("--force-script-chrootless")
        // The root has no libc6 package: the dependencies are the host's business here.
        .arg("--force-depends")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive");
    output(cmd, &format!("dpkg --root {args:?}"))
}

fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = format!("/{}", p.strip_prefix(dir).unwrap().display());
            if rel.starts_with("/var/lib/dpkg") {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.insert(rel);
            }
        }
    }
    out
}

#[test]
fn package_installs_upgrades_removes_and_purges_in_a_private_root() {
    common::need_root();
    let b = built();
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::write(r.join("var/lib/dpkg/status"), "").unwrap();

    // Install: the files, and the unit enabled (the link deb-systemd-helper makes).
    dpkg_in(r, &["-i", b.deb.to_str().unwrap()]);
    let wants = r.join("etc/systemd/system/multi-user.target.wants/driveprobe.service");
    assert_eq!(
        std::fs::read_link(&wants).unwrap_or_else(|e| panic!("{}: {e}", wants.display())),
        Path::new("/usr/lib/systemd/system/driveprobe.service")
    );
    assert!(r.join("usr/bin/driveprobe").is_file());

    // Upgrade to a newer version: an edited conffile is kept, the binary replaced.
    let conf = r.join("etc/driveprobe/driveprobe.toml");
    let mut edited = std::fs::read_to_string(&conf).unwrap();
    edited.push_str("health_interval = \"1m\"\n");
    std::fs::write(&conf, &edited).unwrap();
    let newer = format!("{}-99", env!("CARGO_PKG_VERSION"));
    let out2 = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package-upgrade");
    let _ = std::fs::remove_dir_all(&out2);
    let deb2 = package_into(&out2, &[("DEB_VERSION", &newer)]);
    dpkg_in(r, &["-i", "--force-confold", deb2.to_str().unwrap()]);
    let mut status = tool("dpkg-query", "dpkg");
    status.arg(format!("--root={}", r.display())).args([
        "-W",
        "-f",
        "${Version} ${Status}",
        "driveprobe",
    ]);
    assert_eq!(
        stdout(status, "dpkg-query"),
        format!("{newer} install ok installed")
    );
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), edited);
    assert!(wants.is_symlink(), "the upgrade dropped the enablement");
    let changelog = gunzip(&r.join("usr/share/doc/driveprobe/changelog.Debian.gz"));
    assert!(
        changelog.starts_with(&format!("driveprobe ({newer})")),
        "{changelog}"
    );

    // Remove: the program goes; the config and the state stay for a reinstall.
    let state = r.join("var/lib/driveprobe/runs");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("1.json"), "{}").unwrap();
    dpkg_in(r, &["-r", "driveprobe"]);
    let left = files_under(r);
    assert!(!left.contains("/usr/bin/driveprobe"), "{left:?}");
    assert!(!left.contains("/usr/lib/systemd/system/driveprobe.service"));
    assert!(left.contains("/etc/driveprobe/driveprobe.toml"), "{left:?}");
    assert!(left.contains("/var/lib/driveprobe/runs/1.json"), "{left:?}");

    // Purge: nothing of it is left, state and enablement included.
    dpkg_in(r, &["-P", "driveprobe"]);
    let left = files_under(r);
    assert!(left.is_empty(), "left after purge: {left:?}");
    assert!(!r.join("var/lib/driveprobe").exists());
}
