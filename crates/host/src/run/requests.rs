//! Requests to a run from any process: decisions, steers, interrupts. They are plain
//! journal appends (with dedup keys where "the first one wins"); the driving host folds
//! them in at its next step boundary, or the next `resume` does.

use agent_journal::{Journal, LeaseStatus};
use serde::Deserialize as _;

use super::events::{
    ApprovalDecided, DecisionScope, HostEvent as _, InterruptRequested, RunInterrupted,
    RunRequeued, SteerDropped, SteerRequested,
};
use super::kinds;
use super::query::load;
use super::state::{self, Decision, RunState, RunStatus};
use crate::error::HostError;

/// A decision from any process on a pending approval.
#[derive(Debug, Clone)]
pub struct DecisionRequest {
    /// The call waiting for approval.
    pub call_id: String,
    /// The decision.
    pub decision: Decision,
    /// When given, must be the pending call's args hash.
    pub args_sha256: Option<String>,
    /// When given, the approval round decided (as shown with the request): a decision
    /// meant for a round that was decided meanwhile is that round's
    /// [`HostError::AlreadyDecided`], never a decision of the call's next round (a crash
    /// asks again with the same arguments, and only the round tells the two apart).
    pub round: Option<u32>,
}

/// Records a decision on the pending approval of `call_id`. The first decision of a round
/// wins; a second one is [`HostError::AlreadyDecided`].
///
/// # Cancel safety
/// One append, keyed by the call and approval round: dropped before the journal took it,
/// nothing is decided; after, the decision may be recorded without the caller learning it,
/// and deciding again answers [`HostError::AlreadyDecided`] with the recorded decision.
pub async fn decide(
    journal: &Journal,
    run_id: &str,
    request: DecisionRequest,
) -> Result<(), HostError> {
    let state = load(journal, run_id).await?;
    let call = state
        .call(&request.call_id)
        .ok_or_else(|| HostError::NoSuchCall {
            run: run_id.to_string(),
            call_id: request.call_id.clone(),
            pending: state
                .pending_approvals()
                .map(|call| call.call_id.clone())
                .collect(),
        })?;
    if let Some(round) = request.round
        && call.pending_approval().is_none_or(|p| p.round != round)
    {
        return Err(
            match call
                .approvals
                .iter()
                .find(|a| a.round == round)
                .and_then(|a| a.decision.as_ref())
            {
                Some(d) => already(&request.call_id, d),
                None => HostError::NoPendingApproval(format!(
                    "call {} of run {run_id} has no approval round {round} waiting",
                    request.call_id
                )),
            },
        );
    }
    let Some(pending) = call.pending_approval() else {
        return Err(
            match call.approvals.last().and_then(|a| a.decision.as_ref()) {
                Some(d) => already(&request.call_id, d),
                None => HostError::NoPendingApproval(format!(
                    "call {} of run {run_id} is not waiting for approval",
                    request.call_id
                )),
            },
        );
    };
    if !matches!(
        call.progress,
        state::CallProgress::New | state::CallProgress::Interrupted { .. }
    ) {
        return Err(HostError::NoPendingApproval(format!(
            "call {} of run {run_id} has already run or is running; there is nothing to decide",
            request.call_id
        )));
    }
    // Hex is compared as a number is: `AB` and `ab` name the same hash.
    if let Some(given) = &request.args_sha256
        && !given.eq_ignore_ascii_case(&pending.args_sha256)
    {
        return Err(HostError::ArgsMismatch {
            call_id: request.call_id.clone(),
            pending: pending.args_sha256.clone(),
            given: given.clone(),
        });
    }
    let thread = kinds::thread_of(run_id);
    let decided = ApprovalDecided::new(
        &request.call_id,
        pending.round,
        &pending.args_sha256,
        request.decision,
    );
    let key = decided.dedup_key();
    let appended = journal
        .append(decided.to_event(&thread).map_err(HostError::Encode)?)
        .await?;
    if appended.deduplicated
        && let Some(key) = key
    {
        let first = journal.find_by_dedup_key(&thread, &key).await?;
        let decision = first
            .and_then(|e| ApprovalDecided::deserialize(&e.payload).ok())
            .map_or(decided.decision, |first| first.decision);
        return Err(already(&request.call_id, &decision));
    }
    Ok(())
}

