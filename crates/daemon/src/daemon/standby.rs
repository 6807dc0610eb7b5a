//! The sleeping-disk check of a canary: a spun-down rotational disk is not woken by it.
//!
//! Before a canary issues I/O to a rotational disk (a discovered drive of class `hdd`; a
//! listed drive that discovery did not match: sysfs `queue/rotational` = 1), and
//! then once per interval of its segment, it asks the disk whether it is in standby with
//! ATA CHECK POWER MODE ([`crate::sys::ata`]), which the drive answers without spinning
//! up. A sleeping disk holds the canary (`paused`, with the reason); it resumes when the
//! disk is up again (spun up by someone else's I/O). The question is asked at most once a
//! second and at most once per canary I/O (every `max(1 s, 1 / rate)`): at the `hdd`
//! class rate (1 IOPS) once per I/O. Non-rotational drives are never asked.
//!
//! The ioctl is used instead of `smartctl -n standby` (which asks the same and exits 2
//! when the disk sleeps) because it is asked every second on every rotational disk: a
//! process each time would cost more than the canary itself.
//!
//! Limits: a disk that is not behind libata (SAS/SCSI, USB bridges) cannot be asked; it
//! is logged once and its canary runs as before. The check and the next I/O are up to an
//! interval (1 s) apart: a disk spun down within that second is woken by that I/O, once;
//! the next check then sees it up (a drive's standby timer never fires under a 1 IOPS
//! canary: only an explicit spin-down, `hdparm -y` or a spin-down daemon, puts it there).

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::sys::ata::{self, PowerMode};

/// The reason a sleeping disk's canary shows (the `paused` state's reason).
pub const ASLEEP_REASON: &str =
    "the disk is in standby (spun down): the canary does not wake it, and resumes when the disk is up";

/// What is known of the disk the canary runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Not rotational (or unknown): never asked.
    NotRotational,
    /// Rotational, and it answers CHECK POWER MODE.
    Asked,
    /// Rotational, but it cannot be asked (not behind libata, no privilege).
    Unsupported,
}

/// One canary's check (each canary thread owns one; no lock).
#[derive(Debug)]
pub struct StandbyCheck {
    /// How often the disk is asked at most.
    every: Duration,
    /// sysfs root (`/sys`; a fake tree in tests).
    sys: PathBuf,
    /// The whole disk last seen, and what is known of it.
    disk: Option<(PathBuf, Kind)>,
    /// When it was last asked, and what it answered.
    last: Option<(Instant, PowerMode)>,
    /// Answers so far (for the log line that says the check works).
    answers: u64,
    /// What discovery's class says: rotational (`hdd`) or not (virtio disks say they
    /// rotate in sysfs; their class is `virtual`). None: ask sysfs.
    class_rotational: Option<bool>,
}

impl StandbyCheck {
    /// A check for a canary at `rate_iops` (None: unlimited, asked once a second).
    pub fn new(rate_iops: Option<f64>) -> Self {
        Self::with_sys(rate_iops, Path::new("/sys"))
    }

    /// What the drive's discovered class says of its rotation (see the field).
    pub fn class_rotational(mut self, rotational: Option<bool>) -> Self {
        self.class_rotational = rotational;
        self
    }

