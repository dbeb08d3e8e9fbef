//! The observe-act loop: observe the environment, stop
//! when the goal holds, otherwise let the policy pick an action and apply it, within an
//! action budget.
//!
//! Invariants: success is only reported after the goal check passed on a fresh
//! observation (the environment's final state, not the policy's belief); an action the
//! environment refuses ends the loop with an error; so does running out of budget.

use serde::Serialize;

/// The demo environment of `agentctl demo gui` (behind the `demo` feature).
#[cfg(feature = "demo")]
pub mod filter;

/// Something that can be observed and acted on.
pub trait Environment {
    /// What the policy and the goal check see.
    type Observation: Clone + std::fmt::Debug;
    /// What the policy can do.
    type Action: Clone + std::fmt::Debug;

    /// The current state, read fresh (never the policy's belief).
    fn observe(&self) -> Self::Observation;
    /// Applies `action`; `Err` (with the reason) when it is not valid in the current state.
    fn act(&mut self, action: &Self::Action) -> Result<(), String>;
}

/// Why the loop failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// The policy chose an action the environment refused.
    #[error("action {action} at step {step} is not valid in the current state: {reason}")]
    InvalidAction {
        /// How many actions had been applied before it.
        step: usize,
        /// The refused action.
        action: String,
        /// The environment's explanation.
        reason: String,
    },
    /// The goal did not hold after `budget` actions.
    #[error("task not completed within the action budget of {budget}")]
    BudgetExhausted {
        /// The number of actions allowed.
        budget: usize,
    },
}

/// A successful run: the actions taken and the verified final observation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopReport<O, A> {
    /// The actions applied, in order.
    pub actions: Vec<A>,
    /// The observation in which the goal held.
    pub final_observation: O,
    /// How many actions were applied (`actions.len()`).
    pub steps: usize,
}

/// Runs the loop: at most `budget` actions; `goal` is checked on every observation,
/// including the one after the last action.
pub fn run_loop<E: Environment>(
    env: &mut E,
    mut policy: impl FnMut(&E::Observation) -> E::Action,
    goal: impl Fn(&E::Observation) -> bool,
    budget: usize,
) -> Result<LoopReport<E::Observation, E::Action>, ObserveError> {
    let mut actions = Vec::new();
    for step in 0..=budget {
        let observation = env.observe();
        if goal(&observation) {
            return Ok(LoopReport {
                actions,
                final_observation: observation,
                steps: step,
            });
        }
        if step == budget {
            break;
        }
        let action = policy(&observation);
        env.act(&action)
            .map_err(|reason| ObserveError::InvalidAction {
                step,
                action: format!("{action:?}"),
                reason,
            })?;
        actions.push(action);
    }
    Err(ObserveError::BudgetExhausted { budget })
}
