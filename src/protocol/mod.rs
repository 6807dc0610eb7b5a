//! The drive test protocol (docs/protocol.md) as suites built on the engine: purge,
//! preconditioning, steady state, thread/queue sweeps, rate curves, and their result
//! document.

pub mod bound;
pub mod purge;
pub mod result;
pub mod steady;
pub mod suite;
pub mod workloads;
