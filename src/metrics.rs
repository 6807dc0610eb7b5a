//! The only module that knows Prometheus: encodes a [`Status`] as OpenMetrics or the
//! Prometheus text format 0.0.4. (Being written; see ARCHITECTURE.md.)

use crate::status::Status;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    /// The format a scraper asked for in its `Accept` header.
    pub fn negotiate(_accept: Option<&str>) -> Format {
        Format::Text004
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The whole `/metrics` payload for `status`, process metrics included.
pub fn render(_status: &Status, _format: Format) -> String {
    String::new()
}
