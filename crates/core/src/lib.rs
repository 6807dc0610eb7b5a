//! driveprobe-core: what every command needs to touch a drive safely. Block devices and
//! their identity ([`device`]), the one gate for writes ([`safety`]) and the ownership mark
//! ([`ownmark`]), targets ([`target`]), the I/O engine ([`engine`]), child processes
//! ([`process`]), and the small shared pieces: sizes ([`units`]), text ([`fmt`]), dates
//! ([`calendar`]), bounded reads ([`file`]) and the generator ([`rng`]).
#![forbid(unsafe_code)]

pub mod calendar;
pub mod device;
pub mod engine;
pub mod file;
pub mod fmt;
pub mod ownmark;
pub mod process;
pub mod rng;
pub mod safety;
pub mod target;
pub mod units;

use driveprobe_sys as sys;
