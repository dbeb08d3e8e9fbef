//! A worker whose stop grace ran out leaves no task behind once it returned: the drives it
//! dropped take their lease keepers with them (a keeper went on renewing a lease its worker
//! had handed back, for as long as the process lived).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;
use crate::run::NewRun;
use crate::tools::ToolConfig;

/// Journals from `memory:`; a model client never comes, so every drive waits for it.
struct Hanging(Journal);

impl Connector for Hanging {
    fn journal(&self) -> BoxFuture<'_, Result<Journal, HostError>> {
        Box::pin(async move { Ok(self.0.clone()) })
    }
    fn client<'a>(&'a self, _: &'a RunSpec) -> BoxFuture<'a, Result<Connected, HostError>> {
        Box::pin(std::future::pending())
    }
}

struct Quiet;

impl WorkerObserver for Quiet {
    fn event(&self, _: &WorkerEvent) {}
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Waits until `done` holds, for at most a minute: a bound for a broken build, not a
/// measure of speed.
async fn eventually(mut done: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..6000 {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drives_dropped_at_the_end_of_the_grace_leave_no_lease_keeper() {
    const RUNS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open("memory:").await.unwrap();
    for i in 0..RUNS {
        let new = NewRun::new(format!("run {i}"), dir.path().to_path_buf());
        crate::run::submit(&journal, &ToolConfig::default(), new)
            .await
            .unwrap();
    }
    let before = alive_tasks();
    let stop = CancellationToken::new();
    let config = WorkerConfig {
        name: "w".into(),
        concurrency: RUNS,
        lease_ttl: Duration::from_secs(60),
        poll: Duration::from_millis(10),
        grace: Duration::ZERO,
    };
    let worker = tokio::spawn(run_worker(
        Arc::new(Hanging(journal.clone())),
        config,
        Arc::new(Quiet),
        stop.clone(),
    ));
    let claimed = eventually(async || {
        let leases = journal.leases(RUN_LEASES).await.unwrap();
        leases.iter().filter(|l| l.holder.is_some()).count() == RUNS
    })
    .await;
    assert!(claimed, "the worker did not claim every run");
    stop.cancel();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(summary.released, RUNS as u64);
    let settled = eventually(async || alive_tasks() <= before).await;
    assert!(
        settled,
        "{} tasks alive after the worker returned, {before} before it started",
        alive_tasks()
    );
}

/// `agentctl worker --grace 1e19` panicked when stopped: the grace's end was `now + grace`,
/// unchecked (`run::wait::instant_after` caps it).
#[tokio::test]
async fn a_worker_stopped_with_a_grace_past_the_end_of_the_clock_stops() {
    for grace in crate::run::wait::tests::huge() {
        let journal = Journal::open("memory:").await.unwrap();
        let stop = CancellationToken::new();
        stop.cancel();
        let config = WorkerConfig {
            name: "w".into(),
            concurrency: 1,
            lease_ttl: Duration::from_secs(60),
            poll: Duration::from_millis(10),
            grace,
        };
        let worker = run_worker(Arc::new(Hanging(journal)), config, Arc::new(Quiet), stop);
        let summary = tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("the worker did not stop")
            .unwrap();
        assert_eq!(summary.claimed, 0, "{grace:?}");
    }
}
