//! PyTorch's own outcome on a trace (`NAME.pytorch.json` beside `NAME.csv`, as in
//! `bench/traces/`), to set a replay's figures beside it.

use crate::error::{Error, Result};
use std::path::Path;

/// What PyTorch's caching allocator reached on a trace when it was recorded: its peaks and
/// driver allocations under default settings, and under `expandable_segments:True` where the
/// file has them. Reads the JSON of `bench/traces/*.pytorch.json`.
///
/// ```
/// use cudasem::cuda::memory::PytorchOutcome;
/// let o = PytorchOutcome::parse(
///     r#"{"reserved_bytes.all.peak": 7033847808, "segment_allocs_in_trace": 104,
///         "expandable_segments": {"reserved_bytes.all.peak": 5928648704}}"#,
/// )
/// .unwrap();
/// assert_eq!(o.under(false), (7033847808, Some(104)));
/// assert_eq!(o.under(true), (5928648704, None));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct PytorchOutcome {
    /// `reserved_bytes.all.peak` under default settings.
    #[serde(rename = "reserved_bytes.all.peak")]
    pub peak_reserved: usize,
    /// `allocated_bytes.all.peak` under default settings.
    #[serde(rename = "allocated_bytes.all.peak", default)]
    pub peak_allocated: Option<usize>,
    /// Driver allocations (segments) under default settings.
    #[serde(rename = "segment_allocs_in_trace", default)]
    pub segment_allocs: Option<usize>,
    /// The trace's peak of live requested bytes.
    #[serde(rename = "peak_live_requested_bytes", default)]
    pub peak_live_requested: Option<usize>,
    /// The same run under `expandable_segments:True`, where recorded.
    #[serde(default)]
    pub expandable_segments: Option<PytorchExpandable>,
}

/// PyTorch's outcome under `expandable_segments:True` (part of [`PytorchOutcome`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct PytorchExpandable {
    /// `reserved_bytes.all.peak`.
    #[serde(rename = "reserved_bytes.all.peak")]
    pub peak_reserved: usize,
    /// Driver allocations (page-range mappings), where recorded.
    #[serde(rename = "segment_allocs_in_trace", default)]
    pub segment_allocs: Option<usize>,
}

impl PytorchOutcome {
    /// Parses the JSON text; a missing `reserved_bytes.all.peak` or malformed JSON is
    /// [`Error::InvalidArgument`].
    pub fn parse(json: &str) -> Result<PytorchOutcome> {
        serde_json::from_str(json).map_err(|e| Error::InvalidArgument {
            op: "PytorchOutcome::parse",
            // serde's message quotes the offending value, which may be of any length.
            reason: format!(
                "not a PyTorch outcome file (bench/traces/*.pytorch.json): {}",
                super::trace::quote_prefix(&e.to_string(), 300)
            ),
        })
    }

    /// Reads and parses a `.pytorch.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<PytorchOutcome> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidArgument {
            op: "PytorchOutcome::from_file",
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        PytorchOutcome::parse(&text).map_err(|e| match e {
            Error::InvalidArgument { op, reason } => {
                Error::InvalidArgument { op, reason: format!("{}: {reason}", path.display()) }
            }
            e => e,
        })
    }

    /// PyTorch's `(peak reserved, driver allocations)` with expandable segments on or off; with
    /// them on and not recorded, the default settings' peak and no count.
    pub fn under(&self, expandable: bool) -> (usize, Option<usize>) {
        match (&self.expandable_segments, expandable) {
            (Some(x), true) => (x.peak_reserved, x.segment_allocs),
            (None, true) => (self.peak_reserved, None),
            (_, false) => (self.peak_reserved, self.segment_allocs),
        }
    }
}
