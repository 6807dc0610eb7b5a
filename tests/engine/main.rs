//! Tier 2 (`scripts/test`): the engine's numbers on tmpfs and loop devices, the suites and
//! the lab's protocol end to end, and the engine beside fio.

#[path = "../common/mod.rs"]
mod common;

mod engine_numbers;
mod lab_qos_hist;
mod open_loop;
mod psync_fallback;
mod pts_suites;
mod suites;
mod trim;
mod vs_fio;
mod wear_bound;
