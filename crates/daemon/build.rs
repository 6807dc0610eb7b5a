//! Build facts for `driveprobe_build_info` and `driveprobe --version`: the git revision
//! (short hash, `-dirty` when tracked files differ from HEAD; `unknown` without git or
//! outside a repository, as in a build from a tarball) and the compiler's version.
//!
//! Cargo runs this again when HEAD moves (a commit, a checkout), when the index changes
//! and when a source file changes (which may make the tree dirty).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    // This crate sits two folders below the workspace's root, where the repository is.
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()))
        .join("../..");
    println!("cargo:rerun-if-changed=build.rs");
    for p in ["src", "crates", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed=../../{p}");
    }
    println!("cargo:rerun-if-env-changed=DRIVEPROBE_REVISION");
    let revision = match std::env::var("DRIVEPROBE_REVISION") {
        // A packager building outside git (a tarball) may name the revision.
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ => git_revision(&dir).unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=DRIVEPROBE_REVISION={revision}");
    println!(
        "cargo:rustc-env=DRIVEPROBE_RUSTC_VERSION={}",
        rustc_version()
    );
}

/// The output of `git ARGS` in `dir`, trimmed; None when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    // `--no-optional-locks`: `git status` must not refresh the index, whose change would
    // make Cargo run this again on the next build.
    let out = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn git_revision(dir: &Path) -> Option<String> {
    // Only this package's own repository: a tarball unpacked inside some other
    // repository's tree is not that repository's revision.
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), dir) {
        return None;
    }
    let hash = git(dir, &["rev-parse", "--short", "HEAD"])?;
    if hash.is_empty() {
        return None;
    }
    // Rerun when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit),
    // packed refs, and the index (staging, and git's refreshed view of the tree).
    for (args, name) in [
        (&["rev-parse", "--git-path", "HEAD"][..], None),
        (&["rev-parse", "--git-path", "index"][..], None),
        (&["rev-parse", "--git-path", "packed-refs"][..], None),
        (&["symbolic-ref", "-q", "HEAD"][..], Some(())),
    ] {
        let Some(p) = git(dir, args) else { continue };
        let p = if name.is_some() {
            // refs/heads/BRANCH, as a path in the (common) git directory.
            match git(dir, &["rev-parse", "--git-path", &p]) {
                Some(p) => p,
                None => continue,
            }
        } else {
            p
        };
        let p = dir.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"])
        .map(|s| !s.is_empty())
        .unwrap_or(false);
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// `1.95.0` from `rustc 1.95.0 (59807616e 2026-04-14)`; `unknown` when rustc cannot say.
fn rustc_version() -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".to_string())
}
