//! What a model step costs the disk (issue 35): at most two commits per step wait for the
//! WAL flush. The rest of a step's events are relaxed appends, made durable by the next
//! durable commit (see the resume rules in `HOST.md`): `model.completed` by the call's
//! `tool.started`, `tool.scheduled` by the same, `tool.completed` by the next
//! `model.requested`. Counted by the journal's own writer, on each durable backend.

use agent_host::run::{Budgets, DriveOptions, Host, NewRun, RunEnd};
use agent_host::tools::ApprovalMode;
use agent_journal::{Journal, JournalStats};

const TOOL_STEPS: u64 = 20;

/// Drives a 20-tool-step run of the bench script; returns the model steps and what the
/// journal's writer committed meanwhile.
async fn drive(url: &str) -> (u64, JournalStats) {
    let (_server, client) = crate::bench_script::serve().await;
    let journal = Journal::open(url).await.unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let run = NewRun::new(
        format!("loop={TOOL_STEPS}; call list_dir until told otherwise"),
        workspace.path(),
    )
    .budgets(Budgets {
        max_steps: 40,
        max_tokens: None,
    })
    .approval(ApprovalMode::Auto);
    let before = journal.stats();
    let report = Host::new(journal.clone(), client)
        .start(run, DriveOptions::default())
        .await
        .unwrap();
    let after = journal.stats();
    assert_eq!(
        report.end,
        RunEnd::Completed {
            text: "BENCH-DONE".into()
        }
    );
    journal.close().await;
    (report.state.step_count(), after.since(&before))
}

fn check(steps: u64, spent: JournalStats) {
    assert_eq!(steps, TOOL_STEPS + 1);
    let durable = spent.durable_commits();
    eprintln!(
        "{steps} model steps: {} commits, {durable} durable, {} events",
        spent.commits, spent.events
    );
    // Per tool step `model.requested` and `tool.started`; the answer's step has
    // `model.requested` only. Durable commits of their own: `run.created`, the turn's
    // opening, `run.completed` and the turn's close.
    assert!(
        durable <= 2 * steps + 3,
        "{durable} durable commits for {steps} model steps: more than two per step"
    );
    // And the relaxed ones are really there (the step's other events did not just join
    // the durable commits by luck of batching).
    assert!(spent.relaxed_commits >= TOOL_STEPS, "{spent:?}");
}

#[tokio::test]
async fn a_step_costs_at_most_two_durable_commits_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("j.db").display());
    let (steps, spent) = drive(&url).await;
    check(steps, spent);
}

#[tokio::test]
async fn a_step_costs_at_most_two_durable_commits_on_postgres() {
    let Some(db) = agent_testkit::fresh_pg_database("host_durable_commits").await else {
        return;
    };
    let (steps, spent) = drive(db.url()).await;
    check(steps, spent);
}
