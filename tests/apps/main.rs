//! Tier 2 (`scripts/test`): the application workloads against the real programs (fio,
//! MariaDB with sysbench, db_bench).

#[path = "../common/mod.rs"]
mod common;

mod fio_job;
mod kv;
mod oltp;
