//! What this build is: the crate version, the git revision it was built from and the
//! compiler, as `build.rs` found them (for `driveprobe_build_info` and `--version`).

/// The crate version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git revision: a short hash, `-dirty` when tracked files differed from it; `unknown`
/// for a build outside a git repository.
pub const REVISION: &str = env!("DRIVEPROBE_REVISION");
/// The Rust compiler's version (`1.95.0`).
pub const RUST_VERSION: &str = env!("DRIVEPROBE_RUSTC_VERSION");

/// `driveprobe --version`: `0.1.0 (revision 1a2b3c4, rustc 1.95.0)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("DRIVEPROBE_REVISION"),
    ", rustc ",
    env!("DRIVEPROBE_RUSTC_VERSION"),
    ")"
);
