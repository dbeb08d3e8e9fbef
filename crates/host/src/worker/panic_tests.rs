//! A drive that panics pauses its run and closes its lease: the worker does not claim it
//! again (a server's header once made every drive panic, and a worker claimed the run
//! about 50 times a second, each time sending a model request).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::run::NewRun;
use crate::tools::ToolConfig;

/// Journals from `memory:`; every client it is asked for panics, as a bug on the drive
/// path would.
struct Panicking {
    journal: Journal,
    asked: AtomicUsize,
}

impl Connector for Panicking {
    fn journal(&self) -> BoxFuture<'_, Result<Journal, HostError>> {
        Box::pin(async move { Ok(self.journal.clone()) })
    }
    fn client<'a>(&'a self, _: &'a RunSpec) -> BoxFuture<'a, Result<Connected, HostError>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { panic!("a bug on the drive path") })
    }
}

#[derive(Default)]
struct Ends(std::sync::Mutex<Vec<(WorkerEnd, Option<String>)>>);

impl WorkerObserver for Ends {
    fn event(&self, event: &WorkerEvent) {
        if let WorkerEvent::Ended { status, detail, .. } = event {
            self.0.lock().unwrap().push((*status, detail.clone()));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drive_that_panics_pauses_its_run_and_is_not_claimed_again() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open("memory:").await.unwrap();
    let new = NewRun::new("panics".to_string(), dir.path().to_path_buf());
    let id = crate::run::submit(&journal, &ToolConfig::default(), new)
        .await
        .unwrap();
    let connector = Arc::new(Panicking {
        journal: journal.clone(),
        asked: AtomicUsize::new(0),
    });
    let ends = Arc::new(Ends::default());
    let stop = CancellationToken::new();
    let config = WorkerConfig {
        name: "w".into(),
        concurrency: 1,
        lease_ttl: Duration::from_secs(60),
        poll: Duration::from_millis(10),
        grace: Duration::ZERO,
    };
    let worker = tokio::spawn(run_worker(
        connector.clone(),
        config,
        ends.clone(),
        stop.clone(),
    ));
    // Long enough for a hundred polls: a run given back open would be claimed each time.
    for _ in 0..500 {
        if !ends.0.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(connector.asked.load(Ordering::SeqCst), 1, "claimed again");
    assert_eq!(summary.claimed, 1);
    let ends = ends.0.lock().unwrap().clone();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0].0, WorkerEnd::Error);
    assert!(
        ends[0]
            .1
            .as_deref()
            .unwrap()
            .contains("a bug on the drive path"),
        "{ends:?}"
    );
    let state = crate::run::load(&journal, &id).await.unwrap();
    assert_eq!(state.status(), RunStatus::Paused);
    let lease = journal.leases(RUN_LEASES).await.unwrap();
    assert_eq!(lease[0].status, LeaseStatus::Closed, "{lease:?}");
}
