//! `driveprobe report`: one self-contained HTML page from suite result documents.

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::report;

#[derive(Debug, Args)]
#[command(
    after_help = "The page needs no network and no JavaScript: the charts are inline SVG. Several documents are overlaid in the same charts, one colour each, named by drive model and serial (or file name)."
)]
pub struct ReportArgs {
    /// Result documents of suite runs (JSON, as a suite writes them), or the JSON of
    /// `bench --output-format json` (one run: a one-phase report).
    #[arg(value_name = "RESULT.json", required = true)]
    results: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE", default_value = "report.html")]
    output: PathBuf,
    /// Merge the documents (runs of the same suite and scale: several drives of a model,
    /// several hosts) into one result document written to FILE, instead of a page: its
    /// latency figures and histograms are those of all the runs' I/Os together, its
    /// throughput the mean of the runs.
    #[arg(long, value_name = "FILE")]
    merge: Option<PathBuf>,
}

pub fn run(a: ReportArgs) -> Result<u8, Failure> {
    let mut docs = Vec::with_capacity(a.results.len());
    for path in a.results {
        let doc = report::load(&path).map_err(Failure::runtime)?;
        docs.push((path, doc));
    }
    if let Some(out) = &a.merge {
        let named: Vec<(String, _)> = docs
            .into_iter()
            .map(|(p, d)| (p.display().to_string(), d))
            .collect();
        let merged = crate::protocol::merge::merge_documents(&named).map_err(Failure::usage)?;
        let json = serde_json::to_string_pretty(&merged)
            .map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?;
        std::fs::write(out, json + "\n")
            .map_err(|e| Failure::runtime(format!("{}: {e}", out.display())))?;
        super::out(&format!("{}\n", out.display()))?;
        return Ok(0);
    }
    let html = report::render(&report::label_documents(docs));
    std::fs::write(&a.output, html)
        .map_err(|e| Failure::runtime(format!("{}: {e}", a.output.display())))?;
    super::out(&format!("{}\n", a.output.display()))?;
    Ok(0)
}
