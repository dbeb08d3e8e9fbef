//! A runtime turn whose revision follows WebSocket steering.
//!
//! Invariants:
//! - The parent response is created under the turn's revision at [`RevisionBridge::start`];
//!   each accepted steer bumps the revision once ([`RevisionBridge::steer_accepted`]).
//! - [`RevisionBridge::commit`] proves the runtime refuses a proposal built on the
//!   superseded parent before it commits the successor's answer at the current revision;
//!   if the runtime accepted the stale proposal, that is an error and nothing more is
//!   committed.

use agent_journal::Journal;
use agent_runtime::{Runtime, RuntimeError, RuntimeOptions};
use serde_json::json;

/// Why the runtime side of a steered turn failed.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The runtime refused or failed an operation.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The runtime committed a proposal from the superseded response: revisions are broken.
    #[error("the runtime accepted a proposal from the superseded response {parent}")]
    StaleProposalAccepted {
        /// The superseded (parent) response.
        parent: String,
    },
}

/// A durable runtime turn tied to one steered response (see the module docs).
#[derive(Debug)]
pub struct RevisionBridge {
    journal: Journal,
    runtime: Runtime,
    thread: String,
    turn: String,
    /// The revision the parent response was created under.
    parent_revision: u64,
    revision: u64,
}

impl RevisionBridge {
    /// Recovers a runtime over `journal` and starts a turn on `thread`. The bridge owns
    /// both; [`close`](Self::close) closes them.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped future may leave a started turn, which the next recovery
    /// of the journal marks interrupted.
    pub async fn start(journal: Journal, thread: impl Into<String>) -> Result<Self, BridgeError> {
        let thread = thread.into();
        let runtime = Runtime::recover(journal.clone(), RuntimeOptions::default()).await?;
        let turn = match runtime.start(&thread).await {
            Ok(turn) => turn,
            Err(err) => {
                runtime.close().await;
                return Err(err.into());
            }
        };
        let revision = runtime
            .turn_status(&thread)
            .map_or(0, |(_, revision, _)| revision);
        Ok(Self {
            journal,
            runtime,
            thread,
            turn,
            parent_revision: revision,
            revision,
        })
    }

    /// The runtime thread of the turn.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// The turn's current revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// An accepted steer is a revision bump for the turn; returns the new revision.
    ///
    /// # Cancel safety
    /// As [`Runtime::steer`]: if dropped, the bump may or may not be journaled, and this
    /// bridge's view of the revision is not updated.
    pub async fn steer_accepted(&mut self, text: &str) -> Result<u64, BridgeError> {
        self.revision = self.runtime.steer(&self.thread, &self.turn, text).await?;
        Ok(self.revision)
    }

    /// At the successor's completion: the parent's proposal must be refused, then the
    /// successor's answer is committed at the current revision and the turn finished.
    /// Returns the runtime's refusal of the stale proposal.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped future may leave the answer committed but the turn not
    /// finished (recovery marks it interrupted).
    pub async fn commit(
        &self,
        parent: &str,
        successor: &str,
        text: &str,
    ) -> Result<RuntimeError, BridgeError> {
        let stale = self
            .runtime
            .commit(
                &self.thread,
                &self.turn,
                self.parent_revision,
                json!({"response_id": parent}),
            )
            .await;
        let refusal = match stale {
            Err(err) => err,
            Ok(_) => {
                return Err(BridgeError::StaleProposalAccepted {
                    parent: parent.to_owned(),
                });
            }
        };
        self.runtime
            .commit(
                &self.thread,
                &self.turn,
                self.revision,
                json!({"response_id": successor, "text": text}),
            )
            .await?;
        self.runtime.finish(&self.thread, &self.turn).await?;
        Ok(refusal)
    }

    /// Closes the runtime, then the journal.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped future leaves the rest of the shutdown undone (the
    /// journal's acknowledged events stay durable either way).
    pub async fn close(self) {
        self.runtime.close().await;
        self.journal.close().await;
    }
}
