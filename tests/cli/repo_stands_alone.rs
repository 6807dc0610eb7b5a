//! The repository stands alone: no file in it cites a file outside it (the protocol and
//! design notes it grew from live elsewhere; what the project needs of them is in docs/,
//! in its own words), and its LICENSE is the licence Cargo.toml declares.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository's files: tracked, plus new ones not ignored (so a file cannot slip in by
/// being added after the test ran).
fn repo_files() -> Vec<PathBuf> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .expect("git runs (the tests run in a checkout)");
    assert!(
        out.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<PathBuf> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .filter(|p| root().join(p).is_file())
        .collect();
    assert!(
        files.iter().any(|p| p == Path::new("Cargo.toml")),
        "git ls-files did not list the repository"
    );
    files
}

/// What names a file outside the repository. Built from parts, so this file does not
/// match itself.
fn outside_refs() -> Vec<String> {
    vec![
        format!("../{}", "shared"),
        format!("/work/{}", "shared"),
        format!("{}/fixtures", "shared"),
        format!("{}.md", "PROTOCOL"),
        format!("{}.md", "DESIGN"),
    ]
}

/// Every (file, line, reference) that cites outside the repository.
fn offenders(files: &[PathBuf], refs: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    for f in files {
        let Ok(bytes) = std::fs::read(root().join(f)) else {
            continue;
        };
        // Binary files (NVMe captures) hold no citations.
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for r in refs {
                if line.contains(r.as_str()) {
                    bad.push(format!(
                        "{}:{}: cites {r}: {}",
                        f.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn no_file_cites_files_outside_the_repository() {
    let files = repo_files();
    let bad = offenders(&files, &outside_refs());
    assert!(
        bad.is_empty(),
        "files that cite files outside the repository (put what is needed in docs/):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_finds_a_citation() {
    // The scan itself, on a file that does cite outside: it must be found.
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("cites.md");
    std::fs::write(&name, format!("ok\nsee {}.md section 1\n", "PROTOCOL")).unwrap();
    let bad = offenders(std::slice::from_ref(&name), &outside_refs());
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains(":2: cites"), "{bad:?}");
}

#[test]
fn protocol_is_documented_in_the_repository() {
    let doc = std::fs::read_to_string(root().join("docs/protocol.md")).unwrap();
    for topic in [
        "## Phases",
        "## The steady-state rule",
        "## Scales",
        "burst",
        "2T2Q",
    ] {
        assert!(doc.contains(topic), "docs/protocol.md lacks {topic:?}");
    }
}

#[test]
fn license_file_matches_cargo_toml() {
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let license = cargo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "license").then(|| v.trim().trim_matches('"').to_string())
        })
        .expect("Cargo.toml declares a licence");
    let text = std::fs::read_to_string(root().join("LICENSE"))
        .expect("a LICENSE file at the repository's root");
    // The full text of each licence this test knows: its title and its last heading.
    let marks: &[&str] = match license.as_str() {
        "Apache-2.0" => &[
            "Apache License",
            "Version 2.0, January 2004",
            "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
            "END OF TERMS AND CONDITIONS",
        ],
        other => panic!("Cargo.toml's licence {other} is not one this test knows: add its marks"),
    };
    for m in marks {
        assert!(
            text.contains(m),
            "LICENSE is not the full {license} text: no {m:?}"
        );
    }
}
