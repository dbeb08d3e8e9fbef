//! Where a thread stands for the runtime at a point where none of its calls is unfinished:
//! all that adopting the thread later needs of the events before that point. A caller that
//! checkpoints its own fold (a host at each compaction) stores one beside it and adopts
//! from there ([`Runtime::adopt_after`]) instead of folding the thread from its first event.

use serde::{Deserialize, Serialize};

use crate::runtime::{Runtime, RuntimeTurnStatus};

/// The runtime's fold of a thread with no unfinished call: its latest turn.
///
/// Invariant: taken only while no call of the thread is running here and every call it
/// scheduled has its terminal event, so the calls before it never need settling again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCheckpoint {
    /// The thread's latest turn, if it has had one.
    pub turn: Option<CheckpointTurn>,
}

/// A thread's latest turn in a [`ThreadCheckpoint`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointTurn {
    /// The turn id.
    pub id: String,
    /// Its steering revision.
    pub revision: u64,
    /// How it ended, or `None` while it was open (adoption then interrupts it).
    pub ended: Option<RuntimeTurnStatus>,
}

impl Runtime {
    /// The checkpoint of `thread` as this runtime holds it now, or `None` while one of the
    /// thread's calls runs here (the caller must also know that every call the thread
    /// scheduled has its terminal event in the journal; a host does at a step boundary).
    pub fn checkpoint(&self, thread: &str) -> Option<ThreadCheckpoint> {
        let st = self.inner.state();
        if st.jobs.keys().any(|k| k.thread == thread) {
            return None;
        }
        let turn = st.turns.get(thread).map(|t| CheckpointTurn {
            id: t.id.clone(),
            revision: t.revision,
            ended: match t.status {
                RuntimeTurnStatus::Running | RuntimeTurnStatus::Ending => None,
                ended => Some(ended),
            },
        });
        Some(ThreadCheckpoint { turn })
    }
}
