//! Events of a run that spawned sub-agents (`spawn_agents`): a child was created, a child
//! ended. Written to the parent's thread by the tool, each once (their dedup keys), so a
//! resumed parent that runs the call again neither repeats nor loses them.

use serde::{Deserialize, Serialize};

use super::HostEvent;
use crate::run::kinds as k;
use crate::run::spec::TokenUsage;

/// `subagent.spawned`: the `index`-th child of the parent's call `call_id` is run
/// `child_run_id` (appended before the child's `run.created`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentSpawned {
    /// The parent's `spawn_agents` call.
    pub call_id: String,
    /// The child's place in the call's `agents`.
    pub index: u32,
    /// The child run.
    pub child_run_id: String,
    /// The child's prompt.
    #[serde(default)]
    pub prompt: String,
}

impl HostEvent for SubagentSpawned {
    const KIND: &'static str = k::SUBAGENT_SPAWNED;
    fn dedup_key(&self) -> Option<String> {
        Some(k::subagent_key(&self.call_id, self.index))
    }
}

/// How a child ended, as its parent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildEnd {
    /// It answered.
    Completed,
    /// It failed (`run.failed`), or could not be created or driven.
    Failed,
    /// It paused (a budget, a model error) and gave no answer.
    Paused,
    /// It was interrupted.
    Interrupted,
}

impl ChildEnd {
    /// The word recorded and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ChildEnd::Completed => "completed",
            ChildEnd::Failed => "failed",
            ChildEnd::Paused => "paused",
            ChildEnd::Interrupted => "interrupted",
        }
    }
}

/// `subagent.ended`: a child's answer or failure as the parent got it, and the tokens it
/// has used so far (counted in the parent's usage, so against the parent's `--max-tokens`).
///
/// Once per state of the child: a child that paused or was interrupted and is driven again
/// later ends again (its dedup key names the child's last seq), and the parent's fold counts
/// only the tokens it used since its previous end. A child's last end (it completed, or its
/// run failed) is recorded once whatever its seq ([`is_last`](Self::is_last)): a resumed
/// parent that reads a finished child again, which may have journaled more since (its turn's
/// end), records nothing new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentEnded {
    /// The parent's `spawn_agents` call.
    pub call_id: String,
    /// The child's place in the call's `agents`.
    pub index: u32,
    /// The child run.
    pub child_run_id: String,
    /// How it ended.
    pub status: ChildEnd,
    /// Its final answer, when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why it gave no answer, otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tokens it has used in all (its own children's included).
    #[serde(default)]
    pub usage: TokenUsage,
    /// The child's last seq when it ended this way.
    #[serde(default)]
    pub child_seq: i64,
    /// For a child that ended `interrupted`: whether the interrupt was its parent's
    /// (`true`: the parent's resume continues it) or its own (`false`: a resumed parent
    /// reuses this end, as it reuses a finished child's). Absent otherwise, and in
    /// journals written before it was recorded (then the child is continued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_parent: Option<bool>,
}

impl SubagentEnded {
    /// Whether this is the child's last end: it completed, or its run failed (read from the
    /// child, so at a seq; a child that could not be created or read, at seq 0, may still
    /// end otherwise on a later drive).
    pub fn is_last(&self) -> bool {
        match self.status {
            ChildEnd::Completed => true,
            ChildEnd::Failed => self.child_seq > 0,
            ChildEnd::Paused | ChildEnd::Interrupted => false,
        }
    }
}

impl HostEvent for SubagentEnded {
    const KIND: &'static str = k::SUBAGENT_ENDED;
    fn dedup_key(&self) -> Option<String> {
        Some(if self.is_last() {
            k::subagent_last_end_key(&self.child_run_id)
        } else {
            k::subagent_end_key(&self.child_run_id, self.child_seq)
        })
    }
}