fn already(call_id: &str, d: &Decision) -> HostError {
    HostError::AlreadyDecided {
        call_id: call_id.to_string(),
        decision: if d.approve { "approved" } else { "denied" },
        by: d.by.clone().unwrap_or_else(|| "someone".into()),
        reason: d.reason.clone(),
        always: d.scope == Some(DecisionScope::Run),
    }
}

/// Requests a steer: user input the driving host gives the model at its next step
/// boundary (or the next `resume` does, when no host runs). `id` makes a retried request one
/// steer. A run that has ended gets `steer.dropped` at once. Returns the steer's id.
///
/// # Cancel safety
/// Dropped after `steer.requested` was taken but before the ended-run check, a steer on a
/// run that had ended stays pending without its `steer.dropped`; requesting again with the
/// same `id` writes no second steer and completes the check.
pub async fn request_steer(
    journal: &Journal,
    run_id: &str,
    text: &str,
    id: Option<String>,
) -> Result<String, HostError> {
    steer(journal, run_id, text, id, OnEnded::Drop).await
}

/// [`request_steer`], except that a run already ended when it is asked is refused
/// ([`HostError::SteerAfterEnd`]) instead of taking a steer only to drop it; one that ends
/// as the steer is taken still gets `steer.dropped`.
pub async fn request_live_steer(
    journal: &Journal,
    run_id: &str,
    text: &str,
    id: Option<String>,
) -> Result<String, HostError> {
    steer(journal, run_id, text, id, OnEnded::Refuse).await
}

/// What a steer request does about a run that has already ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnEnded {
    /// Take it and drop it at once (`steer.dropped`), as the CLI does.
    Drop,
    /// Refuse it: nothing is written.
    Refuse,
}

/// The longest steer id a caller may give, in characters.
pub const MAX_STEER_ID_CHARS: usize = 128;

/// Whether `id` can name a steer: 1 to [`MAX_STEER_ID_CHARS`] characters, none of them a
/// control character (an id is shown in the CLI and the console, and is part of the steer's
/// dedup key).
pub fn steer_id_is_valid(id: &str) -> bool {
    !id.is_empty() && id.chars().count() <= MAX_STEER_ID_CHARS && !id.chars().any(char::is_control)
}

async fn steer(
    journal: &Journal,
    run_id: &str,
    text: &str,
    id: Option<String>,
    on_ended: OnEnded,
) -> Result<String, HostError> {
    if text.trim().is_empty() {
        return Err(HostError::EmptySteer);
    }
    if id.as_deref().is_some_and(|id| !steer_id_is_valid(id)) {
        return Err(HostError::InvalidSteerId);
    }
    let status = load(journal, run_id).await?.status();
    if on_ended == OnEnded::Refuse && status.is_final() {
        return Err(HostError::SteerAfterEnd {
            run: run_id.to_string(),
            status,
        });
    }
    let id = id.unwrap_or_else(|| format!("steer_{}", uuid::Uuid::now_v7().simple()));
    let thread = kinds::thread_of(run_id);
    let requested = SteerRequested {
        id: id.clone(),
        text: text.to_string(),
    };
    let appended = journal
        .append(requested.to_event(&thread).map_err(HostError::Encode)?)
        .await?;
    // The id was taken: the same request again is idempotent, other text is refused (it
    // would be dropped unsaid).
    if appended.deduplicated {
        let state = load(journal, run_id).await?;
        if state.steers.iter().any(|s| s.id == id && s.text != text) {
            return Err(HostError::SteerIdTaken {
                run: run_id.to_string(),
                id,
            });
        }
    }
    // Appended after the run ended (or as it ended): nobody will apply it.
    let state = load(journal, run_id).await?;
    if let Some(status) = state.status.filter(|s| s.is_final())
        && state
            .steers
            .iter()
            .any(|s| s.id == id && s.status == state::SteerStatus::Pending)
    {
        let dropped = SteerDropped {
            id: id.clone(),
            reason: format!("the run had already {status}"),
        };
        journal
            .append(dropped.to_event(&thread).map_err(HostError::Encode)?)
            .await?;
    }
    Ok(id)
}

