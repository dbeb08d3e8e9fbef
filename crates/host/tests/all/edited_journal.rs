//! Resuming a run whose journal was edited by hand (or written by another version): the
//! driver neither panics on the numbers it reads nor loops when an event it is about to
//! write is already there, unreadable, under the same dedup key.

use std::time::Duration;

use agent_host::HostError;
use agent_host::run::events::{HostEvent as _, ModelCompleted, ModelRequested};
use agent_host::run::{Budgets, DriveOptions, Host, NewRun, ResumeChange, RunEnd, kinds};
use agent_host::tools::ApprovalMode;
use agent_journal::{Journal, NewEvent};
use serde_json::{Value, json};

/// Longer than a resume of one step takes; a driver that loops never gets there.
const BOUND: Duration = Duration::from_secs(60);

/// A run paused by its budget after two tool steps, its journal, and a host over both.
pub(crate) struct Paused {
    pub(crate) journal: Journal,
    pub(crate) host: Host,
    pub(crate) run_id: String,
    _server: agent_responses_mock::MockServer,
    _workspace: tempfile::TempDir,
}

pub(crate) async fn paused_run() -> Paused {
    let (server, client) = crate::bench_script::serve().await;
    let journal = Journal::open("memory:").await.unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let run = NewRun::new("loop=long; call list_dir", workspace.path())
        .approval(ApprovalMode::Auto)
        .budgets(Budgets {
            max_steps: 2,
            max_tokens: None,
        });
    let host = Host::new(journal.clone(), client);
    let report = host.start(run, DriveOptions::default()).await.unwrap();
    assert!(
        matches!(report.end, RunEnd::Paused { .. }),
        "{:?}",
        report.end
    );
    assert_eq!(report.state.step_count(), 2);
    Paused {
        journal,
        host,
        run_id: report.run_id,
        _server: server,
        _workspace: workspace,
    }
}

/// Appends `event` with its payload replaced by `payload` (its kind and key kept).
async fn append_as(journal: &Journal, event: NewEvent, payload: Value) {
    let key = event.dedup_key.clone().unwrap();
    let edited = NewEvent::new(event.thread, event.kind, payload).with_dedup_key(key);
    journal.append(edited).await.unwrap();
}

async fn resume(host: &Host, run_id: &str) -> Result<agent_host::run::RunReport, HostError> {
    let change = ResumeChange {
        max_steps: Some(3),
        ..ResumeChange::default()
    };
    tokio::time::timeout(BOUND, host.resume(run_id, change, DriveOptions::default()))
        .await
        .expect("the resume came to an end")
}

/// A `model.requested` of the next step at the largest attempt there is: the next attempt
/// is that one again, not an overflow.
#[tokio::test]
async fn an_attempt_at_the_limit_is_asked_again_not_overflowed() {
    let run = paused_run().await;
    let (journal, host, run_id) = (&run.journal, &run.host, run.run_id.as_str());
    let requested = ModelRequested {
        step: 3,
        attempt: u32::MAX,
        model: "m".into(),
        request_sha256: String::new(),
    };
    let event = requested.to_event(&kinds::thread_of(run_id)).unwrap();
    journal.append(event).await.unwrap();
    let report = resume(host, run_id).await.unwrap();
    assert!(
        matches!(report.end, RunEnd::Paused { .. }),
        "{:?}",
        report.end
    );
    assert_eq!(report.state.step_count(), 3);
}

/// The next step's first `model.requested` is in the journal under its key, but with a
/// payload the fold cannot read: the driver's own append of it is deduplicated, so its
/// fold never learns the attempt, and a model call that kept failing would be retried as
/// attempt 1 for ever. It stops instead.
#[tokio::test]
async fn an_unreadable_request_under_the_next_attempts_key_stops_the_resume() {
    let run = paused_run().await;
    let (journal, host, run_id) = (&run.journal, &run.host, run.run_id.as_str());
    let requested = ModelRequested {
        step: 3,
        attempt: 1,
        model: "m".into(),
        request_sha256: String::new(),
    };
    let event = requested.to_event(&kinds::thread_of(run_id)).unwrap();
    append_as(journal, event, json!({"step": "three", "attempt": 1})).await;
    let err = resume(host, run_id).await.unwrap_err();
    assert!(
        matches!(&err, HostError::Unreadable { event, .. } if event.contains("step 3, attempt 1")),
        "{err}"
    );
}

/// As above for the step's `model.completed`: the answer cannot be recorded over it.
#[tokio::test]
async fn an_unreadable_answer_under_the_next_steps_key_stops_the_resume() {
    let run = paused_run().await;
    let (journal, host, run_id) = (&run.journal, &run.host, run.run_id.as_str());
    let (usage, output) = (json!({}), Vec::new());
    let completed = ModelCompleted {
        step: 3,
        attempt: 1,
        response_id: "r".into(),
        status: None,
        usage: &usage,
        output: &output,
        steered: None,
        incomplete_reason: None,
    };
    let event = completed.to_event(&kinds::thread_of(run_id)).unwrap();
    append_as(journal, event, json!({"step": 3, "output": "not a list"})).await;
    let err = resume(host, run_id).await.unwrap_err();
    assert!(
        matches!(&err, HostError::Unreadable { event, .. } if event.contains("model.completed of step 3")),
        "{err}"
    );
}
