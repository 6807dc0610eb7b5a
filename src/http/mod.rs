//! The HTTP server (hyper 1.x). (Being written; see ARCHITECTURE.md.)
