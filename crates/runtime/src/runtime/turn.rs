//! Turn lifecycle: start, steer, commit, cancel and finish, and settling a turn's jobs.
//!
//! Every operation here holds the thread's turn lock, so the operations of one thread are
//! journaled in the order they take effect in memory; the ones that change memory after
//! their journal write run in a task of their own ([`Runtime::detached`]) so that a caller
//! giving up cannot separate the two.

use std::sync::Arc;
use std::time::Duration;

use agent_journal::NewEvent;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{JobKey, Runtime, RuntimeTurnStatus, State, TurnState};
use crate::error::RuntimeError;
use crate::events;
use crate::outcome::Outcome;
use crate::settlement::Settlement;

impl Runtime {
    /// Starts a turn on `thread`; refused while another turn is running there.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it. The
    /// turn is then started (or refused) as if the caller had waited, and its id is lost:
    /// [`running_turn`](Self::running_turn) tells it.
    pub async fn start(&self, thread: &str) -> Result<String, RuntimeError> {
        let this = self.clone();
        let thread = thread.to_string();
        self.detached(async move { this.start_here(&thread).await })
            .await
    }

    async fn start_here(&self, thread: &str) -> Result<String, RuntimeError> {
        let _serial = self.inner.serial(thread).await;
        self.inner.state().refuse_an_active_turn(thread)?;
        let id = uuid::Uuid::now_v7().simple().to_string();
        self.inner
            .journal
            .append(NewEvent::new(
                thread,
                events::TURN_STARTED,
                json!({ "turn_id": id }),
            ))
            .await?;
        let cancel = self.inner.root.child_token();
        self.inner.state().turns.insert(
            thread.to_string(),
            TurnState {
                id: id.clone(),
                revision: 0,
                status: RuntimeTurnStatus::Running,
                cancel,
            },
        );
        Ok(id)
    }

    /// Checks that `turn` is the running turn of `thread`; returns its revision. A closed
    /// (or abandoned) runtime drives no turn: its turns are left to the next recovery, which
    /// may already have ended them in another process.
    fn active(&self, st: &State, thread: &str, turn: &str) -> Result<u64, RuntimeError> {
        if st.closed {
            return Err(RuntimeError::Closed);
        }
        match st.turns.get(thread) {
            Some(t) if t.id == turn && t.status == RuntimeTurnStatus::Running => Ok(t.revision),
            _ => Err(RuntimeError::TurnNotActive {
                thread: thread.to_string(),
                turn: turn.to_string(),
            }),
        }
    }

    /// Accepts user input into the running turn: bumps the revision (journaled as
    /// `steer.accepted`) so that results launched before it come back stale.
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it, so
    /// the journal and the in-memory revision never disagree. The new revision is then
    /// lost to the caller: [`turn_status`](Self::turn_status) tells it.
    pub async fn steer(&self, thread: &str, turn: &str, text: &str) -> Result<u64, RuntimeError> {
        let this = self.clone();
        let (thread, turn, text) = (thread.to_string(), turn.to_string(), text.to_string());
        self.detached(async move { this.steer_here(&thread, &turn, &text).await })
            .await
    }

    async fn steer_here(&self, thread: &str, turn: &str, text: &str) -> Result<u64, RuntimeError> {
        let _serial = self.inner.serial(thread).await;
        let revision = {
            let st = self.inner.state();
            self.active(&st, thread, turn)? + 1
        };
        self.inner
            .journal
            .append(NewEvent::new(
                thread,
                events::STEER_ACCEPTED,
                json!({ "turn_id": turn, "revision": revision, "text": text }),
            ))
            .await?;
        let mut st = self.inner.state();
        if let Some(t) = st.turns.get_mut(thread)
            && t.id == turn
        {
            t.revision = revision;
        }
        Ok(revision)
    }

    /// Records a proposal made at `revision`; refused unless it is the current revision.
    /// Records only: it authorises and performs nothing outside the journal.
    ///
    /// # Cancel safety
    ///
    /// Like [`Journal::append`](agent_journal::Journal::append): dropped before its turn of the thread's serialisation, it
    /// records nothing; dropped later, the proposal may be recorded (at the revision that
    /// was current) and its seq is lost. Nothing in memory changes either way. It waits for
    /// its turn in a task of its own, so a future kept without being polled blocks no other
    /// operation of the thread.
    pub async fn commit(
        &self,
        thread: &str,
        turn: &str,
        revision: u64,
        proposal: impl Into<Value>,
    ) -> Result<i64, RuntimeError> {
        let this = self.clone();
        let (thread, turn, proposal) = (thread.to_string(), turn.to_string(), proposal.into());
        // Fired when the caller drops this future.
        let dropped = CancellationToken::new();
        let _caller = dropped.clone().drop_guard();
        self.detached(async move {
            let _serial = this.inner.serial(&thread).await;
            if dropped.is_cancelled() {
                // No one waits for the answer.
                return Err(RuntimeError::Closed);
            }
            this.commit_here(&thread, &turn, revision, proposal).await
        })
        .await
    }