/// How a steer ended: `Ok(step)` applied before that step, `Err(reason)` dropped. Waits
/// for the outcome when `wait`; `None` when it is still pending and `wait` is false.
///
/// # Cancel safety
/// Read-only: a dropped future leaves nothing behind.
pub async fn steer_outcome(
    journal: &Journal,
    run_id: &str,
    id: &str,
    wait: bool,
) -> Result<Option<Result<u64, String>>, HostError> {
    use futures::StreamExt as _;
    let thread = kinds::thread_of(run_id);
    let mut state = RunState::new(run_id);
    let outcome = |state: &RunState| {
        state
            .steers
            .iter()
            .find(|s| s.id == id)
            .and_then(|steer| match &steer.status {
                state::SteerStatus::Applied { step } => Some(Ok(*step)),
                state::SteerStatus::Dropped { reason } => Some(Err(reason.clone())),
                state::SteerStatus::Pending => None,
            })
    };
    if !wait {
        // What is committed now, read once: a tail would wait for seqs it cannot read (a
        // damaged file) before it could say "still pending".
        for event in journal.replay(&thread, 0).await? {
            state.apply(&event);
        }
        return Ok(outcome(&state));
    }
    // Followed, not tailed: a read that fails for a while (a connection cut) is retried,
    // since the steer's end is still to come; only what a retry cannot fix is an error.
    let mut events = std::pin::pin!(crate::follow::follow_thread(journal, &thread, 0));
    loop {
        if let Some(found) = outcome(&state) {
            return Ok(Some(found));
        }
        match events.next().await {
            Some(event) => state.apply(&event?),
            None => return Ok(None),
        }
    }
}

/// Asks the driving host (wherever it runs) to interrupt the run, and the hosts driving
/// its sub-agents (and theirs) to interrupt them.
///
/// # Cancel safety
/// One append: dropped before the journal took it, nothing is requested; after, the
/// interrupt may be recorded (and acted on) without the caller learning its seq.
pub async fn request_interrupt(
    journal: &Journal,
    run_id: &str,
    by: &str,
) -> Result<i64, HostError> {
    let state = load(journal, run_id).await?;
    let shown = state.status();
    // A run waiting for a decision may still have a host waiting with it.
    if !is_driven(&state) {
        match withdraw_queued(journal, &state).await? {
            Withdrawn::Stopped(seq) => return Ok(seq),
            // A worker holds it (alive, or dead with its lease not yet expired): the request
            // waits in the journal for whoever drives it next, a worker taking it over too.
            Withdrawn::Held => {}
            Withdrawn::NotQueued => {
                return Err(HostError::NotDriven {
                    run: run_id.to_string(),
                    status: shown,
                });
            }
        }
    }
    let requested = InterruptRequested { by: by.to_string() };
    let appended = journal
        .append(
            requested
                .to_event(&kinds::thread_of(run_id))
                .map_err(HostError::Encode)?,
        )
        .await?;
    // The children that are driven now (one driven in this run's process is also stopped
    // by its parent's cancellation; one a worker drives only by its own request), and
    // those still in the workers' queue, withdrawn from it as the run itself would be (or
    // asked, when a worker claimed one meanwhile). Their own children are walked too.
    let mut tree: Vec<String> = state.children.iter().map(|c| c.run_id.clone()).collect();
    let mut seen = std::collections::HashSet::new();
    while let Some(child) = tree.pop() {
        if !seen.insert(child.clone()) {
            continue;
        }
        let state = match load(journal, &child).await {
            Ok(state) => state,
            Err(HostError::NotFound(_)) => continue,
            Err(err) => return Err(err),
        };
        tree.extend(state.children.iter().map(|c| c.run_id.clone()));
        if !is_driven(&state) {
            match withdraw_queued(journal, &state).await? {
                // Taken out of the queue (`run.interrupted`), or not in it: nothing runs.
                Withdrawn::Stopped(_) | Withdrawn::NotQueued => continue,
                // A worker holds it: the request waits for that worker, as for the run.
                Withdrawn::Held => {}
            }
        }
        journal
            .append(
                requested
                    .to_event(&kinds::thread_of(&child))
                    .map_err(HostError::Encode)?,
            )
            .await?;
    }
    Ok(appended.seq)
}

