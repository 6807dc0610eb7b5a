//! The only module with `unsafe` code: io_uring submission (the kernel writes into memory
//! we own while an I/O is in flight), the NVMe admin, SCSI generic (SG_IO), ATA power-mode
//! and block ioctls, and a child process's parent death signal (`proc`: a `pre_exec`
//! hook). Every `unsafe` block carries
//! a `// SAFETY:` comment; everything outside this module is safe Rust.

pub mod ata;
pub mod blk;
pub mod buf;
pub mod nvme;
pub mod proc;
pub mod sg;
pub mod shared_ring;
pub mod uring;

/// Monotonic clock in nanoseconds (vDSO, no syscall).
#[inline]
pub fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
