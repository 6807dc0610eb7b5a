//! Discovered drives and listed `[[drive]]` entries into one effective config.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use super::{Found, Scan, Skipped};
use crate::config::{canary_job, Config, Discovered, Drive, Identity, Probe};
use crate::config::{Class, Transport};
use crate::device::normalize_wwn;

/// The name of every discovered drive's canary (one probe per class).
pub const CANARY: &str = "canary-4k-read";

/// What the daemon watches and what discovery left out: for `driveprobe discover`, the
/// log, and the tests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Watch {
    pub watched: Vec<Watched>,
    pub skipped: Vec<Skipped>,
}

/// One drive the effective config has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Watched {
    /// The `drive` label.
    pub name: String,
    /// The kernel name, when discovery found the drive.
    pub kernel_name: Option<String>,
    pub class: Option<Class>,
    pub transport: Option<Transport>,
    /// `listed` (a `[[drive]]` discovery did not find), `listed+sysfs` (a `[[drive]]`
    /// that overrides a discovered drive), `sysfs` or `smartctl`.
    pub source: String,
    /// The discovered class canary's rate, when the drive has it.
    pub canary_rate_iops: Option<f64>,
    pub canary_window_seconds: Option<f64>,
    /// Health polling only (no canary).
    pub health_only: bool,
}

