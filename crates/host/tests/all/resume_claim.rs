//! A resume's claim against requests that land between its read of the run and its claim:
//! a steer or an interrupt is not another driver.

use agent_host::run::{DriveOptions, ResumeChange, RunEnd, load_for_resume, request_steer};

use crate::edited_journal::paused_run;

/// A steer taken after `resume` read the run and before it claimed it makes the claim
/// conflict; the resume folds it and claims again (it used to refuse the run as "driven by
/// another process" where no process drove it), and the model reads the steer.
#[tokio::test]
async fn a_steer_between_the_read_and_the_claim_is_folded_not_refused() {
    let run = paused_run().await;
    let loaded = load_for_resume(&run.journal, &run.run_id).await.unwrap();
    request_steer(&run.journal, &run.run_id, "also mention ZEBRA", None)
        .await
        .unwrap();
    let change = ResumeChange {
        max_steps: Some(3),
        ..ResumeChange::default()
    };
    let report = run
        .host
        .resume_loaded(&run.run_id, loaded, change, DriveOptions::default())
        .await
        .unwrap();
    assert!(!matches!(report.end, RunEnd::Released), "{:?}", report.end);
    let steers = report.state.steers();
    assert_eq!(steers.len(), 1, "{steers:?}");
    assert_eq!(report.state.pending_steers().count(), 0, "{steers:?}");
}

/// A resume that changes the sandbox keeps a tool policy the run's configuration set
/// (`[tools.shell] approval = "ask"`), read from the run, not from the resuming process's
/// configuration: a stricter sandbox used to make `shell` run unasked when the process
/// resuming had no such file (another user, a worker, the file edited since).
#[tokio::test]
async fn a_changed_sandbox_keeps_the_runs_configured_policies() {
    use agent_host::run::{Budgets, Host, NewRun, kinds};
    use agent_host::sandbox::{Mode, SandboxCause, SandboxChange, SandboxSpec};
    use agent_host::tools::{ApprovalMode, Policy, ToolConfig};

    let (_server, client) = crate::bench_script::serve().await;
    let journal = agent_journal::Journal::open("memory:").await.unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let configured = ToolConfig {
        policies: [("shell".to_string(), Policy::Ask)].into(),
        ..ToolConfig::default()
    };
    let run = NewRun::new("loop=long; call list_dir", workspace.path())
        .approval(ApprovalMode::Default)
        .sandbox(SandboxSpec::of(Mode::WorkspaceWrite))
        .budgets(Budgets {
            max_steps: 1,
            max_tokens: None,
        });
    let first = Host::new(journal.clone(), client.clone()).with_tools(configured);
    let report = first.start(run, DriveOptions::default()).await.unwrap();
    assert!(
        matches!(report.end, RunEnd::Paused { .. }),
        "{:?}",
        report.end
    );
    let recorded = |state: &agent_host::run::RunState, tool: &str| {
        state.spec().unwrap().tool(tool).unwrap().policy
    };
    assert_eq!(recorded(&report.state, "shell"), Policy::Ask);
    assert_eq!(recorded(&report.state, "write_file"), Policy::Auto);

    let unconfigured = Host::new(journal.clone(), client);
    let change = ResumeChange {
        max_steps: Some(2),
        sandbox: Some(SandboxChange {
            sandbox: SandboxSpec::of(Mode::ReadOnly),
            cause: SandboxCause::Flag,
        }),
        ..ResumeChange::default()
    };
    let report = unconfigured
        .resume(&report.run_id, change, DriveOptions::default())
        .await
        .unwrap();
    assert_eq!(recorded(&report.state, "shell"), Policy::Ask);
    assert_eq!(recorded(&report.state, "write_file"), Policy::Deny);
    let events = journal
        .replay(&kinds::thread_of(&report.run_id), 0)
        .await
        .unwrap();
    let changed = events
        .iter()
        .find(|e| &*e.kind == kinds::RUN_SANDBOX_CHANGED)
        .expect("the change is journaled");
    assert_eq!(
        changed.payload["policies"]["shell"], "ask",
        "{}",
        changed.payload
    );
}

/// A run whose `run.created` this host cannot read (a newer version's sandbox mode) is
/// refused as unreadable, not as no run at all.
#[tokio::test]
async fn a_run_created_by_a_newer_version_is_unreadable_not_unknown() {
    use agent_host::HostError;
    use agent_host::run::{Host, kinds};
    use agent_journal::NewEvent;

    let (_server, client) = crate::bench_script::serve().await;
    let journal = agent_journal::Journal::open("memory:").await.unwrap();
    let created = serde_json::json!({"prompt": "p", "model": "m", "workspace": "/w",
        "tools": [], "approval": "default", "budgets": {"max_steps": 5},
        "sandbox": {"mode": "a-mode-from-the-future"}});
    journal
        .append(NewEvent::new(
            kinds::thread_of("r1"),
            kinds::RUN_CREATED,
            created,
        ))
        .await
        .unwrap();
    let host = Host::new(journal.clone(), client);
    let err = host
        .resume("r1", ResumeChange::default(), DriveOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::Unreadable { .. }), "{err}");
    let err = host
        .resume("r2", ResumeChange::default(), DriveOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::NotFound(_)), "{err}");
}
