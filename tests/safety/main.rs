//! Tier 2, as root (`scripts/test`): the write gate, the safety matrix and purge on loop
//! devices made over files in temp dirs, and `driveprobe bench`'s refusals that need root.

#[path = "../common/mod.rs"]
mod common;

mod bench_refusals;
mod purge_loop;
mod safety_loop;
mod safety_matrix;