    /// `commit`, holding the thread's turn lock.
    async fn commit_here(
        &self,
        thread: &str,
        turn: &str,
        revision: u64,
        proposal: Value,
    ) -> Result<i64, RuntimeError> {
        {
            let st = self.inner.state();
            let current = self.active(&st, thread, turn)?;
            if revision != current {
                return Err(RuntimeError::StaleRevision {
                    given: revision,
                    current,
                });
            }
        }
        let appended = self
            .inner
            .journal
            .append(NewEvent::new(
                thread,
                events::PROPOSAL_COMMITTED,
                json!({ "turn_id": turn, "revision": revision, "proposal": proposal }),
            ))
            .await?;
        Ok(appended.seq)
    }

    /// Cancels the running turn: its jobs are cancelled and awaited (a tool that ignores
    /// cancellation is dropped after the grace period), then `turn.cancelled` is journaled.
    ///
    /// If that journal write fails, the error is returned and the turn stays
    /// [`Ending`](RuntimeTurnStatus::Ending): no new turn starts on the thread until a
    /// later `cancel` or `finish` of this turn journals its end (one end event, whichever
    /// call wrote it first).
    ///
    /// # Cancel safety
    ///
    /// Runs to completion in a task of its own: dropping the future does not stop it (a
    /// turn left half-ended would refuse every later `start` on its thread).
    pub async fn cancel(&self, thread: &str, turn: &str) -> Result<(), RuntimeError> {
        self.end(
            thread,
            turn,
            events::TURN_CANCELLED,
            RuntimeTurnStatus::Cancelled,
        )
        .await
    }

    /// Ends the running turn normally (`turn.completed`). Jobs still pending are cancelled
    /// first, so no call is left without a terminal event. A failed journal write leaves
    /// the turn `Ending`, as for [`cancel`](Self::cancel).
    ///
    /// # Cancel safety
    ///
    /// As for [`cancel`](Self::cancel): it runs to completion whether or not the future is
    /// dropped.
    pub async fn finish(&self, thread: &str, turn: &str) -> Result<(), RuntimeError> {
        self.end(
            thread,
            turn,
            events::TURN_COMPLETED,
            RuntimeTurnStatus::Completed,
        )
        .await
    }

    async fn end(
        &self,
        thread: &str,
        turn: &str,
        kind: &'static str,
        status: RuntimeTurnStatus,
    ) -> Result<(), RuntimeError> {
        let this = self.clone();
        let (thread, turn) = (thread.to_string(), turn.to_string());
        self.detached(async move { this.end_here(&thread, &turn, kind, status).await })
            .await
    }

    async fn end_here(
        &self,
        thread: &str,
        turn: &str,
        kind: &'static str,
        status: RuntimeTurnStatus,
    ) -> Result<(), RuntimeError> {
        let _serial = self.inner.serial(thread).await;
        let (token, revision) = {
            let mut st = self.inner.state();
            if st.closed {
                return Err(RuntimeError::Closed);
            }
            match st.turns.get_mut(thread) {
                // `Ending` under the thread's turn lock: an earlier end of this turn could
                // not journal its event; this one tries again.
                Some(t)
                    if t.id == turn
                        && matches!(
                            t.status,
                            RuntimeTurnStatus::Running | RuntimeTurnStatus::Ending
                        ) =>
                {
                    t.status = RuntimeTurnStatus::Ending;
                    (t.cancel.clone(), t.revision)
                }
                _ => {
                    return Err(RuntimeError::TurnNotActive {
                        thread: thread.to_string(),
                        turn: turn.to_string(),
                    });
                }
            }
        };
        token.cancel();
        self.settle_jobs(|k| k.thread == thread && k.turn == turn)
            .await;
        let end_key = events::end_key(turn);
        let appended = self
            .inner
            .journal
            .append(
                NewEvent::new(
                    thread,
                    kind,
                    json!({ "turn_id": turn, "revision": revision }),
                )
                .with_dedup_key(end_key.clone()),
            )
            .await?;
        // Only once the journal holds the end: until then the turn stays `Ending`, which
        // refuses a new turn on the thread (whose `turn.started` would follow a turn the
        // journal still shows open) and lets `finish` or `cancel` try again. The dedup key
        // keeps one end event however many tries wrote it, so an end already there (an
        // earlier try's, or `turn.interrupted` from another process's `adopt`) sets the
        // status. A process that stops first leaves the turn to recovery, which marks it
        // interrupted.
        let status = if appended.deduplicated {
            let found = self
                .inner
                .journal
                .find_by_dedup_key(thread, &end_key)
                .await?;
            found
                .and_then(|event| events::end_status(&event.kind))
                .unwrap_or(status)
        } else {
            status
        };
        let mut st = self.inner.state();
        if let Some(t) = st.turns.get_mut(thread)
            && t.id == turn
        {
            t.status = status;
        }
        Ok(())
    }

