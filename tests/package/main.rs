//! Tier 2, as root (`scripts/test`): the Debian package (lintian, install, upgrade,
//! purge) and the systemd unit.

#[path = "../common/mod.rs"]
mod common;

mod package;
mod systemd_unit;
