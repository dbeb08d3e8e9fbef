//! The observe-act loop: observe the environment, stop
//! when the goal holds, otherwise let the policy pick an action and apply it, within an
//! action budget.
//!
//! Invariants: success is only reported after the goal check passed on a fresh
//! observation (the environment's final state, not the policy's belief); an action the
//! environment refuses ends the loop with an error; so does running out of budget.

use serde::Serialize;

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
pub enum LoopError {
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
) -> Result<LoopReport<E::Observation, E::Action>, LoopError> {
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
            .map_err(|reason| LoopError::InvalidAction {
                step,
                action: format!("{action:?}"),
                reason,
            })?;
        actions.push(action);
    }
    Err(LoopError::BudgetExhausted { budget })
}

/// The demo's fake app: a filter panel and a search query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FilterApp {
    /// Whether the filter panel is open (typing needs it open).
    pub filters_open: bool,
    /// The search query typed so far.
    pub query: String,
}

/// The demo's two actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterAction {
    /// Opens the filter panel.
    OpenFilters,
    /// Types "penguin" into the query (only with the panel open).
    TypePenguin,
}

impl Environment for FilterApp {
    type Observation = FilterApp;
    type Action = FilterAction;

    fn observe(&self) -> FilterApp {
        self.clone()
    }

    fn act(&mut self, action: &FilterAction) -> Result<(), String> {
        match action {
            FilterAction::OpenFilters => {
                self.filters_open = true;
                Ok(())
            }
            FilterAction::TypePenguin if self.filters_open => {
                self.query = "penguin".into();
                Ok(())
            }
            FilterAction::TypePenguin => Err("action not valid in current state".into()),
        }
    }
}

/// The demo's goal: filters open and the query is "penguin".
pub fn filter_goal(o: &FilterApp) -> bool {
    o.filters_open && o.query == "penguin"
}

/// The demo's policy: open the filters, then type.
pub fn filter_policy(o: &FilterApp) -> FilterAction {
    if o.filters_open {
        FilterAction::TypePenguin
    } else {
        FilterAction::OpenFilters
    }
}

/// The demo's action budget: enough for its two actions, with room to spare.
pub const DEMO_BUDGET: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_story_succeeds_and_is_verified() {
        let mut app = FilterApp::default();
        let report = run_loop(&mut app, filter_policy, filter_goal, DEMO_BUDGET).unwrap();
        assert_eq!(
            report.actions,
            [FilterAction::OpenFilters, FilterAction::TypePenguin]
        );
        assert!(filter_goal(&report.final_observation));
        assert_eq!(
            app.observe(),
            FilterApp {
                filters_open: true,
                query: "penguin".into()
            }
        );
    }

    #[test]
    fn invalid_action_is_an_error() {
        let mut app = FilterApp::default();
        let err = run_loop(&mut app, |_| FilterAction::TypePenguin, filter_goal, 5).unwrap_err();
        assert!(
            matches!(err, LoopError::InvalidAction { step: 0, .. }),
            "{err}"
        );
    }

    #[test]
    fn running_out_of_budget_is_an_error() {
        let mut app = FilterApp::default();
        let err = run_loop(&mut app, filter_policy, filter_goal, 1).unwrap_err();
        assert_eq!(err, LoopError::BudgetExhausted { budget: 1 });
        // Two actions are exactly enough: the goal is checked after the last one.
        let mut app = FilterApp::default();
        assert!(run_loop(&mut app, filter_policy, filter_goal, 2).is_ok());
    }

    #[test]
    fn already_done_needs_no_action() {
        let mut app = FilterApp {
            filters_open: true,
            query: "penguin".into(),
        };
        let report = run_loop(&mut app, filter_policy, filter_goal, 0).unwrap();
        assert!(report.actions.is_empty());
    }
}
