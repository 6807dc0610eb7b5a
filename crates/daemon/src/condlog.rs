//! A condition log: a condition that holds on every attempt (a canary that cannot start, a
//! health read that fails, a run that waits) is logged once when it starts and once when
//! it ends, with how many times it was seen and for how long, instead of on every attempt.
//!
//! Each loop owns one [`CondLog`] (no lock) and reports its conditions by key:
//!
//! ```
//! use driveprobe_daemon::condlog::{CondLog, Level};
//! let mut log = CondLog::new("drive a");
//! for _ in 0..3 {
//!     // Logged the first time only.
//!     log.holds("health", Level::Warn, "health read failed: smartctl refused /dev/sda");
//! }
//! // Logged: "... ended (seen 3 times over 0 s)".
//! let ended = log.ends("health");
//! assert_eq!(ended.map(|e| e.count), Some(3));
//! ```
//!
//! A condition whose message changes (another error) ends the old episode and starts a
//! new one, so each distinct message is logged once when it starts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How loud the start of a condition is; its end is always `info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// One episode of a condition that held.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// The message logged when it started.
    pub message: String,
    /// How many times it was reported (the first included).
    pub count: u64,
    /// From the first report to the last.
    pub lasted: Duration,
}

#[derive(Debug)]
struct Open {
    message: String,
    count: u64,
    first: Instant,
    last: Instant,
}

/// The conditions that hold now, by key, for one loop. See the module docs.
#[derive(Debug)]
pub struct CondLog {
    /// Prefixed to every line (`drive a, probe rd`), so one key per condition suffices.
    scope: String,
    open: BTreeMap<String, Open>,
}

impl CondLog {
    pub fn new(scope: impl Into<String>) -> Self {
        CondLog {
            scope: scope.into(),
            open: BTreeMap::new(),
        }
    }

    /// The condition `key` holds now, saying `message`. Logs at `level` when it starts (or
    /// its message changed); otherwise counts. Returns true when it logged.
    pub fn holds(&mut self, key: &str, level: Level, message: impl Into<String>) -> bool {
        let message = message.into();
        let now = Instant::now();
        if let Some(o) = self.open.get_mut(key) {
            if o.message == message {
                o.count += 1;
                o.last = now;
                return false;
            }
            self.ends(key);
        }
        emit(level, &format!("{}: {message}", self.scope));
        self.open.insert(
            key.to_string(),
            Open {
                message,
                count: 1,
                first: now,
                last: now,
            },
        );
        true
    }

    /// The condition `key` no longer holds: logs its end with the count, when it held.
    pub fn ends(&mut self, key: &str) -> Option<Episode> {
        let o = self.open.remove(key)?;
        let e = Episode {
            message: o.message,
            count: o.count,
            lasted: o.last.duration_since(o.first),
        };
        emit(
            Level::Info,
            &format!("{}: ended: {} ({})", self.scope, e.message, repeated(&e)),
        );
        Some(e)
    }

    /// Ends every condition whose key starts with `prefix` (all of them for "").
    pub fn ends_all(&mut self, prefix: &str) -> Vec<Episode> {
        let keys: Vec<String> = self
            .open
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.iter().filter_map(|k| self.ends(k)).collect()
    }

    /// The loop stops watching (a shutdown or a reload): its open conditions did not end,
    /// so nothing is logged. Returns the keys that were open.
    pub fn close(&mut self) -> Vec<String> {
        std::mem::take(&mut self.open).into_keys().collect()
    }

    /// The condition `key` holds now.
    pub fn is_open(&self, key: &str) -> bool {
        self.open.contains_key(key)
    }
}

/// "seen once" or "repeated 57 times over 57 s".
pub fn repeated(e: &Episode) -> String {
    if e.count <= 1 {
        "seen once".to_string()
    } else {
        format!(
            "repeated {} times over {} s",
            e.count,
            e.lasted.as_secs_f64().round() as u64
        )
    }
}

fn emit(level: Level, line: &str) {
    match level {
        Level::Info => tracing::info!("{line}"),
        Level::Warn => tracing::warn!("{line}"),
        Level::Error => tracing::error!("{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_condition_is_logged_at_its_start_and_its_end_with_the_count() {
        let mut log = CondLog::new("drive a");
        assert!(log.holds("health", Level::Warn, "health read failed: x"));
        for _ in 0..56 {
            assert!(!log.holds("health", Level::Warn, "health read failed: x"));
        }
        assert!(log.is_open("health"));
        let e = log.ends("health").unwrap();
        assert_eq!(e.count, 57);
        assert_eq!(e.message, "health read failed: x");
        assert!(!log.is_open("health"));
        // Ended once: a second end says nothing.
        assert_eq!(log.ends("health"), None);
    }

    #[test]
    fn a_new_message_under_the_same_key_ends_the_old_episode() {
        let mut log = CondLog::new("drive a");
        assert!(log.holds("k", Level::Warn, "one"));
        assert!(!log.holds("k", Level::Warn, "one"));
        assert!(log.holds("k", Level::Warn, "two"));
        let e = log.ends("k").unwrap();
        assert_eq!((e.message.as_str(), e.count), ("two", 1));
    }

    #[test]
    fn keys_are_independent_and_end_by_prefix() {
        let mut log = CondLog::new("s");
        log.holds("canary:hold", Level::Info, "paused");
        log.holds("canary:start", Level::Warn, "cannot start");
        log.holds("health", Level::Warn, "failed");
        let ended = log.ends_all("canary:");
        assert_eq!(ended.len(), 2);
        assert!(log.is_open("health"));
    }

    #[test]
    fn the_count_reads_plainly() {
        let e = |count, secs| Episode {
            message: String::new(),
            count,
            lasted: Duration::from_secs(secs),
        };
        assert_eq!(repeated(&e(1, 0)), "seen once");
        assert_eq!(repeated(&e(57, 57)), "repeated 57 times over 57 s");
    }
}
