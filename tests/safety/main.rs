//! Tier 2, as root (`scripts/test`): the write gate, the safety matrix and purge on loop
//! devices made over files in temp dirs.

#[path = "../common/mod.rs"]
mod common;

mod purge_loop;
mod safety_loop;
mod safety_matrix;
