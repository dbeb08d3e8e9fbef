//! The closed vocabularies of run events: why a run paused, why a call asks a human, what
//! a decision said. Each is written into the journal as the snake_case word it serialises
//! to; those words are a public interface (`docs/cli-json.md`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a run paused (`run.paused.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseReason {
    /// A call waits for a human decision.
    Approval,
    /// The step budget is used up.
    MaxSteps,
    /// The token budget is used up.
    MaxTokens,
    /// The model call failed after its retries; `resume` asks again.
    ModelError,
    /// The API refused the request itself (400, 401, 403, 404, 422: its message says why);
    /// the same request would get the same answer, so it is not retried. A run that stops
    /// here has failed its step (`agentctl` exits 1); `resume` asks again once something
    /// changed.
    ModelRejected,
    /// A worker could not drive the run (its workspace is gone, its endpoint needs what a
    /// worker cannot give): `detail` says why. No worker takes it again; `agentctl resume`
    /// does once the cause is fixed.
    CannotDrive,
}

impl PauseReason {
    /// The word written into the journal and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::Approval => "approval",
            PauseReason::MaxSteps => "max_steps",
            PauseReason::MaxTokens => "max_tokens",
            PauseReason::ModelError => "model_error",
            PauseReason::ModelRejected => "model_rejected",
            PauseReason::CannotDrive => "cannot_drive",
        }
    }
}

impl fmt::Display for PauseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call waits for a human (`approval.requested.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalReason {
    /// The tool's policy asks before it runs.
    Policy,
    /// The call was cut off after it started: its effect may or may not have happened.
    Indeterminate,
    /// A `shell` call asks to run outside the run's sandbox (its `justification` says why).
    Escalation,
}

impl ApprovalReason {
    /// The word written into the journal and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalReason::Policy => "policy",
            ApprovalReason::Indeterminate => "indeterminate",
            ApprovalReason::Escalation => "escalation",
        }
    }
}

impl fmt::Display for ApprovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a decision said (`approval.decided.decision`), beside its `approve` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run the call.
    Approve,
    /// Do not run it; the model is told why.
    Deny,
}

impl Verdict {
    /// The verdict of an `approve` flag.
    pub fn of(approve: bool) -> Verdict {
        if approve {
            Verdict::Approve
        } else {
            Verdict::Deny
        }
    }
}

/// How far an approval reaches (`approval.decided.scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionScope {
    /// The tool is approved for the rest of the run ("approve always").
    Run,
}

/// How a steer reached the model (`steer.applied.via`), when not at a step boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SteerVia {
    /// Sent into the response that was streaming (`--transport ws`).
    #[serde(rename = "response.steer")]
    ResponseSteer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_serialise_to_the_words_the_journal_holds() {
        let words = [
            serde_json::to_value(PauseReason::MaxSteps).unwrap(),
            serde_json::to_value(PauseReason::ModelError).unwrap(),
            serde_json::to_value(ApprovalReason::Indeterminate).unwrap(),
            serde_json::to_value(Verdict::Deny).unwrap(),
            serde_json::to_value(DecisionScope::Run).unwrap(),
            serde_json::to_value(SteerVia::ResponseSteer).unwrap(),
        ];
        assert_eq!(
            words,
            [
                "max_steps",
                "model_error",
                "indeterminate",
                "deny",
                "run",
                "response.steer"
            ]
            .map(serde_json::Value::from)
        );
        for reason in [
            PauseReason::Approval,
            PauseReason::MaxSteps,
            PauseReason::MaxTokens,
            PauseReason::ModelError,
        ] {
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                serde_json::Value::from(reason.as_str())
            );
        }
    }
}