/// A submitted run that no worker holds (queued, or its worker's lease expired) is
/// withdrawn from the workers' queue: its lease is claimed and closed, and `run.interrupted`
/// is journaled on top of the run as read (a worker that claimed it in between wins:
/// [`Withdrawn::Held`]). `resume` or a requeue takes it up again.
async fn withdraw_queued(journal: &Journal, state: &RunState) -> Result<Withdrawn, HostError> {
    let thread = kinds::thread_of(&state.id);
    let holder = format!("interrupt {}", super::owner::Owner::current());
    let lease = match super::table::take_queued(journal, &state.id, &holder).await? {
        super::table::Queued::Taken(_, lease) => lease,
        super::table::Queued::Held(_) => return Ok(Withdrawn::Held),
        super::table::Queued::No => return Ok(Withdrawn::NotQueued),
    };
    let stopped = RunInterrupted {
        cancelled: Vec::new(),
    }
    .to_event(&thread)
    .map_err(HostError::Encode)?;
    let appended = journal
        .append_expecting(&thread, Some(state.last_seq), vec![stopped])
        .await;
    let now = load(journal, &state.id).await?;
    let info = super::table::summary(&now);
    let status = match appended {
        Ok(_) => LeaseStatus::Closed,
        // It moved (a worker's claim, a decision): offered to the workers again.
        Err(_) => LeaseStatus::Open,
    };
    journal.release_lease(&lease, status, &info).await?;
    Ok(match appended.ok().and_then(|a| a.first().map(|a| a.seq)) {
        Some(seq) => Withdrawn::Stopped(seq),
        // Claimed meanwhile: its new holder reads the request.
        None => Withdrawn::Held,
    })
}

/// What [`withdraw_queued`] did.
enum Withdrawn {
    /// The run was in the queue and is now interrupted (the event's seq).
    Stopped(i64),
    /// A worker holds it, or claimed it meanwhile.
    Held,
    /// It is not in the workers' queue.
    NotQueued,
}

/// Whether a host drives the run now (or waits with it for a decision).
fn is_driven(state: &super::state::RunState) -> bool {
    let shown = state.status();
    shown == RunStatus::Running
        || (shown == RunStatus::Waiting
            && state
                .driver
                .as_ref()
                .is_some_and(super::owner::Owner::is_alive))
}

/// What [`requeue`] asks: budgets (raised or set) and who asks.
#[derive(Debug, Clone, Default)]
pub struct Requeue {
    /// New step budget, if any.
    pub max_steps: Option<u64>,
    /// New token budget, if any.
    pub max_tokens: Option<u64>,
    /// Who asks (`user@host`).
    pub by: String,
}

/// Offers a paused or interrupted run to workers again, with new budgets: `run.requeued`
/// (on top of the run as read: a run that moved meanwhile is refused, not requeued twice),
/// then its lease opens. The claiming worker drives it with those budgets.
///
/// # Cancel safety
/// Dropped after the append but before the lease opens, the run reads `queued` and the next
/// runs-table refresh offers it (as after a crash between `run.created` and the offer).
pub async fn requeue(journal: &Journal, run_id: &str, change: Requeue) -> Result<(), HostError> {
    let state = load(journal, run_id).await?;
    let status = state.status.unwrap_or(RunStatus::Queued);
    if status.is_final() {
        return Err(HostError::Ended {
            run: run_id.into(),
            status,
        });
    }
    if !matches!(status, RunStatus::Paused | RunStatus::Interrupted) {
        return Err(HostError::NotPaused {
            run: run_id.into(),
            status: state.status(),
        });
    }
    let spec = state
        .spec
        .as_ref()
        .ok_or_else(|| HostError::NotFound(run_id.into()))?;
    let mut budgets = state.budgets().unwrap_or(spec.budgets);
    if let Some(n) = change.max_steps {
        super::check_budget(run_id, "steps", state.step_count(), n)?;
        budgets.max_steps = n;
    }
    if let Some(n) = change.max_tokens {
        super::check_budget(run_id, "tokens", state.usage.total_tokens, n)?;
        budgets.max_tokens = Some(n);
    }
    super::check_budget_room(run_id, &state, budgets)?;
    let thread = kinds::thread_of(run_id);
    let requeued = RunRequeued {
        budgets,
        by: change.by,
    };
    let event = requeued.to_event(&thread).map_err(HostError::Encode)?;
    match journal
        .append_expecting(&thread, Some(state.last_seq), vec![event])
        .await
    {
        Ok(_) => {}
        Err(agent_journal::JournalError::Conflict { .. }) => {
            return Err(HostError::NotPaused {
                run: run_id.into(),
                status: load(journal, run_id).await?.status(),
            });
        }
        Err(err) => return Err(err.into()),
    }
    let now = load(journal, run_id).await?;
    journal
        .put_lease(
            &thread,
            Some(agent_journal::LeaseStatus::Open),
            &super::table::summary(&now),
        )
        .await?;
    Ok(())
}