    pub fn with_sys(rate_iops: Option<f64>, sys: &Path) -> Self {
        let per_io = rate_iops
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| Duration::from_secs_f64((1.0 / r).min(3600.0)))
            .unwrap_or(Duration::ZERO);
        StandbyCheck {
            every: per_io.max(Duration::from_secs(1)),
            sys: sys.to_path_buf(),
            disk: None,
            last: None,
            answers: 0,
            class_rotational: None,
        }
    }

    /// How often the disk is asked at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Whether the disk is rotational and will be asked (after the first call for it).
    pub fn asks(&self) -> bool {
        matches!(self.disk, Some((_, Kind::Asked)))
    }

    /// `Some(reason)` when `disk` (the drive's whole disk, `/dev/NAME`) is asleep now.
    /// `drive` names it in the log.
    pub fn asleep(&mut self, drive: &str, disk: Option<&Path>) -> Option<String> {
        self.check(drive, disk, |p| {
            let f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(p)?;
            ata::check_power_mode(&f)
        })
    }

    /// [`StandbyCheck::asleep`] with the question put by `ask` (tests).
    pub fn check(
        &mut self,
        drive: &str,
        disk: Option<&Path>,
        ask: impl FnOnce(&Path) -> std::io::Result<PowerMode>,
    ) -> Option<String> {
        let disk = disk?;
        if self.disk.as_ref().is_none_or(|(d, _)| d != disk) {
            let kind = if self
                .class_rotational
                .unwrap_or_else(|| self.rotational(disk))
            {
                Kind::Asked
            } else {
                Kind::NotRotational
            };
            self.disk = Some((disk.to_path_buf(), kind));
            self.last = None;
            self.answers = 0;
        }
        if !self.asks() {
            return None;
        }
        let now = Instant::now();
        if let Some((at, mode)) = self.last {
            if now.duration_since(at) < self.every {
                return mode.is_standby().then(|| ASLEEP_REASON.to_string());
            }
        }
        match ask(disk) {
            Ok(mode) => {
                if self.answers == 0 {
                    tracing::info!(drive, disk = %disk.display(), mode = mode.name(),
                        every_seconds = self.every.as_secs_f64(),
                        "rotational disk: its canary asks it whether it sleeps (ATA CHECK POWER MODE) before its I/O, and pauses while it does");
                }
                self.answers += 1;
                self.last = Some((now, mode));
                mode.is_standby().then(|| ASLEEP_REASON.to_string())
            }
            Err(e) if ata::is_unsupported(&e) => {
                // A discovered hdd (SAS behind a non-libata HBA, a USB disk) says ENOTTY
                // too: the operator is told that its canary keeps it spinning.
                if e.raw_os_error() == Some(libc::ENOTTY) && self.class_rotational != Some(true) {
                    // Not an ATA disk at all (virtio reports itself rotational): nothing
                    // to say to the operator.
                    tracing::debug!(drive, disk = %disk.display(), error = %e,
                        "not an ATA disk: not asked whether it sleeps");
                } else {
                    tracing::info!(drive, disk = %disk.display(), error = %e,
                        "rotational disk that cannot be asked whether it sleeps (ATA CHECK POWER MODE refused): its canary runs without the check and would wake it");
                }
                if let Some((_, k)) = self.disk.as_mut() {
                    *k = Kind::Unsupported;
                }
                None
            }
            Err(e) => {
                // The drive failed the command once (or the device is going away): not
                // taken as asleep; the canary's own I/O says whether the drive is sick.
                tracing::debug!(drive, disk = %disk.display(), error = %e, "CHECK POWER MODE failed");
                self.last = Some((now, PowerMode::Unknown(0xFE)));
                None
            }
        }
    }

    /// sysfs `queue/rotational` of the whole disk `/dev/NAME` is 1.
    fn rotational(&self, disk: &Path) -> bool {
        let Some(name) = disk.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        std::fs::read_to_string(
            self.sys
                .join("class/block")
                .join(name)
                .join("queue/rotational"),
        )
        .is_ok_and(|s| s.trim() == "1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::io;

    fn fake_sys(disks: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, rot) in disks {
            let q = d.path().join("class/block").join(name).join("queue");
            std::fs::create_dir_all(&q).unwrap();
            std::fs::write(q.join("rotational"), format!("{rot}\n")).unwrap();
        }
        d
    }

    /// A spun-down rotational disk holds the canary with the reason; spun up, it runs.
    /// A non-rotational drive is never asked.
    #[test]
    fn a_sleeping_rotational_disk_holds_its_canary_and_an_ssd_is_never_asked() {
        let sys = fake_sys(&[("sda", "1"), ("sdb", "0")]);
        let asked = Cell::new(0);
        let answer = |m: PowerMode| {
            let asked = &asked;
            move |_: &Path| {
                asked.set(asked.get() + 1);
                Ok(m)
            }
        };
        let mut c = StandbyCheck::with_sys(Some(1.0), sys.path());
        assert_eq!(c.every(), Duration::from_secs(1));
        let sda = Path::new("/dev/sda");
        assert_eq!(
            c.check("a", Some(sda), answer(PowerMode::Standby))
                .as_deref(),
            Some(ASLEEP_REASON)
        );
        assert!(c.asks());
        // Within the second: the answer is reused, the disk not asked again.
        assert!(c.check("a", Some(sda), answer(PowerMode::Active)).is_some());
        assert_eq!(asked.get(), 1);
        let mut c = StandbyCheck::with_sys(Some(1.0), sys.path());
        for m in [PowerMode::Active, PowerMode::Idle, PowerMode::Unknown(2)] {
            c.last = None;
            assert_eq!(c.check("a", Some(sda), answer(m)), None, "{m:?}");
        }
        // The SSD: never asked, never held.
        let mut c = StandbyCheck::with_sys(Some(20.0), sys.path());
        let before = asked.get();
        for _ in 0..3 {
            assert_eq!(
                c.check("b", Some(Path::new("/dev/sdb")), answer(PowerMode::Standby)),
                None
            );
        }
        assert!(!c.asks());
        // No disk (a file target on tmpfs), or one sysfs does not know: never asked.
        assert_eq!(c.check("c", None, answer(PowerMode::Standby)), None);
        assert_eq!(
            c.check("d", Some(Path::new("/dev/sdz")), answer(PowerMode::Standby)),
            None
        );
        assert_eq!(asked.get(), before);
        // A virtio disk says it rotates in sysfs; its class (virtual) says not: not asked.
        // A discovered hdd is asked whatever sysfs says.
        let mut c = StandbyCheck::with_sys(Some(5.0), sys.path()).class_rotational(Some(false));
        assert_eq!(c.check("v", Some(sda), answer(PowerMode::Standby)), None);
        assert_eq!(asked.get(), before);
        let mut c = StandbyCheck::with_sys(Some(1.0), sys.path()).class_rotational(Some(true));
        assert!(c
            .check("h", Some(Path::new("/dev/sdb")), answer(PowerMode::Standby))
            .is_some());
        assert_eq!(asked.get(), before + 1);
    }

    /// A disk that refuses the question is asked once, and its canary runs; a failure of
    /// the command is not taken as sleep.
    #[test]
    fn a_disk_that_cannot_be_asked_is_asked_once() {
        let sys = fake_sys(&[("sda", "1")]);
        let asked = Cell::new(0);
        let mut c = StandbyCheck::with_sys(Some(1.0), sys.path());
        let sda = Path::new("/dev/sda");
        for _ in 0..3 {
            c.last = None;
            let r = c.check("a", Some(sda), |_| {
                asked.set(asked.get() + 1);
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            });
            assert_eq!(r, None);
        }
        assert_eq!(asked.get(), 1);
        let mut c = StandbyCheck::with_sys(Some(1.0), sys.path());
        assert_eq!(
            c.check("a", Some(sda), |_| Err(io::Error::from_raw_os_error(
                libc::EIO
            ))),
            None
        );
        assert!(c.asks(), "an EIO is not a refusal: asked again next time");
    }

    /// At most once per canary I/O: a canary slower than 1 IOPS asks less often.
    #[test]
    fn the_disk_is_asked_at_most_once_per_io_and_once_a_second() {
        assert_eq!(StandbyCheck::new(Some(0.2)).every(), Duration::from_secs(5));
        assert_eq!(
            StandbyCheck::new(Some(50.0)).every(),
            Duration::from_secs(1)
        );
        assert_eq!(StandbyCheck::new(None).every(), Duration::from_secs(1));
        assert_eq!(StandbyCheck::new(Some(0.0)).every(), Duration::from_secs(1));
    }
}
