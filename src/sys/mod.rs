//! The only module with `unsafe` code: io_uring submission (the kernel writes into memory
//! we own while an I/O is in flight) and, later, the NVMe admin ioctls. Every `unsafe`
//! block carries a `// SAFETY:` comment; everything outside this module is safe Rust.

pub mod blk;
pub mod buf;
pub mod nvme;
pub mod uring;