    /// Waits for every job matching `which` to settle. Tokens must already be fired. A job
    /// whose task does not settle within twice the grace period (a tool blocking its
    /// thread) is aborted and given a `tool.cancelled` terminal event here.
    pub(crate) async fn settle_jobs(&self, which: impl Fn(&JobKey) -> bool) {
        let mut unscheduled = Vec::new();
        let waits: Vec<(Arc<JobKey>, Arc<Settlement>)> = {
            let st = self.inner.state();
            st.jobs
                .iter()
                .filter(|(k, _)| which(k))
                .inspect(|(k, j)| {
                    if let Some(scheduling) = &j.scheduling {
                        unscheduled.push((Arc::clone(k), Arc::clone(scheduling)));
                    }
                })
                .map(|(k, j)| (Arc::clone(k), Arc::clone(&j.done)))
                .collect()
        };
        // A launch future that is not polled any more must not hold this up: its call's
        // scheduling is finished by a task of its own (a launch future still polled then
        // waits for that task's answer).
        for (key, scheduling) in unscheduled {
            scheduling.adopt(&self.inner, key);
        }
        // Twice the grace plus a margin. tokio's sleep turns a duration too long for an
        // `Instant` into "never" instead of overflowing.
        let backstop = tokio::time::sleep(
            self.inner
                .options
                .cancel_grace
                .saturating_mul(2)
                .saturating_add(Duration::from_millis(100)),
        )
        .deadline();
        for (key, done) in waits {
            let settled = tokio::time::timeout_at(backstop, done.wait()).await.is_ok();
            if settled {
                continue;
            }
            // An unsettled call is in memory (it leaves before it settles).
            let abort = {
                let st = self.inner.state();
                st.jobs.get(&key).and_then(|job| job.abortable().cloned())
            };
            let Some(abort) = abort else {
                // Not scheduled yet: its scheduled event is still being written; it settles
                // as soon as it sees the fired token. Forcing it here could put its terminal
                // event before its scheduled one.
                done.wait().await;
                continue;
            };
            abort.abort();
            let revision = self.job_revision(&key).await.unwrap_or(0);
            let outcome = Outcome::cancelled(revision, true);
            let event = outcome.terminal_event(&key.thread, &key.turn, &key.call_id);
            if let Err(err) = self.inner.append(event).await {
                tracing::error!(call_id = %key.call_id, %err, "cannot journal forced cancellation");
            }
            self.inner.forget(&key);
        }
    }

    async fn job_revision(&self, key: &JobKey) -> Option<u64> {
        let event = self
            .inner
            .journal
            .find_by_dedup_key(&key.thread, &events::scheduled_key(&key.turn, &key.call_id))
            .await
            .ok()??;
        event.payload.get("revision")?.as_u64()
    }

    /// The current revision of a turn, or the final one of an ended turn.
    pub(super) async fn turn_revision(
        &self,
        thread: &str,
        turn: &str,
    ) -> Result<u64, RuntimeError> {
        if let Some(t) = self.inner.state().turns.get(thread)
            && t.id == turn
        {
            return Ok(t.revision);
        }
        let end = Box::pin(
            self.inner
                .journal
                .find_by_dedup_key(thread, &events::end_key(turn)),
        )
        .await?;
        end.and_then(|e| e.payload.get("revision").and_then(Value::as_u64))
            .ok_or_else(|| RuntimeError::TurnNotActive {
                thread: thread.to_string(),
                turn: turn.to_string(),
            })
    }
}