/// The disks of a listed drive that discovery's drives are compared with, by kernel
/// name: the whole disk its `/dev/disk/by-id/` link names (a link to a partition names
/// its disk), or the disks under a file-target drive's file (its "device" when it has
/// no identity).
fn disks_of_listed(d: &Drive) -> Vec<String> {
    match (&d.identity, &d.file_target) {
        (Some(Identity::ById(link)), _) => crate::device::inspect(link)
            .map(|i| vec![i.parent.unwrap_or(i.name)])
            .unwrap_or_default(),
        (None, Some(ft)) => {
            let mut at = ft.path.as_path();
            while !at.exists() {
                match at.parent() {
                    Some(p) => at = p,
                    None => return Vec::new(),
                }
            }
            crate::device::drives_of_file(at)
                .map(|fd| fd.disks.into_iter().map(|i| i.name).collect())
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Whether the listed drive `d` is the discovered drive `f`: the same serial, WWN or
/// `/dev/disk/by-id/` link; with no identity, the same path, or (a file-target drive)
/// the disk under its file.
fn same_drive(d: &Drive, disks: &[String], f: &Found) -> bool {
    let by_identity = match &d.identity {
        Some(Identity::Serial(s)) => f.identity.serial.as_deref() == Some(s.as_str()),
        Some(Identity::Wwn(w)) => f
            .identity
            .wwn
            .as_deref()
            .is_some_and(|x| normalize_wwn(x) == normalize_wwn(w)),
        // A link to a partition is its whole disk's drive (as the daemon resolves it):
        // compared by the link's file name, a by-id link to `sda1` did not match `sda`,
        // and the disk was watched twice (the listed drive and a discovered one).
        Some(Identity::ById(_)) => disks.contains(&f.kernel_name),
        None => disks.contains(&f.kernel_name),
    };
    // A listed identity is matched by that identity alone: a disk without a serial or
    // WWN at the listed path is not the listed drive (its disk may have been pulled and
    // another taken the kernel name); it is watched on its own, and the listed drive's
    // own identity check says it is down.
    by_identity
        || (d.identity.is_none() && d.file_target.is_none() && d.path.as_ref() == Some(&f.path))
}

/// The effective config: `base` (as loaded) with the drives of `scan` (which has passed
/// the filters and `max_drives`). A listed drive overrides the discovered drive it is
/// (name, file target, rating, destructive, its own probes; with no probe of its own it
/// gets its class's canary); every other discovered drive is added, never writable (no
/// file target, not destructive), with its class's read-only canary unless it is
/// health-only. With discovery off, `base` as it is.
pub fn merge(base: &Config, scan: &Scan) -> (Config, Watch) {
    let mut c = base.clone();
    let mut watch = Watch::default();
    if !base.discovery.enabled {
        for d in &base.drives {
            watch.watched.push(listed_entry(d, true, &c));
        }
        return (c, watch);
    }
    watch.skipped = scan.skipped.clone();
    let listed_disks: Vec<Vec<String>> = base.drives.iter().map(disks_of_listed).collect();
    let mut names: BTreeSet<String> = base.drives.iter().map(|d| d.name.clone()).collect();
    let mut per_class: BTreeMap<Class, Vec<String>> = BTreeMap::new();
    let mut matched: BTreeMap<String, &Found> = BTreeMap::new();
    let health_only_mode = base.discovery.health_only;
    for f in &scan.found {
        let listed = base
            .drives
            .iter()
            .zip(&listed_disks)
            .find(|(d, under)| same_drive(d, under, f));
        let discovered = Discovered {
            class: f.class,
            transport: f.transport,
            kernel_name: f.kernel_name.clone(),
            source: f.source,
        };
        if let Some((d, _)) = listed {
            if matched.contains_key(&d.name) {
                watch.skipped.push(Skipped {
                    name: f.kernel_name.clone(),
                    reason: format!(
                        "listed drive {:?} is already matched to {}",
                        d.name, matched[&d.name].kernel_name
                    ),
                });
                continue;
            }
            matched.insert(d.name.clone(), f);
            c.discovered.insert(d.name.clone(), discovered);
            let covered = base.probes.iter().any(|p| p.drives.contains(&d.name));
            if !covered && !f.health_only() && !health_only_mode {
                per_class.entry(f.class).or_default().push(d.name.clone());
            }
            continue;
        }
        let mut name = f.label();
        if names.contains(&name) {
            name = super::label_of(&f.kernel_name);
        }
        if names.contains(&name) {
            watch.skipped.push(Skipped {
                name: f.kernel_name.clone(),
                reason: format!(
                    "its label {:?} is already a drive's name; list it as a [[drive]] with a name",
                    f.label()
                ),
            });
            continue;
        }
        names.insert(name.clone());
        let identity = match (&f.identity.serial, &f.identity.wwn) {
            (Some(s), _) => Some(Identity::Serial(s.clone())),
            (None, Some(w)) => Some(Identity::Wwn(w.clone())),
            (None, None) => None,
        };
        c.drives.push(Drive {
            name: name.clone(),
            identity,
            path: Some(f.path.clone()),
            destructive: false,
            file_target: None,
            rating: Default::default(),
            rated: Default::default(),
            smartctl_type: f.smartctl_type.clone(),
        });
        c.discovered.insert(name.clone(), discovered);
        if !f.health_only() && !health_only_mode {
            per_class.entry(f.class).or_default().push(name);
        }
    }
    for (f, why) in &scan.gone {
        if base
            .drives
            .iter()
            .zip(&listed_disks)
            .any(|(d, under)| same_drive(d, under, f))
        {
            // A listed drive stays, and its own identity check says it is down.
            continue;
        }
        let mut name = f.label();
        if names.contains(&name) {
            name = super::label_of(&f.kernel_name);
        }
        if names.insert(name.clone()) {
            c.gone.insert(name, why.clone());
        }
    }
    for (class, drives) in per_class {
        let cc = base.discovery.canary(class);
        c.probes.push(Probe {
            name: CANARY.into(),
            drives,
            job: canary_job(cc.rate_iops, cc.window),
            window: cc.window,
            writes: false,
        });
    }
    for d in &c.drives {
        let listed = base.drives.iter().any(|b| b.name == d.name);
        watch.watched.push(listed_entry(d, listed, &c));
    }
    (c, watch)
}

fn listed_entry(d: &Drive, listed: bool, c: &Config) -> Watched {
    let disc = c.discovered.get(&d.name);
    let source = match (listed, disc) {
        (true, Some(x)) => format!("listed+{}", x.source.name()),
        (false, Some(x)) => x.source.name().to_string(),
        (_, None) => "listed".to_string(),
    };
    let canary = c
        .probes
        .iter()
        .find(|p| p.name == CANARY && p.drives.contains(&d.name) && disc.is_some());
    Watched {
        name: d.name.clone(),
        kernel_name: disc.map(|x| x.kernel_name.clone()),
        class: disc.map(|x| x.class),
        transport: disc.map(|x| x.transport),
        source,
        canary_rate_iops: canary.and_then(|p| p.job.rate().map(|r| r.iops)),
        canary_window_seconds: canary.map(|p| p.window.as_secs_f64()),
        health_only: !c.probes.iter().any(|p| p.drives.contains(&d.name)),
    }
}
