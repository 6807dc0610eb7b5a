//! The words a drive is described by, in the config and everywhere above it: its class
//! (what its canary may cost it), how it is attached, and where discovery found it.
//! Discovery decides them; the config names them (`[discovery.canary.CLASS]`, a
//! discovered drive's entry).

use serde::Serialize;

/// A drive class: what its canary may cost it (`[discovery.canary.CLASS]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Rotational: the drive's own rotation rate (SCSI VPD page B1h, which the kernel
    /// also builds from ATA IDENTIFY word 217, as smartctl's `rotation_rate`) when it
    /// reports one, else sysfs `queue/rotational` = 1. About 100-200 random IOPS in all.
    Hdd,
    /// A SATA, SAS or SCSI drive that does not rotate.
    Ssd,
    Nvme,
    /// virtio, Xen, loop and anything of unknown transport.
    Virtual,
}

impl Class {
    pub const ALL: [Class; 4] = [Class::Hdd, Class::Ssd, Class::Nvme, Class::Virtual];

    pub fn name(self) -> &'static str {
        match self {
            Class::Hdd => "hdd",
            Class::Ssd => "ssd",
            Class::Nvme => "nvme",
            Class::Virtual => "virtual",
        }
    }

    pub fn from_name(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// How a drive is attached (the `transport` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Nvme,
    Sata,
    Sas,
    Scsi,
    Virtio,
    Usb,
    Mmc,
    Xen,
    Loop,
    Raid,
    Unknown,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Nvme => "nvme",
            Transport::Sata => "sata",
            Transport::Sas => "sas",
            Transport::Scsi => "scsi",
            Transport::Virtio => "virtio",
            Transport::Usb => "usb",
            Transport::Mmc => "mmc",
            Transport::Xen => "xen",
            Transport::Loop => "loop",
            Transport::Raid => "raid",
            Transport::Unknown => "unknown",
        }
    }
}

/// Where a discovered drive was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `/sys/class/block`.
    Sysfs,
    /// `smartctl --scan-open` (behind a RAID controller).
    Smartctl,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Sysfs => "sysfs",
            Source::Smartctl => "smartctl",
        }
    }
}
