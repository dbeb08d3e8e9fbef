//! The driving host folds its own appends from the journal's acknowledgements, without
//! reading them back. What it folds must be exactly what the journal holds, on every
//! backend, also when another writer appends to the run while it drives (a steer), which
//! makes the host's next expected-version append conflict and re-read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_host::run::{
    Budgets, DriveOptions, Host, NewRun, Observer, RunEnd, RunState, SteerStatus, kinds,
};
use agent_host::tools::ApprovalMode;
use agent_journal::{Event, Journal};

/// Keeps every event the driver folds; at the `model.requested` of step 5 it has another
/// task request a steer, as `agentctl steer` from another terminal would.
struct Recorder {
    journal: Journal,
    seen: Mutex<Vec<Event>>,
    steered: AtomicBool,
}

impl Observer for Recorder {
    fn event(&self, state: &RunState, event: &Event) {
        self.seen.lock().unwrap().push(event.clone());
        if &*event.kind == kinds::MODEL_REQUESTED
            && event.payload["step"] == 5
            && !self.steered.swap(true, Ordering::SeqCst)
        {
            let (journal, run_id) = (self.journal.clone(), state.id().to_string());
            tokio::spawn(async move {
                // Matches the loop rule too, so the run goes on to its 20 tool steps.
                agent_host::run::request_steer(
                    &journal,
                    &run_id,
                    "loop=20; steered: carry on",
                    Some("s1".into()),
                )
                .await
                .unwrap();
            });
        }
    }
}

async fn drive_and_compare(url: &str) {
    let (_server, client) = crate::bench_script::serve().await;
    let journal = Journal::open(url).await.unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let recorder = Arc::new(Recorder {
        journal: journal.clone(),
        seen: Mutex::new(Vec::new()),
        steered: AtomicBool::new(false),
    });
    let opts = DriveOptions {
        observer: recorder.clone(),
        ..DriveOptions::default()
    };
    let run = NewRun::new(
        "loop=20; call list_dir until told otherwise",
        workspace.path(),
    )
    .budgets(Budgets {
        max_steps: 40,
        max_tokens: None,
    })
    .approval(ApprovalMode::Auto);
    let report = Host::new(journal.clone(), client)
        .start(run, opts)
        .await
        .unwrap();
    assert_eq!(
        report.end,
        RunEnd::Completed {
            text: "BENCH-DONE".into()
        }
    );
    assert_eq!(report.state.step_count(), 21);
    // The steer was written by someone else mid-run, folded, and given to the model.
    assert!(matches!(
        report.state.steers(),
        [s] if matches!(s.status, SteerStatus::Applied { .. })
    ));

    let stored = journal
        .replay(&kinds::thread_of(&report.run_id), 0)
        .await
        .unwrap();
    let seen = recorder.seen.lock().unwrap().clone();
    // Every event once, in order, each as a read returns it (seq, payload, `at`, keys); the
    // runtime closes its turn after the drive's last fold.
    let (last, folded) = stored.split_last().unwrap();
    assert_eq!(&*last.kind, "turn.completed");
    let kinds_of = |events: &[Event]| {
        events
            .iter()
            .map(|e| e.kind.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds_of(&seen), kinds_of(folded));
    assert_eq!(seen, folded);
    assert_eq!(report.state.last_seq(), folded.last().unwrap().seq);
    // And the fold a fresh reader makes agrees with the driver's.
    let loaded = agent_host::run::load(&journal, &report.run_id)
        .await
        .unwrap();
    assert_eq!(loaded.step_count(), report.state.step_count());
    assert_eq!(loaded.calls(), report.state.calls());
    assert_eq!(loaded.steers(), report.state.steers());
    assert_eq!(loaded.usage(), report.state.usage());
    journal.close().await;
}

#[tokio::test]
async fn memory_journal_folds_what_it_holds() {
    drive_and_compare("memory:").await;
}

#[tokio::test]
async fn sqlite_journal_folds_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    drive_and_compare(&url).await;
}

#[tokio::test]
async fn postgres_journal_folds_what_it_holds() {
    let Some(db) = agent_testkit::fresh_pg_database("host_fold").await else {
        return;
    };
    drive_and_compare(db.url()).await;
}
