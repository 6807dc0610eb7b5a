//! RELIABILITY.md cannot go stale: every row of its tables names a test that exists (a
//! `#[test]` function in the named file), its "how often" figure is the constant the test
//! really uses, every test of the fault and attack files has a row, an ignored test is
//! said to be ignored (and why), and the document ends with the data-loss line.
//!
//! The rows say "pass" because CI runs every one of these tests and fails when one fails:
//! the document and the suite are checked together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The test files whose every test is a fault, attack or safety proof, and must be in
/// the document.
const COVERED: &[&str] = &[
    "tests/daemon/reliability.rs",
    "tests/daemon/state_attacks.rs",
    "tests/safety/safety_loop.rs",
    "tests/safety/safety_matrix.rs",
    "tests/vm/faults.rs",
    "tests/daemon/http_security.rs",
    "tests/daemon/http_load.rs",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug)]
struct TestFn {
    ignored: bool,
}

/// The `#[test]` functions of a file, by name, and whether they are `#[ignore]`d.
fn tests_in(src: &str) -> BTreeMap<String, TestFn> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = src.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "#[test]" {
            continue;
        }
        let mut ignored = false;
        for next in &lines[i + 1..] {
            let t = next.trim();
            if t.starts_with("#[ignore") {
                ignored = true;
            } else if let Some(rest) = t.strip_prefix("fn ") {
                let name = rest.split(['(', '<']).next().unwrap_or("").to_string();
                out.insert(name, TestFn { ignored });
                break;
            } else if !(t.starts_with("#[") || t.starts_with("//")) {
                break;
            }
        }
    }
    out
}

/// `const NAME: TYPE = VALUE;` anywhere in the file.
fn constant(src: &str, name: &str) -> Option<String> {
    let prefix = format!("const {name}:");
    src.lines().find_map(|l| {
        let t = l.trim().trim_start_matches("pub ");
        let rest = t.strip_prefix(&prefix)?;
        let value = rest.split('=').nth(1)?.trim().trim_end_matches(';').trim();
        Some(value.replace('_', ""))
    })
}

struct Row {
    line: usize,
    cells: Vec<String>,
}

/// The table rows (not header or separator) of the document.
fn rows(doc: &str) -> Vec<Row> {
    let mut out = Vec::new();
    let mut in_table = false;
    for (i, l) in doc.lines().enumerate() {
        let t = l.trim();
        if !t.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<String> = t
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        if !in_table {
            in_table = true; // the header row
            continue;
        }
        if cells.iter().all(|c| c.chars().all(|ch| "-: ".contains(ch))) {
            continue;
        }
        out.push(Row { line: i + 1, cells });
    }
    out
}

/// The code spans of a cell: `` `a` and `b` `` gives ["a", "b"].
fn spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

#[test]
fn reliability_md_names_real_tests_with_their_real_counts() {
    let doc_path = root().join("RELIABILITY.md");
    let doc = std::fs::read_to_string(&doc_path).expect("RELIABILITY.md at the repo root");
    let header = doc
        .lines()
        .find(|l| l.trim_start().starts_with("| fault"))
        .expect("a table whose header starts with '| fault'");
    let columns: Vec<&str> = header
        .trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    assert_eq!(
        columns,
        ["fault or attack", "how often", "asserted", "test", "result"],
        "the columns of RELIABILITY.md's tables"
    );

    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    let mut listed: BTreeSet<(String, String)> = BTreeSet::new();
    let mut problems = Vec::new();
    for row in rows(&doc) {
        let at = format!("RELIABILITY.md:{}", row.line);
        if row.cells.len() != columns.len() {
            problems.push(format!(
                "{at}: {} cells, expected {}",
                row.cells.len(),
                columns.len()
            ));
            continue;
        }
        let (often, test, result) = (&row.cells[1], &row.cells[3], &row.cells[4]);
        let names = spans(test);
        let [file, func] = names.as_slice() else {
            problems.push(format!(
                "{at}: the test cell must be `tests/FILE.rs` `function`"
            ));
            continue;
        };
        let src = sources
            .entry(file.clone())
            .or_insert_with(|| std::fs::read_to_string(root().join(file)).unwrap_or_default());
        if src.is_empty() {
            problems.push(format!("{at}: no such test file {file}"));
            continue;
        }
        let tests = tests_in(src);
        let Some(t) = tests.get(func.as_str()) else {
            problems.push(format!("{at}: {file} has no #[test] fn {func}"));
            continue;
        };
        listed.insert((file.clone(), func.clone()));
        // "how often": a number, with the constant that sets it in backticks if any.
        let number: String = often
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(|c| *c != ',')
            .collect();
        if number.is_empty() {
            problems.push(format!(
                "{at}: 'how often' must start with a number: {often:?}"
            ));
        }
        for c in spans(often) {
            match constant(src, &c) {
                Some(v) if v == number => {}
                Some(v) => problems.push(format!(
                    "{at}: says {number} for {c}, but {file} has {c} = {v}"
                )),
                None => problems.push(format!("{at}: {file} has no const {c}")),
            }
        }
        if t.ignored {
            if !result.starts_with("ignored") {
                problems.push(format!("{at}: {func} is #[ignore]d: say 'ignored: why'"));
            }
        } else if result != "pass" {
            problems.push(format!("{at}: {func} runs in CI: its result is 'pass'"));
        }
    }
    for file in COVERED {
        let Ok(src) = std::fs::read_to_string(root().join(file)) else {
            continue;
        };
        for name in tests_in(&src).keys() {
            if !listed.contains(&(file.to_string(), name.clone())) {
                problems.push(format!("{file}: test {name} has no row in RELIABILITY.md"));
            }
        }
    }
    assert!(
        doc.trim_end().ends_with("**data lost: 0**"),
        "RELIABILITY.md ends with the line '**data lost: 0**'"
    );
    assert!(
        problems.is_empty(),
        "RELIABILITY.md is out of step with the tests:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_reads_tests_and_constants() {
    let src =
        "const KILLS: usize = 2_0;\n#[test]\n#[ignore = \"x\"]\nfn a() {}\n#[test]\nfn b<T>() {}\n";
    let t = tests_in(src);
    assert!(t["a"].ignored);
    assert!(!t["b"].ignored);
    assert_eq!(constant(src, "KILLS").as_deref(), Some("20"));
    assert_eq!(spans("`x.rs` `f`"), ["x.rs", "f"]);
    let doc = "| fault | b |\n|---|---|\n| 1 | 2 |\n\ntext\n| h |\n|--|\n| 3 |\n";
    let r = rows(doc);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].cells, ["1", "2"]);
    assert_eq!(r[1].line, 8);
}
