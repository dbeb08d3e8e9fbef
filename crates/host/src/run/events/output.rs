//! Events of a run with an output schema: a final answer that did not match it.

use serde::{Deserialize, Serialize};

use super::HostEvent;
use crate::run::kinds as k;

/// `output.rejected`: the final answer of `step` is not JSON matching the run's output
/// schema; the next request carries `errors` to the model as a user message after that
/// answer. Once per step (its dedup key), so a resumed run that checks the same answer
/// again neither loses nor repeats the retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputRejected {
    /// The step whose answer was rejected.
    pub step: u64,
    /// Which retry this is (1 for the first).
    #[serde(default)]
    pub retry: u32,
    /// What is wrong, one message per error (`/path: message`).
    #[serde(default)]
    pub errors: Vec<String>,
}

impl HostEvent for OutputRejected {
    const KIND: &'static str = k::OUTPUT_REJECTED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::output_rejected_key(self.step))
    }
}
