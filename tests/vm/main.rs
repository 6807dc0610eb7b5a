//! Tier 2 (`scripts/test`): a QEMU guest (TCG) with emulated NVMe, SATA and virtio disks,
//! device-mapper, null_blk and scsi_debug, and one booted with systemd as PID 1.

#[path = "../common/mod.rs"]
mod common;
mod harness;
mod systemd_guest;

mod daemon;
mod discovery;
mod faults;
mod health;
mod purge;
mod selftest;
mod systemd;
