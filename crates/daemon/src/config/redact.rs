//! Parser errors told without what the file wrote.
//!
//! serde's messages quote their input: `invalid type: string "...", expected a boolean`,
//! `unknown field `...``. When a config file is not what it should be (the web config
//! swapped for a symlink to `/etc/shadow`, a plain-text password where a bcrypt hash
//! belongs, someone else's TOML file), that quote is a secret in the log, on the status
//! page and in `check-config`'s output. [`Problem`] keeps the kind of problem only, in
//! words of this module, and key names only when they are in the caller's list of known
//! keys (a key name the file gives is the file's content too). The place is the caller's:
//! a line and column.

/// What a parser said was wrong, with nothing the file wrote in it: only this module's
/// words and names from the caller's list of known keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A key this table does not take; `near`: a known key of the table it is close to.
    #[error("unknown key{}", near.map(|k| format!(" (is `{k}` meant?)")).unwrap_or_default())]
    UnknownKey { near: Option<&'static str> },
    /// A known key, in a table that does not take it.
    #[error("the key `{0}` does not belong in this table")]
    MisplacedKey(&'static str),
    #[error("missing key `{0}`")]
    Missing(&'static str),
    #[error("a key is missing here")]
    MissingUnnamed,
    #[error("invalid type: {found}{}", expected.map(|e| format!(", expected {e}")).unwrap_or_default())]
    WrongType {
        found: &'static str,
        expected: Option<&'static str>,
    },
    #[error("invalid value{} (the value is not repeated here)", expected.map(|e| format!(", expected {e}")).unwrap_or_default())]
    BadValue { expected: Option<&'static str> },
    #[error("a value that is not one of the names this key takes")]
    UnknownVariant,
    #[error("a list or table of the wrong length")]
    WrongLength,
    #[error("a key given twice")]
    Duplicate,
    /// A syntax error, in the parser's own fixed words.
    #[error("{0}")]
    Syntax(&'static str),
    #[error("not readable here (the parser's message quotes the file, so it is not repeated)")]
    Other,
}

/// `message` as a [`Problem`] when it is one of serde's data-model messages, which quote
/// the input; `None` for anything else. `known`: every key name the format defines.
///
/// Only fixed words and names from `known` come out, whatever `message` holds: the file's
/// words are compared, never copied (a file can at most make the kind wrong).
pub fn serde_problem(message: &str, known: &[&'static str]) -> Option<Problem> {
    if let Some(at) = message.find("unknown field `") {
        return Some(unknown_key(&message[at + "unknown field `".len()..], known));
    }
    if message.contains("unexpected keys in table") {
        return Some(Problem::UnknownKey { near: None });
    }
    if let Some(at) = message.find("missing field `") {
        let rest = &message[at + "missing field `".len()..];
        return Some(
            known
                .iter()
                .find(|k| rest.strip_prefix(**k).is_some_and(|r| r.starts_with('`')))
                .map_or(Problem::MissingUnnamed, |k| Problem::Missing(k)),
        );
    }
    if let Some(at) = message.find("invalid type: ") {
        return Some(Problem::WrongType {
            found: found(&message[at + "invalid type: ".len()..]),
            expected: expected(message),
        });
    }
    if message.contains("invalid value: ") {
        return Some(Problem::BadValue {
            expected: expected(message),
        });
    }
    if message.contains("unknown variant `") {
        return Some(Problem::UnknownVariant);
    }
    if message.contains("invalid length ") {
        return Some(Problem::WrongLength);
    }
    if message.contains("duplicate field `") || message.contains("duplicate entry") {
        return Some(Problem::Duplicate);
    }
    None
}

/// After "unknown field `": the key the file gave, then serde's list of this table's keys.
fn unknown_key(rest: &str, known: &[&'static str]) -> Problem {
    // The key ends at serde's "`, expected" or "`, there are no fields"; the file's key
    // may hold either text, so the last one is taken: a wrong guess only misses a hint.
    let end = rest
        .rfind("`, expected")
        .or_else(|| rest.rfind("`, there are no fields"))
        .unwrap_or(rest.len());
    let (key, tail) = rest.split_at(end);
    if let Some(k) = known.iter().find(|k| **k == key) {
        return Problem::MisplacedKey(k);
    }
    // This table's keys, as serde lists them: the known names quoted in the tail.
    let here: Vec<&'static str> = known
        .iter()
        .copied()
        .filter(|k| tail.contains(&format!("`{k}`")))
        .collect();
    let near = here
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2 && *d < k.len() / 2)
        .min()
        .map(|(_, k)| k);
    Problem::UnknownKey { near }
}

/// What serde's `Unexpected` names, from the start of its display.
fn found(unexpected: &str) -> &'static str {
    const KINDS: &[(&str, &str)] = &[
        ("string", "a string"),
        ("integer", "an integer"),
        ("floating point", "a number"),
        ("boolean", "a boolean"),
        ("character", "a character"),
        ("byte array", "bytes"),
        ("unit value", "an empty value"),
        ("Option value", "an optional value"),
        ("sequence", "a list"),
        ("map", "a table"),
        ("newtype", "a value"),
        ("enum", "a tagged value"),
        ("unit variant", "a tagged value"),
        ("datetime", "a date-time"),
    ];
    KINDS
        .iter()
        .find(|(k, _)| unexpected.starts_with(k))
        .map_or("a value of another type", |(_, w)| w)
}

/// What serde says was expected: the end of its message, after the last ", expected ",
/// in words of this module (the file cannot add one: the expectation is the type's).
fn expected(message: &str) -> Option<&'static str> {
    let want = &message[message.rfind(", expected ")? + ", expected ".len()..];
    const WANTS: &[(&str, &str)] = &[
        ("a string", "a string"),
        ("a boolean", "a boolean (true or false)"),
        ("i64", "an integer"),
        ("i32", "an integer"),
        ("u64", "an integer"),
        ("u32", "an integer"),
        ("u16", "an integer"),
        ("u8", "an integer"),
        ("usize", "an integer"),
        ("f64", "a number"),
        ("f32", "a number"),
        ("a sequence", "a list"),
        ("a map", "a table of keys"),
        ("struct ", "a table of keys"),
        ("a spanned value", "a value"),
    ];
    let want = want.split(" at line ").next().unwrap_or(want);
    WANTS
        .iter()
        .find(|(w, _)| want == *w || (w.ends_with(' ') && want.starts_with(w)))
        .map(|(_, say)| *say)
}

/// Levenshtein distance, on chars; for a "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["serial", "name", "cert_file", "key_file", "state_dir"];

    #[test]
    fn nothing_the_message_quotes_comes_out() {
        let secret = "$6$SECRETHASH";
        for m in [
            format!("invalid type: string \"{secret}\", expected a boolean"),
            format!("invalid value: string \"{secret}\", expected i64"),
            format!("unknown field `root:{secret}:19000:0:99999:7:::`, expected one of `name`"),
            format!("unknown variant `{secret}`, expected one of `a`, `b`"),
            format!("basic_auth_users.{secret}: invalid type: unit value, expected a string"),
            format!("duplicate entry with key \"{secret}\""),
            format!("unexpected keys in table: {secret}, available keys: name"),
            format!("missing field `{secret}`"),
        ] {
            let p = serde_problem(&m, KNOWN).unwrap_or_else(|| panic!("{m}"));
            let said = p.to_string();
            assert!(!said.contains("SECRET"), "{m} -> {said}");
        }
    }

    #[test]
    fn kinds_and_known_names_are_kept() {
        let p = |m: &str| serde_problem(m, KNOWN).unwrap().to_string();
        assert_eq!(
            p("invalid type: string \"x\", expected a boolean"),
            "invalid type: a string, expected a boolean (true or false)"
        );
        assert_eq!(
            p("invalid type: integer `5`, expected a string at line 3 column 7"),
            "invalid type: an integer, expected a string"
        );
        assert_eq!(
            p("unknown field `serail`, expected one of `name`, `serial`"),
            "unknown key (is `serial` meant?)"
        );
        assert_eq!(
            p("unknown field `zzzzzz`, expected one of `name`, `serial`"),
            "unknown key"
        );
        assert_eq!(
            p("unknown field `cert_file`, expected one of `name`, `serial`"),
            "the key `cert_file` does not belong in this table"
        );
        assert_eq!(p("missing field `name`"), "missing key `name`");
        assert!(serde_problem("expected `=`", KNOWN).is_none());
        assert!(serde_problem("invalid value", KNOWN).is_none());
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("serail", "serial"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("key_fil", "key_file"), 1);
    }
}
